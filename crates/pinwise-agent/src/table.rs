//! The process table: one [`ProcessSummary`] per traced process, filters, and the
//! memory cap.
//!
//! # Memory cap and eviction
//!
//! The table holds at most [`TableConfig::max_processes`] processes. A process that
//! exits stays for [`TableConfig::exited_retention`] (so that scrapes see its final
//! numbers), then its copies are folded into the node totals and it is removed. When the
//! table is full, the process that exited first is evicted early; when every process in
//! it is alive, a new process gets no summary of its own: its copies go to the node totals
//! only (counted in [`NodeTotals::untracked_processes`]). Each summary has a fixed size
//! plus at most [`crate::process::MAX_RANGES_PER_PROCESS`] pinned ranges and, when copies
//! carry fingerprints (`--fingerprint`), at most
//! [`crate::process::REDUNDANCY_ENTRIES_PER_PROCESS`] entries in each of two redundancy
//! tables (about 1 MB at most), so the table's memory is bounded by `max_processes` times
//! that.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use pinwise_core::{CostModel, Event};

use crate::cgroup::{self, CgroupInfo};
use crate::pods::PodResolver;
use crate::process::{
    merge_redundant, merge_tables, CopyTable, PodName, ProcessSummary, RedundantTable,
};

/// Which processes the agent follows (all when every list is empty). Filters apply in the
/// agent: a process they exclude is still traced by BPF from its first CUDA call (its probe
/// hits cost what they cost), and its events are dropped and counted
/// (`pinwise_events_filtered_total`).
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only these PIDs (and no others) when not empty.
    pub pids: Vec<u32>,
    /// Only processes whose command name (`/proc/PID/comm`) is one of these.
    pub comms: Vec<String>,
    /// Only processes whose cgroup path contains one of these strings.
    pub cgroups: Vec<String>,
    /// Only processes whose container id starts with one of these (12 or 64 hex digits).
    pub containers: Vec<String>,
}

impl Filter {
    /// Whether a process with this PID, command name and cgroup is followed.
    pub fn matches(&self, pid: u32, comm: &str, cgroup: &CgroupInfo) -> bool {
        (self.pids.is_empty() || self.pids.contains(&pid))
            && (self.comms.is_empty() || self.comms.iter().any(|c| c == comm))
            && (self.cgroups.is_empty()
                || self
                    .cgroups
                    .iter()
                    .any(|c| cgroup.path.contains(c.as_str())))
            && (self.containers.is_empty()
                || cgroup
                    .container_id
                    .as_deref()
                    .is_some_and(|id| self.containers.iter().any(|c| id.starts_with(c.as_str()))))
    }
}

/// Settings of the table.
#[derive(Debug, Clone)]
pub struct TableConfig {
    /// Most processes with a summary (live and recently exited).
    pub max_processes: usize,
    /// How long an exited process's summary stays.
    pub exited_retention: Duration,
    /// Which processes are followed.
    pub filter: Filter,
}

impl Default for TableConfig {
    fn default() -> Self {
        TableConfig {
            max_processes: 4096,
            exited_retention: Duration::from_secs(300),
            filter: Filter::default(),
        }
    }
}

/// Totals over every process ever followed (evicted ones included): monotonic.
#[derive(Debug, Clone, Default)]
pub struct NodeTotals {
    /// Copies by direction and host kind.
    pub copies: CopyTable,
    /// Processes followed so far.
    pub processes_seen: u64,
    /// Processes that exited so far.
    pub processes_exited: u64,
    /// Processes whose summaries were removed.
    pub processes_evicted: u64,
    /// Processes that got no summary (the table was full of live processes).
    pub untracked_processes: u64,
    /// Events of processes the filter excludes (dropped by the agent).
    pub events_filtered: u64,
    /// Fingerprinted and redundant uploads (`[0]`) and downloads (`[1]`).
    pub redundant: RedundantTable,
}

/// What the agent knows about a PID.
#[derive(Debug)]
enum Entry {
    Followed(Box<ProcessSummary>),
    /// Excluded by the filter (remembered so that /proc is read once per process).
    Excluded {
        exited_ns: Option<u64>,
    },
    /// No room: its copies go to the node totals only.
    Untracked {
        exited_ns: Option<u64>,
    },
}

