//! Building a [`Report`] from a history: one pass over every allocation and its events for
//! the totals, estimated times, plots and pinned-for-nothing memory; core's queries for
//! hotspots, per-site aggregates, the saving estimate and (through a profile) the budget.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

use serde::Serialize;

use pinwise_core::history::{
    AllocKind, AllocState, AllocationView, DirectionCounters, HistoryStats, Recorded,
    SavingEstimate, TransferCounters,
};
use pinwise_core::policy::{PinRequest, PredictedTransfers};
use pinwise_core::{CostModel, Direction, MemHistory, ModuleTable, PinMethod, Policy, Site};

use crate::budget::{self, BudgetAnalysis};
use crate::input::InputInfo;
use crate::progress::Progress;
use crate::sites::{SiteLabel, SiteNames, SiteResolver};
use crate::tags::TagProfile;

/// What to put in a report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReportOptions {
    /// Rows of the hotspot, coldspot, site and pinned-for-nothing tables.
    pub top: usize,
    /// Share of the attainable saving the budget should capture (0 to 1).
    pub capture_share: f64,
    /// How the smart allocator would pin (costs of pinning).
    pub pin_method: PinMethod,
    /// Time buckets of the bytes-over-time plot.
    pub time_buckets: usize,
    /// Allocations drawn on the lifetime timeline (those that moved the most bytes).
    pub timeline_rows: usize,
    /// Threads for the pass over the allocations (`None`: as many as the machine has, at
    /// most 8; histories under 50 000 records use one).
    pub threads: Option<usize>,
}

impl Default for ReportOptions {
    /// 10 rows, 90 % of the saving, pinning by registration, 240 buckets, 40 lifetimes,
    /// threads as the machine has.
    fn default() -> Self {
        ReportOptions {
            top: 10,
            capture_share: 0.9,
            pin_method: PinMethod::RegisterTouched,
            time_buckets: 240,
            timeline_rows: 40,
            threads: None,
        }
    }
}

/// Everything a report shows; the terminal and HTML renderings read it, `--json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
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
    /// The pinned budget the smart allocator would need.
    pub budget: BudgetAnalysis,
    /// What the sources said about themselves: drops, lost events.
    pub source: SourceHealth,
    /// The history's own bookkeeping.
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
    pub kind: AllocKind,
    /// Final state.
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

