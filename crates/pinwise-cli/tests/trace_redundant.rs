//! `pinwise trace --fingerprint`: BPF reads the sampled lines of each host-to-device copy's
//! source at the copy's entry (and of each synchronous download's destination at its
//! return), and with `--fingerprint full` (or for the copies chosen by
//! `--fingerprint-check` in sampled mode) hashes every byte of it too; the history finds
//! the redundant uploads and downloads of
//! `crates/pinwise-preload/tests/programs/redundant_copies.c` (whose comment lists them)
//! exactly as `pinwise run` does in the same modes: full mode is exact (the adversarial
//! changes, one byte between sampled lines and one in the last page, are fresh, and the
//! same bytes at another device offset are not redundant); sampled mode reports the two
//! hidden changes as redundant (the documented blind spot), and measures them as false
//! positives when every copy is also hashed in full. Against the libcuda stand-in (a TEST
//! FIXTURE). Needs root for BPF.

use std::path::Path;

use pinwise_core::fingerprint::{FingerprintMode, Redundancy, FULL_OVER_CAP_STAT};
use pinwise_core::{load_history, MemHistory};
use pinwise_testkit::{compile_c, in_allocation_order, require_bpf, StandinLibs};

const MIB: u64 = 1 << 20;
const K64: u64 = 64 << 10;

/// The redundancy summaries of the program's seven host buffers (A, B, C, D, E, S, R).
fn buffers(h: &MemHistory) -> Vec<Option<Redundancy>> {
    let items = h
        .allocations()
        .filter(|a| a.kind().pinned_from_start())
        .map(|a| (a.size(), a.redundancy().copied()));
    in_allocation_order(
        items,
        &[MIB, MIB, 300, K64, K64, K64, K64],
        "A, B, C, D, E, S, R",
    )
}

/// (uploads, redundant uploads, downloads, redundant downloads) of a buffer.
fn counts(r: &Option<Redundancy>) -> (u32, u32, u32, u32) {
    let r = r.expect("fingerprinted copies");
    (
        r.uploads,
        r.redundant_uploads,
        r.downloads,
        r.redundant_downloads,
    )
}

