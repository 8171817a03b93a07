//! The metrics, in Prometheus's exposition format (OpenMetrics text, written by the
//! `prometheus-client` crate from a [`Snapshot`] taken at each scrape).
//!
//! # Metrics
//!
//! Process labels: `node`, `pid`, `comm`, `cgroup`, `container_id`, `pod_uid`, `qos`.
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
//! | `pinwise_processes` (`state` live or exited) | gauge | node |
//! | `pinwise_processes_seen_total`, `_evicted_total`, `_untracked_total`, `pinwise_events_filtered_total` | counter | node |
//! | `pinwise_series_aggregated_processes` | gauge | node |
//! | `pinwise_ringbuf_drops_total`, `pinwise_tracer_records_total`, `pinwise_tracer_decode_errors_total`, `pinwise_tracer_tgid_map_full_total` | counter | node |
//! | `pinwise_tracer_uprobes` | gauge | node |
//! | `pinwise_agent_cpu_seconds_total` | counter | node |
//! | `pinwise_agent_resident_memory_bytes` | gauge | node |
//!
//! A copy's host kind is decided by the pinned and registered ranges the agent saw the
//! process make ([`crate::process`]); memory of a process that ran before the agent
//! attached is `unknown` unless it is in such a range.
//!
//! # Cardinality cap
//!
//! Per-process series carry the labels `node`, `pid`, `comm`, `cgroup`, `container_id`,
//! `pod_uid` and `qos`. Only the [`Snapshot::max_series_processes`] processes that copied
//! the most bytes get series of their own; the others are summed into one series with
//! `pid="other"` (its other process labels `other` too, `node` kept), and their number is
//! `pinwise_series_aggregated_processes`. The series of a process go away when it is
//! evicted from the table (see [`crate::table`]); the `pinwise_node_*` totals never
//! decrease and include evicted processes. When a process moves in or out of the top N,
//! the `other` series can decrease: Prometheus takes that for a counter reset.
//!
//! The GPU a copy went to is not known to the tracer (its events carry device pointers,
//! not device numbers), so there is no GPU label.

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use crate::process::{merge_tables, CopyTable, CopyTotals, HostKind, ProcessSummary};
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
    /// `qos` (empty when none).
    pub qos: String,
}

impl ProcessLabels {
    fn of(s: &ProcessSummary) -> Self {
        ProcessLabels {
            pid: s.pid.to_string(),
            comm: s.comm.clone(),
            cgroup: s.cgroup.path.clone(),
            container_id: s.cgroup.container_id.clone().unwrap_or_default(),
            pod_uid: s.cgroup.pod_uid.clone().unwrap_or_default(),
            qos: s.cgroup.qos.unwrap_or_default().to_string(),
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
            qos: o(),
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
                exited: false,
            };
            for s in rest {
                let r = row(s);
                merge_tables(&mut other.copies, &r.copies);
                other.pinned_bytes += r.pinned_bytes;
                other.registered_bytes += r.registered_bytes;
                other.idle_bytes += r.idle_bytes;
            }
            self.rows.push(other);
        }
    }
}

type Labels<'a> = Vec<(&'static str, &'a str)>;

fn process_labels<'a>(node: &'a str, l: &'a ProcessLabels) -> Labels<'a> {
    vec![
        ("node", node),
        ("pid", &l.pid),
        ("comm", &l.comm),
        ("cgroup", &l.cgroup),
        ("container_id", &l.container_id),
        ("pod_uid", &l.pod_uid),
        ("qos", &l.qos),
    ]
}