/// Builds the report of `history`.
pub fn build_report(
    history: &MemHistory,
    input: InputInfo,
    cost: &CostModel,
    options: &ReportOptions,
    resolver: &mut dyn SiteResolver,
    progress: &mut Progress,
) -> Report {
    let policy = Policy::new(cost.clone());
    let modules = history.modules();
    let mut names = SiteNames::new(resolver);
    let (origin, span) = trace_span(history);

    // The pass runs on every core; then core's summary and per-site aggregates read the
    // history on a thread of their own while this one builds the profile and the budget
    // (single-threaded work).
    progress.stage("analysing allocations");
    let (pass, tags) = Pass::run(history, cost, &policy, options, origin, span);
    let (budget, summary, mut aggregates) = std::thread::scope(|scope| {
        let core_queries = scope.spawn(|| (history.summary(cost), history.site_aggregates()));
        progress.stage("building the profile");
        let profile = tags.finish();
        progress.stage("planning the pinned budget");
        let budget = budget::analyse(&profile, &policy, options.pin_method, options.capture_share);
        progress.stage("summing up");
        let (summary, aggregates) = core_queries
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (budget, summary, aggregates)
    });

    progress.stage("ranking call sites");
    let row = |v: &AllocationView<'_>, names: &mut SiteNames<'_>| {
        allocation_row(v, names, &modules, &policy, options.pin_method, origin)
    };
    let hotspots: Vec<AllocationRow> = history
        .hotspots(options.top)
        .iter()
        .filter(|v| v.transfer_count() > 0)
        .map(|v| row(v, &mut names))
        .collect();
    let coldspots: Vec<AllocationRow> = pass
        .coldest
        .iter()
        .filter_map(|&id| history.view(pinwise_core::history::RecordId(id)))
        .map(|v| row(&v, &mut names))
        .collect();
    aggregates.sort_by(|a, b| {
        b.counters
            .bytes()
            .cmp(&a.counters.bytes())
            .then(a.site.cmp(&b.site))
    });
    let sites = aggregates
        .iter()
        .take(options.top)
        .map(|a| SiteRow {
            site: names.site(&modules, a.site),
            allocations: a.allocations,
            implicit_records: a.implicit_records,
            transfers: a.counters.transfers(),
            bytes: a.counters.bytes(),
            pageable_bytes: a.counters.pageable_bytes(),
            min_size: a.min_size,
            max_size: a.max_size,
            max_call_no: a.max_call_no,
        })
        .collect();
    let several_processes = history.processes().count() > 1;
    let lifetimes = pass
        .lifetime_ids()
        .into_iter()
        .filter_map(|id| history.view(pinwise_core::history::RecordId(id)))
        .map(|v| lifetime(&v, &mut names, &modules, origin, span, several_processes))
        .collect();
    let pinned_for_nothing = pass.waste.finish(&mut names, &modules, options.top);

    let stats = *history.stats();
    let directions = Direction::ALL
        .iter()
        .map(|&d| {
            let all = stats.transfers[d.index()];
            let attributed = summary.by_direction[d.index()].attributed;
            let host_device = matches!(d, Direction::HtoD | Direction::DtoH);
            DirectionRow {
                direction: d,
                transfers: all.transfers,
                bytes: all.bytes,
                attributed,
                unattributed_transfers: all.transfers.saturating_sub(attributed.transfers()),
                unattributed_bytes: all.bytes.saturating_sub(attributed.bytes()),
                estimated_ns: host_device.then_some(pass.time[d.index()].0),
                estimated_if_pinned_ns: host_device.then_some(pass.time[d.index()].1),
            }
        })
        .collect();

    Report {
        pinwise_version: env!("CARGO_PKG_VERSION"),
        input,
        provenance: provenance(history, &modules),
        cost_model: cost.source().to_owned(),
        overview: Overview {
            records: history.len() as u64,
            implicit_records: summary.implicit,
            live: summary.live,
            capped_records: pass.capped,
            pids: history.processes().map(|p| p.pid).collect(),
            origin_ns: origin,
            span_ns: span,
        },
        directions,
        pageable_share: summary.pageable_share,
        saving: summary.estimate,
        hotspots,
        coldspots,
        sites,
        pinned_for_nothing,
        budget,
        source: source_health(history),
        history_stats: stats,
        plots: PlotData {
            traffic: Traffic {
                bucket_ns: pass.bucket_ns,
                buckets: pass.traffic,
                incomplete: pass.capped > 0,
            },
            lifetimes,
            size_classes: pass
                .size_classes
                .into_iter()
                .filter(|c| c.hot + c.warm + c.cold > 0)
                .collect(),
        },
    }
}

/// The first event of the trace and the time from it to the last (or to the last exit).
pub fn trace_span(history: &MemHistory) -> (u64, u64) {
    let origin = history
        .processes()
        .map(|p| p.first_ts_ns)
        .min()
        .unwrap_or(0);
    let end = history
        .processes()
        .map(|p| p.last_ts_ns.max(p.exit_ts_ns.unwrap_or(0)))
        .max()
        .unwrap_or(origin);
    (origin, end.saturating_sub(origin))
}

/// What the policy says of pinning an allocation with these counters.
fn decide(
    policy: &Policy,
    size: u64,
    counters: &TransferCounters,
    method: PinMethod,
) -> pinwise_core::Decision {
    policy.decide(&PinRequest {
        size,
        transfers: PredictedTransfers::from_counters(counters),
        remaining_budget: u64::MAX,
        method,
    })
}

/// How memory of this kind was pinned, for costing it.
fn method_of(kind: AllocKind) -> PinMethod {
    match kind {
        AllocKind::PinnedAlloc => PinMethod::MallocHost,
        _ => PinMethod::RegisterTouched,
    }
}

