//! A C program using the CUDA runtime (the cudart stand-in, which like the real one opens
//! libcuda with dlopen and finds every entry point with cuGetProcAddress) run under
//! `pinwise run` in each mode: same bytes out as without pinwise, a history whose counts are
//! exactly the program's own, and a use run whose decisions follow the profile run.
//! TEST FIXTURES throughout: nothing here is a GPU figure.

mod common;

use common::*;
use pinwise_alloc::engine::{Advice, Advised};
use pinwise_alloc::plan::ProfileAdvice;
use pinwise_core::history::{AllocKind, AllocState};
use pinwise_core::{CostModel, Direction, Policy, Profile};

#[test]
fn every_mode_gives_the_same_output_and_an_exact_history() {
    let s = Setup::new();
    let exe = s.build_cudart("cudart_workload.c", &[]);
    let plain = s.run_plain(&exe, &[]);
    assert_ok(&plain, "plain run");
    let expected = calls(&plain);
    assert_eq!(expected["alloc"], 7);

    for mode in ["adaptive", "profile", "use"] {
        let run = s.run_recorded(&exe, &["--mode", mode], &format!("{mode}.json"));
        assert_same_stdout(&run.out, &plain, mode);
        assert_eq!(
            calls(&run.out),
            expected,
            "{mode}: the program did the same calls"
        );

        let h = &run.history;
        let allocs = allocations(h);
        assert_eq!(
            allocs.len() as u64,
            expected["alloc"],
            "{mode}: allocations"
        );
        assert_eq!(
            allocs
                .iter()
                .filter(|a| a.state() == AllocState::Freed)
                .count() as u64,
            expected["free"],
            "{mode}: frees"
        );
        assert_eq!(
            transfers(h, Direction::HtoD),
            expected["htod"],
            "{mode}: HtoD"
        );
        assert_eq!(
            transfers(h, Direction::DtoH),
            expected["dtoh"],
            "{mode}: DtoH"
        );
        assert_eq!(h.stats().unmatched_frees, 0, "{mode}");
        let ps: Vec<_> = h.processes().collect();
        assert_eq!(ps.len(), 1, "{mode}: one process");
        // Every allocation's transfers are attributed to it: 12 rounds × 2 for the hot
        // buffers, 1 × 2 for the cold ones, 5 × 2 for the small one.
        let mut counts: Vec<u64> = allocs.iter().map(|a| a.transfer_count()).collect();
        counts.sort_unstable();
        assert_eq!(counts, vec![2, 2, 2, 10, 24, 24, 24], "{mode}");

        let summary = &run.summary;
        let totals = &summary["totals"];
        assert_eq!(
            totals["transfers_htod"], expected["htod"],
            "{mode}: {summary}"
        );
        assert_eq!(totals["host_allocs"], expected["alloc"], "{mode}");
        assert_eq!(totals["events_lost"], 0, "{mode}");
        assert_eq!(summary["processes"][0]["driver_is_standin"], true);
        assert_eq!(summary["exit_code"], 0);
    }
}

