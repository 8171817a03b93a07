//! The timeline export: Chrome's trace event format (JSON object form), which Perfetto UI
//! (ui.perfetto.dev) and chrome://tracing open.
//!
//! - one process per traced pid; allocations are slices (`ph: "X"`) on "lane" threads,
//!   lanes reused once an allocation ended, so allocations alive at the same time are
//!   side by side and a million allocations need only as many lanes as were ever live at
//!   once;
//! - transfers are slices nested in their allocation's slice, named by direction, size and
//!   host memory state, with `bytes`, `direction` and the rest in `args`. The history
//!   records when a copy was issued, not how long it took: a transfer's duration is the
//!   cost model's estimate (`args.modeled_ns`), cut short where the next transfer of the
//!   same allocation or its end comes first (`args.clamped`);
//! - an allocation whose fingerprinted copies were redundant has `args.redundant` (counts,
//!   bytes, advice; the history keeps per-allocation summaries, not which copy was which,
//!   so transfer slices carry no flag of their own);
//! - pin and unpin (and the OS events the history kept) are instant events (`ph: "i"`,
//!   thread scope);
//! - per process, counters (`ph: "C"`) of live host bytes, pageable and pinned;
//! - names of processes and lanes are metadata events (`ph: "M"`).
//!
//! Timestamps (`ts`) are microseconds after the trace's first event (its `CLOCK_MONOTONIC`
//! value is `otherData.origin_ns`). The file is written one event at a time.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::io::Write;
use std::path::Path;

use serde::Serialize;
use serde_json::{json, Value};

use pinwise_core::history::{AllocKind, AllocState, AllocationView, RecordId, Recorded};
use pinwise_core::{CostModel, MemHistory};

use crate::analysis::trace_span;
use crate::error::ReportError;
use crate::sites::{SiteNames, SourceResolver};
use crate::units;

/// What to export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExportOptions {
    /// Only the allocations that moved the most bytes, this many (`None`: all).
    pub top: Option<usize>,
}

/// What an export wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct ExportSummary {
    /// Trace events written.
    pub events: u64,
    /// Allocations written as slices.
    pub allocations: u64,
    /// Allocations left out (`top`).
    pub allocations_left_out: u64,
    /// Transfer slices.
    pub transfers: u64,
    /// Pin and unpin instants.
    pub pin_events: u64,
    /// Lanes (threads) used, all processes together.
    pub lanes: u64,
    /// Counter samples.
    pub counter_samples: u64,
}

/// Most counter samples per process; more are merged into time buckets (each keeping the
/// largest value of the bucket).
pub const MAX_COUNTER_SAMPLES: usize = 20_000;

/// One trace event. Optional fields are left out when absent.
#[derive(Debug, Serialize)]
struct TraceEvent<'a> {
    name: Cow<'a, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cat: Option<&'static str>,
    ph: &'static str,
    ts: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    pid: u32,
    tid: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<Value>,
}

/// Writes trace events, comma separated, counting them.
struct EventWriter<'w> {
    out: &'w mut dyn Write,
    written: u64,
}

impl EventWriter<'_> {
    fn event(&mut self, e: &TraceEvent<'_>) -> std::io::Result<()> {
        if self.written > 0 {
            self.out.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut *self.out, e)?;
        self.written += 1;
        Ok(())
    }
}

/// Nanoseconds after the origin, as trace microseconds. (Times are taken after the origin
/// with `saturating_sub`: a history file's process start times are what the file says, and
/// may be later than its events.)
fn us(ns_after_origin: u64) -> f64 {
    ns_after_origin as f64 / 1e3
}

/// A pid's lanes: those free again (when, which) and how many were opened.
type Lanes = (BinaryHeap<Reverse<(u64, u64)>>, u64);

