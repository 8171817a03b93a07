//! Bounded fuzz runs of the readers of untrusted files: binary and JSON histories, profiles,
//! calibrations (see `pinwise_testkit::fuzz`: seeds in `fuzz/corpus/<target>/`, regressions
//! in `fuzz/regressions/<target>/`, `PINWISE_FUZZ_SECONDS` per target). Each asserts that no
//! input makes a reader panic or hang, and that the run tried more than its seeds.

use pinwise_core::format::{binary, load_history_bytes};
use pinwise_core::{CostModel, Profile};
use pinwise_testkit::fuzz;

fn check(run: fuzz::FuzzRun) {
    assert!(run.seeds > 0);
    assert!(
        run.inputs > run.seeds as u64,
        "{run:?}: no mutated input was tried"
    );
}

#[test]
fn fuzz_binary_history() {
    check(fuzz::run("binary_history", |b| {
        let _ = binary::read_salvaging(b);
        let _ = load_history_bytes(b);
    }));
}

#[test]
fn fuzz_json_history() {
    check(fuzz::run("json_history", |b| {
        let _ = load_history_bytes(b);
    }));
}

#[test]
fn fuzz_profile() {
    check(fuzz::run("profile", |b| {
        let _ = Profile::from_json_bytes(b);
    }));
}

#[test]
fn a_calibration_that_is_a_device_is_refused_without_reading_it() {
    let e = CostModel::from_csv_file("/dev/zero")
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a regular file"), "{e}");
}

#[test]
fn fuzz_calibration() {
    check(fuzz::run("calibration", |b| {
        let _ = CostModel::from_csv_str(&String::from_utf8_lossy(b), "fuzz");
    }));
}

/// The seed corpus: synthetic histories (binary and JSON), their profiles and the built-in
/// calibration. Each seed must read back as what it was made from, and the seeds kept in the
/// repository (`fuzz/corpus/<target>/synth-*`) must still be read by today's readers. With
/// `PINWISE_WRITE_CORPUS=1` the test also (re)writes them into the repository.
#[test]
fn seed_corpus_reads_back() {
    use pinwise_core::synth::{SynthConfig, SynthEvents};
    use pinwise_core::{HistoryConfig, MemHistory};
    let write = std::env::var_os("PINWISE_WRITE_CORPUS").is_some_and(|v| v == "1");
    let scratch = tempfile::tempdir().unwrap();
    let repo = fuzz::fuzz_dir().join("corpus");
    let dir = if write {
        repo.clone()
    } else {
        scratch.path().to_path_buf()
    };
    let put = |target: &str, name: &str, bytes: &[u8]| {
        let d = dir.join(target);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(name), bytes).unwrap();
    };
    for (i, (allocations, events)) in [(3, 20), (12, 120), (40, 400)].into_iter().enumerate() {
        let mut h = MemHistory::new(HistoryConfig::default());
        let modules = h.modules();
        for e in SynthEvents::new(
            SynthConfig {
                seed: i as u64 + 1,
                allocations,
                events,
                live_window: 8,
                ..SynthConfig::default()
            },
            &modules,
        ) {
            h.ingest(&e);
        }
        put(
            "binary_history",
            &format!("synth-{i}.bin"),
            &binary::to_bytes(&h),
        );
        let mut json = Vec::new();
        pinwise_core::format::json::write(&h, &mut json).unwrap();
        put("json_history", &format!("synth-{i}.json"), &json);
        for bytes in [binary::to_bytes(&h), json] {
            let back = load_history_bytes(&bytes).unwrap();
            assert_eq!(back.len(), h.len(), "seed {i} reads back whole");
        }
        let profile = Profile::from_history(&h);
        let p = dir.join("profile").join(format!("synth-{i}.json"));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        profile.save(&p).unwrap();
        Profile::from_json_bytes(&std::fs::read(&p).unwrap()).unwrap();
    }
    put(
        "calibration",
        "builtin.csv",
        CostModel::builtin().to_csv().as_bytes(),
    );
    CostModel::from_csv_str(&CostModel::builtin().to_csv(), "builtin").unwrap();
    // The seeds kept in the repository are still valid inputs.
    let mut kept = 0;
    for target in ["binary_history", "json_history", "profile"] {
        for entry in std::fs::read_dir(repo.join(target)).unwrap() {
            let path = entry.unwrap().path();
            if !path
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("synth-")
            {
                continue;
            }
            let bytes = std::fs::read(&path).unwrap();
            let ok = if target == "profile" {
                Profile::from_json_bytes(&bytes).is_ok()
            } else {
                load_history_bytes(&bytes).is_ok()
            };
            assert!(ok, "{} no longer reads", path.display());
            kept += 1;
        }
    }
    assert!(
        kept >= 9,
        "the repository keeps the synthetic seeds ({kept} found)"
    );
}