/// The system calls behind the table's logic: how it learns about a process and its
/// labels. [`ProcFs`] reads a proc tree (the real `/proc`, or a fake tree in tests); tests
/// of enrolment, eviction and labels may also replace it.
pub trait ProcessProbe: Send + std::fmt::Debug {
    /// `(comm, cgroup, started before the agent attached)`; `None` when the process is gone.
    fn describe(&mut self, pid: u32) -> Option<(String, CgroupInfo, bool)>;
    /// The path of the cgroup v2 with this id, if it can be found.
    fn cgroup_path(&mut self, _id: u64) -> Option<String> {
        None
    }
    /// The GPU minor numbers of the device files `pid` has open now ([`crate::gpus`]);
    /// `None` when that cannot be read.
    fn gpus(&mut self, _pid: u32) -> Option<Vec<u32>> {
        None
    }
    /// The namespace and name of the pod with this UID ([`crate::pods`]).
    fn pod(&mut self, _uid: &str) -> Option<PodName> {
        None
    }
}

/// Reads `<proc>/PID/{comm,cgroup,stat,fd}` (`<proc>` is `/proc` on a node), finds cgroup
/// paths by id in the cgroup v2 hierarchy and pod names in the pods directory.
#[derive(Debug)]
pub struct ProcFs {
    /// The proc tree (`/proc`).
    pub proc_root: PathBuf,
    /// The agent's attach time, in clock ticks since boot (`/proc/PID/stat`'s unit).
    pub attach_ticks: u64,
    /// Cgroup ids to paths.
    pub cgroups: cgroup::CgroupResolver,
    /// Pod UIDs to namespaces and names.
    pub pods: PodResolver,
}

impl ProcFs {
    /// The node's `/proc`, attached now, with these cgroup and pods directories.
    pub fn node(cgroupfs: Option<PathBuf>, pods_dir: Option<PathBuf>) -> Self {
        ProcFs {
            proc_root: PathBuf::from("/proc"),
            attach_ticks: ProcFs::now_ticks(),
            cgroups: cgroup::CgroupResolver::new(cgroupfs),
            pods: PodResolver::new(pods_dir),
        }
    }

    /// Now, in clock ticks since boot.
    pub fn now_ticks() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes the struct it is given, which lives on this stack;
        // sysconf has no preconditions.
        let (ticks_per_s, ok) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK).max(1) as u64,
                libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) == 0,
            )
        };
        if !ok {
            return 0;
        }
        ts.tv_sec as u64 * ticks_per_s + ts.tv_nsec as u64 * ticks_per_s / 1_000_000_000
    }

    fn read(&self, pid: u32, file: &str) -> Option<String> {
        std::fs::read_to_string(self.proc_root.join(pid.to_string()).join(file)).ok()
    }
}

