//! A program that makes the CPU's time-stamp counter fault (`prctl(PR_SET_TSC,
//! PR_TSC_SIGSEGV)`) while pinwise's copy hooks time themselves with it
//! (`programs/tsc_sigsegv.c`): under `pinwise run` it must run as plainly, not die of
//! SIGSEGV; the hooks fall back to `CLOCK_MONOTONIC` and the statistics do not present a
//! mix of counter ticks and nanoseconds as hook times. Against the libcuda stand-in (a TEST
//! FIXTURE); nothing is timed.

mod common;

use common::*;

/// `pinwise run <extra> --force --stats-json ...` of `exe`, which must run as plainly; the
/// process's statistics.
fn run(
    s: &Setup,
    exe: &std::path::Path,
    program_args: &[&str],
    extra: &[&str],
    name: &str,
) -> serde_json::Value {
    let plain = s.run_plain(exe, program_args);
    assert_ok(&plain, "plain");
    assert!(
        String::from_utf8_lossy(&plain.stdout).contains("tsc 2"),
        "the program made the counter fault: {plain:?}"
    );
    let stats = s.path(name);
    let mut args = extra.to_vec();
    args.extend(["--force", "--stats-json", stats.to_str().unwrap()]);
    let out = s.run_pinwise(&args, exe, program_args);
    assert_ok(&out, &format!("pinwise run {extra:?}"));
    assert_same_stdout(&out, &plain, &format!("{extra:?}"));
    summary(&stats)["processes"][0].clone()
}

#[test]
fn a_program_that_makes_the_counter_fault_after_start_runs_as_plainly() {
    let s = Setup::new();
    let exe = s.build_driver("tsc_sigsegv.c", &["-pthread"]);
    // Every mode, recording a history, with the malloc hooks (they stamp events too).
    let history = s.path("h.json");
    for extra in [
        vec!["--mode", "profile"],
        vec!["--mode", "use"],
        vec!["--mode", "adaptive", "-o", history.to_str().unwrap()],
        vec!["--min-tracked", "64KiB"],
    ] {
        let p = run(&s, &exe, &[], &extra, "other.json");
        assert!(
            p["transfers"]["HtoD"]["count"].as_u64() >= Some(604),
            "{extra:?}: {p}"
        );
    }
    assert!(history.exists(), "the history was written after the switch");
    let p = run(&s, &exe, &[], &[], "after.json");
    eprintln!("{p}");
    assert!(p["transfers"]["HtoD"]["count"].as_u64() >= Some(604), "{p}");
    assert!(
        p["hook_samples"].as_u64() > Some(0),
        "copies were timed: {p}"
    );
    // Samples before the switch are counter ticks, after it nanoseconds: no figure.
    assert!(p["hook_ns_median"].is_null(), "{p}");
    assert!(p["hook_ns_mean"].is_null(), "{p}");
    assert!(
        p["problems"].as_array().is_some_and(|a| a
            .iter()
            .any(|m| m.as_str().is_some_and(|m| m.contains("PR_SET_TSC")))),
        "the switch is told: {p}"
    );
    // Events are stamped with the clock after the switch (the counter's stamps before it,
    // where this machine allows them, were converted).
    assert_clock_stamps(&p);
    assert!(p["timestamps"]["clock_stamps"].as_u64() > Some(0), "{p}");
}

/// The statistics say the events were stamped with the clock at the end, because of the
/// switch, and every event ingested was converted once.
fn assert_clock_stamps(p: &serde_json::Value) {
    let t = &p["timestamps"];
    assert_eq!(t["source"], "clock", "{t}");
    assert!(
        t["fallback"]
            .as_str()
            .is_some_and(|f| f.contains("PR_SET_TSC")),
        "{t}"
    );
    let converted = t["counter_stamps"].as_u64().unwrap() + t["clock_stamps"].as_u64().unwrap();
    assert_eq!(Some(converted), p["events"].as_u64(), "{p}");
}

#[test]
fn a_program_that_makes_the_counter_fault_before_pinwise_starts_runs_as_plainly() {
    // The switch comes before the first CUDA call and the first tracked allocation: the
    // state and the allocator are created after it (creating them reads std's clock).
    let s = Setup::new();
    let exe = s.build_driver("tsc_sigsegv.c", &["-pthread"]);
    let history = s.path("first.json");
    for extra in [
        vec!["--mode", "adaptive", "-o", history.to_str().unwrap()],
        vec!["--no-malloc-hooks"],
    ] {
        let p = run(&s, &exe, &["first"], &extra, "first-stats.json");
        assert!(
            p["transfers"]["HtoD"]["count"].as_u64() >= Some(604),
            "{extra:?}: {p}"
        );
        // Decided when the state was created, after the switch: the clock throughout.
        assert_clock_stamps(&p);
        assert_eq!(p["timestamps"]["counter_stamps"], 0, "{p}");
    }
    assert!(history.exists(), "the history was written");
}
