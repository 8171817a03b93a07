//! The engine: decides, per allocation, pinned or pageable, and serves it.
//!
//! It works on raw pointers, call sites and flags, so that the Rust API
//! ([`crate::HostAllocator`]), the C ABI and the preload library all drive the same code.
//! One `Engine` is one allocator instance; there is no global state.
//!
//! For each allocation the engine
//! 1. derives the tag (call site + call number at that site),
//! 2. gathers the facts pinwise-core's rules decide on ([`pinwise_core::decide::rules::serve`]):
//!    the caller's flags (pinned required?), the advice of a profile (use mode; only where
//!    the tag and size match and the site has not proved the advice wrong), and otherwise
//!    the site's pattern-history predictor (adaptive behaviour), weighing the predicted
//!    saving against what pinning would cost *now*, as
//!    [`pinwise_core::decide::pricing::price`] prices it (nothing when a pooled block is
//!    free; registering a warm mapping when the pageable cache has one; else fresh memory
//!    the cheaper way; plus holding it); a hot site also buys a block once the copies its
//!    hot allocations made on pageable memory would have paid for it (ski rental per call
//!    site, [`pinwise_core::decide::rules::pays_now`]),
//! 3. serves it from the pinned pool (within the budget) or the pageable path; any failure
//!    to pin falls back to pageable memory and is counted. A pinned block is a free block
//!    of its grade, or a new segment; a larger idle block is carved for pinwise's own
//!    allocation only where it is spare (`carve_limit`), never taken from a hot buffer of
//!    another size that will want it back.
//!
//! Transfers are learned through [`Engine::note_transfer`]. A pageable mapping whose
//! transfers have already saved what registering it costs is registered in place
//! ("promoted", [`pinwise_core::decide::rules::promote`]): the ski-rental rule, never worse
//! than twice the best choice in hindsight.
//! When an allocation is freed its outcome (would pinning it have paid?) trains its site's
//! predictor.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use pinwise_core::decide::{ceiling, rules};
use pinwise_core::policy::PredictedTransfers;
use pinwise_core::{
    Direction, Event, EventKind, HostMemKind, HostState, Policy, ProbeKind, Site, Tag,
};
use rustc_hash::FxHashMap;

mod config;
mod decide;
mod serve;
mod streams;

pub use config::{Advice, Advised, AllocFlags, EngineConfig, EventSink, Mode};
use decide::SiteState;

use crate::backend::{EventHandle, PinBackend, StreamHandle};
use crate::budget::{default_budget_bytes, PinBudget};
use crate::callsite::InProcessSiteResolver;
use crate::demand::PoolDemand;
use crate::error::AllocError;
use crate::events::EventPool;
use crate::grade::PAGE;
use crate::pageable::{self, PageableCache};
use crate::pool::PinnedPool;
use crate::pressure::MemoryGauge;
use crate::stats::{AllocStats, Counters};

/// One allocation handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// First byte (page-aligned for pinned blocks and large pageable mappings). Its bytes
    /// are not zeroed (as `malloc`'s): reused memory holds what was written before, and
    /// small pageable memory from the heap is uninitialized.
    pub ptr: *mut u8,
    /// Bytes asked for.
    pub size: usize,
    /// Whether it was served page-locked.
    pub pinned: bool,
    /// Its identity: call site and call number.
    pub tag: Tag,
}

/// Where an allocation's memory came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// A block of the pinned pool.
    PoolBlock,
    /// Its own anonymous mapping (pageable, promotable).
    Mapping,
    /// The global heap (small pageable).
    Heap,
    /// Its own `cuMemHostAlloc` with non-default CUDA flags (not pooled).
    Dedicated,
}

/// Why memory that was wanted pinned was not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PinRefusal {
    /// The budget had no room (counted in `budget_refusals`).
    Budget,
    /// The driver refused (counted in `fallbacks`).
    Driver,
}

/// Most records of freed allocations kept for reuse.
const SPARE_LIVES: usize = 64;