fn allocation_row(
    v: &AllocationView<'_>,
    names: &mut SiteNames<'_>,
    modules: &ModuleTable,
    policy: &Policy,
    method: PinMethod,
    origin: u64,
) -> AllocationRow {
    let counters = v.counters();
    let decision = decide(policy, v.size(), &counters, method);
    let alloc_ts = v.alloc_ts_ns();
    AllocationRow {
        id: v.id().0,
        pid: v.pid(),
        site: names.site(modules, v.site()),
        call_no: v.tag().call_no,
        size: v.size(),
        kind: v.kind(),
        state: v.state(),
        transfers: counters.transfers(),
        bytes: counters.bytes(),
        pageable_bytes: counters.pageable_bytes(),
        htod: counters.direction(Direction::HtoD).transfers(),
        dtoh: counters.direction(Direction::DtoH).transfers(),
        alloc_at_ns: alloc_ts.saturating_sub(origin),
        lifetime_ns: v.end_ts_ns().map(|e| e.saturating_sub(alloc_ts)),
        pinning_pays: decision.pin,
        reason: decision.reason.to_string(),
        net_saving_ns: decision.net_ns(),
    }
}

/// Most transfer marks kept per timeline row.
const MAX_MARKS_PER_ROW: usize = 2000;

fn lifetime(
    v: &AllocationView<'_>,
    names: &mut SiteNames<'_>,
    modules: &ModuleTable,
    origin: u64,
    span: u64,
    with_pid: bool,
) -> Lifetime {
    let start = v.alloc_ts_ns().saturating_sub(origin);
    let end = v.end_ts_ns().map(|e| e.saturating_sub(origin));
    let mut transfers: Vec<(u64, bool)> = v
        .events()
        .filter_map(|e| match e.what {
            Recorded::Transfer { pinned, .. } => Some((e.ts_ns.saturating_sub(origin), pinned)),
            _ => None,
        })
        .collect();
    if transfers.len() > MAX_MARKS_PER_ROW {
        // One mark per slice of the row is all a plot can show.
        let step = transfers.len().div_ceil(MAX_MARKS_PER_ROW);
        transfers = transfers.into_iter().step_by(step).collect();
    }
    let call_no = v.tag().call_no;
    let site = names.site(modules, v.site()).short();
    let pid = if with_pid {
        format!("pid {}: ", v.pid())
    } else {
        String::new()
    };
    Lifetime {
        label: if call_no > 0 {
            format!("{pid}{site} #{call_no}")
        } else {
            format!("{pid}{site} (untracked)")
        },
        kind: v.kind(),
        size: v.size(),
        bytes: v.counters().bytes(),
        start_ns: start,
        end_ns: end.unwrap_or(span).max(start),
        ended: end.is_some(),
        transfers,
    }
}

/// The one pass over every allocation and its events, in chunks of records on several
/// threads whose results are merged.
struct Pass {
    /// Per direction: modeled time as happened, and if pinned, ns.
    time: [(f64, f64); 4],
    bucket_ns: u64,
    traffic: Vec<[u64; 4]>,
    capped: u64,
    size_classes: Vec<SizeClass>,
    /// Coldest allocations: (transfers, Reverse(size), id), the `top` smallest kept in a
    /// max-heap.
    cold: BinaryHeap<(u64, Reverse<u64>, u32)>,
    /// Coldest allocations' ids, coldest first (after [`Pass::finish`]).
    coldest: Vec<u32>,
    /// Most bytes moved: (bytes, Reverse(id)) kept in a min-heap.
    busiest: BinaryHeap<Reverse<(u64, Reverse<u32>)>>,
    waste: WasteAcc,
}

/// Records per chunk below which the pass stays on one thread.
const MIN_CHUNK: usize = 50_000;

/// What a pass reads, shared by its threads.
struct PassInput<'a> {
    history: &'a MemHistory,
    cost: &'a CostModel,
    policy: &'a Policy,
    options: &'a ReportOptions,
    origin: u64,
    bucket_ns: u64,
    buckets: usize,
}

