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
use pinwise_alloc::autocal;
use pinwise_alloc::backend::cuda::CudaBackend;
use pinwise_alloc::PinBackend;
use pinwise_bench::calibrate::calibrate;
use pinwise_bench::matrix::{MatrixConfig, MatrixSummary};
use pinwise_bench::{self as bench, BenchConfig, CudaDevice, StrategyKind, Summary};
use pinwise_core::units::format_size_exact;
use pinwise_core::{CostModel, Policy};

use super::calibrate::parse_size_or_ram_percent_usize;

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
    #[arg(long, value_delimiter = ',', value_parser = parse_size_or_ram_percent_usize)]
    sizes: Option<Vec<usize>>,
    /// Repeats of every (size, strategy); medians are reported. Default 3 (`--quick`: 1).
    #[arg(long)]
    repeats: Option<usize>,
    /// A short run: four sizes, one repeat, fewer iterations.
    #[arg(long)]
    quick: bool,
    /// Calibration file from `pinwise calibrate`. Default: this GPU's automatic calibration
    /// (measured in a few seconds on first use, cached per GPU UUID in the user's cache
    /// directory or `$PINWISE_CACHE_DIR`); the built-in H200 table only when that fails.
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
    #[arg(long, value_parser = parse_size_or_ram_percent_usize)]
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
    #[arg(long, value_parser = parse_size_or_ram_percent_usize)]
    target_bytes: Option<usize>,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// Run the matrix of shapes (hot buffers 1-4, cold 0-8, round trips 1-16, mixed sizes)
    /// with pageable, pin-each, caching-pool, smart (use mode) and adaptive, and report per
    /// size the worst smart/best and adaptive/best over shapes (alloc-matrix.md, CSV).
    /// `--quick`: three sizes, three shapes, one repeat (for CI).
    #[arg(long, conflicts_with_all = ["hot", "cold", "round_trips", "strategies"])]
    matrix: bool,
    /// Wall-time budget (e.g. `5m`, `450s`; `0` for none): iterations are lowered, largest
    /// sizes first, and (matrix) the dearest cells left out, until the calibration's
    /// estimate fits. Default 5 minutes (`--quick`: 1 minute).
    #[arg(long, value_parser = parse_time_budget)]
    time_budget: Option<std::time::Duration>,
    /// (matrix) The least time every timed run of a cell is planned to last, as the
    /// calibration estimates it for the cell's fastest strategy (e.g. `100ms`, `0` for
    /// none): the time budget lowers iterations down to it, never below, and leaves cells
    /// out instead. Default 100 ms (`--quick`: none).
    #[arg(long, value_parser = parse_time_budget, requires = "matrix")]
    min_run: Option<std::time::Duration>,
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

/// A time budget: pinwise's duration grammar, or `0`/`none`/`off` for none.
fn parse_time_budget(s: &str) -> Result<std::time::Duration, String> {
    match s.trim() {
        "0" | "none" | "off" => Ok(std::time::Duration::ZERO),
        t => pinwise_core::units::parse_duration(t).map_err(|e| e.to_string()),
    }
}

/// `None` for a zero budget (no budget), else seconds.
fn budget_s(d: std::time::Duration) -> Option<f64> {
    (!d.is_zero()).then_some(d.as_secs_f64())
}

