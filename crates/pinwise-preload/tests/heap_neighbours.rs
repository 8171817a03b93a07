//! Hot pageable buffers side by side on the heap (their boundary pages shared): pinwise
//! must register each once and keep it, not give one's registration back whenever its
//! neighbour is copied (issue 10's registration churn in PyTorch). The libcuda stand-in is
//! a TEST FIXTURE: only counts are asserted, no timings.

mod common;

use common::*;
use pinwise_core::Direction;

#[test]
fn neighbours_sharing_a_page_are_registered_once_and_stay() {
    let s = Setup::new();
    let exe = s.build_cudart("heap_neighbours.c", &[]);
    let plain = s.run_plain(&exe, &[]);
    assert_ok(&plain, "plain run");
    let expected = calls(&plain);
    let stderr = String::from_utf8_lossy(&plain.stderr);
    assert!(
        stderr.contains("adjacent pairs: 7"),
        "the program's buffers must be heap neighbours for this test to mean anything: {stderr}"
    );
    let profile = s.path("neighbours.profile.json");
    let profile = profile.to_str().unwrap();
    for mode in ["adaptive", "profile", "use"] {
        let run = s.run_recorded(
            &exe,
            &["--mode", mode, "--profile", profile],
            &format!("neighbours-{mode}.bin"),
        );
        assert_same_stdout(&run.out, &plain, mode);
        let h = &run.history;
        assert_eq!(transfers(h, Direction::HtoD), expected["htod"], "{mode}");
        assert_eq!(transfers(h, Direction::DtoH), expected["dtoh"], "{mode}");
        let p = run.process();
        let promoted = p["promotions_on_transfers"].as_u64().unwrap();
        let merged = p["merged_registrations"].as_u64().unwrap();
        let demoted = p["demotions"].as_u64().unwrap();
        eprintln!(
            "{mode}: promoted {promoted} merged {merged} demoted {demoted} pageable {} unknown {}",
            p["transfers_pageable"], p["transfers_unknown"]
        );
        // 8 buffers, each registered once (alone or merged into a neighbour's registration);
        // given back only when freed: the 4 frees, plus the survivors' re-registrations'
        // give-backs at the end (at most one each), never in turns while all are hot.
        assert!(promoted >= 1, "{mode}: hot buffers were registered: {p}");
        assert!(
            promoted + merged <= 8 + 4,
            "{mode}: registered {promoted} times and merged {merged} times for 8 buffers \
             (at most once each, plus once per survivor after the frees): {p}"
        );
        assert!(
            demoted + merged <= 8 + 8,
            "{mode}: {demoted} registrations given back and {merged} merged: churn: {p}"
        );
        assert_eq!(p["promotion_failures"], 0, "{mode}: {p}");
        // While all 8 were hot (200 round trips), at most 8 copies per buffer went pageable
        // before it paid for its registration; churn would make most of them pageable.
        let pageable = p["transfers_pageable"].as_u64().unwrap_or(0)
            + p["transfers_unknown"].as_u64().unwrap_or(0);
        let total = expected["htod"] + expected["dtoh"];
        assert!(
            pageable * 4 < total,
            "{mode}: {pageable} of {total} copies went pageable: {p}"
        );
    }
}
