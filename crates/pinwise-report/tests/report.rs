//! The report's figures on a history whose figures are known, and on synthetic ones.
mod common;

use common::*;
use pinwise_core::decide::plan::PinPlan;
use pinwise_core::history::{AllocKind, Recorded};
use pinwise_core::profile::Profile;
use pinwise_core::{CostModel, Direction, MemHistory, PinMethod, Policy, Site};
use pinwise_report::text::WIDTH;
use pinwise_report::{build_report, NoSymbols, Progress, Report, ReportOptions};

fn report_of(h: &MemHistory, options: &ReportOptions) -> Report {
    build_report(
        h,
        info("scenario"),
        &CostModel::builtin(),
        options,
        &mut ScenarioSymbols,
        &mut Progress::hidden(),
    )
}

#[test]
fn totals_by_direction_count_every_transfer() {
    let s = scenario();
    let r = report_of(&s.history, &ReportOptions::default());
    let htod = &r.directions[Direction::HtoD.index()];
    assert_eq!(htod.transfers, 50 + 5 + 3 + 1 + 10);
    assert_eq!(htod.bytes, 60 * 64 * MIB + 5 * 4 * MIB + 3 * 4096 + MIB);
    assert_eq!(
        htod.unattributed_transfers, 0,
        "the untracked copy gets a record"
    );
    let dtoh = &r.directions[Direction::DtoH.index()];
    assert_eq!((dtoh.transfers, dtoh.bytes), (20, 20 * 64 * MIB));
    let dtod = &r.directions[Direction::DtoD.index()];
    assert_eq!((dtod.transfers, dtod.unattributed_transfers), (1, 1));
    assert_eq!(dtod.estimated_ns, None, "no host memory: no estimate");
    // Pinned: the 5 copies of the registered buffer; everything else pageable.
    assert_eq!(htod.attributed.pinned_transfers, 5);
    assert_eq!(htod.attributed.pinned_bytes, 20 * MIB);
    let host_bytes = htod.attributed.bytes() + dtoh.attributed.bytes();
    let pageable = htod.attributed.pageable_bytes + dtoh.attributed.pageable_bytes;
    assert!((r.pageable_share - pageable as f64 / host_bytes as f64).abs() < 1e-12);
}

#[test]
fn estimated_times_are_the_cost_model_summed_over_transfers() {
    let s = scenario();
    let cost = CostModel::builtin();
    let r = report_of(&s.history, &ReportOptions::default());
    // The same sum, written out from the events.
    let mut expected = [(0.0, 0.0); 4];
    for v in s.history.allocations() {
        for e in v.events() {
            if let Recorded::Transfer {
                direction,
                bytes,
                pinned,
                ..
            } = e.what
            {
                let t = &mut expected[direction.index()];
                t.0 += cost.transfer_ns(direction, bytes, pinned);
                t.1 += cost.transfer_ns(direction, bytes, true);
            }
        }
    }
    for d in [Direction::HtoD, Direction::DtoH] {
        let row = &r.directions[d.index()];
        let (got, pinned) = (
            row.estimated_ns.unwrap(),
            row.estimated_if_pinned_ns.unwrap(),
        );
        assert!((got - expected[d.index()].0).abs() < 1e-6 * got, "{d:?}");
        assert!(
            (pinned - expected[d.index()].1).abs() < 1e-6 * pinned,
            "{d:?}"
        );
        assert!(pinned < got, "{d:?}: pinned copies of 64 MiB are faster");
    }
    // Core's own estimate is what the report shows.
    assert_eq!(r.saving, s.history.summary(&cost).estimate);
}

#[test]
fn hotspots_and_coldspots_name_their_call_sites() {
    let s = scenario();
    let r = report_of(&s.history, &ReportOptions::default());
    let hot = &r.hotspots[0];
    assert_eq!((hot.pid, hot.call_no, hot.size), (100, 1, 64 * MIB));
    assert_eq!((hot.transfers, hot.htod, hot.dtoh), (70, 50, 20));
    assert_eq!(hot.bytes, 70 * 64 * MIB);
    assert!(
        hot.pinning_pays,
        "70 copies of 64 MiB pay back a registration"
    );
    assert_eq!(hot.site.short(), "load_batch (loader.cc:41)");
    assert!(hot.site.long().contains("/src/train/loader.cc:41"));
    assert!(r
        .hotspots
        .windows(2)
        .all(|w| w[0].transfers >= w[1].transfers));
    // Coldest first, largest first among equals: the pinned buffer nobody copied.
    let cold = &r.coldspots[0];
    assert_eq!(
        (cold.transfers, cold.size, cold.kind),
        (0, 16 * MIB, AllocKind::PinnedAlloc)
    );
    assert_eq!(cold.site.short(), "make_staging (loader.cc:77)");
    assert!(!cold.pinning_pays);
    assert!(
        r.coldspots.iter().all(|c| c.call_no > 0),
        "no implicit record"
    );
    // Sites by bytes: load_batch first (A and its twin in pid 200).
    assert_eq!(r.sites[0].site.short(), "load_batch (loader.cc:41)");
    assert_eq!(r.sites[0].allocations, 2);
    assert_eq!(r.sites[0].bytes, 80 * 64 * MIB);
}

