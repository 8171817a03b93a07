//! The store: records, their events, and the indexes over them (everything but the
//! live-address index, so that a live entry, borrowed from its process, and the store can
//! be changed together).

use super::arena::EventArena;
use super::codec::{self, RecordContext, MAX_EVENT_LEN};
use super::live::LiveEntry;
use super::rank::TransferRank;
use super::record::AllocRecord;
use super::tables::{EventTables, FxMap, Slots};
use super::{AllocKind, EventIter, HistoryStats, Recorded, RecordedEvent, TransferCounters};
use crate::segvec::SegVec;
use crate::stack::StackId;

/// Exact counters of a record whose events were capped.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Capped {
    pub counters: TransferCounters,
    pub dropped: u64,
}

/// Records, their events and indexes: everything but the live-address index, so that a
/// live entry (borrowed from a process) and the store can be changed together.
#[derive(Debug, Clone, Default)]
pub(super) struct Store {
    pub records: SegVec<AllocRecord, 12>,
    pub arena: EventArena,
    pub rank: TransferRank,
    pub tables: EventTables,
    pub slots: Slots,
    pub capped: FxMap<u32, Capped>,
    pub stats: HistoryStats,
}

impl Store {
    pub fn context(&self, record: u32) -> RecordContext {
        let r = &self.records[record as usize];
        RecordContext {
            start: r.start(),
            size: r.size(),
            size_shortcut: r.kind() != AllocKind::Untracked,
        }
    }

    /// Makes a record with an empty event chain; returns its live entry.
    pub fn new_record(&mut self, rec: AllocRecord) -> LiveEntry {
        let end = rec.end();
        let index = self.records.push(rec);
        let record = u32::try_from(index).expect("more than 2^32 allocation records");
        let cursor = self.arena.start_chain(record);
        self.rank.push();
        self.stats.records += 1;
        LiveEntry {
            end,
            last_ts: 0,
            pin_start: 0,
            pin_end: 0,
            record,
            events: 0,
            cursor,
        }
    }

    /// Sets the stack of a record.
    pub fn set_stack(&mut self, record: u32, stack: Option<StackId>) {
        self.records[record as usize].stack = stack;
    }

    /// Stores `ev` in the entry's record, unless the record is at the cap and the event
    /// is not one that must be kept (its start or end).
    #[inline]
    pub fn append(&mut self, entry: &mut LiveEntry, ev: &RecordedEvent, keep: bool, cap: u32) {
        if entry.events >= cap && !keep {
            self.drop_event(entry.record, ev);
            return;
        }
        let ctx = self.context(entry.record);
        let mut buf = [0u8; MAX_EVENT_LEN];
        let n = codec::encode(ev, ctx, entry.last_ts, &mut self.tables, &mut buf);
        self.arena.append(&mut entry.cursor, &buf[..n]);
        entry.last_ts = ev.ts_ns;
        entry.events += 1;
        self.stats.events_retained += 1;
    }

    fn drop_event(&mut self, record: u32, ev: &RecordedEvent) {
        self.stats.events_dropped_by_cap += 1;
        if !self.records[record as usize].capped() {
            let counters = self.counters_from_events(record);
            self.capped.insert(
                record,
                Capped {
                    counters,
                    dropped: 0,
                },
            );
            self.records[record as usize].set_capped();
        }
        let capped = self
            .capped
            .get_mut(&record)
            .expect("a capped record has counters");
        capped.dropped += 1;
        if let Recorded::Transfer {
            direction,
            bytes,
            pinned,
            ..
        } = ev.what
        {
            capped.counters.add(direction, bytes, pinned);
        }
    }

    pub fn events(&self, record: u32) -> EventIter<'_> {
        EventIter::new(
            self.arena.reader(record),
            self.context(record),
            &self.tables,
        )
    }

    pub fn counters_from_events(&self, record: u32) -> TransferCounters {
        let mut c = TransferCounters::default();
        for ev in self.events(record) {
            if let Recorded::Transfer {
                direction,
                bytes,
                pinned,
                ..
            } = ev.what
            {
                c.add(direction, bytes, pinned);
            }
        }
        c
    }

    pub fn counters(&self, record: u32) -> TransferCounters {
        match self.capped.get(&record) {
            Some(c) => c.counters,
            None => self.counters_from_events(record),
        }
    }

    /// Counts a transfer in the record's count and the rank index.
    #[inline]
    pub fn count_transfer(&mut self, record: u32) {
        let r = &mut self.records[record as usize];
        let old = r.transfers;
        if old == u32::MAX {
            return;
        }
        r.transfers = old + 1;
        let records = &self.records;
        self.rank
            .increment(record as usize, old, old + 1, |i| records[i].transfers);
    }
}
