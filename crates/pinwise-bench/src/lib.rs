//! `pinwise bench alloc`: the seed's experiment.
//!
//! For each size, a loop of iterations; each iteration allocates `hot_buffers` hot buffers
//! and `cold_buffers` cold ones, interleaved (hot0, cold0, hot1, cold1, ...; each role at
//! its own call site), all live at once; writes every buffer (the program filling its data);
//! copies each hot buffer to the device and back `round_trips` times; copies the first cold
//! buffer to the device once (the others never); and frees them all. Copies are the CUDA
//! driver's synchronous ones on real device buffers, so timings include the transfer.
//!
//! Each strategy ([`StrategyKind`]) runs the same loop from a fresh state; strategies are
//! interleaved within each repeat (in an order that changes from repeat to repeat), and the
//! report gives medians over repeats of: total time (allocation + fill + transfers + free),
//! hot-transfer bandwidth, and peak pinned bytes. The number of iterations per size is
//! sized by bytes (`target_hot_bytes`), so that small sizes run many iterations and large
//! ones few. Teardown (releasing pools) is timed separately and not part of the total.
//!
//! [`calibrate`] (`pinwise calibrate`) lives here too: it measures the curves of
//! pinwise-core's cost model on the same [`BenchDevice`]. Both are tools run by a person on
//! a GPU, never inside a traced program, which is why they are not part of pinwise-alloc.

pub mod bounds;
pub mod calibrate;
mod error;
pub mod matrix;
mod report;
mod strategies;
pub mod timing;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use pinwise_core::profile::Profile;
use pinwise_core::units::format_size_exact;
use pinwise_core::{Direction, Policy, Site};

use pinwise_alloc::backend::cuda::CudaBackend;
use pinwise_alloc::backend::{DevicePtr, PinBackend, StreamHandle};
use pinwise_alloc::callsite::location_offset;
use pinwise_alloc::engine::{Engine, EngineConfig};
#[cfg(feature = "testing")]
use pinwise_alloc::testing::MockBackend;

pub use error::BenchError;
pub use report::{
    markdown, runs_csv, summary_csv, svg, write_all, SizeVerdict, Summary, SummaryRow,
};
pub use strategies::StrategyKind;
use strategies::{CachingPool, EngineStrategy, Pageable, PinEach, Strategy};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;
#[cfg(test)]
const GIB: usize = 1 << 30;

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Buffer sizes, bytes.
    pub sizes: Vec<usize>,
    /// Repeats of every (size, strategy); the report gives medians.
    pub repeats: usize,
    /// Hot buffers per iteration.
    pub hot_buffers: usize,
    /// Cold buffers per iteration (the first copied once, the others never).
    pub cold_buffers: usize,
    /// Round trips (host to device and back) of each hot buffer per iteration.
    pub round_trips: usize,
    /// Hot bytes to move per run; iterations = this / (hot bytes per iteration), clamped.
    pub target_hot_bytes: u64,
    /// Fewest iterations per run.
    pub min_iterations: usize,
    /// Most iterations per run.
    pub max_iterations: usize,
    /// Strategies to run.
    pub strategies: Vec<StrategyKind>,
    /// pinwise-core's policy (with the calibration) for the pinwise strategies.
    pub policy: Policy,
    /// Pinned budget for the pinwise strategies (`None`: the default).
    pub budget_bytes: Option<u64>,
    /// Buffers of different sizes within one iteration: role `r` gets
    /// [`MIXED_QUARTERS`]`[r % 4]` quarters of the size (the size named is the largest).
    pub mixed_sizes: bool,
    /// Wall-time budget, seconds: iterations are lowered (largest sizes first, down to one)
    /// until the estimate from the calibration fits ([`timing`]). `None`: no budget.
    pub time_budget_s: Option<f64>,
}

/// Quarters of the size each role gets with [`BenchConfig::mixed_sizes`], by role modulo 4.
pub const MIXED_QUARTERS: [usize; 4] = [4, 2, 1, 3];

