//! Smart pinning behind the hooks.
//!
//! - Pinned requests go to pinwise-alloc's [`Engine`]: a pooled pinned block, or (for a
//!   request the profile advises pageable, or whose call site's earlier allocations turned
//!   out cold) pageable memory. Without such evidence it is served pinned, unless
//!   `PINWISE_PAGEABLE_FIRST` is set (opt-in: a kernel that reads pinned memory through its
//!   host pointer would fault on a pageable buffer); then a request of 1 MiB or more is served
//!   pageable first, and registered in place once its own copies show it hot, or once the
//!   buffers kept pageable cost more than the slowdown bound allows
//!   ([`pinwise_core::decide::earn`], `Pinning::earn`): a framework asks for pinned memory
//!   for hot and cold buffers alike, often from one call site, and only a buffer's copies
//!   tell them apart. Requests whose flags need pinned semantics (mapped, portable,
//!   write-combined), small ones (a pooled block costs nothing), those made while a graph
//!   capture is open, and all of them under `PINWISE_KEEP_PINNED` are served pinned.
//! - A pageable allocation served for a pinned request is registered before the program
//!   asks a pointer query about it (device pointer, flags, attributes), so the answer is
//!   the one plain CUDA would give, and before a CUDA graph capture begins (a captured copy
//!   needs page-locked memory; registering during the capture may invalidate it).
//! - The program's own pageable buffers are registered in place (page-aligned range) once
//!   pinwise-core's promotion rule says their copies paid for registering and holding them
//!   ([`rules::pays_to_promote`]), and unregistered before they are
//!   freed, reallocated or unmapped ([`before_free`], [`before_munmap`]). An asynchronous
//!   copy on such a buffer keeps pageable memory's promise (done when the call returns: the
//!   hook waits for its stream), since the program may reuse the buffer at once.
//! - One budget for the process: the engine's, which promotions reserve from too. It counts
//!   every byte page-locked in the process: the program's own registrations and the
//!   requests passed on to CUDA are charged to it.
//! - pinwise holds no more pinned memory than the program would without it
//!   ([`pinwise_core::decide::ceiling`]): the program's own pinned bytes (every pinned
//!   request at its pages, however it was served, and its registrations) set the budget's
//!   limit, which promotions and pinwise's own pins stay within; before a program request
//!   (or a registration its semantics need) would go over it, idle pool segments and then
//!   promoted buffers of the program are given back ([`Pinning::make_room`]). Not while
//!   a copy that may use a registration is in flight ([`crate::promote::CopyGate`]) or a
//!   graph capture is open: then the ceiling is exceeded for a while, counted
//!   (`ceiling_deferred`). Every registration pinwise gives back on its own account
//!   passes that gate (`Pinning::give_back`): to make room, to release one a copy runs
//!   past, to merge neighbours; only the program's own release of the memory does not.
//! - A copy on a stream being captured into a CUDA graph teaches nothing and changes
//!   nothing ([`Pinning::note_captured_copy`]): no registration, no pool bookkeeping, no
//!   wait. A registration such a copy used is held until the program releases the memory
//!   (the graph reads it on every replay).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use pinwise_alloc::pageable::{mapping_len, MMAP_FROM};
use pinwise_alloc::{AllocError, AllocFlags, Allocation, Engine, EngineConfig, Mode, StreamHandle};
use pinwise_core::decide::pricing::TableSource;
use pinwise_core::decide::{ceiling, earn, rules};
use pinwise_core::profile::Profile;
use pinwise_core::{Direction, EventKind, HostState, ModuleTable, Policy, Site};
use pinwise_cuda::sys::{
    CUresult, CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, CUDA_ERROR_INVALID_VALUE, CUDA_SUCCESS,
};

use crate::backend::{DriverTable, PreloadBackend};
use crate::config::Config;
use crate::guard;
use crate::promote::{
    Owner, PageableCopyCounters, Promoted, PromotedTable, COPY_GATE, NEVER, PROMOTED, TRACKING,
};
use crate::recorder::Recorder;
use crate::stats::HookStats;

/// Page size of registrations.
pub const PAGE: usize = 4096;

/// Ranges pinwise registered in memory it does not own.
pub static PROMOTED_RANGES: PromotedTable = PromotedTable::new();
/// Per host pointer counters of the program's pageable copies.
pub static COUNTERS: PageableCopyCounters = PageableCopyCounters::new();

/// The page-aligned range holding `[addr, addr + len)`: (start, length).
pub fn page_span(addr: usize, len: usize) -> (usize, usize) {
    let start = addr & !(PAGE - 1);
    let end = addr.saturating_add(len.max(1)).next_multiple_of(PAGE);
    (start, end - start)
}

/// One allocation the engine served for a pinned request.
#[derive(Debug, Clone, Copy)]
struct Served {
    size: usize,
    flags: u32,
    /// Served pageable, and not (yet) registered by the allocator.
    pageable: bool,
}

/// Served allocations: the live ones, and the starts of the last ones freed (a second
/// `cuMemFreeHost` of one must get plain CUDA's error, not reach the driver, which would see
/// the start of one of the pool's segments).
#[derive(Default)]
struct ServedBook {
    live: BTreeMap<usize, Served>,
    recently_freed: std::collections::VecDeque<usize>,
}

/// How many freed starts are remembered.
const RECENTLY_FREED: usize = 256;

