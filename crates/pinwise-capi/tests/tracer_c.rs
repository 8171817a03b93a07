//! The tracer's C ABI (`pinwise_tracer_*`) from C: a program built against
//! `include/pinwise.h` and `libpinwise.so` traces itself while it allocates pinned memory
//! and copies through the CPU stand-in for libcuda (a TEST FIXTURE, not a GPU), and asks
//! for its hotspots while tracing. Needs root for BPF: skipped with a visible message
//! elsewhere, failing under `CI=true` when BPF is unavailable.

use std::path::{Path, PathBuf};

use pinwise_testkit::{compile_c_source, require_bpf, StandinLibs};

const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "pinwise.h"
#include "cuda_driver_min.h"

#define COPIES 30

int main(int argc, char **argv) {
    PinwiseTracerConfig cfg;
    pinwise_tracer_config_init(&cfg);
    cfg.libcuda = argv[1];
    PinwiseTracer *t = pinwise_tracer_create(&cfg);
    if (!t || pinwise_tracer_start_self(t) != 0) {
        printf("error=%s\n", pinwise_tracer_last_error());
        return 3;
    }
    CUdevice dev; CUcontext ctx; void *h; CUdeviceptr d;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev)
        || cuCtxSetCurrent(ctx) || cuMemHostAlloc(&h, 1 << 20, 0) || cuMemAlloc_v2(&d, 1 << 20))
        return 4;
    for (int i = 0; i < COPIES; i++)
        if (cuMemcpyHtoD_v2(d, h, 4096)) return 5;

    PinwiseAllocationInfo hot[4];
    size_t n = 0;
    for (int i = 0; i < 500; i++) {
        n = pinwise_tracer_hotspots(t, 4, hot);
        if (n > 0 && hot[0].transfer_count == COPIES) break;
        usleep(10000);
    }
    char site[512] = "";
    if (n > 0) pinwise_tracer_describe_site(t, &hot[0], site, sizeof site);
    PinwiseAllocationInfo found;
    int lookup = pinwise_tracer_lookup(t, (uint32_t)getpid(), (uint64_t)(uintptr_t)h + 10, &found);
    cuMemFreeHost(h);
    PinwiseTracerStats st;
    if (pinwise_tracer_stop(t, &st) != 0) return 6;
    int dumped = pinwise_tracer_dump(t, argv[2], PINWISE_DUMP_JSON);
    printf("hotspots=%zu\ntransfers=%llu\nhtod_bytes=%llu\nkind=%u\nis_start=%d\n"
           "lookup=%d\nrecords=%llu\ndrops=%llu\nuprobes=%llu\ndumped=%d\nrunning=%d\n"
           "site=%s\n",
           n, (unsigned long long)(n ? hot[0].transfer_count : 0),
           (unsigned long long)(n ? hot[0].htod_bytes : 0), n ? hot[0].kind : 99,
           n ? hot[0].start == (uint64_t)(uintptr_t)h : 0, lookup,
           (unsigned long long)st.records, (unsigned long long)st.ringbuf_drops,
           (unsigned long long)st.uprobes, dumped, pinwise_tracer_is_running(t), site);
    pinwise_tracer_destroy(t);
    return 0;
}
"#;

/// `target/<profile>`, where cargo put `libpinwise.so` next to this test's `deps/`.
fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

#[test]
fn a_c_program_traces_itself_and_reads_its_hotspots() {
    if !require_bpf("a_c_program_traces_itself_and_reads_its_hotspots") {
        return;
    }
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("tracer_self");
    let lib_dir = build_dir();
    assert!(
        lib_dir.join("libpinwise.so").exists(),
        "libpinwise.so not built"
    );
    let include = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../include");
    let mut args = vec![
        format!("-I{}", include.display()),
        format!("-L{}", lib_dir.display()),
        "-lpinwise".to_string(),
        format!("-Wl,-rpath,{}", lib_dir.display()),
    ];
    args.extend(libs.cuda_link_args());
    compile_c_source(PROGRAM, &exe, &args);

    let dump = dir.path().join("self.json");
    let output = std::process::Command::new(&exe)
        .arg(libs.libcuda())
        .arg(&dump)
        .env("LD_LIBRARY_PATH", libs.ld_library_path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}: {stdout}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let r: std::collections::HashMap<&str, &str> =
        stdout.lines().filter_map(|l| l.split_once('=')).collect();
    let num = |k: &str| -> u64 {
        r.get(k)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no number `{k}` in: {stdout}"))
    };
    assert_eq!(num("transfers"), 30, "{stdout}");
    assert_eq!(num("htod_bytes"), 30 * 4096, "{stdout}");
    assert_eq!(num("kind"), 1, "PINWISE_KIND_PINNED_ALLOC: {stdout}");
    assert_eq!(num("is_start"), 1, "{stdout}");
    assert_eq!(num("lookup"), 1, "interior pointer found: {stdout}");
    assert_eq!(num("drops"), 0, "{stdout}");
    assert_eq!(num("dumped"), 0, "{stdout}");
    assert_eq!(num("running"), 0, "{stdout}");
    assert!(num("uprobes") > 0, "{stdout}");
    let site = r.get("site").copied().unwrap_or("");
    assert!(site.starts_with("tracer_self+0x"), "{site}");
    assert!(
        site.contains("main"),
        "symbolized to the C function: {site}"
    );
    assert!(dump.exists());
}