/// Field 22 of `/proc/PID/stat` (start time, clock ticks after boot); the command name
/// in parentheses may hold spaces and parentheses, so fields are counted after the last `)`.
pub fn parse_stat_starttime(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

impl ProcessProbe for ProcFs {
    fn cgroup_path(&mut self, id: u64) -> Option<String> {
        self.cgroups.path(id)
    }

    fn describe(&mut self, pid: u32) -> Option<(String, CgroupInfo, bool)> {
        let stat = self.read(pid, "stat")?;
        let start = parse_stat_starttime(&stat)?;
        let comm = self
            .read(pid, "comm")
            .map(|c| c.trim_end().to_string())
            .unwrap_or_else(|| "?".into());
        let cgroup = self
            .read(pid, "cgroup")
            .map(|t| cgroup::parse_proc_cgroup(&t))
            .unwrap_or_default();
        Some((comm, cgroup, start <= self.attach_ticks))
    }

    fn gpus(&mut self, pid: u32) -> Option<Vec<u32>> {
        crate::gpus::open_gpus(&self.proc_root.join(pid.to_string()).join("fd"))
    }

    fn pod(&mut self, uid: &str) -> Option<PodName> {
        self.pods.resolve(uid)
    }
}

/// The table.
#[derive(Debug)]
pub struct ProcessTable {
    config: TableConfig,
    cost: CostModel,
    probe: Box<dyn ProcessProbe>,
    entries: HashMap<u32, Entry>,
    totals: NodeTotals,
}

impl ProcessTable {
    /// An empty table.
    pub fn new(config: TableConfig, cost: CostModel, probe: Box<dyn ProcessProbe>) -> Self {
        ProcessTable {
            config,
            cost,
            probe,
            entries: HashMap::new(),
            totals: NodeTotals::default(),
        }
    }

    /// Node totals (evicted processes included).
    pub fn totals(&self) -> &NodeTotals {
        &self.totals
    }

    /// The summaries held now.
    pub fn summaries(&self) -> impl Iterator<Item = &ProcessSummary> {
        self.entries.values().filter_map(|e| match e {
            Entry::Followed(s) => Some(&**s),
            _ => None,
        })
    }

    /// The command name of `pid` if the table follows it (has a summary of it).
    pub fn followed_comm(&self, pid: u32) -> Option<&str> {
        match self.entries.get(&pid) {
            Some(Entry::Followed(s)) => Some(&s.comm),
            _ => None,
        }
    }

    /// Entries of every kind (followed, excluded, untracked).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Takes a batch of events.
    pub fn ingest(&mut self, events: &[Event], now_ns: u64) {
        for ev in events {
            self.ingest_one(ev, now_ns);
        }
    }

    /// Forgets the entry of `pid` if that process exited: an event or an enrollment under
    /// its PID is a new process (PIDs are reused). Its copies stay in the node totals.
    fn forget_if_exited(&mut self, pid: u32) {
        let exited = match self.entries.get(&pid) {
            Some(Entry::Followed(s)) => s.exited_ns.is_some(),
            Some(Entry::Excluded { exited_ns } | Entry::Untracked { exited_ns }) => {
                exited_ns.is_some()
            }
            None => false,
        };
        if exited {
            if let Some(Entry::Followed(_)) = self.entries.remove(&pid) {
                self.totals.processes_evicted += 1;
            }
        }
    }

    fn ingest_one(&mut self, ev: &Event, now_ns: u64) {
        self.forget_if_exited(ev.pid);
        if !self.entries.contains_key(&ev.pid) {
            self.admit(ev.pid, now_ns);
        }
        let Some(entry) = self.entries.get_mut(&ev.pid) else {
            return;
        };
        match entry {
            Entry::Followed(s) => {
                if let Some(d) = s.ingest(ev, &self.cost) {
                    self.totals.copies[d.direction][d.kind as usize].merge(&d.totals);
                    merge_redundant(&mut self.totals.redundant, &d.redundant);
                }
            }
            Entry::Excluded { .. } => self.totals.events_filtered += 1,
            Entry::Untracked { .. } => {
                // Counted in the node totals, classified as well as a summary-less process
                // can be: without its ranges, a copy's host kind is unknown.
                let mut scratch =
                    ProcessSummary::new(ev.pid, String::new(), CgroupInfo::default(), true);
                scratch.ingest(ev, &self.cost);
                merge_tables(&mut self.totals.copies, &scratch.copies);
            }
        }
    }

    fn admit(&mut self, pid: u32, now_ns: u64) {
        let (comm, cgroup, predates) = self
            .probe
            .describe(pid)
            .unwrap_or_else(|| ("?".into(), CgroupInfo::default(), false));
        self.admit_as(pid, comm, cgroup, predates, now_ns);
    }

    /// Node-wide mode: process `pid` joined the traced set at its first CUDA call, in
    /// cgroup `cgroup_id`, named `comm` (both read in the kernel then: the process may be
    /// gone by now). Whether it started before the agent is read from /proc (taken as not
    /// when it is gone).
    pub fn enrolled(&mut self, pid: u32, cgroup_id: u64, comm: &str, now_ns: u64) {
        self.forget_if_exited(pid);
        if self.entries.contains_key(&pid) {
            return;
        }
        let described = self.probe.describe(pid);
        let cgroup = match self.probe.cgroup_path(cgroup_id) {
            Some(path) => cgroup::parse_path(&path),
            None => described.as_ref().map(|d| d.1.clone()).unwrap_or_default(),
        };
        let predates = described.is_some_and(|d| d.2);
        self.admit_as(pid, comm.to_string(), cgroup, predates, now_ns);
    }

    /// Followed process `parent` forked `child`: the child is followed (or excluded) as its
    /// parent is, with its parent's name, cgroup and pinned ranges (its address space is a
    /// copy), and no copies yet.
    pub fn forked(&mut self, parent: u32, child: u32, now_ns: u64) {
        self.forget_if_exited(child);
        let entry = match self.entries.get(&parent) {
            Some(Entry::Followed(p)) => Some(Entry::Followed(Box::new(p.forked_child(child)))),
            Some(Entry::Excluded { .. }) => Some(Entry::Excluded { exited_ns: None }),
            _ => None,
        };
        match entry {
            Some(Entry::Followed(s)) => {
                self.totals.processes_seen += 1;
                if self.followed_count() >= self.config.max_processes
                    && !self.evict_one(now_ns, true)
                {
                    self.totals.untracked_processes += 1;
                    self.entries
                        .insert(child, Entry::Untracked { exited_ns: None });
                } else {
                    self.entries.insert(child, Entry::Followed(s));
                }
            }
            Some(e) => {
                self.entries.insert(child, e);
            }
            None => {}
        }
    }

    fn admit_as(
        &mut self,
        pid: u32,
        comm: String,
        cgroup: CgroupInfo,
        predates: bool,
        now_ns: u64,
    ) {
        if !self.config.filter.matches(pid, &comm, &cgroup) {
            self.entries
                .insert(pid, Entry::Excluded { exited_ns: None });
            return;
        }
        self.totals.processes_seen += 1;
        if self.followed_count() >= self.config.max_processes && !self.evict_one(now_ns, true) {
            self.totals.untracked_processes += 1;
            self.entries
                .insert(pid, Entry::Untracked { exited_ns: None });
            return;
        }
        tracing::info!("following PID {pid} ({comm}, cgroup {})", cgroup.path);
        let mut summary = ProcessSummary::new(pid, comm, cgroup, predates);
        if let Some(uid) = &summary.cgroup.pod_uid {
            summary.pod = self.probe.pod(uid);
        }
        self.entries.insert(pid, Entry::Followed(Box::new(summary)));
    }

    fn followed_count(&self) -> usize {
        self.entries
            .values()
            .filter(|e| matches!(e, Entry::Followed(_)))
            .count()
    }

    /// Evicts the exited process that exited first (any, with `early`; else only those
    /// past the retention). Returns whether one was evicted.
    fn evict_one(&mut self, now_ns: u64, early: bool) -> bool {
        let retention = self.config.exited_retention.as_nanos() as u64;
        let oldest = self
            .entries
            .iter()
            .filter_map(|(pid, e)| match e {
                Entry::Followed(s) => s.exited_ns.map(|t| (t, *pid)),
                _ => None,
            })
            .filter(|(t, _)| early || now_ns.saturating_sub(*t) >= retention)
            .min();
        match oldest {
            Some((_, pid)) => {
                self.entries.remove(&pid);
                self.totals.processes_evicted += 1;
                true
            }
            None => false,
        }
    }

    /// Process `pid` exited at `ts_ns`.
    pub fn exited(&mut self, pid: u32, ts_ns: u64) {
        match self.entries.get_mut(&pid) {
            Some(Entry::Followed(s)) => {
                s.exited_ns = Some(ts_ns);
                self.totals.processes_exited += 1;
            }
            Some(Entry::Excluded { exited_ns }) | Some(Entry::Untracked { exited_ns }) => {
                *exited_ns = Some(ts_ns)
            }
            None => {}
        }
    }

    /// Process `pid` ran a new program: its memory (and pinned ranges) is gone, its name
    /// changed, and it may match the filter differently now. It is admitted again; the
    /// copies counted so far stay counted in its new summary.
    pub fn exec(&mut self, pid: u32, now_ns: u64) {
        let Some(old) = self.entries.remove(&pid) else {
            return;
        };
        match (self.probe.describe(pid), &old) {
            (Some((comm, cgroup, predates)), _) => {
                self.admit_as(pid, comm, cgroup, predates, now_ns)
            }
            // Gone already: its name and cgroup as they were.
            (None, Entry::Followed(s)) => {
                let (comm, cgroup, predates) = (s.comm.clone(), s.cgroup.clone(), s.predates_agent);
                self.admit_as(pid, comm, cgroup, predates, now_ns)
            }
            (None, _) => self.admit(pid, now_ns),
        }
        if let (Entry::Followed(old), Some(Entry::Followed(new))) =
            (old, self.entries.get_mut(&pid))
        {
            new.carry_over(&old);
        }
    }

    /// Looks up the labels that can change or appear after a process is admitted, for each
    /// live followed process last looked at `every` ago or more: the GPUs whose device
    /// files it has open (added to those seen before: the label only grows), and its pod's
    /// namespace and name while unknown. Returns the processes looked at.
    pub fn refresh_labels(&mut self, now_ns: u64, every: Duration) -> usize {
        let every = every.as_nanos() as u64;
        let mut looked = 0;
        for entry in self.entries.values_mut() {
            let Entry::Followed(s) = entry else {
                continue;
            };
            if s.exited_ns.is_some()
                || (s.labels_checked_ns != 0 && now_ns.saturating_sub(s.labels_checked_ns) < every)
            {
                continue;
            }
            s.labels_checked_ns = now_ns.max(1);
            looked += 1;
            if let Some(gpus) = self.probe.gpus(s.pid) {
                s.add_gpus(&gpus);
            }
            if s.pod.is_none() {
                if let Some(uid) = &s.cgroup.pod_uid {
                    s.pod = self.probe.pod(uid);
                }
            }
        }
        looked
    }

    /// The probe (for the agent's rescan of driver libraries).
    pub fn probe_mut(&mut self) -> &mut dyn ProcessProbe {
        &mut *self.probe
    }

    /// Removes the summaries of processes that exited longer ago than the retention,
    /// and the other entries of exited processes. Returns the summaries removed.
    pub fn expire(&mut self, now_ns: u64) -> Vec<ProcessSummary> {
        let retention = self.config.exited_retention.as_nanos() as u64;
        let gone: Vec<u32> = self
            .entries
            .iter()
            .filter(|(_, e)| {
                let t = match e {
                    Entry::Followed(s) => s.exited_ns,
                    Entry::Excluded { exited_ns } | Entry::Untracked { exited_ns } => *exited_ns,
                };
                t.is_some_and(|t| now_ns.saturating_sub(t) >= retention)
            })
            .map(|(pid, _)| *pid)
            .collect();
        let mut removed = Vec::new();
        for pid in gone {
            if let Some(Entry::Followed(s)) = self.entries.remove(&pid) {
                self.totals.processes_evicted += 1;
                removed.push(*s);
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::HostKind;
    use pinwise_core::{Direction, EventKind, HostState, ProbeKind};

    #[derive(Debug)]
    struct FakeProbe;
    impl ProcessProbe for FakeProbe {
        fn describe(&mut self, pid: u32) -> Option<(String, CgroupInfo, bool)> {
            let comm = if pid.is_multiple_of(2) { "even" } else { "odd" };
            Some((
                comm.into(),
                cgroup::parse_path(&format!("/test/g{}", pid % 3)),
                false,
            ))
        }
    }

    fn copy(pid: u32, bytes: u64) -> Event {
        Event::new(
            1,
            pid,
            pid,
            ProbeKind::Uprobe,
            EventKind::Transfer {
                direction: Direction::HtoD,
                host: 0x1000,
                device: 0x2000,
                bytes,
                is_async: false,
                stream: 0,
                host_state: HostState::Unknown,
            },
        )
    }

    fn table(max: usize, filter: Filter) -> ProcessTable {
        ProcessTable::new(
            TableConfig {
                max_processes: max,
                exited_retention: Duration::from_secs(10),
                filter,
            },
            CostModel::builtin(),
            Box::new(FakeProbe),
        )
    }

    const S: u64 = 1_000_000_000;

    #[test]
    fn filters_drop_other_processes_events() {
        let mut t = table(
            10,
            Filter {
                comms: vec!["even".into()],
                ..Filter::default()
            },
        );
        t.ingest(&[copy(2, 10), copy(3, 20), copy(4, 30), copy(3, 5)], 0);
        let mut pids: Vec<u32> = t.summaries().map(|s| s.pid).collect();
        pids.sort();
        assert_eq!(pids, [2, 4]);
        assert_eq!(t.totals().events_filtered, 2);
        assert_eq!(t.totals().copies[0][HostKind::Pageable as usize].bytes, 40);

        let f = Filter {
            cgroups: vec!["/test/g1".into()],
            pids: vec![4, 7],
            ..Filter::default()
        };
        assert!(f.matches(4, "x", &cgroup::parse_path("/test/g1")));
        assert!(!f.matches(4, "x", &cgroup::parse_path("/test/g2")));
        assert!(!f.matches(5, "x", &cgroup::parse_path("/test/g1")));
    }

    #[test]
    fn exited_processes_are_kept_for_the_retention_then_folded_into_the_totals() {
        let mut t = table(10, Filter::default());
        t.ingest(&[copy(1, 10), copy(2, 20)], 0);
        t.exited(1, 5 * S);
        assert!(t.expire(14 * S).is_empty(), "9 s after its exit: kept");
        assert_eq!(t.summaries().count(), 2);
        let gone = t.expire(15 * S);
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].pid, 1);
        assert_eq!(t.summaries().count(), 1);
        let totals = t.totals();
        assert_eq!(totals.processes_evicted, 1);
        assert_eq!(totals.processes_exited, 1);
        assert_eq!(totals.copies[0][HostKind::Pageable as usize].transfers, 2);
        assert_eq!(totals.copies[0][HostKind::Pageable as usize].bytes, 30);
    }

    #[test]
    fn a_full_table_evicts_the_first_exited_and_else_counts_without_a_summary() {
        let mut t = table(2, Filter::default());
        t.ingest(&[copy(1, 1), copy(2, 2)], 0);
        t.exited(2, 1);
        t.exited(1, 2);
        // Full: PID 3 takes the place of PID 2, which exited first.
        t.ingest(&[copy(3, 3)], 3);
        let mut pids: Vec<u32> = t.summaries().map(|s| s.pid).collect();
        pids.sort();
        assert_eq!(pids, [1, 3]);
        // PID 4: PID 1 goes. PID 5: both live, no room.
        t.ingest(&[copy(4, 4)], 4);
        t.ingest(&[copy(5, 5), copy(5, 5)], 5);
        let mut pids: Vec<u32> = t.summaries().map(|s| s.pid).collect();
        pids.sort();
        assert_eq!(pids, [3, 4]);
        assert_eq!(t.totals().untracked_processes, 1);
        assert_eq!(t.totals().processes_evicted, 2);
        // Its copies are in the node totals (kind unknown: no ranges known).
        assert_eq!(t.totals().copies[0][HostKind::Unknown as usize].bytes, 10);
        assert_eq!(t.totals().copies[0][HostKind::Pageable as usize].bytes, 10);
        assert!(t.len() <= 3);
    }

    #[test]
    fn a_reused_pid_is_a_new_process() {
        let mut t = table(4, Filter::default());
        t.ingest(&[copy(1, 10)], 0);
        t.exited(1, 1);
        t.ingest(&[copy(1, 5)], 2);
        let s: Vec<_> = t.summaries().collect();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].total_bytes(), 5, "the new process's copies only");
        assert_eq!(s[0].exited_ns, None);
        assert_eq!(t.totals().processes_evicted, 1);
        assert_eq!(t.totals().copies[0][HostKind::Pageable as usize].bytes, 15);
    }

    #[test]
    fn exec_keeps_the_copies_counted() {
        let mut t = table(4, Filter::default());
        t.ingest(&[copy(1, 10)], 0);
        t.exec(1, 1);
        t.ingest(&[copy(1, 5)], 2);
        let s = t.summaries().next().unwrap();
        assert_eq!(s.copies[0][HostKind::Pageable as usize].bytes, 15);
    }

    #[test]
    fn enrollment_names_the_process_and_a_fork_inherits_from_its_parent() {
        let mut t = table(
            10,
            Filter {
                cgroups: vec!["/kube".into()],
                ..Filter::default()
            },
        );
        // FakeProbe knows no cgroup ids: the cgroup comes from "/proc" (FakeProbe: /test/gN)
        // and fails the filter...
        t.enrolled(3, 99, "trainer", 0);
        t.ingest(&[copy(3, 10)], 0);
        assert_eq!(t.summaries().count(), 0);
        assert_eq!(t.totals().events_filtered, 1);
        // ...and a fork of an excluded process is excluded.
        t.forked(3, 30, 0);
        t.ingest(&[copy(30, 10)], 0);
        assert_eq!(t.totals().events_filtered, 2);

        let mut t = table(10, Filter::default());
        t.enrolled(5, 99, "trainer", 0);
        t.ingest(&[copy(5, 10)], 0);
        t.forked(5, 6, 0);
        t.ingest(&[copy(6, 7)], 0);
        let mut rows: Vec<(u32, String, u64)> = t
            .summaries()
            .map(|s| (s.pid, s.comm.clone(), s.total_bytes()))
            .collect();
        rows.sort();
        // The comm the kernel gave at enrollment, not /proc's; the child's own copies only.
        assert_eq!(rows, [(5, "trainer".into(), 10), (6, "trainer".into(), 7)]);
    }

    #[test]
    fn stat_start_time_is_read_after_the_command_name() {
        let stat = "1234 (a) b (c)) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 \
                    1000 100";
        assert_eq!(parse_stat_starttime(stat), Some(98765));
        assert_eq!(parse_stat_starttime("garbage"), None);
    }
}