impl BenchConfig {
    /// The default experiment: 4 KiB to 1 GiB in steps of 4, 3 repeats, 2 hot and 2 cold
    /// buffers, 8 round trips, 16 GiB of hot copies per run (3 to 64 iterations).
    pub fn standard(policy: Policy) -> Self {
        BenchConfig {
            sizes: (0..10).map(|i| (4 * KIB) << (2 * i)).collect(),
            repeats: 3,
            hot_buffers: 2,
            cold_buffers: 2,
            round_trips: 8,
            target_hot_bytes: 16 << 30,
            min_iterations: 3,
            max_iterations: 64,
            strategies: StrategyKind::ALL.to_vec(),
            policy,
            budget_bytes: None,
            mixed_sizes: false,
            time_budget_s: Some(300.0),
        }
    }

    /// A quick look: 64 KiB, 1 MiB, 16 MiB and 256 MiB, one repeat, fewer iterations.
    pub fn quick(policy: Policy) -> Self {
        BenchConfig {
            sizes: vec![64 * KIB, MIB, 16 * MIB, 256 * MIB],
            repeats: 1,
            target_hot_bytes: 4 << 30,
            min_iterations: 3,
            max_iterations: 16,
            ..BenchConfig::standard(policy)
        }
    }

    /// Iterations of one run at `size`.
    pub fn iterations(&self, size: usize) -> usize {
        let per_iter = (size * self.hot_buffers * self.round_trips * 2).max(1) as u64;
        (self.target_hot_bytes.div_ceil(per_iter) as usize)
            .clamp(self.min_iterations.max(1), self.max_iterations.max(1))
    }

    /// Bytes of hot buffers live at once: the hot working set.
    pub fn hot_working_set(&self, size: usize) -> u64 {
        (0..self.hot_buffers)
            .map(|r| self.role_size(size, r) as u64)
            .sum()
    }

    /// The size of role `role`'s buffer at size `size` (smaller with mixed sizes).
    pub fn role_size(&self, size: usize, role: usize) -> usize {
        if self.mixed_sizes {
            (size * MIXED_QUARTERS[role % 4] / 4).max(1)
        } else {
            size
        }
    }

    /// The workload's shape.
    pub fn shape(&self) -> timing::Shape {
        timing::Shape {
            hot: self.hot_buffers,
            cold: self.cold_buffers,
            round_trips: self.round_trips,
            mixed: self.mixed_sizes,
        }
    }

    /// Iterations per size (in the order of `sizes`): [`BenchConfig::iterations`], lowered to
    /// fit [`BenchConfig::time_budget_s`] as the calibration estimates it. Also returns the
    /// estimate, seconds.
    pub fn planned_iterations(&self) -> (Vec<usize>, f64) {
        let shape = self.shape();
        let items: Vec<timing::Item> = self
            .sizes
            .iter()
            .enumerate()
            .map(|(i, &size)| {
                timing::Item::of(
                    self.policy.cost_model(),
                    &shape,
                    size,
                    &self.strategies,
                    self.repeats,
                    self.iterations(size),
                    i,
                )
            })
            .collect();
        timing::plan(&items, self.time_budget_s)
    }
}

/// The GPU (or a fixture) the benchmark runs on: device memory plus the allocator backend.
pub trait BenchDevice {
    /// The backend every strategy pins and copies through.
    fn backend(&self) -> Arc<dyn PinBackend>;
    /// Device memory of `len` bytes.
    fn alloc_device(&self, len: usize) -> Result<DevicePtr, BenchError>;
    /// Frees device memory from [`BenchDevice::alloc_device`].
    fn free_device(&self, ptr: DevicePtr);
}

/// The CUDA driver (real GPU, or the CPU stand-in, which says it is a fixture).
pub struct CudaDevice {
    backend: Arc<CudaBackend>,
    buffers: Mutex<HashMap<u64, pinwise_cuda::DeviceBuffer>>,
}