/// State of a pageable mapping with respect to promotion.
const PAGEABLE: u8 = 0;
const PROMOTING: u8 = 1;
const PROMOTED: u8 = 2;
const NO_PROMOTION: u8 = 3;

/// Whether and how a profile's advice was followed for an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Planned {
    /// Not advised (not use mode, or the advice did not match).
    No,
    /// The advice said pin, and it was followed.
    Pin,
    /// The advice said pageable, and it was followed.
    Pageable,
}

/// The engine's record of a live allocation.
///
/// Laid out for the copy hooks ([`Engine::note_transfer`]): what a copy reads and counts
/// comes first, on the record's first cache line (it starts on a line), so that a
/// host-to-device or device-to-host copy touches that line alone.
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct Live {
    pub(crate) start: usize,
    pub(crate) size: usize,
    /// Transfers and bytes per direction (index [`Direction::index`]).
    transfers: [AtomicU32; 4],
    origin: Origin,
    /// For mappings: PAGEABLE, PROMOTING, PROMOTED or NO_PROMOTION.
    promotion: AtomicU8,
    /// The stream of the last asynchronous copy, known to be in `async_streams`
    /// ([`streams::LastStream`]): a copy on it skips `async_streams`' lock.
    last_stream: streams::LastStream,
    bytes: [AtomicU64; 4],
    /// Length of the block or mapping behind it.
    block_len: usize,
    pub(crate) tag: Tag,
    planned: Planned,
    /// A pool block lent as a spare (pinwise-core's `rules::is_spare`), not held for its own
    /// sake (see [`crate::demand`]).
    spare: bool,
    /// Streams with asynchronous copies on this allocation (deduplicated, small).
    async_streams: Mutex<Vec<StreamHandle>>,
}

// What a host-to-device or device-to-host copy touches (start, size, the counts, origin,
// promotion, the last stream, the byte counts of those two directions) lies on the first
// line.
const _: () = assert!(
    std::mem::align_of::<Live>() == 64
        && std::mem::offset_of!(Live, bytes) + 2 * std::mem::size_of::<AtomicU64>() <= 64
);

impl Live {
    /// The transfers seen so far, as a prediction of "the same again".
    fn seen(&self) -> PredictedTransfers {
        let mut t = PredictedTransfers::none();
        for d in 0..4 {
            t.count[d] = self.transfers[d].load(Ordering::Relaxed) as f64;
            t.bytes[d] = self.bytes[d].load(Ordering::Relaxed) as f64;
        }
        t
    }

    /// Whether its bytes are uninitialized (small pageable memory from the heap, which is
    /// not zeroed), so that the Rust API zeroes them before handing them out as `&[u8]`.
    pub(crate) fn needs_zeroing(&self) -> bool {
        self.origin == Origin::Heap
    }

    pub(crate) fn is_pinned(&self) -> bool {
        match self.origin {
            Origin::PoolBlock | Origin::Dedicated => true,
            Origin::Mapping => self.promotion.load(Ordering::Acquire) == PROMOTED,
            Origin::Heap => false,
        }
    }
}

/// What every copy hook on an engine allocation touches in the engine: the live map's lock
/// (a read lock writes its word) and root, the transfer counts, and the recorder (read), on
/// one cache line.
#[repr(C, align(64))]
struct Hot {
    live: RwLock<BTreeMap<usize, Arc<Live>>>,
    transfers_pinned: AtomicU64,
    transfers_pageable: AtomicU64,
    recorder: Option<Arc<dyn EventSink>>,
}

const _: () = assert!(std::mem::size_of::<Hot>() == 64);

