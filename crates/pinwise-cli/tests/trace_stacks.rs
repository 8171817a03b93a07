//! `pinwise trace`, the real binary, on a C program built with frame pointers against the
//! CPU stand-in for libcuda (a TEST FIXTURE, not a GPU): allocations carry their call chains
//! from BPF (`bpf_get_stack`), sampled copies too, and the history stores the names of every
//! site it refers to, so that it still names its functions after the binary is deleted.
//! Needs root for BPF: skipped with a visible message elsewhere, failing under `CI=true`
//! when BPF is unavailable.

use std::path::Path;
use std::process::Command;

use pinwise_core::history::AllocKind;
use pinwise_core::{load_history, Frame, MemHistory, Site};
use pinwise_testkit::{compile_c_source, require_bpf, StandinLibs};

/// Pins 1 MiB through pin_middle -> pin_here -> cuMemAllocHost, maps 4 MiB through
/// map_middle -> map_here -> mmap, and copies a 64 KiB heap buffer (below malloc's mmap
/// threshold: untracked memory) through copy_middle -> copy_here -> cuMemcpyHtoD.
const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "cuda_driver_min.h"

#define CHECK(x) do { CUresult r_ = (x); if (r_) { fprintf(stderr, "%s: %d\n", #x, (int)r_); exit(2); } } while (0)
#define NOINLINE __attribute__((noinline))

NOINLINE void *pin_here(size_t n) { void *p; CHECK(cuMemAllocHost(&p, n)); return p; }
NOINLINE void *pin_middle(size_t n) { void *p = pin_here(n); __asm__ volatile("" ::: "memory"); return p; }
NOINLINE char *map_here(size_t n) {
    char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) exit(4);
    return p;
}
NOINLINE char *map_middle(size_t n) { char *p = map_here(n); __asm__ volatile("" ::: "memory"); return p; }
NOINLINE void copy_here(CUdeviceptr d, const void *src, size_t n) { CHECK(cuMemcpyHtoD(d, src, n)); }
NOINLINE void copy_middle(CUdeviceptr d, const void *src, size_t n) { copy_here(d, src, n); __asm__ volatile("" ::: "memory"); }

int main(void) {
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, 4 << 20));
    void *pinned = pin_middle(1 << 20);
    char *mapped = map_middle(4 << 20);
    memset(mapped, 1, 4 << 20);
    char *small = malloc(64 << 10);
    memset(small, 2, 64 << 10);
    for (int i = 0; i < 3; i++) {
        CHECK(cuMemcpyHtoD(d, pinned, 1 << 20));
        CHECK(cuMemcpyHtoD(d, mapped, 4 << 20));
        copy_middle(d, small, 64 << 10);
    }
    return 0;
}
"#;

fn function(h: &MemHistory, site: Site) -> String {
    h.symbol(site)
        .map(|s| s.function.clone())
        .unwrap_or_else(|| format!("<unnamed {site:?}>"))
}

fn stack_functions(h: &MemHistory, frames: &[Frame]) -> Vec<String> {
    frames
        .iter()
        .filter_map(Frame::site)
        .map(|s| function(h, s))
        .collect()
}

fn trace(libs: &StandinLibs, exe: &Path, out: &Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_pinwise"))
        .env("LD_LIBRARY_PATH", libs.ld_library_path())
        .args(["trace", "--copy-stacks", "1", "-o"])
        .arg(out)
        .arg("--")
        .arg(exe)
        .output()
        .expect("running pinwise trace");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "pinwise trace failed:\n{stderr}");
    stderr
}

