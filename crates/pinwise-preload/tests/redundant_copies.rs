//! Redundant transfers found by `pinwise run` (copies fingerprinted in the copy hook), on a
//! program with known redundant and non-redundant copies (`programs/redundant_copies.c`,
//! whose comment lists them), against the libcuda stand-in (a TEST FIXTURE). Full mode is
//! exact; sampled mode is exact too (the sampled lines' positions are deterministic), with
//! the two changes hidden between sampled lines reported as redundant, and measured as such
//! when every copy is also hashed in full.

mod common;

use common::*;
use pinwise_core::fingerprint::{FingerprintMode, Redundancy};
use pinwise_core::MemHistory;
use pinwise_testkit::in_allocation_order;

const MIB: u64 = 1 << 20;
const K64: u64 = 64 << 10;

/// The redundancy summaries of the program's seven host buffers (A, B, C, D, E, S, R), in
/// allocation order.
fn buffers(h: &MemHistory) -> Vec<Option<Redundancy>> {
    let items = h.allocations().map(|a| (a.size(), a.redundancy().copied()));
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

#[test]
fn redundant_copies_are_reported_exactly_in_full_and_sampled_mode() {
    let s = Setup::new();
    let exe = s.build_driver("redundant_copies.c", &[]);
    let plain = s.run_plain(&exe, &[]);
    assert_ok(&plain, "plain run");
    // (mode, check fraction, B's redundant uploads, measured false "redundant" verdicts)
    for (mode, check, b_redundant, false_same) in [
        ("full", "0.0625", 1, Some(2)),
        ("sampled", "0", 3, None),
        ("sampled", "1", 1, Some(2)),
    ] {
        let what = format!("{mode} check {check}");
        let run = s.run_recorded(
            &exe,
            &["--fingerprint", mode, "--fingerprint-check", check],
            &format!("redundant-{mode}-{check}.bin"),
        );
        assert_same_stdout(&run.out, &plain, &what);
        let h = &run.history;
        let b = buffers(h);
        assert_eq!(counts(&b[0]), (5, 3, 0, 0), "{what}: A");
        assert_eq!(counts(&b[1]), (5, b_redundant, 1, 0), "{what}: B");
        assert_eq!(counts(&b[2]), (3, 1, 0, 0), "{what}: C");
        assert_eq!(counts(&b[3]), (2, 1, 0, 0), "{what}: D");
        assert_eq!(counts(&b[4]), (1, 0, 0, 0), "{what}: E");
        assert_eq!(counts(&b[5]), (2, 0, 0, 0), "{what}: S");
        assert_eq!(counts(&b[6]), (0, 0, 3, 1), "{what}: R");
        let a = b[0].unwrap();
        assert_eq!(a.device_held, 3, "{what}");
        assert_eq!(a.redundant_upload_bytes, 3 * MIB, "{what}");
        assert_eq!(a.first_upload, Some((2, 1)), "{what}: upload #2 repeats #1");
        let d = b[3].unwrap();
        assert_eq!(d.device_held, 0, "{what}: dX was overwritten by E");
        assert_eq!(d.first_upload, Some((2, 1)), "{what}");
        assert_eq!(b[6].unwrap().first_download, Some((2, 1)), "{what}");
        let st = h.fingerprint_stats();
        assert_eq!(st.mode(), FingerprintMode::parse(mode).unwrap(), "{what}");
        assert_eq!((st.uploads, st.downloads, st.skipped), (18, 4, 0), "{what}");
        match false_same {
            Some(n) => {
                assert!(st.checked >= 11, "{what}: {st:?}");
                assert_eq!(st.sampled_false_same, n, "{what}: {st:?}");
                assert_eq!(st.sampled_false_differ, 0, "{what}: {st:?}");
            }
            None => assert_eq!((st.checked, st.full_hashes), (0, 0), "{what}: {st:?}"),
        }
    }
    // The report's REDUNDANT TRANSFERS section, in words and in JSON (full mode's history).
    let hist = s.path("redundant-full-0.0625.bin");
    let report = |json: bool| {
        let mut c = s.libs.command(pinwise());
        c.arg("report").arg(&hist).arg("--quiet");
        if json {
            c.arg("--json");
        }
        clean_env(&mut c);
        let out = c.output().expect("run pinwise report");
        assert_ok(&out, "report");
        String::from_utf8(out.stdout).unwrap()
    };
    let text = report(false);
    let section = &text[text
        .find("REDUNDANT TRANSFERS")
        .unwrap_or_else(|| panic!("no section:\n{text}"))..];
    for want in [
        "6 of 18 uploads",
        "1 of 4 downloads",
        "fingerprints: full",
        "keep it on the device: upload #2 is identical to upload #1",
        "upload once: upload #2 is identical to upload #1",
        "fetch it once, or only when it changes: download #2 is identical to download #1",
        "false-positive rate",
    ] {
        assert!(section.contains(want), "{want:?} missing in:\n{section}");
    }
    let json: serde_json::Value = serde_json::from_str(&report(true)).unwrap();
    let r = &json["redundant"];
    assert_eq!(r["mode"], "full");
    assert_eq!(r["redundant_uploads"], 6);
    assert_eq!(r["redundant_downloads"], 1);
    assert_eq!(r["sampled_false_positives"], 2);
    assert!(r["wasted_ns"].as_f64().unwrap() > 0.0);
    assert_eq!(r["allocations"].as_array().unwrap().len(), 5);

    // The HTML page has the section, its table and its plot.
    let page = s.path("report.html");
    let mut c = s.libs.command(pinwise());
    c.arg("report")
        .arg(&hist)
        .arg("--quiet")
        .arg("-o")
        .arg(&page);
    clean_env(&mut c);
    assert_ok(&c.output().unwrap(), "html report");
    let html = std::fs::read_to_string(&page).unwrap();
    let at = html.find("Redundant transfers").expect("the HTML section");
    let rest = &html[at..];
    assert!(
        rest.contains("keep it on the device"),
        "advice in the table"
    );
    assert!(
        rest.contains("redundant: the other side had these bytes"),
        "the plot's legend"
    );

    // The Perfetto export names the redundancy on the allocation's slice.
    let timeline = s.path("timeline.json");
    let mut c = s.libs.command(pinwise());
    c.arg("export").arg(&hist).arg("-o").arg(&timeline);
    clean_env(&mut c);
    assert_ok(&c.output().unwrap(), "export");
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&timeline).unwrap()).unwrap();
    let flagged: Vec<&serde_json::Value> = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["args"]["redundant"].is_object())
        .collect();
    assert_eq!(flagged.len(), 5, "A, B, C, D and R's slices");
    assert!(flagged
        .iter()
        .any(|e| e["args"]["redundant"]["redundant_uploads"] == 3
            && e["args"]["redundant"]["advice"]
                .as_str()
                .unwrap()
                .starts_with("keep it on the device")));

    let run = s.run_recorded(&exe, &["--fingerprint", "off"], "redundant-off.bin");
    assert_same_stdout(&run.out, &plain, "off");
    assert!(buffers(&run.history).iter().all(Option::is_none), "off");
    assert_eq!(run.history.fingerprint_stats().mode(), FingerprintMode::Off);
}