impl Pass {
    fn run(
        history: &MemHistory,
        cost: &CostModel,
        policy: &Policy,
        options: &ReportOptions,
        origin: u64,
        span: u64,
    ) -> (Pass, TagProfile) {
        let bucket_ns = span.div_ceil(options.time_buckets.max(1) as u64).max(1);
        let input = PassInput {
            history,
            cost,
            policy,
            options,
            origin,
            bucket_ns,
            buckets: (span / bucket_ns + 1) as usize,
        };
        let n = history.len();
        let threads = match options.threads {
            Some(t) => t.clamp(1, n.max(1)),
            None => std::thread::available_parallelism()
                .map_or(1, |t| t.get())
                .clamp(1, 8)
                .min(n.div_ceil(MIN_CHUNK).max(1)),
        };
        let chunk = n.div_ceil(threads).max(1);
        let ranges: Vec<std::ops::Range<usize>> = (0..threads)
            .map(|t| (t * chunk).min(n)..((t + 1) * chunk).min(n))
            .collect();
        let parts: Vec<(Pass, TagProfile)> = if threads == 1 {
            vec![Pass::chunk(&input, 0..n)]
        } else {
            std::thread::scope(|scope| {
                let handles: Vec<_> = ranges
                    .into_iter()
                    .map(|r| {
                        let input = &input;
                        scope.spawn(move || Pass::chunk(input, r))
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                    .collect()
            })
        };
        let mut parts = parts.into_iter();
        let (mut pass, mut profile) = parts.next().expect("at least one chunk");
        for (p, t) in parts {
            pass.merge(p, options);
            profile.merge(t);
        }
        pass.coldest = std::mem::take(&mut pass.cold)
            .into_sorted_vec()
            .into_iter()
            .map(|(_, _, id)| id)
            .collect();
        (pass, profile)
    }

    fn empty(input: &PassInput<'_>) -> Pass {
        Pass {
            time: [(0.0, 0.0); 4],
            bucket_ns: input.bucket_ns,
            traffic: vec![[0; 4]; input.buckets],
            capped: 0,
            size_classes: (0..64)
                .map(|b| SizeClass {
                    min_size: 1u64 << b,
                    ..SizeClass::default()
                })
                .collect(),
            cold: BinaryHeap::new(),
            coldest: Vec::new(),
            busiest: BinaryHeap::new(),
            waste: WasteAcc::default(),
        }
    }

    /// The pass over records `range`.
    fn chunk(input: &PassInput<'_>, range: std::ops::Range<usize>) -> (Pass, TagProfile) {
        let options = input.options;
        let mut pass = Pass::empty(input);
        let mut profile = TagProfile::new(input.history);
        for i in range {
            let Some(v) = input
                .history
                .view(pinwise_core::history::RecordId(i as u32))
            else {
                continue;
            };
            let capped = v.is_capped();
            let mut counters = TransferCounters::default();
            let (mut first_ts, mut last_ts) = (None, 0);
            for ev in v.events() {
                first_ts.get_or_insert(ev.ts_ns);
                last_ts = ev.ts_ns;
                if let Recorded::Transfer {
                    direction,
                    bytes,
                    pinned,
                    ..
                } = ev.what
                {
                    if !capped {
                        counters.add(direction, bytes, pinned);
                        if matches!(direction, Direction::HtoD | Direction::DtoH) {
                            let t = &mut pass.time[direction.index()];
                            t.0 += input.cost.transfer_ns(direction, bytes, pinned);
                            t.1 += input.cost.transfer_ns(direction, bytes, true);
                        }
                    }
                    pass.add_traffic(
                        ev.ts_ns.saturating_sub(input.origin),
                        direction,
                        bytes,
                        pinned,
                    );
                }
            }
            if capped {
                pass.capped += 1;
                counters = v.counters();
                pass.add_capped_time(input.cost, &counters);
            }
            profile.add(&v, &counters, first_ts.unwrap_or(0), last_ts);
            let size = v.size();
            let transfers = counters.transfers();
            let bytes = counters.bytes();
            let decision =
                (transfers > 0).then(|| decide(input.policy, size, &counters, options.pin_method));
            let class = &mut pass.size_classes[63 - size.max(1).leading_zeros() as usize];
            match decision {
                None => {
                    class.cold += 1;
                    class.cold_bytes += size;
                }
                Some(d) if d.pin => {
                    class.hot += 1;
                    class.hot_bytes += size;
                }
                Some(_) => {
                    class.warm += 1;
                    class.warm_bytes += size;
                }
            }
            let kind = v.kind();
            if kind.pinned_from_start() || v.pinned_by_registration() {
                let d = decide(input.policy, size, &counters, method_of(kind));
                pass.waste.add(v.site(), size, transfers, &d);
            }
            if v.tag().call_no > 0 {
                pass.keep_cold((transfers, Reverse(size), v.id().0), options.top);
            }
            if bytes > 0 {
                pass.keep_busy(Reverse((bytes, Reverse(v.id().0))), options.timeline_rows);
            }
        }
        (pass, profile)
    }

    fn keep_cold(&mut self, key: (u64, Reverse<u64>, u32), top: usize) {
        self.cold.push(key);
        if self.cold.len() > top {
            self.cold.pop();
        }
    }

    fn keep_busy(&mut self, key: Reverse<(u64, Reverse<u32>)>, rows: usize) {
        self.busiest.push(key);
        if self.busiest.len() > rows {
            self.busiest.pop();
        }
    }

    /// Adds another chunk's results.
    fn merge(&mut self, other: Pass, options: &ReportOptions) {
        for (a, b) in self.time.iter_mut().zip(other.time) {
            a.0 += b.0;
            a.1 += b.1;
        }
        for (a, b) in self.traffic.iter_mut().zip(other.traffic) {
            for (x, y) in a.iter_mut().zip(b) {
                *x += y;
            }
        }
        self.capped += other.capped;
        for (a, b) in self.size_classes.iter_mut().zip(other.size_classes) {
            a.hot += b.hot;
            a.warm += b.warm;
            a.cold += b.cold;
            a.hot_bytes += b.hot_bytes;
            a.warm_bytes += b.warm_bytes;
            a.cold_bytes += b.cold_bytes;
        }
        for k in other.cold {
            self.keep_cold(k, options.top);
        }
        for k in other.busiest {
            self.keep_busy(k, options.timeline_rows);
        }
        self.waste.merge(other.waste);
    }

    fn add_traffic(&mut self, at: u64, direction: Direction, bytes: u64, pinned: bool) {
        let series = match direction {
            Direction::HtoD => 0,
            Direction::DtoH => 2,
            _ => return,
        } + usize::from(pinned);
        let i = ((at / self.bucket_ns) as usize).min(self.traffic.len() - 1);
        self.traffic[i][series] += bytes;
    }

    /// A capped record's modeled times, from its exact counters at mean sizes (as core's
    /// estimate does).
    fn add_capped_time(&mut self, cost: &CostModel, counters: &TransferCounters) {
        for d in [Direction::HtoD, Direction::DtoH] {
            let c = counters.direction(d);
            for (n, bytes, pinned) in [
                (c.pageable_transfers, c.pageable_bytes, false),
                (c.pinned_transfers, c.pinned_bytes, true),
            ] {
                if let Some(each) = bytes.checked_div(n) {
                    let t = &mut self.time[d.index()];
                    t.0 += n as f64 * cost.transfer_ns(d, each, pinned);
                    t.1 += n as f64 * cost.transfer_ns(d, each, true);
                }
            }
        }
    }

    /// The busiest allocations' ids, in creation order.
    fn lifetime_ids(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self
            .busiest
            .iter()
            .map(|Reverse((_, Reverse(id)))| *id)
            .collect();
        ids.sort_unstable();
        ids
    }
}

/// Pinned-for-nothing totals and per-site sums.
#[derive(Default)]
struct WasteAcc {
    pinned_allocations: u64,
    pinned_bytes: u64,
    never: u64,
    rarely: u64,
    wasted_bytes: u64,
    wasted_ns: f64,
    by_site: HashMap<Site, WasteRowAcc>,
}

#[derive(Default)]
struct WasteRowAcc {
    allocations: u64,
    never: u64,
    bytes: u64,
    transfers: u64,
    max_size: u64,
    wasted_ns: f64,
}

impl WasteAcc {
    fn add(&mut self, site: Site, size: u64, transfers: u64, decision: &pinwise_core::Decision) {
        self.pinned_allocations += 1;
        self.pinned_bytes += size;
        if decision.pin {
            return;
        }
        let wasted = (decision.cost_ns - decision.saving_ns.max(0.0)).max(0.0);
        if transfers == 0 {
            self.never += 1;
        } else {
            self.rarely += 1;
        }
        self.wasted_bytes += size;
        self.wasted_ns += wasted;
        let row = self.by_site.entry(site).or_default();
        row.allocations += 1;
        row.never += u64::from(transfers == 0);
        row.bytes += size;
        row.transfers += transfers;
        row.max_size = row.max_size.max(size);
        row.wasted_ns += wasted;
    }

    fn merge(&mut self, other: WasteAcc) {
        self.pinned_allocations += other.pinned_allocations;
        self.pinned_bytes += other.pinned_bytes;
        self.never += other.never;
        self.rarely += other.rarely;
        self.wasted_bytes += other.wasted_bytes;
        self.wasted_ns += other.wasted_ns;
        for (site, r) in other.by_site {
            let row = self.by_site.entry(site).or_default();
            row.allocations += r.allocations;
            row.never += r.never;
            row.bytes += r.bytes;
            row.transfers += r.transfers;
            row.max_size = row.max_size.max(r.max_size);
            row.wasted_ns += r.wasted_ns;
        }
    }

    fn finish(
        self,
        names: &mut SiteNames<'_>,
        modules: &ModuleTable,
        top: usize,
    ) -> PinnedForNothing {
        let mut rows: Vec<(Site, WasteRowAcc)> = self.by_site.into_iter().collect();
        rows.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(&b.0)));
        PinnedForNothing {
            pinned_allocations: self.pinned_allocations,
            pinned_bytes: self.pinned_bytes,
            never_transferred: self.never,
            rarely_transferred: self.rarely,
            wasted_bytes: self.wasted_bytes,
            wasted_ns: self.wasted_ns,
            sites: rows
                .into_iter()
                .take(top)
                .map(|(site, r)| WasteRow {
                    site: names.site(modules, site),
                    allocations: r.allocations,
                    never_transferred: r.never,
                    bytes: r.bytes,
                    transfers: r.transfers,
                    max_size: r.max_size,
                    wasted_ns: r.wasted_ns,
                })
                .collect(),
        }
    }
}

