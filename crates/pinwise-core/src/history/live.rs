//! The live-address index of a process: which allocations are live, where, and where
//! their next event goes.
//!
//! Frees and most copies name an allocation's start exactly: a hash map answers those. Copies
//! through interior pointers, and overlap checks, need order: a B-tree of `[start, end)`
//! answers those. Both hold live allocations only; an entry is dropped when its
//! allocation ends.

use std::collections::BTreeMap;

use super::arena::Cursor;
use super::tables::FxMap;
use super::ProcessInfo;

/// A live allocation's entry in its process's address index.
#[derive(Debug, Clone, Copy)]
pub(super) struct LiveEntry {
    /// One past the last byte.
    pub end: u64,
    /// Timestamp of the last retained event (events are delta-encoded against it).
    pub last_ts: u64,
    /// First byte of the page-locked range inside the allocation.
    pub pin_start: u64,
    /// One past its last byte (`pin_end <= pin_start`: nothing is pinned).
    pub pin_end: u64,
    /// The allocation's record.
    pub record: u32,
    /// Events retained so far.
    pub events: u32,
    /// Where its next event goes.
    pub cursor: Cursor,
}

impl LiveEntry {
    pub fn pinned_covers(&self, start: u64, bytes: u64) -> bool {
        self.pin_end > self.pin_start
            && self.pin_start <= start
            && start.saturating_add(bytes) <= self.pin_end
    }
}

/// A process: its info and the address index of its live allocations.
#[derive(Debug, Clone, Default)]
pub(super) struct Process {
    pub info: ProcessInfo,
    /// Live allocations by start address (exact-start hits: frees, most copies).
    pub live: FxMap<u64, LiveEntry>,
    /// The same allocations' `[start, end)`, ordered: interior pointers and overlaps.
    pub ranges: BTreeMap<u64, u64>,
}

impl Process {
    pub fn new(info: ProcessInfo) -> Self {
        Process {
            info,
            ..Process::default()
        }
    }

    /// Start of the live allocation containing `addr`.
    #[inline]
    pub fn containing(&self, addr: u64) -> Option<u64> {
        if let Some(e) = self.live.get(&addr) {
            // Live allocations never overlap, so nothing else can contain `addr`.
            return (addr < e.end).then_some(addr);
        }
        let (&start, &end) = self.ranges.range(..=addr).next_back()?;
        (addr < end).then_some(start)
    }

    /// Starts of the live allocations overlapping `[start, end)` (an empty range at
    /// `start` overlaps an allocation that starts there).
    pub fn overlapping(&self, start: u64, end: u64) -> Vec<u64> {
        let mut keys = Vec::new();
        if let Some((&k, &e)) = self.ranges.range(..start).next_back() {
            if e > start {
                keys.push(k);
            }
        }
        keys.extend(
            self.ranges
                .range(start..end.max(start.saturating_add(1)))
                .map(|(&k, _)| k),
        );
        keys
    }

    /// Start of the first live allocation after `addr` (`u64::MAX`: none).
    pub fn next_start_after(&self, addr: u64) -> u64 {
        self.ranges
            .range(addr.saturating_add(1)..)
            .next()
            .map_or(u64::MAX, |(&k, _)| k)
    }

    pub fn insert(&mut self, start: u64, entry: LiveEntry) {
        self.ranges.insert(start, entry.end);
        self.live.insert(start, entry);
    }

    pub fn remove(&mut self, start: u64) -> Option<LiveEntry> {
        self.ranges.remove(&start);
        let e = self.live.remove(&start);
        // Give memory back after a peak of live allocations (amortized O(1)).
        if self.live.capacity() > 1024 && self.live.len() * 4 < self.live.capacity() {
            self.live.shrink_to(self.live.len() * 2);
        }
        e
    }

    pub fn drain(&mut self) -> Vec<LiveEntry> {
        self.ranges.clear();
        self.live.drain().map(|(_, e)| e).collect()
    }
}
