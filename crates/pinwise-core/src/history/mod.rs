//! `MemHistory`: the life of every host allocation, built from a stream of [`Event`]s.
//!
//! One record per allocation ([`AllocationView`] reads it), keyed by (pid, address): the
//! tracer follows child processes, and an address reused after a free starts a new record.
//! A transfer whose host pointer falls anywhere inside a live allocation is attributed to
//! it; a transfer into memory whose allocation was never seen gets an implicit
//! [`AllocKind::Untracked`] record covering the addresses transfers used.
//!
//! Memory stays small and bounded:
//! - a record is 32 bytes (`record.rs`);
//! - events are stored delta-encoded, 5-8 bytes for a typical transfer (`codec.rs`), in a
//!   chunked arena shared by all records (`arena.rs`); at most
//!   [`HistoryConfig::max_events_per_allocation`] are retained per allocation, and counters
//!   stay exact past that (kept in a side table for the capped records only);
//! - live allocations have an entry in a per-process address index (for interior pointers
//!   and the append position of their events), dropped when they end;
//! - hotspot and coldspot queries use a tournament tree over the transfer counts (`rank.rs`).
//!
//! [`MemHistory`] is single-threaded; [`SharedHistory`] lets one thread feed it while
//! others query.

mod arena;
pub(crate) mod codec;
mod counters;
mod live;
mod query;
mod rank;
pub(crate) mod record;
mod restore;
mod shared;
mod store;
pub(crate) mod tables;
mod view;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::event::{Direction, Event, EventKind, HostState};
use crate::fingerprint::{CopyObservation, FingerprintStats, Redundancy, RedundancyTracker};
use crate::stack::{Frame, Stack, StackId, StackTable, Symbol, SymbolTable};
use crate::tag::{ModuleIdentity, ModuleTable, Site};
use live::{LiveEntry, Process};
use record::AllocRecord;
use store::{Capped, Store};
use tables::{EventTables, FxMap, SlotKey};

pub use codec::{Recorded, RecordedEvent};
pub use counters::{DirectionCounters, TransferCounters};
pub use query::{DirectionSummary, SavingEstimate, SiteAggregate, Summary};
pub use record::{AllocKind, AllocState, RecordId};
pub(crate) use restore::RestoredRecord;
pub use shared::SharedHistory;
pub use view::{AllocationInfo, AllocationView, EventIter};

/// Page size assumed when a pin event gives only a page count.
pub const PAGE_SIZE: u64 = 4096;

/// Settings of a history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryConfig {
    /// Events retained per allocation (at least 2: the allocation and its end are always
    /// kept). Counters stay exact however many events are dropped.
    pub max_events_per_allocation: u32,
    /// Whether transfers into memory whose allocation was never seen get an implicit
    /// `Untracked` record (else they are only counted in [`HistoryStats`]).
    pub track_untracked: bool,
}

impl Default for HistoryConfig {
    /// 1024 events per allocation (at most ~16 KiB each), untracked memory tracked.
    fn default() -> Self {
        HistoryConfig {
            max_events_per_allocation: 1024,
            track_untracked: true,
        }
    }
}

/// A process the history has seen events from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// Its pid.
    pub pid: u32,
    /// Timestamp of its first event.
    pub first_ts_ns: u64,
    /// Timestamp of its latest event.
    pub last_ts_ns: u64,
    /// When it exited, if [`MemHistory::process_exited`] was told.
    pub exit_ts_ns: Option<u64>,
}

/// Totals of one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirTotals {
    /// Transfers.
    pub transfers: u64,
    /// Bytes.
    pub bytes: u64,
}

impl DirTotals {
    fn add(&mut self, bytes: u64) {
        self.transfers += 1;
        self.bytes = self.bytes.saturating_add(bytes);
    }
}

