//! The pool's C ABI (`pinwise_pool_*` in `include/pinwise.h`) from a C program, against a
//! service running in this test process, on the CPU stand-in for libcuda (a TEST FIXTURE).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pinwise_pool::{Service, ServiceConfig};
use pinwise_testkit::{compile_c_source, StandinLibs};

const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda_driver_min.h"
#include "pinwise.h"

CUresult cuMemsetD8_v2(CUdeviceptr, unsigned char, size_t);

#define FAIL(...) do { printf(__VA_ARGS__); printf("\n"); return 1; } while (0)

static int check_round_trip(PinwisePool *pool, PinwisePoolBuffer *b, CUdeviceptr d, size_t n, int seed) {
  unsigned char *host = pinwise_pool_buffer_data(b);
  for (size_t i = 0; i < n; i++) host[i] = (unsigned char)(i * 7 + seed);
  /* buffer[0..n) -> device at d + 100 */
  if (pinwise_pool_copy(pool, b, 0, d + 100, n, PINWISE_HTOD) != 0)
    FAIL("htod: %s", pinwise_pool_last_error());
  unsigned char *back = malloc(n);
  if (cuMemcpyDtoH(back, d + 100, n) != 0) FAIL("cuMemcpyDtoH");
  for (size_t i = 0; i < n; i++)
    if (back[i] != (unsigned char)(i * 7 + seed)) FAIL("byte %zu differs after htod", i);
  /* device -> buffer at offset 7 */
  if (cuMemsetD8_v2(d, 0x5a, n) != 0) FAIL("cuMemsetD8");
  memset(host, 0, pinwise_pool_buffer_size(b));
  if (pinwise_pool_copy(pool, b, 7, d, n, PINWISE_DTOH) != 0)
    FAIL("dtoh: %s", pinwise_pool_last_error());
  for (size_t i = 0; i < pinwise_pool_buffer_size(b); i++) {
    unsigned char want = (i >= 7 && i < 7 + n) ? 0x5a : 0;
    if (host[i] != want) FAIL("buffer byte %zu is %d after dtoh", i, host[i]);
  }
  free(back);
  return 0;
}

int main(int argc, char **argv) {
  if (pinwise_pool_connect("/nonexistent/pool.sock", 0) != NULL) FAIL("connected to nothing");
  if (!strstr(pinwise_pool_last_error(), "no pinwise pool")) FAIL("error: %s", pinwise_pool_last_error());
  PinwisePool *pool = pinwise_pool_connect(argv[1], 0);
  if (!pool) FAIL("connect: %s", pinwise_pool_last_error());
  CUcontext ctx;
  if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) || cuCtxSetCurrent(ctx)) FAIL("cuda");
  size_t n = (1 << 20) + 3;
  PinwisePoolBuffer *b = pinwise_pool_alloc(pool, n, NULL);
  if (!b || pinwise_pool_buffer_size(b) < n) FAIL("alloc: %s", pinwise_pool_last_error());
  CUdeviceptr d, d2;
  if (cuMemAlloc(&d, n + 100)) FAIL("cuMemAlloc");
  if (check_round_trip(pool, b, d, n, 1)) return 1;
  /* Free it and allocate again (same address on the stand-in): the pool must copy into
     the new allocation, not the one it opened before. */
  if (cuMemFree(d) || cuMemAlloc(&d2, n + 100)) FAIL("realloc");
  printf("same address: %s\n", d2 == d ? "yes" : "no");
  if (check_round_trip(pool, b, d2, n, 2)) return 1;
  if (pinwise_pool_copy(pool, b, 0, d2, 16, 9) != -1) FAIL("a bad direction was accepted");
  if (!strstr(pinwise_pool_last_error(), "direction 9")) FAIL("error: %s", pinwise_pool_last_error());
  if (pinwise_pool_copy(pool, b, pinwise_pool_buffer_size(b) - 8, d2, 16, PINWISE_HTOD) != -1)
    FAIL("an out-of-range copy was accepted");
  PinwisePoolBuffer *s1 = pinwise_pool_alloc(pool, 4096, "c-shared");
  PinwisePoolBuffer *s2 = pinwise_pool_alloc(pool, 4096, "c-shared");
  if (!s1 || !s2) FAIL("shared: %s", pinwise_pool_last_error());
  ((char *)pinwise_pool_buffer_data(s1))[10] = 42;
  if (((char *)pinwise_pool_buffer_data(s2))[10] != 42) FAIL("a named buffer is not shared");
  pinwise_pool_free(s1);
  pinwise_pool_free(s2);
  pinwise_pool_free(b);
  pinwise_pool_disconnect(pool);
  printf("OK\n");
  return 0;
}
"#;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

#[test]
fn a_c_program_copies_through_the_pool_byte_exact() {
    if !pinwise_testkit::require_locked_memory(
        "a_c_program_copies_through_the_pool_byte_exact",
        16 << 20,
    ) {
        return;
    }
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("pool.sock");
    let driver = pinwise_cuda::Driver::load_from(&libs.libcuda()).unwrap();
    driver.init().unwrap();
    let ctx = Arc::new(driver)
        .device(0)
        .unwrap()
        .primary_context()
        .unwrap();
    let service = Service::bind(
        ServiceConfig {
            socket: socket.clone(),
            capacity: 64 << 20,
            client_budget: 32 << 20,
            allow_uids: vec![],
            huge_pages: false,
            copy_limit: pinwise_pool::DEFAULT_COPY_LIMIT,
        },
        ctx,
    )
    .unwrap();
    std::thread::spawn(move || service.run());

    let exe = dir.path().join("pool_c");
    let lib_dir = build_dir();
    let mut args = vec![
        format!("-I{}", repo().join("include").display()),
        format!("-L{}", lib_dir.display()),
        "-lpinwise".to_string(),
        format!("-Wl,-rpath,{}", lib_dir.display()),
    ];
    args.extend(libs.cuda_link_args());
    compile_c_source(PROGRAM, &exe, &args);
    let out = libs.command(&exe).arg(&socket).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("OK"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("same address: yes"),
        "the reallocation test needs the same address: {stdout}"
    );
}