#[test]
fn pinned_memory_that_never_paid_back_is_reported() {
    let s = scenario();
    let r = report_of(&s.history, &ReportOptions::default());
    let p = &r.pinned_for_nothing;
    assert_eq!(
        p.pinned_allocations, 2,
        "the cuMemHostAlloc buffer and the registered one"
    );
    assert_eq!(p.pinned_bytes, 20 * MIB);
    assert_eq!((p.never_transferred, p.rarely_transferred), (1, 0));
    assert_eq!(p.wasted_bytes, 16 * MIB);
    let cost = CostModel::builtin();
    let expected = cost.pin_cost_ns(16 * MIB, PinMethod::MallocHost)
        + cost.unpin_cost_ns(16 * MIB, PinMethod::MallocHost);
    assert!((p.wasted_ns - expected).abs() < 1e-6 * expected);
    assert_eq!(p.sites.len(), 1);
    assert_eq!(p.sites[0].site.short(), "make_staging (loader.cc:77)");
}

#[test]
fn the_budget_is_checked_by_cores_plan() {
    let s = scenario();
    let r = report_of(&s.history, &ReportOptions::default());
    let b = &r.budget;
    let policy = Policy::new(CostModel::builtin());
    let profile = Profile::from_history(&s.history);
    let unlimited = PinPlan::new(&profile, &policy, u64::MAX);
    assert!((b.attainable_ns - unlimited.net_saving_ns()).abs() < 1e-6 * b.attainable_ns);
    assert_eq!(b.attainable_peak_bytes, unlimited.peak_pinned_bytes());
    assert_eq!(b.tags_worth_pinning, unlimited.pinned().count() as u64);
    // Buffer C was registered for all its copies: its saving is counted, and said apart
    // (the saving sentence, over pageable memory, leaves it out).
    let key = s.history.modules().get(s.app).unwrap().key();
    let c = unlimited.decision(&key, REGISTERED_SITE, 1).unwrap();
    assert!(c.pin, "5 copies of 4 MiB pay back a registration");
    assert_eq!(b.tags_pinned_in_run, 1);
    assert_eq!(b.pinned_in_run_ns, c.net_ns());
    let text = pinwise_report::text::render(&r);
    // Sentences are wrapped at the width: compared with their words on one line.
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("This run had pinned 1 of these allocations already"),
        "{text}"
    );
    assert!(b.plan_saving_ns >= 0.9 * b.attainable_ns);
    assert!(b.plan_peak_bytes <= b.budget_bytes);
    let at = pinwise_report::budget::plan_at(&profile, &policy, b.budget_bytes);
    assert_eq!(b.plan_saving_ns, at.net_saving_ns());
    assert_eq!(b.plan_pinned_tags, at.pinned().count() as u64);
    // The 64 MiB load_batch buffer is most of the saving: the budget holds it.
    assert!(b.budget_bytes >= 64 * MIB, "{}", b.budget_bytes);
    assert!(b
        .curve
        .windows(2)
        .all(|w| w[0].budget_bytes <= w[1].budget_bytes
            && w[0].net_saving_ns <= w[1].net_saving_ns + 1e-9));
}

#[test]
fn source_statistics_and_provenance_are_carried() {
    let mut s = scenario();
    let r = report_of(&s.history, &ReportOptions::default());
    assert_eq!(r.source.losses.get("tracer.ringbuf_drops"), Some(&3));
    assert!(!r.source.losses.contains_key("tracer.records"));
    assert!(r
        .source
        .warnings
        .iter()
        .any(|w| w.contains("ringbuf_drops")));
    assert!(!r.provenance.cpu_standin);
    assert!(r.provenance.note.contains("does not record which device"));
    // A source that says it ran on the stand-in.
    s.history.set_source_stat("source.cuda_standin", 1);
    let r = report_of(&s.history, &ReportOptions::default());
    assert!(r.provenance.cpu_standin);
    assert!(r.provenance.note.contains("CPU stand-in"));
    let text = pinwise_report::text::render(&r);
    assert!(
        text.contains("!! This history comes from a run on the CPU stand-in"),
        "{text}"
    );
}

