//! The report's one pass over every allocation and its events, in chunks of records on
//! several threads whose results are merged: modeled times by direction, traffic over
//! time, size classes, coldest and busiest allocations, pinned-for-nothing memory, and the
//! per-tag profile.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use pinwise_core::history::{Recorded, TransferCounters};
use pinwise_core::{CostModel, Direction, MemHistory, ModuleTable, Policy, Site};

use crate::analysis::{decide, method_of, ReportOptions};
use crate::model::{PinnedForNothing, SizeClass, WasteRow};
use crate::sites::SiteNames;
use crate::tags::TagProfile;

/// The one pass over every allocation and its events, in chunks of records on several
/// threads whose results are merged.
pub(crate) struct Pass {
    /// Per direction: modeled time as happened, and if pinned, ns.
    pub(crate) time: [(f64, f64); 4],
    pub(crate) bucket_ns: u64,
    pub(crate) traffic: Vec<[u64; 4]>,
    pub(crate) capped: u64,
    pub(crate) size_classes: Vec<SizeClass>,
    /// Coldest allocations: (transfers, Reverse(size), id), the `top` smallest kept in a
    /// max-heap.
    pub(crate) cold: BinaryHeap<(u64, Reverse<u64>, u32)>,
    /// Coldest allocations' ids, coldest first (after [`Pass::finish`]).
    pub(crate) coldest: Vec<u32>,
    /// Most bytes moved: (bytes, Reverse(id)) kept in a min-heap.
    pub(crate) busiest: BinaryHeap<Reverse<(u64, Reverse<u32>)>>,
    pub(crate) waste: WasteAcc,
}

/// Records per chunk below which the pass stays on one thread.
const MIN_CHUNK: usize = 50_000;

/// What a pass reads, shared by its threads.
struct PassInput<'a> {
    history: &'a MemHistory,
    cost: &'a CostModel,
    policy: &'a Policy,
    options: &'a ReportOptions,
    origin: u64,
    bucket_ns: u64,
    buckets: usize,
}

