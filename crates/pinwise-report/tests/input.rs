//! Reading inputs: both dump formats, profiles, and clear errors on bad files.
mod common;

use common::*;
use pinwise_core::profile::Profile;
use pinwise_core::{save_history, DumpFormat};
use pinwise_report::input::sniff;
use pinwise_report::{load_any, load_history, InputKind, Loaded, Progress, ReportError};

#[test]
fn binary_and_json_histories_and_profiles_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let s = scenario();
    let bin = dir.path().join("h.bin");
    let json = dir.path().join("h.json");
    let prof = dir.path().join("p.json");
    save_history(&s.history, &bin, DumpFormat::Binary).unwrap();
    save_history(&s.history, &json, DumpFormat::Json).unwrap();
    Profile::from_history(&s.history).save(&prof).unwrap();
    let mut progress = Progress::hidden();
    let (h, info) = load_history(&bin, &mut progress).unwrap();
    assert_eq!(info.kind, InputKind::BinaryHistory);
    assert_eq!(info.file_bytes, std::fs::metadata(&bin).unwrap().len());
    assert_eq!(h.len(), s.history.len());
    let (h, info) = load_history(&json, &mut progress).unwrap();
    assert_eq!(info.kind, InputKind::JsonHistory);
    assert_eq!(h.len(), s.history.len());
    match load_any(&prof, &mut progress).unwrap() {
        (Loaded::Profile(p), info) => {
            assert_eq!(info.kind, InputKind::Profile);
            assert_eq!(
                p.entries.len(),
                Profile::from_history(&s.history).entries.len()
            );
        }
        (other, _) => panic!("a profile read as {other:?}"),
    }
    assert!(!progress.is_shown(), "small files show no progress bar");
}

#[test]
fn a_truncated_history_is_salvaged_and_says_where_it_was_cut() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("cut.bin");
    let history = scenario().history;
    let bytes = pinwise_core::format::binary::to_bytes(&history);
    std::fs::write(&bin, &bytes[..bytes.len() - 40]).unwrap();
    // The records frame is whole: every record is kept; the statistics frame is lost.
    let (h, info) = load_history(&bin, &mut Progress::hidden()).unwrap();
    assert_eq!(h.len(), history.len());
    let note = info.salvaged.expect("a salvage note");
    assert!(
        note.contains("the file was cut: 3 whole frames salvaged"),
        "{note}"
    );
    assert!(note.contains("truncated at byte"), "{note}");
    // A corrupt file is still an error naming the file and the offset.
    let mut bad = bytes.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    std::fs::write(&bin, &bad).unwrap();
    let err = load_history(&bin, &mut Progress::hidden()).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ReportError::Format(_)), "{err:?}");
    assert!(msg.contains(&bin.display().to_string()), "{msg}");
    assert!(msg.contains("corrupt at byte"), "{msg}");
}

#[test]
fn figures_that_contradict_each_other_are_flagged() {
    let sound = scenario().history;
    assert!(pinwise_report::health::contradictions(&sound).is_empty());
    // A JSON history with an impossible size and statistics smaller than its contents.
    let mut json = Vec::new();
    pinwise_core::format::json::write(&sound, &mut json).unwrap();
    let mut v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    v["allocations"][0]["size"] = serde_json::json!(u64::MAX);
    v["stats"]["events_ingested"] = serde_json::json!(0);
    let forged = pinwise_core::format::load_history_bytes(&serde_json::to_vec(&v).unwrap())
        .expect("the forged history loads");
    let found = pinwise_report::health::contradictions(&forged);
    assert!(
        found
            .iter()
            .any(|c| c.contains("larger than any host memory")),
        "{found:?}"
    );
    assert!(found.iter().any(|c| c.contains("ingested")), "{found:?}");
}

#[test]
fn a_corrupt_json_history_names_the_place() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bad.json");
    let text = pinwise_core::format::json::to_string(&scenario().history);
    std::fs::write(
        &json,
        text.replacen("\"size\":", "\"size\":\"big\",\"x\":", 1),
    )
    .unwrap();
    let msg = load_history(&json, &mut Progress::hidden())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("bad.json") && msg.contains("allocations[0]"),
        "{msg}"
    );
}

#[test]
fn wrong_and_missing_files_are_said_so() {
    let dir = tempfile::tempdir().unwrap();
    let prof = dir.path().join("p.json");
    Profile::from_history(&scenario().history)
        .save(&prof)
        .unwrap();
    let err = load_history(&prof, &mut Progress::hidden()).unwrap_err();
    assert!(matches!(err, ReportError::WrongKind { .. }), "{err:?}");
    assert!(err.to_string().contains("this is a profile"), "{err}");
    let missing = dir.path().join("missing.bin");
    let err = load_history(&missing, &mut Progress::hidden()).unwrap_err();
    assert!(err.to_string().starts_with("cannot read "), "{err}");
    let empty = dir.path().join("empty.bin");
    std::fs::write(&empty, b"").unwrap();
    let err = load_history(&empty, &mut Progress::hidden()).unwrap_err();
    assert!(err.to_string().contains("empty"), "{err}");
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, b"hello").unwrap();
    let err = load_any(&text, &mut Progress::hidden()).unwrap_err();
    assert!(err.to_string().contains("not a pinwise file"), "{err}");
}

#[test]
fn sniffing_tells_the_kinds_apart() {
    assert_eq!(
        sniff(&pinwise_core::format::BINARY_MAGIC),
        InputKind::BinaryHistory
    );
    assert_eq!(
        sniff(b"  {\"format\":\"pinwise-history\"}"),
        InputKind::JsonHistory
    );
    assert_eq!(
        sniff(b"{\"format\":\"pinwise-profile\",\"version\":1}"),
        InputKind::Profile
    );
}

#[test]
fn a_large_file_shows_the_progress_bar() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.bin");
    // A file past the size that shows the bar from the start (a valid dump padded with
    // junk: the bar shows while reading, then decoding says what is wrong).
    let bytes = pinwise_core::format::binary::to_bytes(&scenario().history);
    let mut padded = bytes.clone();
    padded.resize(
        pinwise_report::progress::LARGE_FILE_BYTES as usize + 1,
        0xff,
    );
    std::fs::write(&big, &padded).unwrap();
    let mut progress = Progress::new(true);
    let err = load_history(&big, &mut progress).unwrap_err();
    assert!(progress.is_shown());
    assert!(err.to_string().contains("big.bin"), "{err}");
}
