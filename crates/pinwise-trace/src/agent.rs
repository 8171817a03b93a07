//! [`TracerAgent`]: the tracer as a library. It loads the BPF programs, probes the CUDA
//! libraries of its target (a running process, a command it launches, or its own process),
//! and feeds a [`SharedHistory`] from a background thread, which others can query while
//! it runs (hotspots, coldspots, lookups) and dump once or every N seconds.
//!
//! ```no_run
//! use pinwise_trace::agent::{TracerAgent, TracerConfig};
//! let mut agent = TracerAgent::new(TracerConfig::default());
//! let mut child = agent.launch(&mut std::process::Command::new("./my_cuda_app"))?;
//! child.wait().ok();
//! let stats = agent.stop()?;
//! for hot in agent.hotspots(5) {
//!     println!("{:#x}: {} transfers", hot.start, hot.transfer_count);
//! }
//! # Ok::<(), pinwise_trace::TraceError>(())
//! ```

use std::cell::RefCell;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use pinwise_core::format::BinaryAppender;
use pinwise_core::history::AllocationInfo;
use pinwise_core::{DumpFormat, Event, HistoryConfig, SharedHistory};

use crate::error::TraceError;
use crate::libs::{self, LaunchEnv, Libraries, LibraryOverrides};
use crate::loader::{BpfConfig, KernelHookStatus, Probes, ProgramCost, PythonMap};
use crate::preattach::PreAttach;
use crate::probes::{func_name, Library};
use crate::procmaps::{self, ProcMaps};
use crate::python::{GlibcSpecific, PythonFinder};
use crate::raw::{self, counters, DecodeError, RawEvent};
use crate::sites::{SiteResolver, SiteStats};
use crate::translate::{ProcessNews, TranslateStats, Translator};

/// Settings of a tracer.
#[derive(Debug, Clone)]
pub struct TracerConfig {
    /// The BPF side: ring buffer size, mmap threshold, page faults, kernel hooks.
    pub bpf: BpfConfig,
    /// The history: events kept per allocation, untracked memory.
    pub history: HistoryConfig,
    /// `--libcuda` / `--libcudart`.
    pub libraries: LibraryOverrides,
    /// How long the event thread waits for the ring buffer before looking again (events
    /// that do not wake it are picked up at this pace).
    pub poll_interval: Duration,
    /// Probe libc's malloc family (blocks from `bpf.malloc_min_bytes` up are reported).
    /// Off by default: a uprobe is a trap on every call, small ones included.
    pub malloc: bool,
}

impl TracerConfig {
    /// This configuration made fit for attaching to a running process
    /// ([`TracerAgent::start_pid`]): the history makes no records for memory whose
    /// allocation it did not see (`track_untracked` off), because such memory may have been
    /// pinned before the attach (see [`crate::preattach`]); copies of it are counted, not
    /// attributed, and so stay out of any pinning advice.
    pub fn for_attach(mut self) -> Self {
        self.history.track_untracked = false;
        self
    }
}

impl Default for TracerConfig {
    fn default() -> Self {
        TracerConfig {
            bpf: BpfConfig::default(),
            history: HistoryConfig::default(),
            libraries: LibraryOverrides::default(),
            poll_interval: Duration::from_millis(20),
            malloc: false,
        }
    }
}

/// Hits of one probed function in traced processes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FunctionHits {
    /// The function (or kernel event).
    pub function: &'static str,
    /// Times it was hit in traced processes (counted in BPF, drops included).
    pub hits: u64,
}

/// What the tracer saw and what it cost.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TraceStats {
    /// Ring-buffer records received.
    pub records: u64,
    /// Records that could not be decoded.
    pub decode_errors: u64,
    /// Events lost because the ring buffer was full.
    pub ringbuf_drops: u64,
    /// Calls whose entry could not be remembered until their return (map full).
    pub pending_full: u64,
    /// Returns seen without their entry (the trace started mid-call, or a map was full).
    pub returns_without_entry: u64,
    /// Reads of the traced process's memory that failed (arguments, stacks).
    pub user_read_failures: u64,
    /// Children that could not be traced (traced-process map full).
    pub tgid_map_full: u64,
    /// Translation counters.
    pub translate: TranslateStats,
    /// Call-site resolution counters.
    pub sites: SiteStats,
    /// Hits per probed function (non-zero only).
    pub function_hits: Vec<FunctionHits>,
    /// Kernel-side cost per BPF program (from the kernel's run-time statistics).
    pub program_costs: Vec<ProgramCost>,
    /// Why `program_costs` is empty, when the kernel refused run-time statistics.
    pub program_costs_unavailable: Option<String>,
    /// Files probed with uprobes, and how many uprobes in all.
    pub probed_files: Vec<PathBuf>,
    /// A probed libcuda was pinwise's CPU stand-in (a test fixture): no GPU moved the bytes.
    pub cuda_standin: bool,
    /// Number of uprobes attached.
    pub uprobes: usize,
    /// The kernel hooks into the nvidia module.
    pub kernel_hooks: Option<KernelHookStatus>,
    /// Processes seen exiting.
    pub processes_exited: u64,
    /// Resident memory of the tracer's process (bytes), now and at its peak.
    pub tracer_rss_bytes: u64,
    /// Peak resident memory of the tracer's process (bytes).
    pub tracer_peak_rss_bytes: u64,
    /// What the tracer found when it attached to a running process (`None` otherwise).
    pub attach: Option<AttachStats>,
}

/// What the tracer learnt when it attached to a running process (see [`crate::preattach`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct AttachStats {
    /// The process attached to.
    pub pid: u32,
    /// Host ranges the driver had pinned (mappings of `/dev/nvidiactl`).
    pub pinned_mappings: u64,
    /// Their bytes.
    pub pinned_bytes: u64,
    /// Of those ranges, the ones copies touched (reported as pinned allocations).
    pub pinned_reported: u64,
    /// Shared anonymous mappings at the attach: how driver 580 and later map pinned host
    /// memory, indistinguishable in `/proc` from a program's own `MAP_SHARED` memory, so
    /// possibly pinned; their state is unknown.
    pub possibly_pinned_mappings: u64,
    /// Their bytes.
    pub possibly_pinned_bytes: u64,
    /// Other writable memory mapped at the attach: its state is unknown if copies use it.
    pub other_bytes: u64,
    /// Memory locked with mlock at the attach (outside the driver's mappings).
    pub mlocked_bytes: u64,
    /// Whether the history makes records for memory whose allocation was not seen (it
    /// should not when attached: [`TracerConfig::for_attach`]).
    pub history_tracks_untracked: bool,
}

