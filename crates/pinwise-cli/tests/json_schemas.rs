//! Every JSON output of the `pinwise` command validates against its published schema
//! (`schemas/` at the repository root) and names its format and version.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn pinwise(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pinwise"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run pinwise")
}

/// Fails with every error when `doc` does not follow `schemas/<name>.schema.json`.
fn assert_valid(name: &str, doc: &Value) {
    let path = repo().join(format!("schemas/{name}.schema.json"));
    let schema: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema)
        .unwrap_or_else(|e| panic!("{}: the schema does not compile: {e}", path.display()));
    let errors: Vec<String> = validator
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{name}: {errors:#?}");
    assert!(
        doc["format"]
            .as_str()
            .is_some_and(|f| f.starts_with("pinwise-")),
        "{name}: no format"
    );
    assert!(doc["version"].as_u64().is_some(), "{name}: no version");
}

fn json_of(o: &Output) -> Value {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("JSON on stdout")
}

/// A synthetic history (not a measurement) with transfers in both directions.
fn history(dir: &Path, seed: u64, format: pinwise_core::DumpFormat) -> PathBuf {
    use pinwise_core::synth::{SynthConfig, SynthEvents};
    use pinwise_core::{HistoryConfig, MemHistory};
    let mut h = MemHistory::new(HistoryConfig::default());
    let modules = h.modules();
    let cfg = SynthConfig {
        seed,
        allocations: 300,
        events: 3000,
        live_window: 40,
        ..SynthConfig::default()
    };
    for e in SynthEvents::new(cfg, &modules) {
        h.ingest(&e);
    }
    let path = dir.join(format!(
        "h{seed}.{}",
        if format == pinwise_core::DumpFormat::Json {
            "json"
        } else {
            "bin"
        }
    ));
    pinwise_core::save_history(&h, &path, format).unwrap();
    path
}

/// Any object in `v` that is an array of arrays (a positional record) fails the test.
fn assert_no_positional_arrays(name: &str, v: &Value, at: &str) {
    match v {
        Value::Array(items) => {
            assert!(
                !items.iter().any(Value::is_array),
                "{name}: positional array at {at}"
            );
            for (i, x) in items.iter().enumerate() {
                assert_no_positional_arrays(name, x, &format!("{at}/{i}"));
            }
        }
        Value::Object(m) => {
            for (k, x) in m {
                assert_no_positional_arrays(name, x, &format!("{at}/{k}"));
            }
        }
        _ => {}
    }
}

#[test]
fn report_and_diff_json_follow_their_schemas() {
    let dir = tempfile::tempdir().unwrap();
    let bin = history(dir.path(), 1, pinwise_core::DumpFormat::Binary);
    let json = history(dir.path(), 2, pinwise_core::DumpFormat::Json);
    for h in [&bin, &json] {
        let report = json_of(&pinwise(&[
            "report",
            h.to_str().unwrap(),
            "--json",
            "--quiet",
        ]));
        assert_valid("report", &report);
        assert_eq!(report["format"], "pinwise-report");
        assert_no_positional_arrays("report", &report, "");
        // The report's hot rows name kinds and states in snake_case.
        let kinds: Vec<&str> = report["hotspots"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["kind"].as_str().unwrap())
            .collect();
        assert!(!kinds.is_empty());
        assert!(kinds
            .iter()
            .all(|k| k.chars().all(|c| c.is_ascii_lowercase() || c == '_')));
    }
    // A profile too, as diff's input.
    let profile = dir.path().join("p.json");
    pinwise_core::Profile::from_history(&pinwise_core::load_history(&bin).unwrap())
        .save(&profile)
        .unwrap();
    for (a, b) in [(&bin, &json), (&profile, &bin)] {
        let d = json_of(&pinwise(&[
            "diff",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "--json",
            "--quiet",
        ]));
        assert_valid("diff", &d);
        assert_no_positional_arrays("diff", &d, "");
    }
}

#[test]
fn a_binary_history_converted_to_json_follows_the_history_schema() {
    let dir = tempfile::tempdir().unwrap();
    let bin = history(dir.path(), 3, pinwise_core::DumpFormat::Binary);
    let h = json_of(&pinwise(&[
        "convert",
        bin.to_str().unwrap(),
        "-o",
        "-",
        "--quiet",
    ]));
    assert_valid("history", &h);
    assert_eq!(h["format"], "pinwise-history");
    assert_eq!(h["allocations"].as_array().map(Vec::len), Some(300));
}

#[test]
fn doctor_json_follows_its_schema() {
    // Its exit status says whether pinwise can run here; the JSON is printed either way.
    let o = pinwise(&["doctor", "--json", "--no-bpf"]);
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_valid("doctor", &doc);
    assert_eq!(doc["format"], "pinwise-doctor");
}

#[test]
fn run_summary_json_follows_its_schema() {
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("run.json");
    // python3 runs its exit handlers, so the preload library writes its statistics.
    let o = pinwise(&[
        "run",
        "--stats-json",
        summary.to_str().unwrap(),
        "--",
        "python3",
        "-c",
        "print(1)",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc: Value = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    assert_valid("run-summary", &doc);
    assert_eq!(doc["processes"].as_array().unwrap().len(), 1, "{doc}");
}

#[test]
fn a_profile_written_by_pinwise_run_follows_its_schema() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("p.json");
    // python3's large allocations go through the preload library's malloc hook: the profile
    // has entries even without CUDA.
    let o = pinwise(&[
        "run",
        "--mode",
        "profile",
        "--profile",
        profile.to_str().unwrap(),
        "--",
        "python3",
        "-c",
        "b = bytearray(1 << 20); print(len(b))",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc: Value = serde_json::from_slice(&std::fs::read(&profile).unwrap()).unwrap();
    assert_valid("profile", &doc);
    assert_eq!(doc["format"], "pinwise-profile");
    assert!(
        doc["entries"].as_array().is_some_and(|e| !e.is_empty()),
        "{doc}"
    );
    // The same document with an entry's kind misspelt does not.
    let mut bad = doc.clone();
    bad["entries"][0]["kind"] = "pageable".into();
    let schema: Value =
        serde_json::from_slice(&std::fs::read(repo().join("schemas/profile.schema.json")).unwrap())
            .unwrap();
    assert!(!jsonschema::validator_for(&schema).unwrap().is_valid(&bad));
}

#[test]
fn a_broken_output_fails_its_schema() {
    // The check can fail: a report missing its format, or with a positional bucket, does.
    let dir = tempfile::tempdir().unwrap();
    let h = history(dir.path(), 3, pinwise_core::DumpFormat::Binary);
    let mut report = json_of(&pinwise(&[
        "report",
        h.to_str().unwrap(),
        "--json",
        "--quiet",
    ]));
    let schema: Value =
        serde_json::from_slice(&std::fs::read(repo().join("schemas/report.schema.json")).unwrap())
            .unwrap();
    let v = jsonschema::validator_for(&schema).unwrap();
    assert!(v.is_valid(&report));
    report["plots"]["traffic"]["buckets"] = serde_json::json!([[1, 2, 3, 4]]);
    assert!(!v.is_valid(&report));
    report.as_object_mut().unwrap().remove("format");
    assert!(!v.is_valid(&report));
}
