//! The per-process statistics file of `libpinwise_preload.so` (format
//! `pinwise-preload-stats`, `<PINWISE_STATS_DIR>/<pid>.json`): the one definition that the
//! library writes and `pinwise run` reads back.
//!
//! Plain data: the library fills it from its atomic counters (pinwise-preload's `stats`
//! module), pinwise-alloc converts its `AllocStats` into [`EngineStats`]. Reading is
//! tolerant: every struct takes `#[serde(default)]` (a missing field is 0, `None`, empty)
//! and unknown fields are ignored, so a reader takes files from an older or newer library.
//! The JSON keys are the field names, in declaration order; scripts (`bench/gpu/`) and tests
//! read them, so renaming a field changes the format.

use serde::{Deserialize, Serialize};

/// The `format` field of the statistics file.
pub const STATS_FORMAT: &str = "pinwise-preload-stats";
/// Its version.
pub const STATS_VERSION: u64 = 1;

/// The statistics file of one process.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProcessStats {
    /// Always [`STATS_FORMAT`].
    pub format: String,
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
    /// Pinned allocation requests (`cuMemHostAlloc`, `cuMemAllocHost`, runtime forms).
    pub host_allocs: u64,
    /// Of those, served pinned by pinwise.
    pub served_pinned: u64,
    /// Of those, served pageable by pinwise (predicted cold).
    pub served_pageable: u64,
    /// Of those, passed to CUDA as they were (pinwise off, or it could not serve them).
    pub forwarded: u64,
    /// Requests whose flags need pinned memory that the budget could not hold: passed to
    /// CUDA (plain CUDA behaviour), outside the budget.
    pub required_outside_budget: u64,
    /// Frees of pinned allocations (`cuMemFreeHost` / `cudaFreeHost` calls).
    pub host_frees: u64,
    /// Registrations by the program (`cuMemHostRegister`, `cudaHostRegister`).
    pub registrations: u64,
    /// Unregistrations by the program.
    pub unregistrations: u64,
    /// Copies by direction.
    pub transfers: TransferStats,
    /// Copies whose host side was pinned when issued.
    pub transfers_pinned: u64,
    /// Copies whose host side was pageable when issued.
    pub transfers_pageable: u64,
    /// Copies on memory pinwise does not know.
    pub transfers_unknown: u64,
    /// Program buffers registered in place because their copies paid for it (hot).
    pub promotions_on_transfers: u64,
    /// Pageable allocations served for pinned requests, registered because the program
    /// asked a pointer query about them.
    pub promotions_on_queries: u64,
    /// Pageable allocations served for pinned requests registered in place because their
    /// copies showed them hot (or the slowdown bound was spent: `pinwise_core::decide::earn`),
    /// by the preload or the allocator; once each.
    pub promotions_by_allocator: u64,
    /// Promoted ranges unregistered (freed, reallocated, unmapped, or registered by the
    /// program).
    pub demotions: u64,
    /// Registrations of a program buffer replaced by one that also holds a neighbouring
    /// buffer sharing a page with it (so that both stay registered).
    #[serde(default)]
    pub merged_registrations: u64,
    /// Registrations pinwise tried that the driver refused (the memory stayed pageable).
    pub promotion_failures: u64,
    /// Registrations pinwise did not try because the budget was full.
    pub promotion_budget_refusals: u64,
    /// Runtime calls no driver hook saw (recorded at the runtime level).
    pub runtime_only: u64,
    /// Driver wrappers handed out by `dlsym`.
    pub wrapped_by_dlsym: u64,
    /// Driver wrappers handed out by `cuGetProcAddress`, identified by address.
    pub wrapped_by_proc_address: u64,
    /// Driver wrappers handed out by `cuGetProcAddress`, identified by the version rule.
    pub wrapped_by_rule: u64,
    /// `cuGetProcAddress` answers for hooked base names that could not be identified (passed
    /// through unwrapped).
    pub proc_address_unrecognized: u64,
    /// Pointer queries pinwise answered or corrected for its own allocations.
    pub queries_answered: u64,
    /// Asynchronous copies issued on a stream being captured into a CUDA graph (forwarded
    /// and recorded, nothing learned, registered or waited for).
    pub captured_copies: u64,
    /// Copies the driver refused (not recorded in the history: nothing moved).
    pub failed_copies: u64,
    /// `pinwise run --pool`: what the node's pinned pool served, and the fallbacks.
    #[serde(default)]
    pub pool: crate::pool_use::PoolUseStats,
    /// Streams the program destroyed while an allocation pinwise tracks had asynchronous
    /// copies on them: pinwise waited for their work and forgot them first.
    pub streams_forgotten: u64,
    /// Context releases and destructions the program made after pinwise's allocator
    /// started: pinwise waited for its tracked copies and dropped its stream and event
    /// handles first.
    pub contexts_ended: u64,
    /// Mean sampled hook bookkeeping per intercepted copy, ns (`None`: no sample); a
    /// preempted sample inflates it. A sample runs from the copy hook's entry to the call
    /// it forwards and from that call's return to the end of the record (the driver's own
    /// time left out), timed with the CPU's counter (`rdtsc`, `cntvct_el0`) converted at
    /// its rate against `CLOCK_MONOTONIC` over the process's life. A thread's first 64
    /// copies are sampled more often (one in 4 whole, then one in 16); each sample weighs
    /// as the copies it stands for, in the mean and the medians.
    pub hook_ns_mean: Option<f64>,
    /// Median of the same samples, ns (the middle of its bucket: 4 counter ticks wide up
    /// to 512 ticks, then 4.4 %). Taken on copies whose stages are not timed; it includes
    /// about two counter reads of the measurement's own.
    pub hook_ns_median: Option<f64>,
    /// `hook_ns_median` less one counter read (`clock_read_ns`): the bookkeeping an
    /// untimed copy pays, its event's one timestamp and the one counter read every copy
    /// makes on entry included.
    pub hook_ns_net_median: Option<f64>,
    /// What one read of the hooks' timing counter cost in this process, ns (measured at
    /// start: the median of 9 runs of 32 back-to-back reads). Until the hooks timed
    /// themselves with the CPU's counter (issue 10) it was `clock_gettime`'s cost.
    pub clock_read_ns: Option<f64>,
    /// Samples behind the mean and the median.
    pub hook_samples: u64,
    /// Medians of the same samples' parts: what a copy hook spends where.
    pub hook_stages: HookStages,
    /// Events recorded into the history.
    pub events: u64,
    /// Events lost (after the outputs were written, or a full global queue).
    pub events_lost: u64,
    /// Times a thread drained its own full ring.
    pub inline_drains: u64,
    /// Allocation records in the history.
    pub history_records: u64,
    /// The allocator's statistics.
    pub engine: EngineStats,
    /// The history file.
    pub history: OutputStats,
    /// The profile: written (profile mode) or followed (use mode).
    pub profile: OutputStats,
    /// Problems: configuration values not understood, a profile not read, ...
    pub problems: Vec<String>,
    /// The history written while the program ran.
    pub incremental: IncrementalStats,
    /// The cost table that priced the decisions (a named calibration, this GPU's cached
    /// calibration, or the built-in table and why); empty when the allocator did not run.
    pub pricing: String,
    /// The most bytes the program's own pinned requests and registrations held at once, as
    /// plain CUDA would have locked them (whole pages, however pinwise served them): the
    /// ceiling pinwise's own pins stay within (`pinwise_core::decide::ceiling`).
    /// `engine.pinned_bytes_peak` counts every byte locked in the process, these included.
    pub program_pinned_bytes_peak: u64,
    /// Times pinwise gave back idle pool segments or registrations of hot pageable buffers
    /// so that a program request stayed within that ceiling.
    pub ceiling_releases: u64,
    /// Times pinwise gave back less than that ceiling asked, so that pinned memory stood
    /// above it for a while: a copy that may use one of its registrations was in flight
    /// (unregistering could pull the pages from under the transfer), or a CUDA graph
    /// capture was open.
    pub ceiling_deferred: u64,
    /// Copies on a registration pinwise made for the program that waited the longest
    /// allowed (1 s) for a demotion of their pages, and demotions that waited as long for
    /// copies of theirs, and then went on anyway: expected 0.
    pub copy_gate_overruns: u64,
    /// Copies that waited for a demotion of pages they overlap, and demotions that waited
    /// for copies of their pages (however briefly; copies of other memory do not meet).
    pub copy_gate_waits: u64,
    /// How the events' timestamps were taken (see [`TimestampStats`]).
    pub timestamps: TimestampStats,
}

