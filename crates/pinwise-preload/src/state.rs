//! The library's state in this process: created lazily by the first hook that needs it
//! (safe before `main`, never from `free`), forgotten in a forked child, written out at
//! exit and on the dump signal.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use pinwise_alloc::Mode;
use pinwise_core::preload_stats::{EngineStats, OutputStats};
use pinwise_core::profile::Profile;
use pinwise_core::ModuleTable;

use crate::backend::DriverTable;
use crate::config::{Config, LogTarget};
use crate::guard::Inside;
use crate::pinning::{Pinning, COUNTERS, PROMOTED_RANGES};
use crate::recorder::{Recorder, GENERATION, GLOBAL, RINGS};
use crate::stats::HookStats;

/// Everything pinwise keeps in one process.
pub struct State {
    /// This process.
    pub pid: u32,
    /// The configuration.
    pub config: Config,
    /// The history and its feeding.
    pub recorder: Recorder,
    /// The hooks' counters.
    pub stats: HookStats,
    /// The history written while the program runs.
    history_file: crate::persist::HistoryFile,
    modules: Arc<ModuleTable>,
    /// Use mode: the profile followed.
    profile: Option<Profile>,
    pinning: OnceLock<Result<Pinning, String>>,
    problems: Mutex<Vec<String>>,
    top_process: bool,
    /// A statically linked cudart's allocation entry points, if the executable has one.
    pub static_runtime: crate::stack::StaticRuntime,
}

/// The state, once created (null: not yet, or reset in a forked child).
static STATE: AtomicPtr<State> = AtomicPtr::new(std::ptr::null_mut());
/// 0: not created; 1: being created; 2: created.
static INIT: AtomicU8 = AtomicU8::new(0);
/// Set from the environment when the library is loaded: forward everything.
pub static DISABLED: AtomicBool = AtomicBool::new(false);
/// Set from the environment when the library is loaded: hand out driver wrappers.
pub static DRIVER_HOOKS: AtomicBool = AtomicBool::new(true);
/// Set by the dump signal's handler; the drain thread writes the outputs.
static DUMP_REQUESTED: AtomicBool = AtomicBool::new(false);
/// Whether pinwise turned itself off after a failure of its own (a panic).
static BROKEN: AtomicBool = AtomicBool::new(false);
/// Set when the exit handler has written the outputs: the drain thread stops.
static OUTPUTS_FINAL: AtomicBool = AtomicBool::new(false);
/// Whether the program's `free`/`realloc`/`munmap` are pinwise's hooks (checked at load).
static FREE_HOOKS_EFFECTIVE: AtomicBool = AtomicBool::new(true);

/// Records whether the `free`/`realloc`/`munmap` hooks see the program's calls.
pub fn set_free_hooks_effective(effective: bool) {
    FREE_HOOKS_EFFECTIVE.store(effective, Ordering::Relaxed);
}

/// Called when the library is loaded (before `main`): only what needs no allocation of
/// note and cannot fail.
pub fn on_load() {
    crate::real::ensure_real_dlsym();
    crate::cycles::choose();
    // Before any fork (see `stack::main_program_bias`).
    let _ = crate::stack::main_program_bias();
    // Parsed as `Config` parses them (which reports values it cannot understand).
    let flag = |name: &std::ffi::CStr| {
        // SAFETY: getenv with a constant name; the value is only read here.
        let v = unsafe { libc::getenv(name.as_ptr()) };
        if v.is_null() {
            return None;
        }
        // SAFETY: a NUL-terminated string of the environment.
        let v = unsafe { std::ffi::CStr::from_ptr(v) };
        v.to_str().ok().and_then(crate::config::parse_bool)
    };
    if flag(c"PINWISE_DISABLE") == Some(true) {
        DISABLED.store(true, Ordering::Relaxed);
    }
    if flag(c"PINWISE_DRIVER_HOOKS") == Some(false) {
        DRIVER_HOOKS.store(false, Ordering::Relaxed);
    }
    // SAFETY: registering plain function pointers; the handlers only touch atomics and
    // leaked memory (child) or write files (exit).
    unsafe {
        libc::pthread_atfork(
            Some(before_fork),
            Some(after_fork_in_parent),
            Some(in_forked_child),
        );
        libc::atexit(at_exit);
    }
}

