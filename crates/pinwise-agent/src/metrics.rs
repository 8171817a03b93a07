//! The metrics, in Prometheus's exposition format (OpenMetrics text, written by the
//! `prometheus-client` crate from a [`Snapshot`] taken at each scrape).
//!
//! # Metrics
//!
//! Process labels: `node`, `pid`, `comm`, `cgroup`, `container_id`, `pod_uid`,
//! `namespace`, `pod`, `qos`, `gpu`. `namespace` and `pod` come from the pods directory
//! ([`crate::pods`]; empty when unknown), `gpu` lists the minor numbers of the NVIDIA
//! device files the process has open ([`crate::gpus`] says what that is and is not).
//! Copy labels: `direction` (`HtoD`, `DtoH`, `DtoD`, `HtoH`) and `host_kind` (`pageable`,
//! `pinned`, `registered`, `unknown`; `none` for device-to-device).
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `pinwise_transfers_total`, `pinwise_transfer_bytes_total` | counter | process, copy |
//! | `pinwise_transfer_estimated_seconds_total` (cost model) | counter | process, copy |
//! | `pinwise_pinning_saving_estimated_seconds_total` (pageable copies) | counter | process, copy |
//! | `pinwise_node_…` the four above summed over every process ever seen | counter | node, copy |
//! | `pinwise_pinned_bytes` (`host_kind` pinned or registered), `pinwise_pinned_idle_bytes` | gauge | process |
//! | `pinwise_fingerprinted_transfers_total`, `pinwise_redundant_transfers_total`, `pinwise_redundant_transfer_bytes_total`, `pinwise_redundant_transfer_estimated_seconds_total` (with `--fingerprint`; `direction` HtoD or DtoH) | counter | process, direction |
//! | `pinwise_node_redundant_transfers_total`, `pinwise_node_redundant_transfer_bytes_total` | counter | node, direction |
//! | `pinwise_processes` (`state` live or exited) | gauge | node |
//! | `pinwise_processes_seen_total`, `_evicted_total`, `_untracked_total`, `pinwise_events_filtered_total` | counter | node |
//! | `pinwise_series_aggregated_processes` | gauge | node |
//! | `pinwise_ringbuf_drops_total`, `pinwise_tracer_records_total`, `pinwise_tracer_decode_errors_total`, `pinwise_tracer_tgid_map_full_total` | counter | node |
//! | `pinwise_tracer_uprobes` | gauge | node |
//! | `pinwise_agent_cpu_seconds_total` | counter | node |
//! | `pinwise_otlp_exports_total` (`result` ok or failed; with `--otlp`) | counter | node |
//! | `pinwise_agent_resident_memory_bytes` | gauge | node |
//! | `pinwise_pool_up`, `pinwise_pool_clients`, `pinwise_pool_pinned_bytes`, `pinwise_pool_deduplicated_bytes`, `pinwise_pool_gpu_pagetable_saved_estimated_bytes` (with `--pool`: the node's pinned pool, asked at each snapshot) | gauge | node |
//!
//! A copy's host kind is decided by the pinned and registered ranges the agent saw the
//! process make ([`crate::process`]); memory of a process that ran before the agent
//! attached is `unknown` unless it is in such a range.
//!
//! # Cardinality cap
//!
//! Per-process series carry the process labels above. Only the [`Snapshot::max_series_processes`] processes that copied
//! the most bytes get series of their own; the others are summed into one series with
//! `pid="other"` (its other process labels `other` too, `node` kept), and their number is
//! `pinwise_series_aggregated_processes`. The series of a process go away when it is
//! evicted from the table (see [`crate::table`]); the `pinwise_node_*` totals never
//! decrease and include evicted processes. When a process moves in or out of the top N,
//! the `other` series can decrease: Prometheus takes that for a counter reset.
//!
//! Two labels can change during a process's life, which starts a new series for it (the
//! old one goes stale): `gpu` grows when the process opens another GPU's device file
//! (looked up every `--labels-every`, first at the first tick after its enrolment), and
//! `namespace`/`pod` appear when its pod directory shows up after its enrolment. Neither
//! adds series beyond one per process: the cap above still bounds them.
//!
//! The GPU a copy went to is not known to the tracer (its events carry device pointers,
//! not device numbers): the `gpu` label is the process's, not the copy's.
//!
//! # One list for every exporter
//!
//! [`families`] turns a [`Snapshot`] into the metric families ([`FAMILIES`] describes
//! them); the Prometheus endpoint ([`encode`]) and the OTLP push (`crate::otlp`) both
//! export that list, so they carry the same names (OTLP without Prometheus's `_total`
//! suffix, which a collector's Prometheus exporter adds back), labels and numbers.

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use crate::process::{
    merge_redundant, merge_tables, CopyTable, CopyTotals, HostKind, ProcessSummary, RedundantTable,
    RedundantTotals, REDUNDANT_DIRECTIONS,
};
use crate::table::NodeTotals;
use pinwise_core::Direction;