#[test]
fn the_profile_changes_the_use_runs_decisions_as_predicted() {
    let s = Setup::new();
    let exe = s.build_cudart("cudart_workload.c", &[]);
    let profile_path = s.path("workload.profile.json");
    let profile_arg = profile_path.to_str().unwrap();
    let RecordedRun {
        history: adaptive,
        summary: adaptive_sum,
        ..
    } = s.run_recorded(&exe, &["--mode", "adaptive"], "adaptive.json");
    let recorded = s
        .run_recorded(
            &exe,
            &["--mode", "profile", "--profile", profile_arg],
            "profile.json",
        )
        .history;
    let RecordedRun {
        history: used,
        summary: used_sum,
        ..
    } = s.run_recorded(
        &exe,
        &["--mode", "use", "--profile", profile_arg],
        "use.json",
    );

    // The profile: the hot site's three 4 MiB allocations were copied 24 times each, the
    // cold site's 2 times each.
    let profile = Profile::load(&profile_path).expect("the profile run wrote a profile");
    let mut per_call: Vec<(u64, u32, u64)> = profile
        .entries
        .iter()
        .map(|e| (e.offset, e.call_no, e.transfers.transfers()))
        .collect();
    per_call.sort_unstable();
    assert_eq!(per_call.len(), 7, "{per_call:?}");
    let sites = by_site(&recorded);
    assert_eq!(sites.len(), 2, "two call sites: {sites:?}");
    let (hot_site, cold_site) = {
        let mut it = sites.iter();
        let (a, av) = it.next().unwrap();
        let (b, _) = it.next().unwrap();
        if av.len() == 4 {
            (*a, *b)
        } else {
            (*b, *a)
        }
    };

    // Adaptive: a site's first allocation has no history, so it is served pinned as plain
    // CUDA would serve the request; the hot site stays pinned; the cold site, once its
    // first buffer ended cold, gets pageable memory.
    let a = by_site(&adaptive);
    let kinds = |site: u64| -> Vec<AllocKind> { a[&site].iter().map(|e| e.1).collect() };
    eprintln!(
        "adaptive hot {:?} cold {:?}",
        kinds(hot_site),
        kinds(cold_site)
    );
    assert_eq!(
        kinds(hot_site),
        vec![AllocKind::PinnedAlloc; 4],
        "adaptive, hot site"
    );
    assert_eq!(
        kinds(cold_site)[0],
        AllocKind::PinnedAlloc,
        "adaptive, cold site, first"
    );
    assert_eq!(adaptive_sum["processes"][0]["promotions_by_allocator"], 0);

    // Use: every allocation is served as the plan made from the profile says (the plan
    // weighs each tag's recorded copies against what pinning it costs, given the pool's
    // blocks); the hot site's, at least, are all pinned from the start, and nothing needs a
    // promotion.
    let policy = Policy::new(CostModel::builtin());
    let plan = ProfileAdvice::new(
        &profile,
        &policy,
        pinwise_alloc::budget::default_budget_bytes(),
        &used.modules(),
    );
    let mut predicted_pinned = 0;
    for a in allocations(&used) {
        let advised = plan.advise(&a.tag(), a.size() as usize);
        let small = a.size() < 64 * 1024; // always served pinned (a pooled block is free)
        let expected = match advised {
            Advised::Pin => AllocKind::PinnedAlloc,
            Advised::Pageable if small => AllocKind::PinnedAlloc,
            Advised::Pageable => AllocKind::Pageable,
            Advised::Unknown => panic!("tag {:?} not in the profile", a.tag()),
        };
        predicted_pinned += u64::from(expected == AllocKind::PinnedAlloc);
        assert_eq!(a.kind(), expected, "use run, {:?} ({:?})", a.tag(), advised);
    }
    let u = by_site(&used);
    let hot_kinds: Vec<AllocKind> = u[&hot_site].iter().map(|e| e.1).collect();
    assert_eq!(hot_kinds, vec![AllocKind::PinnedAlloc; 4], "use, hot site");
    assert!(u.contains_key(&cold_site));
    let p = &used_sum["processes"][0];
    assert_eq!(p["promotions_by_allocator"], 0, "{p}");
    assert_eq!(p["served_pinned"], predicted_pinned, "{p}");
    assert_eq!(
        p["engine"]["advice_unmatched"], 0,
        "every allocation matched the profile"
    );
    // The hot buffers' copies ran pinned from the first one in the use run.
    let first_hot = used
        .allocations()
        .find(|v| v.tag().site.offset == hot_site && v.tag().call_no == 1)
        .unwrap();
    let c = first_hot.counters();
    assert_eq!(c.direction(Direction::HtoD).pageable_transfers, 0);
    assert_eq!(c.direction(Direction::HtoD).pinned_transfers, 12);
}

