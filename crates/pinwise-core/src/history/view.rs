//! Reading one allocation's record: [`AllocationView`] (borrowed, cheap) and
//! [`AllocationInfo`] (owned, without events).

use serde::{Deserialize, Serialize};

use super::arena::ChainReader;
use super::codec::{self, RecordContext};
use super::tables::EventTables;
use super::{AllocKind, AllocState, MemHistory, RecordId, RecordedEvent, TransferCounters};
use crate::stack::{Stack, StackId};
use crate::tag::{Site, Tag};
use crate::varint::ByteSource;

/// Iterates a record's retained events in the order they were recorded.
#[derive(Debug, Clone)]
pub struct EventIter<'h> {
    reader: ChainReader<'h>,
    ctx: RecordContext,
    tables: &'h EventTables,
    prev_ts: u64,
    /// Bytes up to the end of the last event read.
    consumed: usize,
    done: bool,
}

impl<'h> EventIter<'h> {
    pub(crate) fn new(
        reader: ChainReader<'h>,
        ctx: RecordContext,
        tables: &'h EventTables,
    ) -> Self {
        EventIter {
            reader,
            ctx,
            tables,
            prev_ts: 0,
            consumed: 0,
            done: false,
        }
    }

    /// Encoded bytes of the events read so far.
    pub(crate) fn bytes_read(&self) -> usize {
        self.consumed
    }
}

impl Iterator for EventIter<'_> {
    type Item = RecordedEvent;

    fn next(&mut self) -> Option<RecordedEvent> {
        if self.done {
            return None;
        }
        // The arena holds only what the history encoded, so a decode error cannot happen;
        // if it did, the iteration would simply end there.
        match codec::decode(&mut self.reader, self.ctx, self.prev_ts, self.tables) {
            Ok(Some(ev)) => {
                self.prev_ts = ev.ts_ns;
                self.consumed = self.reader.position();
                Some(ev)
            }
            _ => {
                self.done = true;
                None
            }
        }
    }
}

/// A borrowed view of one allocation's record.
#[derive(Clone, Copy)]
pub struct AllocationView<'h> {
    history: &'h MemHistory,
    id: RecordId,
}

impl std::fmt::Debug for AllocationView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AllocationView")
            .field("id", &self.id)
            .field("pid", &self.pid())
            .field("start", &format_args!("{:#x}", self.start()))
            .field("size", &self.size())
            .field("kind", &self.kind())
            .field("state", &self.state())
            .field("tag", &self.tag())
            .field("transfers", &self.transfer_count())
            .finish()
    }
}

impl<'h> AllocationView<'h> {
    pub(crate) fn new(history: &'h MemHistory, id: RecordId) -> Option<Self> {
        history.record(id)?;
        Some(AllocationView { history, id })
    }

