//! [`Agent`]: the tracer attached node-wide, the process table it feeds, and the metrics
//! endpoint that reads it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use pinwise_core::{CostModel, Event};
use pinwise_trace::agent::{EventSink, TracerAgent, TracerConfig};
use pinwise_trace::libs::{self, Libraries};
use pinwise_trace::loader::BpfConfig;
use pinwise_trace::probes::Library;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;

use crate::error::AgentError;
use crate::histories::{HistorySettings, HistoryStore};
use crate::http::MetricsServer;
use crate::metrics::{self, Snapshot};
use crate::table::{ProcFs, ProcessProbe, ProcessTable, TableConfig};

/// Settings of the agent.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The `node` label (the host name by default).
    pub node: String,
    /// Where `/metrics` is served.
    pub listen: SocketAddr,
    /// Driver libraries to probe; empty: those `ldconfig -p` lists.
    pub libcuda: Vec<PathBuf>,
    /// BPF ring buffer size in bytes.
    pub ringbuf_bytes: u32,
    /// The process table: cap, retention, filters.
    pub table: TableConfig,
    /// Processes with series of their own (the others are summed as `pid="other"`).
    pub max_series_processes: usize,
    /// Pinned memory with no copy for this long is reported idle.
    pub idle_after: Duration,
    /// The cost model for estimated times and savings.
    pub cost: CostModel,
    /// How often the agent expires exited processes and refreshes the tracer's counters.
    pub tick: Duration,
    /// How often every process's maps are scanned for libcuda files not probed yet
    /// (containers with their own copy of the driver library); `None`: never.
    pub rescan_every: Option<Duration>,
    /// Per-process histories (off when `None`).
    pub histories: Option<HistorySettings>,
    /// Where the host's cgroup v2 hierarchy is mounted (in a container: the host's,
    /// mounted in); `None`: the one `/proc/mounts` lists.
    pub cgroupfs: Option<PathBuf>,
    /// The kubelet's pod log directories (`/var/log/pods`), for pod namespaces and names
    /// ([`crate::pods`]); `None`: none.
    pub pods_dir: Option<PathBuf>,
    /// How often a live process's GPUs (and its pod, while unknown) are looked up again.
    pub labels_every: Duration,
    /// Fingerprint host-to-device copies in BPF to count redundant uploads.
    pub fingerprint: bool,
    /// The node's pinned pool (`pinwise pool serve`) whose accounting each snapshot asks
    /// for (`pinwise_pool_*` metrics); `None`: none.
    pub pool_socket: Option<PathBuf>,
    /// Push the metrics to an OpenTelemetry collector too.
    #[cfg(feature = "otlp")]
    pub otlp: Option<crate::otlp::OtlpConfig>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            node: hostname(),
            listen: SocketAddr::from(([127, 0, 0, 1], 9464)),
            libcuda: Vec::new(),
            ringbuf_bytes: 8 << 20,
            table: TableConfig::default(),
            max_series_processes: 200,
            idle_after: Duration::from_secs(60),
            cost: CostModel::builtin(),
            tick: Duration::from_millis(500),
            rescan_every: Some(Duration::from_secs(30)),
            cgroupfs: None,
            pods_dir: None,
            labels_every: Duration::from_secs(10),
            fingerprint: false,
            pool_socket: None,
            #[cfg(feature = "otlp")]
            otlp: None,
            histories: None,
        }
    }
}

/// This machine's host name (`/proc/sys/kernel/hostname`), or `unknown`.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// CLOCK_MONOTONIC now in ns: the clock of the tracer's event timestamps.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the struct it is given, which lives on this stack.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// What the tracer counted, copied at each tick for the scrapes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TracerCounters {
    /// Events lost to a full ring buffer.
    pub ringbuf_drops: u64,
    /// Ring-buffer records read.
    pub records: u64,
    /// Records that could not be decoded.
    pub decode_errors: u64,
    /// Processes the traced-process map had no room for.
    pub tgid_map_full: u64,
    /// Uprobes attached.
    pub uprobes: u64,
}