#[test]
fn without_driver_hooks_the_runtime_level_records_the_same_history() {
    let s = Setup::new();
    let exe = s.build_cudart("cudart_workload.c", &[]);
    let plain = s.run_plain(&exe, &[]);
    assert_ok(&plain, "plain");
    let expected = calls(&plain);
    // Any spelling `Config` accepts turns the driver hooks off.
    for value in ["0", " Off "] {
        let hist = s.path("runtime-only.json");
        let sum = s.path("runtime-only-summary.json");
        let mut c = s.libs.command(pinwise());
        c.args([
            "run",
            "--no-malloc-hooks",
            "--force",
            "-o",
            hist.to_str().unwrap(),
            "--stats-json",
        ])
        .arg(&sum)
        .arg("--")
        .arg(&exe)
        .current_dir(s.dir.path())
        .env_remove("LD_PRELOAD")
        .env("PINWISE_DRIVER_HOOKS", value);
        let out = c.output().unwrap();
        assert_ok(&out, "runtime hooks only");
        assert_same_stdout(&out, &plain, "runtime hooks only");
        let h = history(&hist);
        assert_eq!(allocations(&h).len() as u64, expected["alloc"]);
        assert_eq!(transfers(&h, Direction::HtoD), expected["htod"]);
        assert_eq!(transfers(&h, Direction::DtoH), expected["dtoh"]);
        let p = &summary(&sum)["processes"][0];
        assert_eq!(p["wrapped_by_proc_address"], 0, "{value:?}: {p}");
        assert_eq!(p["wrapped_by_dlsym"], 0, "{value:?}: {p}");
        // Every allocation, free and copy was seen at the runtime level only.
        let runtime_only =
            expected["alloc"] + expected["free"] + expected["htod"] + expected["dtoh"];
        assert_eq!(p["runtime_only"], runtime_only, "{value:?}: {p}");
    }
}

#[test]
fn the_budget_holds_and_the_output_does_not_change() {
    let s = Setup::new();
    let exe = s.build_cudart("cudart_workload.c", &[]);
    let plain = s.run_plain(&exe, &[]);
    assert_ok(&plain, "plain");
    let sum = s.path("budget.json");
    let budget: u64 = 5 << 20;
    let out = s.run_pinwise(
        &["--budget", "5M", "--stats-json", sum.to_str().unwrap()],
        &exe,
        &[],
    );
    assert_ok(&out, "5 MiB budget");
    assert_same_stdout(&out, &plain, "5 MiB budget");
    let p = &summary(&sum)["processes"][0];
    assert_eq!(p["engine"]["budget_bytes"], budget);
    let peak = p["engine"]["pinned_bytes_peak"].as_u64().unwrap();
    assert!(peak <= budget, "peak {peak} over the budget {budget}: {p}");
    assert!(peak > 0, "something was pinned: {p}");
    let refused = p["engine"]["budget_refusals"].as_u64().unwrap()
        + p["promotion_budget_refusals"].as_u64().unwrap();
    assert!(
        refused > 0,
        "an 8 MiB buffer cannot be registered within 5 MiB: {p}"
    );
}

/// The statistics and the summary say which cost table priced the decisions: the stand-in
/// cannot name its GPU (no `cuDeviceGetUuid`), so without a calibration it is the built-in
/// table, and why; a calibration named with `PINWISE_CALIBRATION` is that file.
#[test]
fn the_run_says_which_table_priced_the_decisions() {
    let s = Setup::new();
    let exe = s.build_cudart("cudart_workload.c", &[]);
    let run = s.run_recorded(&exe, &["--mode", "adaptive"], "builtin.json");
    let pricing = run.process()["pricing"].as_str().unwrap().to_string();
    assert_eq!(
        pricing, "built-in H200 table (the GPU could not be identified)",
        "{}",
        run.summary
    );
    let err = String::from_utf8_lossy(&run.out.stderr);
    assert!(
        err.contains("decisions priced with the built-in H200 table"),
        "{err}"
    );

    let table = s.path("my-gpu.csv");
    std::fs::write(&table, CostModel::builtin().to_csv()).unwrap();
    let summary_path = s.path("named-summary.json");
    let mut c = s.libs.command(pinwise());
    c.args(["run", "--no-malloc-hooks", "--stats-json"])
        .arg(&summary_path)
        .arg("--")
        .arg(&exe)
        .current_dir(s.dir.path());
    clean_env(&mut c);
    c.env("PINWISE_CALIBRATION", &table);
    let out = c.output().unwrap();
    assert_ok(&out, "named calibration");
    let named = summary(&summary_path);
    assert_eq!(
        named["processes"][0]["pricing"],
        format!("calibration {}", table.display()),
        "{named}"
    );
}