/// Whether hooks should do anything at all.
#[inline]
pub fn enabled() -> bool {
    !DISABLED.load(Ordering::Relaxed) && !BROKEN.load(Ordering::Relaxed)
}

/// Turns pinwise off for the rest of the process (a bug of its own was caught): every hook
/// forwards from now on.
pub fn turn_off(why: &str) {
    BROKEN.store(true, Ordering::Relaxed);
    if let Some(st) = current() {
        st.problem(format!("pinwise turned itself off: {why}"));
    }
}

/// The state if it exists (never creates it; no thread-local storage: usable from `free`).
#[inline]
pub fn current() -> Option<&'static State> {
    let p = STATE.load(Ordering::Acquire);
    // SAFETY: a non-null pointer is a leaked `Box<State>`, valid for the process's life.
    unsafe { p.as_ref() }
}

/// The state, created on first use. `None` when pinwise is off, or when called from
/// pinwise's own code while it creates the state.
pub fn get() -> Option<&'static State> {
    if let Some(st) = current() {
        return Some(st);
    }
    if !enabled() || crate::guard::inside() {
        return None;
    }
    loop {
        match INIT.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                let _inside = Inside::enter();
                // Creating the state reads std's clock (the vDSO reads the time-stamp
                // counter): readable here even after the program made it fault.
                let _counter = crate::cycles::CounterReadable::here();
                let st: &'static State = Box::leak(Box::new(State::create()));
                STATE.store(st as *const State as *mut State, Ordering::Release);
                INIT.store(2, Ordering::Release);
                st.start_drain_thread();
                return Some(st);
            }
            Err(2) => return current(),
            Err(_) => std::thread::yield_now(),
        }
    }
}

/// Whether [`before_fork`] took the marker of pinwise's walks of the loader's list.
static HELD_FOR_FORK: AtomicBool = AtomicBool::new(false);

/// Before a fork (`pthread_atfork` prepare): waits, at most 100 ms, for a walk of the
/// loader's list by pinwise's drain thread to end, and keeps another from starting until
/// the fork is done (see `pinwise_alloc::callsite::hold_walks_for_fork`: a child forked in
/// the middle of one could wait forever on the loader's lock). Forks regardless after the
/// 100 ms. Atomics and `nanosleep` only.
extern "C" fn before_fork() {
    let step = libc::timespec {
        tv_sec: 0,
        tv_nsec: 100_000,
    };
    for _ in 0..1000 {
        if pinwise_alloc::callsite::hold_walks_for_fork() {
            HELD_FOR_FORK.store(true, Ordering::Relaxed);
            return;
        }
        // SAFETY: nanosleep with a valid request and no remainder.
        unsafe { libc::nanosleep(&step, std::ptr::null_mut()) };
    }
}

/// After a fork, in the parent: walks of the loader's list may start again.
extern "C" fn after_fork_in_parent() {
    release_walks_held_for_fork();
}

fn release_walks_held_for_fork() {
    if HELD_FOR_FORK.swap(false, Ordering::Relaxed) {
        pinwise_alloc::callsite::release_walks_after_fork();
    }
}

