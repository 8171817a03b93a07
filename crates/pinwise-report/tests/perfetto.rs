//! The Perfetto export checked against the trace event format: every event has the fields
//! its phase requires, slices nest on their track, and the content is the history's.
mod common;

use std::collections::{BTreeMap, HashMap};

use common::*;
use pinwise_core::history::Recorded;
use pinwise_core::{CostModel, MemHistory};
use pinwise_report::perfetto::{write_trace, ExportOptions, ExportSummary};
use serde_json::Value;

fn export(h: &MemHistory, options: &ExportOptions) -> (Value, ExportSummary) {
    let mut out = Vec::new();
    let summary = write_trace(
        h,
        &CostModel::builtin(),
        options,
        &mut ScenarioSymbols,
        &mut out,
    )
    .unwrap();
    let v: Value = serde_json::from_slice(&out).expect("the export is JSON");
    (v, summary)
}

/// Checks one event against the Chrome trace event format's requirements; returns what is
/// wrong, if anything.
fn check_event(e: &Value) -> Result<(), String> {
    let obj = e.as_object().ok_or("an event is not an object")?;
    for field in ["name", "ph", "ts", "pid", "tid"] {
        if !obj.contains_key(field) {
            return Err(format!("no `{field}` in {e}"));
        }
    }
    if !e["name"].is_string() {
        return Err(format!("`name` is not a string in {e}"));
    }
    let ts = e["ts"]
        .as_f64()
        .ok_or(format!("`ts` is not a number in {e}"))?;
    if ts < 0.0 || !ts.is_finite() {
        return Err(format!("`ts` {ts} in {e}"));
    }
    if !e["pid"].is_u64() || !e["tid"].is_u64() {
        return Err(format!("`pid`/`tid` are not integers in {e}"));
    }
    match e["ph"].as_str().ok_or("`ph` is not a string")? {
        "X" => {
            let dur = e["dur"]
                .as_f64()
                .ok_or(format!("an X event without `dur`: {e}"))?;
            if dur < 0.0 || !dur.is_finite() {
                return Err(format!("`dur` {dur} in {e}"));
            }
        }
        "i" | "I" => match e["s"].as_str() {
            Some("g" | "p" | "t") => {}
            other => return Err(format!("an instant with scope {other:?}: {e}")),
        },
        "M" => {
            let name = e["name"].as_str().unwrap_or_default();
            let arg = match name {
                "process_name" | "thread_name" => "name",
                "process_sort_index" | "thread_sort_index" => "sort_index",
                other => return Err(format!("unknown metadata event {other}")),
            };
            if e["args"].get(arg).is_none() {
                return Err(format!("metadata without args.{arg}: {e}"));
            }
        }
        "C" => {
            let args = e["args"]
                .as_object()
                .ok_or(format!("a counter without args: {e}"))?;
            if args.is_empty() || !args.values().all(Value::is_number) {
                return Err(format!("counter args must be numbers: {e}"));
            }
        }
        other => return Err(format!("phase {other} is not one this export writes: {e}")),
    }
    Ok(())
}

/// A slice: start, end (microseconds), name.
type Slice = (f64, f64, String);

/// Checks that the X events of each track nest (a child ends before its parent).
fn check_nesting(events: &[Value]) -> Result<(), String> {
    let mut tracks: BTreeMap<(u64, u64), Vec<Slice>> = BTreeMap::new();
    for e in events.iter().filter(|e| e["ph"] == "X") {
        let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
        tracks
            .entry((e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap()))
            .or_default()
            .push((ts, ts + dur, e["name"].as_str().unwrap().to_owned()));
    }
    for (track, mut slices) in tracks {
        // Parents before children: by start, longest first.
        slices.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let mut open: Vec<Slice> = Vec::new();
        for s in slices {
            // Timestamps are microseconds as floats: 1 ps of slack.
            while open.last().is_some_and(|o| o.1 <= s.0 + 1e-6 && o.0 < s.0) {
                open.pop();
            }
            if let Some(parent) = open.last() {
                if s.1 > parent.1 + 1e-6 {
                    return Err(format!(
                        "on {track:?}, {:?} [{}, {}] overlaps {:?} [{}, {}] without nesting",
                        s.2, s.0, s.1, parent.2, parent.0, parent.1
                    ));
                }
            }
            open.push(s);
        }
    }
    Ok(())
}

fn validate(v: &Value) -> &Vec<Value> {
    let events = v["traceEvents"]
        .as_array()
        .expect("traceEvents is an array");
    for e in events {
        if let Err(problem) = check_event(e) {
            panic!("{problem}");
        }
    }
    check_nesting(events).unwrap();
    assert_eq!(v["displayTimeUnit"], "ns");
    events
}

#[test]
fn every_event_has_the_fields_the_format_requires() {
    let s = scenario();
    let (v, summary) = export(&s.history, &ExportOptions::default());
    let events = validate(&v);
    assert_eq!(summary.events, events.len() as u64);
    assert!(v["otherData"]["transfer_durations"]
        .as_str()
        .unwrap()
        .contains("modeled"));
}

