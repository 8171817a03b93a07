//! Per-process summaries, built from the tracer's events: counts, bytes and estimated
//! time of copies by direction and host memory kind, and the pinned memory held. Each
//! summary has a fixed size plus at most [`MAX_RANGES_PER_PROCESS`] pinned ranges: no
//! event lists are kept, and, with fingerprints, at most
//! [`REDUNDANCY_ENTRIES_PER_PROCESS`] entries in each of its two redundancy tables.

use std::collections::BTreeMap;

use pinwise_core::fingerprint::{CopyObservation, RedundancyTracker};
use pinwise_core::{CostModel, Direction, Event, EventKind, HostMemKind};

use crate::cgroup::CgroupInfo;

/// Pinned or registered ranges remembered per process. Past this, new ranges are not
/// remembered (counted in [`ProcessSummary::ranges_overflowed`]) and copies of them are
/// counted with host kind `unknown`.
pub const MAX_RANGES_PER_PROCESS: usize = 16_384;

/// What kind of host memory the host side of a copy was, as the agent knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HostKind {
    /// Not in any pinned or registered range the agent saw being made, in a process traced
    /// since before its first CUDA call.
    Pageable,
    /// In a range allocated pinned by CUDA (`cuMemAllocHost`, `cuMemHostAlloc`, ...).
    Pinned,
    /// In a range page-locked with `cuMemHostRegister`.
    Registered,
    /// The agent cannot tell: the process was running before the agent attached (what it
    /// pinned then was not seen), or its range table was full.
    Unknown,
    /// No host memory involved (device-to-device copies).
    None,
}

impl HostKind {
    /// All kinds, in label order.
    pub const ALL: [HostKind; 5] = [
        HostKind::Pageable,
        HostKind::Pinned,
        HostKind::Registered,
        HostKind::Unknown,
        HostKind::None,
    ];

    /// The label value: `pageable`, `pinned`, `registered`, `unknown`, `none`.
    pub const fn as_str(self) -> &'static str {
        match self {
            HostKind::Pageable => "pageable",
            HostKind::Pinned => "pinned",
            HostKind::Registered => "registered",
            HostKind::Unknown => "unknown",
            HostKind::None => "none",
        }
    }

    const fn index(self) -> usize {
        self as usize
    }
}

/// Copies of one direction and host kind.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CopyTotals {
    /// Copies.
    pub transfers: u64,
    /// Bytes copied.
    pub bytes: u64,
    /// Their estimated time, seconds (the cost model; `unknown` is costed as pageable).
    pub est_seconds: f64,
    /// Estimated time pinning would have saved, seconds (pageable copies only).
    pub saving_seconds: f64,
}

impl CopyTotals {
    /// Adds `other` to these totals.
    pub fn merge(&mut self, other: &CopyTotals) {
        self.transfers += other.transfers;
        self.bytes += other.bytes;
        self.est_seconds += other.est_seconds;
        self.saving_seconds += other.saving_seconds;
    }
}

/// Copies by direction ([`Direction::index`]) and host kind.
pub type CopyTable = [[CopyTotals; 5]; 4];

