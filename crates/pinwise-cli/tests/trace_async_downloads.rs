//! `pinwise trace --fingerprint`: asynchronous downloads are fingerprinted when a call that
//! guarantees their completion returns (stream, context and event synchronization, stream
//! and event queries answering CUDA_SUCCESS), on
//! `crates/pinwise-preload/tests/programs/async_sync_kinds.c` (whose comment lists the
//! copies): each kind of completion finds its buffer's one redundant download of three; a
//! download that an event recorded before it, another stream's synchronization and a query
//! answering "not ready" must not complete is hashed only at its own stream's
//! synchronization (else its stale bytes would be called redundant); one captured into a
//! graph (it does not run) and one never synchronized are unknown. The same counts as `pinwise run` reports for the program
//! (`crates/pinwise-preload/tests/async_downloads.rs`). Against the libcuda stand-in (a TEST
//! FIXTURE). Needs root for BPF.

use std::path::Path;

use pinwise_core::fingerprint::Redundancy;
use pinwise_core::{load_history, MemHistory};
use pinwise_testkit::{compile_c, require_bpf, StandinLibs};

const K64: u64 = 64 << 10;

/// The redundancy of each 64 KiB buffer the program pinned, in allocation order.
fn pinned_64k(h: &MemHistory) -> Vec<Option<Redundancy>> {
    h.allocations()
        .filter(|a| a.size() == K64 && a.kind().pinned_from_start())
        .map(|a| a.redundancy().copied())
        .collect()
}

/// `pinwise trace FLAGS -o OUT -- EXE`, which must succeed and leave the program's stdout
/// as `plain`'s; the history it wrote.
fn trace(libs: &StandinLibs, exe: &Path, flags: &[&str], out: &Path, plain: &[u8]) -> MemHistory {
    let what = format!("{flags:?}");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_pinwise"))
        .env("LD_LIBRARY_PATH", libs.ld_library_path())
        .arg("trace")
        .args(flags)
        .arg("-o")
        .arg(out)
        .arg("--")
        .arg(exe)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(output.stdout, plain, "{what}: the program's results");
    load_history(out).unwrap()
}

#[test]
fn asynchronous_downloads_are_fingerprinted_at_the_call_that_completes_them() {
    let name = "asynchronous_downloads_are_fingerprinted_at_the_call_that_completes_them";
    if !require_bpf(name) {
        return;
    }
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("async_sync_kinds");
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../pinwise-preload/tests/programs/async_sync_kinds.c");
    compile_c(&src, &exe, &libs.cuda_link_args());
    let plain = libs.command(&exe).output().unwrap();
    assert!(plain.status.success(), "plain run");
    for (i, flags) in [
        &["--fingerprint", "full"][..],
        &["--fingerprint", "sampled", "--fingerprint-check", "0"][..],
    ]
    .into_iter()
    .enumerate()
    {
        let what = format!("{flags:?}");
        let out = dir.path().join(format!("t{i}.bin"));
        let h = trace(&libs, &exe, flags, &out, &plain.stdout);
        // S, R0..R4, U, W, C: the 64 KiB host buffers, in allocation order.
        let bufs = pinned_64k(&h);
        assert_eq!(bufs.len(), 9, "{what}: S, R0..R4, U, W, C");
        let s = bufs[0].expect("S's uploads");
        assert_eq!((s.uploads, s.redundant_uploads), (15, 0), "{what}: S");
        for (k, r) in bufs[1..6].iter().enumerate() {
            let r = r.unwrap_or_else(|| panic!("{what}: R{k} fingerprinted"));
            assert_eq!(
                (
                    r.downloads,
                    r.redundant_downloads,
                    r.redundant_download_bytes,
                    r.first_download
                ),
                (3, 1, K64, Some((2, 1))),
                "{what}: R{k}"
            );
        }
        assert!(bufs[6].is_none(), "{what}: U never completed: no verdict");
        let w = bufs[7].expect("W's downloads");
        assert_eq!((w.downloads, w.redundant_downloads), (2, 0), "{what}: W");
        // C's second download was captured into a graph: it did not run (unknown).
        let c = bufs[8].expect("C's downloads");
        assert_eq!((c.downloads, c.redundant_downloads), (1, 0), "{what}: C");
        let st = h.fingerprint_stats();
        assert_eq!(
            (st.uploads, st.downloads, st.skipped),
            (15, 18, 2),
            "{what}: {st:?}"
        );
        let stat = |k: &str| h.source_stats().get(k).copied();
        assert_eq!(
            stat("tracer.fingerprint_async_downloads"),
            Some(18),
            "{what}"
        );
        assert_eq!(
            stat("tracer.fingerprint_async_downloads_unknown"),
            Some(2),
            "{what}"
        );
    }
}

/// `crates/pinwise-preload/tests/programs/async_redownload.c`: downloads on the legacy
/// stream completed by CUDA 13's `cuCtxSynchronize_v2`, of NULL and of the current context
/// by handle (cudart 13's `cudaDeviceSynchronize`: `cuCtxGetCurrent`, then
/// `cuCtxSynchronize_v2` of that), and a loop re-downloading into one buffer with a stream
/// synchronization each step and no pause: every download fingerprinted, none skipped, the
/// same counts as `pinwise run` reports (`crates/pinwise-preload/tests/async_downloads.rs`).
#[test]
fn downloads_completed_by_cuda_13s_context_synchronization_are_fingerprinted() {
    let name = "downloads_completed_by_cuda_13s_context_synchronization_are_fingerprinted";
    if !require_bpf(name) {
        return;
    }
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("async_redownload");
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../pinwise-preload/tests/programs/async_redownload.c");
    compile_c(&src, &exe, &libs.cuda_link_args());
    let plain = libs.command(&exe).output().unwrap();
    assert!(plain.status.success(), "plain run");
    let out = dir.path().join("t.bin");
    let h = trace(&libs, &exe, &["--fingerprint", "full"], &out, &plain.stdout);
    // S, A, B, L: the 64 KiB host buffers, in allocation order.
    let bufs = pinned_64k(&h);
    assert_eq!(bufs.len(), 4, "S, A, B, L");
    for (name, r) in [("A", bufs[1]), ("B", bufs[2])] {
        let r = r.unwrap_or_else(|| panic!("{name} fingerprinted"));
        assert_eq!(
            (r.downloads, r.redundant_downloads, r.first_download),
            (3, 1, Some((2, 1))),
            "{name}"
        );
    }
    let l = bufs[3].expect("L's downloads");
    assert_eq!((l.downloads, l.redundant_downloads), (12, 11), "L");
    let st = h.fingerprint_stats();
    assert_eq!((st.uploads, st.downloads, st.skipped), (5, 18, 0), "{st:?}");
    assert_eq!(
        h.source_stats()
            .get("tracer.fingerprint_async_downloads_unknown")
            .copied(),
        Some(0)
    );
}
