//! What the hooks did, counted with relaxed atomics, and the per-process statistics file
//! `pinwise run` reads (`<PINWISE_STATS_DIR>/<pid>.json`, format `pinwise-preload-stats`).

use std::sync::atomic::{AtomicU64, Ordering};

use pinwise_core::Direction;
use serde::Serialize;

use crate::recorder::Tally;

/// The `format` field of the statistics file.
pub const STATS_FORMAT: &str = "pinwise-preload-stats";
/// Its version.
pub const STATS_VERSION: u64 = 1;

/// Driver wrappers handed out by `dlsym` (process-wide: lookups happen before the state
/// exists).
pub static WRAPPED_BY_DLSYM: AtomicU64 = AtomicU64::new(0);
/// Driver wrappers handed out by `cuGetProcAddress`, identified by address.
pub static WRAPPED_BY_PROC_ADDRESS: AtomicU64 = AtomicU64::new(0);
/// Driver wrappers handed out by `cuGetProcAddress`, identified by the version rule.
pub static WRAPPED_BY_RULE: AtomicU64 = AtomicU64::new(0);
/// `cuGetProcAddress` answers for hooked base names that could not be identified (passed
/// through unwrapped).
pub static PROC_ADDRESS_UNRECOGNIZED: AtomicU64 = AtomicU64::new(0);

/// Live counters of the hooks.
#[derive(Debug)]
pub struct HookStats {
    /// Pinned allocation requests (`cuMemHostAlloc`, `cuMemAllocHost`, runtime forms).
    pub host_allocs: AtomicU64,
    /// Of those, served by pinwise pinned.
    pub served_pinned: AtomicU64,
    /// Of those, served by pinwise pageable (predicted cold).
    pub served_pageable: AtomicU64,
    /// Of those, passed to CUDA as they were (pinwise off, or it could not serve them).
    pub forwarded: AtomicU64,
    /// Requests whose flags need pinned memory that the budget could not hold: passed to
    /// CUDA (plain CUDA behaviour), outside the budget.
    pub required_outside_budget: AtomicU64,
    /// `cuMemFreeHost` / `cudaFreeHost` calls.
    pub host_frees: AtomicU64,
    /// Registrations by the program (`cuMemHostRegister`, `cudaHostRegister`).
    pub registrations: AtomicU64,
    /// Unregistrations by the program.
    pub unregistrations: AtomicU64,
    /// Program buffers registered in place because their copies paid for it.
    pub promotions_on_transfers: AtomicU64,
    /// Pageable allocations served for pinned requests, registered because the program
    /// asked a pointer query about them.
    pub promotions_on_queries: AtomicU64,
    /// Pageable allocations served for pinned requests that the allocator registered in
    /// place (hot).
    pub promotions_by_allocator: AtomicU64,
    /// Promoted ranges unregistered (freed, reallocated, unmapped, or registered by the
    /// program).
    pub demotions: AtomicU64,
    /// Registrations pinwise tried that the driver refused (the memory stayed pageable).
    pub promotion_failures: AtomicU64,
    /// Registrations pinwise did not try because the budget was full.
    pub promotion_budget_refusals: AtomicU64,
    /// Runtime calls no driver hook saw (recorded at the runtime level).
    pub runtime_only: AtomicU64,
    /// Pointer queries pinwise answered or corrected for its own allocations.
    pub queries_answered: AtomicU64,
    /// Asynchronous copies issued on a stream being captured into a CUDA graph (forwarded
    /// and recorded, nothing learned, registered or waited for).
    pub captured_copies: AtomicU64,
    /// Copies the driver refused (not recorded: nothing moved).
    pub failed_copies: AtomicU64,
    /// Sampled hook bookkeeping time (ns) and samples.
    pub hook_ns: AtomicU64,
    /// Samples in `hook_ns`.
    pub hook_samples: AtomicU64,
    /// The samples by [`HOOK_BUCKET_NS`]-wide buckets (the last one: everything above), for
    /// a median that a preempted sample cannot move.
    pub hook_buckets: [AtomicU64; HOOK_BUCKETS],
}