#[test]
fn the_text_report_fits_100_columns_and_says_everything() {
    let s = scenario();
    let r = report_of(&s.history, &ReportOptions::default());
    let text = pinwise_report::text::render(&r);
    for line in text.lines() {
        assert!(
            line.chars().count() <= WIDTH,
            "{} columns: {line}",
            line.chars().count()
        );
    }
    for needle in [
        "TRANSFERS BY DIRECTION",
        "PINNED BUDGET",
        "HOTSPOTS",
        "COLDSPOTS",
        "CALL SITES",
        "PINNED FOR NOTHING",
        "SOURCE",
        "load_batch (loader.cc:41)",
        "make_staging (loader.cc:77)",
        "tracer.ringbuf_drops",
        "cost model: built-in",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    // Without symbols: module and offset.
    let plain = build_report(
        &s.history,
        info("scenario"),
        &CostModel::builtin(),
        &ReportOptions::default(),
        &mut NoSymbols,
        &mut Progress::hidden(),
    );
    assert_eq!(plain.hotspots[0].site.short(), "train+0x1100");
}

#[test]
fn the_json_report_has_every_part() {
    let s = scenario();
    let r = report_of(&s.history, &ReportOptions::default());
    let v: serde_json::Value = serde_json::to_value(&r).unwrap();
    for key in [
        "input",
        "provenance",
        "cost_model",
        "overview",
        "directions",
        "pageable_share",
        "saving",
        "hotspots",
        "coldspots",
        "sites",
        "pinned_for_nothing",
        "budget",
        "source",
        "history_stats",
        "plots",
    ] {
        assert!(v.get(key).is_some(), "no {key}");
    }
    assert_eq!(
        v["hotspots"][0]["site"]["location"]["function"],
        "load_batch"
    );
    assert_eq!(v["directions"][0]["direction"], "HtoD");
}

#[test]
fn an_empty_history_reports_nothing_to_do() {
    let h = MemHistory::default();
    let r = report_of(&h, &ReportOptions::default());
    assert!(r.hotspots.is_empty() && r.coldspots.is_empty());
    assert_eq!(r.budget.tags_worth_pinning, 0);
    let text = pinwise_report::text::render(&r);
    assert!(text.contains("no allocation was transferred"), "{text}");
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains("would pin nothing"), "{text}");
    let page = pinwise_report::html::render(&r).unwrap();
    assert_eq!(page.matches("<svg").count(), pinwise_report::html::PLOTS);
}

#[test]
fn the_pass_agrees_with_core_on_capped_synthetic_histories() {
    // A low cap: many records keep only some events (counters stay exact).
    let h = synthetic(7, 3000, 60_000, 12);
    assert!(h.stats().events_dropped_by_cap > 0);
    let r = report_of(&h, &ReportOptions::default());
    let summary = h.summary(&CostModel::builtin());
    for d in Direction::ALL {
        assert_eq!(
            r.directions[d.index()].attributed,
            summary.by_direction[d.index()].attributed
        );
    }
    assert!(r.plots.traffic.incomplete);
    assert!(r.overview.capped_records > 0);
    // Size classes count every record once.
    let classes: u64 = r
        .plots
        .size_classes
        .iter()
        .map(|c| c.hot + c.warm + c.cold)
        .sum();
    assert_eq!(classes, h.len() as u64);
    // Traffic buckets hold exactly the retained transfers' bytes.
    let retained: u64 = h
        .allocations()
        .flat_map(|v| v.events().collect::<Vec<_>>())
        .filter_map(|e| match e.what {
            Recorded::Transfer {
                direction: Direction::HtoD | Direction::DtoH,
                bytes,
                ..
            } => Some(bytes),
            _ => None,
        })
        .sum();
    let bucketed: u64 = r.plots.traffic.buckets.iter().flatten().sum();
    assert_eq!(bucketed, retained);
}

