//! `pinwise bench alloc`: the smart allocator against pageable memory, pinning everything
//! (`cuMemHostAlloc` per allocation) and a caching pinned pool (what PyTorch does), on the
//! seed's hot/cold workload. Writes CSV, a markdown table and an SVG plot.
//!
//! On the CPU stand-in for libcuda it runs (as a smoke test) and labels every output as
//! TEST FIXTURE numbers, not GPU figures.
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressStyle};
use pinwise_alloc::backend::cuda::CudaBackend;
use pinwise_alloc::bench::{self, BenchConfig, CudaDevice, StrategyKind, Summary};
use pinwise_alloc::PinBackend;
use pinwise_core::{CostModel, Policy};

use super::calibrate::parse_size;

/// Arguments of `pinwise bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    what: BenchWhat,
}

#[derive(Debug, clap::Subcommand)]
enum BenchWhat {
    /// The smart pinning allocator against pageable, pin-everything and a caching pool.
    Alloc(AllocArgs),
    /// One process's side of the pinned-pool benchmark (bench/gpu/pool/run.sh): staging
    /// pinned in-process, as shared memory registered per process, or in `pinwise pool`.
    Pool(super::bench_pool::PoolBenchArgs),
}

/// Arguments of `pinwise bench alloc`.
#[derive(Debug, clap::Args)]
struct AllocArgs {
    /// Buffer sizes, comma-separated (e.g. `4K,1M,256M`). Default: 4 KiB to 1 GiB in steps
    /// of 4 (`--quick`: 64K,1M,16M,256M).
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    sizes: Option<Vec<usize>>,
    /// Repeats of every (size, strategy); medians are reported. Default 3 (`--quick`: 1).
    #[arg(long)]
    repeats: Option<usize>,
    /// A short run: four sizes, one repeat, fewer iterations.
    #[arg(long)]
    quick: bool,
    /// Calibration file from `pinwise calibrate` (default: the built-in H200 calibration).
    #[arg(long)]
    calibration: Option<PathBuf>,
    /// Directory for alloc-runs.csv, alloc-summary.csv, alloc.md and alloc.svg.
    /// (`--out` is the older spelling.)
    #[arg(
        short,
        long = "output",
        alias = "out",
        default_value = "bench-results/alloc"
    )]
    out: PathBuf,
    /// Strategies to run, comma-separated (default: all): pageable, pin-each, caching-pool,
    /// smart-profile-run, smart, adaptive, smart-misaligned, smart-budget-1.1x.
    #[arg(long, value_delimiter = ',', value_parser = parse_strategy)]
    strategies: Option<Vec<StrategyKind>>,
    /// Pinned budget for pinwise's strategies (e.g. `8G`, `25%`; default a quarter of RAM).
    #[arg(long, value_parser = parse_size)]
    budget: Option<usize>,
    /// Hot buffers per iteration.
    #[arg(long, default_value_t = 2)]
    hot: usize,
    /// Cold buffers per iteration (the first is copied once, the others never).
    #[arg(long, default_value_t = 2)]
    cold: usize,
    /// Round trips of each hot buffer per iteration.
    #[arg(long, default_value_t = 8)]
    round_trips: usize,
    /// Hot bytes to move per run (sets the iterations per size), e.g. `16G`.
    #[arg(long, value_parser = parse_size)]
    target_bytes: Option<usize>,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
}

fn parse_strategy(s: &str) -> Result<StrategyKind, String> {
    StrategyKind::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = StrategyKind::ALL.iter().map(|k| k.name()).collect();
        format!("unknown strategy `{s}` (known: {})", names.join(", "))
    })
}

/// Runs `pinwise bench`.
pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    match args.what {
        BenchWhat::Alloc(a) => alloc(a),
        BenchWhat::Pool(a) => super::bench_pool::run(a),
    }
}