#[derive(Default)]
struct LiveStats {
    records: u64,
    decode_errors: u64,
    translate: TranslateStats,
    sites: SiteStats,
    /// Exited processes, for [`TracerAgent::has_exited`]; emptied when it reaches
    /// [`EXITED_SET_CAP`] (a node-wide trace sees processes exit for weeks).
    exited: HashSet<u32>,
    exited_count: u64,
}

/// Most exited PIDs remembered by [`TracerAgent::has_exited`] before the set is emptied.
const EXITED_SET_CAP: usize = 65_536;

struct PeriodicDump {
    path: PathBuf,
    format: DumpFormat,
    every: Duration,
    last: Instant,
    appender: Option<BinaryAppender>,
    last_error: Option<String>,
}

/// Receives the translated events as the event thread produces them (besides, or instead
/// of, the history: see [`TracerAgent::set_sink`]). Called on the event thread: it must
/// not block for long, or the ring buffer fills and events are dropped (and counted).
pub trait EventSink: Send {
    /// A batch of events, in the order they were translated.
    fn events(&mut self, events: &[Event]);
    /// Process `pid` exited at `ts_ns` (CLOCK_MONOTONIC); after its last event.
    fn process_exited(&mut self, pid: u32, ts_ns: u64);
    /// Process `pid` ran a new program (its address space is new).
    fn process_exec(&mut self, _pid: u32) {}
    /// Node-wide mode: process `pid` joined the traced set at its first CUDA call, in the
    /// cgroup v2 whose id is `cgroup_id`, named `comm` (read in the kernel then). Comes
    /// before its first event.
    fn process_enrolled(&mut self, _pid: u32, _cgroup_id: u64, _comm: &str) {}
    /// Traced process `parent` forked `child` (traced too). Comes before the child's
    /// first event.
    fn process_forked(&mut self, _parent: u32, _child: u32) {}
}

struct SinkSlot {
    sink: Option<Box<dyn EventSink>>,
    feed_history: bool,
}

struct SharedState {
    stop: AtomicBool,
    live: Mutex<LiveStats>,
    dump: Mutex<Option<PeriodicDump>>,
    sink: Mutex<SinkSlot>,
}

struct Running {
    attach: Option<AttachStats>,
    probes: Arc<Mutex<Probes>>,
    shared: Arc<SharedState>,
    worker: JoinHandle<()>,
}

/// The tracer: probes, an event thread, and the history it fills.
pub struct TracerAgent {
    config: TracerConfig,
    history: SharedHistory,
    running: Option<Running>,
    last_stats: Option<TraceStats>,
    /// The sink for the next start (a mutex keeps the agent `Sync`; sinks need only be `Send`).
    sink: Mutex<Option<(Box<dyn EventSink>, bool)>>,
}

impl TracerAgent {
    /// An agent with its own new history.
    pub fn new(config: TracerConfig) -> Self {
        let history = SharedHistory::new(config.history);
        Self::with_history(config, history)
    }

    /// An agent feeding an existing history.
    pub fn with_history(config: TracerConfig, history: SharedHistory) -> Self {
        TracerAgent {
            config,
            history,
            running: None,
            last_stats: None,
            sink: Mutex::new(None),
        }
    }

    /// Sends every translated event to `sink` from the next start on; with
    /// `feed_history` false the history is not fed (a long-running consumer that keeps
    /// its own bounded summaries: the history would grow with every allocation seen).
    pub fn set_sink(&mut self, sink: Box<dyn EventSink>, feed_history: bool) {
        *self.sink.lock() = Some((sink, feed_history));
    }

    /// Starts tracing node-wide: probes the given driver (and runtime) library files for
    /// every process that maps them, and traces each process from its first call into a
    /// probed CUDA function on (the BPF side adds it to the traced set there; see
    /// [`BpfConfig::enroll_on_cuda`], which this sets). Processes already running are
    /// traced from their next CUDA call; what they allocated before is not seen.
    pub fn start_system(&mut self, libs: &Libraries) -> Result<(), TraceError> {
        self.check_idle()?;
        if libs.has_no_driver() {
            return Err(TraceError::NoLibcuda {
                target: "the system".into(),
            });
        }
        let mut config = self.config.clone();
        config.bpf.enroll_on_cuda = true;
        config.malloc = false;
        let saved = std::mem::replace(&mut self.config, config);
        let prepared = self.prepare(libs, std::process::id(), -1, &[]);
        self.config = saved;
        let probes = prepared?;
        self.run(probes, None, libs.all(), None)?;
        Ok(())
    }

    /// The history being filled (cheap to clone; readable while tracing).
    pub fn history(&self) -> &SharedHistory {
        &self.history
    }

    /// Whether the agent is tracing.
    pub fn is_running(&self) -> bool {
        self.running.is_some()
    }

