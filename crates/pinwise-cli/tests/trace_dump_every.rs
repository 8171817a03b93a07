//! `pinwise trace --dump-every`, the real binary, end to end, against the CPU stand-in for
//! libcuda (a TEST FIXTURE, not a GPU). Needs root for BPF: skipped with a visible message
//! elsewhere, failing under `CI=true` when BPF is unavailable.
//!
//! The traced program makes a known number of host-to-device copies, says so on stdout,
//! then blocks on a fifo that the test holds. While it is blocked, the periodic dump must
//! already be a complete, readable history holding exactly those copies of a process that
//! has not exited (read with pinwise-core's reader and with `pinwise report --json`). Then
//! the test releases it: it makes a known number of device-to-host copies and exits, and
//! the final file must hold every transfer. Nothing here depends on timing except a
//! generous deadline for the first dump to appear.

use std::fs::File;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pinwise_core::format::load_history_bytes;
use pinwise_core::history::{AllocKind, AllocState};
use pinwise_core::{load_history, CostModel, Direction, MemHistory};
use pinwise_testkit::{compile_c_source, require_bpf, StandinLibs};

/// Copies made before the program blocks (host to device) and after (device to host).
const BEFORE: u64 = 12;
const AFTER: u64 = 7;
/// Bytes of each copy (and of the pinned buffer and the device buffer).
const COPY_BYTES: u64 = 1 << 16;
/// How long the test waits for a periodic dump that holds the first copies.
const DEADLINE: Duration = Duration::from_secs(30);

/// Pinned host memory and device memory through the driver API; `BEFORE` uploads, a line
/// on stdout, a blocking read of the fifo in argv[1], `AFTER` downloads, frees, exit 0.
const PROGRAM: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <unistd.h>
#include "cuda_driver_min.h"

int main(int argc, char **argv) {
    if (argc != 5) return 2;
    const char *fifo = argv[1];
    long before = atol(argv[2]), after = atol(argv[3]);
    size_t n = (size_t)atol(argv[4]);
    CUdevice dev; CUcontext ctx;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx))
        return 3;
    void *host; CUdeviceptr d;
    if (cuMemAllocHost_v2(&host, n) || cuMemAlloc_v2(&d, n)) return 4;
    for (long i = 0; i < before; i++)
        if (cuMemcpyHtoD_v2(d, host, n)) return 5;
    printf("{\"pid\": %d, \"uploads\": %ld}\n", (int)getpid(), before);
    fflush(stdout);
    /* Blocks until the test opens the fifo for writing and writes a byte. */
    int fd = open(fifo, O_RDONLY);
    char c;
    if (fd < 0 || read(fd, &c, 1) != 1) return 6;
    close(fd);
    for (long i = 0; i < after; i++)
        if (cuMemcpyDtoH_v2(host, d, n)) return 7;
    if (cuMemFree_v2(d) || cuMemFreeHost(host)) return 8;
    return 0;
}
"#;

fn pinwise() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pinwise"))
}

/// Kills what is still running if the test fails half-way (pinwise, and the traced program
/// that would otherwise wait on its fifo for ever).
struct Cleanup {
    tracer: Option<Child>,
    program: Option<u32>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(pid) = self.program.take() {
            // SAFETY: `kill` has no memory-safety preconditions; the PID is the one the
            // program printed, not yet reaped while pinwise (its parent) still runs.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
        }
        if let Some(mut tracer) = self.tracer.take() {
            let _ = tracer.kill();
            let _ = tracer.wait();
        }
    }
}

fn transfers(history: &MemHistory, dir: Direction) -> (u64, u64) {
    let t = history.summary(&CostModel::builtin()).by_direction[dir.index()].all;
    (t.transfers, t.bytes)
}

/// The pinned allocation of the program (exactly one).
fn pinned(history: &MemHistory) -> pinwise_core::history::AllocationInfo {
    let mut pinned: Vec<_> = history
        .allocations()
        .map(|v| v.info())
        .filter(|a| a.kind == AllocKind::PinnedAlloc)
        .collect();
    assert_eq!(pinned.len(), 1, "one pinned allocation: {pinned:?}");
    pinned.remove(0)
}

