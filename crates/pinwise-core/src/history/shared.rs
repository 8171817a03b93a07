//! [`SharedHistory`]: one thread feeds, others query.

use std::sync::Arc;

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::{AllocationInfo, HistoryConfig, MemHistory};
use crate::event::Event;
use crate::stack::StackTable;
use crate::tag::ModuleTable;

/// A [`MemHistory`] behind a reader-writer lock. Cloning is cheap (an `Arc`); all clones
/// see the same history. The feeding thread takes the write lock once per
/// [`SharedHistory::ingest_batch`]; queries take the read lock (use
/// [`SharedHistory::read`] for the whole [`MemHistory`] API, or the owned-result
/// shortcuts below).
#[derive(Debug, Clone)]
pub struct SharedHistory {
    inner: Arc<RwLock<MemHistory>>,
    modules: Arc<ModuleTable>,
    stacks: Arc<StackTable>,
}

impl Default for SharedHistory {
    fn default() -> Self {
        Self::new(HistoryConfig::default())
    }
}

impl SharedHistory {
    /// A new empty history.
    pub fn new(config: HistoryConfig) -> Self {
        Self::from_history(MemHistory::new(config))
    }

    /// Shares an existing history.
    pub fn from_history(history: MemHistory) -> Self {
        let modules = history.modules();
        let stacks = history.stacks();
        SharedHistory {
            inner: Arc::new(RwLock::new(history)),
            modules,
            stacks,
        }
    }

    /// The module table (no lock needed: it has its own).
    pub fn modules(&self) -> Arc<ModuleTable> {
        Arc::clone(&self.modules)
    }

    /// The stack table (no lock needed: it has its own).
    pub fn stacks(&self) -> Arc<StackTable> {
        Arc::clone(&self.stacks)
    }

    /// Feeds one event (takes the write lock).
    pub fn ingest(&self, event: &Event) {
        self.inner.write().ingest(event);
    }

    /// Feeds a batch of events under one write lock.
    pub fn ingest_batch(&self, events: &[Event]) {
        self.inner.write().ingest_batch(events);
    }

    /// Read access to the whole history (hold it briefly: the feeder waits meanwhile).
    pub fn read(&self) -> RwLockReadGuard<'_, MemHistory> {
        self.inner.read()
    }

    /// Write access (for `process_exited`, `set_source_stat`, ...).
    pub fn write(&self) -> RwLockWriteGuard<'_, MemHistory> {
        self.inner.write()
    }

    /// Records a source counter (see [`MemHistory::set_source_stat`]).
    pub fn set_source_stat(&self, name: &str, value: u64) {
        self.inner.write().set_source_stat(name, value);
    }

    /// Owned [`MemHistory::hotspots`].
    pub fn hotspots(&self, n: usize) -> Vec<AllocationInfo> {
        self.read().hotspots(n).iter().map(|v| v.info()).collect()
    }

    /// Owned [`MemHistory::coldspots`].
    pub fn coldspots(&self, n: usize) -> Vec<AllocationInfo> {
        self.read().coldspots(n).iter().map(|v| v.info()).collect()
    }

    /// Owned [`MemHistory::hotspots_threshold`].
    pub fn hotspots_threshold(&self, min: u64) -> Vec<AllocationInfo> {
        self.read()
            .hotspots_threshold(min)
            .iter()
            .map(|v| v.info())
            .collect()
    }

    /// Owned [`MemHistory::coldspots_threshold`].
    pub fn coldspots_threshold(&self, max: u64) -> Vec<AllocationInfo> {
        self.read()
            .coldspots_threshold(max)
            .iter()
            .map(|v| v.info())
            .collect()
    }

    /// Owned [`MemHistory::lookup`].
    pub fn lookup(&self, pid: u32, addr: u64) -> Option<AllocationInfo> {
        self.read().lookup(pid, addr).map(|v| v.info())
    }

    /// A copy of the history as it is now.
    pub fn snapshot(&self) -> MemHistory {
        self.read().clone()
    }
}