    /// Starts tracing the running process `pid` (and the children it forks from now on).
    /// Fails when the process does not exist or maps no libcuda (unless `--libcuda` says
    /// which one to probe).
    ///
    /// What the process had pinned before the attach is learnt from its maps (see
    /// [`crate::preattach`]). Use a configuration from [`TracerConfig::for_attach`], so
    /// that memory allocated before the attach, whose state is unknown, is not counted as
    /// pageable (a warning is logged otherwise).
    pub fn start_pid(&mut self, pid: u32) -> Result<(), TraceError> {
        self.check_idle()?;
        if !Path::new(&format!("/proc/{pid}")).exists() {
            return Err(TraceError::NoSuchProcess(pid));
        }
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .ok()
            .and_then(|p| p.to_str().map(|p| procmaps::path_in_process(pid, p)));
        let libs = libs::in_process(pid)
            .map_err(|_| TraceError::NoSuchProcess(pid))?
            .with_overrides(&self.config.libraries, exe.as_deref());
        if libs.has_no_driver() {
            return Err(TraceError::NoLibcuda {
                target: format!("PID {pid}"),
            });
        }
        let probes = self.prepare(&libs, pid, pid as i32, &libs::allocator_files_of(pid))?;
        probes.trace_process(pid)?;
        // Surveyed once the probes are on: what is allocated from now on is seen by them
        // (and a range both surveyed and seen is reported once).
        let attach_ts = monotonic_ns();
        let survey = PreAttach::survey(pid).map_err(|_| TraceError::NoSuchProcess(pid))?;
        let tracks_untracked = self.history.read().config().track_untracked;
        if tracks_untracked {
            tracing::warn!(
                "attaching with a history that tracks untracked memory: memory allocated \
                 before the attach will be counted as pageable (use TracerConfig::for_attach)"
            );
        }
        let attach = AttachStats {
            pid,
            pinned_mappings: survey.pinned.len() as u64,
            pinned_bytes: survey.pinned_bytes,
            pinned_reported: 0,
            possibly_pinned_mappings: survey.possibly_pinned_mappings,
            possibly_pinned_bytes: survey.possibly_pinned_bytes,
            other_bytes: survey.unknown_bytes,
            mlocked_bytes: survey.mlocked_bytes,
            history_tracks_untracked: tracks_untracked,
        };
        tracing::info!(
            "PID {pid} at the attach: {} bytes in {} driver-pinned mappings, {} bytes in {} \
             shared anonymous mappings (possibly pinned), {} bytes mlocked, {} bytes of other \
             writable memory (state unknown)",
            attach.pinned_bytes,
            attach.pinned_mappings,
            attach.possibly_pinned_bytes,
            attach.possibly_pinned_mappings,
            attach.mlocked_bytes,
            attach.other_bytes
        );
        self.run(probes, None, libs.all(), Some((pid, survey, attach_ts)))?;
        if let Some(r) = self.running.as_mut() {
            r.attach = Some(attach);
        }
        Ok(())
    }

    /// Starts tracing this very process (the C ABI's use: a program asking for advice
    /// about itself). The event thread's own memory activity is not traced. libcuda need
    /// not be loaded yet: it is looked for where the loader would find it.
    pub fn start_self(&mut self) -> Result<(), TraceError> {
        self.check_idle()?;
        let pid = std::process::id();
        let mut libs = libs::in_process(pid).map_err(|e| TraceError::io("reading own maps", e))?;
        if libs.has_no_driver() {
            if let Ok(exe) = std::env::current_exe() {
                let found = libs::for_command(&exe, &LaunchEnv::current());
                libs.driver = found.driver;
                libs.runtime.extend(found.runtime);
            }
        }
        let libs = libs.with_overrides(&self.config.libraries, None);
        if libs.has_no_driver() {
            return Err(TraceError::NoLibcuda {
                target: "this process".into(),
            });
        }
        let probes = self.prepare(&libs, pid, pid as i32, &libs::allocator_files_of(pid))?;
        probes.trace_process(pid)?;
        self.run(probes, Some(pid), libs.all(), None)?;
        Ok(())
    }

