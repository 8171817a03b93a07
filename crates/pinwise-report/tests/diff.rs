//! `diff`: what changed between two runs of a program, and whether a profile still holds.
mod common;

use common::*;
use pinwise_core::event::{Direction, EventKind, HostMemKind};
use pinwise_core::profile::Profile;
use pinwise_core::{CostModel, HistoryConfig, MemHistory, ModuleIdentity, Policy, Site};
use pinwise_report::diff::{diff, entries_of, render_text, Change, DiffOptions, DiffReport};
use pinwise_report::text::WIDTH;
use pinwise_report::Loaded;

/// One run of a small program: `n_hot` copies of a 64 MiB buffer from `load_batch`, a
/// staging buffer of `staging` bytes copied 30 times (if any), and `extra` buffers from a
/// new site.
fn run(build_id: u8, n_hot: u32, staging: Option<u64>, extra: u32) -> MemHistory {
    let mut h = MemHistory::new(HistoryConfig::default());
    let app = h
        .modules()
        .intern(&ModuleIdentity::with_build_id(APP, vec![build_id]));
    let site = |offset| Site {
        module: app,
        offset,
    };
    let mut t = 1_000_000u64;
    let mut next = || {
        t += 10_000;
        t
    };
    let mut events = vec![alloc(
        next(),
        7,
        0x10_0000,
        64 * MIB,
        HostMemKind::Pageable,
        site(HOT_SITE),
    )];
    for _ in 0..n_hot {
        events.push(copy(
            next(),
            7,
            Direction::HtoD,
            0x10_0000,
            64 * MIB,
            site(COPY_SITE),
        ));
    }
    if let Some(size) = staging {
        events.push(alloc(
            next(),
            7,
            0x9000_0000,
            size,
            HostMemKind::Pageable,
            site(REGISTERED_SITE),
        ));
        for _ in 0..30 {
            events.push(copy(
                next(),
                7,
                Direction::DtoH,
                0x9000_0000,
                size,
                site(COPY_SITE),
            ));
        }
    }
    for i in 0..u64::from(extra) {
        let at = 0xa000_0000 + i * 0x100_0000;
        events.push(alloc(
            next(),
            7,
            at,
            8 * MIB,
            HostMemKind::Pageable,
            site(SMALL_SITE),
        ));
        for _ in 0..20 {
            events.push(copy(
                next(),
                7,
                Direction::HtoD,
                at,
                8 * MIB,
                site(COPY_SITE),
            ));
        }
        events.push(ev(next(), 7, EventKind::Free { start: at }));
    }
    for e in &events {
        h.ingest(e);
    }
    h
}

fn compare(a: &MemHistory, b: &MemHistory) -> DiffReport {
    let (pa, pb) = (
        entries_of(&Loaded::History(Box::new(a.clone()))),
        entries_of(&Loaded::History(Box::new(b.clone()))),
    );
    diff(
        &pa,
        info("a.bin"),
        &pb,
        info("b.bin"),
        &Policy::new(CostModel::builtin()),
        &DiffOptions::default(),
        &mut ScenarioSymbols,
    )
}

#[test]
fn the_same_run_matches_itself() {
    let a = run(1, 40, Some(16 * MIB), 2);
    let d = compare(&a, &a);
    assert!(d.site_counts.is_empty(), "{:?}", d.site_counts);
    assert_eq!(d.sites_unchanged, 3);
    assert_eq!((d.tags.only_a, d.tags.only_b), (0, 0));
    assert_eq!(d.tags.matched, 1 + 1 + 2);
    assert_eq!(d.pinning.share, 1.0);
    assert!(d.pinning.lost.is_empty() && d.pinning.missed.is_empty());
    assert!(d.verdict.contains("still matches"), "{}", d.verdict);
}

#[test]
fn hotter_colder_resized_appeared_and_disappeared_are_told_apart() {
    let a = run(1, 40, Some(16 * MIB), 0);
    let b = run(1, 4, None, 3);
    let d = compare(&a, &b);
    let change_of = |function: &str| {
        d.sites
            .iter()
            .find(|s| {
                s.site
                    .location
                    .as_ref()
                    .is_some_and(|l| l.function == function)
            })
            .map(|s| s.changes.clone())
            .unwrap_or_else(|| panic!("{function} not in the diff: {:#?}", d.sites))
    };
    assert_eq!(change_of("load_batch"), vec![Change::Colder]);
    assert_eq!(change_of("register_weights"), vec![Change::Disappeared]);
    assert_eq!(change_of("small_params"), vec![Change::Appeared]);
    assert_eq!(d.tags.colder, 1);
    assert_eq!((d.tags.only_a, d.tags.only_b), (1, 3));
    // A would pin the 64 MiB buffer (40 copies) and the staging buffer. In B, 4 copies of
    // 64 MiB still pay back a registration (built-in H200 table: about 2.8 ms saved per
    // copy against 2.7 ms to register and unregister); the staging buffer is gone.
    assert_eq!((d.pinning.pinned_a, d.pinning.confirmed), (2, 1));
    assert!(d.pinning.share > 0.0 && d.pinning.share < 1.0);
    assert!(d.pinning.lost.iter().any(|t| t.verdict_b == "not in B"));
    assert!(d
        .pinning
        .missed
        .iter()
        .any(|t| t.site.short().starts_with("small_params")));
    // Resized: the same staging site with another size.
    let c = run(1, 40, Some(64 * MIB), 0);
    let d = compare(&a, &c);
    assert_eq!(change_of_in(&d, "register_weights"), vec![Change::Resized]);
    assert_eq!(d.tags.resized, 1);
}