/// Label values of one process series.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessLabels {
    /// `pid`.
    pub pid: String,
    /// `comm`.
    pub comm: String,
    /// `cgroup`.
    pub cgroup: String,
    /// `container_id` (empty when none).
    pub container_id: String,
    /// `pod_uid` (empty when none).
    pub pod_uid: String,
    /// `namespace` of the pod (empty when unknown).
    pub namespace: String,
    /// `pod`: the pod's name (empty when unknown).
    pub pod: String,
    /// `qos` (empty when none).
    pub qos: String,
    /// `gpu`: GPU device minor numbers, comma-separated (empty when none seen).
    pub gpu: String,
}

impl ProcessLabels {
    fn of(s: &ProcessSummary) -> Self {
        ProcessLabels {
            pid: s.pid.to_string(),
            comm: s.comm.clone(),
            cgroup: s.cgroup.path.clone(),
            container_id: s.cgroup.container_id.clone().unwrap_or_default(),
            pod_uid: s.cgroup.pod_uid.clone().unwrap_or_default(),
            namespace: s
                .pod
                .as_ref()
                .map(|p| p.namespace.clone())
                .unwrap_or_default(),
            pod: s.pod.as_ref().map(|p| p.name.clone()).unwrap_or_default(),
            qos: s.cgroup.qos.unwrap_or_default().to_string(),
            gpu: crate::gpus::label(&s.gpus),
        }
    }

    fn other() -> Self {
        let o = || "other".to_string();
        ProcessLabels {
            pid: o(),
            comm: o(),
            cgroup: o(),
            container_id: o(),
            pod_uid: o(),
            namespace: o(),
            pod: o(),
            qos: o(),
            gpu: o(),
        }
    }
}

/// One process series (or the `other` aggregate).
#[derive(Debug, Clone)]
pub struct ProcessRow {
    /// Its labels.
    pub labels: ProcessLabels,
    /// Copies by direction and host kind.
    pub copies: CopyTable,
    /// Pinned bytes held (CUDA pinned allocations).
    pub pinned_bytes: u64,
    /// Registered bytes held.
    pub registered_bytes: u64,
    /// Pinned or registered bytes with no copy for the idle time.
    pub idle_bytes: u64,
    /// Fingerprinted and redundant uploads and downloads.
    pub redundant: RedundantTable,
    /// Whether it has exited.
    pub exited: bool,
}

/// Everything one scrape shows.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The `node` label.
    pub node: String,
    /// Process series, the top N by bytes then `other` (if any).
    pub rows: Vec<ProcessRow>,
    /// Processes summed into `other`.
    pub aggregated_processes: u64,
    /// The cap the rows were made with.
    pub max_series_processes: usize,
    /// Live and exited processes with summaries.
    pub processes_live: u64,
    /// Exited processes whose summaries are still held.
    pub processes_exited_held: u64,
    /// Node totals.
    pub totals: NodeTotals,
    /// Tracer: ring buffer drops, records, decode errors, traced-set overflows, uprobes.
    pub ringbuf_drops: u64,
    /// Ring-buffer records read.
    pub records: u64,
    /// Records that could not be decoded.
    pub decode_errors: u64,
    /// Processes the BPF side could not add to its traced set (map full).
    pub tgid_map_full: u64,
    /// Uprobes attached.
    pub uprobes: u64,
    /// The agent's CPU time (user + system), seconds.
    pub agent_cpu_seconds: f64,
    /// The agent's resident memory, bytes.
    pub agent_rss_bytes: u64,
    /// OTLP pushes `(accepted, failed)`, when pushing.
    pub otlp_exports: Option<(u64, u64)>,
    /// The node's pinned pool (`--pool`): its accounting, `Some(None)` when it did not
    /// answer; `None` when the agent does not ask.
    pub pool: Option<Option<pinwise_pool::Stats>>,
}