    /// Launches `command` traced from its first instruction (and its children), and
    /// returns it running. The libraries it will use are found before it starts, the way
    /// the dynamic loader will find them (its `LD_LIBRARY_PATH` and `PATH` included).
    pub fn launch(&mut self, command: &mut Command) -> Result<Child, TraceError> {
        self.check_idle()?;
        let program = PathBuf::from(command.get_program());
        let env = launch_env(command);
        let executable =
            libs::resolve_program(&program, &env).ok_or_else(|| TraceError::Launch {
                program: program.display().to_string(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such program"),
            })?;
        let libs = libs::for_command(&executable, &env)
            .with_overrides(&self.config.libraries, Some(&executable));
        if libs.has_no_driver() {
            return Err(TraceError::NoLibcuda {
                target: format!("`{}`", program.display()),
            });
        }
        // The command will use the C library the tracer uses (same system, same namespace).
        // Its malloc probes trap in every process until the child is known, then in the
        // child alone (a call seen by both while they overlap is reported once: BPF takes
        // the second hit of one call for a restart of it).
        // An allocator linked into the executable (jemalloc, mimalloc) is probed like libc.
        let allocators = [executable.clone()];
        let probes = self.prepare(&libs, std::process::id(), -1, &allocators)?;
        // The event thread runs before the command starts, so that it reads the command's
        // maps while the command is alive, however short its life.
        // The interpreter a Python command will map is read now, so that its frames are
        // captured from its first allocations.
        let mut known = libs.all();
        known.extend(libs::python_libraries(&executable, &env));
        let probes = self.run(probes, None, known, None)?;
        // While the tracer is a "spawner", the kernel adds the processes it forks to the
        // traced set at fork time: the command is traced before it runs anything.
        let me = std::process::id();
        let marked = probes.lock().set_spawner(me, true);
        let spawned = marked.and_then(|()| {
            let spawned = command.spawn().map_err(|source| TraceError::Launch {
                program: program.display().to_string(),
                source,
            });
            let cleared = probes.lock().set_spawner(me, false);
            let child = spawned?;
            cleared?;
            probes.lock().trace_process(child.id())?;
            if self.config.malloc {
                let mut p = probes.lock();
                if let Some(path) = libs::libc_of(me) {
                    p.attach_libc(&path, child.id() as i32)?;
                }
                for path in &allocators {
                    p.attach_allocator(path, child.id() as i32)?;
                }
                p.drop_temporary();
            }
            Ok(child)
        });
        if spawned.is_err() {
            let _ = self.stop();
        }
        spawned
    }

    fn check_idle(&self) -> Result<(), TraceError> {
        if self.running.is_some() {
            return Err(TraceError::State("already tracing; stop it first"));
        }
        Ok(())
    }

    /// Loads the programs and probes `libs`; with `malloc`, the C library that process
    /// `libc_of` maps and the allocators linked into `allocators` (files that define none
    /// are skipped) too: for process `malloc_pid` only, or for every process (-1: a
    /// launch, until [`TracerAgent::launch`] knows the child).
    fn prepare(
        &self,
        libs: &Libraries,
        libc_of: u32,
        malloc_pid: i32,
        allocators: &[PathBuf],
    ) -> Result<Probes, TraceError> {
        for p in libs.driver.iter().chain(&libs.runtime) {
            if !p.is_file() {
                return Err(TraceError::NoSuchLibrary(p.clone()));
            }
        }
        let mut probes = Probes::load(&self.config.bpf)?;
        let mut driver_probes = 0;
        let mut last_error = None;
        for path in &libs.driver {
            match probes.attach_library(path, Library::Driver) {
                Ok(n) => driver_probes += n,
                Err(e) => last_error = Some(e),
            }
        }
        if driver_probes == 0 {
            return Err(last_error.unwrap_or_else(|| TraceError::NothingAttached {
                path: libs.driver.first().cloned().unwrap_or_default(),
                detail: "it exports none of the CUDA driver entry points pinwise probes".into(),
            }));
        }
        for path in &libs.runtime {
            if let Err(e) = probes.attach_library(path, Library::Runtime) {
                tracing::debug!("runtime probes on {}: {e}", path.display());
            }
        }
        if self.config.malloc {
            let path = libs::libc_of(libc_of).ok_or_else(|| TraceError::NothingAttached {
                path: PathBuf::from("libc.so.6"),
                detail: format!("PID {libc_of} maps no libc.so for the malloc probes"),
            })?;
            let n = probes.attach_libc(&path, malloc_pid)?;
            if n == 0 {
                return Err(TraceError::NothingAttached {
                    path,
                    detail: "it exports none of malloc, calloc, realloc, free".into(),
                });
            }
            for path in allocators {
                match probes.attach_allocator(path, malloc_pid) {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(
                        "{n} malloc-family probes on the allocator in {}",
                        path.display()
                    ),
                    // A file without any of the entry points reads as nothing attached.
                    Err(e) => tracing::debug!("allocator probes on {}: {e}", path.display()),
                }
            }
        }
        tracing::info!(
            "{} uprobes on {} files; kernel hooks: {:?}",
            probes.uprobes().len(),
            probes.probed_files().len(),
            probes.kernel_hooks()
        );
        Ok(probes)
    }

    /// Starts the event thread on `probes` and waits until it reads the ring buffer;
    /// returns the probes, shared with it.
    fn run(
        &mut self,
        probes: Probes,
        self_pid: Option<u32>,
        known: Vec<PathBuf>,
        preattach: Option<(u32, PreAttach, u64)>,
    ) -> Result<Arc<Mutex<Probes>>, TraceError> {
        let probes = Arc::new(Mutex::new(probes));
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
        let (sink, feed_history) = match self.sink.lock().take() {
            Some((sink, feed)) => (Some(sink), feed),
            None => (None, true),
        };
        let shared = Arc::new(SharedState {
            stop: AtomicBool::new(false),
            live: Mutex::new(LiveStats::default()),
            dump: Mutex::new(None),
            sink: Mutex::new(SinkSlot { sink, feed_history }),
        });
        let worker = {
            let probes = Arc::clone(&probes);
            let shared = Arc::clone(&shared);
            let history = self.history.clone();
            let poll = self.config.poll_interval;
            let bpf = &self.config.bpf;
            let python_frames = bpf.python_frames && (bpf.alloc_stacks || bpf.copy_stack_every > 0);
            std::thread::Builder::new()
                .name("pinwise-trace".into())
                .spawn(move || {
                    let target = Target {
                        self_pid,
                        known_files: &known,
                        preattach,
                        python_frames,
                    };
                    event_loop(&probes, &shared, &history, poll, target, ready_tx)
                })
                .map_err(|e| TraceError::io("starting the tracer's event thread", e))?
        };
        // The ring buffer is set up on that thread (its callback is not Send): a failure
        // there is this call's failure, not a trace that silently reads nothing.
        let ready = ready_rx.recv().unwrap_or_else(|_| {
            Err("the tracer's event thread ended before reading the ring buffer".into())
        });
        if let Err(detail) = ready {
            let _ = worker.join();
            return Err(TraceError::Load(detail));
        }
        self.last_stats = None;
        self.running = Some(Running {
            attach: None,
            probes: Arc::clone(&probes),
            shared,
            worker,
        });
        Ok(probes)
    }

    /// Stops tracing: drains the ring buffer into the history, detaches every probe, and
    /// returns the final statistics (also kept for [`TracerAgent::stats`]).
    pub fn stop(&mut self) -> Result<TraceStats, TraceError> {
        let running = self
            .running
            .take()
            .ok_or(TraceError::State("not tracing"))?;
        running.shared.stop.store(true, Ordering::SeqCst);
        if running.worker.join().is_err() {
            tracing::error!("the tracer's event thread panicked; the history may be incomplete");
        }
        let stats = collect_stats(
            &running.probes.lock(),
            &running.shared,
            running.attach.as_ref(),
        );
        self.record_source_stats(&stats);
        // Names of every site the history refers to, while the modules' files are surely
        // there: reports made later, or elsewhere, name functions without the binaries.
        let named = crate::symbolize::store_symbols(&mut self.history.write());
        tracing::debug!("{named} call sites named");
        if let Some(dump) = running.shared.dump.lock().as_mut() {
            write_periodic(&self.history, dump);
        }
        self.last_stats = Some(stats.clone());
        Ok(stats)
        // `running.probes` drops here: links detach, maps and programs are freed.
    }

    fn record_source_stats(&self, s: &TraceStats) {
        self.history.write().set_source_stats([
            ("tracer.records", s.records),
            ("tracer.decode_errors", s.decode_errors),
            ("tracer.ringbuf_drops", s.ringbuf_drops),
            ("tracer.pending_full", s.pending_full),
            ("tracer.returns_without_entry", s.returns_without_entry),
            ("tracer.user_read_failures", s.user_read_failures),
            ("tracer.failed_cuda_calls", s.translate.failed_cuda_calls),
            (
                "tracer.cuda_internal_mmaps",
                s.translate.cuda_internal_mmaps,
            ),
            ("tracer.sites_unknown", s.translate.sites_unknown),
            ("tracer.stacks_captured", s.translate.stacks_captured),
            ("tracer.malloc_probes", u64::from(self.config.malloc)),
            (
                "tracer.cuda_internal_mallocs",
                s.translate.cuda_internal_mallocs,
            ),
            ("tracer.stacks_unwound", s.translate.stacks_unwound),
            ("tracer.frames_unplaced", s.translate.frames_unplaced),
            ("tracer.python_stacks", s.translate.python_stacks),
            (
                "tracer.python_frames_unnamed",
                s.translate.python_frames_unnamed,
            ),
            ("tracer.python_no_thread", s.translate.python_no_thread),
            ("tracer.python_failed", s.translate.python_failed),
            ("tracer.python_truncated", s.translate.python_truncated),
            ("tracer.uprobes", s.uprobes as u64),
        ]);
        if self.config.bpf.fingerprint {
            use pinwise_core::fingerprint::FingerprintMode;
            let bpf = &self.config.bpf;
            let mut h = self.history.write();
            h.set_source_stat(
                pinwise_core::fingerprint::FULL_OVER_CAP_STAT,
                s.translate.fingerprint_full_over_cap,
            );
            h.set_source_stat(
                pinwise_core::fingerprint::FULL_CAP_BYTES_STAT,
                bpf.fingerprint_full_max_bytes,
            );
            h.set_source_stat(
                "tracer.fingerprint_async_downloads",
                s.translate.async_downloads_fingerprinted,
            );
            h.set_source_stat(
                "tracer.fingerprint_async_downloads_unknown",
                s.translate.async_downloads_unknown,
            );
            let st = h.redundancy_mut().stats_mut();
            let (mode, ppm) = if bpf.fingerprint_full {
                (FingerprintMode::Full, 1_000_000)
            } else {
                (
                    FingerprintMode::Sampled,
                    u64::from(bpf.fingerprint_check_ppm.min(1_000_000)),
                )
            };
            st.mode = mode.code();
            st.check_ppm = ppm;
            st.skipped = s.translate.fingerprint_reads_failed + s.translate.async_downloads_unknown;
        }
        if s.cuda_standin {
            self.history
                .write()
                .set_source_stat(pinwise_core::history::STANDIN_SOURCE_STAT, 1);
        }
        if let Some(a) = &s.attach {
            use pinwise_core::history::{
                ATTACHED_SOURCE_STAT, ATTACH_PINNED_BYTES_STAT, ATTACH_POSSIBLY_PINNED_BYTES_STAT,
                ATTACH_UNKNOWN_COUNTED_STAT,
            };
            self.history.write().set_source_stats([
                (ATTACHED_SOURCE_STAT, 1),
                (
                    ATTACH_UNKNOWN_COUNTED_STAT,
                    u64::from(a.history_tracks_untracked),
                ),
                (ATTACH_PINNED_BYTES_STAT, a.pinned_bytes),
                (ATTACH_POSSIBLY_PINNED_BYTES_STAT, a.possibly_pinned_bytes),
                (
                    "tracer.attach.possibly_pinned_mappings",
                    a.possibly_pinned_mappings,
                ),
                ("tracer.attach.pinned_mappings", a.pinned_mappings),
                ("tracer.attach.pinned_reported", a.pinned_reported),
                ("tracer.attach.other_bytes", a.other_bytes),
                ("tracer.attach.mlocked_bytes", a.mlocked_bytes),
            ]);
        }
    }

    /// Probes one more library file (for every process that maps it) while tracing;
    /// returns the uprobes attached (0 when the file is probed already).
    pub fn probe_library(&self, path: &Path, library: Library) -> Result<usize, TraceError> {
        let running = self
            .running
            .as_ref()
            .ok_or(TraceError::State("not tracing"))?;
        let mut probes = running.probes.lock();
        if probes.knows_file(path) {
            return Ok(0);
        }
        probes.attach_library(path, library)
    }

    /// Statistics now (while tracing) or of the last trace.
    pub fn stats(&self) -> TraceStats {
        match &self.running {
            Some(r) => collect_stats(&r.probes.lock(), &r.shared, r.attach.as_ref()),
            None => self.last_stats.clone().unwrap_or_default(),
        }
    }

    /// The processes traced now (those still alive).
    pub fn traced_processes(&self) -> Vec<u32> {
        match &self.running {
            Some(r) => r.probes.lock().traced_processes(),
            None => Vec::new(),
        }
    }

    /// Whether `pid` was seen exiting during this trace.
    pub fn has_exited(&self, pid: u32) -> bool {
        self.running
            .as_ref()
            .is_some_and(|r| r.shared.live.lock().exited.contains(&pid))
    }

    /// The `n` allocations with the most transfers.
    pub fn hotspots(&self, n: usize) -> Vec<AllocationInfo> {
        self.history.hotspots(n)
    }

    /// The `n` allocations with the fewest transfers.
    pub fn coldspots(&self, n: usize) -> Vec<AllocationInfo> {
        self.history.coldspots(n)
    }

    /// Allocations with at least `min` transfers.
    pub fn hotspots_threshold(&self, min: u64) -> Vec<AllocationInfo> {
        self.history.hotspots_threshold(min)
    }

    /// Allocations with at most `max` transfers.
    pub fn coldspots_threshold(&self, max: u64) -> Vec<AllocationInfo> {
        self.history.coldspots_threshold(max)
    }

    /// Writes the history as it is now to `path`.
    pub fn dump(&self, path: &Path, format: DumpFormat) -> Result<(), TraceError> {
        let history = self.history.read();
        pinwise_core::save_history(&history, path, format).map_err(|e| TraceError::Dump {
            path: path.to_path_buf(),
            detail: e.to_string(),
        })
    }

    /// Dumps the history to `path` every `every` while tracing, and once more at
    /// [`TracerAgent::stop`]. Binary dumps are appended (each append holds what changed);
    /// JSON dumps are rewritten whole (through a temporary file, so a reader never sees
    /// half a file).
    pub fn dump_every(
        &mut self,
        path: &Path,
        format: DumpFormat,
        every: Duration,
    ) -> Result<(), TraceError> {
        let running = self
            .running
            .as_ref()
            .ok_or(TraceError::State("periodic dumps need a running trace"))?;
        let appender = match format {
            DumpFormat::Binary => {
                Some(BinaryAppender::create(path).map_err(|e| TraceError::Dump {
                    path: path.to_path_buf(),
                    detail: e.to_string(),
                })?)
            }
            DumpFormat::Json => None,
        };
        *running.shared.dump.lock() = Some(PeriodicDump {
            path: path.to_path_buf(),
            format,
            every,
            last: Instant::now(),
            appender,
            last_error: None,
        });
        Ok(())
    }

    /// The last error of the periodic dump, if its latest write failed.
    pub fn periodic_dump_error(&self) -> Option<String> {
        self.running.as_ref().and_then(|r| {
            r.shared
                .dump
                .lock()
                .as_ref()
                .and_then(|d| d.last_error.clone())
        })
    }
}

impl Drop for TracerAgent {
    fn drop(&mut self) {
        if self.running.is_some() {
            let _ = self.stop();
        }
    }
}

fn launch_env(command: &Command) -> LaunchEnv {
    let mut env = LaunchEnv::current();
    for (key, value) in command.get_envs() {
        if key == "PATH" {
            env.path = value.map(|v| v.to_os_string());
        } else if key == "LD_LIBRARY_PATH" {
            env.ld_library_path = value.map(|v| v.to_os_string());
        }
    }
    if let Some(dir) = command.get_current_dir() {
        env.cwd = Some(match &env.cwd {
            Some(cwd) => cwd.join(dir),
            None => dir.to_path_buf(),
        });
    }
    env
}

fn write_periodic(history: &SharedHistory, dump: &mut PeriodicDump) {
    let result = match (&dump.format, dump.appender.as_mut()) {
        (DumpFormat::Binary, Some(appender)) => {
            appender.append(&history.read()).map_err(|e| e.to_string())
        }
        _ => {
            // save_history writes through a private temporary file renamed into place.
            pinwise_core::save_history(&history.read(), &dump.path, dump.format)
                .map_err(|e| e.to_string())
        }
    };
    dump.last = Instant::now();
    match result {
        Ok(()) => dump.last_error = None,
        Err(e) => {
            tracing::warn!("periodic dump to {} failed: {e}", dump.path.display());
            dump.last_error = Some(e);
        }
    }
}

/// CLOCK_MONOTONIC now, in ns (the clock of `bpf_ktime_get_ns`, which stamps events).
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the struct it is given, which lives on this stack.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64
}