fn alloc(a: AllocArgs) -> anyhow::Result<ExitCode> {
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let costs = match &a.calibration {
        Some(p) => CostModel::from_csv_file(p)?,
        None => CostModel::builtin(),
    };
    let policy = Policy::new(costs);
    let mut config = if a.quick {
        BenchConfig::quick(policy)
    } else {
        BenchConfig::standard(policy)
    };
    if let Some(mut sizes) = a.sizes {
        if sizes.is_empty() {
            return Err(super::outputs::usage("--sizes is empty"));
        }
        sizes.sort_unstable();
        sizes.dedup();
        config.sizes = sizes;
    }
    if let Some(r) = a.repeats {
        config.repeats = r.max(1);
    }
    if let Some(s) = a.strategies {
        if s.is_empty() {
            return Err(super::outputs::usage("--strategies is empty"));
        }
        config.strategies = s;
    }
    if let Some(t) = a.target_bytes {
        config.target_hot_bytes = t as u64;
    }
    anyhow::ensure!(a.hot >= 1, "--hot must be at least 1");
    config.hot_buffers = a.hot;
    config.cold_buffers = a.cold;
    config.round_trips = a.round_trips.max(1);
    config.budget_bytes = a.budget.map(|b| b as u64);

    let driver = pinwise_cuda::Driver::shared()
        .context("pinwise bench alloc needs the CUDA driver (libcuda.so.1, or PINWISE_LIBCUDA)")?;
    let backend = Arc::new(
        CudaBackend::on_device(&driver, a.device)
            .with_context(|| format!("CUDA device {}", a.device))?,
    );
    if backend.is_fixture() {
        eprintln!(
            "note: {} -- every number below is a TEST FIXTURE number, not a GPU figure",
            backend.describe()
        );
    }
    let device = CudaDevice::new(backend.clone());
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} bench alloc [{bar:30}] {pos}/{len} {msg} ({elapsed})",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    let date = bench::utc_now();
    // Results are written after each size, so a run cut short keeps what it finished.
    let report = bench::run_with_checkpoints(
        &config,
        &device,
        &mut |p| {
            bar.set_length(p.total as u64);
            bar.set_position(p.done as u64);
            bar.set_message(p.label.clone());
        },
        &mut |partial| {
            if let Err(e) = bench::write_all(partial, &a.out, &command, &date) {
                bar.println(format!("warning: writing partial results: {e}"));
            }
        },
    )
    .map_err(|e| anyhow::anyhow!("bench alloc failed: {e}"))?;
    bar.finish_and_clear();
    let files = bench::write_all(&report, &a.out, &command, &date)
        .map_err(|e| anyhow::anyhow!("writing results: {e}"))?;
    let s = Summary::of(&report);
    if report.fixture {
        println!("TEST FIXTURE RUN on {} -- not GPU figures", report.device);
    }
    println!(
        "{:>8}  {:>14} {:>10} {:>10} {:>8}  {:>14}",
        "size", "best other", "its ms", "smart ms", "ratio", "pinned/hot set"
    );
    for v in &s.verdicts {
        println!(
            "{:>8}  {:>14} {:>10.2} {:>10.2} {:>8.3}  {:>14.3}",
            bench::human_size(v.size),
            v.best_other.name(),
            v.best_other_ms,
            v.smart_ms,
            v.time_ratio,
            v.pinned_ratio
        );
    }
    println!("{:.0} s; wrote:", report.wall_s);
    for f in files {
        println!("  {}", f.display());
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    //! `pinwise bench alloc` and `pinwise calibrate` as a user runs them, on the CPU
    //! stand-in for libcuda (a TEST FIXTURE): they run, and say their numbers are fixture
    //! numbers. Runs the `pinwise` binary built next to this test.
    use std::path::PathBuf;
    use std::process::Command;

    use pinwise_testkit::StandinLibs;

    fn pinwise_binary() -> Option<PathBuf> {
        let exe = std::env::current_exe().ok()?;
        let bin = exe.parent()?.parent()?.join("pinwise");
        bin.exists().then_some(bin)
    }

    fn binary_or_skip(test: &str) -> Option<PathBuf> {
        match pinwise_binary() {
            Some(b) => Some(b),
            None if pinwise_testkit::in_ci() => {
                panic!("{test}: the pinwise binary is not built (cargo build --workspace)")
            }
            None => {
                eprintln!(
                    "SKIPPED {test}: the pinwise binary is not built (cargo build --workspace)"
                );
                None
            }
        }
    }

    #[test]
    fn bench_alloc_and_calibrate_run_on_the_standin_and_say_fixture() {
        let test = "bench_alloc_and_calibrate_run_on_the_standin_and_say_fixture";
        let Some(bin) = binary_or_skip(test) else {
            return;
        };
        if !pinwise_testkit::require_locked_memory(test, 16 << 20) {
            return;
        }
        let libs = StandinLibs::new();
        let dir = tempfile::tempdir().unwrap();
        let out = libs
            .command(&bin)
            .args([
                "bench",
                "alloc",
                "--quick",
                "--sizes",
                "64K,1M",
                "--target-bytes",
                "16M",
            ])
            .arg("--out")
            .arg(dir.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("TEST FIXTURE RUN"), "{stdout}");
        for f in [
            "alloc-runs.csv",
            "alloc-summary.csv",
            "alloc.md",
            "alloc.svg",
        ] {
            let text = std::fs::read_to_string(dir.path().join(f)).unwrap();
            assert!(
                text.contains("TEST FIXTURE") || f == "alloc-summary.csv",
                "{f}"
            );
        }

        let cal = dir.path().join("cal.csv");
        let out = libs
            .command(&bin)
            .args(["calibrate", "--sizes", "4K,1M", "--repeats", "2", "--out"])
            .arg(&cal)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let csv = std::fs::read_to_string(&cal).unwrap();
        assert!(
            csv.starts_with("# pinwise calibration (source: TEST FIXTURE"),
            "{csv}"
        );
        // The calibration it wrote is accepted by bench alloc.
        let out = libs
            .command(&bin)
            .args([
                "bench",
                "alloc",
                "--sizes",
                "64K",
                "--repeats",
                "1",
                "--target-bytes",
                "1M",
            ])
            .args([
                "--strategies",
                "pageable,smart-profile-run,smart",
                "--calibration",
            ])
            .arg(&cal)
            .arg("--out")
            .arg(dir.path().join("again"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn bad_inputs_are_clear_errors() {
        let Some(bin) = binary_or_skip("bad_inputs_are_clear_errors") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad.csv");
        std::fs::write(&bad, "size_bytes,nonsense\n1,2\n").unwrap();
        let out = Command::new(&bin)
            .args(["bench", "alloc", "--calibration"])
            .arg(&bad)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("bad.csv") && err.contains("missing column"),
            "{err}"
        );

        let out = Command::new(&bin)
            .args(["bench", "alloc", "--quick"])
            .env("PINWISE_LIBCUDA", dir.path().join("no-libcuda.so.1"))
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("needs the CUDA driver") && err.contains("no-libcuda.so.1"),
            "{err}"
        );

        let out = Command::new(&bin)
            .args(["bench", "alloc", "--strategies", "fastest"])
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("unknown strategy `fastest`"));
    }
}