/// The engine and what the hooks keep beside it. See the module documentation.
pub struct Pinning {
    /// The real driver functions.
    pub driver: &'static DriverTable,
    /// The allocator.
    pub engine: Engine,
    policy: Arc<Policy>,
    served: RwLock<ServedBook>,
    /// What every copy reads here, on one cache line.
    gate: CopyGate,
    /// Whether a program's pinned request without evidence is served pageable first
    /// ([`earn`]; only under `PINWISE_PAGEABLE_FIRST`, never under `PINWISE_KEEP_PINNED`).
    pageable_first: bool,
    /// Those served pageable first and not yet registered: what their copies showed.
    earning: Mutex<std::collections::HashMap<usize, earn::Earning>>,
    /// What copies of allocations served pageable first forwent, ns, and since when
    /// (the first such allocation).
    earn_spent_ns: AtomicU64,
    earn_since_ns: AtomicU64,
    /// Per direction, the smallest copy that pinning makes faster (smaller ones never pay
    /// for a registration: their copies are not counted).
    min_saving_bytes: [u64; 4],
    keep_pinned: bool,
    promote_pageable: bool,
    /// The program's own pinned bytes now and at most at once, as plain CUDA would lock
    /// them ([`pinwise_core::decide::ceiling`]).
    program_now: AtomicU64,
    program_peak: AtomicU64,
    /// Whether the user gave the budget.
    explicit_budget: bool,
    /// Memory page-locked without pinwise's say and charged to the budget (the program's
    /// own registrations, requests passed on to CUDA): start and bytes.
    outside: Mutex<BTreeMap<usize, u64>>,
    /// Where the cost table that prices the decisions came from.
    pub pricing: TableSource,
    /// Problems met choosing it (a calibration file that could not be read).
    pub pricing_problems: Vec<String>,
}

/// What every copy hook reads in [`Pinning`] before it knows whether the copy concerns
/// pinwise's allocations, and what a copy of one counts, on one cache line (the hooks run
/// with cold caches in programs that copy sparsely: each distinct line costs a miss).
#[repr(C, align(64))]
struct CopyGate {
    /// The span of addresses served allocations ever had: a copy outside it is the
    /// program's own memory, and skips the allocator's lookup.
    served_lo: AtomicUsize,
    served_hi: AtomicUsize,
    /// Served allocations still pageable and unregistered (0: queries and copies need not
    /// look them up).
    pageable_live: AtomicUsize,
    /// Entries of `earning` (0: copies need not look).
    earning_live: AtomicUsize,
    /// Copies of served allocations while any earns its registration ([`earn`]'s clock).
    served_copies: AtomicU64,
}

/// What a copy found about its host side, for the history.
fn state_of(pinned: bool) -> HostState {
    if pinned {
        HostState::Pinned
    } else {
        HostState::Pageable
    }
}

impl Pinning {
    /// The engine for `config` on `driver`, pricing with the table pinwise-core's pricing
    /// chooses for this GPU ([`crate::pricing::table`]). Use mode follows `profile`
    /// (already read).
    pub fn new(
        driver: &'static DriverTable,
        config: &Config,
        modules: Arc<ModuleTable>,
        profile: Option<&Profile>,
    ) -> Result<Pinning, String> {
        let table = crate::pricing::table(config);
        tracing::info!(pricing = %table.source, "pinwise: decisions priced");
        let policy = Arc::new(Policy::new(table.model));
        let mut ec = EngineConfig::new((*policy).clone());
        ec.policy = policy.clone();
        ec.budget_bytes = config.budget_bytes;
        ec.modules = modules;
        ec.mode = Mode::Adaptive;
        if let (Mode::Use, Some(p)) = (config.mode, profile) {
            ec = ec.with_profile(p);
        }
        let engine = Engine::new(Arc::new(PreloadBackend::new(driver)), ec)
            .map_err(|e| format!("the allocator could not start: {e}"))?;
        let min_saving_bytes = Direction::ALL.map(|d| rules::smallest_saving_copy(&policy, d));
        Ok(Pinning {
            driver,
            engine,
            policy,
            served: RwLock::new(ServedBook::default()),
            gate: CopyGate {
                served_lo: AtomicUsize::new(usize::MAX),
                served_hi: AtomicUsize::new(0),
                pageable_live: AtomicUsize::new(0),
                earning_live: AtomicUsize::new(0),
                served_copies: AtomicU64::new(0),
            },
            pageable_first: config.pageable_first && !config.keep_pinned,
            earning: Mutex::new(std::collections::HashMap::new()),
            earn_spent_ns: AtomicU64::new(0),
            earn_since_ns: AtomicU64::new(0),
            min_saving_bytes,
            keep_pinned: config.keep_pinned,
            promote_pageable: config.promote_pageable,
            program_now: AtomicU64::new(0),
            program_peak: AtomicU64::new(0),
            explicit_budget: config.budget_bytes.is_some(),
            outside: Mutex::new(BTreeMap::new()),
            pricing: table.source,
            pricing_problems: table.problems,
        })
    }

    /// What the ceiling is made of now.
    fn bounds(&self) -> ceiling::Bounds {
        ceiling::Bounds {
            program_peak: self.program_peak.load(Ordering::Acquire),
            cap: self.engine.budget().cap(),
            explicit_budget: self.explicit_budget,
        }
    }

    /// The most bytes the program's own pinned requests and registrations held at once, as
    /// plain CUDA would have locked them.
    pub fn program_pinned_peak(&self) -> u64 {
        self.program_peak.load(Ordering::Acquire)
    }

    /// The program holds `bytes` more of its own pinned memory: its peak, and with it the
    /// budget's limit, may rise.
    fn program_pins(&self, bytes: u64) {
        let now = self.program_now.fetch_add(bytes, Ordering::AcqRel) + bytes;
        if self.program_peak.fetch_max(now, Ordering::AcqRel) >= now {
            return;
        }
        // Set the limit of the newest peak (another thread may raise it meanwhile).
        loop {
            let b = self.bounds();
            self.engine.budget().set_limit(ceiling::ceiling(&b));
            if self.program_peak.load(Ordering::Acquire) == b.program_peak {
                break;
            }
        }
    }