impl CudaDevice {
    /// On `backend`'s device.
    pub fn new(backend: Arc<CudaBackend>) -> Self {
        CudaDevice {
            backend,
            buffers: Mutex::new(HashMap::new()),
        }
    }

    /// Its backend.
    pub fn cuda_backend(&self) -> &Arc<CudaBackend> {
        &self.backend
    }
}

impl BenchDevice for CudaDevice {
    fn backend(&self) -> Arc<dyn PinBackend> {
        self.backend.clone()
    }
    fn alloc_device(&self, len: usize) -> Result<DevicePtr, BenchError> {
        let b = pinwise_cuda::DeviceBuffer::new(self.backend.context(), len)?;
        let p = b.ptr().0;
        self.buffers.lock().insert(p, b);
        Ok(DevicePtr(p))
    }
    fn free_device(&self, ptr: DevicePtr) {
        self.buffers.lock().remove(&ptr.0);
    }
}

/// The mock backend (a test fixture) as a bench device, for tests of the benchmark itself
/// (feature `testing`).
#[cfg(feature = "testing")]
pub struct MockDevice(pub Arc<MockBackend>);

#[cfg(feature = "testing")]
impl BenchDevice for MockDevice {
    fn backend(&self) -> Arc<dyn PinBackend> {
        self.0.clone()
    }
    fn alloc_device(&self, len: usize) -> Result<DevicePtr, BenchError> {
        Ok(self.0.alloc_device(len))
    }
    fn free_device(&self, ptr: DevicePtr) {
        self.0.free_device(ptr);
    }
}

/// One run: one strategy at one size, one repeat.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    /// Buffer size, bytes.
    pub size: usize,
    /// Strategy.
    pub strategy: StrategyKind,
    /// Repeat number (0-based).
    pub repeat: usize,
    /// Iterations of the loop.
    pub iterations: usize,
    /// Allocation + fill + transfers + free over all iterations, ns.
    pub total_ns: u64,
    /// Time in hot round trips, ns.
    pub hot_ns: u64,
    /// Bytes moved by hot round trips.
    pub hot_bytes: u64,
    /// Most bytes page-locked at once.
    pub peak_pinned: u64,
    /// Allocations served page-locked.
    pub pinned_allocations: u64,
    /// Allocations made.
    pub allocations: u64,
    /// Releasing the strategy's pools after the run (not in `total_ns`), ns.
    pub teardown_ns: u64,
    /// Time the program spent writing its buffers (part of `total_ns`), ns.
    pub fill_ns: u64,
}

impl RunRow {
    /// Hot-transfer bandwidth, GB/s (1e9 bytes/s).
    pub fn hot_gbps(&self) -> f64 {
        if self.hot_ns == 0 {
            0.0
        } else {
            self.hot_bytes as f64 / self.hot_ns as f64
        }
    }
}

/// Progress of a benchmark, for a progress bar.
#[derive(Debug, Clone)]
pub struct Progress {
    /// Runs done.
    pub done: usize,
    /// Runs in all.
    pub total: usize,
    /// What runs now.
    pub label: String,
}

/// A finished benchmark.
#[derive(Debug, Clone)]
pub struct BenchReport {
    /// The settings it ran with.
    pub config: BenchConfig,
    /// Every run.
    pub rows: Vec<RunRow>,
    /// The device, as the backend describes it.
    pub device: String,
    /// True when it ran on a test fixture: its figures are not GPU figures.
    pub fixture: bool,
    /// Where the calibration came from.
    pub calibration: String,
    /// Wall time of the whole benchmark, seconds.
    pub wall_s: f64,
}

/// The roles' call sites: one source location each, so the engine sees distinct sites that
/// are the same in every run of this build.
fn role_sites(self_module: pinwise_core::ModuleId, n: usize) -> Vec<Site> {
    (0..n)
        .map(|role| Site {
            module: self_module,
            offset: location_offset(file!(), line!(), role as u32),
        })
        .collect()
}

