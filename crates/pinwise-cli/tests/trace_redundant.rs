//! `pinwise trace --fingerprint`: BPF reads the sampled lines of each host-to-device copy's
//! source at the copy's entry (and of each synchronous download's destination at its
//! return), user space hashes them, and the history finds the redundant uploads and
//! downloads of `crates/pinwise-preload/tests/programs/redundant_copies.c` (whose comment
//! lists them) exactly as sampled mode of `pinwise run` does: the two changes hidden
//! between sampled lines are reported as redundant (the documented blind spot). Against the
//! libcuda stand-in (a TEST FIXTURE). Needs root for BPF.

use std::path::Path;

use pinwise_core::fingerprint::{FingerprintMode, Redundancy};
use pinwise_core::load_history;
use pinwise_testkit::{compile_c, require_bpf, StandinLibs};

const MIB: u64 = 1 << 20;
const K64: u64 = 64 << 10;

#[test]
fn traced_uploads_are_fingerprinted_and_redundant_ones_found() {
    if !require_bpf("traced_uploads_are_fingerprinted_and_redundant_ones_found") {
        return;
    }
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("redundant_copies");
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../pinwise-preload/tests/programs/redundant_copies.c");
    compile_c(&src, &exe, &libs.cuda_link_args());
    let out = dir.path().join("trace.bin");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_pinwise"))
        .env("LD_LIBRARY_PATH", libs.ld_library_path())
        .args(["trace", "--fingerprint", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&exe)
        .output()
        .expect("running pinwise");
    assert!(
        output.status.success(),
        "pinwise trace failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let h = load_history(&out).unwrap();
    let sizes = [MIB, MIB, 300, K64, K64, K64, K64];
    let mut want = sizes.iter().peekable();
    let mut got: Vec<Option<Redundancy>> = Vec::new();
    for a in h.allocations() {
        if a.kind().pinned_from_start() && want.peek() == Some(&&a.size()) {
            want.next();
            got.push(a.redundancy().copied());
        }
    }
    assert_eq!(got.len(), 7, "the seven host buffers");
    let counts = |r: &Option<Redundancy>| r.map(|r| (r.uploads, r.redundant_uploads, r.downloads));
    // A, B (sampled: the two hidden changes count; B's one download is its first), C, D,
    // E, S; R only downloads: 3, the second the same result fetched again.
    assert_eq!(counts(&got[0]), Some((5, 3, 0)), "A");
    assert_eq!(counts(&got[1]), Some((5, 3, 1)), "B");
    assert_eq!(got[1].unwrap().redundant_downloads, 0, "B");
    assert_eq!(counts(&got[2]), Some((3, 1, 0)), "C");
    assert_eq!(counts(&got[3]), Some((2, 1, 0)), "D");
    assert_eq!(counts(&got[4]), Some((1, 0, 0)), "E");
    assert_eq!(counts(&got[5]), Some((2, 0, 0)), "S");
    assert_eq!(counts(&got[6]), Some((0, 0, 3)), "R");
    let r = got[6].unwrap();
    assert_eq!(
        (r.redundant_downloads, r.redundant_download_bytes),
        (1, K64),
        "R"
    );
    let a = got[0].unwrap();
    assert_eq!((a.device_held, a.first_upload), (3, Some((2, 1))));
    let st = h.fingerprint_stats();
    assert_eq!(st.mode(), FingerprintMode::Sampled);
    assert_eq!((st.uploads, st.downloads, st.skipped), (18, 4, 0));
    assert_eq!(st.checked, 0, "the tracer hashes no copy in full");
}
