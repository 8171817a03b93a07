//! `bench alloc` itself, on the mock backend (a test fixture): it runs every strategy,
//! interleaved, counts what each pins, and writes its CSV, markdown and SVG, labelled as
//! fixture output. (Its timings here mean nothing and are not checked.)

use std::sync::Arc;

use pinwise_alloc::testing::MockBackend;
use pinwise_bench::{self as bench, BenchConfig, MockDevice, StrategyKind, Summary};
use pinwise_core::{CostModel, Policy};

const MIB: usize = 1 << 20;

fn config() -> BenchConfig {
    BenchConfig {
        sizes: vec![4096, 256 << 10, 4 * MIB],
        repeats: 2,
        target_hot_bytes: 64 * MIB as u64,
        min_iterations: 3,
        max_iterations: 8,
        ..BenchConfig::standard(Policy::new(CostModel::builtin()))
    }
}

#[test]
fn runs_every_strategy_and_writes_labelled_outputs() {
    let mock = Arc::new(MockBackend::new());
    let device = MockDevice(mock.clone());
    let cfg = config();
    let mut seen = 0;
    let report = bench::run(&cfg, &device, &mut |p| {
        assert!(p.done <= p.total);
        seen += 1;
    })
    .unwrap();
    assert!(report.fixture);
    assert_eq!(report.rows.len(), 3 * 2 * StrategyKind::ALL.len());
    assert!(seen > report.rows.len());

    let s = Summary::of(&report);
    let row = |size: usize, k: StrategyKind| {
        s.rows
            .iter()
            .find(|r| r.size == size && r.strategy == k)
            .unwrap()
            .clone()
    };
    let hot_set = cfg.hot_working_set(4 * MIB);
    // What each strategy pins, at 4 MiB.
    assert_eq!(row(4 * MIB, StrategyKind::Pageable).peak_pinned, 0);
    assert_eq!(
        row(4 * MIB, StrategyKind::PinEach).peak_pinned,
        4 * 4 * MIB as u64
    );
    assert_eq!(
        row(4 * MIB, StrategyKind::CachingPool).peak_pinned,
        4 * 4 * MIB as u64
    );
    assert_eq!(
        row(4 * MIB, StrategyKind::Smart).peak_pinned,
        hot_set,
        "smart pins exactly the hot buffers"
    );
    assert!(row(4 * MIB, StrategyKind::SmartTightBudget).peak_pinned <= hot_set * 11 / 10);
    // At 4 KiB nothing pays: smart pins nothing.
    assert_eq!(row(4096, StrategyKind::Smart).peak_pinned, 0);
    // Hot bytes are counted: 2 buffers x 8 round trips x 2 directions per iteration.
    let r = report
        .rows
        .iter()
        .find(|r| r.size == 4 * MIB && r.strategy == StrategyKind::Pageable)
        .unwrap();
    assert_eq!(r.hot_bytes, (r.iterations * 2 * 8 * 2 * 4 * MIB) as u64);
    assert_eq!(r.allocations, (r.iterations * 4) as u64);
    assert_eq!(s.verdicts.len(), 3);

    let dir = tempfile::tempdir().unwrap();
    let files =
        bench::write_all(&report, dir.path(), "pinwise bench alloc (test)", "today").unwrap();
    assert_eq!(files.len(), 4);
    let md = std::fs::read_to_string(dir.path().join("alloc.md")).unwrap();
    assert!(md.contains("TEST FIXTURE RUN"), "{md}");
    assert!(md.contains("| 4 MiB |"));
    assert!(md.contains("Verdicts"));
    let csv = std::fs::read_to_string(dir.path().join("alloc-runs.csv")).unwrap();
    assert!(csv.lines().next().unwrap().contains("TEST FIXTURE"));
    assert_eq!(csv.lines().count(), 2 + report.rows.len());
    let svg = std::fs::read_to_string(dir.path().join("alloc.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("TEST FIXTURE"));
    assert_eq!(
        mock.pinned_bytes(),
        0,
        "every strategy released what it pinned"
    );
    if let Some(keep) = std::env::var_os("PINWISE_KEEP_BENCH_OUTPUT") {
        for f in files {
            std::fs::copy(&f, std::path::Path::new(&keep).join(f.file_name().unwrap())).unwrap();
        }
    }
}

/// Mixed sizes, two iterations (what the time budget leaves at large sizes): smart pins
/// exactly the hot working set. A hot buffer the profile advises pageable is promoted in
/// its first iteration and adopted by the pool when freed; in the second it must reuse that
/// block, not take a new mapping and promote it again (which held 1.33x the hot set).
#[test]
fn smart_pins_the_hot_working_set_with_mixed_sizes_and_few_iterations() {
    for size in [4 * MIB, 64 * MIB] {
        let mock = Arc::new(MockBackend::new());
        let device = MockDevice(mock.clone());
        let cfg = BenchConfig {
            sizes: vec![size],
            repeats: 1,
            hot_buffers: 2,
            cold_buffers: 4,
            round_trips: 2,
            mixed_sizes: true,
            min_iterations: 2,
            max_iterations: 2,
            strategies: vec![StrategyKind::Smart, StrategyKind::Adaptive],
            ..BenchConfig::standard(Policy::new(CostModel::builtin()))
        };
        let report = bench::run(&cfg, &device, &mut |_| {}).unwrap();
        let hot_set = cfg.hot_working_set(size);
        assert_eq!(
            hot_set,
            (size + size / 2) as u64,
            "roles 0 and 1: 4/4 and 2/4"
        );
        for r in &report.rows {
            assert_eq!(r.iterations, 2);
            assert_eq!(r.peak_pinned, hot_set, "{:?} at {size}", r.strategy);
        }
    }
}

/// The matrix re-plans a cell after its first repeat: every later run (pin-each's aside)
/// makes the iterations that bring the first repeat's fastest measured run to the floor
/// (the mock is far faster than the built-in table's estimate, so they are raised), and
/// the report counts the cell as re-planned.
#[test]
fn the_matrix_replans_later_repeats_from_the_first_measured_runs() {
    use bench::matrix::{self, MatrixConfig, MatrixSummary, DEFAULT_SHAPES};
    let mut cfg = MatrixConfig::quick(Policy::new(CostModel::builtin()));
    cfg.sizes = vec![4096];
    cfg.shapes = vec![DEFAULT_SHAPES[0]];
    cfg.repeats = 3;
    cfg.time_budget_s = None;
    cfg.min_run_s = 0.02;
    cfg.max_iterations = 1 << 16;
    let device = MockDevice(Arc::new(MockBackend::new()));
    let report = matrix::run(&cfg, &device, &mut |_| {}, &mut |_| {}).unwrap();
    let runs = |repeat: usize| {
        report
            .rows
            .iter()
            .filter(move |r| r.run.repeat == repeat && r.run.strategy != StrategyKind::PinEach)
    };
    let first = runs(0).map(|r| r.run.iterations).max().unwrap();
    let fastest = runs(0)
        .map(|r| r.run.total_ns as f64)
        .fold(f64::INFINITY, f64::min);
    let want = matrix::replanned(first, fastest, cfg.min_run_s * 1e9);
    assert!(
        want > first,
        "{first} iterations ran {fastest} ns on the mock"
    );
    for repeat in 1..3 {
        assert!(
            runs(repeat).all(|r| r.run.iterations == want),
            "{:?}",
            report.rows
        );
    }
    let pin_each = |repeat: usize| {
        report
            .rows
            .iter()
            .find(|r| r.run.repeat == repeat && r.run.strategy == StrategyKind::PinEach)
            .map(|r| r.run.iterations)
            .unwrap()
    };
    assert!(pin_each(1) >= pin_each(0) && pin_each(1) <= want);
    let s = MatrixSummary::of(&report);
    assert_eq!(s.lengths.replanned_cells, 1);
    assert_eq!(s.lengths.runs, 3 * 4);
    assert_eq!(s.cells[0].iterations, want);
}
