//! Building a [`Report`] from a history: the pass (`pass.rs`) goes once over every allocation and
//! its events (totals, estimated times, plots, pinned-for-nothing memory, the profile);
//! core's queries give the hotspots, per-site aggregates and the saving estimate; the
//! profile gives the budget ([`crate::budget`]).

use pinwise_core::history::{AllocKind, AllocationView, Recorded, TransferCounters};
use pinwise_core::policy::{PinRequest, PredictedTransfers};
use std::collections::{BTreeSet, HashMap};

use pinwise_core::{CostModel, Direction, MemHistory, ModuleTable, PinMethod, Policy, Site};

use crate::budget;
use crate::health::{provenance, source_health};
use crate::input::InputInfo;
use crate::pass::Pass;
use crate::progress::Progress;
use crate::sites::{SiteNames, SourceResolver};

pub use crate::model::*;

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

/// Builds the report of `history`.
pub fn build_report(
    history: &MemHistory,
    input: InputInfo,
    cost: &CostModel,
    options: &ReportOptions,
    resolver: &mut dyn SourceResolver,
    progress: &mut Progress,
) -> Report {
    let policy = Policy::new(cost.clone());
    let modules = history.modules();
    let mut names = SiteNames::with_stored(resolver, history.symbols().clone());
    let (origin, span) = trace_span(history);

    // The pass runs on every core; then core's summary and per-site aggregates read the
    // history on a thread of their own while this one builds the profile and the budget
    // (single-threaded work).
    progress.stage("analysing allocations");
    let (pass, tags) = Pass::run(history, cost, &policy, options, origin, span);
    let (budget, summary, mut aggregates) = std::thread::scope(|scope| {
        let core_queries = scope.spawn(|| (history.summary(cost), history.site_aggregates()));
        progress.stage("building the profile");
        let tags = tags.finish();
        progress.stage("planning the pinned budget");
        let budget = budget::analyse(
            &tags.profile,
            &tags.pinned_in_run,
            &policy,
            options.pin_method,
            options.capture_share,
        );
        progress.stage("summing up");
        let (summary, aggregates) = core_queries
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (budget, summary, aggregates)
    });

    progress.stage("ranking call sites");
    let row = |v: &AllocationView<'_>, names: &mut SiteNames<'_>| {
        let mut row = allocation_row(v, names, &modules, &policy, options.pin_method, origin);
        (row.user_frame, row.stack) = stack_labels(history, v);
        row
    };
    let site_frames = site_user_frames(history);
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
            user_frame: site_frames
                .get(&a.site)
                .filter(|f| f.len() == 1)
                .and_then(|f| f.iter().next().cloned()),
            user_frames: site_frames.get(&a.site).map_or(0, |f| f.len() as u64),
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
    let redundant = crate::redundant::analyse(history, cost, options.top, &mut names, &modules);

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
        format: crate::json::REPORT_FORMAT,
        version: crate::json::REPORT_VERSION,
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
        redundant,
        budget,
        pool: crate::pool::analyse(history),
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

/// An allocation's user frame and whole stack, named (see [`AllocationRow::stack`]).
pub fn stack_labels(history: &MemHistory, v: &AllocationView<'_>) -> (Option<String>, Vec<String>) {
    let Some(stack) = v.stack() else {
        return (None, Vec::new());
    };
    let user = history
        .user_frame(&stack)
        .map(|i| history.frame_label(&stack[i]));
    (user, stack.iter().map(|f| history.frame_label(f)).collect())
}

/// Per call site, the distinct user frames of its allocations' stacks.
fn site_user_frames(history: &MemHistory) -> HashMap<Site, BTreeSet<String>> {
    let mut by_stack: HashMap<pinwise_core::StackId, Option<String>> = HashMap::new();
    let mut out: HashMap<Site, BTreeSet<String>> = HashMap::new();
    for v in history.allocations() {
        let Some(id) = v.stack_id() else {
            continue;
        };
        let label = by_stack.entry(id).or_insert_with(|| {
            let stack = history.stack(id)?;
            let i = history.user_frame(&stack)?;
            Some(history.frame_label(&stack[i]))
        });
        if let Some(label) = label {
            out.entry(v.site()).or_default().insert(label.clone());
        }
    }
    out
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
pub(crate) fn decide(
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
pub(crate) fn method_of(kind: AllocKind) -> PinMethod {
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
        user_frame: None,
        stack: Vec::new(),
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
