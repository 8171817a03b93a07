//! A pageable buffer whose first copies are smaller than later ones: pinwise registers the
//! hot part in place, and must give that registration back before a copy that starts in it
//! and runs past its end (the real driver refuses such a copy with
//! `CUDA_ERROR_INVALID_VALUE`, and so does the libcuda stand-in, a TEST FIXTURE).

mod common;

use common::*;
use pinwise_core::Direction;

#[test]
fn a_copy_past_a_partial_registration_succeeds_with_the_same_bytes() {
    let s = Setup::new();
    let exe = s.build_cudart("growing_copies.c", &[]);
    let plain = s.run_plain(&exe, &[]);
    assert_ok(&plain, "plain run");
    let expected = calls(&plain);
    let profile = s.path("growing.profile.json");
    let profile = profile.to_str().unwrap();
    for mode in ["adaptive", "profile"] {
        let run = s.run_recorded(
            &exe,
            &["--mode", mode, "--profile", profile],
            &format!("growing-{mode}.bin"),
        );
        assert_same_stdout(&run.out, &plain, mode);
        let h = &run.history;
        assert_eq!(
            h.source_stats()
                .get(pinwise_core::history::STANDIN_SOURCE_STAT),
            Some(&1),
            "{mode}: the history says it was made on the CPU stand-in"
        );
        assert_eq!(transfers(h, Direction::HtoD), expected["htod"], "{mode}");
        assert_eq!(transfers(h, Direction::DtoH), expected["dtoh"], "{mode}");
        let p = run.process();
        // The hot first megabyte was registered in place, and each time a whole-buffer copy
        // came, that registration was given back first.
        assert!(
            p["promotions_on_transfers"].as_u64() >= Some(1),
            "{mode}: the hot part was promoted: {p}"
        );
        assert!(
            p["demotions"].as_u64() >= Some(1),
            "{mode}: the partial registration was given back: {p}"
        );
        assert_eq!(p["promotion_failures"], 0, "{mode}: {p}");
    }
}