#[test]
fn allocation_stacks_and_symbols_are_stored_and_outlive_the_binary() {
    let name = "allocation_stacks_and_symbols_are_stored_and_outlive_the_binary";
    if !require_bpf(name) {
        return;
    }
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("stacks_prog");
    let mut args: Vec<String> = libs.cuda_link_args();
    args.extend(["-O0", "-g", "-fno-omit-frame-pointer"].map(String::from));
    compile_c_source(PROGRAM, &exe, &args);
    let out = dir.path().join("stacks.json");
    let stderr = trace(&libs, &exe, &out);

    // The binary is gone before the history is read: names come from the history.
    std::fs::remove_file(&exe).unwrap();
    std::fs::remove_file(exe.with_extension("c")).ok();
    let h = load_history(&out).unwrap_or_else(|e| panic!("{e}\n{stderr}"));
    assert!(!h.symbols().is_empty(), "symbols stored:\n{stderr}");

    let by_kind = |kind: AllocKind| {
        h.allocations()
            .filter(|v| v.kind() == kind)
            .collect::<Vec<_>>()
    };
    let pinned = by_kind(AllocKind::PinnedAlloc);
    assert_eq!(pinned.len(), 1);
    assert_eq!(function(&h, pinned[0].site()), "pin_here");
    let stack = pinned[0]
        .stack()
        .expect("the pinned allocation has a stack");
    let names = stack_functions(&h, &stack);
    // Right after cuMemAllocHost returns: pin_here, then its callers by frame pointers.
    assert_eq!(
        names.iter().take(3).collect::<Vec<_>>(),
        ["pin_here", "pin_middle", "main"],
        "{names:?}"
    );

    let mapped = by_kind(AllocKind::Pageable);
    assert_eq!(mapped.len(), 1, "the 4 MiB mapping");
    assert_eq!(function(&h, mapped[0].site()), "map_here");
    let names = stack_functions(&h, &mapped[0].stack().expect("the mapping has a stack"));
    // From the mmap syscall: libc's wrapper first (it keeps no frame, so the walk skips
    // map_here; the call site found in the stack window goes in after it), then callers.
    assert_eq!(
        names.iter().skip(1).take(3).collect::<Vec<_>>(),
        ["map_here", "map_middle", "main"],
        "{names:?}"
    );

    // The heap buffer's record is made by its first copy, which was sampled (--copy-stacks
    // 1): its record keeps the copy's chain.
    let untracked = by_kind(AllocKind::Untracked);
    assert_eq!(untracked.len(), 1, "the 64 KiB heap buffer");
    assert_eq!(untracked[0].transfer_count(), 3);
    let names = stack_functions(&h, &untracked[0].stack().expect("the copy's stack"));
    // At cuMemcpyHtoD's entry: the stand-in's function, its caller (the return address the
    // probe read), then the frame-pointer chain.
    assert_eq!(
        names.iter().skip(1).take(3).collect::<Vec<_>>(),
        ["copy_here", "copy_middle", "main"],
        "{names:?}"
    );
    assert_eq!(function(&h, untracked[0].site()), "copy_here");
}