/// Names of the metrics as exposed (counters with their `_total`), for dashboards and
/// tests: every one of them is in every scrape.
pub const METRIC_NAMES: &[&str] = &[
    "pinwise_transfers_total",
    "pinwise_transfer_bytes_total",
    "pinwise_transfer_estimated_seconds_total",
    "pinwise_pinning_saving_estimated_seconds_total",
    "pinwise_pinned_bytes",
    "pinwise_pinned_idle_bytes",
    "pinwise_node_transfers_total",
    "pinwise_node_transfer_bytes_total",
    "pinwise_node_transfer_estimated_seconds_total",
    "pinwise_node_pinning_saving_estimated_seconds_total",
    "pinwise_processes",
    "pinwise_processes_seen_total",
    "pinwise_processes_evicted_total",
    "pinwise_processes_untracked_total",
    "pinwise_series_aggregated_processes",
    "pinwise_events_filtered_total",
    "pinwise_ringbuf_drops_total",
    "pinwise_tracer_records_total",
    "pinwise_tracer_decode_errors_total",
    "pinwise_tracer_tgid_map_full_total",
    "pinwise_tracer_uprobes",
    "pinwise_agent_cpu_seconds_total",
    "pinwise_agent_resident_memory_bytes",
];

fn family<F>(
    encoder: &mut DescriptorEncoder,
    name: &'static str,
    help: &str,
    kind: MetricType,
    mut body: F,
) -> Result<(), std::fmt::Error>
where
    F: FnMut(&mut prometheus_client::encoding::MetricEncoder<'_>) -> Result<(), std::fmt::Error>,
{
    let mut m = encoder.encode_descriptor(name, help, None, kind)?;
    body(&mut m)
}

fn counter_f(
    m: &mut prometheus_client::encoding::MetricEncoder<'_>,
    labels: &Labels<'_>,
    v: f64,
) -> Result<(), std::fmt::Error> {
    ConstCounter::new(v).encode(m.encode_family(labels)?)
}

fn counter_u(
    m: &mut prometheus_client::encoding::MetricEncoder<'_>,
    labels: &Labels<'_>,
    v: u64,
) -> Result<(), std::fmt::Error> {
    ConstCounter::new(v).encode(m.encode_family(labels)?)
}

fn gauge_u(
    m: &mut prometheus_client::encoding::MetricEncoder<'_>,
    labels: &Labels<'_>,
    v: u64,
) -> Result<(), std::fmt::Error> {
    ConstGauge::new(v as i64).encode(m.encode_family(labels)?)
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

/// Writes the snapshot's metric families.
pub fn encode(s: &Snapshot, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let node = s.node.as_str();
    let nl: Labels<'_> = vec![("node", node)];
    let rows: Vec<(Labels<'_>, &ProcessRow)> = s
        .rows
        .iter()
        .map(|r| (process_labels(node, &r.labels), r))
        .collect();
    type Pick = fn(&CopyTotals) -> f64;
    let per_copy: [(&'static str, &str, Pick, bool); 4] = [
        ("pinwise_transfers", "Host<->device copies, by process, direction and host memory kind.", |t| t.transfers as f64, true),
        ("pinwise_transfer_bytes", "Bytes copied, by process, direction and host memory kind.", |t| t.bytes as f64, true),
        ("pinwise_transfer_estimated_seconds", "Estimated time of the copies (pinwise's cost model; unknown memory costed as pageable).", |t| t.est_seconds, false),
        ("pinwise_pinning_saving_estimated_seconds", "Estimated time pinning the pageable memory copied would have saved (cost model).", |t| t.saving_seconds, false),
    ];
    for (name, help, pick, integral) in per_copy {
        family(&mut encoder, name, help, MetricType::Counter, |m| {
            for (base, row) in &rows {
                for (l, t) in cells(base, &row.copies) {
                    if integral {
                        counter_u(m, &l, pick(t) as u64)?;
                    } else {
                        counter_f(m, &l, pick(t))?;
                    }
                }
            }
            Ok(())
        })?;
        let node_name = match name {
            "pinwise_transfers" => "pinwise_node_transfers",
            "pinwise_transfer_bytes" => "pinwise_node_transfer_bytes",
            "pinwise_transfer_estimated_seconds" => "pinwise_node_transfer_estimated_seconds",
            _ => "pinwise_node_pinning_saving_estimated_seconds",
        };
        family(
            &mut encoder,
            node_name,
            &format!("{help} Node total, evicted processes included."),
            MetricType::Counter,
            |m| {
                for (l, t) in cells(&nl, &s.totals.copies) {
                    if integral {
                        counter_u(m, &l, pick(t) as u64)?;
                    } else {
                        counter_f(m, &l, pick(t))?;
                    }
                }
                Ok(())
            },
        )?;
    }
    family(&mut encoder, "pinwise_pinned_bytes", "Page-locked host memory held, by process and kind (pinned: CUDA pinned allocations; registered: cuMemHostRegister).", MetricType::Gauge, |m| {
        for (base, row) in &rows {
            for (kind, v) in [("pinned", row.pinned_bytes), ("registered", row.registered_bytes)] {
                let mut l = base.clone();
                l.push(("host_kind", kind));
                gauge_u(m, &l, v)?;
            }
        }
        Ok(())
    })?;
    family(&mut encoder, "pinwise_pinned_idle_bytes", "Page-locked host memory held with no copy to or from it for the idle time (--idle-after): pinned for nothing, lately.", MetricType::Gauge, |m| {
        for (base, row) in &rows {
            gauge_u(m, base, row.idle_bytes)?;
        }
        Ok(())
    })?;
    family(
        &mut encoder,
        "pinwise_processes",
        "Processes with a summary: live, and exited but still held.",
        MetricType::Gauge,
        |m| {
            for (state, v) in [
                ("live", s.processes_live),
                ("exited", s.processes_exited_held),
            ] {
                let mut l = nl.clone();
                l.push(("state", state));
                gauge_u(m, &l, v)?;
            }
            Ok(())
        },
    )?;
    let t = &s.totals;
    let node_counters: [(&'static str, &str, u64); 9] = [
        ("pinwise_processes_seen", "CUDA processes followed since the agent started.", t.processes_seen),
        ("pinwise_processes_evicted", "Process summaries removed (exited past the retention, or the table was full).", t.processes_evicted),
        ("pinwise_processes_untracked", "Processes that got no summary because the table was full of live ones (counted in the node totals only).", t.untracked_processes),
        ("pinwise_events_filtered", "Events of processes the filters exclude.", t.events_filtered),
        ("pinwise_ringbuf_drops", "Events lost because the BPF ring buffer was full (counted in BPF; never waited for).", s.ringbuf_drops),
        ("pinwise_tracer_records", "Ring-buffer records read.", s.records),
        ("pinwise_tracer_decode_errors", "Ring-buffer records that could not be decoded.", s.decode_errors),
        ("pinwise_tracer_tgid_map_full", "Processes the BPF side could not trace (its traced-process map was full).", s.tgid_map_full),
        ("pinwise_agent_cpu_seconds", "CPU time of the agent's process (user + system).", 0),
    ];
    for (name, help, v) in node_counters {
        family(&mut encoder, name, help, MetricType::Counter, |m| {
            if name == "pinwise_agent_cpu_seconds" {
                counter_f(m, &nl, s.agent_cpu_seconds)
            } else {
                counter_u(m, &nl, v)
            }
        })?;
    }
    let node_gauges: [(&'static str, &str, u64); 3] = [
        ("pinwise_series_aggregated_processes", "Processes summed into the pid=\"other\" series (the cardinality cap, --max-series-processes).", s.aggregated_processes),
        ("pinwise_tracer_uprobes", "Uprobes attached.", s.uprobes),
        ("pinwise_agent_resident_memory_bytes", "Resident memory of the agent's process.", s.agent_rss_bytes),
    ];
    for (name, help, v) in node_gauges {
        family(&mut encoder, name, help, MetricType::Gauge, |m| {
            gauge_u(m, &nl, v)
        })?;
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
}