impl Snapshot {
    /// Builds the process rows from the summaries: the `max_series` with the most bytes
    /// get their own series, the rest one `other` series.
    pub fn set_rows<'a>(
        &mut self,
        summaries: impl Iterator<Item = &'a ProcessSummary>,
        max_series: usize,
        idle_since_ns: u64,
    ) {
        let mut all: Vec<&ProcessSummary> = summaries.collect();
        self.processes_live = all.iter().filter(|s| s.exited_ns.is_none()).count() as u64;
        self.processes_exited_held = all.len() as u64 - self.processes_live;
        // Most bytes first; ties by PID, so that the choice is stable between scrapes.
        all.sort_by(|a, b| {
            b.total_bytes()
                .cmp(&a.total_bytes())
                .then(a.pid.cmp(&b.pid))
        });
        self.max_series_processes = max_series;
        let row = |s: &ProcessSummary| {
            let (pinned, registered) = s.pinned_held();
            ProcessRow {
                labels: ProcessLabels::of(s),
                copies: s.copies,
                pinned_bytes: pinned,
                registered_bytes: registered,
                idle_bytes: s.pinned_idle(idle_since_ns),
                redundant: s.redundant,
                exited: s.exited_ns.is_some(),
            }
        };
        self.rows = all.iter().take(max_series).map(|s| row(s)).collect();
        let rest = &all[all.len().min(max_series)..];
        self.aggregated_processes = rest.len() as u64;
        if !rest.is_empty() {
            let mut other = ProcessRow {
                labels: ProcessLabels::other(),
                copies: [[CopyTotals::default(); 5]; 4],
                pinned_bytes: 0,
                registered_bytes: 0,
                idle_bytes: 0,
                redundant: RedundantTable::default(),
                exited: false,
            };
            for s in rest {
                let r = row(s);
                merge_tables(&mut other.copies, &r.copies);
                other.pinned_bytes += r.pinned_bytes;
                other.registered_bytes += r.registered_bytes;
                other.idle_bytes += r.idle_bytes;
                merge_redundant(&mut other.redundant, &r.redundant);
            }
            self.rows.push(other);
        }
    }
}

/// Label names and values of one sample.
pub type Labels<'a> = Vec<(&'static str, &'a str)>;

/// The process label names, in the order series carry them.
pub const PROCESS_LABELS: [&str; 10] = [
    "node",
    "pid",
    "comm",
    "cgroup",
    "container_id",
    "pod_uid",
    "namespace",
    "pod",
    "qos",
    "gpu",
];

fn process_labels<'a>(node: &'a str, l: &'a ProcessLabels) -> Labels<'a> {
    let values = [
        node,
        &l.pid,
        &l.comm,
        &l.cgroup,
        &l.container_id,
        &l.pod_uid,
        &l.namespace,
        &l.pod,
        &l.qos,
        &l.gpu,
    ];
    PROCESS_LABELS.into_iter().zip(values).collect()
}

/// Counter or gauge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Never decreases (but see the cardinality cap's `other` series).
    Counter,
    /// Goes up and down.
    Gauge,
}

/// A sample's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// A count.
    Int(u64),
    /// Seconds.
    Float(f64),
}

impl Value {
    /// As a float.
    pub fn as_f64(self) -> f64 {
        match self {
            Value::Int(v) => v as f64,
            Value::Float(v) => v,
        }
    }
}

/// A metric family: its name (without Prometheus's `_total`), help, kind, and whether its
/// values are seconds (floats) or counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Desc {
    /// The name; Prometheus adds `_total` to counters.
    pub name: &'static str,
    /// What it counts.
    pub help: &'static str,
    /// Counter or gauge.
    pub kind: Kind,
    /// Float values (seconds) rather than integers.
    pub float: bool,
    /// The unit, as OTLP carries it (`By`, `s`, `1`).
    pub unit: &'static str,
}

const fn desc(
    name: &'static str,
    help: &'static str,
    kind: Kind,
    float: bool,
    unit: &'static str,
) -> Desc {
    Desc {
        name,
        help,
        kind,
        float,
        unit,
    }
}

use Kind::{Counter, Gauge};

