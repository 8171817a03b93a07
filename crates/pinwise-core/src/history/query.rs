//! The advisory API: hotspots, coldspots, look-ups, per-site aggregates and a summary.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::{
    AllocKind, AllocState, AllocationView, DirTotals, MemHistory, RecordId, Recorded,
    TransferCounters,
};
use crate::cost::{CostModel, PinMethod};
use crate::event::Direction;
use crate::tag::{Site, Tag};

/// All allocations made at one call site, across call numbers (and processes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SiteAggregate {
    /// The call site.
    pub site: Site,
    /// Allocations seen made there (records with a call number).
    pub allocations: u64,
    /// Implicit records whose revealing event came from there (untracked transfers,
    /// registrations of unknown memory).
    pub implicit_records: u64,
    /// Processes the site allocated in.
    pub processes: u64,
    /// Of those allocations, still live.
    pub live: u64,
    /// Allocations with at least one transfer.
    pub transferred: u64,
    /// Sum of allocation sizes.
    pub total_size: u64,
    /// Smallest allocation.
    pub min_size: u64,
    /// Largest allocation.
    pub max_size: u64,
    /// Highest call number.
    pub max_call_no: u32,
    /// Most transfers of one allocation.
    pub max_transfers: u64,
    /// Exact counters of all its records.
    pub counters: TransferCounters,
}

impl SiteAggregate {
    /// Mean transfers per allocation (implicit records included in neither).
    pub fn mean_transfers(&self) -> f64 {
        if self.allocations + self.implicit_records == 0 {
            0.0
        } else {
            self.counters.transfers() as f64 / (self.allocations + self.implicit_records) as f64
        }
    }
}

/// Transfers of one direction in a [`Summary`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct DirectionSummary {
    /// Every transfer seen in this direction (attributed or not).
    pub all: DirTotals,
    /// Transfers attributed to host allocations, by host memory state.
    pub attributed: super::DirectionCounters,
}

/// What pinning would have saved under a cost model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SavingEstimate {
    /// Time the pageable transfers took (modeled), ns.
    pub pageable_transfer_ns: f64,
    /// The same transfers from pinned memory (modeled), ns.
    pub same_if_pinned_ns: f64,
    /// Difference: what pinning would save on transfers alone, ns.
    pub transfer_saving_ns: f64,
    /// Cost of pinning (register + unregister) every allocation with pageable transfers, ns.
    pub pin_all_cost_ns: f64,
    /// Saving minus cost if every such allocation were pinned, ns (may be negative).
    pub net_saving_pin_all_ns: f64,
    /// Saving minus cost pinning only those of them where it pays back, ns.
    pub net_saving_pin_worthwhile_ns: f64,
    /// Allocations with pageable transfers where pinning pays back (memory already pinned
    /// for all its transfers is not counted: there is nothing left to save).
    pub allocations_worth_pinning: u64,
    /// Whether some allocations' events were capped, so their transfer sizes are averages.
    pub approximate: bool,
}

/// The headline numbers of a history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Records (allocations, implicit ones included).
    pub records: u64,
    /// Of which live.
    pub live: u64,
    /// Of which implicit (untracked memory, registrations of unknown memory).
    pub implicit: u64,
    /// Processes seen.
    pub processes: u64,
    /// Events ingested.
    pub events_ingested: u64,
    /// Events retained.
    pub events_retained: u64,
    /// Events dropped by the per-allocation cap.
    pub events_dropped: u64,
    /// Transfers by direction (index: [`Direction::index`]).
    pub by_direction: [DirectionSummary; 4],
    /// Share of host-device bytes (HtoD + DtoH, attributed) moved from or to pageable
    /// memory, 0 to 1.
    pub pageable_share: f64,
    /// What pinning would save, under the cost model given.
    pub estimate: SavingEstimate,
    /// The cost model's source.
    pub cost_model: String,
    /// Counters sources recorded about themselves (drops, lost events).
    pub source_stats: BTreeMap<String, u64>,
}

