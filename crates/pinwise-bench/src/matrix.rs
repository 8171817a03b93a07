//! `pinwise bench alloc --matrix`: the benchmark over many shapes, so that no single shape
//! can be tuned for. For every size and every [`Shape`] (hot buffers 1–4, cold 0–8, round
//! trips 1–16, buffers of one size or mixed sizes within an iteration) it runs the
//! baselines (pageable, pin-each, caching pool), smart (use mode, following an untimed
//! profile run of the same size and shape) and adaptive (no profile), strategies
//! interleaved, and reports per size the *worst* ratio over shapes of smart and of
//! adaptive to the best baseline, and of smart's peak pinned bytes to the hot working set.
//!
//! Iterations are sized by bytes and then lowered to fit a time budget
//! ([`super::timing`]): large sizes run few iterations (one at the least). Every run is
//! timed over at least [`MatrixConfig::min_run_s`] (estimated from the calibration for the
//! cell's fastest strategy): the plan lowers iterations down to that floor and leaves
//! cells out rather than go below it; pin-each runs only the iterations that reach the
//! floor for itself, and cells compare times per iteration ([`Cell`]). The estimate is a
//! plan: after a cell's first repeat, its later repeats run the iterations that bring the
//! first repeat's fastest measured run to the floor ([`replanned`]), and the report gives
//! the measured run lengths ([`RunLengths`]).
//!
//! Where the two bounds cannot both hold, the report lists the cell from its own
//! runs ([`crate::bounds::BoundFloor::measured`]).

use crate::BenchError;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use pinwise_core::profile::Profile;
use pinwise_core::units::format_size_exact;
use pinwise_core::Policy;

use super::bounds::{BoundFloor, Measured, StrategyMedians};
use super::timing::{self, Item, Shape};
use super::{interleaved, run_one, BenchConfig, BenchDevice, Progress, RunRow, StrategyKind};
use pinwise_alloc::backend::DevicePtr;

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

/// The strategies of the matrix, in report order.
pub const STRATEGIES: [StrategyKind; 5] = [
    StrategyKind::Pageable,
    StrategyKind::PinEach,
    StrategyKind::CachingPool,
    StrategyKind::Smart,
    StrategyKind::Adaptive,
];

/// Targets the report checks: smart (use mode) and adaptive against the best baseline, and
/// smart's peak pinned bytes against the hot working set.
pub const SMART_TARGET: f64 = 1.03;
/// See [`SMART_TARGET`].
pub const ADAPTIVE_TARGET: f64 = 1.05;
/// See [`SMART_TARGET`].
pub const PINNED_TARGET: f64 = 1.05;

const fn shape(hot: usize, cold: usize, round_trips: usize, mixed: bool) -> Shape {
    Shape {
        hot,
        cold,
        round_trips,
        mixed,
    }
}

/// The default shapes: the ends of each range, the seed's shape, the shape of issue 13's
/// H100 run, and two with mixed sizes.
pub const DEFAULT_SHAPES: [Shape; 7] = [
    shape(1, 0, 1, false),
    shape(1, 8, 1, false),
    shape(2, 2, 8, false),
    shape(3, 5, 4, false),
    shape(4, 0, 16, false),
    shape(2, 4, 2, true),
    shape(4, 8, 16, true),
];

/// What the matrix runs.
#[derive(Debug, Clone)]
pub struct MatrixConfig {
    /// Sizes (the largest buffer of an iteration, with mixed sizes).
    pub sizes: Vec<usize>,
    /// Shapes.
    pub shapes: Vec<Shape>,
    /// Repeats of every (size, shape, strategy); medians are compared.
    pub repeats: usize,
    /// Hot bytes to move per run before the time budget lowers it.
    pub target_hot_bytes: u64,
    /// Fewest iterations wanted per run (the time budget may still lower it, to one).
    pub min_iterations: usize,
    /// Most iterations per run.
    pub max_iterations: usize,
    /// pinwise-core's policy (with the calibration).
    pub policy: Policy,
    /// Pinned budget for the pinwise strategies (`None`: the default).
    pub budget_bytes: Option<u64>,
    /// Wall-time budget, seconds (`None`: none).
    pub time_budget_s: Option<f64>,
    /// The least time every timed run of a cell is to last, seconds, as the calibration
    /// estimates it for the cell's fastest strategy (0: no floor; see [`super::timing`]).
    pub min_run_s: f64,
}

/// The default [`MatrixConfig::min_run_s`]: 100 ms, so that a scheduler hiccup of a few
/// milliseconds on the GPU host moves a small cell's run by a few percent, not by half
/// (the seventh session's 4 KiB h1 c8 r1 runs lasted 1.8 ms).
pub const MIN_RUN_S: f64 = 0.1;

/// The matrix's plan: iterations per cell (`[shape][size]`, 0 for a cell left out),
/// pin-each's iterations, each cell's floor, and the estimated wall time.
#[derive(Debug, Clone, PartialEq)]
pub struct MatrixPlan {
    /// Iterations of every strategy but pin-each.
    pub iterations: Vec<Vec<usize>>,
    /// Iterations of pin-each (at most the cell's).
    pub pin_each: Vec<Vec<usize>>,
    /// The fewest iterations the plan could lower each cell to.
    pub floors: Vec<Vec<usize>>,
    /// Estimated wall time, seconds.
    pub estimate_s: f64,
}

impl MatrixConfig {
    /// 4 KiB to 1 GiB in steps of 4, the default shapes, 3 repeats, within 5 minutes.
    pub fn standard(policy: Policy) -> Self {
        MatrixConfig {
            sizes: (0..10).map(|i| (4 * KIB) << (2 * i)).collect(),
            shapes: DEFAULT_SHAPES.to_vec(),
            repeats: 3,
            target_hot_bytes: 4 << 30,
            min_iterations: 3,
            // Small sizes need many iterations: at 32 a 4 KiB cell ran for about 1 ms on the
            // H100, which timer noise and the allocator's first decisions dominated.
            max_iterations: 1024,
            policy,
            budget_bytes: None,
            time_budget_s: Some(300.0),
            min_run_s: MIN_RUN_S,
        }
    }

    /// For CI and a first look: 64 KiB, 1 MiB and 4 MiB, three shapes (one mixed), one
    /// repeat, a few iterations (no minimum run time), within a minute.
    pub fn quick(policy: Policy) -> Self {
        MatrixConfig {
            sizes: vec![64 * KIB, MIB, 4 * MIB],
            shapes: vec![DEFAULT_SHAPES[0], DEFAULT_SHAPES[3], DEFAULT_SHAPES[5]],
            repeats: 1,
            target_hot_bytes: 64 << 20,
            min_iterations: 2,
            max_iterations: 8,
            time_budget_s: Some(60.0),
            min_run_s: 0.0,
            ..MatrixConfig::standard(policy)
        }
    }

    /// The single-shape benchmark configuration of one shape.
    pub fn bench_config(&self, shape: &Shape) -> BenchConfig {
        BenchConfig {
            sizes: self.sizes.clone(),
            repeats: self.repeats,
            hot_buffers: shape.hot,
            cold_buffers: shape.cold,
            round_trips: shape.round_trips,
            target_hot_bytes: self.target_hot_bytes,
            min_iterations: self.min_iterations,
            max_iterations: self.max_iterations,
            strategies: STRATEGIES.to_vec(),
            policy: self.policy.clone(),
            budget_bytes: self.budget_bytes,
            mixed_sizes: shape.mixed,
            time_budget_s: None,
        }
    }

    /// Iterations per (shape, size) (`[shape][size]`, in config order) within the time
    /// budget, and the estimated wall time, seconds (see [`MatrixConfig::plan`]).
    pub fn planned_iterations(&self) -> (Vec<Vec<usize>>, f64) {
        let p = self.plan();
        (p.iterations, p.estimate_s)
    }

    /// The plan: iterations sized by bytes, at least the floor of
    /// [`MatrixConfig::min_run_s`], lowered to fit the time budget ([`timing::plan`]).
    pub fn plan(&self) -> MatrixPlan {
        let mut items = Vec::new();
        for sh in &self.shapes {
            let c = self.bench_config(sh);
            for (si, &size) in self.sizes.iter().enumerate() {
                items.push(Item::with_min_run(
                    self.policy.cost_model(),
                    sh,
                    size,
                    &STRATEGIES,
                    self.repeats,
                    c.iterations(size),
                    si,
                    self.min_run_s * 1e9,
                ));
            }
        }
        let (flat, estimate_s) = timing::plan(&items, self.time_budget_s);
        let n = self.sizes.len().max(1);
        let per_shape = |v: Vec<usize>| v.chunks(n).map(<[usize]>::to_vec).collect();
        let pin_each = items
            .iter()
            .zip(&flat)
            .map(|(item, &its)| item.capped_iterations(its))
            .collect();
        MatrixPlan {
            iterations: per_shape(flat),
            pin_each: per_shape(pin_each),
            floors: per_shape(items.iter().map(|i| i.floor).collect()),
            estimate_s,
        }
    }
}

