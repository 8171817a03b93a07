//! The benchmark's outputs: raw CSV, per (size, strategy) medians, a markdown table with the
//! verdicts, and an SVG plot.

use crate::BenchError;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use pinwise_core::units::format_size_exact;

use super::{BenchReport, RunRow, StrategyKind};

/// Medians over repeats for one (size, strategy).
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryRow {
    /// Buffer size.
    pub size: usize,
    /// Strategy.
    pub strategy: StrategyKind,
    /// Repeats.
    pub repeats: usize,
    /// Iterations per run.
    pub iterations: usize,
    /// Median total time, ms.
    pub total_ms: f64,
    /// Median hot-transfer bandwidth, GB/s.
    pub hot_gbps: f64,
    /// Median peak pinned bytes.
    pub peak_pinned: u64,
    /// Median teardown, ms.
    pub teardown_ms: f64,
}

/// The verdict at one size: smart against the best other strategy, and its pinned bytes
/// against the hot working set.
#[derive(Debug, Clone, PartialEq)]
pub struct SizeVerdict {
    /// Buffer size.
    pub size: usize,
    /// The fastest strategy other than pinwise's smart variants.
    pub best_other: StrategyKind,
    /// Its median total, ms.
    pub best_other_ms: f64,
    /// Smart's median total, ms.
    pub smart_ms: f64,
    /// smart / best other (target: at most 1.05).
    pub time_ratio: f64,
    /// Smart's peak pinned bytes / hot working set (target: at most 1.1; 0 when smart pins
    /// nothing because nothing pays at this size).
    pub pinned_ratio: f64,
}

/// Medians and verdicts of a report.
#[derive(Debug, Clone)]
pub struct Summary {
    /// Per (size, strategy), sizes ascending, strategies in report order.
    pub rows: Vec<SummaryRow>,
    /// Per size, when both smart and another strategy ran.
    pub verdicts: Vec<SizeVerdict>,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

impl Summary {
    /// Summarizes `report`.
    pub fn of(report: &BenchReport) -> Summary {
        let mut groups: BTreeMap<(usize, StrategyKind), Vec<&RunRow>> = BTreeMap::new();
        for r in &report.rows {
            groups.entry((r.size, r.strategy)).or_default().push(r);
        }
        let rows: Vec<SummaryRow> = groups
            .iter()
            .map(|(&(size, strategy), runs)| SummaryRow {
                size,
                strategy,
                repeats: runs.len(),
                iterations: runs[0].iterations,
                total_ms: median(runs.iter().map(|r| r.total_ns as f64 / 1e6).collect()),
                hot_gbps: median(runs.iter().map(|r| r.hot_gbps()).collect()),
                peak_pinned: median(runs.iter().map(|r| r.peak_pinned as f64).collect()) as u64,
                teardown_ms: median(runs.iter().map(|r| r.teardown_ns as f64 / 1e6).collect()),
            })
            .collect();
        let mut verdicts = Vec::new();
        let sizes: Vec<usize> = {
            let mut s: Vec<usize> = rows.iter().map(|r| r.size).collect();
            s.dedup();
            s
        };
        for size in sizes {
            let at: Vec<&SummaryRow> = rows.iter().filter(|r| r.size == size).collect();
            let smart = at.iter().find(|r| r.strategy == StrategyKind::Smart);
            let best = at
                .iter()
                .filter(|r| r.strategy.is_baseline() || r.strategy == StrategyKind::Adaptive)
                .min_by(|a, b| a.total_ms.total_cmp(&b.total_ms));
            if let (Some(smart), Some(best)) = (smart, best) {
                verdicts.push(SizeVerdict {
                    size,
                    best_other: best.strategy,
                    best_other_ms: best.total_ms,
                    smart_ms: smart.total_ms,
                    time_ratio: smart.total_ms / best.total_ms.max(1e-9),
                    pinned_ratio: smart.peak_pinned as f64
                        / report.config.hot_working_set(size).max(1) as f64,
                });
            }
        }
        Summary { rows, verdicts }
    }
}

/// The raw runs as CSV.
pub fn runs_csv(report: &BenchReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# pinwise bench alloc; device: {}; calibration: {}{}",
        report.device,
        report.calibration,
        if report.fixture {
            "; TEST FIXTURE: not GPU figures"
        } else {
            ""
        }
    );
    out.push_str("size_bytes,strategy,repeat,iterations,total_ms,hot_ms,hot_bytes,hot_GBps,peak_pinned_bytes,hot_working_set_bytes,pinned_allocations,allocations,teardown_ms,fixture\n");
    for r in &report.rows {
        let _ = writeln!(
            out,
            "{},{},{},{},{:.3},{:.3},{},{:.3},{},{},{},{},{:.3},{}",
            r.size,
            r.strategy.name(),
            r.repeat,
            r.iterations,
            r.total_ns as f64 / 1e6,
            r.hot_ns as f64 / 1e6,
            r.hot_bytes,
            r.hot_gbps(),
            r.peak_pinned,
            report.config.hot_working_set(r.size),
            r.pinned_allocations,
            r.allocations,
            r.teardown_ns as f64 / 1e6,
            report.fixture
        );
    }
    out
}

