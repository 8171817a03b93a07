//! What a report holds: plain data that the text and HTML renderings read and `--json`
//! prints. [`crate::analysis::build_report`] fills it.

use std::collections::BTreeMap;

use serde::Serialize;

use pinwise_core::history::{
    AllocKind, AllocState, DirectionCounters, HistoryStats, SavingEstimate,
};
use pinwise_core::Direction;

use crate::budget::BudgetAnalysis;
use crate::input::InputInfo;
use crate::sites::SiteLabel;

/// Everything a report shows; the terminal and HTML renderings read it, `--json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `"pinwise-report"` ([`crate::json::REPORT_FORMAT`]).
    pub format: &'static str,
    /// Version of this JSON layout ([`crate::json::REPORT_VERSION`]).
    pub version: u32,
    /// Version of pinwise that made it.
    pub pinwise_version: &'static str,
    /// The file reported on.
    pub input: InputInfo,
    /// What ran, as far as the history tells.
    pub provenance: Provenance,
    /// The calibration times were estimated with.
    pub cost_model: String,
    /// Counts and the span of the trace.
    pub overview: Overview,
    /// Transfers and estimated times by direction (HtoD, DtoH, DtoD, HtoH).
    pub directions: Vec<DirectionRow>,
    /// Share of host<->device bytes (attributed) moved from or to pageable memory.
    pub pageable_share: f64,
    /// What pinning would have saved (core's estimate).
    pub saving: SavingEstimate,
    /// The allocations with the most transfers.
    pub hotspots: Vec<AllocationRow>,
    /// The allocations with the fewest transfers (largest first among equals).
    pub coldspots: Vec<AllocationRow>,
    /// Call sites by bytes transferred.
    pub sites: Vec<SiteRow>,
    /// Pinned memory whose transfers did not pay back its pinning.
    pub pinned_for_nothing: PinnedForNothing,
    /// Copies whose bytes the other side already had (fingerprinted copies).
    pub redundant: crate::redundant::RedundantTransfers,
    /// The pinned budget the smart allocator would need.
    pub budget: BudgetAnalysis,
    /// The node's pinned pool, when the run used it (`pinwise run --pool`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<crate::pool::PoolSection>,
    /// What the sources said about themselves: drops, lost events.
    pub source: SourceHealth,
    /// The history's own bookkeeping (its per-direction arrays keyed by direction).
    #[serde(serialize_with = "crate::json::keyed_history_stats")]
    pub history_stats: HistoryStats,
    /// The data behind the HTML plots.
    pub plots: PlotData,
}

/// What produced the history, as far as it tells.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Provenance {
    /// Whether there is evidence that the run used the CPU stand-in for libcuda.
    pub cpu_standin: bool,
    /// The evidence (source statistics or module paths naming the stand-in).
    pub evidence: Vec<String>,
    /// One sentence for people.
    pub note: String,
}

/// Counts and the span of the trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Overview {
    /// Records (allocations and implicit records).
    pub records: u64,
    /// Implicit records (memory whose allocation was not seen).
    pub implicit_records: u64,
    /// Records still live at the end.
    pub live: u64,
    /// Records whose events were capped (their counters stay exact).
    pub capped_records: u64,
    /// Processes, with their pids.
    pub pids: Vec<u32>,
    /// First event of the trace (`CLOCK_MONOTONIC` ns); times in the report are after it.
    pub origin_ns: u64,
    /// From the first event to the last, ns.
    pub span_ns: u64,
}

/// One direction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DirectionRow {
    /// Which.
    pub direction: Direction,
    /// Every transfer seen.
    pub transfers: u64,
    /// Every byte moved.
    pub bytes: u64,
    /// Transfers attributed to host allocations, by host memory state.
    pub attributed: DirectionCounters,
    /// Transfers with no host allocation (device-only, or untracked and not recorded).
    pub unattributed_transfers: u64,
    /// Their bytes.
    pub unattributed_bytes: u64,
    /// Modeled time of the attributed transfers as they happened, ns (HtoD and DtoH only).
    pub estimated_ns: Option<f64>,
    /// Modeled time of the same transfers from pinned memory, ns.
    pub estimated_if_pinned_ns: Option<f64>,
}

/// One allocation in a table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AllocationRow {
    /// Record id in the history.
    pub id: u32,
    /// Process.
    pub pid: u32,
    /// Call site.
    pub site: SiteLabel,
    /// Call number at the site (0: implicit record).
    pub call_no: u32,
    /// Size.
    pub size: u64,
    /// Kind of memory.
    #[serde(serialize_with = "crate::json::snake")]
    pub kind: AllocKind,
    /// Final state.
    #[serde(serialize_with = "crate::json::snake")]
    pub state: AllocState,
    /// Transfers.
    pub transfers: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// Of those, from or to pageable memory.
    pub pageable_bytes: u64,
    /// Host-to-device transfers.
    pub htod: u64,
    /// Device-to-host transfers.
    pub dtoh: u64,
    /// When it was allocated, ns after the trace's first event.
    pub alloc_at_ns: u64,
    /// How long it lived, if its end was seen.
    pub lifetime_ns: Option<u64>,
    /// Whether pinning it pays back (its transfers, the policy, the pin method).
    pub pinning_pays: bool,
    /// Why or why not, in words.
    pub reason: String,
    /// Transfer time pinning saves minus its cost, ns.
    pub net_saving_ns: f64,
    /// The frame of its stack a reader can change (see [`pinwise_core::stack::user_frame`]),
    /// named; `None` when the source captured no stack.
    pub user_frame: Option<String>,
    /// Its whole stack, innermost first, each frame named (empty: none captured).
    pub stack: Vec<String>,
}