/// The smart pinning allocator's engine. See the module documentation.
pub struct Engine {
    backend: Arc<dyn PinBackend>,
    mode: Mode,
    policy: Arc<Policy>,
    advice: Option<Arc<dyn Advice>>,
    budget: PinBudget,
    pool: Mutex<PinnedPool>,
    pageable: Mutex<PageableCache>,
    /// Whether the machine is short of memory (the pageable cache then empties).
    pressure: MemoryGauge,
    events: EventPool,
    /// The live allocations, and what each copy of one counts, on one cache line.
    hot: Hot,
    sites: Mutex<FxHashMap<Site, SiteState>>,
    /// Records of freed allocations kept for reuse (at most [`SPARE_LIVES`]): a record is
    /// cache-line aligned, and an aligned heap allocation and free per allocation cost more
    /// than the rest of the engine's bookkeeping at small sizes.
    spare_lives: Mutex<Vec<Arc<Live>>>,
    resolver: InProcessSiteResolver,
    counters: Counters,
    /// What the pool's blocks are wanted for (spare blocks are lent beyond it).
    demand: PoolDemand,
    min_segment: usize,
    history_bits: u8,
    huge_pages: bool,
    max_reuse_credit: u32,
    /// Bytes pinned outside the pool: promoted mappings and dedicated blocks.
    pinned_outside_pool: AtomicU64,
    pid: u32,
    shut_down: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("mode", &self.mode)
            .field("backend", &self.backend.describe())
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// An engine on `backend` with `config`.
    pub fn new(backend: Arc<dyn PinBackend>, config: EngineConfig) -> Result<Self, AllocError> {
        if config.mode == Mode::Use && config.advice.is_none() {
            return Err(AllocError::Config(
                "use mode needs advice (a profile); none was given".into(),
            ));
        }
        if config.mode == Mode::Profile && config.recorder.is_none() {
            return Err(AllocError::Config(
                "profile mode needs a recorder (where to write the profile); none was given".into(),
            ));
        }
        let budget = config.budget_bytes.unwrap_or_else(default_budget_bytes);
        // The cache of touched pageable mappings does not depend on the pinned budget: a
        // tight budget leaves more buffers pageable, and they are worth keeping touched.
        let cache = config
            .pageable_cache_bytes
            .unwrap_or_else(pageable::cache_bytes_from_env);
        Ok(Engine {
            backend,
            mode: config.mode,
            policy: config.policy,
            advice: config.advice,
            budget: PinBudget::new(budget),
            pool: Mutex::new(PinnedPool::new()),
            pageable: Mutex::new(PageableCache::new(cache)),
            pressure: MemoryGauge::system(config.low_memory_bytes),
            events: EventPool::new(),
            hot: Hot {
                live: RwLock::new(BTreeMap::new()),
                transfers_pinned: AtomicU64::new(0),
                transfers_pageable: AtomicU64::new(0),
                recorder: config.recorder,
            },
            sites: Mutex::new(FxHashMap::default()),
            spare_lives: Mutex::new(Vec::new()),
            resolver: InProcessSiteResolver::new(config.modules),
            counters: Counters::default(),
            demand: PoolDemand::new(),
            min_segment: config.min_segment_bytes.max(PAGE).next_multiple_of(PAGE),
            history_bits: config.history_bits,
            huge_pages: config.huge_pages,
            max_reuse_credit: config.max_reuse_credit.max(1),
            pinned_outside_pool: AtomicU64::new(0),
            pid: std::process::id(),
            shut_down: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn PinBackend> {
        &self.backend
    }

    /// The resolver that turns return addresses and source locations into sites.
    pub fn sites(&self) -> &InProcessSiteResolver {
        &self.resolver
    }

    /// The pinned budget.
    pub fn budget(&self) -> &PinBudget {
        &self.budget
    }

    /// A snapshot of the statistics.
    pub fn stats(&self) -> AllocStats {
        let pool = self.pool.lock();
        let pool_bytes = pool.segment_bytes() as u64;
        let pending = pool.pending_count() as u64;
        drop(pool);
        let cached = self.pageable.lock().cached_bytes() as u64;
        self.counters.snapshot(
            &self.budget,
            pool_bytes,
            self.pinned_outside_pool.load(Ordering::Relaxed),
            pending,
            cached,
            self.hot.live.read().len() as u64,
            [
                self.hot.transfers_pinned.load(Ordering::Relaxed),
                self.hot.transfers_pageable.load(Ordering::Relaxed),
            ],
        )
    }

    /// Allocates `size` bytes for call site `site`. Fails only when no memory at all can be
    /// had, or when `flags` require pinned memory and it cannot be pinned.
    pub fn alloc(
        &self,
        size: usize,
        site: Site,
        flags: AllocFlags,
    ) -> Result<Allocation, AllocError> {
        self.alloc_with_cuda_flags(size, site, flags, 0)
    }

    /// As [`Engine::alloc`], with CUDA host-allocation flags (`CU_MEMHOSTALLOC_*`) for a
    /// required pinned allocation: non-zero flags get a dedicated `cuMemHostAlloc` with them.
    pub fn alloc_with_cuda_flags(
        &self,
        size: usize,
        site: Site,
        flags: AllocFlags,
        cuda_flags: u32,
    ) -> Result<Allocation, AllocError> {
        if size == 0 {
            return Err(AllocError::ZeroSize);
        }
        if size > isize::MAX as usize / 2 {
            return Err(AllocError::TooLarge(size));
        }
        let required = flags.contains(AllocFlags::REQUIRE_PINNED);
        let request = is_request(flags);
        let graded = ceiling::block_size(size, request);
        let (tag, serve, planned) = self.decide(size, graded, site, flags);
        self.demand.tick();
        let spare = serve.basis == rules::Basis::SpareBlock;

        let mut served: Option<(usize, usize, Origin)> = None;
        if spare {
            // Only the spare block itself: never a new segment for it.
            served = self.take_spare_block(graded);
        } else if serve.pinned {
            let r = if required && cuda_flags != 0 {
                self.alloc_dedicated(graded, cuda_flags)
            } else {
                self.alloc_pinned_block(graded, request)
            };
            match r {
                Ok(s) => served = Some(s),
                Err(_) if required => return Err(AllocError::PinningUnavailable { size }),
                // Counted as a budget refusal where the budget refused.
                Err(PinRefusal::Budget) => {}
                Err(PinRefusal::Driver) => {
                    self.counters.fallbacks.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let planned = if served.is_none() && planned == Planned::Pin {
            Planned::No
        } else {
            planned
        };
        let (start, len, origin) = match served {
            Some(s) => s,
            None => self.alloc_pageable(size)?,
        };
        let spare = spare && origin == Origin::PoolBlock;
        if origin == Origin::PoolBlock {
            if spare {
                self.demand.lend(len as u64);
            } else {
                self.demand.hold(len as u64);
            }
        }
        let record = Live {
            start,
            size,
            block_len: len,
            tag,
            origin,
            planned,
            spare,
            promotion: AtomicU8::new(
                if origin == Origin::Mapping
                    && !flags.contains(AllocFlags::NEVER_PIN)
                    && !flags.contains(AllocFlags::EARN_PINNED)
                {
                    PAGEABLE
                } else {
                    NO_PROMOTION
                },
            ),
            transfers: Default::default(),
            bytes: Default::default(),
            last_stream: streams::LastStream::new(),
            async_streams: Mutex::new(Vec::new()),
        };
        let live = self.live_record(record);
        let pinned = live.is_pinned();
        self.hot.live.write().insert(start, live);
        self.counters.allocations.fetch_add(1, Ordering::Relaxed);
        if pinned {
            self.counters
                .pinned_allocations
                .fetch_add(1, Ordering::Relaxed);
        }
        self.emit(
            Some(site),
            EventKind::Alloc {
                start: start as u64,
                size: size as u64,
                kind: if pinned {
                    HostMemKind::PinnedAlloc
                } else {
                    HostMemKind::Pageable
                },
                flags: cuda_flags,
            },
        );
        Ok(Allocation {
            ptr: start as *mut u8,
            size,
            pinned,
            tag,
        })
    }

    /// Frees an allocation made by this engine. A pointer it did not hand out is an error
    /// and nothing is touched.
    ///
    /// # Safety
    /// The memory is not used after this call (asynchronous copies recorded through
    /// [`Engine::note_transfer`] may still be in flight: the engine waits for them).
    pub unsafe fn free(&self, ptr: *mut u8) -> Result<(), AllocError> {
        let live = self
            .hot
            .live
            .write()
            .remove(&(ptr as usize))
            .ok_or(AllocError::UnknownPointer(ptr as usize))?;
        self.release(&live);
        self.keep_record(live);
        Ok(())
    }

    /// `record` in a reference-counted allocation: a spare one of a freed allocation if
    /// there is one, else a new one.
    fn live_record(&self, record: Live) -> Arc<Live> {
        let spare = self.spare_lives.lock().pop();
        match spare {
            Some(mut a) => match Arc::get_mut(&mut a) {
                Some(slot) => {
                    *slot = record;
                    a
                }
                // Only unique records are kept (see `keep_record`).
                None => Arc::new(record),
            },
            None => Arc::new(record),
        }
    }

    /// Keeps a freed allocation's record for reuse when nothing else refers to it any more
    /// (a copy being noted on another thread may still hold it: then it is dropped).
    fn keep_record(&self, mut live: Arc<Live>) {
        if Arc::get_mut(&mut live).is_some() {
            let mut spare = self.spare_lives.lock();
            if spare.len() < SPARE_LIVES {
                spare.push(live);
            }
        }
    }

    /// Frees a live allocation the caller holds (a [`crate::HostBuffer`] being dropped).
    pub(crate) fn free_live(&self, live: &Arc<Live>) {
        let removed = self.hot.live.write().remove(&live.start);
        debug_assert!(removed.is_some_and(|r| Arc::ptr_eq(&r, live)));
        self.release(live);
    }

    pub(crate) fn live_of(&self, ptr: usize) -> Option<Arc<Live>> {
        self.hot.live.read().get(&ptr).cloned()
    }

    /// The size asked for the live allocation starting at `ptr`, and whether it is pinned now.
    pub fn lookup(&self, ptr: *const u8) -> Option<(usize, bool)> {
        self.hot
            .live
            .read()
            .get(&(ptr as usize))
            .map(|l| (l.size, l.is_pinned()))
    }

    /// Notes a copy of `bytes` between the allocation containing `ptr` and the device, on
    /// `stream` when asynchronous. Call it just before issuing the copy: a pageable mapping
    /// whose transfers already paid for registering it is promoted first, so this copy runs
    /// pinned. Returns whether the host side is pinned for the copy; `None` when `ptr` is in
    /// no allocation of this engine.
    pub fn note_transfer(
        &self,
        ptr: *const u8,
        bytes: usize,
        direction: Direction,
        stream: Option<StreamHandle>,
    ) -> Option<bool> {
        let addr = ptr as usize;
        let map = self.hot.live.read();
        let (_, l) = map.range(..=addr).next_back()?;
        if addr >= l.start + l.size.max(1) {
            return None;
        }
        if l.origin == Origin::Mapping {
            // It may be promoted now: outside the lock, through a reference of its own.
            let live = l.clone();
            drop(map);
            return Some(self.note_transfer_on(&live, addr, bytes, direction, stream));
        }
        // Nothing to promote (only mappings are): counted under the read lock without
        // taking and dropping a reference (two atomic writes); the event goes out after
        // the lock is released.
        Self::count_transfer(l, bytes, direction, stream);
        let pinned = l.is_pinned();
        drop(map);
        self.transfer_noted(addr, bytes, direction, stream, pinned);
        Some(pinned)
    }

    pub(crate) fn note_transfer_on(
        &self,
        live: &Live,
        host: usize,
        bytes: usize,
        direction: Direction,
        stream: Option<StreamHandle>,
    ) -> bool {
        Self::count_transfer(live, bytes, direction, stream);
        // Ski rental: register a pageable mapping in place once pinwise-core's promotion
        // rule says its copies paid for it.
        if live.origin == Origin::Mapping
            && live.promotion.load(Ordering::Acquire) == PAGEABLE
            && rules::promote(
                &self.policy,
                &live.seen(),
                live.block_len as u64,
                self.budget.reserved().saturating_add(live.block_len as u64),
                self.budget.cap(),
            )
        {
            self.promote(live);
        }
        let pinned = live.is_pinned();
        self.transfer_noted(host, bytes, direction, stream, pinned);
        pinned
    }

    /// A transfer's counts on its allocation, and the stream an asynchronous one used.
    #[inline]
    fn count_transfer(
        live: &Live,
        bytes: usize,
        direction: Direction,
        stream: Option<StreamHandle>,
    ) {
        let d = direction.index();
        live.transfers[d].fetch_add(1, Ordering::Relaxed);
        live.bytes[d].fetch_add(bytes as u64, Ordering::Relaxed);
        if let Some(s) = stream {
            live.note_stream(s);
        }
    }

    /// A transfer's engine-wide count and event (no engine lock held).
    #[inline]
    fn transfer_noted(
        &self,
        host: usize,
        bytes: usize,
        direction: Direction,
        stream: Option<StreamHandle>,
        pinned: bool,
    ) {
        if pinned {
            self.hot.transfers_pinned.fetch_add(1, Ordering::Relaxed);
        } else {
            self.hot.transfers_pageable.fetch_add(1, Ordering::Relaxed);
        }
        self.emit(
            None,
            EventKind::Transfer {
                direction,
                host: host as u64,
                device: 0,
                bytes: bytes as u64,
                is_async: stream.is_some(),
                stream: stream.map_or(0, |s| s.0),
                host_state: if pinned {
                    HostState::Pinned
                } else {
                    HostState::Pageable
                },
            },
        );
    }

    /// The program is destroying `stream` (its handle is dead once the driver call returns,
    /// and the real driver may crash if it is passed again): waits for its work if a live
    /// allocation was copied on it asynchronously (its block must not be reused before those
    /// copies end), then forgets it, so that freeing those allocations later does not touch
    /// it. Returns whether any allocation had copies on it. Call it before forwarding the
    /// destruction, with no engine lock held.
    pub fn forget_stream(&self, stream: StreamHandle) -> bool {
        let holders: Vec<Arc<Live>> = self
            .hot
            .live
            .read()
            .values()
            .filter(|l| l.has_stream(stream))
            .cloned()
            .collect();
        if holders.is_empty() {
            return false;
        }
        let _ = self.backend.synchronize_stream(stream);
        for live in holders {
            live.drop_stream(stream);
        }
        true
    }

    /// A context is being released or destroyed (with it, possibly, every stream and event
    /// made in it): waits for the copies pinwise still tracks (pending blocks' events, and
    /// the streams live allocations were copied on, except the default-stream handles, which
    /// never dangle), forgets those streams, and destroys the idle events (new ones are made
    /// when needed). Afterwards the engine holds no stream or event handle. Call it before
    /// forwarding the release, with no engine lock held.
    pub fn forget_context_objects(&self, is_default_stream: impl Fn(StreamHandle) -> bool) {
        let pending: HashSet<EventHandle> = self.pool.lock().pending_events().into_iter().collect();
        for &e in &pending {
            let _ = self.backend.synchronize_event(e);
        }
        let done = self.pool.lock().reclaim(|e| pending.contains(&e));
        self.events.put_back(done);
        self.events.destroy_all(&*self.backend);
        let lives: Vec<Arc<Live>> = self.hot.live.read().values().cloned().collect();
        let mut waited: Vec<StreamHandle> = Vec::new();
        for live in lives {
            let streams = live.drop_streams_where(|s| !is_default_stream(s));
            for s in streams {
                if !waited.contains(&s) {
                    let _ = self.backend.synchronize_stream(s);
                    waited.push(s);
                }
            }
        }
    }

    /// Before a context may end (the driver then unmaps the pinned memory made in it):
    /// releases the idle segments while the context is still there, and retires the rest,
    /// so no block of theirs is handed out again (it could be unmapped memory). Blocks in
    /// use stay the program's; later requests get fresh segments.
    pub fn retire_pool(&self) {
        self.trim();
        self.pool.lock().retire_all();
    }

    /// Whether a request of `size` bytes with `flags` would be served from a free pool block
    /// now (pinning nothing more), if it is served pinned.
    pub fn has_free_block(&self, size: usize, flags: AllocFlags) -> bool {
        let request = is_request(flags);
        let len = ceiling::block_size(size, request);
        self.reclaim_pending();
        let pool = self.pool.lock();
        pool.has_fit(len, self.carve_limit(&pool, len, request))
    }

    /// Unpins idle pool segments (entirely free), largest first, until at least `want` bytes
    /// are released or none is left. Returns the bytes released.
    pub fn release_idle(&self, want: u64) -> u64 {
        if want == 0 {
            return 0;
        }
        self.reclaim_pending();
        let idle = self.pool.lock().take_free_segments(want as usize);
        let mut released = 0;
        for seg in idle {
            released += seg.len as u64;
            self.release_segment(seg);
        }
        released
    }

    /// Releases every idle pinned segment and the pageable cache (keeps blocks in use).
    pub fn trim(&self) {
        self.reclaim_pending();
        let idle = self.pool.lock().take_free_segments(usize::MAX);
        for seg in idle {
            self.release_segment(seg);
        }
        let cached = self.pageable.lock().drain();
        for (a, l) in cached {
            // SAFETY: cached mappings are ours, unregistered and unused.
            unsafe { pageable::unmap(a as *mut u8, l) };
        }
    }

    fn emit(&self, site: Option<Site>, kind: EventKind) {
        let Some(rec) = &self.hot.recorder else {
            return;
        };
        let mut ev = Event::new(
            monotonic_ns(),
            self.pid,
            current_tid(),
            ProbeKind::AllocatorCallback,
            kind,
        );
        ev.site = site;
        rec.record(ev);
    }

    /// Shuts down: waits for pending copies, releases the pool and the cache, and lets the
    /// recorder write its profile. Allocations still live are left alone (their memory is
    /// not freed). Called by `Drop`; calling it earlier reports the recorder's error. Only
    /// the first call does anything; the engine should not be used afterwards.
    pub fn shutdown(&self) -> Result<(), AllocError> {
        if self.shut_down.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let still_live = self.hot.live.read().len();
        if still_live > 0 {
            tracing::warn!(
                still_live,
                "pinwise allocator shut down with allocations still live; their memory is kept"
            );
        }
        // Wait for every pending block's copies, outside the pool's lock (a backend call
        // that blocks is never made under one of the engine's locks).
        let pending: HashSet<EventHandle> = self.pool.lock().pending_events().into_iter().collect();
        for &e in &pending {
            let _ = self.backend.synchronize_event(e);
        }
        let done = self.pool.lock().reclaim(|e| pending.contains(&e));
        self.events.put_back(done);
        self.trim();
        self.events.destroy_all(&*self.backend);
        match &self.hot.recorder {
            Some(r) => r.finish(),
            None => Ok(()),
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::error!(error = %e, "pinwise allocator: writing the profile failed");
        }
    }
}

/// Whether a request is a program's own pinned request (or a caller's that needs pinned
/// memory), as against pinwise's own choice to pin: see [`ceiling::block_size`] and
/// [`PinBudget::try_reserve_request`].
fn is_request(flags: AllocFlags) -> bool {
    flags.contains(AllocFlags::PREFER_PINNED) || flags.contains(AllocFlags::REQUIRE_PINNED)
}

// pinwise's one clock (`CLOCK_MONOTONIC`, ns).
use pinwise_core::units::monotonic_ns;

fn current_tid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}