/// The event thread's longest wait while a traced process runs Python (see
/// [`crate::python`]): its events' frames are named by reading its memory, which is gone
/// once it exits.
const PYTHON_POLL: Duration = Duration::from_millis(2);

/// Who the event thread traces, besides what the probes say.
struct Target<'a> {
    /// The tracer traces its own process (its threads' activity is not the program's).
    self_pid: Option<u32>,
    /// Files probed from the start.
    known_files: &'a [PathBuf],
    /// An attach: the process, what it had pinned, and when.
    preattach: Option<(u32, PreAttach, u64)>,
    /// Python frames are captured (`BpfConfig::python_frames`, with stacks of some kind).
    python_frames: bool,
}

fn own_tid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// The event thread: polls the ring buffer, translates records into events, feeds the
/// history, follows processes (new libraries to probe, exits), and writes periodic dumps.
/// Says on `ready` whether it could set up the ring buffer (and ends if not).
fn event_loop(
    probes: &Arc<Mutex<Probes>>,
    shared: &SharedState,
    history: &SharedHistory,
    poll: Duration,
    target: Target<'_>,
    ready: std::sync::mpsc::SyncSender<Result<(), String>>,
) {
    let Target {
        self_pid,
        known_files,
        preattach,
        python_frames,
    } = target;
    if self_pid.is_some() {
        if let Err(e) = probes.lock().ignore_thread(own_tid()) {
            tracing::warn!("{e}");
        }
    }
    let batch: Rc<RefCell<Vec<Result<RawEvent, DecodeError>>>> = Rc::default();
    let ring = {
        let guard = probes.lock();
        let map = guard.events_map();
        let mut builder = libbpf_rs::RingBufferBuilder::new();
        let sink = Rc::clone(&batch);
        let added = builder
            .add(&map, move |data: &[u8]| {
                sink.borrow_mut().push(raw::decode(data));
                0
            })
            .map(|_| ());
        match added.and_then(|()| builder.build()) {
            Ok(ring) => ring,
            Err(e) => {
                let _ = ready.send(Err(format!("cannot read the BPF ring buffer: {e:#}")));
                return;
            }
        }
    };
    let mut translator =
        Translator::new(SiteResolver::new(history.modules())).with_stacks(history.stacks());
    for path in known_files {
        translator.sites().learn_file(path);
    }
    if let Some((pid, survey, ts)) = &preattach {
        translator.learn_preattach(*pid, &survey.pinned, *ts);
    }
    // Before the caller goes on (a launched command starts, an attach is reported): the
    // interpreter a command will map is read, and a process traced from the start (an
    // attach, or the tracer itself) that runs Python already is entered, so that its events
    // have Python frames from the first one.
    let mut python = PythonWatch::new(probes, python_frames);
    python.warm(known_files);
    for pid in preattach.iter().map(|p| p.0).chain(self_pid) {
        python.look(pid, &mut translator);
    }
    let _ = ready.send(Ok(()));
    let mut events: Vec<Event> = Vec::with_capacity(4096);
    let mut news: Vec<(ProcessNews, u64)> = Vec::new();
    // Probing newly mapped libraries reads their symbol tables, which can take a while:
    // another thread does it, so that this one keeps reading events (and the maps of
    // short-lived processes while they are alive).
    let (attach_jobs, attach_rx) = std::sync::mpsc::channel::<(u32, ProcMaps)>();
    let attacher = {
        let probes = Arc::clone(probes);
        std::thread::Builder::new()
            .name("pinwise-attach".into())
            .spawn(move || attach_loop(&probes, attach_rx, self_pid.is_some()))
            .map_err(|e| tracing::warn!("no thread for probing new libraries: {e}"))
            .ok()
    };
    loop {
        let stopping = shared.stop.load(Ordering::SeqCst);
        // Events submitted without a wakeup (copies, until enough data waits) do not make
        // `poll` return early; `consume` takes whatever is there once the wait is over.
        // Python frames are named by reading the process: while a Python process is traced,
        // its events are read sooner, so that they are read before it exits.
        let wait = if translator.has_python() {
            poll.min(PYTHON_POLL)
        } else {
            poll
        };
        let polled = if stopping {
            ring.consume()
        } else {
            ring.poll(wait).and_then(|()| ring.consume())
        };
        if let Err(e) = polled {
            if e.kind() != libbpf_rs::ErrorKind::Interrupted {
                tracing::warn!("ring buffer poll: {e:#}");
                // A poll that fails at once would otherwise spin this thread (and the log).
                std::thread::sleep(poll);
            }
        }
        let records: Vec<_> = std::mem::take(&mut *batch.borrow_mut());
        let mut decode_errors = 0;
        let named = translator.name_python_frames(records.iter().filter_map(|r| r.as_ref().ok()));
        python.named(&named);
        for record in &records {
            match record {
                Ok(raw) => {
                    let ts = raw.header().ts_ns;
                    if let Some(n) = translator.translate(raw, &mut events) {
                        if matches!(
                            n,
                            ProcessNews::Enrolled { .. }
                                | ProcessNews::Forked { .. }
                                | ProcessNews::Exec(_)
                        ) {
                            // The sink learns of these in order with the events: who a
                            // process is comes before its first event.
                            feed(shared, history, &mut events);
                            tell_sink(shared, n);
                        }
                        news.push((n, ts));
                    }
                    if translator.has_late() {
                        // An asynchronous download's fingerprint: compared after the
                        // events before it, and before those after it.
                        feed(shared, history, &mut events);
                        apply_late(shared, history, &mut translator);
                    }
                }
                Err(e) => {
                    decode_errors += 1;
                    tracing::debug!("{e}");
                }
            }
        }
        if stopping {
            translator.flush(&mut events);
        }
        feed(shared, history, &mut events);
        handle_news(
            &news,
            &attach_jobs,
            &mut translator,
            history,
            shared,
            &mut python,
        );
        news.clear();
        {
            let mut live = shared.live.lock();
            live.records += records.len() as u64;
            live.decode_errors += decode_errors;
            live.translate = translator.stats();
            live.sites = translator.sites().stats();
        }
        if let Some(dump) = shared.dump.lock().as_mut() {
            if dump.last.elapsed() >= dump.every && !stopping {
                write_periodic(history, dump);
            }
        }
        if stopping {
            break;
        }
    }
    drop(attach_jobs);
    if let Some(attacher) = attacher {
        let _ = attacher.join();
    }
}

