//! A program under `pinwise run` killed without warning (`SIGKILL`: nothing in the process
//! runs) keeps its history up to the last flush: the library appends what changed every
//! `--flush-every` on its drain thread, and `pinwise run` completes the file afterwards. The
//! program prints each copy it completed with its `CLOCK_MONOTONIC` time; every copy
//! completed more than the interval (plus a margin for a loaded machine) before the kill must
//! be in the history. Stand-ins are TEST FIXTURES; nothing here is a timing of a GPU.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use pinwise_core::format::{binary, partial_path};
use pinwise_core::{Direction, MemHistory};

/// `CLOCK_MONOTONIC`, ns (the clock of the program's lines and of pinwise's events).
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A run of `steady_copies` under `pinwise run`, its copies collected as they are printed.
struct Running {
    child: Child,
    /// Completion times of the copies printed so far.
    copies: Arc<Mutex<Vec<u64>>>,
    reader: std::thread::JoinHandle<()>,
}

fn start(s: &Setup, exe: &Path, pinwise_args: &[&str], pause_us: &str) -> Running {
    let mut c = s.libs.command(pinwise());
    c.args(["run", "--no-malloc-hooks"])
        .args(pinwise_args)
        .arg("--")
        .arg(exe)
        .arg(pause_us)
        .current_dir(s.dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    clean_env(&mut c);
    let mut child = c.spawn().expect("start pinwise run");
    let copies = Arc::new(Mutex::new(Vec::new()));
    let out = child.stdout.take().unwrap();
    let seen = copies.clone();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let mut w = line.split_whitespace();
            if w.next() == Some("copy") {
                let _n = w.next();
                if let Some(t) = w.next().and_then(|t| t.parse().ok()) {
                    seen.lock().unwrap().push(t);
                }
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while copies.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the program never copied");
        std::thread::sleep(Duration::from_millis(5));
    }
    Running {
        child,
        copies,
        reader,
    }
}

/// The program `pinwise run` started.
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
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What a kill left.
struct Killed {
    /// Completion times of the copies the program printed.
    copies: Vec<u64>,
    /// When the signal was sent.
    killed_at: u64,
    status: std::process::ExitStatus,
    stderr: String,
}

impl Killed {
    /// Copies completed at least `age` before the kill.
    fn older_than(&self, age: Duration) -> usize {
        let limit = self.killed_at.saturating_sub(age.as_nanos() as u64);
        self.copies.iter().filter(|&&t| t <= limit).count()
    }
}

/// Sends `sig` to the program (or, `group`, to `pinwise run`'s whole process group)
/// `after` its first copy, and waits for `pinwise run`.
fn kill_after(r: Running, after: Duration, sig: i32, group: bool) -> Killed {
    std::thread::sleep(after);
    let launcher = r.child.id();
    let target = if group {
        -(launcher as i32)
    } else {
        program_pid(launcher)
    };
    let killed_at = monotonic_ns();
    // SAFETY: a signal to a process (group) this test started.
    assert_eq!(unsafe { libc::kill(target, sig) }, 0);
    let out = r.child.wait_with_output().expect("wait for pinwise run");
    r.reader.join().unwrap();
    let copies = std::mem::take(&mut *r.copies.lock().unwrap());
    Killed {
        copies,
        killed_at,
        status: out.status,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn copies_in(h: &MemHistory) -> usize {
    transfers(h, Direction::HtoD) as usize
}

fn newest_event(h: &MemHistory) -> u64 {
    h.processes().map(|p| p.last_ts_ns).max().unwrap_or(0)
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// On a 2-core machine shared with builds, the drain thread may run late: events up to
/// the interval plus this before the kill may be missing.
const MARGIN: Duration = Duration::from_millis(750);

#[test]
fn a_program_killed_with_sigkill_keeps_its_history_up_to_the_last_flush() {
    let s = Setup::new();
    let exe = s.build_cudart("steady_copies.c", &[]);
    let every = Duration::from_millis(250);
    for ext in ["bin", "json"] {
        for after_ms in [400u64, 900, 1600] {
            let what = format!("{ext}, killed {after_ms} ms after the first copy");
            let hist = s.path(&format!("kill-{after_ms}.{ext}"));
            let r = start(
                &s,
                &exe,
                &["--flush-every", "250ms", "-o", hist.to_str().unwrap()],
                "2000",
            );
            let k = kill_after(r, Duration::from_millis(after_ms), libc::SIGKILL, false);
            assert_eq!(
                k.status.signal(),
                Some(libc::SIGKILL),
                "{what}: {}",
                k.stderr
            );
            assert!(
                k.stderr
                    .contains("holds what was flushed while the program ran"),
                "{what}: {}",
                k.stderr
            );
            // pinwise run wrote it complete, in the format asked for, and nothing beside it.
            let h = pinwise_core::load_history(&hist)
                .unwrap_or_else(|e| panic!("{what}: {e}\n{}", k.stderr));
            assert_eq!(mode(&hist), 0o600, "{what}");
            assert!(!partial_path(&hist).exists(), "{what}: side file left");
            let kept = copies_in(&h);
            let due = k.older_than(every + MARGIN);
            assert!(
                kept >= due,
                "{what}: {kept} copies in the history, {due} completed more than {:?} before the kill",
                every + MARGIN
            );
            // Nothing invented: at most the copies printed, and one in flight.
            assert!(
                kept <= k.copies.len() + 1,
                "{what}: {kept} > {}",
                k.copies.len()
            );
            assert!(kept > 0, "{what}: nothing was flushed");
            assert!(newest_event(&h) <= k.killed_at, "{what}");
        }
    }
}

/// `pinwise run` killed too (the whole group: nothing completes the file): the binary
/// history, or a JSON history's `.partial` file, reads back as it was last appended.
#[test]
fn the_appended_file_alone_reads_back_when_pinwise_run_is_killed_too() {
    let s = Setup::new();
    let exe = s.build_cudart("steady_copies.c", &[]);
    for ext in ["bin", "json"] {
        let hist = s.path(&format!("group.{ext}"));
        let r = start(
            &s,
            &exe,
            &["--flush-every", "100ms", "-o", hist.to_str().unwrap()],
            "1000",
        );
        let k = kill_after(r, Duration::from_millis(800), libc::SIGKILL, true);
        assert_eq!(k.status.signal(), Some(libc::SIGKILL), "{ext}");
        let appended: PathBuf = if ext == "json" {
            assert!(
                !hist.exists(),
                "the JSON history is written only at the end"
            );
            partial_path(&hist)
        } else {
            hist.clone()
        };
        assert_eq!(mode(&appended), 0o600, "{ext}");
        let bytes = std::fs::read(&appended).unwrap();
        let (h, _cut) = binary::read_salvaging(&bytes).unwrap();
        let due = k.older_than(Duration::from_millis(100) + MARGIN);
        assert!(copies_in(&h) >= due, "{ext}: {} < {due}", copies_in(&h));
        assert!(copies_in(&h) > 0, "{ext}");
        // `pinwise report` reads it.
        let report = Command::new(pinwise())
            .args(["report"])
            .arg(&appended)
            .output()
            .unwrap();
        assert!(
            report.status.success(),
            "{ext}: {}",
            String::from_utf8_lossy(&report.stderr)
        );
    }
}

/// SIGTERM and SIGINT to the program mid-run: the handler has the drain thread write the
/// history complete (the last append), and the JSON one's side file is gone.
#[test]
fn sigterm_and_sigint_mid_run_complete_the_appended_history() {
    let s = Setup::new();
    let exe = s.build_cudart("steady_copies.c", &[]);
    for (sig, ext) in [(libc::SIGTERM, "bin"), (libc::SIGINT, "json")] {
        let hist = s.path(&format!("term-{sig}.{ext}"));
        let r = start(&s, &exe, &["-o", hist.to_str().unwrap()], "1000");
        let k = kill_after(r, Duration::from_millis(1300), sig, false);
        assert_eq!(k.status.signal(), Some(sig), "{}", k.stderr);
        let h = pinwise_core::load_history(&hist).unwrap();
        // Every copy that returned is there (the flush at the signal).
        assert!(
            copies_in(&h) >= k.copies.len(),
            "{sig}: {} < {}",
            copies_in(&h),
            k.copies.len()
        );
        assert!(!partial_path(&hist).exists(), "{sig}: side file left");
    }
}

/// A disk that fills up while the program runs: appends fail, are counted, the file stays
/// readable (cut back to its last whole append), and the program is not held up.
#[test]
fn a_disk_that_fills_up_mid_run_is_counted_and_the_program_goes_on() {
    if !pinwise_testkit::require_root("a_disk_that_fills_up_mid_run") {
        return;
    }
    let s = Setup::new();
    let exe = s.build_cudart("steady_copies.c", &[]);
    let mnt = s.path("small");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=48k"])
        .arg("tmpfs")
        .arg(&mnt)
        .status()
        .is_ok_and(|st| st.success());
    if !pinwise_testkit::in_ci() && !mounted {
        eprintln!("SKIPPED a_disk_that_fills_up_mid_run: cannot mount a tmpfs");
        return;
    }
    assert!(mounted, "cannot mount a tmpfs (CI=true)");
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mnt.clone());
    let hist = mnt.join("h.bin");
    let stats = s.path("full-stats.json");
    let r = start(
        &s,
        &exe,
        &[
            "--flush-every",
            "50ms",
            "-o",
            hist.to_str().unwrap(),
            "--stats-json",
            stats.to_str().unwrap(),
        ],
        "100",
    );
    let k = kill_after(r, Duration::from_millis(2500), libc::SIGTERM, false);
    assert_eq!(k.status.signal(), Some(libc::SIGTERM), "{}", k.stderr);
    let summary = summary(&stats);
    let inc = &summary["processes"][0]["incremental"];
    assert!(inc["appends"].as_u64().unwrap() > 0, "{inc}");
    assert!(
        inc["errors"].as_u64().unwrap() > 0,
        "the disk never filled: {inc}"
    );
    assert!(
        inc["last_error"]
            .as_str()
            .unwrap()
            .contains("No space left"),
        "{inc}"
    );
    assert_eq!(summary["processes"][0]["history"]["written"], false);
    assert!(
        k.stderr
            .contains("appending to the history while the program ran failed"),
        "{}",
        k.stderr
    );
    // The program went on copying until the signal (not held up by the full disk).
    let last = *k.copies.last().unwrap();
    assert!(
        k.killed_at - last < 500_000_000,
        "the last copy was {} ms before the signal",
        (k.killed_at - last) / 1_000_000
    );
    // What was appended before the disk filled reads back whole (no cut append).
    let bytes = std::fs::read(&hist).unwrap();
    let (h, cut) = binary::read_salvaging(&bytes).unwrap();
    assert!(cut.is_none(), "{cut:?}");
    assert!(copies_in(&h) > 0);
}

/// Figures for bench/results/incremental-history.md (not a test of timings: it asserts only
/// what the test above does, and prints what it measured). Run with
/// `bash bench/incremental-history/measure.sh` (which runs `cargo nextest run -p
/// pinwise-preload --test killed --run-ignored only`); `KILLS` (default 20) runs at the
/// default interval (1 s), killed at spread points 1.2 to 4 s in.
#[test]
#[ignore = "a measurement (20+ kills, minutes), not a check: run by bench/incremental-history/measure.sh for bench/results/incremental-history.md; the kill checks above run in CI"]
fn measure_what_a_sigkill_loses() {
    let s = Setup::new();
    let exe = s.build_cudart("steady_copies.c", &[]);
    let kills: u64 = std::env::var("KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    println!("| kill | after first copy (ms) | copies completed | in the history | lost | newest event kept, before the kill (ms) | copies completed > 1 s before the kill missing |");
    println!("|---|---|---|---|---|---|---|");
    let mut windows = Vec::new();
    let mut losses = Vec::new();
    for i in 0..kills {
        let after = 1200 + (i * 1447) % 2800;
        let hist = s.path(&format!("m{i}.bin"));
        let r = start(&s, &exe, &["-o", hist.to_str().unwrap()], "2000");
        let k = kill_after(r, Duration::from_millis(after), libc::SIGKILL, false);
        let h = pinwise_core::load_history(&hist).unwrap();
        let kept = copies_in(&h);
        let lost = k.copies.len().saturating_sub(kept);
        let window = (k.killed_at - newest_event(&h)) as f64 / 1e6;
        let old_missing = k.older_than(Duration::from_secs(1)).saturating_sub(kept);
        println!(
            "| {} | {after} | {} | {kept} | {lost} | {window:.1} | {old_missing} |",
            i + 1,
            k.copies.len()
        );
        windows.push(window);
        losses.push(lost);
        let _ = std::fs::remove_file(&hist);
    }
    windows.sort_by(f64::total_cmp);
    losses.sort_unstable();
    println!(
        "\nwindow (ms): min {:.1}, median {:.1}, max {:.1}; copies lost: min {}, median {}, max {}",
        windows[0],
        windows[windows.len() / 2],
        windows[windows.len() - 1],
        losses[0],
        losses[losses.len() / 2],
        losses[losses.len() - 1]
    );
}