/// The history's own bookkeeping: what it saw and what it could not attribute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryStats {
    /// Events given to [`MemHistory::ingest`].
    pub events_ingested: u64,
    /// Events stored in records.
    pub events_retained: u64,
    /// Events not stored because their allocation reached the cap (counted exactly).
    pub events_dropped_by_cap: u64,
    /// Records created.
    pub records: u64,
    /// Implicit records for memory whose allocation was never seen (untracked transfers,
    /// registrations of unknown memory).
    pub implicit_records: u64,
    /// Live records closed because a new allocation took their addresses.
    pub replaced_records: u64,
    /// Frees of addresses with no live allocation.
    pub unmatched_frees: u64,
    /// Pin, unpin, mmap, munmap and page-fault events in no live allocation, and untracked
    /// transfers when `track_untracked` is off.
    pub unattributed_events: u64,
    /// Every transfer seen, by direction (index: [`Direction::index`]).
    pub transfers: [DirTotals; 4],
    /// Transfers with no host memory (device to device, or a null host pointer).
    pub device_only_transfers: [DirTotals; 4],
}

/// Heap memory held by a history, by part (capacities, from the history's own accounting).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryUsage {
    /// The 32-byte records.
    pub records: usize,
    /// The event arena (whole chunks, headers and unused tails included).
    pub event_arena: usize,
    /// Bytes of encoded events in the arena.
    pub event_bytes_used: u64,
    /// The hotspot/coldspot index.
    pub rank_index: usize,
    /// Call sites, streams and (process, site) slots.
    pub tables: usize,
    /// Counters of capped records.
    pub capped_counters: usize,
    /// Live-address index entries (estimated: entry size times entries, B-tree overhead
    /// not included).
    pub live_index_estimate: usize,
}

impl MemoryUsage {
    /// Sum of the parts.
    pub fn total(&self) -> usize {
        self.records
            + self.event_arena
            + self.rank_index
            + self.tables
            + self.capped_counters
            + self.live_index_estimate
    }
}

/// The source statistic a source sets to 1 when the libcuda it saw was pinwise's CPU
/// stand-in (a test fixture): reports on such a history say no GPU moved its bytes.
pub const STANDIN_SOURCE_STAT: &str = "source.cuda_standin";

/// The source statistic a source sets to 1 when it attached to a process already running
/// (`pinwise trace --pid`): memory allocated before the attach was not seen, and its
/// pinned state is unknown unless the source says otherwise (reports say so).
pub const ATTACHED_SOURCE_STAT: &str = "source.attached";

/// Bytes the driver had pinned before the attach, as the attaching source found them
/// (`/dev/nvidiactl` mappings); copies of them are known to be of pinned memory.
pub const ATTACH_PINNED_BYTES_STAT: &str = "source.attach_pinned_bytes";

/// Bytes of shared anonymous memory (`/dev/zero (deleted)` mappings) the attaching source
/// found: how driver 580 and later map pinned host memory, and how a program's own
/// `MAP_SHARED` memory looks, so possibly pinned; copies of it are of unknown state.
pub const ATTACH_POSSIBLY_PINNED_BYTES_STAT: &str = "source.attach_possibly_pinned_bytes";

/// Set to 1 by an attaching source whose history still made records for memory whose
/// allocation it did not see (`track_untracked` on): those records count as pageable,
/// though the memory may have been pinned before the attach (reports say so).
pub const ATTACH_UNKNOWN_COUNTED_STAT: &str = "source.attach_unknown_counted";

/// The history of every host allocation seen. See the module documentation.
#[derive(Debug, Clone)]
pub struct MemHistory {
    config: HistoryConfig,
    modules: Arc<ModuleTable>,
    stacks: Arc<StackTable>,
    symbols: SymbolTable,
    processes: Vec<Process>,
    /// pid -> index of its current (not exited) process.
    pid_index: FxMap<u32, u32>,
    /// The last (pid, process index) looked up: events come in runs from one process.
    last_pid: Option<(u32, u32)>,
    store: Store,
    source_stats: BTreeMap<String, u64>,
    redundancy: RedundancyTracker,
}

impl Default for MemHistory {
    fn default() -> Self {
        Self::new(HistoryConfig::default())
    }
}

impl MemHistory {
    /// An empty history with its own module table.
    pub fn new(config: HistoryConfig) -> Self {
        Self::with_modules(config, ModuleTable::shared())
    }

    /// An empty history whose call sites refer to `modules` (a table the sources already
    /// intern into).
    pub fn with_modules(config: HistoryConfig, modules: Arc<ModuleTable>) -> Self {
        Self::with_tables(config, modules, StackTable::shared())
    }