#[test]
fn no_stacks_means_no_stacks() {
    if !require_bpf("no_stacks_means_no_stacks") {
        return;
    }
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("stacks_prog");
    let mut args: Vec<String> = libs.cuda_link_args();
    args.extend(["-O0", "-g", "-fno-omit-frame-pointer"].map(String::from));
    compile_c_source(PROGRAM, &exe, &args);
    let out = dir.path().join("nostacks.json");
    let output = Command::new(env!("CARGO_BIN_EXE_pinwise"))
        .env("LD_LIBRARY_PATH", libs.ld_library_path())
        .args(["trace", "--no-stacks", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(output.status.success());
    let h = load_history(&out).unwrap();
    assert_eq!(h.allocations().count(), 3);
    assert!(h.allocations().all(|v| v.stack().is_none()));
    // Sites are still named.
    let pinned = h
        .allocations()
        .find(|v| v.kind() == AllocKind::PinnedAlloc)
        .unwrap();
    assert_eq!(function(&h, pinned.site()), "pin_here");
}

/// Six 4 MiB buffers in turn (each freed before the next, so addresses are reused), six
/// 64 KiB ones from the heap, and one each from calloc, realloc (grown from a small block),
/// posix_memalign, aligned_alloc and valloc, each copied to the device a known number of
/// times; small blocks in between are below the threshold.
const MALLOC_PROGRAM: &str = r#"
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda_driver_min.h"

#define CHECK(x) do { CUresult r_ = (x); if (r_) { fprintf(stderr, "%s: %d\n", #x, (int)r_); exit(2); } } while (0)
#define NOINLINE __attribute__((noinline))

static CUdeviceptr d;
static void copy(const void *p, size_t n, int times) {
    for (int i = 0; i < times; i++) CHECK(cuMemcpyHtoD(d, p, n));
}
NOINLINE void big_buffers(void) {
    for (int i = 0; i < 6; i++) {
        char *p = malloc(4 << 20);
        memset(p, i, 4 << 20);
        copy(p, 4 << 20, i + 1);
        free(p);
        free(malloc(100)); /* small: not recorded */
    }
}
NOINLINE void small_buffers(void) {
    for (int i = 0; i < 6; i++) {
        char *p = malloc(64 << 10);
        memset(p, i, 64 << 10);
        copy(p, 64 << 10, 2);
        free(p);
    }
}
NOINLINE void other_allocators(void) {
    char *c = calloc(16, 8192);                 /* 128 KiB */
    copy(c, 128 << 10, 3);
    char *r = malloc(1000);
    r = realloc(r, 256 << 10);                  /* grown into a recorded block */
    memset(r, 1, 256 << 10);
    copy(r, 256 << 10, 4);
    void *pm = NULL;
    if (posix_memalign(&pm, 4096, 96 << 10)) exit(5);
    memset(pm, 1, 96 << 10);
    copy(pm, 96 << 10, 5);
    char *aa = aligned_alloc(4096, 80 << 10);
    memset(aa, 1, 80 << 10);
    copy(aa, 80 << 10, 6);
    char *v = valloc(72 << 10);
    memset(v, 1, 72 << 10);
    copy(v, 72 << 10, 7);
    free(c); free(r); free(pm); free(aa); free(v);
}

int main(void) {
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuMemAlloc(&d, 4 << 20));
    big_buffers();
    small_buffers();
    other_allocators();
    return 0;
}
"#;

#[test]
fn malloc_probes_give_every_large_block_its_own_record_and_site() {
    if !require_bpf("malloc_probes_give_every_large_block_its_own_record_and_site") {
        return;
    }
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("malloc_prog");
    let mut args: Vec<String> = libs.cuda_link_args();
    args.extend(["-O0", "-g", "-fno-omit-frame-pointer"].map(String::from));
    compile_c_source(MALLOC_PROGRAM, &exe, &args);
    let out = dir.path().join("malloc.json");
    let output = Command::new(env!("CARGO_BIN_EXE_pinwise"))
        .env("LD_LIBRARY_PATH", libs.ld_library_path())
        .args(["trace", "--malloc", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&exe)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let h = load_history(&out).unwrap();
    assert_eq!(h.source_stats().get("tracer.malloc_probes"), Some(&1));
    assert_eq!(
        h.allocations()
            .filter(|v| v.kind() == AllocKind::Untracked)
            .count(),
        0,
        "no implicit records: every copied block's allocation was seen"
    );
    // (size, site function) -> transfer counts, in allocation order.
    let mut seen: Vec<(u64, String, u64)> = h
        .allocations()
        .filter(|v| v.kind() == AllocKind::Pageable && v.transfer_count() > 0)
        .map(|v| (v.size(), function(&h, v.site()), v.transfer_count()))
        .collect();
    seen.sort_by_key(|(size, _, n)| (*size, *n));
    let mut want: Vec<(u64, String, u64)> = Vec::new();
    for i in 1..=6 {
        want.push((4 << 20, "big_buffers".into(), i));
        want.push((64 << 10, "small_buffers".into(), 2));
    }
    for (size, n) in [
        (128u64 << 10, 3),
        (256 << 10, 4),
        (96 << 10, 5),
        (80 << 10, 6),
        (72 << 10, 7),
    ] {
        want.push((size, "other_allocators".into(), n));
    }
    want.sort_by_key(|(size, _, n)| (*size, *n));
    assert_eq!(seen, want, "{stderr}");
    // The six 4 MiB blocks are six records with call numbers 1..6 at one site.
    let mut calls: Vec<u32> = h
        .allocations()
        .filter(|v| v.size() == 4 << 20)
        .map(|v| v.tag().call_no)
        .collect();
    calls.sort_unstable();
    assert_eq!(calls, [1, 2, 3, 4, 5, 6]);
    // Every recorded block was freed, and nothing else was recorded.
    assert!(h
        .allocations()
        .filter(|v| v.kind() == AllocKind::Pageable)
        .all(|v| v.state() == pinwise_core::history::AllocState::Freed));
    assert_eq!(
        h.allocations()
            .filter(|v| v.kind() == AllocKind::Pageable)
            .count(),
        17
    );
}
