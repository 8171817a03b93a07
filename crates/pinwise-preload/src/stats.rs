//! What the hooks did, counted with relaxed atomics, and how it fills the per-process
//! statistics file `pinwise run` reads (`<PINWISE_STATS_DIR>/<pid>.json`; the format is
//! defined once, in `pinwise_core::preload_stats`).

use std::sync::atomic::{AtomicU64, Ordering};

use pinwise_core::preload_stats::{
    DirectionStats, HookStages, ProcessStats, TransferStats, STATS_FORMAT, STATS_VERSION,
};
use pinwise_core::Direction;

use crate::cycles::Anchor;

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
    /// Pageable allocations served for pinned requests registered in place because their
    /// copies showed them hot (or the slowdown bound was spent: `pinwise_core::decide::earn`),
    /// by the preload or the allocator; once each.
    pub promotions_by_allocator: AtomicU64,
    /// Promoted ranges unregistered (freed, reallocated, unmapped, or registered by the
    /// program).
    pub demotions: AtomicU64,
    /// Registrations of a program buffer merged with a neighbour's (see
    /// `Pinning::extend_neighbour`).
    pub merged_registrations: AtomicU64,
    /// Registrations pinwise tried that the driver refused (the memory stayed pageable).
    pub promotion_failures: AtomicU64,
    /// Registrations pinwise did not try because the budget was full, or pinned memory
    /// was at its ceiling (`pinwise_core::decide::ceiling`).
    pub promotion_budget_refusals: AtomicU64,
    /// Times extras were given back to keep a program request within the ceiling.
    pub ceiling_releases: AtomicU64,
    /// Times pinwise gave back less than the ceiling asked because a copy that may use a
    /// registration was in flight or a CUDA graph capture was open.
    pub ceiling_deferred: AtomicU64,
    /// Runtime calls no driver hook saw (recorded at the runtime level).
    pub runtime_only: AtomicU64,
    /// Pointer queries pinwise answered or corrected for its own allocations.
    pub queries_answered: AtomicU64,
    /// Asynchronous copies issued on a stream being captured into a CUDA graph (forwarded
    /// and recorded, nothing learned, registered or waited for).
    pub captured_copies: AtomicU64,
    /// Copies the driver refused (not recorded: nothing moved).
    pub failed_copies: AtomicU64,
    /// Streams destroyed while an allocation held them (waited for, forgotten).
    pub streams_forgotten: AtomicU64,
    /// Context releases and destructions seen with the allocator started.
    pub contexts_ended: AtomicU64,
    /// Sampled hook bookkeeping time, in ticks of the hooks' counter ([`crate::cycles`]).
    pub hook_ticks: AtomicU64,
    /// Samples in `hook_ticks`.
    pub hook_samples: AtomicU64,
    /// The samples' weights (the calls each stands for: see `guard::weight_of`), summed;
    /// `hook_ticks` holds each sample times its weight.
    pub hook_weight: AtomicU64,
    /// The samples in the hook-time buckets, for a median that a preempted sample cannot
    /// move.
    pub hook_buckets: TimeHistogram,
    /// The same samples' parts (see [`HookStages`]).
    pub stage_describe: TimeHistogram,
    /// See [`HookStages::decide_ns`].
    pub stage_decide: TimeHistogram,
    /// See [`HookStages::record_ns`].
    pub stage_record: TimeHistogram,
    /// One read of the hooks' counter, measured: thousandths of a tick (0: not measured).
    pub read_cost_milliticks: AtomicU64,
    /// The counter and `CLOCK_MONOTONIC` when the state was created: with a later pair,
    /// the counter's rate (ticks to nanoseconds). `ns` 0: not set (ticks are counted as
    /// nanoseconds).
    origin_ticks: AtomicU64,
    /// See `origin_ticks`.
    origin_ns: AtomicU64,
}

/// A histogram of sampled times (ticks of the hooks' counter) in the hook-time buckets.
#[derive(Debug)]
pub struct TimeHistogram {
    buckets: [AtomicU64; HOOK_BUCKETS],
}

impl Default for TimeHistogram {
    fn default() -> Self {
        TimeHistogram {
            buckets: [const { AtomicU64::new(0) }; HOOK_BUCKETS],
        }
    }
}

impl TimeHistogram {
    /// Adds one sample of `ticks` standing for `weight` calls.
    #[inline]
    pub fn add(&self, ticks: u64, weight: u64) {
        self.buckets[hook_bucket(ticks)].fetch_add(weight, Ordering::Relaxed);
    }

    /// Samples in bucket `i`.
    #[cfg(test)]
    fn count_in(&self, i: usize) -> u64 {
        self.buckets[i].load(Ordering::Relaxed)
    }