/// Writes the Chrome trace of `history` to `out`.
pub fn write_trace(
    history: &MemHistory,
    cost: &CostModel,
    options: &ExportOptions,
    resolver: &mut dyn SourceResolver,
    out: &mut dyn Write,
) -> std::io::Result<ExportSummary> {
    let modules = history.modules();
    let mut names = SiteNames::with_stored(resolver, history.symbols().clone());
    let (origin, span) = trace_span(history);
    let processes: Vec<_> = history.processes().copied().collect();
    let process_end = |index: u32| {
        processes.get(index as usize).map_or(origin + span, |p| {
            p.exit_ts_ns.unwrap_or(p.last_ts_ns).max(p.last_ts_ns)
        })
    };

    // Which allocations, with their start and end.
    let mut chosen: Vec<(u32, u64, u64, u32)> = Vec::with_capacity(history.len()); // pid, start, end, id
    let mut left_out = 0;
    let keep: Option<std::collections::HashSet<u32>> = options.top.map(|n| {
        let mut heap: BinaryHeap<Reverse<(u64, Reverse<u32>)>> = BinaryHeap::new();
        for v in history.allocations() {
            heap.push(Reverse((v.counters().bytes(), Reverse(v.id().0))));
            if heap.len() > n {
                heap.pop();
            }
        }
        heap.into_iter()
            .map(|Reverse((_, Reverse(id)))| id)
            .collect()
    });
    // Live host bytes over time, per pid: (ts, pageable delta, pinned delta).
    let mut deltas: BTreeMap<u32, Vec<(u64, i64, i64)>> = BTreeMap::new();
    for v in history.allocations() {
        let start = v.alloc_ts_ns();
        let end = allocation_end(&v, process_end(v.process_index()));
        if v.tag().call_no > 0 {
            let size = i64::try_from(v.size()).unwrap_or(i64::MAX);
            let (pageable, pinned) = if v.kind().pinned_from_start() {
                (0, size)
            } else {
                (size, 0)
            };
            let d = deltas.entry(v.pid()).or_default();
            d.push((start, pageable, pinned));
            if v.state() != AllocState::Live {
                d.push((end, -pageable, -pinned));
            }
        }
        if keep.as_ref().is_some_and(|k| !k.contains(&v.id().0)) {
            left_out += 1;
            continue;
        }
        chosen.push((v.pid(), start, end, v.id().0));
    }
    chosen.sort_unstable();

    out.write_all(b"{\"traceEvents\":[\n")?;
    let mut w = EventWriter { out, written: 0 };
    let mut summary = ExportSummary {
        allocations_left_out: left_out,
        ..ExportSummary::default()
    };

    // Processes and their counters.
    let mut pids: Vec<u32> = processes.iter().map(|p| p.pid).collect();
    pids.sort_unstable();
    pids.dedup();
    for &pid in &pids {
        w.event(&TraceEvent {
            name: "process_name".into(),
            cat: None,
            ph: "M",
            ts: 0.0,
            dur: None,
            pid,
            tid: 0,
            s: None,
            args: Some(json!({ "name": format!("pid {pid} (pinwise history)") })),
        })?;
        if let Some(d) = deltas.get_mut(&pid) {
            summary.counter_samples += counters(&mut w, pid, d, origin)?;
        }
    }

    // Allocations on lanes, per pid in start order.
    let mut lanes_of_pid: BTreeMap<u32, Lanes> = BTreeMap::new();
    for &(pid, start, end, id) in &chosen {
        let (free, used) = lanes_of_pid.entry(pid).or_default();
        let lane = match free.peek() {
            Some(&Reverse((free_at, lane))) if free_at <= start => {
                free.pop();
                lane
            }
            _ => {
                *used += 1;
                let lane = *used;
                w.event(&TraceEvent {
                    name: "thread_name".into(),
                    cat: None,
                    ph: "M",
                    ts: 0.0,
                    dur: None,
                    pid,
                    tid: lane,
                    s: None,
                    args: Some(json!({ "name": format!("allocations, lane {lane}") })),
                })?;
                w.event(&TraceEvent {
                    name: "thread_sort_index".into(),
                    cat: None,
                    ph: "M",
                    ts: 0.0,
                    dur: None,
                    pid,
                    tid: lane,
                    s: None,
                    args: Some(json!({ "sort_index": lane })),
                })?;
                lane
            }
        };
        free.push(Reverse((end, lane)));
        let Some(v) = history.view(RecordId(id)) else {
            continue;
        };
        allocation(
            &mut w,
            &mut summary,
            history,
            &v,
            &mut names,
            &modules,
            cost,
            origin,
            start,
            end,
            lane,
        )?;
    }
    summary.lanes = lanes_of_pid.values().map(|(_, used)| *used).sum();
    summary.events = w.written;

    let stats = history.stats();
    let other = json!({
        "producer": format!("pinwise {} export", env!("CARGO_PKG_VERSION")),
        "origin_ns": origin,
        "span_ns": span,
        "timestamps": "microseconds after origin_ns (CLOCK_MONOTONIC)",
        "transfer_durations": format!(
            "modeled by the cost model ({}); the history records when copies were issued, not how long they took",
            cost.source()
        ),
        "allocations_left_out": left_out,
        "events_dropped_by_cap": stats.events_dropped_by_cap,
        "source_stats": history.source_stats(),
    });
    write!(
        w.out,
        "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{other}}}\n"
    )?;
    Ok(summary)
}