impl MemHistory {
    fn views(&self, ids: impl IntoIterator<Item = usize>) -> Vec<AllocationView<'_>> {
        ids.into_iter()
            .filter_map(|i| self.view(RecordId(i as u32)))
            .collect()
    }

    /// The record with this id.
    pub fn view(&self, id: RecordId) -> Option<AllocationView<'_>> {
        AllocationView::new(self, id)
    }

    /// Every record, in creation order.
    pub fn allocations(&self) -> impl Iterator<Item = AllocationView<'_>> + '_ {
        (0..self.len() as u32).filter_map(|i| self.view(RecordId(i)))
    }

    /// The `n` allocations with the most transfers, most first (ties: oldest first).
    pub fn hotspots(&self, n: usize) -> Vec<AllocationView<'_>> {
        let mut v = self.views(self.rank_top(n));
        self.refine_capped(&mut v, true);
        v
    }

    /// The `n` allocations with the fewest transfers, fewest first (ties: oldest first).
    pub fn coldspots(&self, n: usize) -> Vec<AllocationView<'_>> {
        self.views(self.rank_bottom(n))
    }

    /// Allocations with at least `min` transfers, most first.
    pub fn hotspots_threshold(&self, min: u64) -> Vec<AllocationView<'_>> {
        let m = u32::try_from(min).unwrap_or(u32::MAX);
        let mut v: Vec<_> = self
            .views(self.rank_at_least(m))
            .into_iter()
            .filter(|a| a.transfer_count() >= min)
            .collect();
        v.sort_by_key(|a| (std::cmp::Reverse(a.transfer_count()), a.id()));
        v
    }

    /// Allocations with at most `max` transfers, fewest first.
    pub fn coldspots_threshold(&self, max: u64) -> Vec<AllocationView<'_>> {
        let m = u32::try_from(max).unwrap_or(u32::MAX);
        let mut v: Vec<_> = self
            .views(self.rank_at_most(m))
            .into_iter()
            .filter(|a| a.transfer_count() <= max)
            .collect();
        v.sort_by_key(|a| (a.transfer_count(), a.id()));
        v
    }

    /// Counts past `u32::MAX` saturate in the index; order those few exactly.
    fn refine_capped(&self, v: &mut [AllocationView<'_>], most_first: bool) {
        if v.iter().any(|a| a.transfer_count() >= u64::from(u32::MAX)) {
            if most_first {
                v.sort_by_key(|a| (std::cmp::Reverse(a.transfer_count()), a.id()));
            } else {
                v.sort_by_key(|a| (a.transfer_count(), a.id()));
            }
        }
    }

    /// The live allocation of process `pid` containing `addr` (any byte of it).
    pub fn lookup(&self, pid: u32, addr: u64) -> Option<AllocationView<'_>> {
        self.view(RecordId(self.live_record_at(pid, addr)?))
    }

    /// The live allocation containing `addr`, else the most recent ended one of that pid
    /// that contained it (a scan of all records: O(records)).
    pub fn lookup_any(&self, pid: u32, addr: u64) -> Option<AllocationView<'_>> {
        if let Some(v) = self.lookup(pid, addr) {
            return Some(v);
        }
        (0..self.len() as u32)
            .rev()
            .filter_map(|i| self.view(RecordId(i)))
            .find(|v| v.pid() == pid && v.start() <= addr && addr < v.end())
    }

    /// Allocations with this tag (one per process that made it; a scan: O(records)).
    pub fn by_tag(&self, tag: Tag) -> Vec<AllocationView<'_>> {
        self.allocations().filter(|v| v.tag() == tag).collect()
    }

    /// Allocations made at `site`, in creation order (a scan: O(records)).
    pub fn by_site(&self, site: Site) -> Vec<AllocationView<'_>> {
        self.allocations().filter(|v| v.site() == site).collect()
    }

    /// Per-site aggregates across call numbers, most transfers first.
    pub fn site_aggregates(&self) -> Vec<SiteAggregate> {
        let mut by_site: HashMap<Site, (SiteAggregate, Vec<u32>)> = HashMap::new();
        for v in self.allocations() {
            let site = v.site();
            let (agg, procs) = by_site.entry(site).or_insert_with(|| {
                (
                    SiteAggregate {
                        site,
                        allocations: 0,
                        implicit_records: 0,
                        processes: 0,
                        live: 0,
                        transferred: 0,
                        total_size: 0,
                        min_size: u64::MAX,
                        max_size: 0,
                        max_call_no: 0,
                        max_transfers: 0,
                        counters: TransferCounters::default(),
                    },
                    Vec::new(),
                )
            });
            let tag = v.tag();
            if tag.call_no == 0 {
                agg.implicit_records += 1;
            } else {
                agg.allocations += 1;
                agg.total_size = agg.total_size.saturating_add(v.size());
                agg.min_size = agg.min_size.min(v.size());
                agg.max_size = agg.max_size.max(v.size());
                agg.max_call_no = agg.max_call_no.max(tag.call_no);
                if v.state() == AllocState::Live {
                    agg.live += 1;
                }
            }
            let counters = v.counters();
            if counters.transfers() > 0 {
                agg.transferred += 1;
            }
            agg.max_transfers = agg.max_transfers.max(counters.transfers());
            agg.counters.merge(&counters);
            let p = v.process_index();
            if !procs.contains(&p) {
                procs.push(p);
            }
        }
        let mut out: Vec<SiteAggregate> = by_site
            .into_values()
            .map(|(mut agg, procs)| {
                agg.processes = procs.len() as u64;
                if agg.allocations == 0 {
                    agg.min_size = 0;
                }
                agg
            })
            .collect();
        out.sort_by(|a, b| {
            b.counters
                .transfers()
                .cmp(&a.counters.transfers())
                .then(a.site.cmp(&b.site))
        });
        out
    }

    /// The aggregate of one site, if it allocated or revealed anything.
    pub fn site_aggregate(&self, site: Site) -> Option<SiteAggregate> {
        self.site_aggregates().into_iter().find(|a| a.site == site)
    }

    /// Bytes moved by direction, the share from pageable memory, and what pinning would
    /// save under `cost` (pinning by registration of touched memory).
    pub fn summary(&self, cost: &CostModel) -> Summary {
        let stats = self.stats();
        let mut by_direction = [DirectionSummary::default(); 4];
        for d in Direction::ALL {
            by_direction[d.index()].all = stats.transfers[d.index()];
        }
        let mut est = SavingEstimate::default();
        let mut live = 0;
        let mut implicit = 0;
        for v in self.allocations() {
            if v.state() == AllocState::Live {
                live += 1;
            }
            if v.tag().call_no == 0 {
                implicit += 1;
            }
            let counters = v.counters();
            for d in Direction::ALL {
                by_direction[d.index()]
                    .attributed
                    .merge(counters.direction(d));
            }
            if counters.pageable_transfers() == 0 {
                continue;
            }
            // Modeled time of this allocation's pageable transfers, and pinned instead.
            let (mut pageable_ns, mut pinned_ns) = (0.0, 0.0);
            if v.is_capped() {
                est.approximate = true;
                for d in Direction::ALL {
                    let c = counters.direction(d);
                    if let Some(each) = c.pageable_bytes.checked_div(c.pageable_transfers) {
                        let n = c.pageable_transfers as f64;
                        pageable_ns += n * cost.transfer_ns(d, each, false);
                        pinned_ns += n * cost.transfer_ns(d, each, true);
                    }
                }
            } else {
                for ev in v.events() {
                    if let Recorded::Transfer {
                        direction,
                        bytes,
                        pinned: false,
                        ..
                    } = ev.what
                    {
                        pageable_ns += cost.transfer_ns(direction, bytes, false);
                        pinned_ns += cost.transfer_ns(direction, bytes, true);
                    }
                }
            }
            let saving = pageable_ns - pinned_ns;
            let pin_cost = if v.kind() == AllocKind::PinnedAlloc {
                0.0
            } else {
                cost.pin_cost_ns(v.size(), PinMethod::RegisterTouched)
                    + cost.unpin_cost_ns(v.size(), PinMethod::RegisterTouched)
            };
            est.pageable_transfer_ns += pageable_ns;
            est.same_if_pinned_ns += pinned_ns;
            est.transfer_saving_ns += saving;
            est.pin_all_cost_ns += pin_cost;
            if saving > pin_cost {
                est.net_saving_pin_worthwhile_ns += saving - pin_cost;
                est.allocations_worth_pinning += 1;
            }
        }
        est.net_saving_pin_all_ns = est.transfer_saving_ns - est.pin_all_cost_ns;
        let (pageable, total) = [Direction::HtoD, Direction::DtoH]
            .iter()
            .map(|d| by_direction[d.index()].attributed)
            .fold((0u64, 0u64), |(p, t), c| {
                (
                    p.saturating_add(c.pageable_bytes),
                    t.saturating_add(c.bytes()),
                )
            });
        Summary {
            records: self.len() as u64,
            live,
            implicit,
            processes: self.processes().count() as u64,
            events_ingested: stats.events_ingested,
            events_retained: stats.events_retained,
            events_dropped: stats.events_dropped_by_cap,
            by_direction,
            pageable_share: if total == 0 {
                0.0
            } else {
                pageable as f64 / total as f64
            },
            estimate: est,
            cost_model: cost.source().to_owned(),
            source_stats: self.source_stats().clone(),
        }
    }
}