    /// The median (the middle of its bucket), ticks; `None` without samples.
    pub fn median(&self) -> Option<f64> {
        let counts: Vec<u64> = self
            .buckets
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
                let (lo, hi) = hook_bucket_range(i);
                return Some((lo + hi) as f64 / 2.0);
            }
        }
        None
    }
}

/// Width of the hook-time buckets below [`HOOK_LINEAR_TICKS`], ticks (about 1.5 ns at a
/// 2.6 GHz counter, 4 ns where the counter is the clock).
pub const HOOK_BUCKET_TICKS: u64 = 4;
/// Below this many ticks the buckets are [`HOOK_BUCKET_TICKS`] wide; above it each is
/// 2^(1/16) times wider than the last (about 4.4 %), up to 2^17 ticks (50 µs at 2.6 GHz);
/// the last bucket holds the rest.
pub const HOOK_LINEAR_TICKS: u64 = 512;
/// Buckets of the hook-time histogram.
pub const HOOK_BUCKETS: usize = 256;
const LINEAR_BUCKETS: usize = (HOOK_LINEAR_TICKS / HOOK_BUCKET_TICKS) as usize;
const STEPS_PER_DOUBLING: f64 = 16.0;

/// The bucket of a sample of `ticks` ticks of the hooks' counter ([`crate::cycles`]).
pub fn hook_bucket(ticks: u64) -> usize {
    if ticks < HOOK_LINEAR_TICKS {
        return (ticks / HOOK_BUCKET_TICKS) as usize;
    }
    let k = ((ticks as f64 / HOOK_LINEAR_TICKS as f64).log2() * STEPS_PER_DOUBLING) as usize;
    (LINEAR_BUCKETS + k).min(HOOK_BUCKETS - 1)
}

/// The times bucket `i` holds: `[lo, hi)` ticks (the last one is open-ended: `hi` is its
/// lower bound's next step). Nanoseconds only after [`HookStats::ns_per_tick`].
pub fn hook_bucket_range(i: usize) -> (u64, u64) {
    if i < LINEAR_BUCKETS {
        let lo = i as u64 * HOOK_BUCKET_TICKS;
        return (lo, lo + HOOK_BUCKET_TICKS);
    }
    let at = |k: usize| {
        (HOOK_LINEAR_TICKS as f64 * (k as f64 / STEPS_PER_DOUBLING).exp2()).round() as u64
    };
    let k = i - LINEAR_BUCKETS;
    (at(k), at(k + 1))
}

/// Removes the hook times from `s` (they do not compare: see [`HookStats::process_stats`]).
fn leave_out_hook_times(s: &mut ProcessStats) {
    s.hook_ns_mean = None;
    s.hook_ns_median = None;
    s.hook_ns_net_median = None;
    s.clock_read_ns = None;
    s.hook_stages = HookStages::default();
}

/// What the recorded copies were, counted as they reach the history (by the drain, so the
/// hooks count nothing themselves).
#[derive(Debug, Clone, Copy, Default)]
pub struct Tally {
    /// Copies per direction (index `Direction::index`).
    pub transfers: [u64; 4],
    /// Bytes per direction.
    pub bytes: [u64; 4],
    /// Copies whose host side was pinned when issued.
    pub pinned: u64,
    /// Copies whose host side was pageable when issued.
    pub pageable: u64,
    /// Copies on memory pinwise does not know (the history decides).
    pub unknown: u64,
}

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
            merged_registrations: AtomicU64::new(0),
            promotion_failures: AtomicU64::new(0),
            promotion_budget_refusals: AtomicU64::new(0),
            ceiling_releases: AtomicU64::new(0),
            ceiling_deferred: AtomicU64::new(0),
            runtime_only: AtomicU64::new(0),
            queries_answered: AtomicU64::new(0),
            captured_copies: AtomicU64::new(0),
            failed_copies: AtomicU64::new(0),
            streams_forgotten: AtomicU64::new(0),
            contexts_ended: AtomicU64::new(0),
            hook_ticks: AtomicU64::new(0),
            hook_samples: AtomicU64::new(0),
            hook_weight: AtomicU64::new(0),
            hook_buckets: TimeHistogram::default(),
            stage_describe: TimeHistogram::default(),
            read_cost_milliticks: AtomicU64::new(0),
            origin_ticks: AtomicU64::new(0),
            origin_ns: AtomicU64::new(0),
            stage_decide: TimeHistogram::default(),
            stage_record: TimeHistogram::default(),
        }
    }
}

impl HookStats {
    /// Adds one.
    #[inline]
    pub fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds one timed sample of `ticks` standing for `weight` calls.
    #[inline]
    pub fn hook_sample(&self, ticks: u64, weight: u64) {
        self.hook_ticks
            .fetch_add(ticks.saturating_mul(weight), Ordering::Relaxed);
        self.hook_samples.fetch_add(1, Ordering::Relaxed);
        self.hook_weight.fetch_add(weight, Ordering::Relaxed);
        self.hook_buckets.add(ticks, weight);
    }

