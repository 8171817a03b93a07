//! A program under `pinwise run` that ends abruptly (`_exit`, `_Exit`, `abort`, a fatal
//! signal it raises, Ctrl-C or `SIGTERM` sent to `pinwise run`, `SIGKILL` to `pinwise run`)
//! still leaves a readable history holding every copy it made, and its exit status or
//! signal is unchanged. Stand-ins are TEST FIXTURES.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use pinwise_core::Direction;

const COPIES: u64 = 40;

/// How a run ended: (exit code, signal).
fn ending(status: std::process::ExitStatus) -> (Option<i32>, Option<i32>) {
    (status.code(), status.signal())
}

fn check_history(path: &Path, what: &str) {
    let h = pinwise_core::load_history(path)
        .unwrap_or_else(|e| panic!("{what}: history {} unreadable: {e}", path.display()));
    assert_eq!(
        transfers(&h, Direction::HtoD),
        COPIES,
        "{what}: copies in the history"
    );
}

#[test]
fn a_program_that_ends_abruptly_keeps_its_history_and_its_ending() {
    let s = Setup::new();
    let exe = s.build_cudart("interrupted.c", &[]);
    for how in [
        "exit", "_exit", "_Exit", "abort", "sigint", "sigterm", "segv", "handler",
    ] {
        let plain = s.run_plain(&exe, &[how]);
        for ext in ["json", "bin"] {
            let hist = s.path(&format!("{how}.{ext}"));
            let stats = s.path(&format!("{how}-{ext}-stats.json"));
            let out = s.run_pinwise(
                &[
                    "-o",
                    hist.to_str().unwrap(),
                    "--stats-json",
                    stats.to_str().unwrap(),
                ],
                &exe,
                &[how],
            );
            let what = format!("{how} ({ext})");
            assert_eq!(
                ending(out.status),
                ending(plain.status),
                "{what}: ending changed"
            );
            assert_eq!(out.stdout, plain.stdout, "{what}: stdout changed");
            check_history(&hist, &what);
            let summary = summary(&stats);
            assert_eq!(
                summary["processes"][0]["history"]["written"], true,
                "{what}"
            );
        }
    }
}

/// Starts `pinwise run -o <hist> -- interrupted wait` in its own process group and waits
/// until the program said it is ready.
fn start_waiting(s: &Setup, exe: &Path, hist: &Path) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    let mut c = s.libs.command(pinwise());
    c.args(["run", "-o"])
        .arg(hist)
        .arg("--")
        .arg(exe)
        .arg("wait")
        .current_dir(s.dir.path())
        .env_remove("LD_PRELOAD")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = c.spawn().expect("start pinwise run");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    loop {
        match lines.next() {
            Some(Ok(l)) if l == "ready" => break,
            Some(Ok(_)) => continue,
            other => panic!("the program never got ready: {other:?}"),
        }
    }
    child
}

fn program_pid(launcher: u32) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let children =
            std::fs::read_to_string(format!("/proc/{launcher}/task/{launcher}/children"))
                .unwrap_or_default();
        if let Some(p) = children.split_whitespace().next() {
            return p.parse().unwrap();
        }
        assert!(Instant::now() < deadline, "no child of pinwise run");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_gone(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    // SAFETY: signal 0 only checks the process exists.
    while unsafe { libc::kill(pid, 0) } == 0 {
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        });
        if zombie {
            return;
        }
        assert!(Instant::now() < deadline, "program {pid} still running");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn signals_to_pinwise_run_reach_the_program_and_the_history_is_written() {
    let s = Setup::new();
    let exe = s.build_cudart("interrupted.c", &[]);
    for (name, sig, to_group) in [
        ("ctrl-c", libc::SIGINT, true),
        ("sigint", libc::SIGINT, false),
        ("sigterm", libc::SIGTERM, false),
        ("sighup", libc::SIGHUP, false),
    ] {
        let hist = s.path(&format!("sent-{name}.json"));
        let child = start_waiting(&s, &exe, &hist);
        let pid = child.id() as i32;
        // SAFETY: sending a signal to the process (group) this test started.
        unsafe { libc::kill(if to_group { -pid } else { pid }, sig) };
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            ending(out.status),
            (None, Some(sig)),
            "{name}: {:?}",
            String::from_utf8_lossy(&out.stderr)
        );
        check_history(&hist, name);
    }
}

#[test]
fn a_killed_pinwise_run_takes_the_program_with_it_and_the_history_is_written() {
    let s = Setup::new();
    let exe = s.build_cudart("interrupted.c", &[]);
    let hist = s.path("killed.json");
    let mut child = start_waiting(&s, &exe, &hist);
    let program = program_pid(child.id());
    child.kill().unwrap();
    child.wait().unwrap();
    wait_gone(program);
    // The program's SIGTERM handler waits for the drain thread: give it the time to finish.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !hist.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    check_history(&hist, "pinwise run killed");
}

/// CPython installs its SIGINT handler (the one raising `KeyboardInterrupt`) only over the
/// default action: under `pinwise run` (malloc hooks on, so pinwise's state exists before
/// the interpreter starts) a Python program keeps it, and Ctrl-C still reaches its
/// `except KeyboardInterrupt`.
#[test]
fn a_python_program_keeps_its_keyboard_interrupt() {
    let Some(python) = python3() else {
        return;
    };
    let s = Setup::new();
    let script = "import os, signal, sys\n\
                  buf = bytearray(8 << 20)  # a tracked allocation: pinwise's state exists\n\
                  print(signal.getsignal(signal.SIGINT), flush=True)\n\
                  try:\n    os.kill(os.getpid(), signal.SIGINT)\n    signal.pause()\n\
                  except KeyboardInterrupt:\n    print('caught', flush=True)\n";
    let out = s.run_pinwise(
        &["--min-tracked", "64K"],
        Path::new(python),
        &["-c", script],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout, "<built-in function default_int_handler>\ncaught\n",
        "the program's SIGINT handling changed"
    );
}