/// Width of a hook-time bucket, ns.
pub const HOOK_BUCKET_NS: u64 = 4;
/// Buckets of the hook-time histogram.
pub const HOOK_BUCKETS: usize = 256;

impl Default for HookStats {
    fn default() -> Self {
        HookStats {
            host_allocs: AtomicU64::new(0),
            served_pinned: AtomicU64::new(0),
            served_pageable: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
            required_outside_budget: AtomicU64::new(0),
            host_frees: AtomicU64::new(0),
            registrations: AtomicU64::new(0),
            unregistrations: AtomicU64::new(0),
            promotions_on_transfers: AtomicU64::new(0),
            promotions_on_queries: AtomicU64::new(0),
            promotions_by_allocator: AtomicU64::new(0),
            demotions: AtomicU64::new(0),
            promotion_failures: AtomicU64::new(0),
            promotion_budget_refusals: AtomicU64::new(0),
            runtime_only: AtomicU64::new(0),
            queries_answered: AtomicU64::new(0),
            captured_copies: AtomicU64::new(0),
            failed_copies: AtomicU64::new(0),
            hook_ns: AtomicU64::new(0),
            hook_samples: AtomicU64::new(0),
            hook_buckets: [const { AtomicU64::new(0) }; HOOK_BUCKETS],
        }
    }
}

impl HookStats {
    /// Adds one.
    #[inline]
    pub fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds one timed sample.
    #[inline]
    pub fn hook_sample(&self, ns: u64) {
        self.hook_ns.fetch_add(ns, Ordering::Relaxed);
        self.hook_samples.fetch_add(1, Ordering::Relaxed);
        let b = ((ns / HOOK_BUCKET_NS) as usize).min(HOOK_BUCKETS - 1);
        self.hook_buckets[b].fetch_add(1, Ordering::Relaxed);
    }

    /// The median sampled hook time, ns (the middle of its bucket); `None` without samples.
    pub fn hook_median_ns(&self) -> Option<f64> {
        let counts: Vec<u64> = self
            .hook_buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen * 2 >= total {
                return Some((i as u64 * HOOK_BUCKET_NS) as f64 + HOOK_BUCKET_NS as f64 / 2.0);
            }
        }
        None
    }
}

/// Copies of one direction.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct DirectionStats {
    /// Copies.
    pub count: u64,
    /// Bytes.
    pub bytes: u64,
}

/// Copies by direction.
#[derive(Debug, Clone, Copy, Default, Serialize)]
#[allow(non_snake_case)]
pub struct TransferStats {
    /// Host to device.
    pub HtoD: DirectionStats,
    /// Device to host.
    pub DtoH: DirectionStats,
    /// Device to device.
    pub DtoD: DirectionStats,
    /// Host to host.
    pub HtoH: DirectionStats,
}

/// The allocator's statistics (pinwise-alloc's `AllocStats`, as JSON).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct EngineStats {
    /// Page-locked bytes now.
    pub pinned_bytes: u64,
    /// The most page-locked bytes at once (pool, promotions: the whole budget's peak).
    pub pinned_bytes_peak: u64,
    /// The budget.
    pub budget_bytes: u64,
    /// Bytes held by the pool.
    pub pool_bytes: u64,
    /// Allocations served.
    pub allocations: u64,
    /// Of those, pinned.
    pub pinned_allocations: u64,
    /// Served from a free pooled block.
    pub pool_hits: u64,
    /// Needed a new segment.
    pub pool_misses: u64,
    /// Allocator mappings registered in place.
    pub promotions: u64,
    /// Pinning that failed and fell back to pageable.
    pub fallbacks: u64,
    /// Pinning refused by the budget.
    pub budget_refusals: u64,
    /// Time spent pinning, ns.
    pub pin_ns: u64,
    /// Time spent unpinning, ns.
    pub unpin_ns: u64,
    /// Use mode: allocations without matching advice.
    pub advice_unmatched: u64,
}