extern "C" fn in_forked_child() {
    release_walks_held_for_fork();
    // A child forked after the parent started using CUDA cannot use CUDA itself (the
    // driver does not survive fork): it is a worker doing CPU work, such as a PyTorch
    // DataLoader's. pinwise stays out of its way entirely (every hook forwards, no malloc
    // is tracked); an `exec` loads the library afresh.
    let parent_used_cuda = current().is_some_and(|st| st.pinning().is_some());
    if parent_used_cuda {
        DISABLED.store(true, Ordering::Relaxed);
        crate::malloc::turn_off();
    }
    // The child has one thread; the parent's state (its locks, its engine, its rings) is
    // left alone, leaked: a fresh one is made if the child uses CUDA.
    GENERATION.fetch_add(1, Ordering::AcqRel);
    OUTPUTS_FINAL.store(false, Ordering::Release);
    STATE.store(std::ptr::null_mut(), Ordering::Release);
    INIT.store(0, Ordering::Release);
    RINGS.forget_all();
    GLOBAL.reset_in_child();
    PROMOTED_RANGES.forget_all();
    // The counters are read only through the allocator, which a process with pinwise off
    // never makes (`get`): in a worker forked after CUDA was used they are left as they are
    // (each page written here is a page fault in every such child).
    if enabled() {
        COUNTERS.forget_all();
    }
    crate::promote::COPY_GATE.reset();
    crate::capture::forget_all();
    crate::async_fp::forget_in_child();
    crate::pool::forget_in_child();
    crate::flush::forget_in_child();
}

/// The exit handler. Registered with `atexit` from the library's constructor, so with
/// pinwise's own DSO handle: glibc runs it from `__cxa_finalize` when `_dl_fini` finalizes
/// pinwise (after the program's `atexit` handlers and the executable's destructors, before
/// the destructors of libraries finalized after pinwise, libcuda among them). By then `exit`
/// has destroyed the calling thread's thread-local storage (Rust's and that of the crates
/// pinwise uses: `tracing`'s formatter panics on it), and other threads may still run: the
/// work is done on a thread of its own, fresh, and waited for.
extern "C" fn at_exit() {
    on_fresh_thread(final_outputs);
}

/// Drains everything and writes the outputs (or, if pinwise was never needed, the idle
/// statistics). Runs on a thread of its own (see [`at_exit`]).
extern "C" fn final_outputs(_: *mut libc::c_void) -> *mut libc::c_void {
    // Usually a thread of its own, whose counter pinwise's code may read (it inherited the
    // mode of the thread that exits); on the exiting thread itself when no thread could be
    // started, so the program's mode is put back at the end.
    let _counter = crate::cycles::CounterReadable::here();
    let Some(st) = current() else {
        write_idle_stats();
        return std::ptr::null_mut();
    };
    // SAFETY: getpid has no preconditions.
    if st.pid != unsafe { libc::getpid() } as u32 {
        return std::ptr::null_mut();
    }
    let _inside = Inside::enter();
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // Asynchronous downloads whose stream reached them are hashed and compared; the
        // others are given up (counted). libcuda is still loaded here (see `at_exit`).
        crate::async_fp::poll(st, false);
        st.recorder.drain(true, None);
        st.recorder.with_history(crate::async_fp::apply);
        crate::async_fp::poll(st, true);
        // What the last poll hashed (a stream that reached its download since the first)
        // is compared too.
        st.recorder.with_history(crate::async_fp::apply);
        st.write_outputs(false);
        st.recorder.finish();
    }));
    OUTPUTS_FINAL.store(true, Ordering::Release);
    std::ptr::null_mut()
}

/// Runs `f` on a new thread (plain `pthread_create`: no Rust thread machinery, which uses
/// the caller's thread-local storage) with every signal blocked, and waits for it; runs it
/// here if no thread can be made.
fn on_fresh_thread(f: extern "C" fn(*mut libc::c_void) -> *mut libc::c_void) {
    // SAFETY: `all` and `old` are valid signal sets; the mask is restored below, and the new
    // thread inherits the blocked one (a signal meant for the program goes to its threads).
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        let masked = libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old) == 0;
        let mut thread: libc::pthread_t = std::mem::zeroed();
        let made = libc::pthread_create(&mut thread, std::ptr::null(), f, std::ptr::null_mut());
        if masked {
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        }
        if made == 0 {
            libc::pthread_join(thread, std::ptr::null_mut());
        } else {
            f(std::ptr::null_mut());
        }
    }
}