/// Every metric family, in the order they are exported.
pub const FAMILIES: &[Desc] = &[
    desc("pinwise_transfers", "Host<->device copies, by process, direction and host memory kind.", Counter, false, "1"),
    desc("pinwise_node_transfers", "Host<->device copies, by direction and host memory kind. Node total, evicted processes included.", Counter, false, "1"),
    desc("pinwise_transfer_bytes", "Bytes copied, by process, direction and host memory kind.", Counter, false, "By"),
    desc("pinwise_node_transfer_bytes", "Bytes copied, by direction and host memory kind. Node total, evicted processes included.", Counter, false, "By"),
    desc("pinwise_transfer_estimated_seconds", "Estimated time of the copies (pinwise's cost model; unknown memory costed as pageable).", Counter, true, "s"),
    desc("pinwise_node_transfer_estimated_seconds", "Estimated time of the copies (cost model). Node total, evicted processes included.", Counter, true, "s"),
    desc("pinwise_pinning_saving_estimated_seconds", "Estimated time pinning the pageable memory copied would have saved (cost model).", Counter, true, "s"),
    desc("pinwise_node_pinning_saving_estimated_seconds", "Estimated time pinning the pageable memory copied would have saved (cost model). Node total, evicted processes included.", Counter, true, "s"),
    desc("pinwise_fingerprinted_transfers", "Copies whose content was fingerprinted (pinwise agent --fingerprint: uploads, and synchronous downloads), by direction.", Counter, false, "1"),
    desc("pinwise_redundant_transfers", "Redundant copies, by direction (by fingerprint): uploads of bytes the device range already held or that the same host bytes sent to it before; downloads that fetched the same bytes as the previous download of that range into the same host bytes.", Counter, false, "1"),
    desc("pinwise_redundant_transfer_bytes", "Bytes of redundant copies, by direction.", Counter, false, "By"),
    desc("pinwise_redundant_transfer_estimated_seconds", "Estimated time of the redundant copies (cost model): what keeping the data on the device (or the result on the host) would save.", Counter, true, "s"),
    desc("pinwise_node_redundant_transfers", "Redundant copies, by direction. Node total, evicted processes included.", Counter, false, "1"),
    desc("pinwise_node_redundant_transfer_bytes", "Bytes of redundant copies, by direction. Node total, evicted processes included.", Counter, false, "By"),
    desc("pinwise_pinned_bytes", "Page-locked host memory held, by process and kind (pinned: CUDA pinned allocations; registered: cuMemHostRegister).", Gauge, false, "By"),
    desc("pinwise_pinned_idle_bytes", "Page-locked host memory held with no copy to or from it for the idle time (--idle-after): pinned for nothing, lately.", Gauge, false, "By"),
    desc("pinwise_processes", "Processes with a summary: live, and exited but still held.", Gauge, false, "1"),
    desc("pinwise_processes_seen", "CUDA processes followed since the agent started.", Counter, false, "1"),
    desc("pinwise_processes_evicted", "Process summaries removed (exited past the retention, or the table was full).", Counter, false, "1"),
    desc("pinwise_processes_untracked", "Processes that got no summary because the table was full of live ones (counted in the node totals only).", Counter, false, "1"),
    desc("pinwise_events_filtered", "Events of processes the filters exclude.", Counter, false, "1"),
    desc("pinwise_ringbuf_drops", "Events lost because the BPF ring buffer was full (counted in BPF; never waited for).", Counter, false, "1"),
    desc("pinwise_tracer_records", "Ring-buffer records read.", Counter, false, "1"),
    desc("pinwise_tracer_decode_errors", "Ring-buffer records that could not be decoded.", Counter, false, "1"),
    desc("pinwise_tracer_tgid_map_full", "Processes the BPF side could not trace (its traced-process map was full).", Counter, false, "1"),
    desc("pinwise_agent_cpu_seconds", "CPU time of the agent's process (user + system).", Counter, true, "s"),
    desc("pinwise_otlp_exports", "OTLP pushes, by result (ok, failed); only with --otlp.", Counter, false, "1"),
    desc("pinwise_series_aggregated_processes", "Processes summed into the pid=\"other\" series (the cardinality cap, --max-series-processes).", Gauge, false, "1"),
    desc("pinwise_tracer_uprobes", "Uprobes attached.", Gauge, false, "1"),
    desc("pinwise_agent_resident_memory_bytes", "Resident memory of the agent's process.", Gauge, false, "By"),
    desc("pinwise_pool_up", "Whether the node's pinned pool (pinwise pool serve) answered (with --pool).", Gauge, false, "1"),
    desc("pinwise_pool_clients", "Processes connected to the node's pinned pool (the agent's own query not counted).", Gauge, false, "1"),
    desc("pinwise_pool_pinned_bytes", "Pinned host memory the node's pinned pool holds for its clients (pinned and mapped on the GPU once, by the service).", Gauge, false, "By"),
    desc("pinwise_pool_deduplicated_bytes", "Bytes of the pool's named buffers held by more than one client beyond their first: what those clients would otherwise pin again.", Gauge, false, "By"),
    desc("pinwise_pool_gpu_pagetable_saved_estimated_bytes", "GPU page-table memory the pool saves on the node (its deduplicated bytes at 8 bytes per 4 KiB page, measured: bench/results/gpu-pagetable.md).", Gauge, false, "By"),
];