/// Traces the program with `--dump-every 200ms` in `format` and checks the dump during and
/// after the run.
fn dump_every_case(format: &str) {
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("blocks_on_fifo");
    compile_c_source(PROGRAM, &exe, &libs.cuda_link_args());
    let fifo = dir.path().join("go");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let out = dir.path().join(format!("periodic.{format}"));
    let stderr_path = dir.path().join("pinwise.stderr");
    let stderr_text = || std::fs::read_to_string(&stderr_path).unwrap_or_default();

    let mut tracer = pinwise()
        .env("LD_LIBRARY_PATH", libs.ld_library_path())
        .args(["trace", "--dump-every", "200ms", "--format", format, "-o"])
        .arg(&out)
        .arg("--")
        .arg(&exe)
        .arg(&fifo)
        .args([BEFORE, AFTER, COPY_BYTES].map(|n| n.to_string()))
        .stdout(Stdio::piped())
        .stderr(File::create(&stderr_path).unwrap())
        .spawn()
        .expect("running pinwise");
    // The program's stdout is pinwise's (the command inherits it): one line, then it
    // blocks. EOF instead means it (and pinwise) ended early.
    let stdout = tracer.stdout.take().unwrap();
    let mut cleanup = Cleanup {
        tracer: Some(tracer),
        program: None,
    };
    let mut stdout = std::io::BufReader::new(stdout);
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let said: serde_json::Value = serde_json::from_str(line.trim()).unwrap_or_else(|e| {
        panic!(
            "the program's first line is not JSON ({e}): {line:?}\n{}",
            stderr_text()
        )
    });
    assert_eq!(said["uploads"].as_u64(), Some(BEFORE));
    let pid = said["pid"].as_u64().unwrap() as u32;
    cleanup.program = Some(pid);

    // The program is blocked on the fifo now: wait for a periodic dump that holds its
    // uploads.
    let started = Instant::now();
    let mut last_problem = String::from("no file yet");
    let (bytes, mid) = loop {
        if let Some(status) = cleanup.tracer.as_mut().unwrap().try_wait().unwrap() {
            panic!(
                "pinwise ended ({status}) while the program was blocked:\n{}",
                stderr_text()
            );
        }
        assert!(
            started.elapsed() < DEADLINE,
            "no periodic dump with {BEFORE} uploads in {} within {DEADLINE:?} ({last_problem}):\n{}",
            out.display(),
            stderr_text()
        );
        match std::fs::read(&out) {
            Err(e) => last_problem = format!("reading it: {e}"),
            Ok(bytes) => match load_history_bytes(&bytes) {
                Ok(h) if transfers(&h, Direction::HtoD).0 == BEFORE => break (bytes, h),
                Ok(h) => last_problem = format!("{:?} HtoD so far", transfers(&h, Direction::HtoD)),
                // JSON dumps are renamed into place: any JSON file there is whole.
                Err(e) if format == "json" => panic!("a periodic JSON dump does not read: {e}"),
                // An append may be under way: its frames are incomplete until it ends.
                Err(e) => last_problem = format!("not readable yet: {e}"),
            },
        }
        std::thread::sleep(Duration::from_millis(50));
    };

    // Written while the program was alive (it still is: it waits for us) and complete up
    // to that point: the uploads, no downloads, the buffer live, the process not exited.
    assert!(
        Path::new(&format!("/proc/{pid}")).exists(),
        "the program is still running"
    );
    assert_eq!(
        transfers(&mid, Direction::HtoD),
        (BEFORE, BEFORE * COPY_BYTES)
    );
    assert_eq!(transfers(&mid, Direction::DtoH), (0, 0));
    let buffer = pinned(&mid);
    assert_eq!((buffer.size, buffer.transfer_count), (COPY_BYTES, BEFORE));
    assert_eq!(buffer.state, AllocState::Live);
    let process = mid
        .processes()
        .find(|p| p.pid == pid)
        .expect("the program's process in the dump");
    assert_eq!(process.exit_ts_ns, None, "not exited in the mid-trace dump");

    // The command line reads the same snapshot.
    let snapshot = dir.path().join(format!("snapshot.{format}"));
    std::fs::write(&snapshot, &bytes).unwrap();
    let report = pinwise()
        .args(["report", "--json", "--no-symbols"])
        .arg(&snapshot)
        .output()
        .unwrap();
    assert!(
        report.status.success(),
        "pinwise report on the mid-trace dump: {}",
        String::from_utf8_lossy(&report.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    let row = &report["directions"][Direction::HtoD.index()];
    assert_eq!(row["direction"], "HtoD");
    assert_eq!(row["transfers"].as_u64(), Some(BEFORE));

    // Release the program and let everything end.
    std::fs::write(&fifo, "g").unwrap();
    let mut tracer = cleanup.tracer.take().unwrap();
    let status = tracer.wait().unwrap();
    cleanup.program = None;
    let stderr = stderr_text();
    assert!(status.success(), "pinwise trace ({status}):\n{stderr}");
    assert!(stderr.contains("0 dropped"), "no events dropped:\n{stderr}");

    // The final file holds every transfer, the free and the exit.
    let last = load_history(&out).unwrap_or_else(|e| panic!("reading {}: {e}", out.display()));
    assert_eq!(
        transfers(&last, Direction::HtoD),
        (BEFORE, BEFORE * COPY_BYTES)
    );
    assert_eq!(
        transfers(&last, Direction::DtoH),
        (AFTER, AFTER * COPY_BYTES)
    );
    let buffer = pinned(&last);
    assert_eq!(buffer.transfer_count, BEFORE + AFTER);
    assert_eq!(buffer.state, AllocState::Freed);
    let process = last.processes().find(|p| p.pid == pid).unwrap();
    assert!(process.exit_ts_ns.is_some(), "exit recorded at the end");
    // No temporary file of the rewrites is left behind.
    let leftovers: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn dump_every_json_is_a_whole_history_while_the_program_runs() {
    if !require_bpf("dump_every_json_is_a_whole_history_while_the_program_runs") {
        return;
    }
    dump_every_case("json");
}

#[test]
fn dump_every_binary_appends_read_back_while_the_program_runs() {
    if !require_bpf("dump_every_binary_appends_read_back_while_the_program_runs") {
        return;
    }
    dump_every_case("bin");
}