#[test]
fn allocations_transfers_and_pins_are_all_there() {
    let s = scenario();
    let (v, summary) = export(&s.history, &ExportOptions::default());
    let events = validate(&v);
    let by_cat = |cat: &str| events.iter().filter(|e| e["cat"] == cat).count();
    assert_eq!(by_cat("allocation"), s.history.len());
    assert_eq!(summary.allocations, s.history.len() as u64);
    // Every retained transfer is a slice, with its bytes and direction.
    let transfers: Vec<&Value> = events.iter().filter(|e| e["cat"] == "transfer").collect();
    let retained = s
        .history
        .allocations()
        .flat_map(|a| a.events().collect::<Vec<_>>())
        .filter(|e| matches!(e.what, Recorded::Transfer { .. }))
        .count();
    assert_eq!(transfers.len(), retained);
    let bytes: u64 = transfers
        .iter()
        .map(|e| e["args"]["bytes"].as_u64().unwrap())
        .sum();
    let history_bytes: u64 = s.history.allocations().map(|a| a.counters().bytes()).sum();
    assert_eq!(bytes, history_bytes);
    let mut directions: HashMap<&str, usize> = HashMap::new();
    for t in &transfers {
        *directions
            .entry(t["args"]["direction"].as_str().unwrap())
            .or_default() += 1;
    }
    assert_eq!(directions.get("HtoD"), Some(&(50 + 5 + 3 + 1 + 10)));
    assert_eq!(directions.get("DtoH"), Some(&20));
    // The registered buffer's pin and unpin are instants on its track.
    let pins: Vec<&Value> = events.iter().filter(|e| e["cat"] == "pin").collect();
    assert_eq!(pins.len(), 2);
    assert_eq!(pins[0]["name"], "pin");
    assert_eq!(pins[1]["name"], "unpin");
    assert_eq!(summary.pin_events, 2);
    // Both processes are named; allocations carry their symbolized site.
    let names: Vec<&str> = events
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(events
        .iter()
        .any(|e| e["cat"] == "allocation" && e["name"].as_str().unwrap().contains("load_batch")));
    // Live host bytes: pid 100 ends with the never-freed 16 MiB pinned buffer.
    let last = events
        .iter()
        .rev()
        .find(|e| e["ph"] == "C" && e["pid"] == 100)
        .unwrap();
    assert_eq!(last["args"]["pinned"], 16 * MIB);
    assert_eq!(last["args"]["pageable"], 0);
}

#[test]
fn concurrent_allocations_get_their_own_lanes() {
    let s = scenario();
    let (v, summary) = export(&s.history, &ExportOptions::default());
    let events = validate(&v);
    // pid 100 holds A, B, C, D and the untracked region at once: five lanes.
    let lanes_100 = events
        .iter()
        .filter(|e| e["name"] == "thread_name" && e["pid"] == 100)
        .count();
    assert_eq!(lanes_100, 5);
    assert_eq!(summary.lanes, 5 + 1);
}

#[test]
fn top_keeps_the_busiest_allocations() {
    let h = synthetic(5, 2000, 20_000, 1024);
    let (v, summary) = export(&h, &ExportOptions { top: Some(25) });
    let events = validate(&v);
    assert_eq!(
        events.iter().filter(|e| e["cat"] == "allocation").count(),
        25
    );
    assert_eq!(summary.allocations_left_out, h.len() as u64 - 25);
    let least_kept = events
        .iter()
        .filter(|e| e["cat"] == "allocation")
        .map(|e| e["args"]["bytes_transferred"].as_u64().unwrap())
        .min()
        .unwrap();
    let mut all: Vec<u64> = h.allocations().map(|a| a.counters().bytes()).collect();
    all.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(least_kept, all[24]);
}

#[test]
fn large_synthetic_histories_export_valid_traces() {
    // Capped records, interior pointers, address reuse, async copies.
    let h = synthetic(6, 5000, 80_000, 16);
    let (v, summary) = export(&h, &ExportOptions::default());
    let events = validate(&v);
    assert_eq!(summary.events, events.len() as u64);
    assert!(summary.counter_samples > 0);
    assert!(
        summary.lanes <= 256 + 1,
        "lanes are reused: {}",
        summary.lanes
    );
}

#[test]
fn the_checks_catch_what_they_look_for() {
    let ok = serde_json::json!({"name": "a", "ph": "X", "ts": 1.0, "dur": 2.0, "pid": 1, "tid": 1});
    assert!(check_event(&ok).is_ok());
    let no_dur = serde_json::json!({"name": "a", "ph": "X", "ts": 1.0, "pid": 1, "tid": 1});
    assert!(check_event(&no_dur).is_err());
    let no_tid = serde_json::json!({"name": "a", "ph": "i", "s": "t", "ts": 1.0, "pid": 1});
    assert!(check_event(&no_tid).is_err());
    let bad_scope =
        serde_json::json!({"name": "a", "ph": "i", "s": "x", "ts": 1.0, "pid": 1, "tid": 1});
    assert!(check_event(&bad_scope).is_err());
    let overlap = vec![
        serde_json::json!({"name": "p", "ph": "X", "ts": 0.0, "dur": 10.0, "pid": 1, "tid": 1}),
        serde_json::json!({"name": "c", "ph": "X", "ts": 5.0, "dur": 10.0, "pid": 1, "tid": 1}),
    ];
    assert!(check_nesting(&overlap).is_err());
}

/// A history file whose processes say they started after their first allocations (a
/// corrupt or hand-edited file: a live history never says so) still exports a valid trace.
#[test]
fn a_process_start_after_its_events_does_not_break_the_export() {
    let s = scenario();
    let mut doc: Value =
        serde_json::from_str(&pinwise_core::format::json::to_string(&s.history)).unwrap();
    for p in doc["processes"].as_array_mut().unwrap() {
        p["first_ts_ns"] = serde_json::json!(u64::MAX / 2);
    }
    let h = pinwise_core::format::load_history_bytes(doc.to_string().as_bytes())
        .expect("the loader takes process times as they are");
    let (v, summary) = export(&h, &ExportOptions::default());
    validate(&v);
    assert!(summary.transfers > 0);
}