/// Names of the metrics as Prometheus exposes them (counters with their `_total`), for
/// dashboards and tests: every one of them is in every scrape (with samples once there
/// is something to count).
pub const METRIC_NAMES: &[&str] = &[
    "pinwise_transfers_total",
    "pinwise_node_transfers_total",
    "pinwise_transfer_bytes_total",
    "pinwise_node_transfer_bytes_total",
    "pinwise_transfer_estimated_seconds_total",
    "pinwise_node_transfer_estimated_seconds_total",
    "pinwise_pinning_saving_estimated_seconds_total",
    "pinwise_node_pinning_saving_estimated_seconds_total",
    "pinwise_fingerprinted_transfers_total",
    "pinwise_redundant_transfers_total",
    "pinwise_redundant_transfer_bytes_total",
    "pinwise_redundant_transfer_estimated_seconds_total",
    "pinwise_node_redundant_transfers_total",
    "pinwise_node_redundant_transfer_bytes_total",
    "pinwise_pinned_bytes",
    "pinwise_pinned_idle_bytes",
    "pinwise_processes",
    "pinwise_processes_seen_total",
    "pinwise_processes_evicted_total",
    "pinwise_processes_untracked_total",
    "pinwise_events_filtered_total",
    "pinwise_ringbuf_drops_total",
    "pinwise_tracer_records_total",
    "pinwise_tracer_decode_errors_total",
    "pinwise_tracer_tgid_map_full_total",
    "pinwise_agent_cpu_seconds_total",
    "pinwise_otlp_exports_total",
    "pinwise_series_aggregated_processes",
    "pinwise_tracer_uprobes",
    "pinwise_agent_resident_memory_bytes",
    "pinwise_pool_up",
    "pinwise_pool_clients",
    "pinwise_pool_pinned_bytes",
    "pinwise_pool_deduplicated_bytes",
    "pinwise_pool_gpu_pagetable_saved_estimated_bytes",
];

/// One sample: labels and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<'a> {
    /// Label names and values.
    pub labels: Labels<'a>,
    /// The value.
    pub value: Value,
}

/// A family and its samples.
#[derive(Debug, Clone)]
pub struct Family<'a> {
    /// What it is.
    pub desc: &'static Desc,
    /// Its samples.
    pub samples: Vec<Sample<'a>>,
}

/// Each (direction, kind) cell with copies, with its labels appended to `base`.
fn cells<'a>(
    base: &Labels<'a>,
    table: &'a CopyTable,
) -> impl Iterator<Item = (Labels<'a>, &'a CopyTotals)> + 'a {
    let base = base.clone();
    Direction::ALL.into_iter().flat_map(move |d| {
        let base = base.clone();
        HostKind::ALL.into_iter().filter_map(move |k| {
            let t = &table[d.index()][k as usize];
            (t.transfers > 0).then(|| {
                let mut l = base.clone();
                l.push(("direction", d.as_str()));
                l.push(("host_kind", k.as_str()));
                (l, t)
            })
        })
    })
}

/// Each direction with fingerprinted copies, with `direction` appended to `base`.
fn redundant_cells<'a>(
    base: &Labels<'a>,
    table: &'a RedundantTable,
) -> impl Iterator<Item = (Labels<'a>, &'a RedundantTotals)> + 'a {
    let base = base.clone();
    REDUNDANT_DIRECTIONS
        .iter()
        .zip(table)
        .filter(|(_, r)| r.fingerprinted > 0 || r.transfers > 0)
        .map(move |(d, r)| (with(base.clone(), "direction", d.as_str()), r))
}

fn with<'a>(mut l: Labels<'a>, k: &'static str, v: &'static str) -> Labels<'a> {
    l.push((k, v));
    l
}