#[test]
fn threads_do_not_change_the_report() {
    let h = synthetic(9, 20_000, 120_000, 64);
    let one = report_of(
        &h,
        &ReportOptions {
            threads: Some(1),
            ..ReportOptions::default()
        },
    );
    let four = report_of(
        &h,
        &ReportOptions {
            threads: Some(4),
            ..ReportOptions::default()
        },
    );
    assert_eq!(one.plots.traffic, four.plots.traffic);
    assert_eq!(one.plots.size_classes, four.plots.size_classes);
    assert_eq!(one.plots.lifetimes, four.plots.lifetimes);
    assert_eq!(one.coldspots, four.coldspots);
    assert_eq!(one.budget.tags, four.budget.tags);
    assert_eq!(one.budget.budget_bytes, four.budget.budget_bytes);
    let (a, b) = (&one.pinned_for_nothing, &four.pinned_for_nothing);
    assert_eq!(
        (
            a.pinned_allocations,
            a.never_transferred,
            a.rarely_transferred,
            a.wasted_bytes
        ),
        (
            b.pinned_allocations,
            b.never_transferred,
            b.rarely_transferred,
            b.wasted_bytes
        )
    );
    assert!((a.wasted_ns - b.wasted_ns).abs() < 1e-6 * a.wasted_ns.max(1.0));
    for d in 0..4 {
        let (x, y) = (&one.directions[d], &four.directions[d]);
        assert_eq!(x.transfers, y.transfers);
        match (x.estimated_ns, y.estimated_ns) {
            (Some(p), Some(q)) => assert!((p - q).abs() < 1e-6 * p.max(1.0)),
            (p, q) => assert_eq!(p, q),
        }
    }
}

/// A free that reached the history before its allocation's own event (events of one
/// allocation seen out of order on two CPUs) is reported, not a panic.
#[test]
fn a_free_timestamped_before_its_allocation_is_reported() {
    let mut h = MemHistory::new(pinwise_core::HistoryConfig::default());
    let at = Site {
        module: pinwise_core::ModuleId::UNKNOWN,
        offset: 0x10,
    };
    let a = 0x7f00_0000_0000u64;
    h.ingest(&alloc(
        10_000,
        1,
        a,
        64 * MIB,
        pinwise_core::event::HostMemKind::Pageable,
        at,
    ));
    for i in 0..10 {
        h.ingest(&copy(10_500 + i, 1, Direction::HtoD, a, 64 * MIB, at));
    }
    h.ingest(&ev(
        9_000,
        1,
        pinwise_core::event::EventKind::Free { start: a },
    ));
    let r = report_of(&h, &ReportOptions::default());
    assert_eq!(r.hotspots[0].transfers, 10);
    assert_eq!(r.budget.tags_worth_pinning, 1);
    pinwise_report::html::render(&r).unwrap();
}

/// A history file whose events lie far past its processes' last event (corrupt, or edited)
/// still renders its plots: points are kept on the plotted span.
#[test]
fn events_past_the_trace_span_still_plot() {
    let s = scenario();
    let mut doc: serde_json::Value =
        serde_json::from_str(&pinwise_core::format::json::to_string(&s.history)).unwrap();
    let events = doc["allocations"][0]["events"].as_array_mut().unwrap();
    let last = events.len() - 1;
    events[last]["timestamp_ns"] = serde_json::json!(1u64 << 62);
    let h = pinwise_core::format::load_history_bytes(doc.to_string().as_bytes()).unwrap();
    let r = report_of(&h, &ReportOptions::default());
    pinwise_report::html::render(&r).unwrap();
}

#[test]
fn an_attached_trace_says_what_it_could_not_know_and_how_it_counted_it() {
    use pinwise_core::history::{
        ATTACHED_SOURCE_STAT, ATTACH_PINNED_BYTES_STAT, ATTACH_POSSIBLY_PINNED_BYTES_STAT,
        ATTACH_UNKNOWN_COUNTED_STAT,
    };
    let one_line = |h: &MemHistory| {
        let text = pinwise_report::text::render(&report_of(h, &ReportOptions::default()));
        text.split_whitespace().collect::<Vec<_>>().join(" ")
    };
    let mut h = MemHistory::default();
    assert!(!one_line(&h).contains("attached to a running process"));
    h.set_source_stats([
        (ATTACHED_SOURCE_STAT, 1),
        (ATTACH_PINNED_BYTES_STAT, 4 << 20),
    ]);
    let text = one_line(&h);
    assert!(
        text.contains("the driver had pinned 4.00 MiB then")
            && text.contains("left out of these figures and of the pinning plan"),
        "{text}"
    );
    assert!(!text.contains("shared anonymous memory"), "{text}");
    // Shared anonymous memory found at the attach (driver 580's pinned memory looks so) is
    // named as possibly pinned, of unknown state.
    h.set_source_stat(ATTACH_POSSIBLY_PINNED_BYTES_STAT, 64 << 20);
    let text = one_line(&h);
    assert!(
        text.contains("It also found 64.0 MiB of shared anonymous memory")
            && text.contains("counts as of unknown state"),
        "{text}"
    );
    // A history that made records for unseen memory (not `pinwise trace --pid`'s) is told
    // apart: its saving may be overstated, and the report does not claim otherwise.
    h.set_source_stat(ATTACH_UNKNOWN_COUNTED_STAT, 1);
    let text = one_line(&h);
    assert!(text.contains("may be overstated"), "{text}");
    assert!(!text.contains("left out of these figures"), "{text}");
}
