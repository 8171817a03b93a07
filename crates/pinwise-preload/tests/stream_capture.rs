//! Stream capture (a CUDA graph, as `torch.cuda.graph` makes one) on buffers pinwise
//! registered in place, against the libcuda stand-in (a TEST FIXTURE), which models
//! capture: waiting for a capturing stream, or registering memory from a thread whose
//! capture mode prohibits it, invalidates the capture and `cuStreamEndCapture` fails. The
//! program (`programs/stream_capture.c`) must end its capture successfully and print the
//! same bytes under `pinwise run` as without it.

mod common;

use common::*;
use pinwise_core::Direction;

#[test]
fn a_capture_on_promoted_buffers_succeeds_and_replays_the_same_bytes() {
    let s = Setup::new();
    let exe = s.build_driver("stream_capture.c", &["-pthread"]);
    let plain = s.run_plain(&exe, &[]);
    assert_ok(&plain, "plain run");
    let text = String::from_utf8_lossy(&plain.stdout);
    assert!(text.contains("end of capture: CUDA_SUCCESS"), "{text}");
    assert!(text.contains("capturing: status 1"), "{text}");
    assert_eq!(
        text.matches("same 1").count(),
        6,
        "every replay moved both sources: {text}"
    );
    let expected = calls(&plain);

    let profile = s.path("capture.profile.json");
    let profile = profile.to_str().unwrap();
    for mode in ["adaptive", "profile", "use"] {
        let run = s.run_recorded(
            &exe,
            // The program pins memory itself: its hot buffers are registered beside it
            // only within a budget given (pinwise_core::decide::ceiling).
            // `--pageable-first`: the program's 1 MiB and 2 MiB pinned requests are served
            // pageable first, so the registration before the capture is tested too.
            &[
                "--mode",
                mode,
                "--profile",
                profile,
                "--budget",
                "1G",
                "--pageable-first",
            ],
            &format!("capture-{mode}.bin"),
        );
        assert_eq!(
            String::from_utf8_lossy(&run.out.stdout),
            text,
            "{mode}: byte-identical output (the capture ended with CUDA_SUCCESS)"
        );
        let p = run.process();
        assert_eq!(
            p["captured_copies"], expected["captured"],
            "{mode}: the copies issued during the capture were seen as captured: {p}"
        );
        // Registered in place: the two buffers the graph copies (before the capture) and
        // the other thread's buffer (during it, then given back when freed, still during
        // it): pinwise's own calls did not invalidate the capture.
        assert!(
            p["promotions_on_transfers"].as_u64() >= Some(3),
            "{mode}: the hot buffers were registered: {p}"
        );
        assert!(
            p["demotions"].as_u64() >= Some(1),
            "{mode}: a registration was given back: {p}"
        );
        assert_eq!(p["promotion_failures"], 0, "{mode}: {p}");
        if mode == "adaptive" {
            // The 1 MiB and 2 MiB pinned requests were served pageable first, and registered
            // before the capture began (not during it, which may invalidate it), within the
            // budget.
            assert_eq!(p["served_pageable"], 2, "{mode}: {p}");
            assert_eq!(p["promotions_on_queries"], 2, "{mode}: {p}");
            assert_eq!(p["required_outside_budget"], 0, "{mode}: {p}");
        }
        let h = &run.history;
        assert_eq!(
            transfers(h, Direction::HtoD),
            expected["htod"],
            "{mode}: captured copies are in the history too"
        );
        assert_eq!(transfers(h, Direction::DtoH), expected["dtoh"], "{mode}");
        let stderr = String::from_utf8_lossy(&run.out.stderr);
        assert!(
            stderr.contains("3 asynchronous copies were captured into CUDA graphs"),
            "{mode}: the summary says so: {stderr}"
        );
    }
}