/// Probes the CUDA libraries that appear in the maps it is sent (until the channel closes).
/// `in_traced_process`: the tracer traces its own process, and this thread's memory
/// activity (symbol tables read) is not the program's.
fn attach_loop(
    probes: &Mutex<Probes>,
    jobs: std::sync::mpsc::Receiver<(u32, ProcMaps)>,
    in_traced_process: bool,
) {
    if in_traced_process {
        if let Err(e) = probes.lock().ignore_thread(own_tid()) {
            tracing::warn!("{e}");
        }
    }
    for (pid, maps) in jobs {
        let found = libs::in_maps(pid, &maps);
        for (paths, library) in [
            (&found.driver, Library::Driver),
            (&found.runtime, Library::Runtime),
        ] {
            for path in paths {
                if probes.lock().knows_file(path) {
                    continue;
                }
                match probes.lock().attach_library(path, library) {
                    Ok(0) => {}
                    Ok(n) => {
                        tracing::info!("PID {pid} mapped {}: {n} uprobes attached", path.display())
                    }
                    Err(e) => tracing::debug!("{}: {e}", path.display()),
                }
            }
        }
    }
}

/// Sends the events translated so far to the sink and (unless disabled) the history.
fn feed(shared: &SharedState, history: &SharedHistory, events: &mut Vec<Event>) {
    if events.is_empty() {
        return;
    }
    let mut slot = shared.sink.lock();
    if let Some(sink) = slot.sink.as_mut() {
        sink.events(events);
    }
    if slot.feed_history {
        history.ingest_batch(events);
    }
    drop(slot);
    events.clear();
}