    /// The program gave back `bytes` of its own pinned memory.
    fn program_unpins(&self, bytes: u64) {
        let _ = self
            .program_now
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(bytes))
            });
    }

    /// Gives back at least `bytes` of pinwise's extras if it can: idle pool segments first,
    /// then registrations of the program's hot pageable buffers (not those a captured graph
    /// uses). Returns the bytes given back.
    ///
    /// Gives back less, counted in `ceiling_deferred`, while a CUDA graph capture is open
    /// (nothing: what the capture uses must stay as it was) or while a copy that may use a
    /// registration is in flight ([`COPY_GATE`]: no registration is given back then).
    pub fn make_room(&self, bytes: u64, stats: &HookStats, rec: &Recorder) -> u64 {
        if bytes == 0 {
            return 0;
        }
        if !crate::capture::none_open() {
            HookStats::bump(&stats.ceiling_deferred);
            return 0;
        }
        let mut released = {
            let _inside = guard::Inside::enter();
            self.engine.release_idle(bytes)
        };
        while released < bytes {
            let Some(i) = PROMOTED_RANGES.releasable_of(Owner::Program) else {
                break;
            };
            let len = PROMOTED_RANGES.get(i).reg_len as u64;
            // Forced by the ceiling, not a verdict on the promotion: not judged.
            match self.give_back(i, false, Release::IfIdle, stats, rec) {
                GaveBack::Done => released += len,
                GaveBack::Gone => {}
                GaveBack::Busy => {
                    HookStats::bump(&stats.ceiling_deferred);
                    break;
                }
            }
        }
        if released > 0 {
            HookStats::bump(&stats.ceiling_releases);
        }
        released
    }

    /// Before the program locks `bytes` more of its own (a pinned request, a registration):
    /// gives back what pinwise's extras must so that the locked total stays within the
    /// ceiling the program's own bytes set ([`ceiling::to_give_back`]).
    pub fn before_program_pins(&self, bytes: u64, stats: &HookStats, rec: &Recorder) {
        let give = ceiling::to_give_back(
            &self.bounds(),
            self.program_now.load(Ordering::Acquire),
            self.engine.budget().reserved(),
            bytes,
        );
        self.make_room(give, stats, rec);
    }

    /// The program locked `[start, start + len)` itself (a registration) or CUDA served its
    /// pinned request of `len` bytes at `start` (passed on): both count as the program's own
    /// and are charged to the budget until [`Pinning::outside_released`].
    pub fn outside_locked(&self, start: usize, len: usize) {
        let bytes = page_span(start, len).1 as u64;
        if self.outside.lock().insert(start, bytes).is_some() {
            return; // already counted (the driver accepted the same start twice)
        }
        self.engine.budget().charge(bytes);
        self.program_pins(bytes);
    }

    /// The program is about to unlock (unregister, free) memory it locked at `start`
    /// without pinwise's say: takes its entry out before the call is forwarded, so that
    /// another thread's request that gets the same address at once is counted afresh. Give
    /// the result to [`Pinning::outside_released`].
    pub fn outside_releasing(&self, start: usize) -> Option<u64> {
        self.outside.lock().remove(&start)
    }

    /// The program's unlock of `start` returned: done (`ok`), its bytes leave the budget
    /// and the program's count; refused, the entry taken by
    /// [`Pinning::outside_releasing`] is put back.
    pub fn outside_released(&self, start: usize, taken: Option<u64>, ok: bool) {
        let Some(bytes) = taken else {
            return;
        };
        if ok {
            self.engine.budget().release(bytes);
            self.program_unpins(bytes);
        } else {
            self.outside.lock().entry(start).or_insert(bytes);
        }
    }

    /// Serves a pinned request of `size` bytes with CUDA `flags` from `site`. `Err`: the
    /// caller passes the request to CUDA (plain behaviour).
    pub fn alloc(
        &self,
        size: usize,
        flags: u32,
        site: Site,
        stats: &HookStats,
        rec: &Recorder,
    ) -> Result<Allocation, AllocError> {
        // Pageable first (pinwise_core::decide::earn) from 1 MiB (smaller ones would save
        // little memory; their copies run at latency), but not while a graph capture is
        // open: a copy captured from it would need it registered, and registering during
        // the capture may invalidate it.
        let af = AllocFlags::from_ask(rules::pinned_request(
            flags,
            size,
            MMAP_FROM,
            self.keep_pinned,
            self.pageable_first
                && size as u64 >= earn::PAGEABLE_FIRST_FROM
                && crate::capture::none_open(),
        ));
        let pages = size.max(1).next_multiple_of(PAGE) as u64;
        // Room under the ceiling only for a request that will be locked now.
        if !self.engine.serves_pageable(site, af) && !self.engine.has_free_block(size, af) {
            self.before_program_pins(pages, stats, rec);
        }
        let a = {
            let _inside = guard::Inside::enter();
            self.engine.alloc_with_cuda_flags(size, site, af, flags)?
        };
        self.program_pins(pages);
        let start = a.ptr as usize;
        self.gate.served_lo.fetch_min(start, Ordering::AcqRel);
        self.gate
            .served_hi
            .fetch_max(start + mapping_len(size), Ordering::AcqRel);
        {
            let mut served = self.served.write();
            served.live.insert(
                start,
                Served {
                    size,
                    flags,
                    pageable: !a.pinned,
                },
            );
            served.recently_freed.retain(|&p| p != start);
        }
        if !a.pinned {
            self.gate.pageable_live.fetch_add(1, Ordering::AcqRel);
            if af.contains(AllocFlags::EARN_PINNED) {
                let _ = self.earn_since_ns.compare_exchange(
                    0,
                    pinwise_core::units::monotonic_ns(),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
                let _inside = guard::Inside::enter();
                if self
                    .earning
                    .lock()
                    .insert(start, earn::Earning::default())
                    .is_none()
                {
                    self.gate.earning_live.fetch_add(1, Ordering::AcqRel);
                }
            }
        }
        Ok(a)
    }

    /// Whether `p` starts an allocation pinwise served.
    pub fn owns(&self, p: usize) -> bool {
        self.served.read().live.contains_key(&p)
    }

    /// Whether `p` started an allocation pinwise served and freed lately (a second free).
    pub fn freed_lately(&self, p: usize) -> bool {
        self.served.read().recently_freed.contains(&p)
    }

    /// The served allocation containing `ptr`: (start, size, CUDA flags).
    pub fn served_containing(&self, ptr: usize) -> Option<(usize, usize, u32)> {
        let served = self.served.read();
        let (&start, s) = served.live.range(..=ptr).next_back()?;
        (ptr < start + s.size.max(1)).then_some((start, s.size, s.flags))
    }

    /// Frees a served allocation. `None`: `p` is not one (the caller forwards it).
    pub fn free(&self, p: usize, stats: &HookStats, rec: &Recorder) -> Option<CUresult> {
        let s = {
            let mut served = self.served.write();
            let s = served.live.remove(&p)?;
            if served.recently_freed.len() == RECENTLY_FREED {
                served.recently_freed.pop_front();
            }
            served.recently_freed.push_back(p);
            s
        };
        if s.pageable {
            self.gate.pageable_live.fetch_sub(1, Ordering::AcqRel);
        }
        self.earning_done(p);
        self.program_unpins(s.size.max(1).next_multiple_of(PAGE) as u64);
        if let Some(i) = PROMOTED_RANGES.overlapping_used(Owner::Pinwise, p, p + 1) {
            self.demote(i, stats, rec);
        }
        let _inside = guard::Inside::enter();
        // SAFETY: `p` is a live allocation of this engine (it was in `served`), and the
        // program gave it back (cuMemFreeHost): it uses it no more.
        match unsafe { self.engine.free(p as *mut u8) } {
            Ok(()) => Some(CUDA_SUCCESS),
            Err(e) => {
                tracing::warn!(error = %e, "freeing a pinwise allocation failed");
                Some(CUDA_ERROR_INVALID_VALUE)
            }
        }
    }

    /// Notes a copy of `bytes` whose host side starts at `host` and spans `span` bytes,
    /// before it is issued: promotes what turned hot, and says whether the host side is
    /// pinned for it, and whether that memory is the program's own pageable memory which
    /// pinwise registered (an asynchronous copy on it must then still behave as on pageable
    /// memory: done when the call returns).
    #[allow(clippy::too_many_arguments)]
    pub fn note_copy(
        &self,
        host: usize,
        bytes: usize,
        span: usize,
        direction: Direction,
        stream: Option<StreamHandle>,
        stats: &HookStats,
        rec: &Recorder,
    ) -> (HostState, bool) {
        let engine_view = if self.maybe_served(host) {
            self.engine
                .note_transfer(host as *const u8, bytes, direction, stream)
        } else {
            None
        };
        if let Some(pinned) = engine_view {
            if pinned && self.gate.pageable_live.load(Ordering::Acquire) > 0 {
                self.saw_allocator_promotion(host, stats, rec);
            }
            // Served for a pinned request: the program expects pinned semantics anyway.
            let mut pinned = pinned || PROMOTED_RANGES.covering(host, span).is_some();
            if self.gate.earning_live.load(Ordering::Acquire) > 0 {
                let clock = self.gate.served_copies.fetch_add(1, Ordering::Relaxed) + 1;
                if !pinned {
                    pinned = self.earn(host, bytes, direction, clock, stats, rec);
                }
            }
            return (state_of(pinned), false);
        }
        if let Some(i) = PROMOTED_RANGES.covering(host, span) {
            PROMOTED_RANGES.note_use(i);
            return (HostState::Pinned, true);
        }
        const UNKNOWN: (HostState, bool) = (HostState::Unknown, false);
        let worth_pinning = self.promote_pageable
            && host != 0
            && (bytes as u64) >= self.min_saving_bytes[direction.index()];
        if worth_pinning && self.extend_neighbour(host, span, stats, rec) {
            return (HostState::Pinned, true);
        }
        self.release_partly_covered(host, span, stats, rec);
        if !worth_pinning {
            return UNKNOWN;
        }
        let Some(i) = COUNTERS.slot(host) else {
            return UNKNOWN;
        };
        let c = COUNTERS.get(i);
        if c.state() != TRACKING {
            return UNKNOWN;
        }
        let policy = &self.policy;
        let saving = c.saving(bytes as u64, direction.index() as u8, || {
            rules::promotion_saving_ns(policy, direction, bytes as u64) as u64
        });
        // The copy's own span is what gets registered: it is the program's buffer now.
        let saved = c.note(saving);
        let copies = c.copies();
        if saved == 0 {
            return UNKNOWN;
        }
        let threshold = c.threshold(span, || {
            let (_, reg_len) = page_span(host, span);
            let budget = self.engine.budget();
            rules::promotion_threshold_ns(
                policy,
                reg_len as u64,
                budget.reserved().saturating_add(reg_len as u64),
                budget.cap(),
            ) as u64
        });
        if rules::pays_to_promote(saved as f64, copies.into(), c.required(threshold) as f64)
            && self.promote_program(host, span, i, stats, rec)
        {
            return (HostState::Pinned, true);
        }
        UNKNOWN
    }

    /// Before a copy of `[host, host + span)` that no registration of pinwise's covers:
    /// unregisters those that cover part of it. The driver refuses a copy that starts in
    /// registered memory and runs past its end (`CUDA_ERROR_INVALID_VALUE`, seen on an H200
    /// when a buffer's first copies were smaller than a later one); without the
    /// registration the copy goes as on pageable memory, as the program expects.
    fn release_partly_covered(&self, host: usize, span: usize, stats: &HookStats, rec: &Recorder) {
        if !PROMOTED_RANGES.any_active() {
            return;
        }
        let end = host.saturating_add(span.max(1));
        // A held registration stays: a captured copy used it, and a replay of its graph
        // would read or write memory whose registration changed under it.
        while let Some(i) = PROMOTED_RANGES.overlapping_releasable(host, end) {
            // Needed now (the driver would refuse this copy): waits for copies in flight.
            if self.give_back(i, true, Release::Waiting, stats, rec) != GaveBack::Done {
                break;
            }
        }
    }

    /// A copy of `[host, host + span)` whose bytes run into pages pinwise registered for a
    /// neighbouring buffer of the program (two heap buffers sharing a page: the first's
    /// registration, rounded to whole pages, holds the second's first bytes). Giving the
    /// neighbour's registration back so that this copy can go pageable made buffers that
    /// lie side by side take turns being registered and unregistered on every copy (seen
    /// with PyTorch's pageable tensors on the heap). Instead, the one registration is
    /// replaced by one of both buffers' pages, so both stay pinned. Only for buffers that
    /// merely share a page: their used bytes do not overlap and at most a malloc chunk's
    /// header lies between them (a live buffer in between would be freed unseen). Returns
    /// whether the copy's host side is now registered.
    fn extend_neighbour(
        &self,
        host: usize,
        span: usize,
        stats: &HookStats,
        rec: &Recorder,
    ) -> bool {
        let end = host.saturating_add(span.max(1));
        let Some(i) = PROMOTED_RANGES.overlapping_releasable(host, end) else {
            return false;
        };
        let old = PROMOTED_RANGES.get(i);
        if old.owner != Owner::Program || !old.budgeted {
            return false;
        }
        let Some(plan) = neighbour_union(&old, host, end) else {
            return false;
        };
        let budget = self.engine.budget();
        let extra = (plan.reg_len as u64).saturating_sub(old.reg_len as u64);
        if !budget.try_reserve(extra) {
            HookStats::bump(&stats.promotion_budget_refusals);
            return false;
        }
        // Copies from another thread that may be using the old registration finish first,
        // and new ones wait until the union is registered (or the old one is gone).
        // Per range: the old registration's pages and the union's.
        let lo = old.reg_start.min(plan.reg_start);
        let hi = (old.reg_start + old.reg_len).max(plan.reg_start + plan.reg_len);
        let _gate = Gate::pass(Release::Waiting, lo, hi - lo);
        let Some(p) = PROMOTED_RANGES.begin_demote(i) else {
            budget.release(extra);
            return false;
        };
        let _also = ((p.reg_start, p.reg_len) != (old.reg_start, old.reg_len))
            .then(|| Gate::pass(Release::Waiting, p.reg_start, p.reg_len));
        // SAFETY: `p.reg_start` starts a range registered by `DriverTable::register`, taken out
        // of the table by this call only. No copy that may use it is in flight (the gate).
        let rc = unsafe { self.driver.unregister(p.reg_start, p.context) };
        PROMOTED_RANGES.finish_demote(i);
        rec.record_global(
            EventKind::UnpinPages {
                start: p.user_start as u64,
                pages: Some((p.reg_len / PAGE) as u64),
            },
            None,
        );
        if rc != CUDA_SUCCESS {
            // Still locked: its bytes stay reserved; the new copy goes pageable.
            budget.release(extra);
            HookStats::bump(&stats.promotion_failures);
            return false;
        }
        let union = Promoted {
            context: self.driver.current_context(),
            ..plan
        };
        let claimed = PROMOTED_RANGES.claim(union);
        // SAFETY (register): both buffers are live (one was just handed to a copy, the other
        // is registered and was not freed: the free hooks would have removed it); the union
        // of their pages is mapped. It is unregistered before either is freed.
        let registered = claimed.map(|e| {
            (e, unsafe {
                self.driver.register(union.reg_start, union.reg_len)
            })
        });
        match registered {
            Some((e, CUDA_SUCCESS)) => {
                PROMOTED_RANGES.activate(e);
                HookStats::bump(&stats.merged_registrations);
                rec.record(
                    rec.stamp(),
                    EventKind::PinPages {
                        start: union.user_start as u64,
                        bytes: (union.user_end - union.user_start) as u64,
                        pages: Some((union.reg_len / PAGE) as u64),
                    },
                    None,
                    0,
                );
                true
            }
            other => {
                if let Some((e, _)) = other {
                    PROMOTED_RANGES.abandon(e);
                    HookStats::bump(&stats.promotion_failures);
                }
                budget.release(old.reg_len as u64 + extra);
                if p.counter != 0 {
                    COUNTERS.get(p.counter - 1).reset();
                }
                HookStats::bump(&stats.demotions);
                false
            }
        }
    }

    /// Whether `host` lies in the span of addresses served allocations ever had (outside
    /// it, it is the program's own memory and the allocator's lookup is skipped).
    fn maybe_served(&self, host: usize) -> bool {
        host >= self.gate.served_lo.load(Ordering::Acquire)
            && host < self.gate.served_hi.load(Ordering::Acquire)
    }

    /// Notes a copy of `[host, host + span)` issued on a stream being captured into a CUDA
    /// graph: it is not run now but on every replay of the graph, so nothing is learned
    /// from it, nothing registered and no pool event recorded. A registration of pinwise's
    /// that covers it is held from now on ([`PromotedTable::hold`]); one that covers only
    /// part of it (and is not held) is given back, as for any copy (the driver refuses a
    /// copy that runs past a registration). Returns the host side's state, for the
    /// history.
    ///
    /// [`PromotedTable::hold`]: crate::promote::PromotedTable::hold
    pub fn note_captured_copy(
        &self,
        host: usize,
        span: usize,
        stats: &HookStats,
        rec: &Recorder,
    ) -> HostState {
        if let Some(i) = PROMOTED_RANGES.covering(host, span) {
            PROMOTED_RANGES.hold(i);
            return HostState::Pinned;
        }
        self.release_partly_covered(host, span, stats, rec);
        if !self.maybe_served(host) {
            return HostState::Unknown;
        }
        self.served_containing(host)
            .and_then(|(start, _, _)| self.engine.lookup(start as *const u8))
            .map_or(HostState::Unknown, |(_, pinned)| state_of(pinned))
    }

    /// Registers the program's buffer `[host, host + span)` in place (page-aligned).
    fn promote_program(
        &self,
        host: usize,
        span: usize,
        counter: usize,
        stats: &HookStats,
        rec: &Recorder,
    ) -> bool {
        let (reg_start, reg_len) = page_span(host, span);
        let budget = self.engine.budget();
        if !budget.try_reserve(reg_len as u64) {
            HookStats::bump(&stats.promotion_budget_refusals);
            return false;
        }
        let c = COUNTERS.get(counter);
        let Some(e) = PROMOTED_RANGES.claim(Promoted {
            owner: Owner::Program,
            user_start: host,
            user_end: host + span,
            reg_start,
            reg_len,
            context: self.driver.current_context(),
            counter: counter + 1,
            budgeted: true,
        }) else {
            budget.release(reg_len as u64);
            return false;
        };
        // SAFETY: the program just handed this range to a copy, so it is mapped; it stays
        // registered only until the program frees, reallocates or unmaps it (the hooks
        // unregister it first).
        let rc = unsafe { self.driver.register(reg_start, reg_len) };
        if rc != CUDA_SUCCESS {
            PROMOTED_RANGES.abandon(e);
            budget.release(reg_len as u64);
            c.set_state(NEVER);
            if rc != CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED {
                HookStats::bump(&stats.promotion_failures);
                tracing::info!(
                    host,
                    span,
                    error = %self.driver.error_text(rc),
                    "registering a hot pageable buffer failed; it stays pageable"
                );
            }
            return false;
        }
        PROMOTED_RANGES.activate(e);
        c.set_state(PROMOTED);
        HookStats::bump(&stats.promotions_on_transfers);
        tracing::debug!(
            host,
            span,
            reg_len,
            "hot pageable buffer registered in place"
        );
        let stamp = rec.stamp();
        rec.record(
            stamp,
            EventKind::PinPages {
                start: host as u64,
                bytes: span as u64,
                pages: Some((reg_len / PAGE) as u64),
            },
            None,
            0,
        );
        true
    }

    /// The allocator registered a served pageable allocation in place: note it once.
    fn saw_allocator_promotion(&self, host: usize, stats: &HookStats, rec: &Recorder) {
        let found = {
            let served = self.served.read();
            served
                .live
                .range(..=host)
                .next_back()
                .filter(|(&start, s)| s.pageable && host < start + s.size.max(1))
                .map(|(&start, s)| (start, s.size))
        };
        let Some((start, size)) = found else { return };
        {
            let mut served = self.served.write();
            match served.live.get_mut(&start) {
                Some(s) if s.pageable => s.pageable = false,
                _ => return,
            }
        }
        self.gate.pageable_live.fetch_sub(1, Ordering::AcqRel);
        HookStats::bump(&stats.promotions_by_allocator);
        let stamp = rec.stamp();
        rec.record(
            stamp,
            EventKind::PinPages {
                start: start as u64,
                bytes: size as u64,
                pages: Some((mapping_len(size) / PAGE) as u64),
            },
            None,
            0,
        );
    }

    /// Before a pointer query about `ptr` reaches the driver: a served allocation still
    /// pageable is registered, so the answer is the one plain CUDA would give. (Queries the
    /// runtime makes inside a copy never get here: `hooks::query` leaves them out.)
    pub fn before_query(&self, ptr: usize, stats: &HookStats, rec: &Recorder) {
        if self.gate.pageable_live.load(Ordering::Acquire) == 0 {
            return;
        }
        let found = {
            let served = self.served.read();
            served
                .live
                .range(..=ptr)
                .next_back()
                .filter(|(&start, s)| s.pageable && ptr < start + s.size.max(1))
                .map(|(&start, s)| (start, s.size))
        };
        let Some((start, size)) = found else { return };
        if self.register_served(start, size, true, stats, rec) {
            HookStats::bump(&stats.promotions_on_queries);
            tracing::debug!(
                start,
                size,
                "served pageable allocation registered before a query"
            );
        }
    }

    /// Before a CUDA graph capture begins: every allocation served pageable for a pinned
    /// request is registered now, since a copy captured into the graph must be from
    /// page-locked memory and registering during the capture may invalidate it (requests
    /// made while a capture is open are served pinned: [`Pinning::alloc`]). Counted with
    /// the query registrations (the program's semantics need them).
    pub fn before_capture(&self, stats: &HookStats, rec: &Recorder) {
        if self.gate.pageable_live.load(Ordering::Acquire) == 0 {
            return;
        }
        let pageable: Vec<(usize, usize)> = {
            let _inside = guard::Inside::enter();
            let served = self.served.read();
            served
                .live
                .iter()
                .filter(|(_, s)| s.pageable)
                .map(|(&start, s)| (start, s.size))
                .collect()
        };
        for (start, size) in pageable {
            if self.register_served(start, size, true, stats, rec) {
                HookStats::bump(&stats.promotions_on_queries);
            }
        }
    }

    /// Registers the served pageable allocation `[start, start + size)` (its request's
    /// pages) unless it is registered already: once, held until the program frees it.
    /// Room is made under the ceiling first (its bytes count among the program's own
    /// already). `required`: the program's semantics need it (a query, a capture): then
    /// it goes over the budget if it must, counted; else a budget without room keeps it
    /// pageable. Returns whether this call registered it.
    fn register_served(
        &self,
        start: usize,
        size: usize,
        required: bool,
        stats: &HookStats,
        rec: &Recorder,
    ) -> bool {
        if PROMOTED_RANGES
            .overlapping_used(Owner::Pinwise, start, start + 1)
            .is_some()
            || self
                .engine
                .lookup(start as *const u8)
                .is_some_and(|(_, pinned)| pinned)
        {
            return false;
        }
        // The pages of the program's request: what plain CUDA would have locked for it (the
        // program's own bytes count them already; the rest of the mapping stays pageable).
        let reg_len = size.max(1).next_multiple_of(PAGE);
        let budget = self.engine.budget();
        self.make_room(
            ceiling::over(&self.bounds(), budget.reserved(), reg_len as u64),
            stats,
            rec,
        );
        if !budget.try_reserve_request(reg_len as u64) {
            if !required {
                HookStats::bump(&stats.promotion_budget_refusals);
                return false;
            }
            // The program's semantics need it pinned: go over the budget, and say so.
            HookStats::bump(&stats.required_outside_budget);
            budget.charge(reg_len as u64);
        }
        let Some(e) = PROMOTED_RANGES.claim(Promoted {
            owner: Owner::Pinwise,
            user_start: start,
            user_end: start + size,
            reg_start: start,
            reg_len,
            context: self.driver.current_context(),
            counter: 0,
            budgeted: true,
        }) else {
            budget.release(reg_len as u64);
            return false;
        };
        // SAFETY: an anonymous mapping of at least `reg_len` bytes the allocator made for this live
        // allocation; it is unregistered (here, on cuMemFreeHost) before it is released.
        let rc = unsafe { self.driver.register(start, reg_len) };
        if rc != CUDA_SUCCESS {
            PROMOTED_RANGES.abandon(e);
            budget.release(reg_len as u64);
            HookStats::bump(&stats.promotion_failures);
            tracing::warn!(
                start,
                size,
                error = %self.driver.error_text(rc),
                "registering a served pageable allocation failed"
            );
            return false;
        }
        PROMOTED_RANGES.activate(e);
        self.earning_done(start);
        let stamp = rec.stamp();
        rec.record(
            stamp,
            EventKind::PinPages {
                start: start as u64,
                bytes: size as u64,
                pages: Some((reg_len / PAGE) as u64),
            },
            None,
            0,
        );
        true
    }

    /// A served allocation no longer earns its registration (registered, or freed).
    fn earning_done(&self, start: usize) {
        if self.gate.earning_live.load(Ordering::Acquire) == 0 {
            return;
        }
        let _inside = guard::Inside::enter();
        if self.earning.lock().remove(&start).is_some() {
            self.gate.earning_live.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// A copy of `bytes` in `direction` on the served allocation holding `host`, served
    /// pageable for a pinned request and still unregistered, at copy clock `clock`: notes
    /// what it would have saved, and registers the allocation where
    /// [`earn::register_now`] says so. Returns whether it is registered now.
    #[cold]
    fn earn(
        &self,
        host: usize,
        bytes: usize,
        direction: Direction,
        clock: u64,
        stats: &HookStats,
        rec: &Recorder,
    ) -> bool {
        let saving = rules::promotion_saving_ns(&self.policy, direction, bytes as u64);
        if saving <= 0.0 {
            return false;
        }
        let Some((start, size, _)) = self.served_containing(host) else {
            return false;
        };
        let spent = self
            .earn_spent_ns
            .fetch_add(saving as u64, Ordering::AcqRel)
            .saturating_add(saving as u64);
        let elapsed = pinwise_core::units::monotonic_ns()
            .saturating_sub(self.earn_since_ns.load(Ordering::Acquire));
        let reg_len = size.max(1).next_multiple_of(PAGE) as u64;
        let budget = self.engine.budget();
        let threshold = rules::promotion_threshold_ns(
            &self.policy,
            reg_len,
            budget.reserved().saturating_add(reg_len),
            budget.cap(),
        );
        let credit = promotions_saved_ns();
        let verdict = {
            let _inside = guard::Inside::enter();
            let mut earning = self.earning.lock();
            let Some(e) = earning.get_mut(&start) else {
                return false;
            };
            e.note(clock, saving);
            earn::register_now(e, threshold, spent as f64, elapsed as f64, credit as f64)
        };
        let Some(why) = verdict else {
            return false;
        };
        if !self.register_served(start, size, false, stats, rec) {
            return false;
        }
        HookStats::bump(&stats.promotions_by_allocator);
        tracing::debug!(
            start,
            size,
            ?why,
            "served pageable allocation earned its registration"
        );
        true
    }

    /// Before the program registers `[start, start + len)`: pinwise's own registrations of
    /// those pages give way (else the program's would fail).
    pub fn before_program_register(
        &self,
        start: usize,
        len: usize,
        stats: &HookStats,
        rec: &Recorder,
    ) {
        let (s, l) = page_span(start, len);
        while let Some(i) = PROMOTED_RANGES.overlapping_registered(s, s + l) {
            if !self.demote(i, stats, rec) {
                break;
            }
        }
        self.before_program_pins(l as u64, stats, rec);
    }

    /// Unregisters promoted range `i` because the program releases that memory (frees,
    /// reallocates or unmaps it, frees the pinned request it was served for) or registers
    /// those pages itself: at once, without the copy gate (a copy of memory the program
    /// releases is the program's own race). From any thread, any path, `free` included: no
    /// lock of pinwise's, and no thread-local storage but the destructor-less guard.
    /// Returns whether this call did it.
    pub fn demote(&self, i: usize, stats: &HookStats, rec: &Recorder) -> bool {
        self.give_back(i, true, Release::Program, stats, rec) == GaveBack::Done
    }

    /// Unregisters promoted range `i`: the one place pinwise gives back a registration it
    /// made (a neighbour merge replaces one through the same gate). `judge`: whether the
    /// copies the registration served are a verdict on promoting it (`false` when the
    /// ceiling forced it out early). On pinwise's own account (`release` other than
    /// [`Release::Program`]) it passes [`COPY_GATE`] first, so that no copy that may use the
    /// registration is in flight while it is unregistered.
    fn give_back(
        &self,
        i: usize,
        judge: bool,
        release: Release,
        stats: &HookStats,
        rec: &Recorder,
    ) -> GaveBack {
        let seen = PROMOTED_RANGES.get(i);
        let Some(_gate) = Gate::pass(release, seen.reg_start, seen.reg_len) else {
            return GaveBack::Busy;
        };
        let Some(p) = PROMOTED_RANGES.begin_demote(i) else {
            return GaveBack::Gone;
        };
        // The entry was given back and claimed for other pages between the two reads: the
        // gate covers those too (waiting: the entry is already out of the table).
        let _also = (release != Release::Program
            && (p.reg_start, p.reg_len) != (seen.reg_start, seen.reg_len))
            .then(|| Gate::pass(Release::Waiting, p.reg_start, p.reg_len));
        // SAFETY: `p.reg_start` starts a range registered by `DriverTable::register`, taken out
        // of the table by this call only.
        let rc = unsafe { self.driver.unregister(p.reg_start, p.context) };
        if rc == CUDA_SUCCESS {
            if p.budgeted {
                self.engine.budget().release(p.reg_len as u64);
            }
        } else {
            // Still locked: keep its bytes reserved, since they are still pinned.
            HookStats::bump(&stats.promotion_failures);
        }
        if p.counter != 0 {
            let c = COUNTERS.get(p.counter - 1);
            if judge {
                c.judge_promotion(PROMOTED_RANGES.uses(i));
            }
            c.reset();
        }
        PROMOTED_RANGES.finish_demote(i);
        HookStats::bump(&stats.demotions);
        rec.record_global(
            EventKind::UnpinPages {
                start: p.user_start as u64,
                pages: Some((p.reg_len / PAGE) as u64),
            },
            None,
        );
        GaveBack::Done
    }
}

/// Why a registration pinwise made is given back, which says how it meets copies in flight
/// ([`COPY_GATE`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Release {
    /// The program releases the memory or registers those pages itself: no gate.
    Program,
    /// On pinwise's own account, where it can be put off (room under the ceiling): not
    /// while a copy is in flight.
    IfIdle,
    /// On pinwise's own account, needed now (a copy runs past the registration, a neighbour
    /// merge): after the copies in flight ([`crate::promote::CopyGate::begin_demotion_waiting`]).
    Waiting,
}

/// What [`Pinning::give_back`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GaveBack {
    /// Unregistered it (or the driver refused, counted: it is out of the table either way).
    Done,
    /// Another thread took it first.
    Gone,
    /// Put off: a copy is in flight ([`Release::IfIdle`]).
    Busy,
}