/// One run of the matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct MatrixRow {
    /// Its shape.
    pub shape: Shape,
    /// The run.
    pub run: RunRow,
    /// Bytes of hot buffers live at once in this shape and size.
    pub hot_working_set: u64,
}

/// The page size pinning locks memory in.
const PAGE: u64 = pinwise_core::decide::grade::PAGE as u64;

/// The least page-locked memory that holds a shape's hot buffers at one size: pinning locks
/// whole pages, so a hot working set that is not a whole number of pages cannot be held
/// within [`PINNED_TARGET`] of its bytes by any allocator that pins it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageFloor {
    /// Bytes of the hot buffers (the hot working set).
    pub hot: u64,
    /// Whole pages that hold them, buffers sharing pages: the least any allocator can lock.
    pub least: u64,
    /// Whole pages with a page-aligned block per buffer (pinwise's pool blocks, and what
    /// `cuMemHostAlloc` locks per buffer).
    pub per_buffer: u64,
}

impl PageFloor {
    /// The floor of `config`'s shape at `size`.
    pub fn of(config: &BenchConfig, size: usize) -> PageFloor {
        let sizes = (0..config.hot_buffers).map(|r| config.role_size(size, r) as u64);
        let hot: u64 = sizes.clone().sum();
        PageFloor {
            hot,
            least: hot.next_multiple_of(PAGE),
            per_buffer: sizes.map(|b| b.max(1).next_multiple_of(PAGE)).sum(),
        }
    }
}

/// A finished (or partial) matrix.
#[derive(Debug, Clone)]
pub struct MatrixReport {
    /// What ran.
    pub config: MatrixConfig,
    /// Every run.
    pub rows: Vec<MatrixRow>,
    /// The device, as the backend describes it.
    pub device: String,
    /// True on a test fixture (the CPU stand-in, the mock): not GPU figures.
    pub fixture: bool,
    /// Where the calibration came from.
    pub calibration: String,
    /// Wall time, seconds.
    pub wall_s: f64,
    /// The estimate the iterations were planned with, seconds.
    pub estimate_s: f64,
    /// (size, shape, why) of the cells not run.
    pub skipped: Vec<(usize, Shape, String)>,
}

/// Runs the matrix on `device`, calling `progress` before each run and `checkpoint` after
/// each size.
pub fn run(
    config: &MatrixConfig,
    device: &dyn BenchDevice,
    progress: &mut dyn FnMut(&Progress),
    checkpoint: &mut dyn FnMut(&MatrixReport),
) -> Result<MatrixReport, BenchError> {
    let started = Instant::now();
    let backend = device.backend();
    let plan = config.plan();
    let (planned, estimate_s) = (&plan.iterations, plan.estimate_s);
    let configs: Vec<BenchConfig> = config
        .shapes
        .iter()
        .map(|s| config.bench_config(s))
        .collect();
    let total = config.sizes.len() * config.shapes.len() * config.repeats * STRATEGIES.len();
    let mut done = 0;
    let mut rows = Vec::new();
    let mut profiles: Vec<HashMap<usize, Profile>> = vec![HashMap::new(); config.shapes.len()];
    let mut skipped: Vec<(usize, Shape, String)> = Vec::new();
    let report = |rows: &Vec<MatrixRow>, skipped: &Vec<(usize, Shape, String)>| MatrixReport {
        config: config.clone(),
        rows: rows.clone(),
        device: backend.describe(),
        fixture: backend.is_fixture(),
        calibration: config.policy.cost_model().source().to_string(),
        wall_s: started.elapsed().as_secs_f64(),
        estimate_s,
        skipped: skipped.clone(),
    };
    for (si, &size) in config.sizes.iter().enumerate() {
        // Device buffers for the shapes that run at this size.
        let roles = config
            .shapes
            .iter()
            .zip(planned)
            .filter(|(_, its)| its[si] > 0)
            .map(|(s, _)| s.hot + s.cold)
            .max()
            .unwrap_or(1);
        let dev: Vec<DevicePtr> = (0..roles)
            .map(|_| device.alloc_device(size))
            .collect::<Result<_, _>>()?;
        let result = (|| -> Result<(), BenchError> {
            for (hi, sh) in config.shapes.iter().enumerate() {
                let c = &configs[hi];
                let iterations = planned[hi][si];
                if iterations == 0 {
                    skipped.push((size, *sh, "left out by the time budget's plan".into()));
                    done += config.repeats * STRATEGIES.len();
                    continue;
                }
                if let Some(b) = config.time_budget_s {
                    if started.elapsed().as_secs_f64() > b {
                        skipped.push((size, *sh, "the time budget ran out".into()));
                        done += config.repeats * STRATEGIES.len();
                        continue;
                    }
                }
                let (mut iterations, mut pin_each) = (iterations, plan.pin_each[hi][si]);
                for repeat in 0..config.repeats {
                    let first = rows.len();
                    for kind in interleaved(&STRATEGIES, si + hi, repeat) {
                        let iterations = if kind == StrategyKind::PinEach {
                            pin_each
                        } else {
                            iterations
                        };
                        progress(&Progress {
                            done,
                            total,
                            label: format!(
                                "{} {} x {} {}",
                                format_size_exact(size as u64),
                                sh.name(),
                                iterations,
                                kind.name()
                            ),
                        });
                        let run = run_one(
                            c,
                            &backend,
                            &dev,
                            size,
                            iterations,
                            repeat,
                            kind,
                            &mut profiles[hi],
                        )?;
                        rows.push(MatrixRow {
                            shape: *sh,
                            run,
                            hot_working_set: c.hot_working_set(size),
                        });
                        done += 1;
                    }
                    // The plan came from the calibration's estimate; the first repeat measured
                    // the runs: later repeats get the iterations that reach the floor.
                    let in_budget = config
                        .time_budget_s
                        .is_none_or(|b| started.elapsed().as_secs_f64() < b);
                    if repeat == 0 && in_budget {
                        let (its, pe) =
                            replan(&rows[first..], iterations, pin_each, config.min_run_s);
                        if its != iterations {
                            // Smart's profile names allocations by call number: record it
                            // again at the new length.
                            profiles[hi].remove(&size);
                        }
                        (iterations, pin_each) = (its, pe);
                    }
                }
            }
            Ok(())
        })();
        for d in dev {
            device.free_device(d);
        }
        result?;
        checkpoint(&report(&rows, &skipped));
    }
    progress(&Progress {
        done,
        total,
        label: "done".into(),
    });
    Ok(report(&rows, &skipped))
}

/// The most a re-plan multiplies a cell's iterations by: the time budget was planned from
/// the calibration's estimate, and on the GPUs the runs measured no less than a quarter of
/// it (the eighth session's shortest, 29 ms of a planned 100).
pub const MAX_REPLAN: f64 = 4.0;

/// Iterations that make a run measured at `measured_ns` over `iterations` last at least
/// `min_run_ns` (5 % to spare, for what does not grow with iterations), raised by at most
/// [`MAX_REPLAN`] and to at most [`timing::MAX_FLOOR_ITERATIONS`]; never lowered, and
/// unchanged without a floor or where the run reached it.
pub fn replanned(iterations: usize, measured_ns: f64, min_run_ns: f64) -> usize {
    if min_run_ns <= 0.0 || iterations == 0 || measured_ns >= min_run_ns {
        return iterations;
    }
    let factor = (1.05 * min_run_ns / measured_ns.max(1.0)).min(MAX_REPLAN);
    ((iterations as f64 * factor).ceil() as usize)
        .min(timing::MAX_FLOOR_ITERATIONS)
        .max(iterations)
}

/// A cell's iterations for its later repeats from its first repeat's `runs`: the cell's
/// from its fastest run other than pin-each's, pin-each's from its own (at most the
/// cell's), each [`replanned`] to last `min_run_s`.
fn replan(
    runs: &[MatrixRow],
    iterations: usize,
    pin_each: usize,
    min_run_s: f64,
) -> (usize, usize) {
    let min_run_ns = min_run_s * 1e9;
    let fastest = runs
        .iter()
        .filter(|r| r.run.strategy != StrategyKind::PinEach)
        .map(|r| r.run.total_ns as f64)
        .fold(f64::INFINITY, f64::min);
    let its = if fastest.is_finite() {
        replanned(iterations, fastest, min_run_ns)
    } else {
        iterations
    };
    let pe = runs
        .iter()
        .find(|r| r.run.strategy == StrategyKind::PinEach)
        .map_or(pin_each, |r| {
            replanned(pin_each, r.run.total_ns as f64, min_run_ns)
        });
    (its, pe.min(its))
}