/// Runs the benchmark on `device`, calling `progress` before each run.
pub fn run(
    config: &BenchConfig,
    device: &dyn BenchDevice,
    progress: &mut dyn FnMut(&Progress),
) -> Result<BenchReport, BenchError> {
    run_with_checkpoints(config, device, progress, &mut |_| {})
}

/// As [`run`], calling `checkpoint` with the report so far after each size (so that a run
/// cut short still leaves the sizes it finished).
pub fn run_with_checkpoints(
    config: &BenchConfig,
    device: &dyn BenchDevice,
    progress: &mut dyn FnMut(&Progress),
    checkpoint: &mut dyn FnMut(&BenchReport),
) -> Result<BenchReport, BenchError> {
    let started = Instant::now();
    let backend = device.backend();
    let roles = config.hot_buffers + config.cold_buffers;
    let mut rows = Vec::new();
    let total = config.sizes.len() * config.repeats * config.strategies.len();
    let mut done = 0;
    // Profiles recorded by profile runs, by size (the latest).
    let mut profiles: HashMap<usize, Profile> = HashMap::new();
    let (planned, _) = config.planned_iterations();
    for (si, &size) in config.sizes.iter().enumerate() {
        let iterations = planned[si];
        let dev: Vec<DevicePtr> = (0..roles)
            .map(|_| device.alloc_device(size))
            .collect::<Result<_, _>>()?;
        let result = (|| -> Result<(), BenchError> {
            for repeat in 0..config.repeats {
                for kind in interleaved(&config.strategies, si, repeat) {
                    progress(&Progress {
                        done,
                        total,
                        label: format!(
                            "{} x {} {}",
                            format_size_exact(size as u64),
                            iterations,
                            kind.name()
                        ),
                    });
                    let row = run_one(
                        config,
                        &backend,
                        &dev,
                        size,
                        iterations,
                        repeat,
                        kind,
                        &mut profiles,
                    )?;
                    rows.push(row);
                    done += 1;
                }
            }
            Ok(())
        })();
        for d in dev {
            device.free_device(d);
        }
        result?;
        checkpoint(&BenchReport {
            config: config.clone(),
            rows: rows.clone(),
            device: backend.describe(),
            fixture: backend.is_fixture(),
            calibration: config.policy.cost_model().source().to_string(),
            wall_s: started.elapsed().as_secs_f64(),
        });
    }
    progress(&Progress {
        done,
        total,
        label: "done".into(),
    });
    Ok(BenchReport {
        config: config.clone(),
        rows,
        device: backend.describe(),
        fixture: backend.is_fixture(),
        calibration: config.policy.cost_model().source().to_string(),
        wall_s: started.elapsed().as_secs_f64(),
    })
}

/// The strategies in a different order for each (size, repeat): a rotation, reversed every
/// other repeat, so every strategy runs early and late, next to different neighbours. The
/// smart profile run stays immediately before the smart use run that follows its profile.
fn interleaved(kinds: &[StrategyKind], size_index: usize, repeat: usize) -> Vec<StrategyKind> {
    let pair = kinds.contains(&StrategyKind::SmartProfile) && kinds.contains(&StrategyKind::Smart);
    let mut units: Vec<Vec<StrategyKind>> = Vec::new();
    for &k in kinds {
        match k {
            StrategyKind::Smart if pair => {}
            StrategyKind::SmartProfile if pair => {
                units.push(vec![StrategyKind::SmartProfile, StrategyKind::Smart])
            }
            k => units.push(vec![k]),
        }
    }
    if !units.is_empty() {
        let k = (size_index * 3 + repeat * 5) % units.len();
        units.rotate_left(k);
        if repeat % 2 == 1 {
            units.reverse();
        }
    }
    units.into_iter().flatten().collect()
}

