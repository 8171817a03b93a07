//! The per-tag profile of a history, built during the report's single pass over it.
//!
//! The entries are the same as `Profile::from_history`'s (one per tag: call site and call
//! number; sizes, transfers, lifetimes relative to the process's first event; instances
//! merged across processes), but without its per-site aggregates, which the budget does
//! not need and which core computes with a scan of every record per call site (quadratic
//! on large histories with many sites). Entries feed core's plan
//! (`pinwise_core::decide::plan::PinPlan`) unchanged.

use std::collections::HashMap;

use pinwise_core::history::{AllocState, AllocationView, TransferCounters};
use pinwise_core::profile::{PerDirection, Profile, ProfileEntry, ProfileModule};
use pinwise_core::{Direction, MemHistory, ModuleId};

/// Accumulates profile entries, one allocation at a time.
pub(crate) struct TagProfile {
    table: std::sync::Arc<pinwise_core::ModuleTable>,
    process_start: Vec<u64>,
    processes: u64,
    modules: Vec<ProfileModule>,
    module_index: HashMap<ModuleId, u32>,
    /// One entry per allocation, in creation order; instances of a tag are merged at the
    /// end (sorting is cheaper than hashing a million keys).
    entries: Vec<ProfileEntry>,
    /// Per entry: its transfers from pageable memory (which a profile does not keep).
    pageable_transfers: Vec<u64>,
}

/// The per-tag profile, and per entry whether the traced run already pinned it.
pub(crate) struct TagTable {
    /// The profile (entries ordered by module, offset and call number).
    pub profile: Profile,
    /// Per entry of `profile`: every transfer of the tag was from or into pinned memory
    /// (the program, or the allocator that ran it, had pinned it already).
    pub pinned_in_run: Vec<bool>,
}

impl TagProfile {
    pub(crate) fn new(history: &MemHistory) -> Self {
        TagProfile {
            table: history.modules(),
            process_start: history.processes().map(|p| p.first_ts_ns).collect(),
            processes: history.processes().count() as u64,
            modules: Vec::new(),
            module_index: HashMap::new(),
            entries: Vec::new(),
            pageable_transfers: Vec::new(),
        }
    }

    fn module(&mut self, id: ModuleId) -> u32 {
        if let Some(&i) = self.module_index.get(&id) {
            return i;
        }
        let identity = self
            .table
            .get(id)
            .unwrap_or_else(|| pinwise_core::ModuleIdentity::from_path("?"));
        self.modules.push(ProfileModule {
            key: identity.key(),
            path: identity.path,
        });
        let i = (self.modules.len() - 1) as u32;
        self.module_index.insert(id, i);
        i
    }

    /// Adds one allocation whose exact counters, first and last event times are known.
    pub(crate) fn add(
        &mut self,
        v: &AllocationView<'_>,
        counters: &TransferCounters,
        first_ts: u64,
        last_ts: u64,
    ) {
        let tag = v.tag();
        if tag.call_no == 0 {
            return; // implicit records have no tag to predict
        }
        let module = self.module(tag.site.module);
        let base = self
            .process_start
            .get(v.process_index() as usize)
            .copied()
            .unwrap_or(0);
        let start_ns = first_ts.saturating_sub(base);
        let end_ns = match v.state() {
            AllocState::Live => None,
            // Exited: it lived until its process ended.
            AllocState::Exited => None,
            // Freed and unmapped records end with that event; a replaced one's end was not
            // seen, and its last event is the latest we know it lived.
            // (Events can arrive out of order: it never ends before it starts.)
            AllocState::Freed | AllocState::Unmapped | AllocState::Replaced => {
                Some(last_ts.saturating_sub(base).max(start_ns))
            }
        };
        let mut transfers = PerDirection::default();
        for d in Direction::ALL {
            let c = counters.direction(d);
            let t = transfers.get_mut(d);
            t.transfers = c.transfers();
            t.bytes = c.bytes();
        }
        self.entries.push(ProfileEntry {
            module,
            offset: tag.site.offset,
            call_no: tag.call_no,
            size: v.size(),
            kind: v.kind(),
            instances: 1,
            transfers,
            start_ns,
            end_ns,
        });
        self.pageable_transfers.push(counters.pageable_transfers());
    }