/// The tracer as the agent drives it (libbpf behind it), so that the agent's own logic
/// runs in tests without BPF or root.
pub trait TraceBackend: Send {
    /// Its counters now.
    fn counters(&self) -> TracerCounters;
    /// Probes one more driver library file node-wide; the uprobes attached (0: it was
    /// probed already).
    fn probe_driver_library(&self, path: &Path) -> Result<usize, AgentError>;
    /// Drains the ring buffer into the sink and detaches every probe.
    fn stop(&mut self) -> Result<(), AgentError>;
}

impl TraceBackend for TracerAgent {
    fn counters(&self) -> TracerCounters {
        let st = self.stats();
        TracerCounters {
            ringbuf_drops: st.ringbuf_drops,
            records: st.records,
            decode_errors: st.decode_errors,
            tgid_map_full: st.tgid_map_full,
            uprobes: st.uprobes as u64,
        }
    }

    fn probe_driver_library(&self, path: &Path) -> Result<usize, AgentError> {
        Ok(self.probe_library(path, Library::Driver)?)
    }

    fn stop(&mut self) -> Result<(), AgentError> {
        TracerAgent::stop(self)
            .map(|_| ())
            .map_err(AgentError::from)
    }
}

/// Where the agent looks for driver libraries it has not probed yet (containers with a
/// libcuda of their own): every process's mapped `libcuda.so*` files. Replaceable in tests.
pub trait LibraryScan: Send {
    /// `(pid, library path openable by the agent)` for every process mapping one.
    fn driver_libraries(&mut self) -> Vec<(u32, PathBuf)>;
}

/// [`LibraryScan`] over the node's `/proc/PID/maps`.
#[derive(Debug, Default)]
pub struct ProcMapsScan;

impl LibraryScan for ProcMapsScan {
    fn driver_libraries(&mut self) -> Vec<(u32, PathBuf)> {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            if let Ok(found) = libs::in_process(pid) {
                out.extend(found.driver.into_iter().map(|p| (pid, p)));
            }
        }
        out
    }
}

/// The agent's side of the tracer's event stream: feeds the process table (and the
/// histories). [`Agent::with_backend`] hands it to tests, which feed it by hand.
pub struct TableSink {
    table: Arc<Mutex<ProcessTable>>,
    histories: Option<Arc<Mutex<HistoryStore>>>,
}

impl EventSink for TableSink {
    fn events(&mut self, events: &[Event]) {
        let mut table = self.table.lock();
        table.ingest(events, monotonic_ns());
        if let Some(h) = &self.histories {
            let mut h = h.lock();
            for ev in events {
                if let Some(comm) = table.followed_comm(ev.pid) {
                    h.ingest(ev.pid, comm, ev);
                }
            }
        }
    }

    fn process_exited(&mut self, pid: u32, ts_ns: u64) {
        self.table.lock().exited(pid, ts_ns);
        if let Some(h) = &self.histories {
            h.lock().exited(pid, ts_ns);
        }
    }

    fn process_exec(&mut self, pid: u32) {
        self.table.lock().exec(pid, monotonic_ns());
    }

    fn process_enrolled(&mut self, pid: u32, cgroup_id: u64, comm: &str) {
        self.table
            .lock()
            .enrolled(pid, cgroup_id, comm, monotonic_ns());
    }

    fn process_forked(&mut self, parent: u32, child: u32) {
        self.table.lock().forked(parent, child, monotonic_ns());
    }
}

/// Takes snapshots of the table and counters: what each scrape or push exports.
#[derive(Debug, Clone)]
pub struct SnapshotSource {
    #[cfg(feature = "otlp")]
    otlp: Option<Arc<crate::otlp::ExportCounts>>,
    table: Arc<Mutex<ProcessTable>>,
    counters: Arc<Mutex<TracerCounters>>,
    node: String,
    max_series: usize,
    idle_after: Duration,
    pool_socket: Option<PathBuf>,
}

#[derive(Debug)]
struct AgentCollector(SnapshotSource);

/// How long a snapshot waits for the pool's answer (connecting, then the answer).
const POOL_CONNECT_TIMEOUT: Duration = Duration::from_millis(200);
const POOL_ANSWER_TIMEOUT: Duration = Duration::from_secs(1);