/// The dump signal's previous action (`sa_sigaction` and `sa_flags`), chained to.
static PREVIOUS_HANDLER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static PREVIOUS_FLAGS: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn on_dump_signal(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // Async-signal-safe: one atomic store; the drain thread does the work.
    DUMP_REQUESTED.store(true, Ordering::Relaxed);
    let previous = PREVIOUS_HANDLER.load(Ordering::Relaxed);
    if previous == libc::SIG_DFL || previous == libc::SIG_IGN {
        return;
    }
    if PREVIOUS_FLAGS.load(Ordering::Relaxed) & libc::SA_SIGINFO != 0 {
        // SAFETY: the program installed this three-argument handler for this signal.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(previous) };
        f(sig, info, ctx);
    } else {
        // SAFETY: the program installed this one-argument handler for this signal.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(previous) };
        f(sig);
    }
}

impl State {
    fn create() -> State {
        let config = Config::from_env();
        // SAFETY: getpid/getppid have no preconditions.
        let (pid, ppid) = unsafe { (libc::getpid() as u32, libc::getppid() as u32) };
        init_logging(&config);
        let mut problems = config.problems.clone();
        for p in &problems {
            tracing::warn!("pinwise: {p}");
        }
        let mut profile = None;
        let mut config = config;
        if config.mode == Mode::Use {
            if let Some(path) = &config.profile_path {
                match Profile::load(path) {
                    Ok(p) => profile = Some(p),
                    Err(e) => {
                        problems.push(format!(
                            "profile {} could not be read ({e}); running adaptive",
                            path.display()
                        ));
                        config.mode = Mode::Adaptive;
                    }
                }
            }
        }
        if config.promote_pageable {
            let own = std::fs::read_link("/proc/self/exe")
                .ok()
                .and_then(|exe| {
                    crate::elf::defined_functions(&exe, &["free", "realloc", "munmap"]).ok()
                })
                .unwrap_or_default();
            if !own.is_empty() || !FREE_HOOKS_EFFECTIVE.load(Ordering::Relaxed) {
                config.promote_pageable = false;
                problems.push(format!(
                    "the program defines its own {}: pinwise cannot see its buffers freed, so \
                     it does not register them (in-place promotion is off)",
                    if own.is_empty() {
                        "free/realloc/munmap".to_string()
                    } else {
                        own.join("/")
                    }
                ));
            }
        }
        tracing::info!(
            pid,
            mode = config.mode.as_str(),
            budget = ?config.budget_bytes,
            promote_pageable = config.promote_pageable,
            keep_pinned = config.keep_pinned,
            "pinwise-preload {} active",
            env!("CARGO_PKG_VERSION")
        );
        let modules = ModuleTable::shared();
        let top_process = GENERATION.load(Ordering::Acquire) == 1
            && config.launcher_pid.is_none_or(|l| l == ppid);
        // Before the recorder exists: nothing was stamped in this process (or forked
        // child) yet.
        crate::stamp::choose(config.clock_stamps);
        let stats = HookStats::default();
        stats.measure_read_cost(crate::cycles::now);
        stats.start_rate(crate::cycles::Anchor::take());
        State {
            pid,
            recorder: Recorder::new(pid, modules.clone()),
            stats,
            history_file: crate::persist::HistoryFile::new(
                config.history_path.as_ref().and(config.flush_every),
            ),
            modules,
            profile,
            pinning: OnceLock::new(),
            problems: Mutex::new(problems),
            top_process,
            static_runtime: crate::stack::StaticRuntime::of_this_process(),
            config,
        }
    }

    /// Notes a problem (logged, and written to the statistics).
    pub fn problem(&self, text: String) {
        tracing::warn!("pinwise: {text}");
        self.problems.lock().push(text);
    }

    /// The allocator, created on first use once libcuda is loaded. `None` while it cannot
    /// be (no libcuda yet: tried again later), or if it failed (the reason is kept).
    pub fn pinning(&self) -> Option<&Pinning> {
        match self.pinning.get() {
            Some(Ok(p)) => Some(p),
            Some(Err(_)) => None,
            None => None,
        }
    }

