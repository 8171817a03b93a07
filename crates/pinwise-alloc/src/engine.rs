//! The engine: decides, per allocation, pinned or pageable, and serves it.
//!
//! It works on raw pointers, call sites and flags, so that the Rust API
//! ([`crate::HostAllocator`]), the C ABI and the preload library all drive the same code.
//! One `Engine` is one allocator instance; there is no global state.
//!
//! For each allocation the engine
//! 1. derives the tag (call site + call number at that site),
//! 2. asks, in order: the caller's flags (pinned required?), the advice of a profile (use
//!    mode; only where the tag and size match and the site has not proved the advice wrong),
//!    and otherwise the site's pattern-history predictor (adaptive behaviour), weighing the
//!    predicted saving against what pinning would cost *now* (nothing when a pooled block
//!    is free; registering touched memory when the pageable cache has some; else
//!    allocating pinned),
//! 3. serves it from the pinned pool (within the budget) or the pageable path; any failure
//!    to pin falls back to pageable memory and is counted.
//!
//! Transfers are learned through [`Engine::note_transfer`]. A pageable mapping whose
//! transfers have already saved what registering it costs is registered in place
//! ("promoted"): the ski-rental rule, never worse than twice the best choice in hindsight.
//! When an allocation is freed its outcome (would pinning it have paid?) trains its site's
//! predictor.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use pinwise_core::policy::PredictedTransfers;
use pinwise_core::{
    Direction, Event, EventKind, HostMemKind, HostState, ModuleTable, PinMethod, Policy, ProbeKind,
    Reason, Site, Tag,
};

use crate::backend::{EventHandle, PinBackend, StreamHandle};
use crate::budget::{default_budget_bytes, PinBudget};
use crate::callsite::SiteResolver;
use crate::costs;
use crate::error::AllocError;
use crate::events::EventPool;
use crate::grade::{graded_size, PAGE};
use crate::pageable::{self, PageableCache, MMAP_FROM};
use crate::pool::{PinnedPool, Segment, SegmentOrigin};
use crate::predict::{PredictionSource, SitePredictor, DEFAULT_HISTORY_BITS};
use crate::stats::{AllocStats, Counters};

/// How the allocator decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Learn within the run, per call site (no profile).
    Adaptive,
    /// Behave as adaptive and record what happens, for a profile written at the end.
    Profile,
    /// Follow a profile's advice where it matches this run; adaptive elsewhere.
    Use,
}

impl Mode {
    /// `adaptive`, `profile` or `use`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Mode::Adaptive => "adaptive",
            Mode::Profile => "profile",
            Mode::Use => "use",
        }
    }
}

/// Flags of one allocation request (a C-friendly bit set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AllocFlags(pub u32);

impl AllocFlags {
    /// No constraint: the engine decides.
    pub const NONE: AllocFlags = AllocFlags(0);
    /// The caller needs page-locked memory (e.g. it asked CUDA for pinned memory): pin it or
    /// fail, never serve it pageable.
    pub const REQUIRE_PINNED: AllocFlags = AllocFlags(1);
    /// Never pin this allocation (not even by promotion).
    pub const NEVER_PIN: AllocFlags = AllocFlags(2);