    /// An empty history whose call sites refer to `modules` and whose events' stack ids
    /// refer to `stacks` (tables the sources already intern into).
    pub fn with_tables(
        config: HistoryConfig,
        modules: Arc<ModuleTable>,
        stacks: Arc<StackTable>,
    ) -> Self {
        let config = HistoryConfig {
            max_events_per_allocation: config.max_events_per_allocation.max(2),
            ..config
        };
        MemHistory {
            config,
            modules,
            stacks,
            symbols: SymbolTable::new(),
            processes: Vec::new(),
            pid_index: FxMap::default(),
            last_pid: None,
            store: Store::default(),
            source_stats: BTreeMap::new(),
            redundancy: RedundancyTracker::new(),
        }
    }

    /// The settings in force.
    pub fn config(&self) -> &HistoryConfig {
        &self.config
    }

    /// The module table call sites refer to; sources intern module identities here.
    pub fn modules(&self) -> Arc<ModuleTable> {
        Arc::clone(&self.modules)
    }

    /// The stack table events' stack ids refer to; sources intern stacks here.
    pub fn stacks(&self) -> Arc<StackTable> {
        Arc::clone(&self.stacks)
    }

    /// The stack behind `id` (from [`MemHistory::stacks`]).
    pub fn stack(&self, id: StackId) -> Option<Stack> {
        self.stacks.get(id)
    }

    /// The names of native call sites, as the source stored them when it ended.
    pub fn symbols(&self) -> &SymbolTable {
        &self.symbols
    }

    /// The name of a native call site, if stored.
    pub fn symbol(&self, site: Site) -> Option<&Symbol> {
        self.symbols.get(&site)
    }

    /// Stores (or replaces) the name of a native call site.
    pub fn set_symbol(&mut self, site: Site, symbol: Symbol) {
        self.symbols.insert(site, symbol);
    }

    /// Every native site the history refers to (allocation sites, event call sites, the
    /// native frames of its stacks), [`Site::UNKNOWN`] left out, in order.
    pub fn referenced_sites(&self) -> std::collections::BTreeSet<Site> {
        let mut out: std::collections::BTreeSet<Site> =
            self.store.tables.sites.items().iter().copied().collect();
        for stack in self.stacks.snapshot() {
            out.extend(stack.iter().filter_map(Frame::site));
        }
        out.remove(&Site::UNKNOWN);
        out
    }

    /// Names every referenced site that has no name yet: `resolve` gets a module and the
    /// sorted, distinct offsets of its sites, and returns one optional symbol per offset
    /// (a source calls this when its trace or run ends, with blazesym behind `resolve`).
    /// Returns how many sites were named.
    pub fn symbolize_with(
        &mut self,
        mut resolve: impl FnMut(&ModuleIdentity, &[u64]) -> Vec<Option<Symbol>>,
    ) -> usize {
        let mut by_module: BTreeMap<crate::tag::ModuleId, Vec<u64>> = BTreeMap::new();
        for site in self.referenced_sites() {
            if !self.symbols.contains_key(&site) {
                by_module.entry(site.module).or_default().push(site.offset);
            }
        }
        let mut named = 0;
        for (module, offsets) in by_module {
            let Some(identity) = self.modules.get(module) else {
                continue;
            };
            let names = resolve(&identity, &offsets);
            for (&offset, symbol) in offsets.iter().zip(names) {
                if let Some(symbol) = symbol {
                    self.symbols.insert(Site { module, offset }, symbol);
                    named += 1;
                }
            }
        }
        named
    }

    /// The index of the "user frame" of `frames` (see [`crate::stack::user_frame`]), with
    /// this history's module paths and stored names.
    pub fn user_frame(&self, frames: &[Frame]) -> Option<usize> {
        crate::stack::user_frame(
            frames,
            |m| self.modules.get(m).map(|i| i.path),
            |s| self.symbols.get(&s).map(|x| x.function.clone()),
        )
    }

    /// A frame named for people from what the history holds: `file.py:88 in fn` for a
    /// Python frame; `function (file.c:12)`, `function [module+0xoff]` or `module+0xoff`
    /// for a native one (file names without their directories).
    pub fn frame_label(&self, frame: &Frame) -> String {
        match frame {
            Frame::Python(p) => {
                let file = p.file.rsplit('/').next().unwrap_or(&p.file);
                format!("{file}:{} in {}", p.line, p.function)
            }
            Frame::Native(site) => self.site_label(*site),
        }
    }