    /// The allocator, creating it if libcuda is loaded now.
    pub fn pinning_or_start(&self) -> Option<&Pinning> {
        if let Some(r) = self.pinning.get() {
            return r.as_ref().ok();
        }
        let _inside = Inside::enter();
        // Starting the allocator reads std's clock too (see `get`).
        let _counter = crate::cycles::CounterReadable::here();
        let driver = match DriverTable::load() {
            Ok(d) => d,
            // Not loaded yet (a hook ran before cudart opened libcuda): try again later.
            Err(e) if crate::real::libcuda_handle().is_none() => {
                tracing::debug!("allocator not started yet: {e}");
                return None;
            }
            Err(e) => {
                let _ = self.pinning.set(Err(e.clone()));
                self.problem(format!("the allocator is off: {e}"));
                return None;
            }
        };
        let driver: &'static DriverTable = Box::leak(Box::new(driver));
        let made = Pinning::new(
            driver,
            &self.config,
            self.modules.clone(),
            self.profile.as_ref(),
        );
        match &made {
            Ok(p) => {
                for problem in &p.pricing_problems {
                    self.problem(format!(
                        "{problem}; decisions priced with the {}",
                        p.pricing
                    ));
                }
            }
            Err(e) => self.problem(format!("the allocator is off: {e}")),
        }
        let _ = self.pinning.set(made);
        self.pinning()
    }

    fn start_drain_thread(&'static self) {
        if let Some(sig) = self.config.dump_signal {
            install_dump_handler(sig);
        }
        if self.config.history_path.is_some() || self.config.stats_dir.is_some() {
            crate::flush::install(self.config.dump_signal);
        }
        let spawned = std::thread::Builder::new()
            .name("pinwise-drain".into())
            .spawn(move || self.drain_loop());
        match spawned {
            Ok(h) => {
                self.recorder.set_drain_thread(h.thread().clone());
            }
            Err(e) => self.problem(format!(
                "no drain thread ({e}): full rings are drained by the threads that fill them"
            )),
        }
    }