/// Medians of one (size, shape) and the ratios against its best baseline. Times are over
/// the cell's iterations: a run of fewer iterations (pin-each under a minimum run time) is
/// scaled to them by its time per iteration.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// Size.
    pub size: usize,
    /// Shape.
    pub shape: Shape,
    /// Iterations per run (the most any of its runs made).
    pub iterations: usize,
    /// Repeats.
    pub repeats: usize,
    /// The fastest baseline (pageable, pin-each, caching pool) and its median ms.
    pub best: (StrategyKind, f64),
    /// Smart's median ms and its ratio to the best baseline.
    pub smart: Option<(f64, f64)>,
    /// Adaptive's median ms and its ratio to the best baseline.
    pub adaptive: Option<(f64, f64)>,
    /// Smart's median peak pinned bytes / the hot working set.
    pub smart_pinned_ratio: Option<f64>,
    /// The shortest run of the cell other than pin-each's, as measured, ms.
    pub shortest_run_ms: f64,
    /// The least time any allocator reaches within the pinned bound against the best other
    /// strategy ([`BoundFloor`]): from the cell's runs where its pageable and caching-pool
    /// runs exist ([`BoundFloor::measured`]), else predicted from the calibration.
    pub bound: BoundFloor,
}

impl Cell {
    /// Whether smart's bounds (time within [`SMART_TARGET`], pinned within
    /// [`PINNED_TARGET`]) can both hold here, by [`Cell::bound`] (measured or predicted).
    pub fn smart_bounds_can_hold(&self) -> bool {
        !self.bound.conflicts(SMART_TARGET)
    }

    /// As [`Cell::smart_bounds_can_hold`], for adaptive ([`ADAPTIVE_TARGET`]).
    pub fn adaptive_bounds_can_hold(&self) -> bool {
        !self.bound.conflicts(ADAPTIVE_TARGET)
    }
}

/// The worst over shapes at one size.
#[derive(Debug, Clone, PartialEq)]
pub struct Worst {
    /// Size.
    pub size: usize,
    /// Shapes measured at this size.
    pub shapes: usize,
    /// Smart's worst ratio and where.
    pub smart: Option<(f64, Shape)>,
    /// Adaptive's worst ratio and where.
    pub adaptive: Option<(f64, Shape)>,
    /// Smart's worst pinned ratio and where.
    pub pinned: Option<(f64, Shape)>,
    /// Smart's worst ratio over the cells where both its bounds can hold
    /// ([`Cell::smart_bounds_can_hold`]), and where.
    pub smart_feasible: Option<(f64, Shape)>,
    /// Adaptive's worst ratio over the cells where both its bounds can hold.
    pub adaptive_feasible: Option<(f64, Shape)>,
}

/// The summary of a matrix.
#[derive(Debug, Clone)]
pub struct MatrixSummary {
    /// Per (size, shape), sizes ascending, shapes in config order.
    pub cells: Vec<Cell>,
    /// Per size.
    pub worst: Vec<Worst>,
    /// How long the timed runs lasted.
    pub lengths: RunLengths,
}

/// How long the timed runs other than pin-each's (whose iterations are capped on purpose)
/// lasted, as measured, against the floor [`MatrixConfig::min_run_s`].
#[derive(Debug, Clone, PartialEq)]
pub struct RunLengths {
    /// Runs counted.
    pub runs: usize,
    /// The shortest, ms (0 without runs).
    pub shortest_ms: f64,
    /// The median, ms (0 without runs).
    pub median_ms: f64,
    /// Runs shorter than the floor (none counted without a floor).
    pub under_floor: usize,
    /// Of those, the runs in a cell's first repeat, before its re-plan.
    pub under_floor_first_repeat: usize,
    /// Cells whose later repeats ran more iterations than their first ([`replanned`]).
    pub replanned_cells: usize,
}