fn change_of_in(d: &DiffReport, function: &str) -> Vec<Change> {
    d.sites
        .iter()
        .find(|s| {
            s.site
                .location
                .as_ref()
                .is_some_and(|l| l.function == function)
        })
        .map(|s| s.changes.clone())
        .unwrap_or_default()
}

#[test]
fn a_rebuilt_program_matches_nothing_and_says_why() {
    let a = run(1, 40, Some(16 * MIB), 1);
    let b = run(2, 40, Some(16 * MIB), 1);
    let d = compare(&a, &b);
    assert_eq!(d.tags.matched, 0);
    assert_eq!(d.module_changes.len(), 1);
    assert_eq!(d.module_changes[0].path, APP);
    assert!(d.verdict.contains("not the same program"), "{}", d.verdict);
    assert!(d.verdict.contains("changed identity"), "{}", d.verdict);
}

#[test]
fn a_profile_compares_like_the_history_it_came_from() {
    let a = run(1, 40, Some(16 * MIB), 2);
    let b = run(1, 10, Some(16 * MIB), 2);
    let from_history = compare(&a, &b);
    let profile = Profile::from_history(&a);
    let from_profile = diff(
        &entries_of(&Loaded::Profile(Box::new(profile))),
        info("a.profile.json"),
        &entries_of(&Loaded::History(Box::new(b.clone()))),
        info("b.bin"),
        &Policy::new(CostModel::builtin()),
        &DiffOptions::default(),
        &mut ScenarioSymbols,
    );
    assert_eq!(from_history.sites, from_profile.sites);
    assert_eq!(from_history.tags, from_profile.tags);
    assert_eq!(from_history.pinning, from_profile.pinning);
}

#[test]
fn the_text_fits_100_columns_and_the_json_has_every_part() {
    let a = synthetic(1, 3000, 30_000, 1024);
    let b = synthetic(2, 3000, 30_000, 1024);
    let d = compare(&a, &b);
    let text = render_text(&d);
    for line in text.lines() {
        assert!(line.chars().count() <= WIDTH, "{line}");
    }
    for needle in [
        "CALL SITES",
        "TAGS",
        "PINNING ADVICE",
        "A: a.bin",
        "B: b.bin",
    ] {
        assert!(text.contains(needle), "{needle} missing:\n{text}");
    }
    let v = serde_json::to_value(&d).unwrap();
    for key in [
        "a",
        "b",
        "module_changes",
        "site_counts",
        "sites",
        "tags",
        "pinning",
        "verdict",
    ] {
        assert!(v.get(key).is_some(), "{key}");
    }
}

/// A profile file's counts are whatever it says: counts that overflow when summed per site
/// or per file saturate instead of panicking.
#[test]
fn a_profile_with_counts_at_their_limit_compares() {
    let a = run(1, 40, Some(16 * MIB), 2);
    let mut doc: serde_json::Value =
        serde_json::from_str(&Profile::from_history(&a).to_json()).unwrap();
    for e in doc["entries"].as_array_mut().unwrap() {
        e["transfers"]["HtoD"]["transfers"] = serde_json::json!(u64::MAX);
        e["transfers"]["HtoD"]["bytes"] = serde_json::json!(u64::MAX);
    }
    let profile = Profile::from_json_bytes(doc.to_string().as_bytes()).unwrap();
    let d = diff(
        &profile,
        info("a.profile.json"),
        &entries_of(&Loaded::History(Box::new(a))),
        info("b.bin"),
        &Policy::new(CostModel::builtin()),
        &DiffOptions::default(),
        &mut ScenarioSymbols,
    );
    assert_eq!(d.a.transfers, u64::MAX);
    render_text(&d);
}

#[test]
fn the_text_fits_60_80_and_120_columns() {
    use pinwise_report::diff::render_text_with;
    use pinwise_report::layout::Layout;
    // Sites hotter, colder, resized, new and gone; advice lost and missed.
    let d = compare(&run(1, 40, Some(16 * MIB), 0), &run(1, 4, None, 3));
    assert!(!d.sites.is_empty());
    assert!(!d.pinning.lost.is_empty() || !d.pinning.missed.is_empty());
    for width in [60, 80, 120] {
        let layout = Layout {
            width,
            ..Layout::default()
        };
        let text = render_text_with(&d, layout);
        for line in text.lines() {
            assert!(line.chars().count() <= width, "{width}: {line:?}\n{text}");
        }
        let titles = text
            .lines()
            .find(|l| l.starts_with("call site") && l.contains("change"))
            .unwrap_or_else(|| panic!("{width}: no sites table\n{text}"));
        assert!(titles.contains("xfers/alloc A -> B"), "{width}: {titles}");
        assert!(text.contains("load_batch"), "{width}:\n{text}");
        // Rows of one call site stay told apart by their call numbers.
        let advice = text
            .lines()
            .find(|l| l.starts_with("call site") && l.contains("net A"))
            .unwrap();
        assert!(advice.contains("call#"), "{width}: {advice}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("call site") && l.contains("net A") && l.contains("net B")),
            "{width}: the advice table lacks its verdicts\n{text}"
        );
    }
}