    /// A native site named for people (see [`MemHistory::frame_label`]).
    pub fn site_label(&self, site: Site) -> String {
        let module = self
            .modules
            .get(site.module)
            .map(|m| m.path.rsplit('/').next().unwrap_or(&m.path).to_owned())
            .unwrap_or_else(|| "?".into());
        let at = format!("{module}+{:#x}", site.offset);
        match self.symbols.get(&site) {
            Some(Symbol {
                function,
                file: Some(file),
                line,
            }) => {
                let file = file.rsplit('/').next().unwrap_or(file);
                match line {
                    Some(l) => format!("{function} ({file}:{l})"),
                    None => format!("{function} ({file})"),
                }
            }
            Some(sym) => format!("{} [{at}]", sym.function),
            None => at,
        }
    }

    /// The history's own bookkeeping.
    pub fn stats(&self) -> &HistoryStats {
        &self.store.stats
    }

    /// Number of records (allocations, implicit ones included).
    pub fn len(&self) -> usize {
        self.store.records.len()
    }

    /// Whether there is no record.
    pub fn is_empty(&self) -> bool {
        self.store.records.is_empty()
    }

    /// Number of live records.
    pub fn live_count(&self) -> usize {
        self.processes.iter().map(|p| p.live.len()).sum()
    }