/// The snapshot's metric families, in [`FAMILIES`] order, one entry each: what every
/// exporter exports.
pub fn families(s: &Snapshot) -> Vec<Family<'_>> {
    let node = s.node.as_str();
    let nl: Labels<'_> = vec![("node", node)];
    let rows: Vec<(Labels<'_>, &ProcessRow)> = s
        .rows
        .iter()
        .map(|r| (process_labels(node, &r.labels), r))
        .collect();
    let t = &s.totals;
    let mut out = Vec::with_capacity(FAMILIES.len());
    for d in FAMILIES {
        let mut samples: Vec<Sample<'_>> = Vec::new();
        let mut push = |labels, value| samples.push(Sample { labels, value });
        type Pick = fn(&CopyTotals) -> Value;
        let per_copy: Option<(Pick, bool)> = match d.name {
            "pinwise_transfers" => Some((|c| Value::Int(c.transfers), false)),
            "pinwise_node_transfers" => Some((|c| Value::Int(c.transfers), true)),
            "pinwise_transfer_bytes" => Some((|c| Value::Int(c.bytes), false)),
            "pinwise_node_transfer_bytes" => Some((|c| Value::Int(c.bytes), true)),
            "pinwise_transfer_estimated_seconds" => Some((|c| Value::Float(c.est_seconds), false)),
            "pinwise_node_transfer_estimated_seconds" => {
                Some((|c| Value::Float(c.est_seconds), true))
            }
            "pinwise_pinning_saving_estimated_seconds" => {
                Some((|c| Value::Float(c.saving_seconds), false))
            }
            "pinwise_node_pinning_saving_estimated_seconds" => {
                Some((|c| Value::Float(c.saving_seconds), true))
            }
            _ => None,
        };
        if let Some((pick, node_total)) = per_copy {
            if node_total {
                for (l, c) in cells(&nl, &t.copies) {
                    push(l, pick(c));
                }
            } else {
                for (base, row) in &rows {
                    for (l, c) in cells(base, &row.copies) {
                        push(l, pick(c));
                    }
                }
            }
            out.push(Family { desc: d, samples });
            continue;
        }
        type PickR = fn(&RedundantTotals) -> Value;
        let redundant: Option<PickR> = match d.name {
            "pinwise_fingerprinted_transfers" => Some(|r| Value::Int(r.fingerprinted)),
            "pinwise_redundant_transfers" => Some(|r| Value::Int(r.transfers)),
            "pinwise_redundant_transfer_bytes" => Some(|r| Value::Int(r.bytes)),
            "pinwise_redundant_transfer_estimated_seconds" => Some(|r| Value::Float(r.est_seconds)),
            _ => None,
        };
        if let Some(pick) = redundant {
            for (base, row) in &rows {
                for (l, r) in redundant_cells(base, &row.redundant) {
                    push(l, pick(r));
                }
            }
            out.push(Family { desc: d, samples });
            continue;
        }
        let node_redundant: Option<PickR> = match d.name {
            "pinwise_node_redundant_transfers" => Some(|r| Value::Int(r.transfers)),
            "pinwise_node_redundant_transfer_bytes" => Some(|r| Value::Int(r.bytes)),
            _ => None,
        };
        if let Some(pick) = node_redundant {
            for (l, r) in redundant_cells(&nl, &t.redundant) {
                push(l, pick(r));
            }
            out.push(Family { desc: d, samples });
            continue;
        }
        match d.name {
            "pinwise_pinned_bytes" => {
                for (base, row) in &rows {
                    push(
                        with(base.clone(), "host_kind", "pinned"),
                        Value::Int(row.pinned_bytes),
                    );
                    push(
                        with(base.clone(), "host_kind", "registered"),
                        Value::Int(row.registered_bytes),
                    );
                }
            }
            "pinwise_pinned_idle_bytes" => {
                for (base, row) in &rows {
                    push(base.clone(), Value::Int(row.idle_bytes));
                }
            }
            "pinwise_otlp_exports" => {
                if let Some((ok, failed)) = s.otlp_exports {
                    push(with(nl.clone(), "result", "ok"), Value::Int(ok));
                    push(with(nl.clone(), "result", "failed"), Value::Int(failed));
                }
            }
            "pinwise_pool_up" => {
                if let Some(p) = &s.pool {
                    push(nl.clone(), Value::Int(u64::from(p.is_some())));
                }
            }
            "pinwise_pool_clients"
            | "pinwise_pool_pinned_bytes"
            | "pinwise_pool_deduplicated_bytes"
            | "pinwise_pool_gpu_pagetable_saved_estimated_bytes" => {
                if let Some(Some(p)) = &s.pool {
                    let v = match d.name {
                        "pinwise_pool_clients" => p.clients,
                        "pinwise_pool_pinned_bytes" => p.bytes,
                        "pinwise_pool_deduplicated_bytes" => p.deduplicated_bytes,
                        _ => p.estimated_gpu_pagetable_bytes_saved(),
                    };
                    push(nl.clone(), Value::Int(v));
                }
            }
            "pinwise_processes" => {
                push(
                    with(nl.clone(), "state", "live"),
                    Value::Int(s.processes_live),
                );
                push(
                    with(nl.clone(), "state", "exited"),
                    Value::Int(s.processes_exited_held),
                );
            }
            name => {
                let v = match name {
                    "pinwise_processes_seen" => Value::Int(t.processes_seen),
                    "pinwise_processes_evicted" => Value::Int(t.processes_evicted),
                    "pinwise_processes_untracked" => Value::Int(t.untracked_processes),
                    "pinwise_events_filtered" => Value::Int(t.events_filtered),
                    "pinwise_ringbuf_drops" => Value::Int(s.ringbuf_drops),
                    "pinwise_tracer_records" => Value::Int(s.records),
                    "pinwise_tracer_decode_errors" => Value::Int(s.decode_errors),
                    "pinwise_tracer_tgid_map_full" => Value::Int(s.tgid_map_full),
                    "pinwise_agent_cpu_seconds" => Value::Float(s.agent_cpu_seconds),
                    "pinwise_series_aggregated_processes" => Value::Int(s.aggregated_processes),
                    "pinwise_tracer_uprobes" => Value::Int(s.uprobes),
                    "pinwise_agent_resident_memory_bytes" => Value::Int(s.agent_rss_bytes),
                    _ => {
                        out.push(Family { desc: d, samples });
                        continue;
                    }
                };
                push(nl.clone(), v);
            }
        }
        out.push(Family { desc: d, samples });
    }
    out
}