/// Words in a source statistic's name that mean information was lost or is doubtful.
const LOSS_WORDS: [&str; 8] = [
    "drop", "lost", "error", "fail", "full", "unknown", "without", "overflow",
];

fn source_health(history: &MemHistory) -> SourceHealth {
    let stats = history.source_stats().clone();
    let losses: BTreeMap<String, u64> = stats
        .iter()
        .filter(|(k, &v)| v > 0 && LOSS_WORDS.iter().any(|w| k.contains(w)))
        .map(|(k, &v)| (k.clone(), v))
        .collect();
    let mut warnings = Vec::new();
    for (k, v) in &losses {
        warnings.push(format!("source statistic {k} = {v}"));
    }
    let s = history.stats();
    if s.events_dropped_by_cap > 0 {
        warnings.push(format!(
            "{} events were not kept (per-allocation cap of {}); counters stay exact, timelines miss them",
            s.events_dropped_by_cap,
            history.config().max_events_per_allocation
        ));
    }
    if s.unmatched_frees > 0 {
        warnings.push(format!(
            "{} frees of addresses with no live allocation",
            s.unmatched_frees
        ));
    }
    if s.unattributed_events > 0 {
        warnings.push(format!(
            "{} events could not be attributed to an allocation",
            s.unattributed_events
        ));
    }
    if s.replaced_records > 0 {
        warnings.push(format!(
            "{} allocations were replaced before their free was seen (missed frees?)",
            s.replaced_records
        ));
    }
    SourceHealth {
        stats,
        losses,
        warnings,
    }
}