    /// The processes seen, in order of first event.
    pub fn processes(&self) -> impl Iterator<Item = &ProcessInfo> + '_ {
        self.processes.iter().map(|p| &p.info)
    }

    /// Counters a source keeps about itself (ring-buffer drops, lost events, ...), by name.
    pub fn source_stats(&self) -> &BTreeMap<String, u64> {
        &self.source_stats
    }

    /// Records (or replaces) one source counter, e.g. `("tracer.ringbuf_drops", 3)`.
    pub fn set_source_stat(&mut self, name: &str, value: u64) {
        self.source_stats.insert(name.to_owned(), value);
    }

    /// The redundant-transfer tracker: fingerprinted copies compared (see
    /// [`crate::fingerprint`]).
    pub fn redundancy(&self) -> &RedundancyTracker {
        &self.redundancy
    }

    /// The tracker, to change (sources set the fingerprint mode and count copies they could
    /// not fingerprint; readers restore it).
    pub fn redundancy_mut(&mut self) -> &mut RedundancyTracker {
        &mut self.redundancy
    }

    /// How fingerprinting went (mode, copies, measured error of the sampled fingerprint).
    pub fn fingerprint_stats(&self) -> &FingerprintStats {
        self.redundancy.stats()
    }

    /// The redundancy found in a record's copies, when any of them was fingerprinted.
    pub fn record_redundancy(&self, id: RecordId) -> Option<&Redundancy> {
        self.redundancy.record(id.0)
    }

    /// Records (or replaces) several source counters.
    pub fn set_source_stats<K: Into<String>>(&mut self, stats: impl IntoIterator<Item = (K, u64)>) {
        for (k, v) in stats {
            self.source_stats.insert(k.into(), v);
        }
    }

    /// Heap memory held, by part.
    pub fn memory_usage(&self) -> MemoryUsage {
        let s = &self.store;
        MemoryUsage {
            records: s.records.heap_bytes(),
            event_arena: s.arena.heap_bytes(),
            event_bytes_used: s.arena.used_bytes(),
            rank_index: s.rank.heap_bytes(),
            tables: s.tables.sites.heap_bytes()
                + s.tables.streams.heap_bytes()
                + s.slots.heap_bytes(),
            capped_counters: s.capped.capacity() * (std::mem::size_of::<(u32, Capped)>() + 1),
            live_index_estimate: self.live_count()
                * (std::mem::size_of::<(u64, LiveEntry)>() + 1 + 2 * std::mem::size_of::<u64>()),
        }
    }

    /// Feeds a batch of events, in order.
    pub fn ingest_batch(&mut self, events: &[Event]) {
        for e in events {
            self.ingest(e);
        }
    }

    /// Feeds one event.
    pub fn ingest(&mut self, ev: &Event) {
        self.store.stats.events_ingested += 1;
        let p = self.process_for(ev.pid, ev.ts_ns);
        match ev.kind {
            EventKind::Alloc {
                start,
                size,
                kind,
                flags,
            } => self.on_alloc(p, ev, start, size, kind.into(), flags),
            EventKind::Free { start } => self.on_free(p, ev, start),
            EventKind::PinPages {
                start,
                bytes,
                pages,
            } => self.on_pin(p, ev, start, bytes, pages),
            EventKind::UnpinPages { start, pages } => self.on_unpin(p, ev, start, pages),
            EventKind::Transfer {
                direction,
                host,
                bytes,
                is_async,
                stream,
                host_state,
                ..
            } => {
                let what = Recorded::Transfer {
                    direction,
                    bytes,
                    host,
                    is_async,
                    stream,
                    pinned: false,
                    reported: host_state,
                };
                self.on_transfer(p, ev, what)
            }
            EventKind::Mmap { start, len } => {
                self.on_os_event(p, ev, start, Recorded::Mmap { start, len })
            }
            EventKind::Munmap { start, len } => self.on_munmap(p, ev, start, len),
            EventKind::PageFault { addr } => {
                self.on_os_event(p, ev, addr, Recorded::PageFault { addr })
            }
        }
    }

    /// Tells the history that process `pid` exited at `ts_ns`: its live allocations end
    /// (state `EXITED`), and later events from the same pid belong to a new process.
    /// Returns whether the pid was known.
    pub fn process_exited(&mut self, pid: u32, ts_ns: u64) -> bool {
        let Some(p) = self.pid_index.remove(&pid) else {
            return false;
        };
        self.last_pid = None;
        let proc_ = &mut self.processes[p as usize];
        proc_.info.exit_ts_ns = Some(ts_ns);
        proc_.info.last_ts_ns = proc_.info.last_ts_ns.max(ts_ns);
        for entry in proc_.drain() {
            self.store.records[entry.record as usize].set_state(AllocState::Exited);
        }
        true
    }

    #[inline]
    fn process_for(&mut self, pid: u32, ts: u64) -> usize {
        let index = match self.last_pid {
            Some((last, i)) if last == pid => i as usize,
            _ => {
                let i = match self.pid_index.get(&pid) {
                    Some(&i) => i as usize,
                    None => {
                        let i = self.processes.len();
                        self.processes.push(Process::new(ProcessInfo {
                            pid,
                            first_ts_ns: ts,
                            last_ts_ns: ts,
                            exit_ts_ns: None,
                        }));
                        self.pid_index.insert(pid, i as u32);
                        i
                    }
                };
                self.last_pid = Some((pid, i as u32));
                i
            }
        };
        let info = &mut self.processes[index].info;
        info.first_ts_ns = info.first_ts_ns.min(ts);
        info.last_ts_ns = info.last_ts_ns.max(ts);
        index
    }

    fn recorded(ev: &Event, what: Recorded) -> RecordedEvent {
        RecordedEvent {
            ts_ns: ev.ts_ns,
            probe: ev.probe,
            site: ev.site,
            what,
        }
    }

    fn slot_for(&mut self, p: usize, site: Option<Site>) -> u32 {
        let site = self
            .store
            .tables
            .sites
            .intern(site.unwrap_or(Site::UNKNOWN));
        self.store.slots.intern(SlotKey {
            process: p as u32,
            site,
        })
    }

    /// Ends every live record of process `p` overlapping `[start, end)` with `state`.
    fn close_overlapping(&mut self, p: usize, start: u64, end: u64, state: AllocState) {
        let proc_ = &mut self.processes[p];
        for k in proc_.overlapping(start, end) {
            if let Some(e) = proc_.remove(k) {
                self.store.records[e.record as usize].set_state(state);
                if state == AllocState::Replaced {
                    self.store.stats.replaced_records += 1;
                }
            }
        }
    }

    fn on_alloc(
        &mut self,
        p: usize,
        ev: &Event,
        start: u64,
        size: u64,
        kind: AllocKind,
        flags: u32,
    ) {
        let slot = self.slot_for(p, ev.site);
        let call_no = self.store.slots.next_call(slot);
        let end = start.saturating_add(size);
        self.close_overlapping(p, start, end, AllocState::Replaced);
        let mut entry = self
            .store
            .new_record(AllocRecord::new(start, size, kind, slot, call_no));
        self.store.set_stack(entry.record, ev.stack);
        let cap = self.config.max_events_per_allocation;
        self.store.append(
            &mut entry,
            &Self::recorded(ev, Recorded::Alloc { flags }),
            true,
            cap,
        );
        self.processes[p].insert(start, entry);
    }

    fn on_free(&mut self, p: usize, ev: &Event, start: u64) {
        let Some(mut entry) = self.processes[p].remove(start) else {
            self.store.stats.unmatched_frees += 1;
            return;
        };
        let cap = self.config.max_events_per_allocation;
        self.store
            .append(&mut entry, &Self::recorded(ev, Recorded::Free), true, cap);
        self.store.records[entry.record as usize].set_state(AllocState::Freed);
    }

    /// Makes an implicit record over `[start, end)` (clipped before the next live one);
    /// returns its start.
    fn implicit_record(&mut self, p: usize, ev: &Event, start: u64, end: u64, kind: AllocKind) {
        // A zero-sized allocation at `start` contains nothing but holds the key.
        self.close_overlapping(p, start, start, AllocState::Replaced);
        let end = end
            .min(self.processes[p].next_start_after(start))
            .max(start.saturating_add(1));
        let slot = self.slot_for(p, ev.site);
        let entry = self
            .store
            .new_record(AllocRecord::new(start, end - start, kind, slot, 0));
        self.store.set_stack(entry.record, ev.stack);
        self.store.stats.implicit_records += 1;
        self.processes[p].insert(start, entry);
    }

    fn on_pin(&mut self, p: usize, ev: &Event, start: u64, bytes: u64, pages: Option<u64>) {
        let len = if bytes > 0 {
            bytes
        } else {
            pages.unwrap_or(0).saturating_mul(PAGE_SIZE)
        };
        let key = match self.processes[p].containing(start) {
            Some(k) => k,
            None if len == 0 => {
                self.store.stats.unattributed_events += 1;
                return;
            }
            None => {
                self.implicit_record(
                    p,
                    ev,
                    start,
                    start.saturating_add(len),
                    AllocKind::Registered,
                );
                start
            }
        };
        let cap = self.config.max_events_per_allocation;
        let what = Recorded::PinPages {
            start,
            bytes,
            pages,
        };
        let entry = self.processes[p]
            .live
            .get_mut(&key)
            .expect("a live entry contains the pinned address");
        let pin_end = if len > 0 {
            start.saturating_add(len).min(entry.end)
        } else {
            entry.end
        };
        if entry.pin_end > entry.pin_start {
            // Several pinned ranges: keep their hull.
            entry.pin_start = entry.pin_start.min(start);
            entry.pin_end = entry.pin_end.max(pin_end);
        } else {
            entry.pin_start = start;
            entry.pin_end = pin_end;
        }
        self.store.records[entry.record as usize].set_pinned_seen();
        self.store
            .append(entry, &Self::recorded(ev, what), false, cap);
    }

    fn on_unpin(&mut self, p: usize, ev: &Event, start: u64, pages: Option<u64>) {
        let cap = self.config.max_events_per_allocation;
        let what = Self::recorded(ev, Recorded::UnpinPages { start, pages });
        let Some(key) = self.processes[p].containing(start) else {
            self.store.stats.unattributed_events += 1;
            return;
        };
        let entry = self.processes[p]
            .live
            .get_mut(&key)
            .expect("containing() returned a live start");
        if entry.pin_start <= start && start < entry.pin_end {
            entry.pin_start = 0;
            entry.pin_end = 0;
        }
        self.store.append(entry, &what, false, cap);
    }

    /// `what` is the transfer with `pinned` still to be decided.
    #[inline]
    fn on_transfer(&mut self, p: usize, ev: &Event, mut what: Recorded) {
        let Recorded::Transfer {
            direction,
            bytes,
            host,
            ref mut pinned,
            reported,
            ..
        } = what
        else {
            return;
        };
        self.store.stats.transfers[direction.index()].add(bytes);
        let device = match ev.kind {
            EventKind::Transfer { device, .. } => device,
            _ => 0,
        };
        if direction == Direction::DtoD && device != 0 {
            // Written by a copy whose bytes are not fingerprinted: what was known is stale.
            self.redundancy
                .invalidate_device(self.processes[p].info.pid, device, bytes);
        }
        if host == 0 || direction == Direction::DtoD {
            self.store.stats.device_only_transfers[direction.index()].add(bytes);
            return;
        }
        let end = host.saturating_add(bytes.max(1));
        let key = match self.processes[p].containing(host) {
            Some(k) => k,
            None if !self.config.track_untracked => {
                self.store.stats.unattributed_events += 1;
                return;
            }
            None => {
                self.implicit_record(p, ev, host, end, AllocKind::Untracked);
                host
            }
        };
        let Process { live, ranges, .. } = &mut self.processes[p];
        let entry = live
            .get_mut(&key)
            .expect("containing() returned a live start");
        let record = entry.record;
        let kind = self.store.records[record as usize].kind();
        if kind == AllocKind::Untracked && end > entry.end {
            // Untracked memory: the record grows to cover what transfers touch, up to the
            // next live allocation.
            let next = ranges
                .range(host.saturating_add(1)..)
                .next()
                .map_or(u64::MAX, |(&k, _)| k);
            entry.end = end.min(next).max(entry.end);
            ranges.insert(key, entry.end);
            self.store.records[record as usize].set_size(entry.end - key);
        }
        *pinned = match reported {
            HostState::Pinned => true,
            HostState::Pageable => false,
            HostState::Unknown => kind.pinned_from_start() || entry.pinned_covers(host, bytes),
        };
        let cap = self.config.max_events_per_allocation;
        self.store.count_transfer(record);
        self.store
            .append(entry, &Self::recorded(ev, what), false, cap);
        if let Some(fingerprint) = ev.fingerprint {
            if device != 0 {
                self.redundancy.observe(&CopyObservation {
                    pid: ev.pid,
                    record,
                    host_offset: host - key,
                    device,
                    bytes,
                    direction,
                    fingerprint,
                });
            }
        }
    }

    fn on_os_event(&mut self, p: usize, ev: &Event, addr: u64, what: Recorded) {
        let cap = self.config.max_events_per_allocation;
        let Some(key) = self.processes[p].containing(addr) else {
            self.store.stats.unattributed_events += 1;
            return;
        };
        let entry = self.processes[p]
            .live
            .get_mut(&key)
            .expect("containing() returned a live start");
        self.store
            .append(entry, &Self::recorded(ev, what), false, cap);
    }

    fn on_munmap(&mut self, p: usize, ev: &Event, start: u64, len: u64) {
        let end = start.saturating_add(len);
        let cap = self.config.max_events_per_allocation;
        let what = Self::recorded(ev, Recorded::Munmap { start, len });
        let proc_ = &mut self.processes[p];
        let keys = proc_.overlapping(start, end);
        if keys.is_empty() {
            self.store.stats.unattributed_events += 1;
            return;
        }
        for k in keys {
            let inside = start <= k && proc_.ranges.get(&k).is_some_and(|&e| e <= end);
            if inside {
                let mut e = proc_.remove(k).expect("key just listed");
                self.store.append(&mut e, &what, true, cap);
                self.store.records[e.record as usize].set_state(AllocState::Unmapped);
            } else if let Some(e) = proc_.live.get_mut(&k) {
                self.store.append(e, &what, false, cap);
            }
        }
    }

    // ----- read access used by views, queries and formats -----

    pub(crate) fn record(&self, id: RecordId) -> Option<&AllocRecord> {
        self.store.records.get(id.0 as usize)
    }

    pub(crate) fn slot_key(&self, slot: u32) -> SlotKey {
        self.store.slots.key(slot)
    }

    pub(crate) fn site_at(&self, index: u32) -> Site {
        self.store.tables.sites.get(index).unwrap_or(Site::UNKNOWN)
    }

    pub(crate) fn process_info(&self, index: u32) -> &ProcessInfo {
        &self.processes[index as usize].info
    }

    pub(crate) fn record_events(&self, id: RecordId) -> EventIter<'_> {
        self.store.events(id.0)
    }

    pub(crate) fn record_counters(&self, id: RecordId) -> TransferCounters {
        self.store.counters(id.0)
    }

    pub(crate) fn record_stack(&self, id: RecordId) -> Option<StackId> {
        self.record(id)?.stack
    }

    pub(crate) fn record_dropped(&self, id: RecordId) -> u64 {
        self.store.capped.get(&id.0).map_or(0, |c| c.dropped)
    }

    pub(crate) fn event_tables(&self) -> &EventTables {
        &self.store.tables
    }

    /// Encoded events of a record, exactly (for the binary dump).
    pub(crate) fn record_event_bytes(&self, id: RecordId) -> Vec<u8> {
        use crate::varint::ByteSource;
        let mut it = self.store.events(id.0);
        while it.next().is_some() {}
        let len = it.bytes_read();
        let mut reader = self.store.arena.reader(id.0);
        (0..len).filter_map(|_| reader.next_byte()).collect()
    }

    /// Live records with a mark of everything their dump snapshot holds that can still
    /// change (events, size, state, flags, counters), sorted by record: an appendable dump
    /// writes a live record again only when its mark moved.
    pub(crate) fn live_record_marks(&self) -> Vec<(u32, LiveMark)> {
        let mut marks: Vec<(u32, LiveMark)> = self
            .processes
            .iter()
            .flat_map(|p| {
                p.live.values().map(|e| {
                    let r = &self.store.records[e.record as usize];
                    let mark = LiveMark {
                        events: e.events,
                        last_ts: e.last_ts,
                        dropped: self.record_dropped(RecordId(e.record)),
                        start: r.start(),
                        size_flags: r.size_flags(),
                        transfers: r.transfers,
                        stack: r.stack.map_or(0, |s| s.index() as u64 + 1),
                    };
                    (e.record, mark)
                })
            })
            .collect();
        marks.sort_unstable_by_key(|m| m.0);
        marks
    }

    pub(crate) fn rank_top(&self, n: usize) -> Vec<usize> {
        let r = &self.store.records;
        self.store.rank.top(n, |i| r[i].transfers)
    }

    pub(crate) fn rank_bottom(&self, n: usize) -> Vec<usize> {
        let r = &self.store.records;
        self.store.rank.bottom(n, |i| r[i].transfers)
    }

    pub(crate) fn rank_at_least(&self, min: u32) -> Vec<usize> {
        let r = &self.store.records;
        self.store.rank.at_least(min, |i| r[i].transfers)
    }

    pub(crate) fn rank_at_most(&self, max: u32) -> Vec<usize> {
        let r = &self.store.records;
        self.store.rank.at_most(max, |i| r[i].transfers)
    }

    /// Compares a copy whose fingerprint became known only after its transfer event was
    /// ingested (an asynchronous download, hashed once its stream reached it) with what the
    /// redundancy tracker knows, as if it had carried the fingerprint. The source must make
    /// sure that no copy touching its host or device range was ingested in between (else
    /// the order of the comparisons is wrong: drop the fingerprint instead). `ts` is the
    /// copy's own timestamp. Returns `false` when `host` is no longer in a live allocation
    /// of `pid`, or in one that came to be known after the copy (its memory was freed and
    /// allocated again meanwhile): nothing compared.
    #[allow(clippy::too_many_arguments)]
    pub fn observe_late_fingerprint(
        &mut self,
        pid: u32,
        host: u64,
        device: u64,
        bytes: u64,
        direction: Direction,
        ts: u64,
        fingerprint: crate::fingerprint::Fingerprint,
    ) -> bool {
        let Some(p) = self
            .pid_index
            .get(&pid)
            .map(|&p| &self.processes[p as usize])
        else {
            return false;
        };
        let Some(key) = p.containing(host) else {
            return false;
        };
        let Some(record) = p.live.get(&key).map(|e| e.record) else {
            return false;
        };
        if device == 0 {
            return false;
        }
        let known_since = self
            .record_events(RecordId(record))
            .next()
            .map_or(0, |e| e.ts_ns);
        if known_since > ts {
            return false;
        }
        self.redundancy.observe(&CopyObservation {
            pid,
            record,
            host_offset: host - key,
            device,
            bytes,
            direction,
            fingerprint,
        });
        true
    }

    /// The live record of process `pid` containing `addr`.
    pub(crate) fn live_record_at(&self, pid: u32, addr: u64) -> Option<u32> {
        let p = &self.processes[*self.pid_index.get(&pid)? as usize];
        let key = p.containing(addr)?;
        p.live.get(&key).map(|e| e.record)
    }
}

/// What an appendable dump remembers of a live record it wrote (see
/// [`MemHistory::live_record_marks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LiveMark {
    events: u32,
    last_ts: u64,
    dropped: u64,
    start: u64,
    size_flags: u64,
    transfers: u32,
    stack: u64,
}