impl From<pinwise_alloc::AllocStats> for EngineStats {
    fn from(s: pinwise_alloc::AllocStats) -> Self {
        EngineStats {
            pinned_bytes: s.pinned_bytes,
            pinned_bytes_peak: s.pinned_bytes_peak,
            budget_bytes: s.budget_bytes,
            pool_bytes: s.pool_bytes,
            allocations: s.allocations,
            pinned_allocations: s.pinned_allocations,
            pool_hits: s.pool_hits,
            pool_misses: s.pool_misses,
            promotions: s.promotions,
            fallbacks: s.fallbacks,
            budget_refusals: s.budget_refusals,
            pin_ns: s.pin_ns,
            unpin_ns: s.unpin_ns,
            advice_unmatched: s.advice_unmatched,
        }
    }
}

/// One output file.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OutputStats {
    /// Where.
    pub path: Option<String>,
    /// Whether it was written.
    pub written: bool,
    /// Why not, or what went wrong.
    pub error: Option<String>,
}

/// The statistics file of one process.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ProcessStats {
    /// Always [`STATS_FORMAT`].
    pub format: &'static str,
    /// Always [`STATS_VERSION`].
    pub version: u64,
    /// The process.
    pub pid: u32,
    /// Whether it is the process `pinwise run` started (else a child of it).
    pub top_process: bool,
    /// `adaptive`, `profile` or `use`.
    pub mode: String,
    /// Whether the libcuda was pinwise's CPU stand-in (a TEST FIXTURE).
    pub driver_is_standin: bool,
    /// Whether the allocator ran (a libcuda was loaded and had what it needs).
    pub allocator_active: bool,
    /// Why not, if it did not.
    pub allocator_unavailable: Option<String>,
    /// Whether this was a snapshot (dump signal) rather than the end of the process.
    pub snapshot: bool,
    /// Pinned requests.
    pub host_allocs: u64,
    /// Served pinned by pinwise.
    pub served_pinned: u64,
    /// Served pageable by pinwise.
    pub served_pageable: u64,
    /// Passed to CUDA.
    pub forwarded: u64,
    /// Required pinned, over the budget, passed to CUDA.
    pub required_outside_budget: u64,
    /// Frees of pinned allocations.
    pub host_frees: u64,
    /// Registrations by the program.
    pub registrations: u64,
    /// Unregistrations by the program.
    pub unregistrations: u64,
    /// Copies by direction.
    pub transfers: TransferStats,
    /// Copies on pinned host memory.
    pub transfers_pinned: u64,
    /// Copies on pageable host memory.
    pub transfers_pageable: u64,
    /// Copies on memory pinwise does not know.
    pub transfers_unknown: u64,
    /// Program buffers registered in place (hot).
    pub promotions_on_transfers: u64,
    /// Served pageable allocations registered because of a pointer query.
    pub promotions_on_queries: u64,
    /// Served pageable allocations the allocator registered in place.
    pub promotions_by_allocator: u64,
    /// Promoted ranges unregistered.
    pub demotions: u64,
    /// Registrations the driver refused.
    pub promotion_failures: u64,
    /// Registrations refused by the budget.
    pub promotion_budget_refusals: u64,
    /// Runtime calls recorded at the runtime level.
    pub runtime_only: u64,
    /// Wrappers handed out by `dlsym`.
    pub wrapped_by_dlsym: u64,
    /// Wrappers handed out by `cuGetProcAddress`.
    pub wrapped_by_proc_address: u64,
    /// Of those, by the version rule.
    pub wrapped_by_rule: u64,
    /// Unidentified `cuGetProcAddress` answers.
    pub proc_address_unrecognized: u64,
    /// Pointer queries answered or corrected.
    pub queries_answered: u64,
    /// Asynchronous copies on a stream being captured into a CUDA graph.
    pub captured_copies: u64,
    /// Copies the driver refused (not recorded).
    pub failed_copies: u64,
    /// Mean sampled hook bookkeeping per intercepted copy, ns (`None`: no sample); a
    /// preempted sample inflates it.
    pub hook_ns_mean: Option<f64>,
    /// Median of the same samples, ns (4 ns buckets).
    pub hook_ns_median: Option<f64>,
    /// Samples behind it.
    pub hook_samples: u64,
    /// Events recorded into the history.
    pub events: u64,
    /// Events lost (after the outputs were written, or a full global queue).
    pub events_lost: u64,
    /// Times a thread drained its own full ring.
    pub inline_drains: u64,
    /// Allocation records in the history.
    pub history_records: u64,
    /// The allocator.
    pub engine: EngineStats,
    /// The history file.
    pub history: OutputStats,
    /// The profile: written (profile mode) or followed (use mode).
    pub profile: OutputStats,
    /// Problems: configuration values not understood, a profile not read, ...
    pub problems: Vec<String>,
}

