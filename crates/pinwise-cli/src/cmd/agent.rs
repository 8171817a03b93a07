//! `pinwise agent`: node-wide, always-on monitoring exported to Prometheus (the work is
//! in the pinwise-agent crate; this parses the arguments and runs it until SIGTERM).
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use pinwise_agent::histories::HistorySettings;
use pinwise_agent::table::{Filter, TableConfig};
use pinwise_agent::{Agent, AgentConfig, Signals};
use pinwise_core::CostModel;

use pinwise_core::units::{parse_duration, parse_size};

/// Arguments of `pinwise agent`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  pinwise agent\n  \
                  pinwise agent --listen 0.0.0.0:9464 --comm python3\n\n\
                  Needs root (or CAP_BPF, CAP_PERFMON and CAP_SYS_RESOURCE). SIGTERM/SIGINT: \
                  drain, detach, write histories; SIGHUP: new history files, rescan for libcuda files.")]
pub struct AgentArgs {
    /// Serve Prometheus metrics on this address (`/metrics`).
    #[arg(long, default_value = "127.0.0.1:9464", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// The `node` label [default: the host name; $NODE_NAME in Kubernetes].
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    pub node: Option<String>,
    /// Driver library to probe (repeatable) [default: what `ldconfig -p` lists].
    #[arg(long, value_name = "PATH")]
    pub libcuda: Vec<PathBuf>,
    /// Follow only these PIDs (repeatable).
    #[arg(long, value_name = "PID")]
    pub pid: Vec<u32>,
    /// Follow only processes with this command name (repeatable).
    #[arg(long, value_name = "NAME")]
    pub comm: Vec<String>,
    /// Follow only processes whose cgroup path contains this (repeatable).
    #[arg(long, value_name = "PATH")]
    pub cgroup: Vec<String>,
    /// Follow only processes of containers whose id starts with this (repeatable).
    #[arg(long, value_name = "ID")]
    pub container: Vec<String>,
    /// Most processes with summaries; see the pinwise-agent docs for the eviction rule.
    #[arg(long, default_value_t = 4096, value_name = "N")]
    pub max_processes: usize,
    /// How long an exited process's numbers stay in the metrics.
    #[arg(long, value_parser = parse_duration, default_value = "5m", value_name = "TIME")]
    pub exited_retention: Duration,
    /// Processes with series of their own, the top N by bytes copied; the rest are summed
    /// under pid="other".
    #[arg(long, default_value_t = 200, value_name = "N")]
    pub max_series_processes: usize,
    /// Pinned memory with no copy for this long counts as idle.
    #[arg(long, value_parser = parse_duration, default_value = "60s", value_name = "TIME")]
    pub idle_after: Duration,
    /// BPF ring buffer size (full: events are dropped and counted, never waited for).
    #[arg(long, value_parser = parse_size, default_value = "8M", value_name = "BYTES")]
    pub ringbuf_size: u64,
    /// Where the host's cgroup v2 hierarchy is mounted (in a container, mount the host's
    /// /sys/fs/cgroup and name it here) [default: from /proc/mounts].
    #[arg(long, value_name = "DIR")]
    pub cgroupfs: Option<PathBuf>,
    /// Write each process's history (binary; `pinwise report` reads it) into this
    /// directory when it exits and every --history-every while it runs.
    #[arg(long, value_name = "DIR")]
    pub history_dir: Option<PathBuf>,
    /// How often a running process's history is rewritten.
    #[arg(long, value_parser = parse_duration, default_value = "60s", value_name = "TIME")]
    pub history_every: Duration,
    /// Most bytes of history files kept in --history-dir (the oldest go first).
    #[arg(long, value_parser = parse_size, default_value = "1G", value_name = "BYTES")]
    pub history_max: u64,
    /// The kubelet's pod log directory, whose `<namespace>_<pod>_<uid>` entries give pods'
    /// namespaces and names (in a container, mount the host's read-only and name it here).
    #[arg(long, value_name = "DIR", default_value = pinwise_agent::pods::DEFAULT_PODS_DIR)]
    pub pods_dir: PathBuf,
    /// How often each live process's GPUs (open /dev/nvidia<N> files) and pod are looked up.
    #[arg(long, value_parser = parse_duration, default_value = "10s", value_name = "TIME")]
    pub labels_every: Duration,
    /// Fingerprint copies in BPF (8 sampled cache lines of each upload and synchronous
    /// download) and count redundant ones: the same bytes sent again to the same device
    /// range, or fetched again unchanged.
    #[arg(long)]
    pub fingerprint: bool,
    /// Export the node's pinned pool's accounting (`pinwise pool serve` at SOCKET [default:
    /// $PINWISE_POOL_SOCKET, else /run/pinwise/pool.sock]): pinned bytes, clients, and the GPU
    /// page-table memory it saves (`pinwise_pool_*`), asked at each scrape (waiting at most
    /// 1.2 s for it).
    #[arg(long, value_name = "SOCKET", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    pub pool: Option<PathBuf>,
    /// Also push the metrics to an OpenTelemetry collector over OTLP/HTTP (protobuf), e.g.
    /// http://127.0.0.1:4318 (`/v1/metrics` is appended when the URL has no path).
    #[cfg(feature = "otlp")]
    #[arg(long, value_name = "URL")]
    pub otlp: Option<String>,
    /// Time between OTLP pushes.
    #[cfg(feature = "otlp")]
    #[arg(long, value_parser = parse_duration, default_value = "10s", value_name = "TIME")]
    pub otlp_interval: Duration,
    /// Calibration CSV for the cost model (`pinwise calibrate`) [default: built-in].
    #[arg(long, value_name = "FILE")]
    pub calibration: Option<PathBuf>,
}