/// Adds table `b` into `a`.
pub fn merge_tables(a: &mut CopyTable, b: &CopyTable) {
    for (ra, rb) in a.iter_mut().zip(b) {
        for (x, y) in ra.iter_mut().zip(rb) {
            x.merge(y);
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct PinnedRange {
    end: u64,
    kind: HostKind,
    last_copy_ns: u64,
}

/// Most entries each of a process's redundancy tables holds (device ranges; host ranges):
/// bounds the memory fingerprints cost per process (about 100 bytes an entry, two tables).
pub const REDUNDANCY_ENTRIES_PER_PROCESS: usize = 4096;

/// Fingerprinted copies of one direction and those found redundant (see
/// [`ProcessSummary::ingest`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RedundantTotals {
    /// Copies that carried a fingerprint.
    pub fingerprinted: u64,
    /// Of those, redundant. An upload: the device range already held these bytes, or the
    /// same host bytes went to the same device range before with the same fingerprint. A
    /// download: it brought the same bytes as the previous download of that device range
    /// into the same host bytes.
    pub transfers: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Their estimated time (cost model), seconds: the time a fix would save.
    pub est_seconds: f64,
}

impl RedundantTotals {
    /// Adds `other` to these totals.
    pub fn merge(&mut self, other: &RedundantTotals) {
        self.fingerprinted += other.fingerprinted;
        self.transfers += other.transfers;
        self.bytes += other.bytes;
        self.est_seconds += other.est_seconds;
    }
}

/// Redundancy totals of uploads (`[0]`, HtoD) and downloads (`[1]`, DtoH).
pub type RedundantTable = [RedundantTotals; 2];

/// The directions of a [`RedundantTable`], in its order.
pub const REDUNDANT_DIRECTIONS: [Direction; 2] = [Direction::HtoD, Direction::DtoH];

/// Adds table `b` into `a`.
pub fn merge_redundant(a: &mut RedundantTable, b: &RedundantTable) {
    for (x, y) in a.iter_mut().zip(b) {
        x.merge(y);
    }
}

/// What one copy added to a summary ([`ProcessSummary::ingest`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CopyDelta {
    /// [`Direction::index`] of the copy.
    pub direction: usize,
    /// Its host memory kind.
    pub kind: HostKind,
    /// What it added to that cell.
    pub totals: CopyTotals,
    /// What it added to the redundancy totals.
    pub redundant: RedundantTable,
}

/// Kubernetes namespace and name of a pod (see [`crate::pods`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct PodName {
    /// The namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
}

/// One process as the agent summarizes it.
#[derive(Debug, Clone)]
pub struct ProcessSummary {
    /// Process id.
    pub pid: u32,
    /// Its command name (`/proc/PID/comm`) when it could be read, else `?`.
    pub comm: String,
    /// Its cgroup and what that says.
    pub cgroup: CgroupInfo,
    /// The process existed before the agent attached: host memory not seen being pinned
    /// is `unknown`, not `pageable`.
    pub predates_agent: bool,
    /// Copies by direction and host kind.
    pub copies: CopyTable,
    /// Ranges the table had no room for.
    pub ranges_overflowed: u64,
    /// CLOCK_MONOTONIC ns of its first and latest event.
    pub first_ns: u64,
    /// Latest event.
    pub last_ns: u64,
    /// When it exited (CLOCK_MONOTONIC ns), if it did.
    pub exited_ns: Option<u64>,
    /// GPUs whose device files (`/dev/nvidia<N>`) it has had open: the minor numbers N,
    /// sorted (see [`crate::gpus`]); empty until seen.
    pub gpus: Vec<u32>,
    /// Its pod's namespace and name, when its cgroup names a pod and the pods directory
    /// knows it.
    pub pod: Option<PodName>,
    /// Redundant uploads and downloads found by fingerprints (tracer started with
    /// fingerprints only).
    pub redundant: RedundantTable,
    /// When its labels (GPUs, pod) were last looked up (CLOCK_MONOTONIC ns; 0: never).
    pub labels_checked_ns: u64,
    ranges: BTreeMap<u64, PinnedRange>,
    redundancy: Option<Box<RedundancyTracker>>,
}

impl ProcessSummary {
    /// A new summary.
    pub fn new(pid: u32, comm: String, cgroup: CgroupInfo, predates_agent: bool) -> Self {
        ProcessSummary {
            pid,
            comm,
            cgroup,
            predates_agent,
            copies: [[CopyTotals::default(); 5]; 4],
            ranges_overflowed: 0,
            first_ns: 0,
            last_ns: 0,
            exited_ns: None,
            gpus: Vec::new(),
            pod: None,
            redundant: RedundantTable::default(),
            labels_checked_ns: 0,
            ranges: BTreeMap::new(),
            redundancy: None,
        }
    }

    /// A summary for the child `child` this process forked: its name, cgroup, labels and
    /// pinned ranges (its address space is a copy), no copies and nothing known of device
    /// contents (a child does not share its parent's CUDA context).
    pub fn forked_child(&self, child: u32) -> Self {
        let mut s = ProcessSummary::new(
            child,
            self.comm.clone(),
            self.cgroup.clone(),
            self.predates_agent,
        );
        s.ranges = self.ranges.clone();
        s.gpus = self.gpus.clone();
        s.pod = self.pod.clone();
        s
    }