/// Gives the history the late fingerprints of asynchronous downloads (see
/// [`crate::async_dl`]); without a history (a sink only) they are dropped, unknown.
fn apply_late(shared: &SharedState, history: &SharedHistory, translator: &mut Translator) {
    let late = translator.take_late();
    let feed_history = shared.sink.lock().feed_history;
    let mut h = feed_history.then(|| history.write());
    for l in late {
        let d = l.download;
        let compared = h.as_mut().is_some_and(|h| {
            h.observe_late_fingerprint(
                d.pid,
                d.host,
                d.device,
                d.bytes,
                pinwise_core::Direction::DtoH,
                d.ts,
                l.fingerprint,
            )
        });
        translator.late_applied(compared);
    }
}

/// Tells the sink of a process's enrollment, fork or exec.
fn tell_sink(shared: &SharedState, news: ProcessNews) {
    let mut slot = shared.sink.lock();
    let Some(sink) = slot.sink.as_mut() else {
        return;
    };
    match news {
        ProcessNews::Enrolled {
            pid,
            cgroup_id,
            comm,
        } => {
            let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
            sink.process_enrolled(pid, cgroup_id, &String::from_utf8_lossy(&comm[..end]));
        }
        ProcessNews::Forked { parent, child } => sink.process_forked(parent, child),
        ProcessNews::Exec(pid) => sink.process_exec(pid),
        ProcessNews::LibraryMapped(_) | ProcessNews::Exited(_) => {}
    }
}

/// Python processes among the traced ones: found when they exec or map an interpreter,
/// told to BPF (map `py_procs`; BPF and the translator follow them into forked children),
/// forgotten when they exit.
struct PythonWatch {
    map: Option<PythonMap>,
    finder: PythonFinder,
    /// glibc's pthread-specific storage (`None`: not found, no Python frames at all).
    glibc: Option<GlibcSpecific>,
}