    /// Notes where the counter's rate is measured from (at the state's creation).
    pub fn start_rate(&self, origin: Anchor) {
        self.origin_ticks.store(origin.ticks, Ordering::Relaxed);
        self.origin_ns.store(origin.ns.max(1), Ordering::Relaxed);
    }

    /// Nanoseconds per tick of the hooks' counter, measured since [`HookStats::start_rate`]
    /// (1 if it was not called).
    pub fn ns_per_tick(&self) -> f64 {
        let ns = self.origin_ns.load(Ordering::Relaxed);
        if ns == 0 {
            return 1.0;
        }
        let ticks = self.origin_ticks.load(Ordering::Relaxed);
        crate::cycles::rate_since(Anchor { ticks, ns })
    }

    /// The median sampled hook time, ns at `ns_per_tick` (the middle of its bucket);
    /// `None` without samples.
    pub fn hook_median_ns(&self, ns_per_tick: f64) -> Option<f64> {
        self.hook_buckets.median().map(|m| m * ns_per_tick)
    }

    /// [`HookStats::hook_median_ns`] less one counter read: what an untimed copy pays.
    /// A timed copy's two intervals hold about half of each of its four reads (entry,
    /// before forwarding, after the driver's return, end): two reads' worth, of which an
    /// untimed copy pays one too (every copy reads the counter on entry).
    pub fn hook_net_median_ns(&self, ns_per_tick: f64) -> Option<f64> {
        let read = self.read_cost_ns(ns_per_tick).unwrap_or(0.0);
        self.hook_median_ns(ns_per_tick)
            .map(|m| (m - read).max(0.0))
    }

    /// The measured cost of one counter read, ns at `ns_per_tick` (`None`: not measured).
    pub fn read_cost_ns(&self, ns_per_tick: f64) -> Option<f64> {
        let mt = self.read_cost_milliticks.load(Ordering::Relaxed);
        (mt > 0).then(|| mt as f64 / 1000.0 * ns_per_tick)
    }

    /// Measures what one read of the hooks' counter costs here (median of 9 runs of 32
    /// back-to-back reads) and keeps it for [`HookStats::read_cost_ns`].
    pub fn measure_read_cost(&self, counter: impl Fn() -> u64) {
        let mut runs = [0u64; 9];
        for r in runs.iter_mut() {
            let a = counter();
            for _ in 0..32 {
                std::hint::black_box(counter());
            }
            *r = counter().saturating_sub(a);
        }
        runs.sort_unstable();
        // thousandths of a tick per read: the 33 reads after the first, over 32 intervals.
        self.read_cost_milliticks
            .store(runs[4].saturating_mul(1000) / 33, Ordering::Relaxed);
    }

    /// The hooks' counters and the recorded copies as a statistics record (other fields
    /// default).
    /// When the program made the CPU's counter fault while it ran
    /// ([`crate::cycles::counter_stopped`]) the samples mix counter ticks and nanoseconds:
    /// the hook times are left out (their count stays).
    pub fn process_stats(&self, copies: &Tally) -> ProcessStats {
        let mut s = self.process_stats_at(copies, self.ns_per_tick());
        if crate::cycles::counter_stopped() {
            leave_out_hook_times(&mut s);
        }
        s
    }