    /// Whether all bits of `other` are set.
    pub const fn contains(self, other: AllocFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

/// What a profile advises for one allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advised {
    /// Pin it.
    Pin,
    /// Leave it pageable.
    Pageable,
    /// The profile knows nothing that matches (other tag, other size): decide adaptively.
    Unknown,
}

/// Advice for use mode: implemented by [`crate::plan::Plan`] (a profile planned with
/// pinwise-core's policy), or by anything else that can say pin or not per tag.
pub trait Advice: Send + Sync {
    /// The advice for allocation `tag` of `size` bytes.
    fn advise(&self, tag: &Tag, size: usize) -> Advised;
}

/// Receives the engine's events (profile mode): implemented by
/// [`crate::record::HistoryRecorder`], which feeds a `MemHistory` and writes the profile.
pub trait Recorder: Send + Sync {
    /// One event; called outside the engine's locks.
    fn record(&self, event: Event);
    /// Called once when the engine shuts down (writes the profile).
    fn finish(&self) -> Result<(), AllocError>;
}

/// Settings of an [`Engine`].
#[derive(Clone)]
pub struct EngineConfig {
    /// How decisions are made.
    pub mode: Mode,
    /// Hard cap on pinned bytes; `None`: a quarter of the machine's memory.
    pub budget_bytes: Option<u64>,
    /// Freed large pageable mappings kept for reuse; `None`: an eighth of the budget.
    pub pageable_cache_bytes: Option<usize>,
    /// Smallest pinned segment obtained at once (small blocks are carved from it).
    pub min_segment_bytes: usize,
    /// Outcomes remembered per call site by the predictor.
    pub history_bits: u8,
    /// Advise large pageable mappings to use transparent huge pages, and populate them at
    /// allocation (see [`crate::pageable`]).
    pub huge_pages: bool,
    /// Most reuses a new pinned block is credited with (from the site's run of hot outcomes).
    pub max_reuse_credit: u32,
    /// pinwise-core's policy (and its cost model): every pin-or-not decision is its.
    pub policy: Arc<Policy>,
    /// Use mode: the advice (a planned profile).
    pub advice: Option<Arc<dyn Advice>>,
    /// Profile mode: where events go.
    pub recorder: Option<Arc<dyn Recorder>>,
    /// The module table call sites are interned in (shared with the advice and recorder).
    pub modules: Arc<ModuleTable>,
}

impl std::fmt::Debug for EngineConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineConfig")
            .field("mode", &self.mode)
            .field("budget_bytes", &self.budget_bytes)
            .field("pageable_cache_bytes", &self.pageable_cache_bytes)
            .field("min_segment_bytes", &self.min_segment_bytes)
            .field("history_bits", &self.history_bits)
            .field("huge_pages", &self.huge_pages)
            .field("max_reuse_credit", &self.max_reuse_credit)
            .field("advice", &self.advice.is_some())
            .field("recorder", &self.recorder.is_some())
            .finish_non_exhaustive()
    }
}

impl EngineConfig {
    /// Adaptive mode with defaults, deciding with `policy`.
    pub fn new(policy: Policy) -> Self {
        EngineConfig {
            mode: Mode::Adaptive,
            budget_bytes: None,
            pageable_cache_bytes: None,
            min_segment_bytes: 64 * 1024,
            history_bits: DEFAULT_HISTORY_BITS,
            huge_pages: true,
            max_reuse_credit: 8,
            policy: Arc::new(policy),
            advice: None,
            recorder: None,
            modules: ModuleTable::shared(),
        }
    }
}

impl EngineConfig {
    /// Use mode following `profile`, planned with this configuration's costs, budget and
    /// module table. The plan's summary is logged.
    pub fn with_profile(mut self, profile: &pinwise_core::profile::Profile) -> Self {
        let budget = self.budget_bytes.unwrap_or_else(default_budget_bytes);
        let plan = crate::plan::Plan::new(profile, &self.policy, budget, &self.modules);
        let s = plan.summary();
        tracing::info!(
            entries = s.entries,
            pinned = s.pinned,
            peak_bytes = s.peak_bytes,
            unknown_modules = s.unknown_modules,
            "use mode: profile planned"
        );
        self.mode = Mode::Use;
        self.advice = Some(Arc::new(plan));
        self
    }

    /// Use mode following the profile in `path`. A profile that cannot be read is an error
    /// that names the file and the problem.
    pub fn with_profile_file(self, path: &std::path::Path) -> Result<Self, AllocError> {
        let profile =
            pinwise_core::profile::Profile::load(path).map_err(|e| AllocError::Profile {
                path: path.display().to_string(),
                message: e.to_string(),
            })?;
        Ok(self.with_profile(&profile))
    }

    /// Profile mode: record the run; the profile is written to `output` (if any) when the
    /// engine shuts down, and is available from the returned recorder.
    pub fn recording(
        mut self,
        output: Option<std::path::PathBuf>,
    ) -> (Self, Arc<crate::record::HistoryRecorder>) {
        let rec = Arc::new(crate::record::HistoryRecorder::new(
            self.modules.clone(),
            output,
        ));
        self.mode = Mode::Profile;
        self.recorder = Some(rec.clone());
        (self, rec)
    }
}

