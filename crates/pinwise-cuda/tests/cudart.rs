//! The cudart stand-in (TEST FIXTURE): a C program compiled now, linked against it, run with
//! the stand-ins on its library path. It finds libcuda with dlopen + cuGetProcAddress_v2, as
//! the real cudart does.

use std::process::Command;

use pinwise_testkit::{compile_c_source, StandinLibs};

const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int cudaError_t;
enum { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2 };
cudaError_t cudaMallocHost(void **p, size_t n);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *stream);
cudaError_t cudaStreamCreate(void **s);
cudaError_t cudaStreamSynchronize(void *s);
cudaError_t cudaStreamDestroy(void *s);
cudaError_t cudaHostRegister(void *p, size_t n, unsigned flags);
cudaError_t cudaHostUnregister(void *p);
cudaError_t cudaDriverGetVersion(int *v);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t e);

#define CHECK(call) do { cudaError_t e_ = (call); if (e_) { \
    printf("FAIL %s: %d %s\n", #call, e_, cudaGetErrorString(e_)); return 1; } } while (0)

int main(void) {
    const size_t n = (1 << 20) + 123;
    int version = 0;
    CHECK(cudaDriverGetVersion(&version));
    unsigned char *pinned, *back = malloc(n);
    void *dev;
    CHECK(cudaMallocHost((void **)&pinned, n));
    CHECK(cudaMalloc(&dev, n));
    for (size_t i = 0; i < n; i++) pinned[i] = (unsigned char)(i * 7 + 3);
    CHECK(cudaMemcpy(dev, pinned, n, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(back, dev, n, cudaMemcpyDeviceToHost));
    if (memcmp(back, pinned, n) != 0) { printf("FAIL bytes differ after the round trip\n"); return 1; }

    /* async on a stream, into registered memory */
    void *stream;
    unsigned char *reg = aligned_alloc(4096, 1 << 20);
    CHECK(cudaHostRegister(reg, 1 << 20, 0));
    CHECK(cudaStreamCreate(&stream));
    CHECK(cudaMemcpyAsync(reg, dev, 1 << 20, cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    if (memcmp(reg, pinned, 1 << 20) != 0) { printf("FAIL async bytes differ\n"); return 1; }
    CHECK(cudaStreamDestroy(stream));
    CHECK(cudaHostUnregister(reg));

    /* errors come back with CUDA's codes */
    cudaError_t bad = cudaFreeHost(back);
    cudaError_t last = cudaGetLastError();
    CHECK(cudaFreeHost(pinned));
    CHECK(cudaFree(dev));
    printf("OK driver=%d bad_free=%d last=%d msg=%s cleared=%d\n", version, bad, last,
           cudaGetErrorString(bad), cudaGetLastError());
    return 0;
}
"#;

#[test]
fn a_c_program_linked_against_the_cudart_standin_moves_the_right_bytes() {
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("cudart_roundtrip");
    compile_c_source(PROGRAM, &exe, &libs.cudart_link_args());
    let mut command = Command::new(&exe);
    libs.configure(&mut command);
    let out = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.trim(),
        "OK driver=13000 bad_free=1 last=1 msg=invalid argument cleared=0"
    );
}

#[test]
fn without_a_libcuda_the_cudart_standin_reports_an_insufficient_driver() {
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    // A library directory with cudart but no libcuda.so.1.
    let lonely = dir.path().join("lib");
    std::fs::create_dir(&lonely).unwrap();
    std::os::unix::fs::symlink(libs.cudart_standin(), lonely.join("libcudart.so.13")).unwrap();
    std::os::unix::fs::symlink(libs.cudart_standin(), lonely.join("libcudart.so")).unwrap();
    let exe = dir.path().join("no_driver");
    compile_c_source(
        "#include <stdio.h>\nint cudaMalloc(void **p, unsigned long n);\n\
         int main(void) { void *p; printf(\"%d\\n\", cudaMalloc(&p, 16)); return 0; }\n",
        &exe,
        &[
            format!("-L{}", lonely.display()),
            "-lcudart".to_string(),
            format!("-Wl,-rpath,{}", lonely.display()),
        ],
    );
    let out = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &lonely)
        .output()
        .unwrap();
    assert!(out.status.success());
    // cudaErrorInsufficientDriver
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "35");
}