/// The pool's accounting at `socket`, `None` when no service answers there (in time).
/// Its client count leaves out the agent's own connection, made to ask.
pub fn pool_stats(socket: &std::path::Path) -> Option<pinwise_pool::Stats> {
    pinwise_pool::PoolClient::connect_with_timeouts(
        socket,
        POOL_CONNECT_TIMEOUT,
        Some(POOL_ANSWER_TIMEOUT),
    )
    .and_then(|c| c.stats())
    .ok()
    .map(without_the_asker)
}

/// The service counts the connection that asked for its accounting among its clients.
fn without_the_asker(mut s: pinwise_pool::Stats) -> pinwise_pool::Stats {
    s.clients = s.clients.saturating_sub(1);
    s
}

impl SnapshotSource {
    /// Processes with series of their own (`--max-series-processes`).
    pub fn max_series(&self) -> usize {
        self.max_series
    }

    /// The numbers now.
    pub fn snapshot(&self) -> Snapshot {
        let c = *self.counters.lock();
        let mut s = Snapshot {
            node: self.node.clone(),
            ringbuf_drops: c.ringbuf_drops,
            records: c.records,
            decode_errors: c.decode_errors,
            tgid_map_full: c.tgid_map_full,
            uprobes: c.uprobes,
            agent_cpu_seconds: crate::selfstat::cpu_seconds(),
            agent_rss_bytes: crate::selfstat::rss_bytes(),
            ..Snapshot::default()
        };
        #[cfg(feature = "otlp")]
        if let Some(o) = &self.otlp {
            use std::sync::atomic::Ordering::Relaxed;
            s.otlp_exports = Some((o.ok.load(Relaxed), o.failed.load(Relaxed)));
        }
        s.pool = self.pool_socket.as_deref().map(pool_stats);
        let idle_since = monotonic_ns().saturating_sub(self.idle_after.as_nanos() as u64);
        let table = self.table.lock();
        s.totals = table.totals().clone();
        s.set_rows(table.summaries(), self.max_series, idle_since);
        s
    }
}

impl std::fmt::Debug for TableSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TableSink")
    }
}

impl Collector for AgentCollector {
    fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        metrics::encode(&self.0.snapshot(), encoder)
    }
}

/// Signals the agent reacts to (SIGTERM/SIGINT: stop; SIGHUP: reopen).
#[derive(Debug, Clone, Default)]
pub struct Signals {
    /// Set by SIGTERM or SIGINT.
    pub stop: Arc<AtomicBool>,
    /// Set by SIGHUP.
    pub reopen: Arc<AtomicBool>,
}

impl Signals {
    /// Installs the handlers (each only sets its flag: async-signal-safe).
    pub fn install() -> Result<Signals, AgentError> {
        let s = Signals::default();
        for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
            signal_hook::flag::register(sig, Arc::clone(&s.stop)).map_err(AgentError::Signals)?;
        }
        signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&s.reopen))
            .map_err(AgentError::Signals)?;
        Ok(s)
    }
}

/// The running agent.
pub struct Agent {
    config: AgentConfig,
    tracer: Box<dyn TraceBackend>,
    scan: Box<dyn LibraryScan>,
    table: Arc<Mutex<ProcessTable>>,
    counters: Arc<Mutex<TracerCounters>>,
    server: Option<MetricsServer>,
    #[cfg(feature = "otlp")]
    otlp: Option<crate::otlp::OtlpExporter>,
    histories: Option<Arc<Mutex<HistoryStore>>>,
    last_rescan: Instant,
    libraries: Vec<PathBuf>,
}

/// The driver libraries to probe: those given, or those `ldconfig -p` lists.
pub fn driver_libraries(given: &[PathBuf]) -> Result<Vec<PathBuf>, AgentError> {
    if let Some(missing) = given.iter().find(|p| !p.is_file()) {
        return Err(AgentError::NoSuchLibrary(missing.clone()));
    }
    if !given.is_empty() {
        return Ok(given.to_vec());
    }
    let found = libs::LdconfigCache::load().find(libs::is_driver_name);
    if found.is_empty() {
        return Err(AgentError::NoLibcuda);
    }
    Ok(found)
}

/// What the agent builds before a tracer exists.
struct Parts {
    table: Arc<Mutex<ProcessTable>>,
    histories: Option<Arc<Mutex<HistoryStore>>>,
}