/// An engine configuration for the pinwise strategies.
fn engine_config(config: &BenchConfig) -> EngineConfig {
    let mut c = EngineConfig::new(config.policy.clone());
    c.budget_bytes = config.budget_bytes;
    c
}

/// Records a profile of the workload at `size` without timing it (for the misaligned and
/// budget strategies when no profile run of that size happened yet).
fn record_profile(
    config: &BenchConfig,
    backend: &Arc<dyn PinBackend>,
    size: usize,
    iterations: usize,
) -> Result<Profile, BenchError> {
    let dev: Vec<DevicePtr> = Vec::new();
    let (c, rec) = engine_config(config).recording(None);
    let engine = Engine::new(backend.clone(), c)?;
    let sites = role_sites(engine.sites().self_module(), roles(config));
    let mut s = EngineStrategy {
        engine: Some(engine),
        sites,
    };
    // No device copies: only the notes matter for the profile, so note them without copying.
    workload(config, None, &dev, size, iterations, &mut s, true)?;
    s.teardown()?;
    rec.last_profile()
        .ok_or_else(|| BenchError::invalid("the profile run left no profile"))
}

/// The latest profile of the workload at `size`, recorded (untimed, `iterations`
/// iterations) if there is none yet.
fn profile_at<'p>(
    profiles: &'p mut HashMap<usize, Profile>,
    config: &BenchConfig,
    backend: &Arc<dyn PinBackend>,
    size: usize,
    iterations: usize,
) -> Result<&'p Profile, BenchError> {
    if let std::collections::hash_map::Entry::Vacant(v) = profiles.entry(size) {
        v.insert(record_profile(config, backend, size, iterations)?);
    }
    Ok(&profiles[&size])
}

fn roles(config: &BenchConfig) -> usize {
    config.hot_buffers + config.cold_buffers
}

#[allow(clippy::too_many_arguments)]
fn run_one(
    config: &BenchConfig,
    backend: &Arc<dyn PinBackend>,
    dev: &[DevicePtr],
    size: usize,
    iterations: usize,
    repeat: usize,
    kind: StrategyKind,
    profiles: &mut HashMap<usize, Profile>,
) -> Result<RunRow, BenchError> {
    let mut recorder = None;
    let mut strategy: Box<dyn Strategy> = match kind {
        StrategyKind::Pageable => Box::new(Pageable),
        StrategyKind::PinEach => Box::new(PinEach {
            backend: backend.clone(),
            live: HashMap::new(),
            live_bytes: 0,
            peak: 0,
            allocations: 0,
        }),
        StrategyKind::CachingPool => Box::new(CachingPool {
            backend: backend.clone(),
            free: HashMap::new(),
            live: HashMap::new(),
            cached_bytes: 0,
            allocations: 0,
        }),
        _ => {
            let c = engine_config(config);
            let c = match kind {
                StrategyKind::Adaptive => c,
                StrategyKind::SmartProfile => {
                    let (c, rec) = c.recording(None);
                    recorder = Some(rec);
                    c
                }
                StrategyKind::Smart => {
                    // Follows the profile of the profile run just before it (the two run
                    // back to back); without one (smart-profile-run not selected), an
                    // untimed profile run records it.
                    c.with_profile(profile_at(profiles, config, backend, size, iterations)?)
                }
                StrategyKind::SmartMisaligned => {
                    let other = (size / 4).max(KIB);
                    c.with_profile(profile_at(profiles, config, backend, other, iterations)?)
                }
                StrategyKind::SmartTightBudget => {
                    let mut c = c;
                    c.budget_bytes = Some(config.hot_working_set(size) * 11 / 10);
                    c.with_profile(profile_at(profiles, config, backend, size, iterations)?)
                }
                _ => unreachable!("baselines handled above"),
            };
            let engine = Engine::new(backend.clone(), c)?;
            let sites = role_sites(engine.sites().self_module(), roles(config));
            Box::new(EngineStrategy {
                engine: Some(engine),
                sites,
            })
        }
    };
    let (total_ns, hot_ns, hot_bytes, allocations, fill_ns) = workload(
        config,
        Some(backend),
        dev,
        size,
        iterations,
        strategy.as_mut(),
        false,
    )?;
    let peak_pinned = strategy.peak_pinned();
    let pinned_allocations = strategy.pinned_allocations();
    let t = Instant::now();
    strategy.teardown()?;
    let teardown_ns = t.elapsed().as_nanos() as u64;
    if let Some(rec) = recorder {
        if let Some(p) = rec.last_profile() {
            profiles.insert(size, p);
        }
    }
    Ok(RunRow {
        size,
        strategy: kind,
        repeat,
        iterations,
        total_ns,
        hot_ns,
        hot_bytes,
        peak_pinned,
        pinned_allocations,
        allocations,
        teardown_ns,
        fill_ns,
    })
}

