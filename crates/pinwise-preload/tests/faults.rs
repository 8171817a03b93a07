//! Fault injection on the stand-in (TEST FIXTURES, nothing measured): 32 threads copying when
//! the process is ended by a signal, `_exit` or `abort`; a budget of 0 or 1 byte; a full
//! disk for the history; garbage `PINWISE_*` settings. Each asserts that the program's
//! output and exit status or signal are unchanged, the budget held, and the history readable
//! and complete up to the fault.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use common::*;
use pinwise_core::Direction;

fn ending(s: std::process::ExitStatus) -> (Option<i32>, Option<i32>) {
    (s.code(), s.signal())
}

/// The copies the program counted before its fault ("done N").
fn counted(stdout: &[u8]) -> u64 {
    let text = String::from_utf8_lossy(stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("done "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no count in {text:?}"))
}

#[test]
fn thirty_two_threads_interrupted_keep_every_counted_copy() {
    let s = Setup::new();
    let exe = s.build_cudart("threads_fault.c", &["-pthread"]);
    for (how, expected) in [
        ("sigterm", (None, Some(libc::SIGTERM))),
        ("_exit", (Some(7), None)),
        ("abort", (None, Some(libc::SIGABRT))),
    ] {
        for ext in ["json", "bin"] {
            let hist = s.path(&format!("threads-{how}.{ext}"));
            let out = s.run_pinwise(&["-o", hist.to_str().unwrap()], &exe, &[how]);
            let what = format!("{how} ({ext})");
            assert_eq!(
                ending(out.status),
                expected,
                "{what}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let n = counted(&out.stdout);
            assert!(n > 0, "{what}: no copy before the fault");
            let h = pinwise_core::load_history(&hist)
                .unwrap_or_else(|e| panic!("{what}: history unreadable: {e}"));
            let recorded = transfers(&h, Direction::HtoD);
            assert!(
                recorded >= n,
                "{what}: {recorded} copies recorded, {n} returned before the fault"
            );
            eprintln!("{what}: {n} copies counted before the fault, {recorded} recorded");
        }
    }
}

#[test]
fn a_budget_of_zero_or_one_byte_is_held_and_changes_nothing() {
    let s = Setup::new();
    let exe = s.build_cudart("cudart_workload.c", &[]);
    let plain = s.run_plain(&exe, &[]);
    assert_ok(&plain, "plain");
    for budget in ["0", "1"] {
        let run = s.run_recorded(
            &exe,
            &["--budget", budget],
            &format!("budget-{budget}.json"),
        );
        assert_same_stdout(&run.out, &plain, budget);
        let engine = &run.process()["engine"];
        let limit: u64 = budget.parse().unwrap();
        assert_eq!(engine["budget_bytes"], limit, "{budget}: {engine}");
        // The peak counts every byte locked in the process: beyond the budget, only what
        // the program locked itself (its requests passed on to CUDA, its registrations).
        let own = run.process()["program_pinned_bytes_peak"].as_u64().unwrap();
        assert!(
            engine["pinned_bytes_peak"].as_u64().unwrap() <= limit.max(own),
            "{budget}: budget exceeded: {engine}, the program's own {own}"
        );
        assert_eq!(run.summary["totals"]["promotions"], 0, "{budget}");
    }
}

#[test]
fn a_full_disk_loses_the_history_not_the_programs_status() {
    if !pinwise_testkit::require_root("a_full_disk_loses_the_history") {
        return;
    }
    let s = Setup::new();
    let exe = s.build_cudart("interrupted.c", &[]);
    let mnt = s.path("full");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=8k"])
        .arg("tmpfs")
        .arg(&mnt)
        .status()
        .is_ok_and(|st| st.success());
    if !pinwise_testkit::in_ci() && !mounted {
        eprintln!("SKIPPED a_full_disk_loses_the_history: cannot mount a tmpfs");
        return;
    }
    assert!(mounted, "cannot mount a tmpfs (CI=true)");
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mnt.clone());
    // Fill it.
    let _ = std::fs::write(mnt.join("filler"), vec![0u8; 64 << 10]);
    let hist = mnt.join("h.json");
    for (strict, expected) in [(false, 3), (true, 125)] {
        let mut args = vec!["-o", hist.to_str().unwrap()];
        if strict {
            args.push("--strict");
        }
        let out = s.run_pinwise(&args, &exe, &["exit", "2000"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(expected), "strict {strict}: {err}");
        assert!(err.contains("NOT written"), "{err}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("copies 2000"));
        assert!(!hist.exists(), "a partial history was left");
        // No temporary file left behind either.
        let left: Vec<_> = std::fs::read_dir(&mnt)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .filter(|n| n != "filler")
            .collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }
}

#[test]
fn garbage_settings_change_nothing_in_the_program() {
    let s = Setup::new();
    let exe = s.build_cudart("cudart_workload.c", &[]);
    let plain = s.run_plain(&exe, &[]);
    assert_ok(&plain, "plain");
    for (name, value) in [
        ("PINWISE_BUDGET", "18446744073709551616"),
        ("PINWISE_BUDGET", "-5G"),
        ("PINWISE_MODE", "\u{7f}\u{1}"),
        ("PINWISE_DUMP_SIGNAL", "KILL"),
        ("PINWISE_LOG_LEVEL", "[[[["),
        ("PINWISE_KEEP_PINNED", "maybe"),
        ("PINWISE_CALIBRATION", "/dev/zero"),
        ("PINWISE_STATS_DIR", "/nonexistent/dir"),
        ("PINWISE_LAUNCHER_PID", "not-a-pid"),
    ] {
        let mut c = s.libs.command(&exe);
        c.env("LD_PRELOAD", preload())
            .env(name, value)
            .current_dir(s.dir.path());
        let out = c.output().unwrap();
        assert_eq!(ending(out.status), ending(plain.status), "{name}={value:?}");
        assert_eq!(out.stdout, plain.stdout, "{name}={value:?}: stdout changed");
    }
}

/// A child forked while the parent's `_exit` waits for pinwise's outputs does not inherit
/// that ending: its hooks do not wait for a flush that is not its own (they did, 3 s per
/// copy), and it never waits on a loader lock the parent held at the fork (two of 17 such
/// children once hung). Each child's three copies take well under a second.
#[test]
fn children_forked_while_the_parent_ends_copy_without_waiting() {
    let s = Setup::new();
    let exe = s.build_cudart("fork_while_ending.c", &["-pthread"]);
    let out = s.run_pinwise(&[], &exe, &[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `output()` returns once every child closed the pipe: all of them ended.
    let text = String::from_utf8_lossy(&out.stdout);
    let mut copies: std::collections::BTreeMap<u32, Vec<f64>> = Default::default();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let ["child", pid, "copy", _, "rc", rc, "took", secs] = f.as_slice() {
            assert_eq!(*rc, "0", "{line}");
            copies
                .entry(pid.parse().unwrap())
                .or_default()
                .push(secs.parse().unwrap());
        } else {
            assert_eq!(line, "parent exiting", "unexpected output: {text}");
        }
    }
    assert!(!copies.is_empty(), "no child copied: {text}");
    for (pid, times) in &copies {
        assert_eq!(times.len(), 3, "child {pid} did not finish: {text}");
        assert!(
            times.iter().all(|t| *t < 1.0),
            "child {pid} waited: {times:?}"
        );
    }
    eprintln!("{} children, every copy under 1 s", copies.len());
}