fn alloc(a: AllocArgs) -> anyhow::Result<ExitCode> {
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    // A calibration file that cannot be read is an error before the GPU is touched.
    let given = a
        .calibration
        .as_ref()
        .map(CostModel::from_csv_file)
        .transpose()?;
    let device = cuda_device(a.device)?;
    let costs = match given {
        Some(c) => c,
        None => automatic_calibration(&device),
    };
    let policy = Policy::new(costs);
    if a.matrix {
        return matrix(a, policy, &command, device);
    }
    let mut config = if a.quick {
        BenchConfig::quick(policy)
    } else {
        BenchConfig::standard(policy)
    };
    if let Some(sizes) = sorted_sizes(a.sizes)? {
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
    if let Some(t) = a.time_budget {
        config.time_budget_s = budget_s(t);
    } else if a.quick {
        config.time_budget_s = Some(60.0);
    }

    let bar = progress_bar("bench alloc");
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
            format_size_exact(v.size as u64),
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

/// The CUDA device for a benchmark (saying so when it is the CPU stand-in).
fn cuda_device(ordinal: usize) -> anyhow::Result<CudaDevice> {
    let driver = pinwise_cuda::Driver::shared()
        .context("pinwise bench alloc needs the CUDA driver (libcuda.so.1, or PINWISE_LIBCUDA)")?;
    let backend = Arc::new(
        CudaBackend::on_device(&driver, ordinal)
            .with_context(|| format!("CUDA device {ordinal}"))?,
    );
    if backend.is_fixture() {
        eprintln!(
            "note: {} -- every number below is a TEST FIXTURE number, not a GPU figure",
            backend.describe()
        );
    }
    Ok(CudaDevice::new(backend))
}

/// This GPU's calibration without `--calibration`: cached per GPU under the user's cache
/// directory, measured quickly on first use (announced once on stderr), the built-in table
/// only when that is impossible (and said). See [`pinwise_alloc::autocal`].
fn automatic_calibration(device: &CudaDevice) -> CostModel {
    let key = device.cuda_backend().gpu_key();
    let dir = autocal::cache_dir();
    let cached = match (&key, &dir) {
        (Some(k), Some(d)) => autocal::cache_file(d, k).exists(),
        _ => false,
    };
    let spinner = ProgressBar::new_spinner();
    if !cached {
        spinner.set_message("calibrating this GPU (first use; cached for next time)");
        spinner.enable_steady_tick(std::time::Duration::from_millis(120));
    }
    let r = autocal::resolve(key.as_deref(), dir.as_deref(), || {
        calibrate(&autocal::quick_config(), device, &mut |_| {}).map_err(|e| e.to_string())
    });
    spinner.finish_and_clear();
    if let Some(text) = r.announcement() {
        eprintln!("{text}");
    }
    // Reports name the calibration by how it was chosen.
    r.described_model()
}

/// `--sizes`, sorted and without repeats (`None`: not given); an empty list is a usage error.
fn sorted_sizes(sizes: Option<Vec<usize>>) -> anyhow::Result<Option<Vec<usize>>> {
    let Some(mut sizes) = sizes else {
        return Ok(None);
    };
    if sizes.is_empty() {
        return Err(super::outputs::usage("--sizes is empty"));
    }
    sizes.sort_unstable();
    sizes.dedup();
    Ok(Some(sizes))
}

fn progress_bar(what: &str) -> ProgressBar {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{{spinner}} {what} [{{bar:30}}] {{pos}}/{{len}} {{msg}} ({{elapsed}}, ~{{eta}} left)"
        ))
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar
}