    fn rec(&self) -> &'h super::record::AllocRecord {
        self.history
            .record(self.id)
            .expect("a view's record exists")
    }

    /// The record's id in its history.
    pub fn id(&self) -> RecordId {
        self.id
    }

    /// The process it belongs to.
    pub fn pid(&self) -> u32 {
        let key = self.history.slot_key(self.rec().slot);
        self.history.process_info(key.process).pid
    }

    /// Index of its process in [`MemHistory::processes`] (distinguishes reused pids).
    pub fn process_index(&self) -> u32 {
        self.history.slot_key(self.rec().slot).process
    }

    /// First byte.
    pub fn start(&self) -> u64 {
        self.rec().start()
    }

    /// Length in bytes.
    pub fn size(&self) -> u64 {
        self.rec().size()
    }

    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.rec().end()
    }

    /// What kind of memory.
    pub fn kind(&self) -> AllocKind {
        self.rec().kind()
    }

    /// Its state: `Live`, or how it ended.
    pub fn state(&self) -> AllocState {
        self.rec().state()
    }

    /// Whether a registration (or the kernel) ever pinned pages of it.
    pub fn pinned_by_registration(&self) -> bool {
        self.rec().pinned_seen()
    }

    /// The call site that made it (for implicit records: the site of the event that
    /// revealed it), [`Site::UNKNOWN`] when the source did not know.
    pub fn site(&self) -> Site {
        let key = self.history.slot_key(self.rec().slot);
        self.history.site_at(key.site)
    }

    /// Its tag: call site and call number (0 for implicit records: no allocation seen).
    pub fn tag(&self) -> Tag {
        Tag {
            site: self.site(),
            call_no: self.rec().call_no,
        }
    }

    /// Its retained events, oldest first.
    pub fn events(&self) -> EventIter<'h> {
        self.history.record_events(self.id)
    }

    /// When it came to be known: the timestamp of its first event.
    pub fn alloc_ts_ns(&self) -> u64 {
        self.events().next().map_or(0, |e| e.ts_ns)
    }

    /// When it ended: its free or unmap event, or its process's exit; `None` while live,
    /// or when it was replaced (its end was not seen).
    pub fn end_ts_ns(&self) -> Option<u64> {
        match self.state() {
            AllocState::Live | AllocState::Replaced => None,
            AllocState::Freed | AllocState::Unmapped => self.events().last().map(|e| e.ts_ns),
            AllocState::Exited => {
                let key = self.history.slot_key(self.rec().slot);
                self.history.process_info(key.process).exit_ts_ns
            }
        }
    }

    /// Timestamp of its last retained event.
    pub fn last_event_ts_ns(&self) -> u64 {
        self.events().last().map_or(0, |e| e.ts_ns)
    }

    /// Number of transfers, exact.
    pub fn transfer_count(&self) -> u64 {
        let r = self.rec();
        if r.capped() {
            self.history.record_counters(self.id).transfers()
        } else {
            u64::from(r.transfers)
        }
    }

    /// Exact counters: transfers and bytes by direction, from pageable and pinned memory.
    pub fn counters(&self) -> TransferCounters {
        self.history.record_counters(self.id)
    }

    /// Events retained.
    pub fn events_retained(&self) -> u64 {
        self.events().count() as u64
    }

    /// Events dropped because of the per-allocation cap.
    pub fn events_dropped(&self) -> u64 {
        self.history.record_dropped(self.id)
    }

    /// Whether some of its events were dropped (its counters are still exact).
    pub fn is_capped(&self) -> bool {
        self.rec().capped()
    }

    /// The redundancy found in its fingerprinted copies (`None`: none was fingerprinted).
    pub fn redundancy(&self) -> Option<&'h crate::fingerprint::Redundancy> {
        self.history.record_redundancy(self.id)
    }

    /// The stack of the event that made the record, when the source captured one.
    pub fn stack_id(&self) -> Option<StackId> {
        self.history.record_stack(self.id)
    }

    /// The frames of [`AllocationView::stack_id`]'s stack, innermost first.
    pub fn stack(&self) -> Option<Stack> {
        self.history.stack(self.stack_id()?)
    }

    /// An owned summary (no events).
    pub fn info(&self) -> AllocationInfo {
        let counters = self.counters();
        AllocationInfo {
            id: self.id,
            pid: self.pid(),
            start: self.start(),
            size: self.size(),
            kind: self.kind(),
            state: self.state(),
            tag: self.tag(),
            alloc_ts_ns: self.alloc_ts_ns(),
            end_ts_ns: self.end_ts_ns(),
            transfer_count: counters.transfers(),
            bytes_transferred: counters.bytes(),
            counters,
            pinned_by_registration: self.pinned_by_registration(),
            events_retained: self.events_retained(),
            events_dropped: self.events_dropped(),
            stack: self.stack_id(),
        }
    }
}

/// An owned summary of one allocation (what [`AllocationView::info`] returns).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationInfo {
    /// Record id.
    pub id: RecordId,
    /// Process.
    pub pid: u32,
    /// First byte.
    pub start: u64,
    /// Length.
    pub size: u64,
    /// Kind of memory.
    pub kind: AllocKind,
    /// Final (or current) state.
    pub state: AllocState,
    /// Call site and call number.
    pub tag: Tag,
    /// Timestamp of its first event.
    pub alloc_ts_ns: u64,
    /// When it ended, if known.
    pub end_ts_ns: Option<u64>,
    /// Transfers (exact).
    pub transfer_count: u64,
    /// Bytes transferred (exact).
    pub bytes_transferred: u64,
    /// Exact counters by direction.
    pub counters: TransferCounters,
    /// Whether a registration ever pinned pages of it.
    pub pinned_by_registration: bool,
    /// Events retained.
    pub events_retained: u64,
    /// Events dropped by the cap.
    pub events_dropped: u64,
    /// The allocation's stack, in the history's stack table.
    pub stack: Option<StackId>,
}