/// The stand-in's names, as they appear in its file names and in statistics sources may
/// record (`libpinwise_standin_cuda.so`, `pinwise-standin-libs-*`, `*standin*`).
const STANDIN_MARK: &str = "standin";

fn provenance(history: &MemHistory, modules: &ModuleTable) -> Provenance {
    let mut evidence: Vec<String> = history
        .source_stats()
        .iter()
        .filter(|(k, &v)| v > 0 && k.to_ascii_lowercase().contains(STANDIN_MARK))
        .map(|(k, v)| format!("source statistic {k} = {v}"))
        .collect();
    evidence.extend(
        modules
            .snapshot()
            .iter()
            .filter(|m| m.path.to_ascii_lowercase().contains(STANDIN_MARK))
            .map(|m| format!("call sites in {}", m.path)),
    );
    let cpu_standin = !evidence.is_empty();
    let note = if cpu_standin {
        "This history comes from a run on the CPU stand-in for libcuda (a test fixture): no \
         GPU moved these bytes. Times below are what the cost model predicts for the same \
         transfers on the calibrated GPU, not figures of this run."
            .to_owned()
    } else {
        "The history does not record which device ran. Times below are estimates from the \
         cost model (the history records what moved, not how long it took)."
            .to_owned()
    };
    Provenance {
        cpu_standin,
        evidence,
        note,
    }
}