/// One allocation handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// First byte (page-aligned for pinned blocks and large pageable mappings).
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
#[derive(Debug)]
pub(crate) struct Live {
    pub(crate) start: usize,
    pub(crate) size: usize,
    /// Length of the block or mapping behind it.
    block_len: usize,
    pub(crate) tag: Tag,
    origin: Origin,
    flags: AllocFlags,
    planned: Planned,
    /// For mappings: PAGEABLE, PROMOTING, PROMOTED or NO_PROMOTION.
    promotion: AtomicU8,
    /// Transfers and bytes per direction (index [`Direction::index`]).
    transfers: [AtomicU32; 4],
    bytes: [AtomicU64; 4],
    /// Streams with asynchronous copies on this allocation (deduplicated, small).
    async_streams: Mutex<Vec<StreamHandle>>,
}

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

    pub(crate) fn is_pinned(&self) -> bool {
        match self.origin {
            Origin::PoolBlock | Origin::Dedicated => true,
            Origin::Mapping => self.promotion.load(Ordering::Acquire) == PROMOTED,
            Origin::Heap => false,
        }
    }
}

/// Per call site state.
#[derive(Debug)]
struct SiteState {
    calls: u32,
    predictor: SitePredictor,
    /// Consecutive hot outcomes most recently.
    hot_streak: u32,
    /// Transfers (by direction, with bytes) of the last allocation that had any.
    last_mix: PredictedTransfers,
    /// Use mode: advised-pin allocations that turned out hot / cold.
    advice_right: u32,
    advice_wrong: u32,
}

impl SiteState {
    fn advice_trusted(&self) -> bool {
        !(self.advice_wrong >= 2 && self.advice_wrong > self.advice_right)
    }
}