fn trace(libs: &StandinLibs, exe: &Path, out: &Path, flags: &[&str]) -> MemHistory {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_pinwise"))
        .env("LD_LIBRARY_PATH", libs.ld_library_path())
        .arg("trace")
        .args(flags)
        .arg("-o")
        .arg(out)
        .arg("--")
        .arg(exe)
        .output()
        .expect("running pinwise");
    assert!(
        output.status.success(),
        "pinwise trace {flags:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    load_history(out).unwrap()
}

#[test]
fn traced_copies_are_fingerprinted_and_redundant_ones_found_in_full_and_sampled_mode() {
    let name = "traced_copies_are_fingerprinted_and_redundant_ones_found_in_full_and_sampled_mode";
    if !require_bpf(name) {
        return;
    }
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("redundant_copies");
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../pinwise-preload/tests/programs/redundant_copies.c");
    compile_c(&src, &exe, &libs.cuda_link_args());
    // (flags, mode, B's redundant uploads, measured false "redundant" verdicts)
    let cases: [(&[&str], FingerprintMode, u32, Option<u64>); 4] = [
        (
            &["--fingerprint", "full"],
            FingerprintMode::Full,
            1,
            Some(2),
        ),
        // A bare --fingerprint is sampled.
        (
            &["--fingerprint", "--fingerprint-check", "0"],
            FingerprintMode::Sampled,
            3,
            None,
        ),
        (
            &["--fingerprint", "sampled", "--fingerprint-check", "1"],
            FingerprintMode::Sampled,
            1,
            Some(2),
        ),
        // Full mode with a cap below the 1 MiB buffers: those are sampled only, and counted.
        (
            &["--fingerprint", "full", "--fingerprint-full-max", "512K"],
            FingerprintMode::Full,
            3,
            Some(0),
        ),
    ];
    for (i, (flags, mode, b_redundant, false_same)) in cases.into_iter().enumerate() {
        let what = format!("{flags:?}");
        let hist = dir.path().join(format!("trace{i}.bin"));
        let h = trace(&libs, &exe, &hist, flags);
        let b = buffers(&h);
        // A, B (the two hidden changes count in sampled mode; B's one download is its
        // first), C, D (dX was overwritten by E), E, S; R only downloads: 3, the second the
        // same result fetched again.
        assert_eq!(counts(&b[0]), (5, 3, 0, 0), "{what}: A");
        assert_eq!(counts(&b[1]), (5, b_redundant, 1, 0), "{what}: B");
        assert_eq!(counts(&b[2]), (3, 1, 0, 0), "{what}: C");
        assert_eq!(counts(&b[3]), (2, 1, 0, 0), "{what}: D");
        assert_eq!(counts(&b[4]), (1, 0, 0, 0), "{what}: E");
        assert_eq!(counts(&b[5]), (2, 0, 0, 0), "{what}: S");
        assert_eq!(counts(&b[6]), (0, 0, 3, 1), "{what}: R");
        let r = b[6].unwrap();
        assert_eq!(r.redundant_download_bytes, K64, "{what}: R");
        assert_eq!(r.first_download, Some((2, 1)), "{what}: R");
        // A's fifth upload (the same bytes to dA2) is not redundant.
        let a = b[0].unwrap();
        assert_eq!((a.device_held, a.first_upload), (3, Some((2, 1))), "{what}");
        assert_eq!(a.redundant_upload_bytes, 3 * MIB, "{what}");
        let d = b[3].unwrap();
        assert_eq!((d.device_held, d.first_upload), (0, Some((2, 1))), "{what}");
        let st = h.fingerprint_stats();
        assert_eq!(st.mode(), mode, "{what}");
        assert_eq!((st.uploads, st.downloads, st.skipped), (18, 4, 0), "{what}");
        let over_cap = h.source_stats().get(FULL_OVER_CAP_STAT).copied();
        match false_same {
            Some(0) => {
                // The cap case: the 11 copies of 1 MiB (A 5, B 5 up, B 1 down) are sampled.
                assert_eq!(over_cap, Some(11), "{what}");
                assert_eq!(st.full_hashes, 22 - 11, "{what}: {st:?}");
                assert_eq!(st.sampled_false_same, 0, "{what}: {st:?}");
                // The report says so.
                let out = std::process::Command::new(env!("CARGO_BIN_EXE_pinwise"))
                    .args(["report", "--quiet", "--json"])
                    .arg(&hist)
                    .output()
                    .unwrap();
                assert!(out.status.success(), "{what}: report");
                let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                let r = &json["redundant"];
                assert_eq!(r["mode"], "full", "{what}");
                assert_eq!(r["full_over_cap"], 11, "{what}");
                let note = r["note"].as_str().unwrap();
                assert!(
                    note.contains("11 copies above the full-hash cap of 512"),
                    "{what}: {note}"
                );
            }
            Some(n) => {
                assert_eq!(over_cap, Some(0), "{what}");
                assert_eq!(st.full_hashes, 22, "{what}: every copy hashed in full");
                assert!(st.checked >= 11, "{what}: {st:?}");
                assert_eq!(st.sampled_false_same, n, "{what}: {st:?}");
                assert_eq!(st.sampled_false_differ, 0, "{what}: {st:?}");
            }
            None => assert_eq!((st.checked, st.full_hashes), (0, 0), "{what}: {st:?}"),
        }
    }
}

/// Edge cases of full mode (`tests/programs/trace_fp_edges.c`): changes in the partial
/// last word and the last whole word of a buffer whose length is not a multiple of the
/// chunk are seen; a copy whose source has a page BPF cannot read (never touched, so not
/// present at the copy's entry) gets no fingerprint in full mode: its content is unknown,
/// counted as skipped, and it is never called redundant. Sampled mode (whose lines are
/// readable) fingerprints it.
#[test]
fn full_mode_sees_the_last_bytes_and_calls_a_copy_with_an_unreadable_page_unknown() {
    let name = "full_mode_sees_the_last_bytes_and_calls_a_copy_with_an_unreadable_page_unknown";
    if !require_bpf(name) {
        return;
    }
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("trace_fp_edges");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/trace_fp_edges.c");
    compile_c(&src, &exe, &libs.cuda_link_args());
    // (flags, uploads fingerprinted, skipped, redundant uploads of the 2 MiB mapping)
    let cases: [(&[&str], u64, u64, u32); 2] = [
        (&["--fingerprint", "full"], 4 + 2, 1, 1),
        (
            &["--fingerprint", "sampled", "--fingerprint-check", "0"],
            4 + 3,
            0,
            2,
        ),
    ];
    for (i, (flags, uploads, skipped, mapped_redundant)) in cases.into_iter().enumerate() {
        let h = trace(&libs, &exe, &dir.path().join(format!("u{i}.bin")), flags);
        let st = h.fingerprint_stats();
        assert_eq!(
            (st.uploads, st.skipped),
            (uploads, skipped),
            "{flags:?}: {st:?}"
        );
        let of_size = |size: u64| {
            h.allocations()
                .filter(|a| a.size() == size)
                .find_map(|a| a.redundancy().copied())
                .unwrap_or_else(|| panic!("{flags:?}: no fingerprinted {size}-byte buffer"))
        };
        let t = of_size(5099);
        assert_eq!(
            (t.uploads, t.redundant_uploads, t.first_upload),
            (4, 1, Some((4, 3))),
            "{flags:?}: T"
        );
        let m = of_size(2 << 20);
        assert_eq!(
            m.redundant_uploads, mapped_redundant,
            "{flags:?}: the mapping"
        );
    }
}