impl Pass {
    pub(crate) fn run(
        history: &MemHistory,
        cost: &CostModel,
        policy: &Policy,
        options: &ReportOptions,
        origin: u64,
        span: u64,
    ) -> (Pass, TagProfile) {
        let bucket_ns = span.div_ceil(options.time_buckets.max(1) as u64).max(1);
        let input = PassInput {
            history,
            cost,
            policy,
            options,
            origin,
            bucket_ns,
            buckets: (span / bucket_ns + 1) as usize,
        };
        let n = history.len();
        let threads = match options.threads {
            Some(t) => t.clamp(1, n.max(1)),
            None => std::thread::available_parallelism()
                .map_or(1, |t| t.get())
                .clamp(1, 8)
                .min(n.div_ceil(MIN_CHUNK).max(1)),
        };
        let chunk = n.div_ceil(threads).max(1);
        let ranges: Vec<std::ops::Range<usize>> = (0..threads)
            .map(|t| (t * chunk).min(n)..((t + 1) * chunk).min(n))
            .collect();
        let parts: Vec<(Pass, TagProfile)> = if threads == 1 {
            vec![Pass::chunk(&input, 0..n)]
        } else {
            std::thread::scope(|scope| {
                let handles: Vec<_> = ranges
                    .into_iter()
                    .map(|r| {
                        let input = &input;
                        scope.spawn(move || Pass::chunk(input, r))
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                    .collect()
            })
        };
        let mut parts = parts.into_iter();
        let (mut pass, mut profile) = parts.next().expect("at least one chunk");
        for (p, t) in parts {
            pass.merge(p, options);
            profile.merge(t);
        }
        pass.coldest = std::mem::take(&mut pass.cold)
            .into_sorted_vec()
            .into_iter()
            .map(|(_, _, id)| id)
            .collect();
        (pass, profile)
    }

    fn empty(input: &PassInput<'_>) -> Pass {
        Pass {
            time: [(0.0, 0.0); 4],
            bucket_ns: input.bucket_ns,
            traffic: vec![[0; 4]; input.buckets],
            capped: 0,
            size_classes: (0..64)
                .map(|b| SizeClass {
                    min_size: 1u64 << b,
                    ..SizeClass::default()
                })
                .collect(),
            cold: BinaryHeap::new(),
            coldest: Vec::new(),
            busiest: BinaryHeap::new(),
            waste: WasteAcc::default(),
        }
    }

    /// The pass over records `range`.
    fn chunk(input: &PassInput<'_>, range: std::ops::Range<usize>) -> (Pass, TagProfile) {
        let options = input.options;
        let mut pass = Pass::empty(input);
        let mut profile = TagProfile::new(input.history);
        for i in range {
            let Some(v) = input
                .history
                .view(pinwise_core::history::RecordId(i as u32))
            else {
                continue;
            };
            let capped = v.is_capped();
            let mut counters = TransferCounters::default();
            let (mut first_ts, mut last_ts) = (None, 0);
            for ev in v.events() {
                first_ts.get_or_insert(ev.ts_ns);
                last_ts = ev.ts_ns;
                if let Recorded::Transfer {
                    direction,
                    bytes,
                    pinned,
                    ..
                } = ev.what
                {
                    if !capped {
                        counters.add(direction, bytes, pinned);
                        if matches!(direction, Direction::HtoD | Direction::DtoH) {
                            let t = &mut pass.time[direction.index()];
                            t.0 += input.cost.transfer_ns(direction, bytes, pinned);
                            t.1 += input.cost.transfer_ns(direction, bytes, true);
                        }
                    }
                    pass.add_traffic(
                        ev.ts_ns.saturating_sub(input.origin),
                        direction,
                        bytes,
                        pinned,
                    );
                }
            }
            if capped {
                pass.capped += 1;
                counters = v.counters();
                pass.add_capped_time(input.cost, &counters);
            }
            profile.add(&v, &counters, first_ts.unwrap_or(0), last_ts);
            let size = v.size();
            let transfers = counters.transfers();
            let bytes = counters.bytes();
            let decision =
                (transfers > 0).then(|| decide(input.policy, size, &counters, options.pin_method));
            let class = &mut pass.size_classes[63 - size.max(1).leading_zeros() as usize];
            match decision {
                None => {
                    class.cold += 1;
                    class.cold_bytes = class.cold_bytes.saturating_add(size);
                }
                Some(d) if d.pin => {
                    class.hot += 1;
                    class.hot_bytes = class.hot_bytes.saturating_add(size);
                }
                Some(_) => {
                    class.warm += 1;
                    class.warm_bytes = class.warm_bytes.saturating_add(size);
                }
            }
            let kind = v.kind();
            if kind.pinned_from_start() || v.pinned_by_registration() {
                let d = decide(input.policy, size, &counters, method_of(kind));
                pass.waste.add(v.site(), size, transfers, &d);
            }
            if v.tag().call_no > 0 {
                pass.keep_cold((transfers, Reverse(size), v.id().0), options.top);
            }
            if bytes > 0 {
                pass.keep_busy(Reverse((bytes, Reverse(v.id().0))), options.timeline_rows);
            }
        }
        (pass, profile)
    }

    fn keep_cold(&mut self, key: (u64, Reverse<u64>, u32), top: usize) {
        self.cold.push(key);
        if self.cold.len() > top {
            self.cold.pop();
        }
    }

    fn keep_busy(&mut self, key: Reverse<(u64, Reverse<u32>)>, rows: usize) {
        self.busiest.push(key);
        if self.busiest.len() > rows {
            self.busiest.pop();
        }
    }

    /// Adds another chunk's results.
    fn merge(&mut self, other: Pass, options: &ReportOptions) {
        for (a, b) in self.time.iter_mut().zip(other.time) {
            a.0 += b.0;
            a.1 += b.1;
        }
        for (a, b) in self.traffic.iter_mut().zip(other.traffic) {
            for (x, y) in a.iter_mut().zip(b) {
                *x += y;
            }
        }
        self.capped += other.capped;
        for (a, b) in self.size_classes.iter_mut().zip(other.size_classes) {
            a.hot += b.hot;
            a.warm += b.warm;
            a.cold += b.cold;
            a.hot_bytes = a.hot_bytes.saturating_add(b.hot_bytes);
            a.warm_bytes = a.warm_bytes.saturating_add(b.warm_bytes);
            a.cold_bytes = a.cold_bytes.saturating_add(b.cold_bytes);
        }
        for k in other.cold {
            self.keep_cold(k, options.top);
        }
        for k in other.busiest {
            self.keep_busy(k, options.timeline_rows);
        }
        self.waste.merge(other.waste);
    }

    fn add_traffic(&mut self, at: u64, direction: Direction, bytes: u64, pinned: bool) {
        let series = match direction {
            Direction::HtoD => 0,
            Direction::DtoH => 2,
            _ => return,
        } + usize::from(pinned);
        let i = ((at / self.bucket_ns) as usize).min(self.traffic.len() - 1);
        self.traffic[i][series] += bytes;
    }

    /// A capped record's modeled times, from its exact counters at mean sizes (as core's
    /// estimate does).
    fn add_capped_time(&mut self, cost: &CostModel, counters: &TransferCounters) {
        for d in [Direction::HtoD, Direction::DtoH] {
            let c = counters.direction(d);
            for (n, bytes, pinned) in [
                (c.pageable_transfers, c.pageable_bytes, false),
                (c.pinned_transfers, c.pinned_bytes, true),
            ] {
                if let Some(each) = bytes.checked_div(n) {
                    let t = &mut self.time[d.index()];
                    t.0 += n as f64 * cost.transfer_ns(d, each, pinned);
                    t.1 += n as f64 * cost.transfer_ns(d, each, true);
                }
            }
        }
    }

    /// The busiest allocations' ids, in creation order.
    pub(crate) fn lifetime_ids(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self
            .busiest
            .iter()
            .map(|Reverse((_, Reverse(id)))| *id)
            .collect();
        ids.sort_unstable();
        ids
    }
}

/// Pinned-for-nothing totals and per-site sums.
#[derive(Default)]
pub(crate) struct WasteAcc {
    pinned_allocations: u64,
    pinned_bytes: u64,
    never: u64,
    rarely: u64,
    wasted_bytes: u64,
    wasted_ns: f64,
    by_site: HashMap<Site, WasteRowAcc>,
}

#[derive(Default)]
struct WasteRowAcc {
    allocations: u64,
    never: u64,
    bytes: u64,
    transfers: u64,
    max_size: u64,
    wasted_ns: f64,
}

impl WasteAcc {
    fn add(&mut self, site: Site, size: u64, transfers: u64, decision: &pinwise_core::Decision) {
        self.pinned_allocations += 1;
        self.pinned_bytes = self.pinned_bytes.saturating_add(size);
        if decision.pin {
            return;
        }
        let wasted = (decision.cost_ns - decision.saving_ns.max(0.0)).max(0.0);
        if transfers == 0 {
            self.never += 1;
        } else {
            self.rarely += 1;
        }
        self.wasted_bytes = self.wasted_bytes.saturating_add(size);
        self.wasted_ns += wasted;
        let row = self.by_site.entry(site).or_default();
        row.allocations += 1;
        row.never += u64::from(transfers == 0);
        row.bytes = row.bytes.saturating_add(size);
        row.transfers = row.transfers.saturating_add(transfers);
        row.max_size = row.max_size.max(size);
        row.wasted_ns += wasted;
    }

    fn merge(&mut self, other: WasteAcc) {
        self.pinned_allocations += other.pinned_allocations;
        self.pinned_bytes = self.pinned_bytes.saturating_add(other.pinned_bytes);
        self.never += other.never;
        self.rarely += other.rarely;
        self.wasted_bytes = self.wasted_bytes.saturating_add(other.wasted_bytes);
        self.wasted_ns += other.wasted_ns;
        for (site, r) in other.by_site {
            let row = self.by_site.entry(site).or_default();
            row.allocations += r.allocations;
            row.never += r.never;
            row.bytes = row.bytes.saturating_add(r.bytes);
            row.transfers = row.transfers.saturating_add(r.transfers);
            row.max_size = row.max_size.max(r.max_size);
            row.wasted_ns += r.wasted_ns;
        }
    }

    pub(crate) fn finish(
        self,
        names: &mut SiteNames<'_>,
        modules: &ModuleTable,
        top: usize,
    ) -> PinnedForNothing {
        let mut rows: Vec<(Site, WasteRowAcc)> = self.by_site.into_iter().collect();
        rows.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(&b.0)));
        PinnedForNothing {
            pinned_allocations: self.pinned_allocations,
            pinned_bytes: self.pinned_bytes,
            never_transferred: self.never,
            rarely_transferred: self.rarely,
            wasted_bytes: self.wasted_bytes,
            wasted_ns: self.wasted_ns,
            sites: rows
                .into_iter()
                .take(top)
                .map(|(site, r)| WasteRow {
                    site: names.site(modules, site),
                    allocations: r.allocations,
                    never_transferred: r.never,
                    bytes: r.bytes,
                    transfers: r.transfers,
                    max_size: r.max_size,
                    wasted_ns: r.wasted_ns,
                })
                .collect(),
        }
    }
}
