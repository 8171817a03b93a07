//! `pinwise trace --malloc` on Rust programs whose global allocator is jemalloc
//! (tikv-jemallocator, `_rjem_*`) or mimalloc (`mi_*`), linked into the executable: the
//! fixture programs of `fixtures/rust-allocators`, copying through the CPU stand-in for
//! libcuda (a TEST FIXTURE, not a GPU). The allocators' entry points in the executable are
//! probed like libc's: every block of at least the threshold has its own record at its
//! call site, numbered there, with its exact copies; blocks freed and allocated again at
//! reused addresses are records of their own. Needs root for BPF: skipped with a visible
//! message elsewhere, failing under `CI=true` when BPF is unavailable.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use pinwise_core::history::{AllocKind, AllocState};
use pinwise_core::{load_history, Direction, MemHistory, Site};
use pinwise_testkit::{require_bpf, StandinLibs};

/// A fixture program, built by `cargo build --workspace` next to `pinwise`.
fn fixture(name: &str) -> PathBuf {
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_pinwise")).with_file_name(name);
    assert!(
        exe.is_file(),
        "{} is missing: run `cargo build --workspace` (it builds fixtures/rust-allocators)",
        exe.display()
    );
    exe
}

fn function(h: &MemHistory, site: Site) -> String {
    h.symbol(site)
        .map(|s| s.function.clone())
        .unwrap_or_default()
}

/// `calls: name=count ...` from the program's stderr.
fn calls(stderr: &str) -> BTreeMap<String, u64> {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("calls: "))
        .expect("a calls line")
        .split_whitespace()
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// A recorded block: (site function, call number, HtoD, DtoH, freed).
type Block = (String, u32, u64, u64, bool);

#[test]
fn malloc_probes_cover_jemalloc_and_mimalloc_linked_into_a_rust_program() {
    if !require_bpf("malloc_probes_cover_jemalloc_and_mimalloc_linked_into_a_rust_program") {
        return;
    }
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    // (program, the allocator method whose call the zeroed, plain and grown blocks come
    // from, and the method of the over-aligned one).
    for (name, allocator) in [
        ("pw-sites-jemalloc", "<tikv_jemallocator::Jemalloc as "),
        ("pw-sites-mimalloc", "<mimalloc::MiMalloc as "),
    ] {
        let exe = fixture(name);
        let out = dir.path().join(format!("{name}.json"));
        let output = Command::new(env!("CARGO_BIN_EXE_pinwise"))
            .env("LD_LIBRARY_PATH", libs.ld_library_path())
            .env("PINWISE_LIBCUDA", libs.libcuda())
            .args(["trace", "--malloc", "--libcuda"])
            .arg(libs.libcuda())
            .arg("-o")
            .arg(&out)
            .arg("--")
            .arg(&exe)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{name}: {stderr}");
        let expected = calls(&stderr);
        let h = load_history(&out).unwrap();
        // Every copy landed in a block whose allocation was seen.
        assert_eq!(
            h.allocations()
                .filter(|v| v.kind() == AllocKind::Untracked)
                .count(),
            0,
            "{name}: no implicit records"
        );
        assert_eq!(h.stats().unmatched_frees, 0, "{name}: {:?}", h.stats());
        // The allocator's blocks by size: (site function, call number, HtoD, DtoH, freed).
        let mut blocks: BTreeMap<u64, Vec<Block>> = BTreeMap::new();
        let mut arenas = 0;
        for v in h.allocations().filter(|v| v.kind() == AllocKind::Pageable) {
            let site = function(&h, v.site());
            if !site.starts_with(allocator) {
                // The allocator's own arenas, mapped with mmap (seen by the mmap
                // tracepoint): no copy touches them, the blocks inside have records.
                assert_eq!(v.transfer_count(), 0, "{name}: {site} {}", v.size());
                arenas += 1;
                continue;
            }
            let c = v.counters();
            blocks.entry(v.size()).or_default().push((
                site,
                v.tag().call_no,
                c.direction(Direction::HtoD).transfers(),
                c.direction(Direction::DtoH).transfers(),
                v.state() == AllocState::Freed,
            ));
        }
        for list in blocks.values_mut() {
            list.sort_by_key(|b| b.1);
        }
        let sites: BTreeMap<u64, Vec<&str>> = blocks
            .iter()
            .map(|(size, l)| {
                let mut s: Vec<&str> = l.iter().map(|b| b.0.rsplit("::").next().unwrap()).collect();
                s.dedup();
                (*size, s)
            })
            .collect();
        // Zeroed Vecs (alloc_zeroed), Vecs with a capacity and the over-aligned blocks
        // (alloc), the grown Vec (realloc).
        assert_eq!(
            sites,
            [
                (2u64 << 20, vec!["alloc_zeroed"]),
                (1 << 20, vec!["alloc"]),
                (300 << 10, vec!["realloc"]),
                (256 << 10, vec!["alloc"]),
            ]
            .into_iter()
            .collect(),
            "{name}: {blocks:?}"
        );
        let counts = |size: u64| -> Vec<(u32, u64, u64, bool)> {
            blocks[&size].iter().map(|b| (b.1, b.2, b.3, b.4)).collect()
        };
        assert_eq!(
            counts(2 << 20),
            (1..=4).map(|n| (n, 2, 0, true)).collect::<Vec<_>>(),
            "{name}"
        );
        // The 256 KiB and the 1 MiB blocks may share a call site (mimalloc's alloc):
        // numbered in the order they were made there.
        let outputs: Vec<u32> = blocks[&(256 << 10)].iter().map(|b| b.1).collect();
        let aligned: Vec<u32> = blocks[&(1 << 20)].iter().map(|b| b.1).collect();
        assert_eq!(outputs.len(), 4, "{name}");
        assert_eq!(aligned.len(), 2, "{name}");
        assert!(
            outputs == [1, 2, 3, 4] && (aligned == [1, 2] || aligned == [5, 6]),
            "{name}: call numbers {outputs:?} {aligned:?}"
        );
        assert!(blocks[&(256 << 10)]
            .iter()
            .all(|b| (b.2, b.3, b.4) == (0, 1, true)));
        assert!(blocks[&(1 << 20)]
            .iter()
            .all(|b| (b.2, b.3, b.4) == (1, 1, true)));
        assert_eq!(counts(300 << 10), [(1, 1, 1, true)], "{name}");
        assert!(arenas <= 4, "{name}: {arenas} arena mappings");
        // Blocks freed and made again at the same address are records of their own.
        let mut starts: Vec<u64> = h
            .allocations()
            .filter(|v| v.kind() == AllocKind::Pageable)
            .map(|v| v.start())
            .collect();
        let n = starts.len();
        starts.sort_unstable();
        starts.dedup();
        assert!(starts.len() < n, "{name}: no address was reused");
        assert_eq!(
            h.stats().transfers[Direction::HtoD.index()].transfers,
            expected["htod"],
            "{name}"
        );
        assert_eq!(
            h.stats().transfers[Direction::DtoH.index()].transfers,
            expected["dtoh"],
            "{name}"
        );
    }
}