/// The copy gate passed for one release of some pages; ends the demotion when dropped
/// (`None` inside: no gate, the program's own release or a wait that ran out).
struct Gate {
    _held: Option<crate::promote::Demotion<'static>>,
}

impl Gate {
    /// Passes [`COPY_GATE`] for pages `[start, start + len)` as `release` needs: `None`
    /// when it is put off. Only copies of those pages meet it.
    fn pass(release: Release, start: usize, len: usize) -> Option<Gate> {
        let end = start.saturating_add(len.max(1));
        match release {
            Release::Program => Some(Gate { _held: None }),
            Release::IfIdle => COPY_GATE
                .try_begin_demotion(start, end)
                .map(|d| Gate { _held: Some(d) }),
            // After a wait that ran out (counted) it goes on as before the gate.
            Release::Waiting => Some(Gate {
                _held: COPY_GATE.begin_demotion_waiting(start, end),
            }),
        }
    }
}

/// What the program's buffers registered now have saved so far, ns: each copy that used a
/// registration, at the saving of its buffer's latest copy. The credit against which
/// buffers served pageable first may cost time ([`earn::over_budget`]).
fn promotions_saved_ns() -> u64 {
    PROMOTED_RANGES.sum_active(|p, uses| {
        if p.owner != Owner::Program || p.counter == 0 {
            return 0;
        }
        u64::from(uses).saturating_mul(COUNTERS.get(p.counter - 1).last_saving())
    })
}