impl RunLengths {
    /// The lengths of `report`'s runs.
    pub fn of(report: &MatrixReport) -> RunLengths {
        let timed: Vec<&MatrixRow> = report
            .rows
            .iter()
            .filter(|r| r.run.strategy != StrategyKind::PinEach)
            .collect();
        let ms: Vec<f64> = timed.iter().map(|r| r.run.total_ns as f64 / 1e6).collect();
        let floor_ms = report.config.min_run_s * 1e3;
        let under = |r: &&&MatrixRow| floor_ms > 0.0 && (r.run.total_ns as f64 / 1e6) < floor_ms;
        let mut first_its: HashMap<(usize, Shape), (usize, usize)> = HashMap::new();
        for r in &timed {
            let e = first_its
                .entry((r.run.size, r.shape))
                .or_insert((usize::MAX, 0));
            *e = (e.0.min(r.run.iterations), e.1.max(r.run.iterations));
        }
        let (shortest_ms, median_ms) = if ms.is_empty() {
            (0.0, 0.0)
        } else {
            (ms.iter().copied().fold(f64::INFINITY, f64::min), median(ms))
        };
        RunLengths {
            runs: timed.len(),
            shortest_ms,
            median_ms,
            under_floor: timed.iter().filter(under).count(),
            under_floor_first_repeat: timed
                .iter()
                .filter(under)
                .filter(|r| r.run.repeat == 0)
                .count(),
            replanned_cells: first_its.values().filter(|(lo, hi)| hi > lo).count(),
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn worse(a: Option<(f64, Shape)>, r: f64, sh: Shape) -> Option<(f64, Shape)> {
    match a {
        Some((w, _)) if w >= r => a,
        _ => Some((r, sh)),
    }
}

/// What a cell's runs measured for [`BoundFloor::measured`]: every strategy's medians
/// over its repeats, per iteration.
fn measured(runs: &[&MatrixRow]) -> Measured {
    let strategies = STRATEGIES
        .iter()
        .filter_map(|&kind| {
            let mine: Vec<&RunRow> = runs
                .iter()
                .map(|r| &r.run)
                .filter(|r| r.strategy == kind)
                .collect();
            let per_it = |f: &dyn Fn(&RunRow) -> u64| -> f64 {
                median(
                    mine.iter()
                        .map(|r| f(r) as f64 / r.iterations.max(1) as f64)
                        .collect(),
                )
            };
            (!mine.is_empty()).then(|| StrategyMedians {
                kind,
                total_ns: per_it(&|r| r.total_ns),
                fill_ns: per_it(&|r| r.fill_ns),
                hot_ns: per_it(&|r| r.hot_ns),
                outside_ns: per_it(&|r| r.total_ns.saturating_sub(r.hot_ns + r.fill_ns)),
                peak_pinned: median(mine.iter().map(|r| r.peak_pinned as f64).collect()) as u64,
            })
        })
        .collect();
    Measured { strategies }
}

impl MatrixSummary {
    /// Summarizes `report`.
    pub fn of(report: &MatrixReport) -> MatrixSummary {
        let shape_index = |sh: &Shape| {
            report
                .config
                .shapes
                .iter()
                .position(|s| s == sh)
                .unwrap_or(0)
        };
        let mut groups: BTreeMap<(usize, usize), Vec<&MatrixRow>> = BTreeMap::new();
        for r in &report.rows {
            groups
                .entry((r.run.size, shape_index(&r.shape)))
                .or_default()
                .push(r);
        }
        let mut cells = Vec::new();
        for ((size, hi), runs) in groups {
            let med = |k: StrategyKind, f: &dyn Fn(&RunRow) -> f64| -> Option<f64> {
                let v: Vec<f64> = runs
                    .iter()
                    .filter(|r| r.run.strategy == k)
                    .map(|r| f(&r.run))
                    .collect();
                (!v.is_empty()).then(|| median(v))
            };
            let iterations = runs.iter().map(|r| r.run.iterations).max().unwrap_or(1);
            // Over the cell's iterations (pin-each may have run fewer).
            let ms = |r: &RunRow| {
                r.total_ns as f64 / 1e6 * iterations as f64 / r.iterations.max(1) as f64
            };
            let Some(best) = STRATEGIES
                .iter()
                .filter(|k| k.is_baseline())
                .filter_map(|&k| med(k, &ms).map(|m| (k, m)))
                .min_by(|a, b| a.1.total_cmp(&b.1))
            else {
                continue;
            };
            let ratio = |k| med(k, &ms).map(|m| (m, m / best.1.max(1e-9)));
            let hot_set = runs[0].hot_working_set.max(1) as f64;
            let shape = report.config.shapes[hi];
            let bench = report.config.bench_config(&shape);
            // The program's writes per iteration, as this run measured them (median over the
            // cell's runs; 0 where not measured).
            let fill = median(
                runs.iter()
                    .map(|r| r.run.fill_ns as f64 / r.run.iterations.max(1) as f64)
                    .collect(),
            );
            let role_size = |r| bench.role_size(size, r);
            let cost = report.config.policy.cost_model();
            let bound =
                match BoundFloor::measured(cost, &shape, iterations, role_size, &measured(&runs)) {
                    Some(b) => b,
                    None => BoundFloor::of(
                        cost,
                        &shape,
                        iterations,
                        role_size,
                        Some(fill).filter(|f| f.is_finite()),
                    ),
                };
            cells.push(Cell {
                size,
                shape,
                iterations,
                repeats: runs.iter().filter(|r| r.run.strategy == best.0).count(),
                best,
                smart: ratio(StrategyKind::Smart),
                adaptive: ratio(StrategyKind::Adaptive),
                smart_pinned_ratio: med(StrategyKind::Smart, &|r| r.peak_pinned as f64)
                    .map(|p| p / hot_set),
                shortest_run_ms: runs
                    .iter()
                    .filter(|r| r.run.strategy != StrategyKind::PinEach)
                    .map(|r| r.run.total_ns as f64 / 1e6)
                    .fold(f64::INFINITY, f64::min),
                bound,
            });
        }
        let mut worst: Vec<Worst> = Vec::new();
        for c in &cells {
            if worst.last().is_none_or(|w| w.size != c.size) {
                worst.push(Worst {
                    size: c.size,
                    shapes: 0,
                    smart: None,
                    adaptive: None,
                    pinned: None,
                    smart_feasible: None,
                    adaptive_feasible: None,
                });
            }
            let w = worst.last_mut().expect("pushed above");
            w.shapes += 1;
            if let Some((_, r)) = c.smart {
                w.smart = worse(w.smart, r, c.shape);
                if c.smart_bounds_can_hold() {
                    w.smart_feasible = worse(w.smart_feasible, r, c.shape);
                }
            }
            if let Some((_, r)) = c.adaptive {
                w.adaptive = worse(w.adaptive, r, c.shape);
                if c.adaptive_bounds_can_hold() {
                    w.adaptive_feasible = worse(w.adaptive_feasible, r, c.shape);
                }
            }
            if let Some(r) = c.smart_pinned_ratio {
                w.pinned = worse(w.pinned, r, c.shape);
            }
        }
        MatrixSummary {
            cells,
            worst,
            lengths: RunLengths::of(report),
        }
    }
}

fn verdict(v: f64, target: f64) -> &'static str {
    if v <= target {
        "met"
    } else {
        "**missed**"
    }
}

fn ratio_cell(w: Option<(f64, Shape)>, target: f64) -> String {
    match w {
        Some((r, sh)) => format!("{r:.3} ({}) {}", sh.name(), verdict(r, target)),
        None => "—".into(),
    }
}

/// The matrix as markdown: what ran, the worst ratios per size, every cell.
pub fn markdown(report: &MatrixReport, s: &MatrixSummary, command: &str, date: &str) -> String {
    let c = &report.config;
    let mut out = String::new();
    let _ = writeln!(out, "# pinwise bench alloc --matrix\n");
    if report.fixture {
        let _ = writeln!(
            out,
            "> **TEST FIXTURE RUN** — {}. These numbers measure a test fixture (the CPU \
             stand-in for libcuda), not a GPU; they only show that the matrix runs.\n",
            report.device
        );
    }
    let _ = writeln!(out, "- command: `{command}`");
    let _ = writeln!(out, "- date: {date}");
    let _ = writeln!(out, "- device: {}", report.device);
    let _ = writeln!(out, "- calibration: {}", report.calibration);
    let shapes: Vec<String> = c.shapes.iter().map(Shape::name).collect();
    let _ = writeln!(
        out,
        "- shapes (hot buffers h, cold buffers c, round trips r; mixed: buffers of 1, 1/2, \
         1/4 and 3/4 of the size by role): {}",
        shapes.join("; ")
    );
    let _ = writeln!(
        out,
        "- strategies: {} (smart = use mode after an untimed profile run of the same size and \
         shape; adaptive = no profile); best = the fastest of pageable, pin-each, caching-pool",
        STRATEGIES.map(StrategyKind::name).join(", ")
    );
    let _ = writeln!(
        out,
        "- {} repeats, strategies interleaved, medians compared; iterations sized by bytes ({} \
         of hot copies, {}..{} per run, raised to the floor below) and lowered to fit the time \
         budget ({}); estimated \
         {:.0} s, wall time {:.0} s",
        c.repeats,
        format_size_exact(c.target_hot_bytes),
        c.min_iterations,
        c.max_iterations,
        c.time_budget_s
            .map_or_else(|| "none".to_string(), |b| format!("{b:.0} s")),
        report.estimate_s,
        report.wall_s
    );
    if c.min_run_s > 0.0 {
        let _ = writeln!(
            out,
            "- floor: every timed run is planned to last at least {:.0} ms (the calibration's \
             estimate for the cell's fastest strategy; the time budget lowers iterations down to \
             that floor, never below it, and leaves cells out instead); pin-each, which pays \
             `cuMemHostAlloc` and `cuMemFreeHost` on every allocation, runs only the \
             iterations that reach the floor for itself (at least {}) and is compared per \
             iteration\n",
            c.min_run_s * 1e3,
            timing::MIN_CAPPED_ITERATIONS
        );
    } else {
        let _ = writeln!(
            out,
            "- floor: none (every run at the planned iterations, lowered to fit the budget down \
             to one)\n"
        );
    }
    let l = &s.lengths;
    let _ = writeln!(
        out,
        "Measured run lengths (every timed run but pin-each's): {} runs, shortest {:.1} ms, \
         median {:.1} ms{}\n",
        l.runs,
        l.shortest_ms,
        l.median_ms,
        if c.min_run_s > 0.0 {
            format!(
                "; {} shorter than the {:.0} ms floor, {} of them in a cell's first repeat (the \
                 plan is the calibration's estimate: after the first repeat every cell's later \
                 repeats run the iterations that reach the floor by its fastest measured run, \
                 at most {MAX_REPLAN}× more; {} cells re-planned)",
                l.under_floor,
                c.min_run_s * 1e3,
                l.under_floor_first_repeat,
                l.replanned_cells
            )
        } else {
            String::new()
        }
    );
    let _ = writeln!(out, "## Worst over shapes, per size\n");
    let _ = writeln!(
        out,
        "Targets: smart ≤ {SMART_TARGET} × best, adaptive ≤ {ADAPTIVE_TARGET} × best, smart's \
         peak pinned ≤ {PINNED_TARGET} × the hot working set (0 when nothing pays).\n"
    );
    let _ = writeln!(
        out,
        "The last two columns are the worst over the cells where both bounds can hold (the time \
         bound and the pinned bound), by a floor built from each cell's own runs (predicted \
         from the calibration only where a cell lacks its pageable or caching-pool runs; each \
         listed line says which); the cells left out of them are listed under the table, with \
         the arithmetic.\n"
    );
    let _ = writeln!(
        out,
        "| size | shapes | smart / best (worst shape) | adaptive / best (worst shape) | smart pinned / hot set (worst shape) | smart / best where both bounds can hold | adaptive / best where both bounds can hold |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|");
    for w in &s.worst {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            format_size_exact(w.size as u64),
            w.shapes,
            ratio_cell(w.smart, SMART_TARGET),
            ratio_cell(w.adaptive, ADAPTIVE_TARGET),
            ratio_cell(w.pinned, PINNED_TARGET),
            ratio_cell(w.smart_feasible, SMART_TARGET),
            ratio_cell(w.adaptive_feasible, ADAPTIVE_TARGET),
        );
    }
    let conflicts: Vec<String> = s
        .cells
        .iter()
        .filter(|cell| !cell.smart_bounds_can_hold())
        .map(|cell| {
            let r = cell.bound.ratio();
            let which = if cell.adaptive_bounds_can_hold() {
                format!("smart (> {SMART_TARGET}; adaptive's {ADAPTIVE_TARGET} can hold)")
            } else {
                format!("smart and adaptive (> {ADAPTIVE_TARGET})")
            };
            format!(
                "- {} {}: {which}: floor / best {r:.3}; {}",
                format_size_exact(cell.size as u64),
                cell.shape.name(),
                cell.bound.explain()
            )
        })
        .collect();
    if !conflicts.is_empty() {
        let _ = writeln!(
            out,
            "\nWhere the two bounds cannot both hold: the least time any allocator reaches with \
             peak pinned ≤ {PINNED_TARGET}× the hot working set (each buffer pinned whole or \
             not, pages shared; buffers not pinned copy at pageable speed) is above the target × \
             the best other strategy's time. *Measured* lines take the best other strategy as \
             the cell's runs measured it and build the floor from the same runs, each term the \
             least any strategy reached: the least write time, hot copies as the pageable run \
             or the caching pool (or pin-each) made them, cold0's copy with the allocations as \
             the pageable run or the pool made them, pinning once not counted; so a measured \
             line is on the safe side. *Predicted* lines (a cell without those runs) price \
             everything from the calibration, which on the GPUs overpriced the caching pool \
             (`bench/results/gpu-alloc-matrix.md`, eighth session), writes as measured or at \
             {} GB/s. Per iteration in us:\n",
            timing::FILL_BYTES_PER_NS
        );
        for line in &conflicts {
            let _ = writeln!(out, "{line}");
        }
    }
    let coarse: Vec<String> = s
        .cells
        .iter()
        .filter_map(|cell| {
            let p = PageFloor::of(&c.bench_config(&cell.shape), cell.size);
            (p.least as f64 > PINNED_TARGET * p.hot as f64).then(|| {
                format!(
                    "- {} {}: hot set {} B; at least {} B ({:.3}×) with the buffers sharing pages, \
                     {} B ({:.3}×) with a page-aligned block each (smart: {})",
                    format_size_exact(cell.size as u64),
                    cell.shape.name(),
                    p.hot,
                    p.least,
                    p.least as f64 / p.hot as f64,
                    p.per_buffer,
                    p.per_buffer as f64 / p.hot as f64,
                    cell.smart_pinned_ratio
                        .map_or_else(|| "—".into(), |r| format!("{r:.3}×")),
                )
            })
        })
        .collect();
    if !coarse.is_empty() {
        let _ = writeln!(
            out,
            "\nPinning locks whole pages ({} B): where the hot working set is not a whole number \
             of pages, no allocator that pins it can hold it within {PINNED_TARGET}× (the \
             pinned bound cannot be met in these cells):\n",
            PAGE
        );
        for line in &coarse {
            let _ = writeln!(out, "{line}");
        }
    }
    if !report.skipped.is_empty() {
        let _ = writeln!(
            out,
            "\nNot run (their sizes' worst ratios are over the shapes run):\n"
        );
        for (size, sh, why) in &report.skipped {
            let _ = writeln!(
                out,
                "- {} {}: {why}",
                format_size_exact(*size as u64),
                sh.name()
            );
        }
    }
    let _ = writeln!(out, "\n## Every cell\n");
    let _ = writeln!(
        out,
        "| size | shape | iterations | best | best ms | smart ms | smart / best | adaptive ms | adaptive / best | smart pinned / hot set | floor within the pinned bound / best | shortest run ms |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    let num = |v: Option<f64>, prec: usize| v.map_or_else(|| "—".into(), |x| format!("{x:.prec$}"));
    for cell in &s.cells {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.2} | {} | {} | {} | {} | {} | {:.3} ({}) | {:.1} |",
            format_size_exact(cell.size as u64),
            cell.shape.name(),
            cell.iterations,
            cell.best.0.name(),
            cell.best.1,
            num(cell.smart.map(|x| x.0), 2),
            num(cell.smart.map(|x| x.1), 3),
            num(cell.adaptive.map(|x| x.0), 2),
            num(cell.adaptive.map(|x| x.1), 3),
            num(cell.smart_pinned_ratio, 3),
            cell.bound.ratio(),
            cell.bound.basis.name(),
            cell.shortest_run_ms,
        );
    }
    out
}