/// The snapshot in the exposition format, as `/metrics` serves it (for tests and tools).
pub fn render(s: &Snapshot) -> String {
    #[derive(Debug)]
    struct Fixed(Snapshot);
    impl prometheus_client::collector::Collector for Fixed {
        fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
            encode(&self.0, encoder)
        }
    }
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(Fixed(s.clone())));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("writing to a String does not fail");
    out
}

/// Writes the snapshot's metric families ([`families`]) for `prometheus-client`.
pub fn encode(s: &Snapshot, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
    for f in families(s) {
        let kind = match f.desc.kind {
            Kind::Counter => MetricType::Counter,
            Kind::Gauge => MetricType::Gauge,
        };
        let mut m = encoder.encode_descriptor(f.desc.name, f.desc.help, None, kind)?;
        for sample in &f.samples {
            let e = m.encode_family(&sample.labels)?;
            match (f.desc.kind, sample.value) {
                (Kind::Counter, Value::Int(v)) => ConstCounter::new(v).encode(e)?,
                (Kind::Counter, Value::Float(v)) => ConstCounter::new(v).encode(e)?,
                (Kind::Gauge, Value::Int(v)) => ConstGauge::new(v as i64).encode(e)?,
                (Kind::Gauge, Value::Float(v)) => ConstGauge::new(v).encode(e)?,
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::parse_path;

    fn summary(pid: u32, bytes: u64, cg: &str) -> ProcessSummary {
        let mut s = ProcessSummary::new(pid, format!("p{pid}"), parse_path(cg), false);
        let c = &mut s.copies[Direction::HtoD.index()][HostKind::Pageable as usize];
        c.transfers = 1;
        c.bytes = bytes;
        s
    }

    #[test]
    fn only_the_top_n_by_bytes_get_series_and_the_rest_is_other() {
        let all = [
            summary(1, 100, "/a"),
            summary(2, 500, "/b"),
            summary(3, 300, "/c"),
            summary(4, 50, "/d"),
        ];
        let mut s = Snapshot::default();
        s.set_rows(all.iter(), 2, 0);
        let pids: Vec<&str> = s.rows.iter().map(|r| r.labels.pid.as_str()).collect();
        assert_eq!(pids, ["2", "3", "other"]);
        assert_eq!(s.aggregated_processes, 2);
        let other = &s.rows[2];
        assert_eq!(other.labels.cgroup, "other");
        let c = other.copies[Direction::HtoD.index()][HostKind::Pageable as usize];
        assert_eq!((c.transfers, c.bytes), (2, 150));
        // No cap reached: no `other` row.
        s.set_rows(all.iter(), 4, 0);
        assert_eq!(s.rows.len(), 4);
        assert_eq!(s.aggregated_processes, 0);
    }

    #[test]
    fn the_name_list_is_the_family_list_with_prometheus_suffixes() {
        let from_families: Vec<String> = FAMILIES
            .iter()
            .map(|d| match d.kind {
                Kind::Counter => format!("{}_total", d.name),
                Kind::Gauge => d.name.to_string(),
            })
            .collect();
        assert_eq!(from_families, METRIC_NAMES);
        // families() gives one entry per family, in order, whatever the snapshot.
        let s = Snapshot::default();
        let names: Vec<&str> = families(&s).iter().map(|f| f.desc.name).collect();
        let want: Vec<&str> = FAMILIES.iter().map(|d| d.name).collect();
        assert_eq!(names, want);
    }

    #[test]
    fn the_pool_gauges_follow_the_pool_answer() {
        let value = |s: &Snapshot, name: &str| -> Vec<Value> {
            families(s)
                .into_iter()
                .find(|f| f.desc.name == name)
                .unwrap()
                .samples
                .into_iter()
                .map(|x| x.value)
                .collect()
        };
        // Not asked: no samples.
        let s = Snapshot::default();
        assert!(value(&s, "pinwise_pool_up").is_empty());
        // Asked, no answer: up 0, nothing else.
        let s = Snapshot {
            pool: Some(None),
            ..Snapshot::default()
        };
        assert_eq!(value(&s, "pinwise_pool_up"), [Value::Int(0)]);
        assert!(value(&s, "pinwise_pool_pinned_bytes").is_empty());
        // An answer: its figures, and the page-table estimate at 8 bytes per 4 KiB page.
        let s = Snapshot {
            pool: Some(Some(pinwise_pool::Stats {
                clients: 3,
                bytes: 24 << 30,
                deduplicated_bytes: 16 << 30,
                ..Default::default()
            })),
            ..Snapshot::default()
        };
        assert_eq!(value(&s, "pinwise_pool_up"), [Value::Int(1)]);
        assert_eq!(value(&s, "pinwise_pool_clients"), [Value::Int(3)]);
        assert_eq!(
            value(&s, "pinwise_pool_pinned_bytes"),
            [Value::Int(24 << 30)]
        );
        assert_eq!(
            value(&s, "pinwise_pool_gpu_pagetable_saved_estimated_bytes"),
            [Value::Int(32 << 20)]
        );
        assert!(render(&s).contains("pinwise_pool_clients{node=\"\"} 3"));
    }

    #[test]
    fn process_series_carry_namespace_pod_and_gpu_and_redundancy_is_per_process() {
        let mut p = summary(
            9,
            4096,
            "/kubepods/burstable/pod0b8d8b36-4bd1-4a8a-9d3c-2a7f1e6b5c4d/x",
        );
        p.pod = Some(crate::process::PodName {
            namespace: "ml".into(),
            name: "trainer-0".into(),
        });
        p.add_gpus(&[3, 1, 3]);
        p.redundant[0] = RedundantTotals {
            fingerprinted: 5,
            transfers: 4,
            bytes: 4 * 4096,
            est_seconds: 1e-3,
        };
        let quiet = summary(10, 10, "/b");
        let mut s = Snapshot {
            node: "n1".into(),
            ..Snapshot::default()
        };
        s.totals.redundant = p.redundant;
        s.set_rows([p, quiet].iter(), 10, 0);
        let text = render(&s);
        let line = |name: &str, pid: &str| {
            text.lines()
                .find(|l| l.starts_with(name) && l.contains(&format!("pid=\"{pid}\"")))
                .map(str::to_string)
        };
        let t = line("pinwise_transfers_total{", "9").expect("transfers of 9");
        for label in [
            "namespace=\"ml\"",
            "pod=\"trainer-0\"",
            "pod_uid=\"0b8d8b36-4bd1-4a8a-9d3c-2a7f1e6b5c4d\"",
            "gpu=\"1,3\"",
            "qos=\"burstable\"",
            "node=\"n1\"",
        ] {
            assert!(t.contains(label), "{label} in {t}");
        }
        let r = line("pinwise_redundant_transfers_total{", "9").expect("redundant of 9");
        assert!(r.ends_with(" 4"), "{r}");
        let b = line("pinwise_redundant_transfer_bytes_total{", "9").unwrap();
        assert!(b.ends_with(" 16384"), "{b}");
        // A process with nothing fingerprinted has no redundancy series.
        assert_eq!(line("pinwise_redundant_transfers_total{", "10"), None);
        assert!(
            text.contains(
                "pinwise_node_redundant_transfers_total{node=\"n1\",direction=\"HtoD\"} 4"
            ),
            "{text}"
        );
        // Only directions with fingerprinted copies have series.
        assert!(r.contains("direction=\"HtoD\""), "{r}");
        assert!(!text.lines().any(|l| {
            l.starts_with("pinwise_redundant_transfers_total{") && l.contains("direction=\"DtoH\"")
        }));
        let q = line("pinwise_transfers_total{", "10").unwrap();
        assert!(
            q.contains("gpu=\"\"") && q.contains("namespace=\"\""),
            "{q}"
        );
    }
}