/// How the events' timestamps were taken: stamped with the CPU's time-stamp counter and
/// converted to `CLOCK_MONOTONIC` ns by the drain, or read from the clock (the fallback).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TimestampStats {
    /// `counter` or `clock`: what hooks stamp events with at the end.
    pub source: String,
    /// Why the clock (`None`: the counter throughout).
    pub fallback: Option<String>,
    /// Events stamped with the counter (converted).
    pub counter_stamps: u64,
    /// Events stamped with the clock.
    pub clock_stamps: u64,
    /// (counter, clock) anchors the drain took.
    pub anchors: u64,
    /// Conversions below the previous event's, raised to it (the history never goes back).
    pub raised: u64,
    /// The largest distance of an anchor from the line extrapolated to it from the ones
    /// before, ns: an upper bound on the conversion's error between anchors.
    pub check_max_ns: u64,
}

/// Medians (ns, the middle of a histogram bucket; `None`: no sample) of the parts of a
/// sampled copy hook's bookkeeping, each taken on its own (on other copies than
/// `hook_ns_median`'s, each with a clock read of its own): they need not add up to
/// `hook_ns_median`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HookStages {
    /// From the hook's entry: the thread's state, then working out what the copy moves
    /// (decoding its arguments, asking the driver which side is host memory where the
    /// call does not say).
    pub describe_ns: Option<f64>,
    /// Deciding about it before it is issued: the capture check, the allocator's and the
    /// promotion counters, any registration made, the copy gate.
    pub decide_ns: Option<f64>,
    /// Recording it after the driver accepted it (timestamp, push into the thread's ring).
    pub record_ns: Option<f64>,
}

