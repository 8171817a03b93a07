//! Copies the driver refuses are not in the history (nothing moved), are counted as
//! `failed_copies`, and the program gets the driver's own error, under every mode. Run
//! against the libcuda stand-in (a TEST FIXTURE).

mod common;

use common::*;
use pinwise_core::Direction;

#[test]
fn refused_copies_are_counted_not_recorded() {
    let s = Setup::new();
    let exe = s.build_driver("failed_copies.c", &[]);
    let plain = s.run_plain(&exe, &[]);
    assert_ok(&plain, "plain run");
    let expected = calls(&plain);
    assert_eq!(
        expected["failed"], 9,
        "the stand-in refuses all nine bad copies"
    );
    let stdout = String::from_utf8_lossy(&plain.stdout);
    assert!(
        !stdout.contains(" 0,") && !stdout.contains(" 0\n"),
        "every bad copy got an error code: {stdout}"
    );
    for mode in ["adaptive", "profile"] {
        let hist = s.path(&format!("failed-{mode}.bin"));
        let sum = s.path(&format!("failed-{mode}.json"));
        let profile = s.path("failed.profile.json");
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
        assert_eq!(
            out.stdout, plain.stdout,
            "{mode}: the same error codes and checksum as without pinwise"
        );
        let h = history(&hist);
        assert_eq!(transfers(&h, Direction::HtoD), expected["htod"], "{mode}");
        assert_eq!(transfers(&h, Direction::DtoH), expected["dtoh"], "{mode}");
        let p = summary(&sum)["processes"][0].clone();
        assert_eq!(p["failed_copies"], expected["failed"], "{mode}: {p}");
        assert_eq!(
            summary(&sum)["totals"]["failed_copies"],
            expected["failed"],
            "{mode}: totals"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("9 copies were refused by the driver"),
            "{mode}: the summary says so:\n{err}"
        );
    }
}