    /// Adds the entries of another accumulator over the same history (a share of its
    /// allocations).
    pub(crate) fn merge(&mut self, other: TagProfile) {
        let remap: Vec<u32> = other
            .modules
            .iter()
            .map(|m| {
                let id = self.table.find_key(&m.key).unwrap_or(ModuleId::UNKNOWN);
                self.module(id)
            })
            .collect();
        self.entries.extend(other.entries.into_iter().map(|mut e| {
            e.module = remap[e.module as usize];
            e
        }));
        self.pageable_transfers.extend(other.pageable_transfers);
    }

    /// The profile (entries ordered by module, offset and call number; no site aggregates)
    /// and which of its tags the run had pinned.
    pub(crate) fn finish(self) -> TagTable {
        // Sort small keys, not the entries: (tag, creation order), so that instances of a
        // tag stay in creation order (the first one names its kind).
        let mut order: Vec<(u128, u32)> = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let tag = (u128::from(e.module) << 96)
                    | (u128::from(e.offset) << 32)
                    | u128::from(e.call_no);
                (tag, i as u32)
            })
            .collect();
        order.sort_unstable();
        let mut slots: Vec<Option<ProfileEntry>> = self.entries.into_iter().map(Some).collect();
        let mut merged: Vec<ProfileEntry> = Vec::with_capacity(slots.len());
        let mut pageable: Vec<u64> = Vec::with_capacity(slots.len());
        for (_, i) in order {
            let e = slots[i as usize].take().expect("each entry is taken once");
            let e_pageable = self.pageable_transfers[i as usize];
            match merged.last_mut() {
                Some(m) if (m.module, m.offset, m.call_no) == (e.module, e.offset, e.call_no) => {
                    // Another process's instance of the same tag.
                    *pageable.last_mut().expect("one per merged entry") += e_pageable;
                    m.instances += 1;
                    m.size = m.size.max(e.size);
                    for d in Direction::ALL {
                        let (a, b) = (m.transfers.get_mut(d), e.transfers.get(d));
                        a.transfers = a.transfers.saturating_add(b.transfers);
                        a.bytes = a.bytes.saturating_add(b.bytes);
                    }
                    m.start_ns = m.start_ns.min(e.start_ns);
                    m.end_ns = match (m.end_ns, e.end_ns) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        _ => None,
                    };
                }
                _ => {
                    merged.push(e);
                    pageable.push(e_pageable);
                }
            }
        }
        let pinned_in_run = merged
            .iter()
            .zip(&pageable)
            .map(|(e, &p)| p == 0 && e.transfers.transfers() > 0)
            .collect();
        TagTable {
            profile: Profile::from_parts(self.processes, self.modules, merged, Vec::new())
                .expect("entries built from a history are consistent"),
            pinned_in_run,
        }
    }
}

/// The per-tag profile of a whole history (what [`TagProfile`] builds, in one call).
pub(crate) fn profile_of(history: &MemHistory) -> Profile {
    let mut p = TagProfile::new(history);
    for v in history.allocations() {
        if v.tag().call_no > 0 {
            p.add(&v, &v.counters(), v.alloc_ts_ns(), v.last_event_ts_ns());
        }
    }
    p.finish().profile
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinwise_core::synth::{SynthConfig, SynthEvents};
    use pinwise_core::HistoryConfig;

    #[test]
    fn entries_match_cores_profile() {
        let mut h = MemHistory::new(HistoryConfig {
            max_events_per_allocation: 8,
            ..HistoryConfig::default()
        });
        let modules = h.modules();
        let cfg = SynthConfig {
            allocations: 3000,
            events: 30_000,
            live_window: 100,
            ..SynthConfig::default()
        };
        for e in SynthEvents::new(cfg, &modules) {
            h.ingest(&e);
        }
        // Some allocations are left live, some end with their process.
        let core = Profile::from_history(&h);
        let mut mine = TagProfile::new(&h);
        for v in h.allocations() {
            let first = v.alloc_ts_ns();
            let last = v.last_event_ts_ns();
            mine.add(&v, &v.counters(), first, last);
        }
        let mine = mine.finish().profile;
        assert!(
            h.allocations().any(|v| v.is_capped()),
            "the cap was exercised"
        );
        assert_eq!(mine.modules, core.modules);
        assert_eq!(mine.entries.len(), core.entries.len());
        assert_eq!(mine.entries, core.entries);
    }
}
