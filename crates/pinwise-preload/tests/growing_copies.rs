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
    for mode in ["adaptive", "profile"] {
        let hist = s.path(&format!("growing-{mode}.bin"));
        let sum = s.path(&format!("growing-{mode}.json"));
        let profile = s.path("growing.profile.json");
        let out = s.run_pinwise(
            &[
                "--mode",
                mode,
                "--profile",
                profile.to_str().unwrap(),
                "-o",
                hist.to_str().unwrap(),
                "--stats-json",
                sum.to_str().unwrap(),
            ],
            &exe,
            &[],
        );
        assert_ok(&out, mode);
        assert_eq!(out.stdout, plain.stdout, "{mode}: byte-identical output");
        let h = history(&hist);
        assert_eq!(
            h.source_stats()
                .get(pinwise_core::history::STANDIN_SOURCE_STAT),
            Some(&1),
            "{mode}: the history says it was made on the CPU stand-in"
        );
        assert_eq!(transfers(&h, Direction::HtoD), expected["htod"], "{mode}");
        assert_eq!(transfers(&h, Direction::DtoH), expected["dtoh"], "{mode}");
        let p = summary(&sum)["processes"][0].clone();
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
