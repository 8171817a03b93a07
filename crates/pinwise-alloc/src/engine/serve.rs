//! Serving and giving back memory: pool blocks (growing the pool within the budget, the
//! cheapest way), dedicated pinned blocks, pageable memory, in-place promotion of a hot
//! pageable mapping, and what happens when an allocation is freed.

use std::sync::atomic::Ordering;

use pinwise_core::decide::{pricing, rules};
use pinwise_core::{EventKind, PinMethod};

use super::{Engine, Live, Origin, PinRefusal, NO_PROMOTION, PAGEABLE, PROMOTED, PROMOTING};
use crate::backend::{EventHandle, StreamHandle};
use crate::error::AllocError;
use crate::grade::PAGE;
use crate::pageable::{self, touch_pages, MMAP_FROM};
use crate::pool::{PinnedPool, Segment, SegmentOrigin};

impl Engine {
    /// Registers a live pageable mapping in place, within the budget.
    pub(super) fn promote(&self, live: &Live) {
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

    /// A spare block of the pinned pool (see [`crate::demand`]): a free block that fits,
    /// not carved from a much larger one; `None` when there is none now (never a new
    /// segment: the request is then served pageable).
    pub(super) fn take_spare_block(&self, graded: usize) -> Option<(usize, usize, Origin)> {
        let addr = self.pool.lock().take_fit(graded, fit_limit(graded, true))?;
        self.counters.pool_hits.fetch_add(1, Ordering::Relaxed);
        self.counters
            .spare_block_hits
            .fetch_add(1, Ordering::Relaxed);
        Some((addr, graded, Origin::PoolBlock))
    }

    /// A block from the pinned pool, growing it within the budget if needed.
    /// `request`: a program's own pinned request, reserved within the cap only (see
    /// [`crate::budget::PinBudget::try_reserve_request`]).
    pub(super) fn alloc_pinned_block(
        &self,
        graded: usize,
        request: bool,
    ) -> Result<(usize, usize, Origin), PinRefusal> {
        self.reclaim_pending();
        let taken = {
            let mut pool = self.pool.lock();
            let limit = self.carve_limit(&pool, graded, request);
            pool.take_fit(graded, limit)
        };
        if let Some(addr) = taken {
            self.counters.pool_hits.fetch_add(1, Ordering::Relaxed);
            return Ok((addr, graded, Origin::PoolBlock));
        }
        self.counters.pool_misses.fetch_add(1, Ordering::Relaxed);
        if self.demand.missed(graded as u64) {
            tracing::debug!(
                bytes = graded,
                "a pinned request found its block lent as a spare: no more lending on it"
            );
        }
        let seg_len = graded.max(self.min_segment);
        // Prefer registering a touched mapping from the pageable cache when that is cheaper.
        let (fresh_method, fresh_cost) = pricing::cheapest_fresh(&self.policy, seg_len as u64);
        let mut touched = if pricing::register_touched_ns(&self.policy, seg_len as u64) < fresh_cost
        {
            self.pageable.lock().take(seg_len)
        } else {
            None
        };
        // A program's request gets exactly its pages, not a larger cached mapping.
        if let Some((a, l)) = touched.filter(|&(_, l)| request && l != seg_len) {
            self.return_mapping(a, l);
            touched = None;
        }
        let reserve = touched.map_or(seg_len, |(_, l)| l);
        if !self.reserve_or_trim(reserve as u64, request) {
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
    pub(super) fn alloc_dedicated(
        &self,
        graded: usize,
        cuda_flags: u32,
    ) -> Result<(usize, usize, Origin), PinRefusal> {
        if !self.reserve_or_trim(graded as u64, true) {
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

    pub(super) fn alloc_pinned_segment(&self, len: usize) -> Option<Segment> {
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
    pub(super) fn register_mapping(&self, addr: usize, len: usize) -> Option<Segment> {
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

    /// Reserves `bytes` of budget (for a program's `request`: within the cap only),
    /// releasing idle pool segments first if that makes room.
    pub(super) fn reserve_or_trim(&self, bytes: u64, request: bool) -> bool {
        let reserve = |b: u64| {
            if request {
                self.budget.try_reserve_request(b)
            } else {
                self.budget.try_reserve(b)
            }
        };
        if reserve(bytes) {
            return true;
        }
        let bound = if request {
            self.budget.cap()
        } else {
            self.budget.cap().min(self.budget.limit())
        };
        let need = (self.budget.reserved() + bytes).saturating_sub(bound);
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
        if reserve(bytes) {
            true
        } else {
            self.counters
                .budget_refusals
                .fetch_add(1, Ordering::Relaxed);
            false
        }
    }

    /// Unpins a segment taken out of the pool and releases its budget.
    ///
    /// When the driver refuses to unpin it, the memory may still be page-locked: it is
    /// leaked (never reused or unmapped) and its budget stays reserved, so the bytes locked
    /// never exceed the cap.
    pub(super) fn release_segment(&self, seg: Segment) {
        let t = std::time::Instant::now();
        let unpinned = match seg.origin {
            SegmentOrigin::AllocPinned => {
                // SAFETY: the segment came from alloc_pinned and was removed from the pool.
                unsafe { self.backend.free_pinned(seg.base as *mut u8) }
            }
            SegmentOrigin::RegisteredMapping => {
                // SAFETY: the segment is a mapping we registered, removed from the pool.
                unsafe { self.backend.unregister(seg.base as *mut u8) }
                    .map(|()| self.return_mapping(seg.base, seg.len))
            }
        };
        self.counters.add_unpin_time(t.elapsed());
        match unpinned {
            Ok(()) => self.budget.release(seg.len as u64),
            Err(e) => tracing::warn!(
                error = %e,
                bytes = seg.len,
                "unpinning a pool segment failed; it is leaked and its budget stays reserved"
            ),
        }
    }

    /// Pageable memory: a cached or new mapping for large sizes, the heap for small ones.
    pub(super) fn alloc_pageable(&self, size: usize) -> Result<(usize, usize, Origin), AllocError> {
        if size < MMAP_FROM {
            let layout = heap_layout(size).ok_or(AllocError::TooLarge(size))?;
            // SAFETY: `size > 0` (checked by alloc), so the layout is non-zero. Not zeroed,
            // as `malloc` does not zero: a program writes its buffer before copying it, and
            // zeroing cost more than the rest of a small allocation (memset of 16 KiB,
            // bench/results/alloc-engine-overhead.md). The Rust API, which hands the bytes out
            // as `&[u8]`, zeroes them ([`Live::needs_zeroing`]).
            let p = unsafe { std::alloc::alloc(layout) };
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
        if let Some(p) = self.carve_mapping(len) {
            return Ok((p, len, Origin::Mapping));
        }
        match pageable::map_anonymous(len, self.huge_pages) {
            Some(p) => Ok((p as usize, len, Origin::Mapping)),
            None => Err(AllocError::OutOfMemory(size)),
        }
    }

    /// A new mapping of `len` bytes carved from a chunk of huge pages, the chunk's other pieces
    /// going to the pageable cache ([`pageable::carve`]); `None` where `len` is not carved
    /// ([`pageable::carves`]), memory is low, or the chunk cannot be mapped.
    fn carve_mapping(&self, len: usize) -> Option<usize> {
        if !self.huge_pages || !pageable::carves(len, self.pageable.lock().cap()) {
            return None;
        }
        if self.pressure.is_low(super::monotonic_ns()) {
            return None;
        }
        let chunk = pageable::chunk_len(len);
        let base = pageable::map_huge_chunk(chunk)? as usize;
        let mut pieces = pageable::carve(base, chunk, len).into_iter();
        let (first, l) = pieces.next()?;
        debug_assert_eq!((first, l), (base, len));
        let evicted: Vec<(usize, usize)> = {
            let mut cache = self.pageable.lock();
            pieces.flat_map(|(a, l)| cache.put(a, l)).collect()
        };
        for (a, l) in evicted {
            // SAFETY: evicted mappings are ours, unregistered and unused (pieces just carved
            // or mappings returned earlier).
            unsafe { pageable::unmap(a as *mut u8, l) };
            self.counters
                .pageable_released_bytes
                .fetch_add(l as u64, Ordering::Relaxed);
        }
        Some(first)
    }

    /// Returns a mapping to the pageable cache, unmapping what the cache evicts to stay
    /// within its cap; while memory is low ([`crate::pressure`]), the mapping and the whole
    /// cache are given back to the OS instead.
    pub(super) fn return_mapping(&self, addr: usize, len: usize) {
        let low = self.pressure.is_low(super::monotonic_ns());
        let evicted = {
            let mut cache = self.pageable.lock();
            if low {
                let mut all = cache.drain();
                all.push((addr, len));
                all
            } else {
                cache.put(addr, len)
            }
        };
        if low {
            self.counters
                .pageable_pressure_releases
                .fetch_add(1, Ordering::Relaxed);
        }
        for (a, l) in evicted {
            // SAFETY: evicted mappings are ours, unregistered and unused.
            unsafe { pageable::unmap(a as *mut u8, l) };
            self.counters
                .pageable_released_bytes
                .fetch_add(l as u64, Ordering::Relaxed);
        }
    }

    /// Polls the events of pending pool blocks and frees those whose copies completed.
    pub(super) fn reclaim_pending(&self) {
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
    pub(super) fn completion_events(&self, streams: &[StreamHandle]) -> Vec<EventHandle> {
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
        let hot = self.learn_outcome(live);
        let streams = live.take_streams();
        match live.origin {
            Origin::PoolBlock => {
                if live.spare {
                    self.demand.give_back(live.block_len as u64);
                } else {
                    self.demand.release(live.block_len as u64);
                }
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
                let freed = unsafe { self.backend.free_pinned(live.start as *mut u8) };
                self.counters.add_unpin_time(t.elapsed());
                self.pinned_outside_pool
                    .fetch_sub(live.block_len as u64, Ordering::Relaxed);
                match freed {
                    Ok(()) => self.budget.release(live.block_len as u64),
                    // Possibly still page-locked: its budget stays reserved (see
                    // `release_segment`).
                    Err(e) => tracing::warn!(error = %e, "cuMemFreeHost failed; budget kept"),
                }
            }
            Origin::Mapping => {
                for s in &streams {
                    let _ = self.backend.synchronize_stream(*s);
                }
                if settle_promotion(live) {
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
                let layout = heap_layout(live.size).expect("layout was valid at allocation");
                // SAFETY: allocated by alloc_pageable with this layout, freed once.
                unsafe { std::alloc::dealloc(live.start as *mut u8, layout) };
            }
        }
        self.emit(
            Some(live.tag.site),
            EventKind::Free {
                start: live.start as u64,
            },
        );
    }
}

/// The layout of a small pageable allocation of `size` bytes on the heap: `malloc`'s own
/// alignment (16 bytes, or the size rounded up to a power of two below that), so that the
/// global allocator serves it without an over-aligned allocation's extra work. (Inside
/// `pinwise run` the global allocator is the preload's mimalloc, which keeps freed memory
/// for its next allocations rather than giving it back to the system: pinwise-preload's
/// `own_memory`.)
pub(super) fn heap_layout(size: usize) -> Option<std::alloc::Layout> {
    std::alloc::Layout::from_size_align(size, size.next_power_of_two().min(16)).ok()
}

/// The largest free block a block of `len` bytes is taken from: for a program's request, at
/// most its graded size (so a segment is not held for a much smaller block); else any.
pub(super) fn fit_limit(len: usize, request: bool) -> usize {
    if request {
        crate::grade::graded_size(len)
    } else {
        usize::MAX
    }
}

impl Engine {
    /// The largest free block a `graded`-byte block may be taken from now (under the pool's
    /// lock, `pool`): a block of its own grade; or, for pinwise's own allocation (not a
    /// program's `request`) when none is free, a larger idle block carved, but only where
    /// that block is spare ([`rules::is_spare`] on the pool's demand). A larger idle block
    /// that is not spare belongs to allocations that will want it back (a hot buffer of
    /// another size between its free and its next allocation): carving it would serve this
    /// one by taking the other's block, which then misses, so that two sites take turns
    /// (issue 13: a 4 KiB site carving a 12 KiB site's block every iteration).
    pub(super) fn carve_limit(&self, pool: &PinnedPool, graded: usize, request: bool) -> usize {
        let exact = fit_limit(graded, true);
        if request || pool.has_fit(graded, exact) {
            return exact;
        }
        let idle = rules::IdleBlock {
            fits: pool.has_free(graded),
            pool_bytes: pool.segment_bytes() as u64,
            demand_peak: self.demand.peak(),
            lent: self.demand.lent(),
        };
        if rules::is_spare(&idle, graded as u64) {
            usize::MAX
        } else {
            exact
        }
    }
}

/// Ends promotion for a mapping being freed: a transfer racing with the free (on another
/// thread that found the allocation before it was removed) can no longer promote it, and a
/// promotion already in progress is waited out. Returns whether the mapping is promoted.
fn settle_promotion(live: &Live) -> bool {
    loop {
        match live.promotion.compare_exchange(
            PAGEABLE,
            NO_PROMOTION,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => return false,
            Err(PROMOTING) => std::hint::spin_loop(),
            Err(state) => return state == PROMOTED,
        }
    }
}