/// outer -> middle -> inner -> malloc(1 MiB), built without frame pointers, copied once.
const NO_FP_PROGRAM: &str = r#"
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda_driver_min.h"

#define CHECK(x) do { CUresult r_ = (x); if (r_) { fprintf(stderr, "%s: %d\n", #x, (int)r_); exit(2); } } while (0)
#define NOINLINE __attribute__((noinline))

static volatile int sink;
NOINLINE char *inner(size_t n) { char *p = malloc(n); sink += p != 0; return p; }
NOINLINE char *middle(size_t n) { char *p = inner(n); sink += 2; return p; }
NOINLINE char *outer(size_t n) { char *p = middle(n); sink += 3; return p; }

int main(void) {
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr d;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuMemAlloc(&d, 1 << 20));
    char *p = outer(1 << 20);
    memset(p, 1, 1 << 20);
    CHECK(cuMemcpyHtoD(d, p, 1 << 20));
    /* Alive a while after: the tracer unwinds with the process's maps, read while it lives
     * (a process gone before its events are read keeps its frame-pointer chains). */
    usleep(1500 * 1000);
    free(p);
    return 0;
}
"#;

fn stack_functions(h: &MemHistory, v: &pinwise_core::history::AllocationView<'_>) -> Vec<String> {
    v.stack()
        .map(|s| {
            s.iter()
                .filter_map(|f| match f {
                    pinwise_core::Frame::Native(site) => {
                        h.symbol(*site).map(|x| x.function.clone())
                    }
                    pinwise_core::Frame::Python(_) => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn dwarf_stacks_unwind_a_program_built_without_frame_pointers() {
    if !require_bpf("dwarf_stacks_unwind_a_program_built_without_frame_pointers") {
        return;
    }
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("no_fp");
    let mut args: Vec<String> = libs.cuda_link_args();
    args.extend(
        [
            "-O2",
            "-g",
            "-fomit-frame-pointer",
            "-fno-optimize-sibling-calls",
        ]
        .map(String::from),
    );
    pinwise_testkit::compile_c_source(NO_FP_PROGRAM, &exe, &args);
    let out = dir.path().join("no_fp.json");
    let output = Command::new(env!("CARGO_BIN_EXE_pinwise"))
        .env("LD_LIBRARY_PATH", libs.ld_library_path())
        .args(["trace", "--malloc", "--dwarf-stacks", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&exe)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let h = load_history(&out).unwrap();
    let block = h
        .allocations()
        .find(|v| v.kind() == AllocKind::Pageable && v.size() == 1 << 20)
        .expect("the 1 MiB block");
    assert_eq!(block.transfer_count(), 1);
    let functions = stack_functions(&h, &block);
    let at = |f: &str| {
        functions
            .iter()
            .position(|x| x == f)
            .unwrap_or_else(|| panic!("{f} not on the stack {functions:?}"))
    };
    // From the allocating function out to main, in order.
    assert!(at("inner") < at("middle"), "{functions:?}");
    assert!(at("middle") < at("outer"), "{functions:?}");
    assert!(at("outer") < at("main"), "{functions:?}");
    assert!(h.source_stats()["tracer.stacks_unwound"] >= 1);
}