/// Every run as CSV.
pub fn runs_csv(report: &MatrixReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# pinwise bench alloc --matrix; device: {}; calibration: {}{}",
        report.device,
        report.calibration,
        if report.fixture {
            "; TEST FIXTURE: not GPU figures"
        } else {
            ""
        }
    );
    out.push_str("hot,cold,round_trips,mixed,size_bytes,strategy,repeat,iterations,total_ms,hot_ms,peak_pinned_bytes,hot_working_set_bytes,pinned_allocations,allocations,teardown_ms,fill_ms,fixture\n");
    for r in &report.rows {
        let run = &r.run;
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{:.3},{:.3},{},{},{},{},{:.3},{:.3},{}",
            r.shape.hot,
            r.shape.cold,
            r.shape.round_trips,
            r.shape.mixed,
            run.size,
            run.strategy.name(),
            run.repeat,
            run.iterations,
            run.total_ns as f64 / 1e6,
            run.hot_ns as f64 / 1e6,
            run.peak_pinned,
            r.hot_working_set,
            run.pinned_allocations,
            run.allocations,
            run.teardown_ns as f64 / 1e6,
            run.fill_ns as f64 / 1e6,
            report.fixture
        );
    }
    out
}

/// A report read back from a recorded `alloc-matrix-runs.csv` ([`runs_csv`]), to judge
/// recorded runs again (`cargo run -p pinwise-bench --example rejudge`): its shapes and
/// sizes as they appear, repeats from the rows, the device from the header line, priced
/// with `policy` (the run's own calibration); the standard floor, no wall time.
pub fn report_from_runs_csv(text: &str, policy: Policy) -> Result<MatrixReport, BenchError> {
    let bad = |line: &str, why: &str| BenchError::invalid(format!("{why}: {line}"));
    let device = text
        .lines()
        .next()
        .and_then(|l| l.split("; device: ").nth(1))
        .and_then(|l| l.split("; calibration: ").next())
        .unwrap_or("unknown")
        .to_string();
    let mut rows = Vec::new();
    let mut fixture = false;
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("hot,"))
    {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() < 17 {
            return Err(bad(line, "a runs line of fewer than 17 fields"));
        }
        let n = |i: usize| f[i].parse::<u64>().map_err(|_| bad(line, "not a number"));
        let ns = |i: usize| {
            f[i].parse::<f64>()
                .map(|ms| (ms * 1e6).round() as u64)
                .map_err(|_| bad(line, "not a time"))
        };
        let shape = Shape {
            hot: n(0)? as usize,
            cold: n(1)? as usize,
            round_trips: n(2)? as usize,
            mixed: f[3] == "true",
        };
        let strategy = StrategyKind::ALL
            .into_iter()
            .find(|k| k.name() == f[5])
            .ok_or_else(|| bad(line, "an unknown strategy"))?;
        fixture |= f[16] == "true";
        rows.push(MatrixRow {
            shape,
            run: RunRow {
                size: n(4)? as usize,
                strategy,
                repeat: n(6)? as usize,
                iterations: n(7)? as usize,
                total_ns: ns(8)?,
                hot_ns: ns(9)?,
                hot_bytes: 0,
                peak_pinned: n(10)?,
                pinned_allocations: n(12)?,
                allocations: n(13)?,
                teardown_ns: ns(14)?,
                fill_ns: ns(15)?,
            },
            hot_working_set: n(11)?,
        });
    }
    let mut config = MatrixConfig::standard(policy);
    config.shapes = Vec::new();
    for r in &rows {
        if !config.shapes.contains(&r.shape) {
            config.shapes.push(r.shape);
        }
    }
    config.sizes = rows.iter().map(|r| r.run.size).collect();
    config.sizes.sort_unstable();
    config.sizes.dedup();
    config.repeats = rows.iter().map(|r| r.run.repeat + 1).max().unwrap_or(1);
    Ok(MatrixReport {
        calibration: config.policy.cost_model().source().to_string(),
        config,
        rows,
        device,
        fixture,
        wall_s: 0.0,
        estimate_s: 0.0,
        skipped: Vec::new(),
    })
}

/// The worst ratios per size as CSV.
pub fn worst_csv(report: &MatrixReport, s: &MatrixSummary) -> String {
    let mut out = String::new();
    out.push_str("size_bytes,shapes,smart_worst_ratio,smart_worst_shape,adaptive_worst_ratio,adaptive_worst_shape,smart_worst_pinned_ratio,smart_worst_pinned_shape,smart_worst_ratio_where_bounds_can_hold,smart_worst_shape_where_bounds_can_hold,adaptive_worst_ratio_where_bounds_can_hold,adaptive_worst_shape_where_bounds_can_hold,fixture\n");
    let part = |w: Option<(f64, Shape)>| {
        w.map_or_else(
            || ",".to_string(),
            |(r, sh)| format!("{r:.4},{}", sh.name()),
        )
    };
    for w in &s.worst {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{}",
            w.size,
            w.shapes,
            part(w.smart),
            part(w.adaptive),
            part(w.pinned),
            part(w.smart_feasible),
            part(w.adaptive_feasible),
            report.fixture
        );
    }
    out
}