/// The loop. Returns (total ns, hot ns, hot bytes, allocations, ns writing the buffers).
/// With `backend` `None` (or `notes_only`), copies are only noted, not made (recording a
/// profile).
fn workload(
    config: &BenchConfig,
    backend: Option<&Arc<dyn PinBackend>>,
    dev: &[DevicePtr],
    size: usize,
    iterations: usize,
    s: &mut dyn Strategy,
    notes_only: bool,
) -> Result<(u64, u64, u64, u64, u64), BenchError> {
    let roles = roles(config);
    let copy = |ptr: *mut u8, d: DevicePtr, len: usize, dir: Direction| -> Result<(), BenchError> {
        if notes_only {
            return Ok(());
        }
        let b = backend.ok_or_else(|| BenchError::invalid("no device to copy to"))?;
        // SAFETY: `ptr` is a live allocation of at least `len` bytes from the strategy and `d`
        // a device buffer of `size >= len` bytes; the copies are synchronous.
        unsafe {
            match dir {
                Direction::HtoD => b.copy_htod(d, ptr, len, None),
                _ => b.copy_dtoh(ptr, d, len, None),
            }
        }
        .map_err(BenchError::from)
    };
    let lens: Vec<usize> = (0..roles).map(|r| config.role_size(size, r)).collect();
    let mut hot_ns = 0u64;
    let mut hot_bytes = 0u64;
    let mut allocations = 0u64;
    let mut fill_ns = 0u64;
    let start = Instant::now();
    for it in 0..iterations {
        // Interleaved roles: hot0, cold0, hot1, cold1, ... (extra ones of either kind last).
        let order: Vec<(usize, bool)> = interleave_roles(config.hot_buffers, config.cold_buffers);
        let mut ptrs: Vec<*mut u8> = vec![std::ptr::null_mut(); roles];
        for &(role, _) in &order {
            ptrs[role] = s.alloc(lens[role], role)?;
            allocations += 1;
        }
        let t = Instant::now();
        for (role, &p) in ptrs.iter().enumerate() {
            // SAFETY: a live allocation of `lens[role]` bytes.
            unsafe { std::ptr::write_bytes(p, it as u8, lens[role]) };
        }
        fill_ns += t.elapsed().as_nanos() as u64;
        for &(role, hot) in &order {
            if !hot {
                continue;
            }
            let d = dev.get(role).copied().unwrap_or(DevicePtr(0));
            let len = lens[role];
            for _ in 0..config.round_trips {
                let t = Instant::now();
                s.note(ptrs[role], len, Direction::HtoD);
                copy(ptrs[role], d, len, Direction::HtoD)?;
                s.note(ptrs[role], len, Direction::DtoH);
                copy(ptrs[role], d, len, Direction::DtoH)?;
                hot_ns += t.elapsed().as_nanos() as u64;
                hot_bytes += 2 * len as u64;
            }
        }
        // The first cold buffer goes to the device once; the others never.
        if let Some(&(role, _)) = order.iter().find(|(_, hot)| !hot) {
            let d = dev.get(role).copied().unwrap_or(DevicePtr(0));
            s.note(ptrs[role], lens[role], Direction::HtoD);
            copy(ptrs[role], d, lens[role], Direction::HtoD)?;
            if let (false, Some(b)) = (notes_only, backend) {
                b.synchronize_stream(StreamHandle::DEFAULT)?;
            }
        }
        for &(role, _) in &order {
            s.free(ptrs[role])?;
        }
    }
    Ok((
        start.elapsed().as_nanos() as u64,
        hot_ns,
        hot_bytes,
        allocations,
        fill_ns,
    ))
}