    /// [`HookStats::process_stats`] with the counter's rate given.
    fn process_stats_at(&self, copies: &Tally, rate: f64) -> ProcessStats {
        let h = self;
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let dir = |d: Direction| DirectionStats {
            count: copies.transfers[d.index()],
            bytes: copies.bytes[d.index()],
        };
        let samples = r(&h.hook_samples);
        let weight = r(&h.hook_weight);
        ProcessStats {
            format: STATS_FORMAT.to_string(),
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
            merged_registrations: r(&h.merged_registrations),
            promotion_failures: r(&h.promotion_failures),
            promotion_budget_refusals: r(&h.promotion_budget_refusals),
            ceiling_releases: r(&h.ceiling_releases),
            ceiling_deferred: r(&h.ceiling_deferred),
            copy_gate_overruns: crate::promote::COPY_GATE.overruns(),
            copy_gate_waits: crate::promote::COPY_GATE.waits(),
            runtime_only: r(&h.runtime_only),
            wrapped_by_dlsym: r(&WRAPPED_BY_DLSYM),
            wrapped_by_proc_address: r(&WRAPPED_BY_PROC_ADDRESS),
            wrapped_by_rule: r(&WRAPPED_BY_RULE),
            proc_address_unrecognized: r(&PROC_ADDRESS_UNRECOGNIZED),
            queries_answered: r(&h.queries_answered),
            captured_copies: r(&h.captured_copies),
            failed_copies: r(&h.failed_copies),
            streams_forgotten: r(&h.streams_forgotten),
            contexts_ended: r(&h.contexts_ended),
            hook_ns_mean: (weight > 0).then(|| r(&h.hook_ticks) as f64 * rate / weight as f64),
            hook_ns_median: h.hook_median_ns(rate),
            hook_ns_net_median: h.hook_net_median_ns(rate),
            clock_read_ns: h.read_cost_ns(rate),
            hook_samples: samples,
            hook_stages: HookStages {
                describe_ns: h.stage_describe.median().map(|m| m * rate),
                decide_ns: h.stage_decide.median().map(|m| m * rate),
                record_ns: h.stage_record.median().map(|m| m * rate),
            },
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_samples_keep_their_size_in_the_median() {
        // The issue-10 runs reported a median of 1022 ns: the old histogram's last bucket
        // (everything from 1020 ns up). Now a median of microseconds is told as such.
        let h = HookStats::default();
        for ns in [3_000, 3_100, 3_200, 3_300, 90_000] {
            h.hook_sample(ns, 1);
        }
        let m = h.hook_median_ns(1.0).unwrap();
        assert!((3_100.0..3_400.0).contains(&m), "{m}");
    }

    #[test]
    fn buckets_are_contiguous_and_hold_their_samples() {
        let mut last_hi = 0;
        for i in 0..HOOK_BUCKETS - 1 {
            let (lo, hi) = hook_bucket_range(i);
            assert!(
                lo <= last_hi + 1 && lo < hi,
                "bucket {i}: {lo}..{hi} after {last_hi}"
            );
            last_hi = hi;
        }
        assert!(last_hi > 100_000, "the histogram reaches {last_hi} ticks");
        for ticks in [0, 3, 4, 511, 512, 513, 1022, 1_500, 10_000, 99_999] {
            let (lo, hi) = hook_bucket_range(hook_bucket(ticks));
            assert!(
                lo <= ticks && ticks < hi + 1,
                "{ticks} in bucket {lo}..{hi}"
            );
        }
        assert_eq!(hook_bucket(u64::MAX), HOOK_BUCKETS - 1);
    }

    #[test]
    fn the_net_median_takes_off_the_counter_read_only_timed_copies_pay() {
        let h = HookStats::default();
        assert_eq!(h.read_cost_ns(1.0), None);
        // A counter that advances 33 ticks per read.
        let t = std::cell::Cell::new(0u64);
        h.measure_read_cost(|| {
            t.set(t.get() + 33);
            t.get()
        });
        assert_eq!(h.read_cost_ns(1.0), Some(33.0));
        for ticks in [200, 202, 204] {
            h.hook_sample(ticks, 1);
        }
        let m = h.hook_median_ns(1.0).unwrap();
        assert_eq!(h.hook_net_median_ns(1.0), Some(m - 33.0));
    }

    #[test]
    fn ticks_are_reported_as_nanoseconds_at_the_measured_rate() {
        let h = HookStats::default();
        for ticks in [400, 402, 404] {
            h.hook_sample(ticks, 1);
            h.stage_decide.add(ticks / 2, 1);
        }
        // A 2.5 GHz counter: 0.4 ns per tick.
        let s = h.process_stats_at(&Tally::default(), 0.4);
        assert_eq!(s.hook_ns_median, Some(402.0 * 0.4));
        assert_eq!(s.hook_ns_mean, Some(402.0 * 0.4));
        assert_eq!(s.hook_stages.decide_ns, Some(202.0 * 0.4));
        assert_eq!(s.hook_samples, 3);
        // A sample standing for more calls weighs more in the median and the mean.
        let w = HookStats::default();
        w.hook_sample(100, 2);
        w.hook_sample(100, 2);
        w.hook_sample(300, 8);
        let ws = w.process_stats_at(&Tally::default(), 1.0);
        assert_eq!(ws.hook_ns_median, Some(302.0));
        assert_eq!(ws.hook_ns_mean, Some((400.0 + 2400.0) / 12.0));
        assert_eq!(ws.hook_samples, 3);
        // Without a start, ticks count as nanoseconds.
        assert_eq!(h.ns_per_tick(), 1.0);
    }

    #[test]
    fn the_median_ignores_a_few_preempted_samples() {
        let h = HookStats::default();
        assert_eq!(h.hook_median_ns(1.0), None);
        for ns in [40, 42, 44, 45, 47, 50_000, 90_000] {
            h.hook_sample(ns, 1);
        }
        assert_eq!(h.hook_median_ns(1.0), Some(46.0));
        assert!(h.hook_buckets.count_in(HOOK_BUCKETS - 1) == 0);
        let mean = h.hook_ticks.load(Ordering::Relaxed) as f64 / 7.0;
        assert!(mean > 1000.0, "the mean is moved: {mean}");
    }
}
