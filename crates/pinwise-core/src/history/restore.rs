//! Rebuilding a history from a dump (used by the JSON and binary loaders).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::live::Process;
use super::record::AllocRecord;
use super::store::Capped;
use super::tables::SlotKey;
use super::{
    AllocKind, AllocState, HistoryConfig, HistoryStats, MemHistory, ProcessInfo, Recorded,
    RecordedEvent, TransferCounters,
};
use crate::stack::{StackId, StackTable, SymbolTable};
use crate::tag::{ModuleTable, Site};

impl MemHistory {
    /// Rebuilds a history from the parts of a dump. Records must come in id order.
    pub(crate) fn restore(
        config: HistoryConfig,
        modules: Arc<ModuleTable>,
        processes: Vec<ProcessInfo>,
        stats: HistoryStats,
        source_stats: BTreeMap<String, u64>,
        stacks: Arc<StackTable>,
        symbols: SymbolTable,
    ) -> Self {
        let mut h = MemHistory::with_tables(config, modules, stacks);
        h.symbols = symbols;
        for info in processes {
            let i = h.processes.len() as u32;
            if info.exit_ts_ns.is_none() {
                h.pid_index.insert(info.pid, i);
            }
            h.processes.push(Process::new(info));
        }
        h.source_stats = source_stats;
        h.store.stats = stats;
        h
    }

    /// Interns a dump's call sites and streams in the dump's order (so that re-dumping a
    /// loaded history gives the same bytes).
    pub(crate) fn restore_tables(&mut self, sites: &[Site], streams: &[u64]) {
        for &s in sites {
            self.store.tables.sites.intern(s);
        }
        for &s in streams {
            self.store.tables.streams.intern(s);
        }
    }

    /// Adds one record of a dump. Errors say what is inconsistent.
    pub(crate) fn restore_record(&mut self, r: RestoredRecord) -> Result<(), String> {
        let p = r.process as usize;
        if p >= self.processes.len() {
            return Err(format!(
                "process index {} but only {} processes",
                r.process,
                self.processes.len()
            ));
        }
        if r.events.is_empty() {
            return Err("an allocation has no events".into());
        }
        if r.state == AllocState::Live {
            if self.processes[p].info.exit_ts_ns.is_some() {
                return Err("a live allocation in a process that exited".into());
            }
            let end = r.start.saturating_add(r.size);
            if !self.processes[p].overlapping(r.start, end).is_empty() {
                return Err(format!(
                    "live allocation at {:#x} overlaps another live allocation of the same process",
                    r.start
                ));
            }
        } else if r.state == AllocState::Exited && self.processes[p].info.exit_ts_ns.is_none() {
            return Err(
                "an allocation ended with its process, but the process has no exit time".into(),
            );
        }
        let site = self.store.tables.sites.intern(r.site);
        let slot = self.store.slots.intern(SlotKey {
            process: r.process,
            site,
        });
        self.store.slots.saw_call(slot, r.call_no);
        let mut rec = AllocRecord::new(r.start, r.size, r.kind, slot, r.call_no);
        rec.set_state(r.state);
        if r.pinned_seen {
            rec.set_pinned_seen();
        }
        // The dump's own stats already count the record and its events: counting them
        // again from zero and putting the dump's back cannot overflow whatever they say.
        let stats = std::mem::take(&mut self.store.stats);
        let mut entry = self.store.new_record(rec);
        self.store.set_stack(entry.record, r.stack);
        for ev in &r.events {
            self.store.append(&mut entry, ev, true, u32::MAX);
        }
        self.store.stats = stats;
        let id = entry.record;
        let transfers = match r.capped {
            Some((counters, dropped)) => {
                self.store.capped.insert(id, Capped { counters, dropped });
                self.store.records[id as usize].set_capped();
                counters.transfers()
            }
            None => r
                .events
                .iter()
                .filter(|e| matches!(e.what, Recorded::Transfer { .. }))
                .count() as u64,
        };
        let t = u32::try_from(transfers).unwrap_or(u32::MAX);
        if t > 0 {
            self.store.records[id as usize].transfers = t;
            let records = &self.store.records;
            self.store
                .rank
                .increment(id as usize, 0, t, |i| records[i].transfers);
        }
        if r.state == AllocState::Live {
            for ev in &r.events {
                match ev.what {
                    Recorded::PinPages { start, bytes, .. } => {
                        entry.pin_start = start;
                        entry.pin_end = if bytes > 0 {
                            start.saturating_add(bytes).min(entry.end)
                        } else {
                            entry.end
                        };
                    }
                    Recorded::UnpinPages { .. } => {
                        entry.pin_start = 0;
                        entry.pin_end = 0;
                    }
                    _ => {}
                }
            }
            self.processes[p].insert(r.start, entry);
        }
        Ok(())
    }
}

/// One record as a dump describes it (decoded), for [`MemHistory::restore_record`].
#[derive(Debug, Clone)]
pub(crate) struct RestoredRecord {
    pub process: u32,
    pub site: Site,
    pub call_no: u32,
    pub start: u64,
    pub size: u64,
    pub kind: AllocKind,
    pub state: AllocState,
    pub pinned_seen: bool,
    pub capped: Option<(TransferCounters, u64)>,
    pub events: Vec<RecordedEvent>,
    /// Its stack, already interned in the history's stack table.
    pub stack: Option<StackId>,
}
