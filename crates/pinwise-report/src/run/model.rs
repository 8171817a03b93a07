//! The run summary's model: [`RunTotals`], the processes' statistics added up.

/// The processes' statistics added up (peaks: the largest), once, for the summary and for
/// the `totals` of the JSON summary (fields marked `serde(skip)` are in the text only).
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RunTotals {
    /// Processes that wrote statistics.
    pub processes: usize,
    /// Pinned requests (cuMemHostAlloc and kin).
    pub host_allocs: u64,
    /// Requests served pinned.
    pub served_pinned: u64,
    /// Requests served pageable.
    pub served_pageable: u64,
    /// Requests passed to CUDA.
    pub forwarded: u64,
    #[serde(skip)]
    /// Of those, over the budget but required pinned.
    pub required_outside_budget: u64,
    /// Host-to-device copies.
    pub transfers_htod: u64,
    /// Device-to-host copies.
    pub transfers_dtoh: u64,
    #[serde(skip)]
    /// Device-to-device copies.
    pub transfers_dtod: u64,
    #[serde(skip)]
    /// Host-to-host copies.
    pub transfers_htoh: u64,
    /// Host-to-device bytes.
    pub bytes_htod: u64,
    /// Device-to-host bytes.
    pub bytes_dtoh: u64,
    /// Copies whose host side was pinned.
    pub transfers_pinned: u64,
    /// Copies whose host side was pageable.
    pub transfers_pageable: u64,
    /// Copies whose host side pinwise did not know.
    pub transfers_unknown: u64,
    /// Asynchronous copies captured into CUDA graphs.
    pub captured_copies: u64,
    /// Copies the driver refused.
    pub failed_copies: u64,
    /// The largest peak of pinned bytes of a process (every byte locked in it: pinwise's
    /// and the program's own).
    pub pinned_bytes_peak_max: u64,
    /// The largest peak of a process's own pinned bytes, as plain CUDA would have locked
    /// them (the ceiling of pinwise's pins where the program pins at all).
    pub program_pinned_bytes_peak_max: u64,
    #[serde(skip)]
    /// The largest budget of a process.
    pub budget_bytes_max: u64,
    /// Pool hits.
    pub pool_hits: u64,
    #[serde(skip)]
    /// Pool misses.
    pub pool_misses: u64,
    /// Fallbacks to pageable (pinning and promotion failures).
    pub fallbacks: u64,
    /// Budget refusals (allocations and promotions).
    pub budget_refusals: u64,
    /// Existing buffers pinned where they lie (the three kinds below).
    pub promotions: u64,
    #[serde(skip)]
    /// Of those, the program's own buffers.
    pub promotions_on_transfers: u64,
    #[serde(skip)]
    /// Of those, its allocator's.
    pub promotions_by_allocator: u64,
    #[serde(skip)]
    /// Of those, before a pointer query.
    pub promotions_on_queries: u64,
    /// Promoted buffers unpinned again.
    pub demotions: u64,
    /// Registrations joined with a neighbour.
    pub merged_registrations: u64,
    /// Events recorded.
    pub events: u64,
    /// Events lost.
    pub events_lost: u64,
    #[serde(skip)]
    /// Timed hook samples.
    pub hook_samples: u64,
    #[serde(skip)]
    /// CUDA entry points wrapped (dlsym, cuGetProcAddress, rules).
    pub wrapped: u64,
}