/// Most bytes between two buffers that share a page for their registrations to be merged:
/// a malloc chunk's header and alignment padding, never room for another live buffer of
/// note.
pub const MAX_NEIGHBOUR_GAP: usize = 256;

/// The registration covering both `old`'s buffer and the buffer `[host, end)` (whose bytes
/// run into `old`'s pages), if they are neighbours: used bytes disjoint, at most
/// [`MAX_NEIGHBOUR_GAP`] bytes apart. Its context is `old`'s (the caller sets the current one).
pub fn neighbour_union(old: &Promoted, host: usize, end: usize) -> Option<Promoted> {
    let gap = if end <= old.user_start {
        old.user_start - end
    } else if old.user_end <= host {
        host - old.user_end
    } else {
        return None; // the same buffer, used more widely than registered
    };
    if gap > MAX_NEIGHBOUR_GAP {
        return None;
    }
    let (lo, hi) = (old.user_start.min(host), old.user_end.max(end));
    let (reg_start, reg_len) = page_span(lo, hi - lo);
    Some(Promoted {
        user_start: lo,
        user_end: hi,
        reg_start,
        reg_len,
        ..*old
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program_range(start: usize, end: usize) -> Promoted {
        let (reg_start, reg_len) = page_span(start, end - start);
        Promoted {
            owner: Owner::Program,
            user_start: start,
            user_end: end,
            reg_start,
            reg_len,
            context: 7,
            counter: 3,
            budgeted: true,
        }
    }

    #[test]
    fn heap_neighbours_sharing_a_page_are_registered_as_one() {
        // Two 4 MiB buffers, the second 80 bytes after the first (a chunk header apart).
        let a = program_range(0x10_0010, 0x10_0010 + (4 << 20));
        let b = (a.user_end + 80, a.user_end + 80 + (4 << 20));
        let u = neighbour_union(&a, b.0, b.1).expect("neighbours");
        assert_eq!((u.user_start, u.user_end), (a.user_start, b.1));
        assert_eq!(u.reg_start, 0x10_0000);
        assert_eq!(u.reg_start + u.reg_len, b.1.next_multiple_of(PAGE));
        assert!(u.reg_start <= b.0 && b.1 <= u.reg_start + u.reg_len);
        assert_eq!((u.counter, u.budgeted, u.owner), (3, true, Owner::Program));
        // The neighbour before works the same way.
        let before = (a.user_start - 4096 - 32, a.user_start - 32);
        let u = neighbour_union(&a, before.0, before.1).expect("neighbour before");
        assert_eq!((u.user_start, u.user_end), (before.0, a.user_end));
    }

    #[test]
    fn only_true_neighbours_are_merged() {
        let a = program_range(0x10_0010, 0x10_0010 + (1 << 20));
        // The same buffer copied more widely than it was registered: not a neighbour.
        assert!(neighbour_union(&a, a.user_start, a.user_end + 4096).is_none());
        assert!(neighbour_union(&a, a.user_start + 16, a.user_end - 16).is_none());
        // Something else lies between them.
        let far = a.user_end + MAX_NEIGHBOUR_GAP + 1;
        assert!(neighbour_union(&a, far, far + 4096).is_none());
        let near = a.user_end + MAX_NEIGHBOUR_GAP;
        assert!(neighbour_union(&a, near, near + 4096).is_some());
    }

    #[test]
    fn page_spans_cover_whole_pages() {
        assert_eq!(page_span(0x1000, 0x1000), (0x1000, 0x1000));
        assert_eq!(page_span(0x1010, 0x1000), (0x1000, 0x2000));
        assert_eq!(page_span(0x1fff, 1), (0x1000, 0x1000));
        assert_eq!(page_span(0x2000, 0), (0x2000, 0x1000));
    }
}