/// Writes `alloc-matrix.md`, `alloc-matrix-runs.csv` and `alloc-matrix-worst.csv` into
/// `dir` (created if needed). Returns the paths.
pub fn write_all(
    report: &MatrixReport,
    dir: &Path,
    command: &str,
    date: &str,
) -> std::io::Result<Vec<PathBuf>> {
    pinwise_core::safe_file::create_private_dir_all(dir)?;
    let s = MatrixSummary::of(report);
    let files = [
        ("alloc-matrix.md", markdown(report, &s, command, date)),
        ("alloc-matrix-runs.csv", runs_csv(report)),
        ("alloc-matrix-worst.csv", worst_csv(report, &s)),
    ];
    let mut out = Vec::new();
    for (name, text) in files {
        let p = dir.join(name);
        pinwise_core::safe_file::write_bytes(&p, text.as_bytes())?;
        out.push(p);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinwise_core::CostModel;

    #[test]
    fn shapes_cover_the_ranges() {
        let s = DEFAULT_SHAPES;
        assert_eq!(s.iter().map(|x| x.hot).min(), Some(1));
        assert_eq!(s.iter().map(|x| x.hot).max(), Some(4));
        assert_eq!(s.iter().map(|x| x.cold).min(), Some(0));
        assert_eq!(s.iter().map(|x| x.cold).max(), Some(8));
        assert_eq!(s.iter().map(|x| x.round_trips).min(), Some(1));
        assert_eq!(s.iter().map(|x| x.round_trips).max(), Some(16));
        assert!(s.iter().any(|x| x.mixed));
    }

    /// The standard matrix is planned to finish within its budget on the built-in H200
    /// calibration, the largest sizes at few iterations and the small ones at many.
    #[test]
    fn the_standard_matrix_fits_its_time_budget() {
        let c = MatrixConfig::standard(Policy::new(CostModel::builtin()));
        let (its, est) = c.planned_iterations();
        assert!(est <= 300.0 * timing::BUDGET_SHARE, "estimate {est} s");
        assert_eq!(its.len(), DEFAULT_SHAPES.len());
        for per_shape in &its {
            assert!(per_shape[..5].iter().all(|&n| n >= 3), "{its:?}");
            // 4 KiB and 16 KiB cells run at least as many iterations as the old cap of 32.
            assert!(per_shape[..2].iter().all(|&n| n >= 32), "{its:?}");
            assert!(per_shape[9] <= per_shape[0]);
        }
        // ...and, where the budget allows, hundreds, so that they run long enough to measure.
        assert!(
            its.iter().all(|s| s[1] >= 64) && its.iter().any(|s| s[0] >= 256),
            "{its:?}"
        );
        // Every size keeps at least one shape; the largest sizes leave some out.
        for si in 0..c.sizes.len() {
            assert!(its.iter().any(|s| s[si] > 0), "size {si}: {its:?}");
        }
        assert!(its.iter().any(|s| s[9] == 0));
    }

    fn h100() -> CostModel {
        CostModel::from_csv_str(
            include_str!("../../pinwise-alloc/tests/data/h100-calibration.csv"),
            "H100 calibration (bench/results/gpu-alloc-matrix/s6)",
        )
        .unwrap()
    }

    /// Every cell the standard matrix runs is planned to last at least the minimum run time
    /// for its fastest strategy (pin-each aside), on the H100's calibration and the
    /// built-in H200 table, within the time budget; pin-each runs no more than the cell.
    /// `--quick` has no floor.
    #[test]
    fn every_planned_cell_runs_at_least_the_minimum() {
        for model in [h100(), CostModel::builtin()] {
            let c = MatrixConfig::standard(Policy::new(model.clone()));
            assert_eq!(c.min_run_s, MIN_RUN_S);
            let p = c.plan();
            assert!(
                p.estimate_s <= 300.0 * timing::BUDGET_SHARE,
                "{}",
                p.estimate_s
            );
            for (hi, sh) in c.shapes.iter().enumerate() {
                for (si, &size) in c.sizes.iter().enumerate() {
                    let n = p.iterations[hi][si];
                    assert!(p.pin_each[hi][si] <= n);
                    if n == 0 {
                        continue;
                    }
                    let fastest = STRATEGIES
                        .iter()
                        .filter(|&&k| k != StrategyKind::PinEach)
                        .map(|&k| {
                            timing::estimate_run_ns(&model, sh, size, n, k)
                                - timing::estimate_run_ns(&model, sh, size, 0, k)
                        })
                        .fold(f64::INFINITY, f64::min);
                    assert!(
                        fastest >= c.min_run_s * 1e9 * (1.0 - 1e-9),
                        "{} {}: {n} iterations, {fastest} ns",
                        sh.name(),
                        size
                    );
                    assert!(n >= p.floors[hi][si]);
                }
            }
            // The 4 KiB cells run thousands of iterations where the seventh session's ran 64.
            assert!(
                p.iterations.iter().all(|s| s[0] >= 200),
                "{:?}",
                p.iterations
            );
            for si in 0..c.sizes.len() {
                assert!(p.iterations.iter().any(|s| s[si] > 0), "size {si}");
            }
        }
        let q = MatrixConfig::quick(Policy::new(h100()));
        assert_eq!(q.min_run_s, 0.0);
        let p = q.plan();
        assert!(p.floors.iter().flatten().all(|&f| f == 1));
        assert_eq!(p.pin_each, p.iterations);
        assert!(p.estimate_s <= 60.0 * timing::BUDGET_SHARE);
    }

    /// The verdict keeps the raw worst ratio and its "missed"; the second pair of columns
    /// leaves out the cells where the cell's own runs show both bounds cannot hold, and
    /// those are listed with the measured arithmetic (per iteration).
    #[test]
    fn cells_where_both_bounds_cannot_hold_are_listed_and_left_out_of_the_second_verdict() {
        let mut config = MatrixConfig::quick(Policy::new(h100()));
        let (a, b) = (shape(1, 8, 1, false), shape(4, 0, 16, false));
        config.shapes = vec![a, b];
        let size = 256 * KIB;
        let its = 4096;
        let mut rows = Vec::new();
        for (sh, smart_ms) in [(a, 160.0), (b, 102.0)] {
            // Per iteration: writes 10 us; hot copies 40 us pageable, 8 us pinned; the rest
            // (cold0's copy and the allocations) 18.8 us pageable, 6.4 us in the pool.
            for (k, hot_us, rest_us) in [
                (StrategyKind::Pageable, 40.0, 18.8),
                (StrategyKind::CachingPool, 8.0, 6.4),
                (StrategyKind::Smart, 8.0, smart_ms / its as f64 * 1e3 - 18.0),
                (
                    StrategyKind::Adaptive,
                    8.0,
                    smart_ms / its as f64 * 1e3 - 18.0,
                ),
            ] {
                let per_it = 10.0 + hot_us + rest_us;
                let mut r = row(sh, size, k, 0, per_it * its as f64 / 1e3, 0);
                r.run.iterations = its;
                r.run.fill_ns = its as u64 * 10_000;
                r.run.hot_ns = (its as f64 * hot_us * 1e3) as u64;
                r.run.peak_pinned = match k {
                    StrategyKind::Pageable => 0,
                    StrategyKind::CachingPool => ((sh.hot + sh.cold) * size) as u64,
                    _ => (sh.hot * size) as u64,
                };
                rows.push(r);
            }
        }
        let report = mock_report(config, rows, "H100");
        let s = MatrixSummary::of(&report);
        let (ca, cb) = (&s.cells[0], &s.cells[1]);
        assert_eq!(ca.bound.basis, crate::bounds::Basis::Measured);
        assert!((ca.best.1 - 4096.0 * 24.4e-3).abs() < 1e-3, "{:?}", ca.best);
        // Floor: 10 + 8 + 18.8 = 36.8 us against the pool's 24.4: 1.508.
        assert!(
            (ca.bound.ratio() - 36.8 / 24.4).abs() < 1e-4,
            "{}",
            ca.bound.explain()
        );
        assert!(!ca.smart_bounds_can_hold() && !ca.adaptive_bounds_can_hold());
        // Without a cold copy everything the pool pins fits: the floor is the pool's.
        assert!(
            (cb.bound.ratio() - 1.0).abs() < 1e-4,
            "{}",
            cb.bound.explain()
        );
        assert!(cb.smart_bounds_can_hold() && cb.adaptive_bounds_can_hold());
        let w = &s.worst[0];
        let (raw, raw_shape) = w.smart.unwrap();
        assert!((raw - 160.0 / ca.best.1).abs() < 1e-9 && raw_shape == a);
        let (ok, ok_shape) = w.smart_feasible.unwrap();
        assert!((ok - 102.0 / cb.best.1).abs() < 1e-9 && ok_shape == b);
        let md = markdown(&report, &s, "test", "today");
        assert!(
            md.contains("| 256 KiB | 2 | 1.601 (h1 c8 r1) **missed** |"),
            "{md}"
        );
        assert!(
            md.contains("| 1.021 (h4 c0 r16) met | 1.021 (h4 c0 r16) met |"),
            "{md}"
        );
        let line = md
            .lines()
            .find(|l| l.starts_with("- 256 KiB h1 c8 r1: smart and adaptive (> 1.05)"))
            .unwrap_or_else(|| panic!("{md}"));
        for part in [
            "floor / best 1.508; measured:",
            "writes 10.0 us (the least measured)",
            "h0 pinned 8.0 us",
            "cold0 and allocations pageable 18.8 us",
            "caching-pool 99.94 ms measured",
        ] {
            assert!(line.contains(part), "{part}: {line}");
        }
        assert!(!md.contains("- 256 KiB h4 c0 r16:"), "{md}");
        assert!(md.contains("| 1.508 (measured) |"), "{md}");
        let csv = worst_csv(&report, &s);
        assert!(
            csv.lines()
                .nth(1)
                .unwrap()
                .contains(",1.0206,h4 c0 r16,1.0206,h4 c0 r16,true"),
            "{csv}"
        );
    }

    /// The eighth session's H100 run, as recorded (`bench/results/gpu-alloc-matrix/s8/own`):
    /// at 256 KiB h1 c8 r1 the calibration's prediction listed the cell as feasible (floor /
    /// pool 0.952, the pool predicted at 49.4 ms) while its runs show it is not (pool 36.82
    /// ms measured, the floor within the bound from the same runs 39.85 ms: 1.082). At
    /// 16 KiB the runs show the bound costs nothing (0.992): smart's miss there is its own.
    #[test]
    fn the_recorded_h100_cells_are_judged_by_their_runs() {
        let runs_csv = include_str!(
            "../../../bench/results/gpu-alloc-matrix/s8/own/gpu-alloc-matrix-runs.csv"
        );
        let calibration = CostModel::from_csv_str(
            include_str!("../../../bench/results/gpu-alloc-matrix/s8/own/gpu-calibration.csv"),
            "H100 calibration (bench/results/gpu-alloc-matrix/s8/own)",
        )
        .unwrap();
        let a = shape(1, 8, 1, false);
        let all = report_from_runs_csv(runs_csv, Policy::new(calibration.clone())).unwrap();
        assert!(!all.fixture && all.device.contains("NVIDIA H100 80GB HBM3"));
        assert_eq!(all.config.shapes, DEFAULT_SHAPES.to_vec());
        assert_eq!(all.config.repeats, 3);
        assert_eq!(all.rows.len(), runs_csv.lines().count() - 2);
        let mut config = all.config.clone();
        config.shapes = vec![a];
        let rows: Vec<MatrixRow> = all
            .rows
            .iter()
            .filter(|r| r.shape == a && [16 * KIB, 256 * KIB, 4 * MIB].contains(&r.run.size))
            .cloned()
            .collect();
        assert_eq!(rows.len(), 45);
        let report = mock_report(config, rows, "H100 s8");
        let s = MatrixSummary::of(&report);
        let cell = |size| s.cells.iter().find(|c| c.size == size).unwrap();
        let big = cell(256 * KIB);
        assert_eq!(big.iterations, 256);
        assert_eq!(big.best.0, StrategyKind::CachingPool);
        assert!((big.best.1 - 36.823).abs() < 1e-3, "{:?}", big.best);
        assert_eq!(big.bound.basis, crate::bounds::Basis::Measured);
        assert!(
            (big.bound.floor_ns / 1e6 - 39.85).abs() < 0.01,
            "{}",
            big.bound.explain()
        );
        assert!(
            (big.bound.ratio() - 1.082).abs() < 1e-3,
            "{}",
            big.bound.explain()
        );
        assert!(!big.smart_bounds_can_hold() && !big.adaptive_bounds_can_hold());
        // The prediction from the same calibration and measured writes said the opposite.
        let predicted = BoundFloor::of(
            &calibration,
            &a,
            256,
            |_| 256 * KIB,
            Some(big_fill_median(&report, 256 * KIB)),
        );
        assert!(
            (predicted.ratio() - 0.952).abs() < 2e-3,
            "{}",
            predicted.explain()
        );
        assert!(!predicted.conflicts(SMART_TARGET));
        let small = cell(16 * KIB);
        assert!(
            (small.bound.ratio() - 0.992).abs() < 1e-3,
            "{}",
            small.bound.explain()
        );
        assert!(small.smart_bounds_can_hold());
        let w = s.worst.iter().find(|w| w.size == 256 * KIB).unwrap();
        assert!(w.smart_feasible.is_none() && w.adaptive_feasible.is_none());
        // At 4 MiB the pageable run's fresh 4 MiB buffers cost it 1.8 ms an iteration
        // outside writes and hot copies, smart's (its cold buffers pageable too, within the
        // bound) 0.58 ms: the floor takes smart's, 0.845 of the pool, below smart's own
        // 0.854 (the pool's 9 blocks of 4 MiB weigh on 16 iterations).
        let four = cell(4 * MIB);
        assert!(four.bound.within.is_none());
        assert!(
            (four.bound.ratio() - 0.845).abs() < 1e-3,
            "{}",
            four.bound.explain()
        );
        assert!(four.bound.ratio() <= four.smart.unwrap().1);
        assert!(four.smart_bounds_can_hold());
    }

    /// The median of every run's writes per iteration at `size` (what the prediction used).
    fn big_fill_median(report: &MatrixReport, size: usize) -> f64 {
        median(
            report
                .rows
                .iter()
                .filter(|r| r.run.size == size)
                .map(|r| r.run.fill_ns as f64 / r.run.iterations as f64)
                .collect(),
        )
    }

    /// A run measured short of the floor raises the later repeats' iterations in proportion
    /// (5 % to spare), by at most [`MAX_REPLAN`]; a long enough run, no floor or no
    /// iterations change nothing, and nothing is ever lowered.
    #[test]
    fn later_repeats_are_replanned_from_the_measured_run() {
        let ms = 1e6;
        // The eighth session's shortest H100 run: 35.8 ms of a planned 100, 2,781 iterations.
        assert_eq!(replanned(2781, 35.8 * ms, 100.0 * ms), 8157);
        assert!(replanned(2781, 35.8 * ms, 100.0 * ms) as f64 * 35.8 / 2781.0 >= 100.0);
        assert_eq!(replanned(1000, 10.0 * ms, 100.0 * ms), 4000);
        assert_eq!(replanned(1000, 100.0 * ms, 100.0 * ms), 1000);
        assert_eq!(replanned(1000, 400.0 * ms, 100.0 * ms), 1000);
        assert_eq!(replanned(1000, 10.0 * ms, 0.0), 1000);
        assert_eq!(replanned(0, 10.0 * ms, 100.0 * ms), 0);
        assert_eq!(
            replanned(timing::MAX_FLOOR_ITERATIONS, 1.0 * ms, 100.0 * ms),
            timing::MAX_FLOOR_ITERATIONS
        );
        // A cell: the fastest run other than pin-each's decides; pin-each by its own run,
        // at most the cell's iterations.
        let a = DEFAULT_SHAPES[1];
        let mk = |k, ms: f64, its| {
            let mut r = row(a, 4 * KIB, k, 0, ms, 0);
            r.run.iterations = its;
            r
        };
        let runs = [
            mk(StrategyKind::Pageable, 70.0, 2781),
            mk(StrategyKind::CachingPool, 50.0, 2781),
            mk(StrategyKind::Smart, 80.0, 2781),
            mk(StrategyKind::PinEach, 8.0, 7),
        ];
        // 1.05 x 100 / 50 = 2.1: 5,841 iterations; pin-each 4x (capped): 28.
        assert_eq!(replan(&runs, 2781, 7, 0.1), (5841, 28));
        assert_eq!(replan(&runs, 2781, 7, 0.0), (2781, 7));
        // Pin-each never runs more than the cell.
        assert_eq!(replan(&runs[3..], 10, 7, 0.1), (10, 10));
    }

    /// The report gives the measured run lengths: shortest, median, how many under the
    /// floor, how many of those in first repeats, how many cells were re-planned.
    #[test]
    fn the_report_gives_the_measured_run_lengths() {
        let mut config = MatrixConfig::standard(Policy::new(CostModel::builtin()));
        let a = DEFAULT_SHAPES[1];
        config.shapes = vec![a];
        let mk = |k, repeat, ms: f64, its| {
            let mut r = row(a, 4 * KIB, k, repeat, ms, 0);
            r.run.iterations = its;
            r
        };
        let rows = vec![
            mk(StrategyKind::Pageable, 0, 40.0, 1000),
            mk(StrategyKind::Smart, 0, 60.0, 1000),
            mk(StrategyKind::PinEach, 0, 5.0, 3),
            mk(StrategyKind::Pageable, 1, 105.0, 2625),
            mk(StrategyKind::Smart, 1, 150.0, 2625),
            mk(StrategyKind::Pageable, 2, 95.0, 2625),
        ];
        let report = mock_report(config, rows, "built-in");
        let s = MatrixSummary::of(&report);
        assert_eq!(
            s.lengths,
            RunLengths {
                runs: 5,
                shortest_ms: 40.0,
                median_ms: 95.0,
                under_floor: 3,
                under_floor_first_repeat: 2,
                replanned_cells: 1,
            }
        );
        assert!((s.cells[0].shortest_run_ms - 40.0).abs() < 1e-9);
        let md = markdown(&report, &s, "test", "today");
        assert!(
            md.contains(
                "Measured run lengths (every timed run but pin-each's): 5 runs, shortest 40.0 \
                 ms, median 95.0 ms; 3 shorter than the 100 ms floor, 2 of them in a cell's \
                 first repeat"
            ),
            "{md}"
        );
        assert!(md.contains("1 cells re-planned)"), "{md}");
        assert!(md.contains("| 40.0 |\n"), "{md}");
    }

    /// The report's header states the floor (or that there is none).
    #[test]
    fn the_header_states_the_floor() {
        let report = |config: MatrixConfig| mock_report(config, vec![], "built-in");
        let standard = report(MatrixConfig::standard(Policy::new(CostModel::builtin())));
        let md = markdown(&standard, &MatrixSummary::of(&standard), "test", "today");
        assert!(
            md.contains("- floor: every timed run is planned to last at least 100 ms"),
            "{md}"
        );
        assert!(
            md.contains("(at least 3) and is compared per iteration"),
            "{md}"
        );
        let quick = report(MatrixConfig::quick(Policy::new(CostModel::builtin())));
        let md = markdown(&quick, &MatrixSummary::of(&quick), "test", "today");
        assert!(md.contains("- floor: none"), "{md}");
    }

    /// A run of fewer iterations (pin-each under the floor) is compared per iteration.
    #[test]
    fn cells_compare_time_per_iteration() {
        let mut config = MatrixConfig::quick(Policy::new(CostModel::builtin()));
        let a = DEFAULT_SHAPES[0];
        config.shapes = vec![a];
        let mut pe = row(a, MIB, StrategyKind::PinEach, 0, 3.0, 0);
        pe.run.iterations = 1;
        let rows = vec![
            row(a, MIB, StrategyKind::Pageable, 0, 20.0, 0),
            pe,
            row(a, MIB, StrategyKind::Smart, 0, 13.0, 0),
        ];
        let report = mock_report(config, rows, "built-in");
        let s = MatrixSummary::of(&report);
        let cell = &s.cells[0];
        assert_eq!(cell.iterations, 4);
        // Pin-each: 3 ms for 1 iteration is 12 ms over the cell's 4: the best.
        assert_eq!(cell.best, (StrategyKind::PinEach, 12.0));
        let (ms, r) = cell.smart.unwrap();
        assert!((ms - 13.0).abs() < 1e-9 && (r - 13.0 / 12.0).abs() < 1e-9);
    }

    /// The 1.6 at 4 KiB (h4 c8 r16 mixed): 4,096 + 2,048 + 1,024 + 3,072 B of hot
    /// buffers (10,240 B) need 3 pages at least (1.2×), 4 with a page-aligned block each
    /// (1.6×); a hot set of whole pages has no such floor.
    #[test]
    fn pinning_locks_whole_pages() {
        let c = MatrixConfig::standard(Policy::new(CostModel::builtin()));
        let mixed = c.bench_config(&shape(4, 8, 16, true));
        let p = PageFloor::of(&mixed, 4 * KIB);
        assert_eq!((p.hot, p.least, p.per_buffer), (10_240, 12_288, 16_384));
        let two = PageFloor::of(&c.bench_config(&shape(2, 4, 2, true)), 4 * KIB);
        assert_eq!((two.hot, two.least, two.per_buffer), (6_144, 8_192, 8_192));
        let whole = PageFloor::of(&mixed, 16 * KIB);
        assert_eq!(
            (whole.hot, whole.least, whole.per_buffer),
            (40_960, 40_960, 40_960)
        );
        let plain = PageFloor::of(&c.bench_config(&shape(3, 5, 4, false)), 4 * KIB);
        assert_eq!(
            (plain.hot, plain.least, plain.per_buffer),
            (12_288, 12_288, 12_288)
        );
    }

    /// The report says where the pinned bound cannot be met, with the numbers.
    #[test]
    fn the_report_names_cells_whose_hot_set_is_not_whole_pages() {
        let mut config = MatrixConfig::quick(Policy::new(CostModel::builtin()));
        let mixed = shape(4, 8, 16, true);
        config.shapes = vec![mixed];
        let size = 4 * KIB;
        let rows = vec![
            row(mixed, size, StrategyKind::Pageable, 0, 1.0, 0),
            row(mixed, size, StrategyKind::Smart, 0, 1.0, 16_384),
        ];
        let report = mock_report(config, rows, "built-in");
        let s = MatrixSummary::of(&report);
        let md = markdown(&report, &s, "test", "today");
        assert!(md.contains("Pinning locks whole pages (4096 B)"), "{md}");
        // No run pins every buffer here (no pool, no pin-each): the floor is predicted, and
        // says so.
        assert_eq!(s.cells[0].bound.basis, crate::bounds::Basis::Predicted);
        assert!(md.contains(" (predicted) |"), "{md}");
        assert!(
            md.contains(
                "- 4 KiB h4 c8 r16 mixed: hot set 10240 B; at least 12288 B (1.200×) with the \
                 buffers sharing pages, 16384 B (1.600×) with a page-aligned block each"
            ),
            "{md}"
        );
    }

    /// A report of `rows` on the mock backend (`calibration` names the table), nothing
    /// left out.
    fn mock_report(config: MatrixConfig, rows: Vec<MatrixRow>, calibration: &str) -> MatrixReport {
        MatrixReport {
            config,
            rows,
            device: "mock".into(),
            fixture: true,
            calibration: calibration.into(),
            wall_s: 1.0,
            estimate_s: 1.0,
            skipped: vec![],
        }
    }

    fn row(
        shape: Shape,
        size: usize,
        k: StrategyKind,
        repeat: usize,
        ms: f64,
        pinned: u64,
    ) -> MatrixRow {
        MatrixRow {
            shape,
            run: RunRow {
                size,
                strategy: k,
                repeat,
                iterations: 4,
                total_ns: (ms * 1e6) as u64,
                hot_ns: 0,
                hot_bytes: 0,
                peak_pinned: pinned,
                pinned_allocations: 0,
                allocations: 0,
                teardown_ns: 0,
                fill_ns: 0,
            },
            hot_working_set: (shape.hot * size) as u64,
        }
    }

    /// The worst ratio over shapes, against the best baseline of each shape (medians).
    #[test]
    fn worst_over_shapes_against_the_best_baseline() {
        let mut config = MatrixConfig::quick(Policy::new(CostModel::builtin()));
        let (a, b) = (DEFAULT_SHAPES[0], DEFAULT_SHAPES[3]);
        config.shapes = vec![a, b];
        let m = MIB;
        let mut rows = Vec::new();
        for rep in 0..3 {
            // Shape a: caching pool best at 10 ms; smart 10.2 (1.02), adaptive 11 (1.10).
            rows.push(row(a, m, StrategyKind::Pageable, rep, 20.0, 0));
            rows.push(row(
                a,
                m,
                StrategyKind::CachingPool,
                rep,
                10.0,
                4 * m as u64,
            ));
            rows.push(row(a, m, StrategyKind::Smart, rep, 10.2, m as u64));
            rows.push(row(a, m, StrategyKind::Adaptive, rep, 11.0, m as u64));
            // Shape b: pageable best at 5 ms (one outlier repeat of 50); smart 5.5 (1.10).
            let p = if rep == 1 { 50.0 } else { 5.0 };
            rows.push(row(b, m, StrategyKind::Pageable, rep, p, 0));
            rows.push(row(b, m, StrategyKind::PinEach, rep, 9.0, 0));
            rows.push(row(b, m, StrategyKind::Smart, rep, 5.5, 3 * m as u64));
            rows.push(row(b, m, StrategyKind::Adaptive, rep, 5.1, 3 * m as u64));
        }
        let report = MatrixReport {
            skipped: vec![(4 * m, b, "left out by the time budget's plan".into())],
            ..mock_report(config, rows, "built-in")
        };
        let s = MatrixSummary::of(&report);
        assert_eq!(s.cells.len(), 2);
        assert_eq!(s.cells[0].best, (StrategyKind::CachingPool, 10.0));
        assert_eq!(
            s.cells[1].best,
            (StrategyKind::Pageable, 5.0),
            "medians, not means"
        );
        assert_eq!(s.worst.len(), 1);
        let w = &s.worst[0];
        assert_eq!(w.shapes, 2);
        let (r, sh) = w.smart.unwrap();
        assert!((r - 1.1).abs() < 1e-9 && sh == b, "{r} {sh:?}");
        let (r, sh) = w.adaptive.unwrap();
        assert!((r - 1.1).abs() < 1e-9 && sh == a, "{r} {sh:?}");
        let (r, _) = w.pinned.unwrap();
        assert!((r - 1.0).abs() < 1e-9);
        let md = markdown(&report, &s, "test", "today");
        assert!(md.contains("TEST FIXTURE RUN"));
        assert!(
            !md.contains("Pinning locks whole pages"),
            "1 MiB buffers: {md}"
        );
        assert!(md.contains("1.100 (h3 c5 r4) **missed**"), "{md}");
        assert!(
            md.contains("4 MiB h3 c5 r4: left out by the time budget's plan"),
            "{md}"
        );
        let csv = worst_csv(&report, &s);
        assert!(
            csv.lines()
                .nth(1)
                .unwrap()
                .starts_with("1048576,2,1.1000,h3 c5 r4,1.1000,h1 c0 r1,1.0000"),
            "{csv}"
        );
    }
}