    /// Keeps what `old` (this PID before it ran a new program) counted: copies, redundancy
    /// totals, first event, labels not known anew.
    pub fn carry_over(&mut self, old: &ProcessSummary) {
        merge_tables(&mut self.copies, &old.copies);
        merge_redundant(&mut self.redundant, &old.redundant);
        self.first_ns = old.first_ns;
        self.predates_agent = old.predates_agent;
        if self.gpus.is_empty() {
            self.gpus = old.gpus.clone();
        }
        if self.pod.is_none() {
            self.pod = old.pod.clone();
        }
    }

    /// Adds GPU minor numbers seen now to those seen before (kept sorted, no repeats).
    pub fn add_gpus(&mut self, gpus: &[u32]) {
        for &g in gpus {
            if let Err(at) = self.gpus.binary_search(&g) {
                self.gpus.insert(at, g);
            }
        }
    }

    /// Bytes copied, all directions and kinds.
    pub fn total_bytes(&self) -> u64 {
        self.copies.iter().flatten().map(|c| c.bytes).sum()
    }

    /// Pinned and registered bytes held now: `(pinned, registered)`.
    pub fn pinned_held(&self) -> (u64, u64) {
        let mut held = (0, 0);
        for (start, r) in &self.ranges {
            let len = r.end - start;
            match r.kind {
                HostKind::Registered => held.1 += len,
                _ => held.0 += len,
            }
        }
        held
    }

    /// Pinned or registered bytes held with no copy since `since_ns` (CLOCK_MONOTONIC):
    /// pinned for nothing, lately.
    pub fn pinned_idle(&self, since_ns: u64) -> u64 {
        self.ranges
            .iter()
            .filter(|(_, r)| r.last_copy_ns < since_ns)
            .map(|(start, r)| r.end - start)
            .sum()
    }

    /// Pinned ranges remembered.
    pub fn range_count(&self) -> usize {
        self.ranges.len()
    }

    fn range_at(&mut self, addr: u64) -> Option<&mut PinnedRange> {
        let (_, r) = self.ranges.range_mut(..=addr).next_back()?;
        (addr < r.end).then_some(r)
    }

    fn add_range(&mut self, start: u64, len: u64, kind: HostKind, ts: u64) {
        if len == 0 {
            return;
        }
        if self.ranges.len() >= MAX_RANGES_PER_PROCESS && !self.ranges.contains_key(&start) {
            self.ranges_overflowed += 1;
            return;
        }
        self.ranges.insert(
            start,
            PinnedRange {
                end: start.saturating_add(len),
                kind,
                last_copy_ns: ts,
            },
        );
    }

    /// Takes one event of this process into the summary; for a copy, returns its cell
    /// (direction index, host kind) and what it added there.
    ///
    /// A copy that carries a fingerprint (`pinwise agent --fingerprint`: uploads, and
    /// synchronous downloads) is compared by [`RedundancyTracker::observe`], the function
    /// the trace histories use, with the host address as the host key: an upload is
    /// redundant when the device range already holds these bytes or when the same host
    /// bytes went to the same device range before with the same fingerprint; a download
    /// when it fetched the same bytes as the previous download of that range into the same
    /// host bytes. A device-to-device copy makes what was known of its destination stale.
    pub fn ingest(&mut self, ev: &Event, cost: &CostModel) -> Option<CopyDelta> {
        if self.first_ns == 0 {
            self.first_ns = ev.ts_ns;
        }
        self.last_ns = self.last_ns.max(ev.ts_ns);
        match ev.kind {
            EventKind::Alloc {
                start, size, kind, ..
            } => match kind {
                HostMemKind::PinnedAlloc => self.add_range(start, size, HostKind::Pinned, ev.ts_ns),
                HostMemKind::Registered => {
                    self.add_range(start, size, HostKind::Registered, ev.ts_ns)
                }
                HostMemKind::Pageable => {}
            },
            EventKind::PinPages { start, bytes, .. } => {
                // Registration of memory already known (or a kernel-side lock): the range is
                // registered unless it is a pinned allocation already.
                if self.range_at(start).is_none() {
                    self.add_range(start, bytes, HostKind::Registered, ev.ts_ns);
                }
            }
            EventKind::Free { start } => {
                if self
                    .ranges
                    .get(&start)
                    .is_some_and(|r| r.kind == HostKind::Pinned)
                {
                    self.ranges.remove(&start);
                }
            }
            EventKind::UnpinPages { start, .. } => {
                if self
                    .ranges
                    .get(&start)
                    .is_some_and(|r| r.kind == HostKind::Registered)
                {
                    self.ranges.remove(&start);
                }
            }
            EventKind::Munmap { start, len } => {
                let end = start.saturating_add(len);
                let gone: Vec<u64> = self
                    .ranges
                    .range(start..end)
                    .filter(|(_, r)| r.end <= end)
                    .map(|(s, _)| *s)
                    .collect();
                for s in gone {
                    self.ranges.remove(&s);
                }
            }
            EventKind::Transfer {
                direction,
                host,
                device,
                bytes,
                ..
            } => {
                let kind = if direction == Direction::DtoD {
                    HostKind::None
                } else if let Some(r) = self.range_at(host) {
                    r.last_copy_ns = ev.ts_ns;
                    r.kind
                } else if self.predates_agent || self.ranges_overflowed > 0 {
                    HostKind::Unknown
                } else {
                    HostKind::Pageable
                };
                let ns = match kind {
                    HostKind::Pinned => cost.transfer_ns(direction, bytes, true),
                    HostKind::Registered => cost.transfer_ns_registered(direction, bytes),
                    HostKind::None => 0.0,
                    HostKind::Pageable | HostKind::Unknown => {
                        cost.transfer_ns(direction, bytes, false)
                    }
                };
                let saving = if kind == HostKind::Pageable {
                    cost.transfer_saving_ns(direction, bytes).max(0.0) / 1e9
                } else {
                    0.0
                };
                let delta = CopyTotals {
                    transfers: 1,
                    bytes,
                    est_seconds: ns / 1e9,
                    saving_seconds: saving,
                };
                self.copies[direction.index()][kind.index()].merge(&delta);
                let redundant = self.observe_redundancy(ev, direction, host, device, bytes, ns);
                merge_redundant(&mut self.redundant, &redundant);
                return Some(CopyDelta {
                    direction: direction.index(),
                    kind,
                    totals: delta,
                    redundant,
                });
            }
            EventKind::Mmap { .. } | EventKind::PageFault { .. } => {}
        }
        None
    }
}

