//! `bench alloc` and `calibrate` on the CPU stand-in for libcuda.so.1 (a TEST FIXTURE:
//! device memory is host memory, pinning is mlock). Nothing here measures time.

use std::sync::Arc;

use pinwise_alloc::backend::cuda::CudaBackend;
use pinwise_alloc::PinBackend;
use pinwise_bench::calibrate::{calibrate, CalibrationConfig};
use pinwise_bench::{self as bench, BenchConfig, CudaDevice, StrategyKind, Summary};
use pinwise_core::{CostModel, Policy};
use pinwise_cuda::Driver;
use pinwise_testkit::StandinLibs;

const KIB: usize = 1024;
const MIB: usize = 1 << 20;

fn standin() -> (StandinLibs, Arc<CudaBackend>) {
    let libs = StandinLibs::new();
    let driver = Arc::new(Driver::load_from(&libs.libcuda()).expect("load the stand-in"));
    let backend = CudaBackend::on_device(&driver, 0).expect("stand-in device 0");
    assert!(backend.is_fixture(), "{}", backend.describe());
    (libs, Arc::new(backend))
}

/// `bench alloc` and `calibrate` run through the real driver path on the stand-in, and
/// label what they produce as TEST FIXTURE output. (Their timings are not looked at.)
#[test]
fn bench_and_calibration_run_on_the_standin_and_say_fixture() {
    if !pinwise_testkit::require_locked_memory(
        "bench_and_calibration_run_on_the_standin_and_say_fixture",
        16 * MIB as u64,
    ) {
        return;
    }
    let (_libs, backend) = standin();
    let device = CudaDevice::new(backend.clone());
    let cfg = BenchConfig {
        sizes: vec![64 * KIB, MIB],
        repeats: 1,
        target_hot_bytes: 16 * MIB as u64,
        min_iterations: 2,
        max_iterations: 4,
        ..BenchConfig::standard(Policy::new(CostModel::builtin()))
    };
    let report = bench::run(&cfg, &device, &mut |_| {}).unwrap();
    assert!(report.fixture);
    assert_eq!(report.rows.len(), 2 * StrategyKind::ALL.len());
    let s = Summary::of(&report);
    let md = bench::markdown(&report, &s, "test", "today");
    assert!(md.contains("TEST FIXTURE RUN"));
    let smart = s
        .rows
        .iter()
        .find(|r| r.size == MIB && r.strategy == StrategyKind::Smart)
        .unwrap();
    assert_eq!(
        smart.peak_pinned,
        cfg.hot_working_set(MIB),
        "smart pins the hot buffers only"
    );

    let model = calibrate(
        &CalibrationConfig {
            write_before_upload: false,
            sizes: vec![4 * KIB, MIB],
            repeats: 2,
            min_bytes_per_figure: MIB,
        },
        &device,
        &mut |_| {},
    )
    .unwrap();
    assert!(
        model.source().contains("TEST FIXTURE"),
        "{}",
        model.source()
    );
    assert_eq!(model.points().len(), 2);
}