/// Writes the trace to `path`.
pub fn export_file(
    history: &MemHistory,
    cost: &CostModel,
    options: &ExportOptions,
    resolver: &mut dyn SourceResolver,
    path: &Path,
) -> Result<ExportSummary, ReportError> {
    let write_error = |source| ReportError::Write {
        path: path.to_path_buf(),
        source,
    };
    let mut summary = None;
    pinwise_core::safe_file::write_with(path, |out| {
        summary = Some(write_trace(history, cost, options, resolver, out)?);
        Ok::<(), std::io::Error>(())
    })
    .map_err(write_error)?;
    Ok(summary.expect("written"))
}

/// When an allocation ended, or the latest moment it is known to have lived.
fn allocation_end(v: &AllocationView<'_>, process_end: u64) -> u64 {
    let start = v.alloc_ts_ns();
    let end = match v.state() {
        AllocState::Live => process_end,
        AllocState::Replaced => v.last_event_ts_ns(),
        _ => v.end_ts_ns().unwrap_or(process_end),
    };
    end.max(start)
}

fn kind_label(kind: AllocKind) -> &'static str {
    match kind {
        AllocKind::Pageable => "pageable",
        AllocKind::PinnedAlloc => "pinned",
        AllocKind::Registered => "registered",
        AllocKind::Untracked => "untracked",
    }
}

#[allow(clippy::too_many_arguments)]
fn allocation(
    w: &mut EventWriter<'_>,
    summary: &mut ExportSummary,
    history: &MemHistory,
    v: &AllocationView<'_>,
    names: &mut SiteNames<'_>,
    modules: &pinwise_core::ModuleTable,
    cost: &CostModel,
    origin: u64,
    start: u64,
    end: u64,
    lane: u64,
) -> std::io::Result<()> {
    let pid = v.pid();
    let tag = v.tag();
    let site = names.site(modules, v.site());
    let counters = v.counters();
    let (user_frame, stack) = crate::analysis::stack_labels(history, v);
    let name = if tag.call_no > 0 {
        format!(
            "{} {} #{}",
            units::format_size(v.size()),
            site.short(),
            tag.call_no
        )
    } else {
        format!(
            "{} untracked, first copied at {}",
            units::format_size(v.size()),
            site.short()
        )
    };
    w.event(&TraceEvent {
        name: name.into(),
        cat: Some("allocation"),
        ph: "X",
        ts: us(start.saturating_sub(origin)),
        dur: Some(us(end - start)),
        pid,
        tid: lane,
        s: None,
        args: Some(json!({
            "size": v.size(),
            "kind": kind_label(v.kind()),
            "state": v.state().as_str(),
            "address": format!("{:#x}", v.start()),
            "site": site.long(),
            "module": site.module_path,
            "offset": format!("{:#x}", site.offset),
            "call_no": tag.call_no,
            "transfers": counters.transfers(),
            "bytes_transferred": counters.bytes(),
            "pageable_bytes": counters.pageable_bytes(),
            "end_seen": v.end_ts_ns().is_some(),
            "events_dropped": v.events_dropped(),
            "user_frame": user_frame,
            "stack": stack,
            "redundant": v.redundancy().filter(|r| r.any()).map(|r| json!({
                "uploads": r.uploads,
                "redundant_uploads": r.redundant_uploads,
                "redundant_upload_bytes": r.redundant_upload_bytes,
                "downloads": r.downloads,
                "redundant_downloads": r.redundant_downloads,
                "redundant_download_bytes": r.redundant_download_bytes,
                "advice": crate::redundant::advice(r),
            })),
        })),
    })?;
    summary.allocations += 1;
    let events: Vec<_> = v.events().collect();
    for (i, ev) in events.iter().enumerate() {
        let at = ev.ts_ns.clamp(start, end);
        match ev.what {
            Recorded::Transfer {
                direction,
                bytes,
                host,
                is_async,
                stream,
                pinned,
                ..
            } => {
                // The next transfer of this allocation (or its end) bounds this one's slice.
                let next = events[i + 1..]
                    .iter()
                    .find(|e| matches!(e.what, Recorded::Transfer { .. }))
                    .map_or(end, |e| e.ts_ns.clamp(at, end));
                let modeled = cost.transfer_ns(direction, bytes, pinned);
                let room = next - at;
                // Whole nanoseconds, so that slices end exactly where the next one starts.
                let dur_ns = (modeled.round() as u64).min(room);
                let state = if pinned { "pinned" } else { "pageable" };
                w.event(&TraceEvent {
                    name: format!(
                        "{} {} ({state})",
                        direction.as_str(),
                        units::format_size(bytes)
                    )
                    .into(),
                    cat: Some("transfer"),
                    ph: "X",
                    ts: us(at.saturating_sub(origin)),
                    dur: Some(us(dur_ns)),
                    pid,
                    tid: lane,
                    s: None,
                    args: Some(json!({
                        "bytes": bytes,
                        "direction": direction.as_str(),
                        "host_state": state,
                        "async": is_async,
                        "stream": format!("{stream:#x}"),
                        "offset_in_allocation": host.saturating_sub(v.start()),
                        "modeled_ns": modeled,
                        "clamped": modeled.round() as u64 > room,
                    })),
                })?;
                summary.transfers += 1;
            }
            Recorded::PinPages {
                start: s,
                bytes,
                pages,
            } => {
                instant(
                    w,
                    "pin",
                    "pin",
                    pid,
                    lane,
                    at.saturating_sub(origin),
                    json!({
                        "start": format!("{s:#x}"), "bytes": bytes, "pages": pages,
                    }),
                )?;
                summary.pin_events += 1;
            }
            Recorded::UnpinPages { start: s, pages } => {
                instant(
                    w,
                    "unpin",
                    "pin",
                    pid,
                    lane,
                    at.saturating_sub(origin),
                    json!({
                        "start": format!("{s:#x}"), "pages": pages,
                    }),
                )?;
                summary.pin_events += 1;
            }
            Recorded::Mmap { start: s, len } => {
                instant(
                    w,
                    "mmap",
                    "os",
                    pid,
                    lane,
                    at.saturating_sub(origin),
                    json!({
                        "start": format!("{s:#x}"), "len": len,
                    }),
                )?;
            }
            Recorded::Munmap { start: s, len } => {
                instant(
                    w,
                    "munmap",
                    "os",
                    pid,
                    lane,
                    at.saturating_sub(origin),
                    json!({
                        "start": format!("{s:#x}"), "len": len,
                    }),
                )?;
            }
            Recorded::PageFault { addr } => {
                instant(
                    w,
                    "page fault",
                    "os",
                    pid,
                    lane,
                    at.saturating_sub(origin),
                    json!({
                        "address": format!("{addr:#x}"),
                    }),
                )?;
            }
            Recorded::Alloc { .. } | Recorded::Free => {}
        }
    }
    Ok(())
}