impl ProcessSummary {
    fn observe_redundancy(
        &mut self,
        ev: &Event,
        direction: Direction,
        host: u64,
        device: u64,
        bytes: u64,
        est_ns: f64,
    ) -> RedundantTable {
        let mut out = RedundantTable::default();
        if direction == Direction::DtoD {
            if let Some(t) = &mut self.redundancy {
                t.invalidate_device(self.pid, device, bytes);
            }
            return out;
        }
        let Some(fingerprint) = ev.fingerprint else {
            return out;
        };
        if device == 0 || host == 0 {
            return out;
        }
        let tracker = self.redundancy.get_or_insert_with(|| {
            Box::new(RedundancyTracker::with_cap(REDUNDANCY_ENTRIES_PER_PROCESS))
        });
        let verdict = tracker.observe(&CopyObservation {
            pid: self.pid,
            record: 0,
            host_offset: host,
            device,
            bytes,
            direction,
            fingerprint,
        });
        let Some(i) = REDUNDANT_DIRECTIONS.iter().position(|&d| d == direction) else {
            return out;
        };
        out[i].fingerprinted = 1;
        if verdict.is_redundant() {
            out[i].transfers = 1;
            out[i].bytes = bytes;
            out[i].est_seconds = est_ns / 1e9;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinwise_core::ProbeKind;

    fn ev(ts: u64, kind: EventKind) -> Event {
        Event::new(ts, 7, 7, ProbeKind::Uprobe, kind)
    }

    fn copy(ts: u64, direction: Direction, host: u64, bytes: u64) -> Event {
        ev(
            ts,
            EventKind::Transfer {
                direction,
                host,
                device: 0x1000,
                bytes,
                is_async: false,
                stream: 0,
                host_state: pinwise_core::HostState::Unknown,
            },
        )
    }

    #[test]
    fn copies_are_classified_by_the_ranges_seen() {
        let cost = CostModel::builtin();
        let mut p = ProcessSummary::new(7, "w".into(), CgroupInfo::default(), false);
        p.ingest(
            &ev(
                1,
                EventKind::Alloc {
                    start: 0x10000,
                    size: 0x1000,
                    kind: HostMemKind::PinnedAlloc,
                    flags: 0,
                },
            ),
            &cost,
        );
        p.ingest(
            &ev(
                2,
                EventKind::PinPages {
                    start: 0x40000,
                    bytes: 0x2000,
                    pages: None,
                },
            ),
            &cost,
        );
        p.ingest(&copy(3, Direction::HtoD, 0x10800, 100), &cost);
        p.ingest(&copy(4, Direction::DtoH, 0x41000, 200), &cost);
        p.ingest(&copy(5, Direction::HtoD, 0x90000, 1 << 20), &cost);
        p.ingest(&copy(6, Direction::DtoD, 0, 400), &cost);
        let h = Direction::HtoD.index();
        assert_eq!(p.copies[h][HostKind::Pinned.index()].transfers, 1);
        assert_eq!(p.copies[h][HostKind::Pinned.index()].bytes, 100);
        assert_eq!(
            p.copies[Direction::DtoH.index()][HostKind::Registered.index()].bytes,
            200
        );
        let pageable = p.copies[h][HostKind::Pageable.index()];
        assert_eq!(pageable.bytes, 1 << 20);
        assert!(pageable.est_seconds > 0.0 && pageable.saving_seconds > 0.0);
        assert_eq!(p.copies[h][HostKind::Pinned.index()].saving_seconds, 0.0);
        assert_eq!(
            p.copies[Direction::DtoD.index()][HostKind::None.index()].bytes,
            400
        );
        assert_eq!(p.total_bytes(), 700 + (1 << 20));
        assert_eq!(p.pinned_held(), (0x1000, 0x2000));
        // Both ranges were copied at 3 and 4: idle since 4 is none of them but the first.
        assert_eq!(p.pinned_idle(4), 0x1000);
        assert_eq!(p.pinned_idle(3), 0);
        // Freed and unregistered: nothing held, and the next copy there is pageable.
        p.ingest(&ev(7, EventKind::Free { start: 0x10000 }), &cost);
        p.ingest(
            &ev(
                8,
                EventKind::UnpinPages {
                    start: 0x40000,
                    pages: None,
                },
            ),
            &cost,
        );
        assert_eq!(p.pinned_held(), (0, 0));
        p.ingest(&copy(9, Direction::HtoD, 0x10800, 1), &cost);
        assert_eq!(p.copies[h][HostKind::Pageable.index()].transfers, 2);
    }

    #[test]
    fn a_process_older_than_the_agent_has_unknown_copies_and_the_range_table_is_capped() {
        let cost = CostModel::builtin();
        let mut old = ProcessSummary::new(7, "w".into(), CgroupInfo::default(), true);
        old.ingest(&copy(1, Direction::HtoD, 0x5000, 10), &cost);
        assert_eq!(
            old.copies[0][HostKind::Unknown.index()].transfers,
            1,
            "not pageable: it may have been pinned before the attach"
        );
        assert_eq!(old.copies[0][HostKind::Unknown.index()].saving_seconds, 0.0);

        let mut p = ProcessSummary::new(8, "w".into(), CgroupInfo::default(), false);
        for i in 0..MAX_RANGES_PER_PROCESS as u64 + 3 {
            p.ingest(
                &ev(
                    1,
                    EventKind::Alloc {
                        start: 0x100000 + i * 0x1000,
                        size: 0x1000,
                        kind: HostMemKind::PinnedAlloc,
                        flags: 0,
                    },
                ),
                &cost,
            );
        }
        assert_eq!(p.range_count(), MAX_RANGES_PER_PROCESS);
        assert_eq!(p.ranges_overflowed, 3);
        // Past the cap, memory not in the table is unknown (it may be an unremembered range).
        p.ingest(&copy(2, Direction::HtoD, 0x1, 10), &cost);
        assert_eq!(p.copies[0][HostKind::Unknown.index()].transfers, 1);
    }

    #[test]
    fn munmap_forgets_the_ranges_inside_it() {
        let cost = CostModel::builtin();
        let mut p = ProcessSummary::new(7, "w".into(), CgroupInfo::default(), false);
        for start in [0x10000, 0x20000] {
            p.ingest(
                &ev(
                    1,
                    EventKind::Alloc {
                        start,
                        size: 0x1000,
                        kind: HostMemKind::Registered,
                        flags: 0,
                    },
                ),
                &cost,
            );
        }
        p.ingest(
            &ev(
                2,
                EventKind::Munmap {
                    start: 0x10000,
                    len: 0x8000,
                },
            ),
            &cost,
        );
        assert_eq!(p.pinned_held(), (0, 0x1000));
    }
}