impl ProcessStats {
    /// The hooks' counters and the recorded copies into a statistics record (other fields
    /// default).
    pub fn from_hooks(h: &HookStats, copies: &Tally) -> ProcessStats {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let dir = |d: Direction| DirectionStats {
            count: copies.transfers[d.index()],
            bytes: copies.bytes[d.index()],
        };
        let samples = r(&h.hook_samples);
        ProcessStats {
            format: STATS_FORMAT,
            version: STATS_VERSION,
            host_allocs: r(&h.host_allocs),
            served_pinned: r(&h.served_pinned),
            served_pageable: r(&h.served_pageable),
            forwarded: r(&h.forwarded),
            required_outside_budget: r(&h.required_outside_budget),
            host_frees: r(&h.host_frees),
            registrations: r(&h.registrations),
            unregistrations: r(&h.unregistrations),
            transfers: TransferStats {
                HtoD: dir(Direction::HtoD),
                DtoH: dir(Direction::DtoH),
                DtoD: dir(Direction::DtoD),
                HtoH: dir(Direction::HtoH),
            },
            transfers_pinned: copies.pinned,
            transfers_pageable: copies.pageable,
            transfers_unknown: copies.unknown,
            promotions_on_transfers: r(&h.promotions_on_transfers),
            promotions_on_queries: r(&h.promotions_on_queries),
            promotions_by_allocator: r(&h.promotions_by_allocator),
            demotions: r(&h.demotions),
            promotion_failures: r(&h.promotion_failures),
            promotion_budget_refusals: r(&h.promotion_budget_refusals),
            runtime_only: r(&h.runtime_only),
            wrapped_by_dlsym: r(&WRAPPED_BY_DLSYM),
            wrapped_by_proc_address: r(&WRAPPED_BY_PROC_ADDRESS),
            wrapped_by_rule: r(&WRAPPED_BY_RULE),
            proc_address_unrecognized: r(&PROC_ADDRESS_UNRECOGNIZED),
            queries_answered: r(&h.queries_answered),
            captured_copies: r(&h.captured_copies),
            failed_copies: r(&h.failed_copies),
            hook_ns_mean: (samples > 0).then(|| r(&h.hook_ns) as f64 / samples as f64),
            hook_ns_median: h.hook_median_ns(),
            hook_samples: samples,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_ignores_a_few_preempted_samples() {
        let h = HookStats::default();
        assert_eq!(h.hook_median_ns(), None);
        for ns in [40, 42, 44, 45, 47, 50_000, 90_000] {
            h.hook_sample(ns);
        }
        assert_eq!(h.hook_median_ns(), Some(46.0));
        let mean = h.hook_ns.load(Ordering::Relaxed) as f64 / 7.0;
        assert!(mean > 1000.0, "the mean is moved: {mean}");
    }
}