impl PythonWatch {
    /// A watch that does nothing unless `enabled`.
    fn new(probes: &Mutex<Probes>, enabled: bool) -> Self {
        let map = enabled
            .then(|| {
                probes
                    .lock()
                    .python_map()
                    .map_err(|e| tracing::warn!("no Python frames: {e}"))
                    .ok()
            })
            .flatten();
        PythonWatch {
            map,
            finder: PythonFinder::new(),
            glibc: enabled.then(crate::python::glibc_specific).flatten(),
        }
    }

    /// Reads ahead the interpreters among `files` (a launched command's executable and
    /// libraries).
    fn warm(&mut self, files: &[PathBuf]) {
        if self.glibc.is_some() && self.map.is_some() {
            self.finder.warm(files);
        }
    }

    /// Looks for an interpreter in `pid` (unless one is known).
    fn look(&mut self, pid: u32, translator: &mut Translator) {
        let (Some(glibc), Some(map)) = (self.glibc, &self.map) else {
            return;
        };
        if translator.python(pid).is_some() {
            return;
        }
        let Some(maps) = translator.sites().maps(pid).cloned() else {
            return;
        };
        if let Some(found) = self.finder.find(pid, &maps) {
            if let Err(e) = map.set(pid, &found.bpf_entry(glibc)) {
                tracing::warn!("PID {pid}: no Python frames: {e}");
            }
            translator.set_python(pid, found);
        }
    }

    /// Code objects named (and so remembered) from now on.
    fn named(&self, codes: &[(u32, u64)]) {
        if let Some(map) = &self.map {
            for &(pid, code) in codes {
                map.named(pid, code);
            }
        }
    }

    fn forget(&mut self, pid: u32, translator: &mut Translator) {
        if translator.python(pid).is_some() {
            translator.forget_python(pid);
            if let Some(map) = &self.map {
                map.forget(pid);
            }
        }
    }
}

fn handle_news(
    news: &[(ProcessNews, u64)],
    attach_jobs: &std::sync::mpsc::Sender<(u32, ProcMaps)>,
    translator: &mut Translator,
    history: &SharedHistory,
    shared: &SharedState,
    python: &mut PythonWatch,
) {
    let mut check: Vec<u32> = Vec::new();
    for &(n, ts) in news {
        match n {
            ProcessNews::Exited(pid) => {
                {
                    let mut slot = shared.sink.lock();
                    if let Some(sink) = slot.sink.as_mut() {
                        sink.process_exited(pid, ts);
                    }
                    if slot.feed_history {
                        history.write().process_exited(pid, ts);
                    }
                }
                let mut live = shared.live.lock();
                if live.exited.len() >= EXITED_SET_CAP {
                    live.exited.clear();
                }
                live.exited.insert(pid);
                live.exited_count += 1;
                drop(live);
                // Its exit is its last event: its maps snapshot is no longer needed.
                translator.sites().forget(pid);
                python.forget(pid, translator);
            }
            // A fork copies the parent's address space: nothing new to probe (the child's
            // Python entry was copied by BPF and by the translator). The sink heard of these
            // from the event loop, in order with the events.
            ProcessNews::Forked { .. } => {}
            // A process enrolled node-wide may run Python.
            ProcessNews::Enrolled { pid, .. } => python.look(pid, translator),
            ProcessNews::Exec(pid) => {
                python.forget(pid, translator);
                check.push(pid);
            }
            ProcessNews::LibraryMapped(pid) => check.push(pid),
        }
    }
    check.sort_unstable();
    check.dedup();
    for pid in check {
        python.look(pid, translator);
        if let Some(maps) = translator.sites().maps(pid).cloned() {
            let _ = attach_jobs.send((pid, maps));
        }
    }
}

/// This process's resident and peak resident memory in bytes (`VmRSS`, `VmHWM` of
/// `/proc/self/status`, parsed with `procfs-core`); 0 where unknown.
fn own_rss_bytes() -> (u64, u64) {
    use procfs_core::FromBufRead;
    let Ok(text) = std::fs::read_to_string("/proc/self/status") else {
        return (0, 0);
    };
    match procfs_core::process::Status::from_buf_read(text.as_bytes()) {
        Ok(s) => (s.vmrss.unwrap_or(0) * 1024, s.vmhwm.unwrap_or(0) * 1024),
        Err(_) => (0, 0),
    }
}

fn collect_stats(
    probes: &Probes,
    shared: &SharedState,
    attach: Option<&AttachStats>,
) -> TraceStats {
    let (rss, peak_rss) = own_rss_bytes();
    let c = probes.counters();
    let live = shared.live.lock();
    TraceStats {
        records: live.records,
        decode_errors: live.decode_errors,
        ringbuf_drops: c[counters::RINGBUF_DROPS as usize],
        pending_full: c[counters::PENDING_FULL as usize],
        returns_without_entry: c[counters::RETURN_WITHOUT_ENTRY as usize],
        user_read_failures: c[counters::USER_READ_FAILED as usize],
        tgid_map_full: c[counters::TGID_MAP_FULL as usize],
        translate: live.translate,
        sites: live.sites,
        function_hits: probes
            .function_hits()
            .into_iter()
            .enumerate()
            .filter(|(_, hits)| *hits > 0)
            .map(|(id, hits)| FunctionHits {
                function: func_name(id as u32),
                hits,
            })
            .collect(),
        program_costs: probes
            .program_costs()
            .into_iter()
            .filter(|c| c.run_count > 0)
            .collect(),
        program_costs_unavailable: probes.stats_error().map(String::from),
        cuda_standin: probes.cuda_standin(),
        probed_files: probes.probed_files(),
        uprobes: probes.uprobes().len(),
        kernel_hooks: Some(probes.kernel_hooks().clone()),
        processes_exited: live.exited_count,
        tracer_rss_bytes: rss,
        tracer_peak_rss_bytes: peak_rss,
        attach: attach.map(|a| AttachStats {
            pinned_reported: live.translate.preattach_pinned_reported,
            ..a.clone()
        }),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn own_memory_is_read_from_status() {
        let (rss, peak) = super::own_rss_bytes();
        assert!(rss > 0 && peak >= rss, "rss {rss}, peak {peak}");
        assert_eq!(rss % 1024, 0, "kB scaled to bytes");
    }
}