    fn drain_loop(&'static self) {
        let _inside = Inside::enter();
        // Pinwise's own thread: the CPU's counter readable even if the thread that started
        // it had made it fault.
        let _ = crate::cycles::enable_here();
        block_all_signals();
        let generation = GENERATION.load(Ordering::Acquire);
        loop {
            std::thread::park_timeout(std::time::Duration::from_millis(10));
            if GENERATION.load(Ordering::Acquire) != generation
                || current().is_none()
                || OUTPUTS_FINAL.load(Ordering::Acquire)
            {
                return;
            }
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                crate::async_fp::poll(self, false);
                self.recorder.drain(false, None);
                if crate::async_fp::any_ready() {
                    self.recorder.with_history(crate::async_fp::apply);
                }
                if self.history_file.due() {
                    self.flush_history();
                }
                if DUMP_REQUESTED.swap(false, Ordering::Relaxed) {
                    self.write_outputs(true);
                }
                crate::flush::service(|| {
                    self.recorder.drain(true, None);
                    self.write_outputs(false);
                });
            }));
        }
    }

    /// Appends what changed in the history to its file (see `persist`), on the drain thread
    /// every `flush_every`. A failure is counted (`incremental` in the statistics), never
    /// more.
    fn flush_history(&self) {
        let Some(path) = &self.config.history_path else {
            return;
        };
        if !self.top_process && !self.cuda_seen() {
            return; // as in write_outputs
        }
        self.note_source_stats();
        let path = self.output_path(path);
        if let Err(e) = self.history_file.append(&path, &self.recorder, false) {
            tracing::warn!("pinwise: history not flushed: {e}");
        }
    }

    /// Stores in the history the statistics of the sources (the malloc hooks), and whether
    /// the driver is the CPU stand-in (reports warn on it).
    fn note_source_stats(&self) {
        self.recorder
            .with_history(|h| h.set_source_stats(crate::malloc::source_stats()));
        self.recorder
            .with_history(|h| crate::fingerprint::note_stats(self, h));
        let standin = match self.pinning.get() {
            Some(Ok(p)) => p.driver.standin,
            Some(Err(_)) => false,
            None => crate::real::libcuda_is_standin(),
        };
        if standin {
            self.recorder
                .with_history(|h| h.set_source_stat(pinwise_core::history::STANDIN_SOURCE_STAT, 1));
        }
        if let Some(pool) = crate::pool::stats() {
            self.recorder
                .with_history(|h| h.set_source_stats(pool.source_stats()));
        }
    }

    /// Writes the history, the profile (profile mode) and the statistics. `snapshot`: on
    /// the dump signal (the process goes on).
    pub fn write_outputs(&self, snapshot: bool) {
        let events = self.recorder.with_history(|h| h.stats().events_ingested);
        if !self.top_process && !self.cuda_seen() {
            // A child that never used CUDA (its malloc-family allocations alone are
            // nothing to say).
            return;
        }
        self.note_source_stats();
        let mut stats = self.stats.process_stats(&self.recorder.tally());
        stats.pid = self.pid;
        stats.top_process = self.top_process;
        stats.snapshot = snapshot;
        stats.mode = self.config.mode.as_str().to_string();
        if let Some(pool) = crate::pool::stats() {
            stats.pool = pool;
        }
        stats.events = events;
        stats.events_lost = self.recorder.lost();
        stats.inline_drains = self.recorder.inline_drains();
        stats.timestamps = self.recorder.timestamp_stats();
        match self.pinning.get() {
            Some(Ok(p)) => {
                stats.allocator_active = true;
                stats.driver_is_standin = p.driver.standin;
                stats.pricing = p.pricing.to_string();
                stats.engine = EngineStats::from(p.engine.stats());
                stats.program_pinned_bytes_peak = p.program_pinned_peak();
            }
            Some(Err(e)) => stats.allocator_unavailable = Some(e.clone()),
            None => {
                stats.allocator_unavailable =
                    Some("no CUDA host-memory call needed it (or libcuda never loaded)".into());
                stats.driver_is_standin = crate::real::libcuda_is_standin();
            }
        }
        stats.history = match &self.config.history_path {
            None => OutputStats::default(),
            Some(path) => {
                let path = self.output_path(path);
                let r = self.history_file.finish(&path, &self.recorder, snapshot);
                output(path, r)
            }
        };
        stats.incremental = self.history_file.stats();
        stats.history_records = self.recorder.with_history(|h| h.len() as u64);
        stats.profile = match (&self.config.profile_path, self.config.mode) {
            (Some(path), Mode::Profile) => {
                let path = self.output_path(path);
                let r = self.recorder.with_history(|h| {
                    Profile::from_history(h).save_with(&path, crate::flush::durability())
                });
                output(path, r.map_err(|e| e.to_string()))
            }
            (Some(path), Mode::Use) => OutputStats {
                path: Some(path.display().to_string()),
                written: false,
                error: None,
            },
            _ => OutputStats::default(),
        };
        stats.problems = self.problems.lock().clone();
        if crate::cycles::counter_stopped() {
            stats.problems.push(
                "the program made the CPU's time-stamp counter fault (prctl PR_SET_TSC): the \
                 hooks timed themselves with the clock from then on, and no hook times are \
                 given (the samples mix counter ticks and nanoseconds)"
                    .to_string(),
            );
        }
        if let Some(dir) = &self.config.stats_dir {
            let path = dir.join(format!("{}.json", self.pid));
            let written = serde_json::to_vec_pretty(&stats)
                .map_err(std::io::Error::other)
                .and_then(|bytes| write_file(&path, &bytes));
            if let Err(e) = written {
                tracing::warn!(path = %path.display(), error = %e, "pinwise: statistics not written");
            }
        }
        tracing::info!(
            events,
            snapshot,
            history = ?stats.history.path,
            profile = ?stats.profile.path,
            "pinwise-preload outputs written"
        );
    }

    /// Whether this process made a CUDA host-memory call pinwise saw (an allocation,
    /// registration or free of pinned memory, or a copy).
    fn cuda_seen(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let s = &self.stats;
        s.host_allocs.load(Relaxed) + s.registrations.load(Relaxed) + s.host_frees.load(Relaxed) > 0
            || self.recorder.tally().transfers.iter().sum::<u64>() > 0
    }

    /// `path` for this process: itself for the process `pinwise run` started, else
    /// `<stem>.<pid>.<ext>` beside it.
    fn output_path(&self, path: &Path) -> PathBuf {
        if self.top_process {
            return path.to_path_buf();
        }
        per_process_path(path, self.pid)
    }
}