/// Roles in allocation order, with whether each is hot: roles `0..hot` are hot, the rest
/// cold; the order alternates hot and cold.
fn interleave_roles(hot: usize, cold: usize) -> Vec<(usize, bool)> {
    let mut out = Vec::with_capacity(hot + cold);
    for i in 0..hot.max(cold) {
        if i < hot {
            out.push((i, true));
        }
        if i < cold {
            out.push((hot + i, false));
        }
    }
    out
}

/// The current UTC time as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + (month <= 2) as i64;
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Where the CLI writes results by default.
pub fn default_output_dir() -> PathBuf {
    PathBuf::from("bench-results")
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinwise_core::CostModel;

    #[test]
    fn iterations_are_sized_by_bytes() {
        let c = BenchConfig::standard(Policy::new(CostModel::builtin()));
        assert_eq!(c.iterations(4 * KIB), 64);
        assert_eq!(c.iterations(16 * MIB), 32);
        assert_eq!(c.iterations(GIB), 3);
        assert_eq!(c.sizes.len(), 10);
        assert_eq!(*c.sizes.last().unwrap(), GIB);
    }

    /// The default bench fits its 5-minute budget on the built-in H200 calibration: the
    /// largest sizes run fewer iterations (1 GiB did not finish in 400 s on an H100 with 3).
    #[test]
    fn the_standard_bench_fits_its_time_budget() {
        let c = BenchConfig::standard(Policy::new(CostModel::builtin()));
        let (its, est) = c.planned_iterations();
        assert!(est <= 300.0 * timing::BUDGET_SHARE, "estimate {est} s");
        assert_eq!(its[0], c.iterations(4 * KIB), "small sizes keep theirs");
        assert!(its[9] < c.iterations(GIB) && its[9] >= 1, "{its:?}");
        let unbudgeted = BenchConfig {
            time_budget_s: None,
            ..c.clone()
        };
        let (all, est_all) = unbudgeted.planned_iterations();
        assert_eq!(all[9], 3);
        assert!(est_all > est);
    }

    #[test]
    fn utc_dates_look_right() {
        let d = utc_now();
        assert_eq!(d.len(), "2026-11-21 08:34:12 UTC".len(), "{d}");
        assert!(d.starts_with("20"), "{d}");
    }

    #[test]
    fn roles_alternate() {
        assert_eq!(
            interleave_roles(2, 2),
            vec![(0, true), (2, false), (1, true), (3, false)]
        );
        assert_eq!(interleave_roles(1, 3).len(), 4);
    }

    #[test]
    fn the_profile_run_comes_just_before_the_use_run() {
        for size_index in 0..4 {
            for repeat in 0..4 {
                let o = interleaved(&StrategyKind::ALL, size_index, repeat);
                let p = o
                    .iter()
                    .position(|&k| k == StrategyKind::SmartProfile)
                    .unwrap();
                assert_eq!(o[p + 1], StrategyKind::Smart, "{o:?}");
            }
        }
    }

    #[test]
    fn order_changes_between_repeats() {
        let k = StrategyKind::ALL;
        assert_ne!(interleaved(&k, 0, 0), interleaved(&k, 0, 1));
        let mut a = interleaved(&k, 3, 2);
        a.sort();
        let mut b = k.to_vec();
        b.sort();
        assert_eq!(a, b, "every strategy still runs once");
    }
}