/// The smart pinning allocator's engine. See the module documentation.
pub struct Engine {
    backend: Arc<dyn PinBackend>,
    mode: Mode,
    policy: Arc<Policy>,
    advice: Option<Arc<dyn Advice>>,
    recorder: Option<Arc<dyn Recorder>>,
    budget: PinBudget,
    pool: Mutex<PinnedPool>,
    pageable: Mutex<PageableCache>,
    events: EventPool,
    live: RwLock<BTreeMap<usize, Arc<Live>>>,
    sites: Mutex<HashMap<Site, SiteState>>,
    resolver: SiteResolver,
    counters: Counters,
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
        let cache = config
            .pageable_cache_bytes
            .unwrap_or((budget / 8).min(usize::MAX as u64) as usize);
        Ok(Engine {
            backend,
            mode: config.mode,
            policy: config.policy,
            advice: config.advice,
            recorder: config.recorder,
            budget: PinBudget::new(budget),
            pool: Mutex::new(PinnedPool::new()),
            pageable: Mutex::new(PageableCache::new(cache)),
            events: EventPool::new(),
            live: RwLock::new(BTreeMap::new()),
            sites: Mutex::new(HashMap::new()),
            resolver: SiteResolver::new(config.modules),
            counters: Counters::default(),
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
    pub fn sites(&self) -> &SiteResolver {
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
            self.live.read().len() as u64,
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
        let graded = graded_size(size);
        let (tag, want_pin, planned) = self.decide(size, graded, site, flags);
        let required = flags.contains(AllocFlags::REQUIRE_PINNED);

        let mut served: Option<(usize, usize, Origin)> = None;
        if want_pin {
            let r = if required && cuda_flags != 0 {
                self.alloc_dedicated(graded, cuda_flags)
            } else {
                self.alloc_pinned_block(graded)
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
        let live = Arc::new(Live {
            start,
            size,
            block_len: len,
            tag,
            origin,
            flags,
            planned,
            promotion: AtomicU8::new(
                if origin == Origin::Mapping && !flags.contains(AllocFlags::NEVER_PIN) {
                    PAGEABLE
                } else {
                    NO_PROMOTION
                },
            ),
            transfers: Default::default(),
            bytes: Default::default(),
            async_streams: Mutex::new(Vec::new()),
        });
        let pinned = live.is_pinned();
        self.live.write().insert(start, live);
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
            .live
            .write()
            .remove(&(ptr as usize))
            .ok_or(AllocError::UnknownPointer(ptr as usize))?;
        self.release(&live);
        Ok(())
    }

    /// Frees a live allocation the caller holds (a [`crate::HostBuffer`] being dropped).
    pub(crate) fn free_live(&self, live: &Arc<Live>) {
        let removed = self.live.write().remove(&live.start);
        debug_assert!(removed.is_some_and(|r| Arc::ptr_eq(&r, live)));
        self.release(live);
    }

    pub(crate) fn live_of(&self, ptr: usize) -> Option<Arc<Live>> {
        self.live.read().get(&ptr).cloned()
    }

    /// The size asked for the live allocation starting at `ptr`, and whether it is pinned now.
    pub fn lookup(&self, ptr: *const u8) -> Option<(usize, bool)> {
        self.live
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
        let live = self.find_containing(ptr as usize)?;
        Some(self.note_transfer_on(&live, ptr as usize, bytes, direction, stream))
    }

    pub(crate) fn note_transfer_on(
        &self,
        live: &Live,
        host: usize,
        bytes: usize,
        direction: Direction,
        stream: Option<StreamHandle>,
    ) -> bool {
        let d = direction.index();
        live.transfers[d].fetch_add(1, Ordering::Relaxed);
        live.bytes[d].fetch_add(bytes as u64, Ordering::Relaxed);
        if let Some(s) = stream {
            let mut streams = live.async_streams.lock();
            if !streams.contains(&s) {
                streams.push(s);
            }
        }
        // Ski rental: register a pageable mapping in place once the transfers it has seen
        // would have paid for registering it (the policy's decision on what was seen).
        if live.origin == Origin::Mapping
            && live.promotion.load(Ordering::Acquire) == PAGEABLE
            && costs::decide(
                &self.policy,
                live.block_len as u64,
                live.seen(),
                u64::MAX,
                PinMethod::RegisterTouched,
            )
            .pin
        {
            self.promote(live);
        }
        let pinned = live.is_pinned();
        if pinned {
            self.counters
                .transfers_pinned
                .fetch_add(1, Ordering::Relaxed);
        } else {
            self.counters
                .transfers_pageable
                .fetch_add(1, Ordering::Relaxed);
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
        pinned
    }

    pub(crate) fn find_containing(&self, addr: usize) -> Option<Arc<Live>> {
        let live = self.live.read();
        let (_, l) = live.range(..=addr).next_back()?;
        (addr < l.start + l.size.max(1)).then(|| l.clone())
    }

    /// Registers a live pageable mapping in place, within the budget.
    fn promote(&self, live: &Live) {
        if live
            .promotion
            .compare_exchange(PAGEABLE, PROMOTING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        if !self.budget.try_reserve(live.block_len as u64) {
            self.counters
                .budget_refusals
                .fetch_add(1, Ordering::Relaxed);
            // Try again at a later transfer: the budget may have room by then.
            live.promotion.store(PAGEABLE, Ordering::Release);
            return;
        }
        let t = std::time::Instant::now();
        // SAFETY: `live.start..+len` is our own anonymous mapping, alive until the allocation
        // is freed, and `release` unregisters it before reusing or unmapping it.
        let r = unsafe { self.backend.register(live.start as *mut u8, live.block_len) };
        self.counters.add_pin_time(t.elapsed());
        match r {
            Ok(()) => {
                self.pinned_outside_pool
                    .fetch_add(live.block_len as u64, Ordering::Relaxed);
                self.counters.promotions.fetch_add(1, Ordering::Relaxed);
                self.counters.pins_register.fetch_add(1, Ordering::Relaxed);
                live.promotion.store(PROMOTED, Ordering::Release);
                self.emit(
                    None,
                    EventKind::PinPages {
                        start: live.start as u64,
                        bytes: live.block_len as u64,
                        pages: Some((live.block_len / PAGE) as u64),
                    },
                );
            }
            Err(e) => {
                tracing::debug!(error = %e, "promotion failed; staying pageable");
                self.budget.release(live.block_len as u64);
                self.counters.fallbacks.fetch_add(1, Ordering::Relaxed);
                live.promotion.store(NO_PROMOTION, Ordering::Release);
            }
        }
    }

    /// Tag, pin or not, and whether advice was followed.
    fn decide(
        &self,
        size: usize,
        graded: usize,
        site: Site,
        flags: AllocFlags,
    ) -> (Tag, bool, Planned) {
        let mut sites = self.sites.lock();
        let state = sites.entry(site).or_insert_with(|| SiteState {
            calls: 0,
            predictor: SitePredictor::new(self.history_bits),
            hot_streak: 0,
            last_mix: PredictedTransfers::none(),
            advice_right: 0,
            advice_wrong: 0,
        });
        state.calls = state.calls.saturating_add(1);
        let tag = Tag {
            site,
            call_no: state.calls,
        };
        if flags.contains(AllocFlags::REQUIRE_PINNED) {
            return (tag, true, Planned::No);
        }
        if flags.contains(AllocFlags::NEVER_PIN) {
            return (tag, false, Planned::No);
        }
        if self.mode == Mode::Use && state.advice_trusted() {
            if let Some(advice) = &self.advice {
                match advice.advise(&tag, size) {
                    Advised::Pin => return (tag, true, Planned::Pin),
                    Advised::Pageable => return (tag, false, Planned::Pageable),
                    Advised::Unknown => {
                        self.counters
                            .advice_unmatched
                            .fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        let guess = state.predictor.predict();
        // The site's last observed mix of directions and sizes, scaled to the guess.
        let expected = costs::scaled(&state.last_mix, guess.expected_transfers as f64);
        let reuse = state.hot_streak.clamp(1, self.max_reuse_credit) as f64;
        drop(sites);
        if !guess.hot || guess.source == PredictionSource::NoHistory {
            return (tag, false, Planned::No);
        }
        (
            tag,
            self.pin_pays_now(graded, &expected, reuse),
            Planned::No,
        )
    }

    /// Whether pinning a `graded`-byte block for `expected` transfers pays *now*: a free
    /// pooled block costs nothing; otherwise the policy weighs a new segment, credited with
    /// `reuse` allocations like this one (the site's recent run of hot outcomes), since the
    /// pool keeps it for them.
    fn pin_pays_now(&self, graded: usize, expected: &PredictedTransfers, reuse: f64) -> bool {
        if self.pool.lock().has_free(graded) {
            return self.policy.saving_ns(expected) > 0.0;
        }
        let seg = graded.max(self.min_segment);
        let method = if self.pageable.lock().has_fit(seg) {
            PinMethod::RegisterTouched
        } else {
            // Fresh memory: judged at the cost of allocating it pinned (on the H200 the
            // cheapest fresh way; where touching and registering is cheaper, this errs on
            // the side of not pinning).
            PinMethod::MallocHost
        };
        let remaining = self.budget.cap().saturating_sub(self.budget.reserved());
        let d = costs::decide(
            &self.policy,
            seg as u64,
            costs::scaled(expected, expected.total() * reuse),
            remaining,
            method,
        );
        if matches!(d.reason, Reason::BudgetFull { .. }) {
            self.counters
                .budget_refusals
                .fetch_add(1, Ordering::Relaxed);
        }
        d.pin
    }

    /// A block from the pinned pool, growing it within the budget if needed.
    fn alloc_pinned_block(&self, graded: usize) -> Result<(usize, usize, Origin), PinRefusal> {
        self.reclaim_pending();
        if let Some(addr) = self.pool.lock().take(graded) {
            self.counters.pool_hits.fetch_add(1, Ordering::Relaxed);
            return Ok((addr, graded, Origin::PoolBlock));
        }
        self.counters.pool_misses.fetch_add(1, Ordering::Relaxed);
        let seg_len = graded.max(self.min_segment);
        // Prefer registering a touched mapping from the pageable cache when that is cheaper.
        let (fresh_method, fresh_cost) = costs::cheapest_fresh(&self.policy, seg_len as u64);
        let touched = if costs::register_touched_ns(&self.policy, seg_len as u64) < fresh_cost {
            self.pageable.lock().take(seg_len)
        } else {
            None
        };
        let reserve = touched.map_or(seg_len, |(_, l)| l);
        if !self.reserve_or_trim(reserve as u64) {
            if let Some((a, l)) = touched {
                self.return_mapping(a, l);
            }
            return Err(PinRefusal::Budget);
        }
        let t = std::time::Instant::now();
        let segment = match touched {
            Some((addr, len)) => self.register_mapping(addr, len),
            None => match fresh_method {
                PinMethod::MallocHost => self.alloc_pinned_segment(seg_len),
                PinMethod::RegisterTouched => {
                    pageable::map_anonymous(seg_len, self.huge_pages).and_then(|p| {
                        // Touch it, as the cost model assumed, then register.
                        // SAFETY: a fresh mapping of `seg_len` writable bytes.
                        unsafe { touch_pages(p, seg_len) };
                        self.register_mapping(p as usize, seg_len)
                    })
                }
            },
        };
        self.counters.add_pin_time(t.elapsed());
        match segment {
            Some(seg) => {
                debug_assert_eq!(seg.len, reserve);
                let addr = self
                    .pool
                    .lock()
                    .add_segment(seg, graded)
                    .expect("taking from a fresh segment");
                Ok((addr, graded, Origin::PoolBlock))
            }
            None => {
                self.budget.release(reserve as u64);
                Err(PinRefusal::Driver)
            }
        }
    }

    /// A dedicated pinned allocation with CUDA flags (not pooled).
    fn alloc_dedicated(
        &self,
        graded: usize,
        cuda_flags: u32,
    ) -> Result<(usize, usize, Origin), PinRefusal> {
        if !self.reserve_or_trim(graded as u64) {
            return Err(PinRefusal::Budget);
        }
        let t = std::time::Instant::now();
        let r = self.backend.alloc_pinned(graded, cuda_flags);
        self.counters.add_pin_time(t.elapsed());
        match r {
            Ok(p) => {
                self.counters.pins_alloc.fetch_add(1, Ordering::Relaxed);
                self.pinned_outside_pool
                    .fetch_add(graded as u64, Ordering::Relaxed);
                Ok((p as usize, graded, Origin::Dedicated))
            }
            Err(e) => {
                tracing::debug!(error = %e, "dedicated pinned allocation failed");
                self.budget.release(graded as u64);
                Err(PinRefusal::Driver)
            }
        }
    }

    fn alloc_pinned_segment(&self, len: usize) -> Option<Segment> {
        match self.backend.alloc_pinned(len, 0) {
            Ok(p) => {
                self.counters.pins_alloc.fetch_add(1, Ordering::Relaxed);
                Some(Segment {
                    base: p as usize,
                    len,
                    origin: SegmentOrigin::AllocPinned,
                })
            }
            Err(e) => {
                tracing::debug!(error = %e, "cuMemHostAlloc for the pool failed");
                None
            }
        }
    }

    /// Registers our own mapping as a pool segment; on failure the mapping goes back to the
    /// pageable cache.
    fn register_mapping(&self, addr: usize, len: usize) -> Option<Segment> {
        // SAFETY: `addr..addr+len` is an anonymous mapping this engine owns and that nobody
        // uses; it stays mapped while it is a pool segment.
        match unsafe { self.backend.register(addr as *mut u8, len) } {
            Ok(()) => {
                self.counters.pins_register.fetch_add(1, Ordering::Relaxed);
                Some(Segment {
                    base: addr,
                    len,
                    origin: SegmentOrigin::RegisteredMapping,
                })
            }
            Err(e) => {
                tracing::debug!(error = %e, "registering a mapping for the pool failed");
                self.return_mapping(addr, len);
                None
            }
        }
    }

    /// Reserves `bytes` of budget, releasing idle pool segments first if that makes room.
    fn reserve_or_trim(&self, bytes: u64) -> bool {
        if self.budget.try_reserve(bytes) {
            return true;
        }
        let need = (self.budget.reserved() + bytes).saturating_sub(self.budget.cap());
        let idle = self.pool.lock().take_free_segments(need as usize);
        if idle.is_empty() {
            self.counters
                .budget_refusals
                .fetch_add(1, Ordering::Relaxed);
            return false;
        }
        for seg in idle {
            self.release_segment(seg);
        }
        if self.budget.try_reserve(bytes) {
            true
        } else {
            self.counters
                .budget_refusals
                .fetch_add(1, Ordering::Relaxed);
            false
        }
    }

    /// Unpins a segment taken out of the pool and releases its budget.
    fn release_segment(&self, seg: Segment) {
        let t = std::time::Instant::now();
        match seg.origin {
            SegmentOrigin::AllocPinned => {
                // SAFETY: the segment came from alloc_pinned and was removed from the pool.
                if let Err(e) = unsafe { self.backend.free_pinned(seg.base as *mut u8) } {
                    tracing::warn!(error = %e, "cuMemFreeHost of a pool segment failed");
                }
            }
            SegmentOrigin::RegisteredMapping => {
                // SAFETY: the segment is a mapping we registered, removed from the pool.
                match unsafe { self.backend.unregister(seg.base as *mut u8) } {
                    Ok(()) => self.return_mapping(seg.base, seg.len),
                    Err(e) => {
                        // Still locked: never reuse or unmap it. Leak it rather than risk
                        // handing out memory the driver believes is registered.
                        tracing::warn!(error = %e, "unregistering a pool segment failed");
                    }
                }
            }
        }
        self.counters.add_unpin_time(t.elapsed());
        self.budget.release(seg.len as u64);
    }

    /// Pageable memory: a cached or new mapping for large sizes, the heap for small ones.
    fn alloc_pageable(&self, size: usize) -> Result<(usize, usize, Origin), AllocError> {
        if size < MMAP_FROM {
            let layout = std::alloc::Layout::from_size_align(size, 64)
                .map_err(|_| AllocError::TooLarge(size))?;
            // SAFETY: `size > 0` (checked by alloc), so the layout is non-zero. Zeroed so that
            // the bytes are initialized (buffers hand them out as `&[u8]`).
            let p = unsafe { std::alloc::alloc_zeroed(layout) };
            if p.is_null() {
                return Err(AllocError::OutOfMemory(size));
            }
            return Ok((p as usize, size, Origin::Heap));
        }
        let len = pageable::mapping_len(size);
        if let Some((a, l)) = self.pageable.lock().take(len) {
            self.counters
                .pageable_cache_hits
                .fetch_add(1, Ordering::Relaxed);
            return Ok((a, l, Origin::Mapping));
        }
        match pageable::map_anonymous(len, self.huge_pages) {
            Some(p) => Ok((p as usize, len, Origin::Mapping)),
            None => Err(AllocError::OutOfMemory(size)),
        }
    }

    /// Returns a mapping to the pageable cache, unmapping what the cache evicts.
    fn return_mapping(&self, addr: usize, len: usize) {
        let evicted = self.pageable.lock().put(addr, len);
        for (a, l) in evicted {
            // SAFETY: evicted mappings are ours, unregistered and unused.
            unsafe { pageable::unmap(a as *mut u8, l) };
        }
    }

    /// Polls the events of pending pool blocks and frees those whose copies completed.
    fn reclaim_pending(&self) {
        let mut pool = self.pool.lock();
        if pool.pending_count() == 0 {
            return;
        }
        let backend = &self.backend;
        let done = pool.reclaim(|e| backend.event_completed(e).unwrap_or(false));
        drop(pool);
        self.events.put_back(done);
    }

    /// Events recorded now on each stream in `streams`, for a block freed with copies
    /// possibly in flight. A stream whose event cannot be had is synchronized instead.
    fn completion_events(&self, streams: &[StreamHandle]) -> Vec<EventHandle> {
        let mut out = Vec::with_capacity(streams.len());
        for &s in streams {
            let recorded = self.events.take(&*self.backend).and_then(|e| {
                match self.backend.record_event(e, s) {
                    Ok(()) => Ok(e),
                    Err(err) => {
                        self.events.put_back([e]);
                        Err(err)
                    }
                }
            });
            match recorded {
                Ok(e) => out.push(e),
                Err(e) => {
                    tracing::debug!(error = %e, "no event for a freed block; synchronizing");
                    let _ = self.backend.synchronize_stream(s);
                }
            }
        }
        out
    }

    /// Gives back a live allocation's memory and trains its site with its outcome.
    pub(crate) fn release(&self, live: &Live) {
        // The outcome: would pinning it (registering it, touched) have paid for what it saw?
        let seen = live.seen();
        let hot = costs::decide(
            &self.policy,
            live.block_len as u64,
            seen,
            u64::MAX,
            PinMethod::RegisterTouched,
        )
        .pin;
        {
            let mut sites = self.sites.lock();
            if let Some(state) = sites.get_mut(&live.tag.site) {
                state.predictor.record(hot, seen.total() as u32);
                if seen.total() > 0.0 {
                    state.last_mix = seen;
                }
                state.hot_streak = if hot { state.hot_streak + 1 } else { 0 };
                match live.planned {
                    Planned::Pin if hot => state.advice_right += 1,
                    Planned::Pin => state.advice_wrong += 1,
                    Planned::Pageable | Planned::No => {}
                }
            }
        }
        let streams = std::mem::take(&mut *live.async_streams.lock());
        match live.origin {
            Origin::PoolBlock => {
                let events = self.completion_events(&streams);
                let ok = self.pool.lock().give_back(live.start, events);
                debug_assert!(ok, "a live pool block is in use in the pool");
            }
            Origin::Dedicated => {
                for s in &streams {
                    let _ = self.backend.synchronize_stream(*s);
                }
                let t = std::time::Instant::now();
                // SAFETY: a dedicated block from alloc_pinned, freed once (removed from `live`).
                if let Err(e) = unsafe { self.backend.free_pinned(live.start as *mut u8) } {
                    tracing::warn!(error = %e, "cuMemFreeHost failed");
                }
                self.counters.add_unpin_time(t.elapsed());
                self.pinned_outside_pool
                    .fetch_sub(live.block_len as u64, Ordering::Relaxed);
                self.budget.release(live.block_len as u64);
            }
            Origin::Mapping => {
                for s in &streams {
                    let _ = self.backend.synchronize_stream(*s);
                }
                // Wait out a promotion in progress on another thread (a racing transfer).
                while live.promotion.load(Ordering::Acquire) == PROMOTING {
                    std::hint::spin_loop();
                }
                if live.promotion.load(Ordering::Acquire) == PROMOTED {
                    self.pinned_outside_pool
                        .fetch_sub(live.block_len as u64, Ordering::Relaxed);
                    if hot {
                        // Adopt it: the site is hot, its next allocation will want a pinned
                        // block of this size, and this one is already pinned and touched.
                        self.pool.lock().add_segment(
                            Segment {
                                base: live.start,
                                len: live.block_len,
                                origin: SegmentOrigin::RegisteredMapping,
                            },
                            0,
                        );
                        self.counters.adoptions.fetch_add(1, Ordering::Relaxed);
                    } else {
                        self.release_segment(Segment {
                            base: live.start,
                            len: live.block_len,
                            origin: SegmentOrigin::RegisteredMapping,
                        });
                    }
                } else {
                    self.return_mapping(live.start, live.block_len);
                }
            }
            Origin::Heap => {
                let layout = std::alloc::Layout::from_size_align(live.size, 64)
                    .expect("layout was valid at allocation");
                // SAFETY: allocated by alloc_pageable with this layout, freed once.
                unsafe { std::alloc::dealloc(live.start as *mut u8, layout) };
            }
        }
        let _ = live.flags;
        self.emit(
            Some(live.tag.site),
            EventKind::Free {
                start: live.start as u64,
            },
        );
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
        let Some(rec) = &self.recorder else { return };
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
        let still_live = self.live.read().len();
        if still_live > 0 {
            tracing::warn!(
                still_live,
                "pinwise allocator shut down with allocations still live; their memory is kept"
            );
        }
        // Wait for every pending block's copies.
        {
            let mut pool = self.pool.lock();
            let backend = &self.backend;
            let done = pool.reclaim(|e| {
                let _ = backend.synchronize_event(e);
                true
            });
            drop(pool);
            self.events.put_back(done);
        }
        self.trim();
        self.events.destroy_all(&*self.backend);
        match &self.recorder {
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

/// Touches one byte per page so the pages are populated.
///
/// # Safety
/// `p..p+len` is writable memory nobody else uses.
unsafe fn touch_pages(p: *mut u8, len: usize) {
    let mut off = 0;
    while off < len {
        // SAFETY: inside the caller's writable range.
        unsafe { p.add(off).write_volatile(0) };
        off += PAGE;
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds (what the kernel's `bpf_ktime_get_ns` returns).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn current_tid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}