/// At exit of a process that never needed pinwise (no CUDA host-memory call): if it is the
/// process `pinwise run` started, a statistics file saying so (so that `pinwise run` knows
/// the library was loaded).
fn write_idle_stats() {
    let _inside = Inside::enter();
    let _ = std::panic::catch_unwind(|| {
        if !enabled() || GENERATION.load(Ordering::Acquire) != 1 {
            return;
        }
        let Some(dir) = std::env::var_os(crate::config::env::STATS_DIR) else {
            return;
        };
        // SAFETY: getpid/getppid have no preconditions.
        let (pid, ppid) = unsafe { (libc::getpid() as u32, libc::getppid() as u32) };
        let launcher = std::env::var(crate::config::env::LAUNCHER_PID)
            .ok()
            .and_then(|v| v.parse::<u32>().ok());
        if launcher.is_some_and(|l| l != ppid) {
            return;
        }
        let mut stats = HookStats::default().process_stats(&Default::default());
        stats.pid = pid;
        stats.top_process = true;
        stats.mode = std::env::var(crate::config::env::MODE).unwrap_or_else(|_| "adaptive".into());
        stats.allocator_unavailable = Some("no CUDA host-memory call was made".into());
        if let Ok(bytes) = serde_json::to_vec_pretty(&stats) {
            let _ = write_file(&PathBuf::from(dir).join(format!("{pid}.json")), &bytes);
        }
    });
}

/// `<stem>.<pid>.<ext>` beside `path` (`<name>.<pid>` when it has no extension).
pub fn per_process_path(path: &Path, pid: u32) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match path.extension() {
        Some(ext) => format!("{stem}.{pid}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{pid}"),
    };
    path.with_file_name(name)
}

fn output(path: PathBuf, r: Result<(), String>) -> OutputStats {
    OutputStats {
        path: Some(path.display().to_string()),
        written: r.is_ok(),
        error: r.err(),
    }
}

/// Writes `bytes` to `path` through a private temporary file renamed into place
/// ([`pinwise_core::safe_file`]).
fn write_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    pinwise_core::safe_file::write_bytes_with(path, bytes, crate::flush::durability())
}

fn init_logging(config: &Config) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_new(&config.log_level).unwrap_or_else(|_| EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_target(false);
    let _ = match &config.log {
        LogTarget::Off => return,
        LogTarget::Stderr => builder.with_writer(std::io::stderr).try_init(),
        LogTarget::File(path) => match pinwise_core::safe_file::open_append(path) {
            Ok(f) => builder.with_writer(std::sync::Mutex::new(f)).try_init(),
            Err(_) => return,
        },
    };
}

/// Installs [`on_dump_signal`] for the dump signal, keeping the program's previous action to
/// chain to. Hand-written for the reasons [`crate::flush::install`] gives.
fn install_dump_handler(sig: i32) {
    // SAFETY: the handler only stores an atomic and chains to the program's own handler,
    // if it had one; `old` is a valid out-parameter.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        let mut old: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_dump_signal as *const () as usize;
        action.sa_flags = libc::SA_RESTART | libc::SA_SIGINFO;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(sig, &action, &mut old) == 0 {
            PREVIOUS_HANDLER.store(old.sa_sigaction, Ordering::Relaxed);
            PREVIOUS_FLAGS.store(old.sa_flags, Ordering::Relaxed);
        }
    }
}

fn block_all_signals() {
    // SAFETY: changes only this (pinwise's own) thread's signal mask.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
}