impl Parts {
    fn new(
        config: &AgentConfig,
        probe: Box<dyn ProcessProbe>,
        modules: Arc<pinwise_core::ModuleTable>,
    ) -> Result<Parts, AgentError> {
        let table = Arc::new(Mutex::new(ProcessTable::new(
            config.table.clone(),
            config.cost.clone(),
            probe,
        )));
        let histories = match &config.histories {
            Some(settings) => Some(Arc::new(Mutex::new(HistoryStore::new(
                settings.clone(),
                modules,
            )?))),
            None => None,
        };
        Ok(Parts { table, histories })
    }

    fn sink(&self) -> TableSink {
        TableSink {
            table: Arc::clone(&self.table),
            histories: self.histories.clone(),
        }
    }
}

impl Agent {
    /// Loads the BPF programs, probes the driver libraries node-wide, and serves metrics.
    pub fn start(config: AgentConfig) -> Result<Agent, AgentError> {
        let libraries = driver_libraries(&config.libcuda)?;
        let probe = ProcFs::node(
            config
                .cgroupfs
                .clone()
                .or_else(crate::cgroup::cgroup2_mount),
            config.pods_dir.clone(),
        );
        let tracer_config = TracerConfig {
            bpf: BpfConfig {
                ringbuf_bytes: config.ringbuf_bytes,
                // Summaries need no call chains; the history is not fed.
                alloc_stacks: false,
                copy_stack_every: 0,
                fingerprint: config.fingerprint,
                // Late fingerprints would need a history; the summaries count uploads and
                // synchronous downloads.
                fingerprint_async: false,
                ..BpfConfig::default()
            },
            poll_interval: Duration::from_millis(50),
            ..TracerConfig::default()
        };
        let mut tracer = TracerAgent::new(tracer_config);
        let parts = Parts::new(&config, Box::new(probe), tracer.history().modules())?;
        tracer.set_sink(Box::new(parts.sink()), false);
        let libs = Libraries {
            driver: libraries.clone(),
            runtime: Vec::new(),
        };
        tracer.start_system(&libs)?;
        let agent = Agent::assemble(
            config,
            Box::new(tracer),
            Box::new(ProcMapsScan),
            parts,
            libraries,
        )?;
        tracing::info!(
            "pinwise agent: {} uprobes on {:?}; metrics on http://{}/metrics",
            agent.counters.lock().uprobes,
            agent.libraries,
            agent.local_addr()
        );
        Ok(agent)
    }

    /// An agent over a given tracer, process probe and library scan (tests: fakes of
    /// each), serving metrics as [`Agent::start`] does; returns the sink the tracer would
    /// feed, for the caller to feed.
    pub fn with_backend(
        config: AgentConfig,
        tracer: Box<dyn TraceBackend>,
        probe: Box<dyn ProcessProbe>,
        scan: Box<dyn LibraryScan>,
    ) -> Result<(Agent, TableSink), AgentError> {
        let parts = Parts::new(
            &config,
            probe,
            Arc::new(pinwise_core::ModuleTable::default()),
        )?;
        let sink = parts.sink();
        let libraries = config.libcuda.clone();
        let agent = Agent::assemble(config, tracer, scan, parts, libraries)?;
        Ok((agent, sink))
    }

    fn assemble(
        config: AgentConfig,
        tracer: Box<dyn TraceBackend>,
        scan: Box<dyn LibraryScan>,
        parts: Parts,
        libraries: Vec<PathBuf>,
    ) -> Result<Agent, AgentError> {
        let counters = Arc::new(Mutex::new(TracerCounters::default()));
        #[cfg(feature = "otlp")]
        let otlp_counts = config
            .otlp
            .as_ref()
            .map(|_| Arc::new(crate::otlp::ExportCounts::default()));
        let source = SnapshotSource {
            #[cfg(feature = "otlp")]
            otlp: otlp_counts.clone(),
            table: Arc::clone(&parts.table),
            counters: Arc::clone(&counters),
            node: config.node.clone(),
            max_series: config.max_series_processes,
            idle_after: config.idle_after,
            pool_socket: config.pool_socket.clone(),
        };
        #[cfg(feature = "otlp")]
        let otlp = match (&config.otlp, otlp_counts) {
            (Some(c), Some(counts)) => {
                Some(crate::otlp::OtlpExporter::start(c, source.clone(), counts)?)
            }
            _ => None,
        };
        let mut registry = Registry::default();
        registry.register_collector(Box::new(AgentCollector(source)));
        let server =
            MetricsServer::start(config.listen, registry).map_err(|source| AgentError::Listen {
                addr: config.listen,
                source,
            })?;
        let agent = Agent {
            config,
            tracer,
            scan,
            table: parts.table,
            counters,
            server: Some(server),
            #[cfg(feature = "otlp")]
            otlp,
            histories: parts.histories,
            last_rescan: Instant::now(),
            libraries,
        };
        agent.refresh_counters();
        Ok(agent)
    }