/// One call site in a table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SiteRow {
    /// The site.
    pub site: SiteLabel,
    /// Allocations made there.
    pub allocations: u64,
    /// Implicit records revealed by events from there.
    pub implicit_records: u64,
    /// Transfers of all of them.
    pub transfers: u64,
    /// Bytes.
    pub bytes: u64,
    /// Of which from or to pageable memory.
    pub pageable_bytes: u64,
    /// Smallest allocation.
    pub min_size: u64,
    /// Largest allocation.
    pub max_size: u64,
    /// Highest call number.
    pub max_call_no: u32,
    /// The user frame of the site's allocations when they share one; `None` when no
    /// stack was captured there.
    pub user_frame: Option<String>,
    /// How many different user frames the site's allocations have (their call paths).
    pub user_frames: u64,
}

/// Pinned memory that did not pay back its pinning.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PinnedForNothing {
    /// Pinned allocations (allocated pinned, registered, or pinned later).
    pub pinned_allocations: u64,
    /// Their bytes.
    pub pinned_bytes: u64,
    /// Of them, never transferred.
    pub never_transferred: u64,
    /// Of them, transferred too rarely (or too small) to pay back.
    pub rarely_transferred: u64,
    /// Bytes of both.
    pub wasted_bytes: u64,
    /// Pinning cost they did not earn back, ns.
    pub wasted_ns: f64,
    /// By call site, most bytes first.
    pub sites: Vec<WasteRow>,
}

/// Pinned-for-nothing memory of one call site.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WasteRow {
    /// The site.
    pub site: SiteLabel,
    /// Allocations.
    pub allocations: u64,
    /// Of which never transferred.
    pub never_transferred: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Their transfers.
    pub transfers: u64,
    /// Largest.
    pub max_size: u64,
    /// Pinning cost not earned back, ns.
    pub wasted_ns: f64,
}

/// What the sources reported about themselves, and what the history could not attribute.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SourceHealth {
    /// Every source statistic.
    pub stats: BTreeMap<String, u64>,
    /// Non-zero statistics that mean lost or doubtful information.
    pub losses: BTreeMap<String, u64>,
    /// Sentences for people, one per problem.
    pub warnings: Vec<String>,
}

/// The data behind the plots.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlotData {
    /// Bytes moved per time bucket.
    pub traffic: Traffic,
    /// The allocations that moved the most bytes, with their transfers' times.
    pub lifetimes: Vec<Lifetime>,
    /// Hot, warm and cold allocations by size.
    pub size_classes: Vec<SizeClass>,
}

/// Bytes moved over time by direction and host memory state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Traffic {
    /// Width of a bucket, ns.
    pub bucket_ns: u64,
    /// Per bucket: bytes of [HtoD pageable, HtoD pinned, DtoH pageable, DtoH pinned].
    #[serde(serialize_with = "crate::json::traffic_buckets")]
    pub buckets: Vec<[u64; 4]>,
    /// Whether some transfers are missing (dropped by the per-allocation cap).
    pub incomplete: bool,
}

/// Names of [`Traffic::buckets`]' series.
pub const TRAFFIC_SERIES: [&str; 4] = [
    "HtoD from pageable",
    "HtoD from pinned",
    "DtoH to pageable",
    "DtoH to pinned",
];

/// One allocation's life for the timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Lifetime {
    /// Its row in the hot tables, shortened: site and call number.
    pub label: String,
    /// Kind of memory.
    #[serde(serialize_with = "crate::json::snake")]
    pub kind: AllocKind,
    /// Size.
    pub size: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// Start, ns after the trace's first event.
    pub start_ns: u64,
    /// End, ns after the trace's first event (the trace's end when not seen).
    pub end_ns: u64,
    /// Whether its end was seen.
    pub ended: bool,
    /// Its retained transfers: time (ns after the first event) and whether pinned.
    #[serde(serialize_with = "crate::json::timed_transfers")]
    pub transfers: Vec<(u64, bool)>,
}

/// Allocations of one size class (sizes from `min_size` to twice that).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct SizeClass {
    /// Smallest size of the class (a power of two).
    pub min_size: u64,
    /// Allocations whose transfers pay back pinning.
    pub hot: u64,
    /// Transferred, but not enough to pay back.
    pub warm: u64,
    /// Never transferred.
    pub cold: u64,
    /// Bytes of the hot ones.
    pub hot_bytes: u64,
    /// Bytes of the warm ones.
    pub warm_bytes: u64,
    /// Bytes of the cold ones.
    pub cold_bytes: u64,
}