/// `pinwise bench alloc --matrix`.
fn matrix(
    a: AllocArgs,
    policy: Policy,
    command: &str,
    device: CudaDevice,
) -> anyhow::Result<ExitCode> {
    let mut config = if a.quick {
        MatrixConfig::quick(policy)
    } else {
        MatrixConfig::standard(policy)
    };
    if let Some(sizes) = sorted_sizes(a.sizes)? {
        config.sizes = sizes;
    }
    if let Some(r) = a.repeats {
        config.repeats = r.max(1);
    }
    if let Some(t) = a.target_bytes {
        config.target_hot_bytes = t as u64;
    }
    if let Some(t) = a.time_budget {
        config.time_budget_s = budget_s(t);
    }
    if let Some(m) = a.min_run {
        config.min_run_s = m.as_secs_f64();
    }
    config.budget_bytes = a.budget.map(|b| b as u64);
    let (_, estimate) = config.planned_iterations();
    eprintln!(
        "bench alloc --matrix: {} sizes x {} shapes x {} repeats x 5 strategies; estimated {:.0} s from the calibration ({})",
        config.sizes.len(),
        config.shapes.len(),
        config.repeats,
        estimate,
        config.policy.cost_model().source()
    );
    let bar = progress_bar("bench alloc --matrix");
    let date = bench::utc_now();
    let report = bench::matrix::run(
        &config,
        &device,
        &mut |p| {
            bar.set_length(p.total as u64);
            bar.set_position(p.done as u64);
            bar.set_message(p.label.clone());
        },
        &mut |partial| {
            if let Err(e) = bench::matrix::write_all(partial, &a.out, command, &date) {
                bar.println(format!("warning: writing partial results: {e}"));
            }
        },
    )
    .map_err(|e| anyhow::anyhow!("bench alloc --matrix failed: {e}"))?;
    bar.finish_and_clear();
    let files = bench::matrix::write_all(&report, &a.out, command, &date)
        .map_err(|e| anyhow::anyhow!("writing results: {e}"))?;
    let s = MatrixSummary::of(&report);
    if report.fixture {
        println!("TEST FIXTURE RUN on {} -- not GPU figures", report.device);
    }
    println!(
        "{:>8} {:>6}  {:>26}  {:>26}  {:>26}  {:>26}  {:>26}",
        "size",
        "shapes",
        "smart/best (worst shape)",
        "adaptive/best (worst)",
        "pinned/hot set (worst)",
        "smart, both bounds can hold",
        "adaptive, both can hold"
    );
    let cell = |w: Option<(f64, bench::timing::Shape)>| {
        w.map_or_else(
            || "-".to_string(),
            |(r, sh)| format!("{r:.3} ({})", sh.name()),
        )
    };
    for w in &s.worst {
        println!(
            "{:>8} {:>6}  {:>26}  {:>26}  {:>26}  {:>26}  {:>26}",
            format_size_exact(w.size as u64),
            w.shapes,
            cell(w.smart),
            cell(w.adaptive),
            cell(w.pinned),
            cell(w.smart_feasible),
            cell(w.adaptive_feasible)
        );
    }
    let l = &s.lengths;
    println!(
        "timed runs (pin-each aside): {}, shortest {:.1} ms, median {:.1} ms; {} under the {:.0} ms \
         floor ({} in first repeats, before re-planning); {} cells re-planned",
        l.runs,
        l.shortest_ms,
        l.median_ms,
        l.under_floor,
        report.config.min_run_s * 1e3,
        l.under_floor_first_repeat,
        l.replanned_cells
    );
    for (size, sh, why) in &report.skipped {
        println!(
            "not run: {} {}: {why}",
            format_size_exact(*size as u64),
            sh.name()
        );
    }
    println!(
        "{:.0} s (estimated {:.0} s); wrote:",
        report.wall_s, report.estimate_s
    );
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
            .env("PINWISE_CACHE_DIR", dir.path().join("cache"))
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
        // The round-trip probe: a table, said to be fixture figures, and no file written.
        let out = libs
            .command(&bin)
            .current_dir(dir.path())
            .args([
                "calibrate",
                "--probe-round-trips",
                "--sizes",
                "4K",
                "--repeats",
                "1",
            ])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}");
        assert!(stdout.contains("TEST FIXTURE: not GPU figures"), "{stdout}");
        for buffer in ["pageable", "cuMemHostAlloc", "registered"] {
            assert!(
                stdout.contains(&format!("| 4 KiB | {buffer} | ")),
                "{stdout}"
            );
        }
        assert!(!dir.path().join("pinwise-calibration.csv").exists());
        // It writes no file, so an output named with it is refused, not ignored.
        let refused = libs
            .command(&bin)
            .current_dir(dir.path())
            .args(["calibrate", "--probe-round-trips", "-o", "x.csv"])
            .output()
            .unwrap();
        assert!(!refused.status.success());
        assert!(
            String::from_utf8_lossy(&refused.stderr).contains("cannot be used with"),
            "{}",
            String::from_utf8_lossy(&refused.stderr)
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

    /// The matrix in its CI form (`--quick`) on the CPU stand-in: runs every shape and
    /// strategy, writes its three files, and labels them TEST FIXTURE; without
    /// `--calibration`, the first run calibrates the "GPU" and caches it (said on stderr),
    /// the second reads the cache quietly, and a corrupt cache file is named and replaced.
    #[test]
    fn bench_alloc_matrix_quick_with_automatic_calibration_on_the_standin() {
        let test = "bench_alloc_matrix_quick_with_automatic_calibration_on_the_standin";
        let Some(bin) = binary_or_skip(test) else {
            return;
        };
        if !pinwise_testkit::require_locked_memory(test, 64 << 20) {
            return;
        }
        let libs = StandinLibs::new();
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let run = |out_dir: &str| {
            libs.command(&bin)
                .env("PINWISE_CACHE_DIR", &cache)
                .args(["bench", "alloc", "--matrix", "--quick", "--out"])
                .arg(dir.path().join(out_dir))
                .output()
                .unwrap()
        };
        // First use on this "GPU": calibrated automatically, announced, cached.
        let out = run("first");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        assert!(stderr.contains("calibrated this GPU"), "{stderr}");
        let cached: Vec<_> = std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(cached.len(), 1, "{cached:?}");
        let name = cached[0]
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(
            name.starts_with("calibration-") && name.ends_with(".csv"),
            "{name}"
        );
        let csv = std::fs::read_to_string(&cached[0]).unwrap();
        assert!(
            csv.contains("TEST FIXTURE"),
            "the stand-in's calibration says so"
        );
        assert!(
            name.starts_with("calibration-v2-")
                && csv.contains("uploads of buffers the CPU has just written"),
            "the current method, named: {name}"
        );
        assert!(stdout.contains("TEST FIXTURE RUN"), "{stdout}");
        // --quick has no floor: nothing under it, nothing re-planned.
        assert!(
            stdout.contains(
                "under the 0 ms floor (0 in first repeats, before re-planning); 0 cells re-planned"
            ),
            "{stdout}"
        );
        for size in ["64 KiB", "1 MiB", "4 MiB"] {
            assert!(stdout.contains(size), "{stdout}");
        }
        let first = dir.path().join("first");
        let md = std::fs::read_to_string(first.join("alloc-matrix.md")).unwrap();
        assert!(md.contains("**TEST FIXTURE RUN**"), "{md}");
        // It says which calibration it used: measured now, where it is cached.
        assert!(
            md.contains("automatic: this GPU's calibration, measured now in") && md.contains(&name),
            "{md}"
        );
        assert!(
            stderr.contains("from the calibration (automatic: this GPU's calibration"),
            "{stderr}"
        );
        assert!(
            md.contains("h2 c4 r2 mixed"),
            "the quick matrix has a mixed shape"
        );
        let runs = std::fs::read_to_string(first.join("alloc-matrix-runs.csv")).unwrap();
        assert!(
            runs.starts_with("# pinwise bench alloc --matrix") && runs.contains("TEST FIXTURE")
        );
        // 3 sizes x 3 shapes x 1 repeat x 5 strategies, plus the comment and the header.
        assert_eq!(runs.lines().count(), 45 + 2, "{runs}");
        let worst = std::fs::read_to_string(first.join("alloc-matrix-worst.csv")).unwrap();
        assert_eq!(worst.lines().count(), 3 + 1, "{worst}");

        // Second use: the cached calibration, quietly.
        let out = run("second");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(!stderr.contains("calibrated this GPU"), "{stderr}");
        let md = std::fs::read_to_string(dir.path().join("second/alloc-matrix.md")).unwrap();
        assert!(
            md.contains(&name) && md.contains("automatic: this GPU's cached calibration"),
            "the report names the cached calibration: {md}"
        );

        // A corrupt cache file: named, and measured again.
        std::fs::write(&cached[0], "size_bytes\n12\n").unwrap();
        let out = run("third");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(
            stderr.contains("cannot be used")
                && stderr.contains(&name)
                && stderr.contains("calibrated this GPU"),
            "{stderr}"
        );
        assert!(std::fs::read_to_string(&cached[0])
            .unwrap()
            .starts_with("# pinwise calibration"));

        // --matrix takes no single shape.
        let out = libs
            .command(&bin)
            .args(["bench", "alloc", "--matrix", "--hot", "3"])
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
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

        // --min-run belongs to the matrix, and takes a duration.
        let out = Command::new(&bin)
            .args(["bench", "alloc", "--min-run", "50ms"])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--min-run") && err.contains("--matrix"),
            "{err}"
        );
        let out = Command::new(&bin)
            .args(["bench", "alloc", "--matrix", "--min-run", "soon"])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--min-run") && err.contains("soon"), "{err}");
    }
}
