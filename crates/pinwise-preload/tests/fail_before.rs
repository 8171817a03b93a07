//! `pinwise run` fails before the program starts when an output cannot be written or an
//! option is out of range, says each cause once, and otherwise passes the program's exit
//! status through even when pinwise fails afterwards (`--strict`: status 125). Stand-ins
//! are TEST FIXTURES.

mod common;

use common::*;

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn unwritable_outputs_and_bad_values_stop_the_run_before_the_program_starts() {
    let s = Setup::new();
    let exe = s.build_plain("exit_status.c", &[]);
    let missing = s.path("no-such-dir/h.json");
    let missing = missing.to_str().unwrap();
    for (args, says) in [
        (vec!["-o", missing], "-o "),
        (vec!["--stats-json", missing], "--stats-json "),
        (
            vec!["--mode", "profile", "--profile", missing],
            "the profile",
        ),
        (vec!["--log", missing], "--log "),
        (vec!["--dump-signal", "KILL"], "USR1, USR2 or RTMIN+n"),
        (vec!["--dump-signal", "STOP"], "USR1, USR2 or RTMIN+n"),
        (
            vec!["--budget", "18446744073709551616"],
            "18446744073709551615 bytes",
        ),
    ] {
        let out = s.run_pinwise(&args, &exe, &["5"]);
        let err = stderr(&out);
        // A bad value is a usage error (status 2); an output that cannot be written, 1.
        let want = if args[0] == "--budget" { 2 } else { 1 };
        assert_eq!(out.status.code(), Some(want), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: the program ran");
        assert!(err.contains(says), "{args:?}: {err}");
        // Each cause once.
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: {err}");
        if err.contains("No such file") {
            assert_eq!(err.matches("No such file").count(), 1, "{args:?}: {err}");
        }
    }
}

#[test]
fn a_failure_after_the_run_keeps_the_programs_status_unless_strict() {
    let s = Setup::new();
    let dir = s.path("outputs");
    let stats = dir.join("stats.json");
    // The program removes the output directory, then exits with status 5.
    let script = format!("rm -rf '{}'; exit 5", dir.display());
    for (strict, expected) in [(false, 5), (true, 125)] {
        std::fs::create_dir_all(&dir).unwrap();
        let mut args = vec!["--stats-json", stats.to_str().unwrap()];
        if strict {
            args.push("--strict");
        }
        let out = s.run_pinwise(&args, std::path::Path::new("/bin/sh"), &["-c", &script]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(expected), "strict {strict}: {err}");
        assert!(err.contains("pinwise: error: --stats-json"), "{err}");
    }
}
