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

/// Writes the seed corpus (run once by hand: `cargo test -p pinwise-core --test fuzz --
/// --ignored`); the files are kept in the repository.
#[test]
#[ignore]
fn write_seed_corpus() {
    use pinwise_core::synth::{SynthConfig, SynthEvents};
    use pinwise_core::{HistoryConfig, MemHistory};
    let dir = fuzz::fuzz_dir().join("corpus");
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
        let profile = Profile::from_history(&h);
        let p = dir.join("profile").join(format!("synth-{i}.json"));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        profile.save(&p).unwrap();
    }
    put(
        "calibration",
        "builtin.csv",
        CostModel::builtin().to_csv().as_bytes(),
    );
}
