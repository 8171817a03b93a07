//! A C program linked with `-lcuda` (the libcuda stand-in, a TEST FIXTURE): it reaches the
//! exported driver symbols directly, looks entry points up with cuGetProcAddress (default
//! and per-thread variants), asks pointer queries about pinned requests, makes 2D and
//! unified copies, registers memory itself, and frees, reallocates and unmaps hot pageable
//! buffers. Under `pinwise run` its output must not change, its history must count exactly
//! what it did, and everything pinwise registered must be unregistered again.

mod common;

use common::*;
use pinwise_core::history::{AllocKind, AllocState};
use pinwise_core::Direction;

fn check_run(
    s: &Setup,
    exe: &std::path::Path,
    mode_args: &[&str],
    name: &str,
) -> serde_json::Value {
    let plain = s.run_plain(exe, &[]);
    assert_ok(&plain, "plain run");
    let expected = calls(&plain);
    let run = s.run_recorded(exe, mode_args, &format!("{name}.bin"));
    assert_same_stdout(&run.out, &plain, name);
    assert_eq!(calls(&run.out), expected);

    let h = &run.history;
    let allocs = allocations(h);
    assert_eq!(allocs.len() as u64, expected["alloc"], "{name}");
    assert!(
        allocs.iter().all(|a| a.state() == AllocState::Freed),
        "{name}: all freed"
    );
    assert_eq!(transfers(h, Direction::HtoD), expected["htod"], "{name}");
    assert_eq!(transfers(h, Direction::DtoH), expected["dtoh"], "{name}");
    // The queried allocation's answers were plain CUDA's (compared with the plain run's
    // output above): memory type host, range its own size, flags 0.
    let text = String::from_utf8_lossy(&run.out.stdout);
    assert!(
        text.contains("queries flags=0 type=1 range=3145728 devptr-is-host=1"),
        "{text}"
    );
    // The mapped allocation keeps its flags and is pinned, whatever the mode.
    let mapped: Vec<_> = allocs.iter().filter(|a| a.size() == 1 << 20).collect();
    assert_eq!(mapped.len(), 1, "{name}");
    assert_eq!(
        mapped[0].kind(),
        AllocKind::PinnedAlloc,
        "{name}: mapped is pinned"
    );
    // The program's own registration is in the history.
    assert!(
        h.allocations()
            .any(|a| a.pinned_by_registration() && a.size() >= 4 << 20),
        "{name}: registered buffer"
    );
    let p = run.process().clone();
    assert_eq!(p["registrations"], expected["register"], "{name}: {p}");
    // Entry points came through cuGetProcAddress (two lookups of hooked names) and as
    // exported symbols; all copies were seen at the driver level.
    assert!(
        p["wrapped_by_proc_address"].as_u64() >= Some(2),
        "{name}: {p}"
    );
    assert_eq!(p["runtime_only"], 0, "{name}");
    p
}

#[test]
fn a_driver_api_program_is_unchanged_and_exactly_recorded_in_every_mode() {
    let s = Setup::new();
    let exe = s.build_driver("driver_workload.c", &["-lpthread"]);
    let profile = s.path("driver.profile.json");
    let profile = profile.to_str().unwrap();
    for (mode, name) in [
        ("adaptive", "adaptive"),
        ("profile", "profile"),
        ("use", "use"),
    ] {
        // The program pins memory itself: pinwise registers its hot pageable buffers beside
        // it only within a budget given (else within the program's own peak, which its
        // pinned buffers fill: pinwise_core::decide::ceiling).
        let p = check_run(
            &s,
            &exe,
            &["--mode", mode, "--profile", profile, "--budget", "1G"],
            name,
        );
        // Whatever pinwise registered inside memory it does not own was unregistered before
        // the memory went away (free on a context-less thread, realloc, munmap, the
        // program's own registration of the same pages, cuMemFreeHost).
        // (Pinned requests served pageable first and registered once their copies showed
        // them hot are counted by_allocator, and unregistered at their cuMemFreeHost.)
        let promoted = p["promotions_on_transfers"].as_u64().unwrap()
            + p["promotions_on_queries"].as_u64().unwrap()
            + p["promotions_by_allocator"].as_u64().unwrap();
        assert!(
            promoted >= 1,
            "{name}: the hot pageable buffers were promoted: {p}"
        );
        assert_eq!(p["demotions"].as_u64().unwrap(), promoted, "{name}: {p}");
        assert_eq!(p["promotion_failures"], 0, "{name}: {p}");
    }
}

#[test]
fn a_query_on_a_pageable_served_request_is_answered_as_plain_cuda_would() {
    // The queried 3 MiB allocation does not fit the 2 MiB budget, so it is served pageable
    // (a pinned request without evidence against it is otherwise served pinned); the
    // program then asks its flags, memory type, range and device pointer. Pinwise
    // registers it before the first query reaches the driver, and answers the flags and
    // the range itself (the driver would see the pool's segment).
    let s = Setup::new();
    let exe = s.build_driver("driver_workload.c", &["-lpthread"]);
    let p = check_run(
        &s,
        &exe,
        &["--mode", "adaptive", "--budget", "2M"],
        "queries",
    );
    assert!(p["served_pageable"].as_u64() >= Some(1), "{p}");
    assert_eq!(p["promotions_on_queries"], 1, "{p}");
    assert!(p["queries_answered"].as_u64() >= Some(2), "{p}");
}

#[test]
fn a_statically_linked_runtime_gives_the_applications_call_sites() {
    let s = Setup::new();
    let exe = s.build_driver("static_runtime.c", &[]);
    let hist = s.path("static.json");
    let out = s.run_pinwise(&["-o", hist.to_str().unwrap()], &exe, &[]);
    assert_ok(&out, "static runtime");
    let h = history(&hist);
    let sites = by_site(&h);
    assert_eq!(
        sites.len(),
        2,
        "the two application sites, not the runtime's one call into the driver: {sites:?}"
    );
    assert!(sites.values().all(|v| v.len() == 3), "{sites:?}");
}