fn instant(
    w: &mut EventWriter<'_>,
    name: &'static str,
    cat: &'static str,
    pid: u32,
    tid: u64,
    at: u64,
    args: Value,
) -> std::io::Result<()> {
    w.event(&TraceEvent {
        name: name.into(),
        cat: Some(cat),
        ph: "i",
        ts: us(at),
        dur: None,
        pid,
        tid,
        s: Some("t"),
        args: Some(args),
    })
}

/// Writes the live-bytes counters of one pid; returns the samples written.
fn counters(
    w: &mut EventWriter<'_>,
    pid: u32,
    deltas: &mut [(u64, i64, i64)],
    origin: u64,
) -> std::io::Result<u64> {
    deltas.sort_unstable_by_key(|d| d.0);
    // Running totals at each distinct timestamp.
    let mut samples: Vec<(u64, i64, i64)> = Vec::new();
    let (mut pageable, mut pinned) = (0i64, 0i64);
    for &(ts, a, b) in deltas.iter() {
        pageable = pageable.saturating_add(a);
        pinned = pinned.saturating_add(b);
        match samples.last_mut() {
            Some(last) if last.0 == ts => *last = (ts, pageable, pinned),
            _ => samples.push((ts, pageable, pinned)),
        }
    }
    if samples.len() > MAX_COUNTER_SAMPLES {
        let first = samples[0].0;
        let width = (samples[samples.len() - 1].0 - first) / MAX_COUNTER_SAMPLES as u64 + 1;
        let mut merged: Vec<(u64, i64, i64)> = Vec::with_capacity(MAX_COUNTER_SAMPLES + 1);
        for (ts, a, b) in samples {
            let bucket = first + (ts - first) / width * width;
            match merged.last_mut() {
                Some(last) if last.0 == bucket => {
                    last.1 = last.1.max(a);
                    last.2 = last.2.max(b);
                }
                _ => merged.push((bucket, a, b)),
            }
        }
        samples = merged;
    }
    for &(ts, a, b) in &samples {
        w.event(&TraceEvent {
            name: "live host bytes".into(),
            cat: Some("memory"),
            ph: "C",
            ts: us(ts.saturating_sub(origin)),
            dur: None,
            pid,
            tid: 0,
            s: None,
            args: Some(json!({ "pageable": a.max(0), "pinned": b.max(0) })),
        })?;
    }
    Ok(samples.len() as u64)
}