/// Copies of one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DirectionStats {
    /// Copies.
    pub count: u64,
    /// Bytes.
    pub bytes: u64,
}

/// Copies by direction (keys as [`Direction`](crate::Direction) names them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
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

/// The allocator's statistics as the file carries them: the part of pinwise-alloc's
/// `AllocStats` that is written (pinwise-alloc converts one into the other).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
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
    /// Use mode: allocations without matching advice (decided adaptively).
    pub advice_unmatched: u64,
}

/// One output file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct OutputStats {
    /// Where.
    pub path: Option<String>,
    /// Whether it was written.
    pub written: bool,
    /// Why not, or what went wrong.
    pub error: Option<String>,
}

/// The history written while the program runs (appended every `interval_ms`; see
/// pinwise-preload's `persist` module).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct IncrementalStats {
    /// The file appended to (the history, or the side file of a JSON history), once made.
    pub path: Option<String>,
    /// The interval, ms (0: no appends while the program runs).
    pub interval_ms: u64,
    /// Appends written (the last one, at the end, included).
    pub appends: u64,
    /// Bytes they wrote.
    pub bytes: u64,
    /// The largest append, bytes.
    pub bytes_max: u64,
    /// Record snapshots they wrote.
    pub records: u64,
    /// Appends that failed (a full disk...): the program went on, the next append wrote
    /// what they held.
    pub errors: u64,
    /// The last failure.
    pub last_error: Option<String>,
    /// Time spent encoding appends (the history's lock held), ns.
    pub encode_ns_total: u64,
    /// The longest encoding, ns.
    pub encode_ns_max: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys, in the order the library has always written them.
    const KEYS: &[&str] = &[
        "format",
        "version",
        "pid",
        "top_process",
        "mode",
        "driver_is_standin",
        "allocator_active",
        "allocator_unavailable",
        "snapshot",
        "host_allocs",
        "served_pinned",
        "served_pageable",
        "forwarded",
        "required_outside_budget",
        "host_frees",
        "registrations",
        "unregistrations",
        "transfers",
        "transfers_pinned",
        "transfers_pageable",
        "transfers_unknown",
        "promotions_on_transfers",
        "promotions_on_queries",
        "promotions_by_allocator",
        "demotions",
        "merged_registrations",
        "promotion_failures",
        "promotion_budget_refusals",
        "runtime_only",
        "wrapped_by_dlsym",
        "wrapped_by_proc_address",
        "wrapped_by_rule",
        "proc_address_unrecognized",
        "queries_answered",
        "captured_copies",
        "failed_copies",
        "pool",
        "streams_forgotten",
        "contexts_ended",
        "hook_ns_mean",
        "hook_ns_median",
        "hook_ns_net_median",
        "clock_read_ns",
        "hook_samples",
        "hook_stages",
        "events",
        "events_lost",
        "inline_drains",
        "history_records",
        "engine",
        "history",
        "profile",
        "problems",
        "incremental",
        "pricing",
        "program_pinned_bytes_peak",
        "ceiling_releases",
        "ceiling_deferred",
        "copy_gate_overruns",
        "copy_gate_waits",
        "timestamps",
    ];

    /// Keys of a serialized object, in order (no JSON map type keeps the order here).
    fn keys(json: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut depth = 0;
        let mut chars = json.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' | '[' => depth += 1,
                '}' | ']' => depth -= 1,
                '"' => {
                    let s: String = chars.by_ref().take_while(|&c| c != '"').collect();
                    if depth == 1 && chars.peek() == Some(&':') {
                        out.push(s);
                    }
                }
                _ => {}
            }
        }
        out
    }

    #[test]
    fn the_file_keeps_its_keys_and_their_order() {
        let json = serde_json::to_string(&ProcessStats::default()).unwrap();
        assert_eq!(keys(&json), KEYS);
        let engine = serde_json::to_string(&EngineStats::default()).unwrap();
        assert_eq!(
            keys(&engine),
            [
                "pinned_bytes",
                "pinned_bytes_peak",
                "budget_bytes",
                "pool_bytes",
                "allocations",
                "pinned_allocations",
                "pool_hits",
                "pool_misses",
                "promotions",
                "fallbacks",
                "budget_refusals",
                "pin_ns",
                "unpin_ns",
                "advice_unmatched",
            ]
        );
        let transfers = serde_json::to_string(&TransferStats::default()).unwrap();
        assert_eq!(keys(&transfers), ["HtoD", "DtoH", "DtoD", "HtoH"]);
    }

    #[test]
    fn a_written_file_reads_back_the_same() {
        let mut s = ProcessStats {
            format: STATS_FORMAT.into(),
            version: STATS_VERSION,
            pid: 7,
            mode: "use".into(),
            failed_copies: 3,
            hook_ns_median: Some(46.0),
            problems: vec!["a problem".into()],
            ..Default::default()
        };
        s.transfers.DtoH.bytes = 4096;
        s.engine.pinned_bytes_peak = 1 << 20;
        s.history.path = Some("/tmp/h.json".into());
        let back: ProcessStats = serde_json::from_slice(&serde_json::to_vec(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn missing_fields_are_zero_and_unknown_ones_ignored() {
        let s: ProcessStats = serde_json::from_str(
            r#"{"pid":1,"transfers":{"HtoD":{"count":4}},"engine":{"budget_bytes":9},
               "history":{"written":true},"some_future_field":{"x":1}}"#,
        )
        .unwrap();
        assert_eq!(s.pid, 1);
        assert_eq!(s.transfers.HtoD, DirectionStats { count: 4, bytes: 0 });
        assert_eq!(s.transfers.HtoH, DirectionStats::default());
        assert_eq!(s.engine.budget_bytes, 9);
        assert!(s.history.written && s.history.path.is_none());
        assert_eq!(s.format, "");
        assert_eq!(s.hook_ns_mean, None);
    }
}
