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
    let profile = s.path("failed.profile.json");
    let profile = profile.to_str().unwrap();
    for mode in ["adaptive", "profile"] {
        let run = s.run_recorded(
            &exe,
            &["--mode", mode, "--profile", profile],
            &format!("failed-{mode}.bin"),
        );
        assert_eq!(
            run.out.stdout, plain.stdout,
            "{mode}: the same error codes and checksum as without pinwise"
        );
        let h = &run.history;
        assert_eq!(transfers(h, Direction::HtoD), expected["htod"], "{mode}");
        assert_eq!(transfers(h, Direction::DtoH), expected["dtoh"], "{mode}");
        let p = run.process();
        assert_eq!(p["failed_copies"], expected["failed"], "{mode}: {p}");
        assert_eq!(
            run.summary["totals"]["failed_copies"], expected["failed"],
            "{mode}: totals"
        );
        let err = String::from_utf8_lossy(&run.out.stderr);
        assert!(
            err.contains("9 copies were refused by the driver"),
            "{mode}: the summary says so:\n{err}"
        );
    }
}