/// The medians as CSV.
pub fn summary_csv(report: &BenchReport, s: &Summary) -> String {
    let mut out = String::new();
    out.push_str("size_bytes,strategy,repeats,iterations,median_total_ms,median_hot_GBps,median_peak_pinned_bytes,hot_working_set_bytes,median_teardown_ms,fixture\n");
    for r in &s.rows {
        let _ = writeln!(
            out,
            "{},{},{},{},{:.3},{:.3},{},{},{:.3},{}",
            r.size,
            r.strategy.name(),
            r.repeats,
            r.iterations,
            r.total_ms,
            r.hot_gbps,
            r.peak_pinned,
            report.config.hot_working_set(r.size),
            r.teardown_ms,
            report.fixture
        );
    }
    out
}

/// A markdown report: what ran, where, the tables and the verdicts. `command` is how it was
/// invoked; `date` when.
pub fn markdown(report: &BenchReport, s: &Summary, command: &str, date: &str) -> String {
    let c = &report.config;
    let mut out = String::new();
    let _ = writeln!(out, "# pinwise bench alloc\n");
    if report.fixture {
        let _ = writeln!(
            out,
            "> **TEST FIXTURE RUN** — {}. These numbers measure a test fixture, not a GPU; \
             they only show that the benchmark runs.\n",
            report.device
        );
    }
    let _ = writeln!(out, "- command: `{command}`");
    let _ = writeln!(out, "- date: {date}");
    let _ = writeln!(out, "- device: {}", report.device);
    let _ = writeln!(out, "- calibration: {}", report.calibration);
    let _ = writeln!(
        out,
        "- workload per iteration: {} hot buffers ({} round trips each, host to device and back), \
         {} cold buffers (the first copied to the device once, the others never), all live at \
         once, each written once; synchronous driver copies on real device buffers",
        c.hot_buffers, c.round_trips, c.cold_buffers
    );
    let _ = writeln!(
        out,
        "- iterations sized by bytes ({} of hot copies per run, {}..{} iterations); {} repeats, \
         strategies interleaved; medians reported; wall time {:.0} s\n",
        format_size_exact(c.target_hot_bytes),
        c.min_iterations,
        c.max_iterations,
        c.repeats,
        report.wall_s
    );
    let strategies: Vec<StrategyKind> = StrategyKind::ALL
        .into_iter()
        .filter(|k| s.rows.iter().any(|r| r.strategy == *k))
        .collect();
    let sizes: Vec<usize> = {
        let mut v: Vec<usize> = s.rows.iter().map(|r| r.size).collect();
        v.dedup();
        v
    };
    let table = |out: &mut String, title: &str, cell: &dyn Fn(&SummaryRow) -> String| {
        let _ = writeln!(out, "## {title}\n");
        let _ = write!(out, "| size | iterations |");
        for k in &strategies {
            let _ = write!(out, " {} |", k.name());
        }
        let _ = write!(out, "\n|---|---|");
        for _ in &strategies {
            let _ = write!(out, "---|");
        }
        out.push('\n');
        for &size in &sizes {
            let iters = s
                .rows
                .iter()
                .find(|r| r.size == size)
                .map_or(0, |r| r.iterations);
            let _ = write!(out, "| {} | {} |", format_size_exact(size as u64), iters);
            for k in &strategies {
                let v = s
                    .rows
                    .iter()
                    .find(|r| r.size == size && r.strategy == *k)
                    .map_or_else(|| "—".to_string(), cell);
                let _ = write!(out, " {v} |");
            }
            out.push('\n');
        }
        out.push('\n');
    };
    table(&mut out, "Total time, ms (median)", &|r| {
        format!("{:.2}", r.total_ms)
    });
    table(&mut out, "Hot-transfer bandwidth, GB/s (median)", &|r| {
        format!("{:.2}", r.hot_gbps)
    });
    table(&mut out, "Peak pinned bytes, MiB (median)", &|r| {
        format!("{:.2}", r.peak_pinned as f64 / (1 << 20) as f64)
    });
    if !s.verdicts.is_empty() {
        let _ = writeln!(out, "## Verdicts\n");
        let _ = writeln!(
            out,
            "Targets: smart ≤ 1.05 × the best other strategy (baselines and adaptive); smart's \
             peak pinned bytes ≤ 1.1 × the hot working set ({} × size).\n",
            c.hot_buffers
        );
        let _ = writeln!(
            out,
            "| size | best other | its ms | smart ms | smart / best | time target | smart pinned / hot set | pinned target |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
        for v in &s.verdicts {
            let _ = writeln!(
                out,
                "| {} | {} | {:.2} | {:.2} | {:.3} | {} | {:.3} | {} |",
                format_size_exact(v.size as u64),
                v.best_other.name(),
                v.best_other_ms,
                v.smart_ms,
                v.time_ratio,
                if v.time_ratio <= 1.05 {
                    "met"
                } else {
                    "**missed**"
                },
                v.pinned_ratio,
                if v.pinned_ratio <= 1.1 {
                    "met"
                } else {
                    "**missed**"
                },
            );
        }
        out.push('\n');
    }
    out
}

/// Draws total time (left) and peak pinned bytes over the hot working set (right) by size,
/// one line per strategy, into an SVG file.
pub fn svg(report: &BenchReport, s: &Summary, path: &Path) -> Result<(), BenchError> {
    let mut text = String::new();
    draw_svg(report, s, SVGBackend::with_string(&mut text, (1400, 560)))?;
    pinwise_core::safe_file::write_bytes(path, text.as_bytes())
        .map_err(|e| BenchError::write(path, e))
}

fn draw_svg(report: &BenchReport, s: &Summary, backend: SVGBackend<'_>) -> Result<(), BenchError> {
    let root = backend.into_drawing_area();
    root.fill(&WHITE)?;
    let title = if report.fixture {
        "pinwise bench alloc — TEST FIXTURE run, not GPU figures".to_string()
    } else {
        format!("pinwise bench alloc — {}", report.device)
    };
    let root = root.titled(&title, ("sans-serif", 20))?;
    let (left, right) = root.split_horizontally(700);
    // x is log2(size), labelled with the sizes themselves (4 KiB, 16 KiB, ...).
    let log2 = |size: usize| (size.max(1) as f64).log2();
    let sizes: Vec<f64> = s.rows.iter().map(|r| log2(r.size)).collect();
    if sizes.is_empty() {
        return Err(BenchError::invalid("no results to plot"));
    }
    let (xmin, xmax) = (
        sizes.iter().copied().fold(f64::MAX, f64::min) - 0.5,
        sizes.iter().copied().fold(f64::MIN, f64::max) + 0.5,
    );
    let x_label = |x: &f64| {
        if (x - x.round()).abs() < 1e-6 && x.round() as i64 % 2 == 0 {
            format_size_exact((1usize << (x.round() as u32)) as u64)
        } else {
            String::new()
        }
    };
    let x_ticks = ((xmax - xmin).ceil() as usize + 1).min(64);
    let times: Vec<f64> = s.rows.iter().map(|r| r.total_ms.max(1e-3)).collect();
    let (tmin, tmax) = (
        times.iter().copied().fold(f64::MAX, f64::min) / 1.5,
        times.iter().copied().fold(0.0, f64::max) * 1.5,
    );
    let hot_set = |size: usize| report.config.hot_working_set(size).max(1) as f64;
    let ratios: Vec<f64> = s
        .rows
        .iter()
        .map(|r| r.peak_pinned as f64 / hot_set(r.size))
        .collect();
    let rmax = ratios.iter().copied().fold(1.2, f64::max) * 1.1;
    let strategies: Vec<StrategyKind> = StrategyKind::ALL
        .into_iter()
        .filter(|k| s.rows.iter().any(|r| r.strategy == *k))
        .collect();
    let color = |i: usize| Palette99::pick(i).to_rgba();

    let mut chart = ChartBuilder::on(&left)
        .caption("total time (ms, median)", ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(xmin..xmax, (tmin..tmax).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("buffer size")
        .x_labels(x_ticks)
        .x_label_formatter(&x_label)
        .y_desc("ms")
        .draw()?;
    for (i, k) in strategies.iter().enumerate() {
        let pts: Vec<(f64, f64)> = s
            .rows
            .iter()
            .filter(|r| r.strategy == *k)
            .map(|r| (log2(r.size), r.total_ms.max(1e-3)))
            .collect();
        let c = color(i);
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))?
            .label(k.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;

    let mut chart = ChartBuilder::on(&right)
        .caption(
            "peak pinned bytes / hot working set (median)",
            ("sans-serif", 16),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(xmin..xmax, 0.0..rmax)?;
    chart
        .configure_mesh()
        .x_desc("buffer size")
        .x_labels(x_ticks)
        .x_label_formatter(&x_label)
        .draw()?;
    chart
        .draw_series(LineSeries::new(
            vec![(xmin, 1.1), (xmax, 1.1)],
            BLACK.mix(0.4).stroke_width(1),
        ))?
        .label("target 1.1")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.4)));
    for (i, k) in strategies.iter().enumerate() {
        let pts: Vec<(f64, f64)> = s
            .rows
            .iter()
            .filter(|r| r.strategy == *k)
            .map(|r| (log2(r.size), r.peak_pinned as f64 / hot_set(r.size)))
            .collect();
        let c = color(i);
        chart.draw_series(LineSeries::new(pts, c.stroke_width(2)))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Writes `alloc-runs.csv`, `alloc-summary.csv`, `alloc.md` and `alloc.svg` into `dir`.
/// Returns the files written.
pub fn write_all(
    report: &BenchReport,
    dir: &Path,
    command: &str,
    date: &str,
) -> Result<Vec<PathBuf>, BenchError> {
    pinwise_core::safe_file::create_private_dir_all(dir).map_err(|e| BenchError::write(dir, e))?;
    let s = Summary::of(report);
    let files = [
        ("alloc-runs.csv", runs_csv(report)),
        ("alloc-summary.csv", summary_csv(report, &s)),
        ("alloc.md", markdown(report, &s, command, date)),
    ];
    let mut written = Vec::new();
    for (name, text) in files {
        let p = dir.join(name);
        pinwise_core::safe_file::write_bytes(&p, text.as_bytes())
            .map_err(|e| BenchError::write(&p, e))?;
        written.push(p);
    }
    let p = dir.join("alloc.svg");
    svg(report, &s, &p)?;
    written.push(p);
    Ok(written)
}