/// Runs `pinwise agent`.
pub fn run(args: AgentArgs) -> Result<ExitCode> {
    let ringbuf_bytes = u32::try_from(args.ringbuf_size)
        .ok()
        .filter(|&b| b <= 1 << 30)
        .ok_or_else(|| anyhow::anyhow!("--ringbuf-size {} is above 1 GiB", args.ringbuf_size))?;
    let cost = match &args.calibration {
        Some(path) => CostModel::from_csv_file(path)
            .with_context(|| format!("--calibration {}", path.display()))?,
        None => CostModel::builtin(),
    };
    let mut config = AgentConfig {
        listen: args.listen,
        libcuda: args.libcuda,
        ringbuf_bytes,
        table: TableConfig {
            max_processes: args.max_processes.max(1),
            exited_retention: args.exited_retention,
            filter: Filter {
                pids: args.pid,
                comms: args.comm,
                cgroups: args.cgroup,
                containers: args.container,
            },
        },
        max_series_processes: args.max_series_processes,
        idle_after: args.idle_after,
        cost,
        cgroupfs: args.cgroupfs,
        // A missing directory is no error: off Kubernetes there is none.
        pods_dir: Some(args.pods_dir),
        labels_every: args.labels_every,
        fingerprint: args.fingerprint,
        pool_socket: args.pool.map(|p| {
            if p.as_os_str().is_empty() {
                pinwise_pool::default_socket()
            } else {
                p
            }
        }),
        #[cfg(feature = "otlp")]
        otlp: args.otlp.map(|endpoint| pinwise_agent::otlp::OtlpConfig {
            endpoint,
            interval: args.otlp_interval.max(Duration::from_millis(100)),
        }),
        histories: args.history_dir.map(|dir| HistorySettings {
            dir,
            every: args.history_every,
            max_bytes: args.history_max,
            events_per_allocation: 64,
        }),
        ..AgentConfig::default()
    };
    if let Some(node) = args.node {
        config.node = node;
    }
    let signals = Signals::install()?;
    let agent = Agent::start(config)?;
    eprintln!(
        "pinwise agent: probing {}; metrics on http://{}/metrics",
        agent
            .libraries()
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        agent.local_addr()
    );
    agent.run(&signals)?;
    eprintln!("pinwise agent: stopped");
    Ok(ExitCode::SUCCESS)
}