    /// Where metrics are served.
    pub fn local_addr(&self) -> SocketAddr {
        self.server
            .as_ref()
            .map_or(self.config.listen, |s| s.local_addr())
    }

    /// Pushes the metrics over OTLP now (when `--otlp` is set): for tests and SIGHUP.
    #[cfg(feature = "otlp")]
    pub fn flush_otlp(&self) {
        if let Some(o) = &self.otlp {
            o.flush();
        }
    }

    /// The process table (shared with the event thread).
    pub fn table(&self) -> &Arc<Mutex<ProcessTable>> {
        &self.table
    }

    /// The driver libraries probed.
    pub fn libraries(&self) -> &[PathBuf] {
        &self.libraries
    }

    fn refresh_counters(&self) {
        *self.counters.lock() = self.tracer.counters();
    }

    /// Periodic work: tracer counters, expiry of exited processes (returned), labels
    /// looked up again when due, and the rescan for new driver libraries when due.
    pub fn tick(&mut self) -> Vec<crate::process::ProcessSummary> {
        self.refresh_counters();
        let now = monotonic_ns();
        let expired = {
            let mut table = self.table.lock();
            let expired = table.expire(now);
            table.refresh_labels(now, self.config.labels_every);
            expired
        };
        if let Some(h) = &self.histories {
            h.lock().tick();
        }
        if let Some(every) = self.config.rescan_every {
            if self.last_rescan.elapsed() >= every {
                self.rescan();
            }
        }
        expired
    }

    /// Looks through every process's maps for driver libraries not probed yet (a
    /// container with its own libcuda) and probes them.
    pub fn rescan(&mut self) -> usize {
        self.last_rescan = Instant::now();
        let mut added = 0;
        for (pid, path) in self.scan.driver_libraries() {
            match self.tracer.probe_driver_library(&path) {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!("PID {pid} maps {}: {n} uprobes attached", path.display());
                    self.libraries.push(path);
                    added += 1;
                }
                Err(e) => tracing::debug!("{}: {e}", path.display()),
            }
        }
        added
    }

    /// SIGHUP's work: histories continue in new files; libraries are rescanned.
    pub fn reopen(&mut self) {
        if let Some(h) = &self.histories {
            h.lock().reopen();
        }
        self.rescan();
    }

    /// Runs until SIGTERM or SIGINT, ticking; SIGHUP calls [`Agent::reopen`]. Returns
    /// after [`Agent::stop`].
    pub fn run(mut self, signals: &Signals) -> Result<(), AgentError> {
        let mut last_tick = Instant::now();
        while !signals.stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(50));
            if signals.reopen.swap(false, Ordering::SeqCst) {
                tracing::info!("SIGHUP: new history files; rescanning for libcuda");
                self.reopen();
            }
            if last_tick.elapsed() >= self.config.tick {
                last_tick = Instant::now();
                self.tick();
            }
        }
        tracing::info!("stopping: draining the ring buffer and detaching");
        self.stop()
    }

    /// Stops: drains the ring buffer into the table, detaches every probe, writes the
    /// histories that changed, stops serving.
    pub fn stop(mut self) -> Result<(), AgentError> {
        let result = self.tracer.stop();
        self.refresh_counters();
        if let Some(h) = &self.histories {
            h.lock().flush();
        }
        // The last push carries the final numbers.
        #[cfg(feature = "otlp")]
        if let Some(o) = self.otlp.take() {
            o.shutdown();
        }
        self.server = None;
        result
    }
}
