//! Statistics: what the allocator did, counted with relaxed atomics.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::budget::PinBudget;

/// A snapshot of an allocator's statistics. All counts since the allocator was created.
/// (The C ABI hands out a subset: pinwise-capi's `PinwiseAllocStats`.)
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AllocStats {
    /// Page-locked bytes now (pool segments, promoted and dedicated allocations).
    pub pinned_bytes: u64,
    /// The most bytes reserved for pinning at once: an upper bound of the page-locked bytes
    /// at any moment (reservation comes before pinning, release after unpinning), with what
    /// was charged to the budget (the preload charges the program's own registrations and
    /// the requests it passes on to CUDA: then every byte locked in the process).
    pub pinned_bytes_peak: u64,
    /// The pinned budget (cap) in bytes.
    pub budget_bytes: u64,
    /// Bytes held by the pinned pool (in use or free).
    pub pool_bytes: u64,
    /// Allocations served.
    pub allocations: u64,
    /// Of those, served page-locked.
    pub pinned_allocations: u64,
    /// Allocations live now.
    pub live_allocations: u64,
    /// Pinned requests served from a free pooled block.
    pub pool_hits: u64,
    /// Pinned requests that needed a new segment.
    pub pool_misses: u64,
    /// Requests that would have been pageable served from a spare idle pool block
    /// (pinwise-core's `rules::is_spare`; also counted in `pool_hits`).
    pub spare_block_hits: u64,
    /// Pooled blocks waiting for their asynchronous copies to complete.
    pub pending_blocks: u64,
    /// Segments obtained with `cuMemHostAlloc`.
    pub pins_alloc: u64,
    /// Ranges registered with `cuMemHostRegister` (pool segments and promotions).
    pub pins_register: u64,
    /// Live pageable allocations registered in place because they turned hot.
    pub promotions: u64,
    /// Promoted allocations kept as pool segments when freed.
    pub adoptions: u64,
    /// Nanoseconds spent pinning (allocating pinned, registering, touching for it).
    pub pin_ns: u64,
    /// Nanoseconds spent unpinning.
    pub unpin_ns: u64,
    /// Pinning attempts that failed (driver error) and were served pageable instead.
    pub fallbacks: u64,
    /// Pinning attempts refused by the budget.
    pub budget_refusals: u64,
    /// Transfers noted on pinned memory.
    pub transfers_pinned: u64,
    /// Transfers noted on pageable memory.
    pub transfers_pageable: u64,
    /// Pageable requests served from the cache of touched mappings.
    pub pageable_cache_hits: u64,
    /// Bytes in the cache of touched pageable mappings now.
    pub pageable_cached_bytes: u64,
    /// Bytes of freed pageable mappings given back to the OS instead of cached (over the
    /// cache's cap, or memory low).
    pub pageable_released_bytes: u64,
    /// Frees that found memory low and emptied the pageable cache.
    pub pageable_pressure_releases: u64,
    /// Use mode: allocations the profile had no matching advice for (decided adaptively).
    pub advice_unmatched: u64,
}

/// The part of the statistics that the preload library's statistics file carries. Every
/// field is named: a new one does not compile until it is written or left out here.
impl From<AllocStats> for pinwise_core::preload_stats::EngineStats {
    fn from(s: AllocStats) -> Self {
        let AllocStats {
            pinned_bytes,
            pinned_bytes_peak,
            budget_bytes,
            pool_bytes,
            allocations,
            pinned_allocations,
            live_allocations: _,
            pool_hits,
            pool_misses,
            spare_block_hits: _,
            pending_blocks: _,
            pins_alloc: _,
            pins_register: _,
            promotions,
            adoptions: _,
            pin_ns,
            unpin_ns,
            fallbacks,
            budget_refusals,
            transfers_pinned: _,
            transfers_pageable: _,
            pageable_cache_hits: _,
            pageable_cached_bytes: _,
            pageable_released_bytes: _,
            pageable_pressure_releases: _,
            advice_unmatched,
        } = s;
        pinwise_core::preload_stats::EngineStats {
            pinned_bytes,
            pinned_bytes_peak,
            budget_bytes,
            pool_bytes,
            allocations,
            pinned_allocations,
            pool_hits,
            pool_misses,
            promotions,
            fallbacks,
            budget_refusals,
            pin_ns,
            unpin_ns,
            advice_unmatched,
        }
    }
}

/// The live counters behind [`AllocStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub allocations: AtomicU64,
    pub pinned_allocations: AtomicU64,
    pub pool_hits: AtomicU64,
    pub pool_misses: AtomicU64,
    pub spare_block_hits: AtomicU64,
    pub pins_alloc: AtomicU64,
    pub pins_register: AtomicU64,
    pub promotions: AtomicU64,
    pub adoptions: AtomicU64,
    pub pin_ns: AtomicU64,
    pub unpin_ns: AtomicU64,
    pub fallbacks: AtomicU64,
    pub budget_refusals: AtomicU64,
    pub pageable_cache_hits: AtomicU64,
    pub pageable_released_bytes: AtomicU64,
    pub pageable_pressure_releases: AtomicU64,
    pub advice_unmatched: AtomicU64,
}

impl Counters {
    pub fn add_pin_time(&self, d: Duration) {
        self.pin_ns
            .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    pub fn add_unpin_time(&self, d: Duration) {
        self.unpin_ns
            .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    #[allow(clippy::too_many_arguments)]
    pub fn snapshot(
        &self,
        budget: &PinBudget,
        pool_bytes: u64,
        outside_pool: u64,
        pending_blocks: u64,
        cached: u64,
        live: u64,
        [transfers_pinned, transfers_pageable]: [u64; 2],
    ) -> AllocStats {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        AllocStats {
            pinned_bytes: pool_bytes + outside_pool,
            pinned_bytes_peak: budget.peak(),
            budget_bytes: budget.cap(),
            pool_bytes,
            allocations: r(&self.allocations),
            pinned_allocations: r(&self.pinned_allocations),
            live_allocations: live,
            pool_hits: r(&self.pool_hits),
            pool_misses: r(&self.pool_misses),
            spare_block_hits: r(&self.spare_block_hits),
            pending_blocks,
            pins_alloc: r(&self.pins_alloc),
            pins_register: r(&self.pins_register),
            promotions: r(&self.promotions),
            adoptions: r(&self.adoptions),
            pin_ns: r(&self.pin_ns),
            unpin_ns: r(&self.unpin_ns),
            fallbacks: r(&self.fallbacks),
            budget_refusals: r(&self.budget_refusals),
            transfers_pinned,
            transfers_pageable,
            pageable_cache_hits: r(&self.pageable_cache_hits),
            pageable_cached_bytes: cached,
            pageable_released_bytes: r(&self.pageable_released_bytes),
            pageable_pressure_releases: r(&self.pageable_pressure_releases),
            advice_unmatched: r(&self.advice_unmatched),
        }
    }
}
