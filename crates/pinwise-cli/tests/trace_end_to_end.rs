//! `pinwise trace`, the real binary, end to end, against the CPU stand-ins for libcuda and
//! libcudart (TEST FIXTURES, not a GPU). Needs root for BPF: skipped with a visible
//! message elsewhere, failing under `CI=true` when BPF is unavailable.
//!
//! The traced program is `bench/gpu/trace/workload.c` (the same source the GPU script
//! builds with nvcc), compiled here against the stand-ins: threads that allocate pinned
//! memory through the runtime and the driver, register heap memory, map a large pageable
//! buffer, copy a known number of times each way through sync, async, unified and 2D
//! entry points, and free everything. It prints what it did; the history must say exactly
//! that, and two runs must give the same tags.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pinwise_core::history::AllocKind;
use pinwise_core::{load_history, CostModel, Direction, MemHistory};
use pinwise_testkit::{compile_c, require_bpf, StandinLibs};

const THREADS: u64 = 4;

fn workload_source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/gpu/trace/workload.c")
}

fn build_workload(libs: &StandinLibs, dir: &Path) -> PathBuf {
    let exe = dir.join("workload");
    let mut args: Vec<String> = vec!["-DPINWISE_STANDIN".into()];
    args.extend(libs.cudart_link_args());
    args.extend(libs.cuda_link_args());
    args.push("-lpthread".into());
    compile_c(&workload_source(), &exe, &args);
    exe
}

fn pinwise() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pinwise"))
}

fn run_traced(libs: &StandinLibs, workload: &Path, out: &Path) -> (Output, serde_json::Value) {
    let output = pinwise()
        .env("LD_LIBRARY_PATH", libs.ld_library_path())
        .arg("trace")
        .arg("-o")
        .arg(out)
        .arg("--")
        .arg(workload)
        .arg(THREADS.to_string())
        .output()
        .expect("running pinwise");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "pinwise trace failed ({}):\n{stderr}",
        output.status
    );
    // pinwise prints only to stderr: stdout is the workload's own line of expectations.
    let stdout = String::from_utf8_lossy(&output.stdout);
    let expected: serde_json::Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("workload output is not JSON ({e}): {stdout}\n{stderr}"));
    (output, expected)
}

fn kind_name(kind: AllocKind) -> &'static str {
    kind.as_str()
}

/// (kind, size) -> the tags of its allocations: (module key, offset, call number).
type Tags = BTreeMap<(String, u64), BTreeSet<(String, u64, u32)>>;

fn check_history(history: &MemHistory, expected: &serde_json::Value, workload: &Path) -> Tags {
    let summary = history.summary(&CostModel::builtin());
    for dir in [Direction::HtoD, Direction::DtoH, Direction::DtoD] {
        let got = summary.by_direction[dir.index()].all;
        let want = &expected[dir.as_str()];
        assert_eq!(
            (got.transfers, got.bytes),
            (
                want["transfers"].as_u64().unwrap(),
                want["bytes"].as_u64().unwrap()
            ),
            "{} transfers and bytes",
            dir.as_str()
        );
    }
    assert_eq!(
        summary.by_direction[Direction::HtoH.index()].all.transfers,
        0
    );

    let modules = history.modules();
    let workload_real = std::fs::canonicalize(workload).unwrap();
    let mut tags = Tags::new();
    for want in expected["allocations"].as_array().unwrap() {
        let kind = want["kind"].as_str().unwrap();
        let size = want["size"].as_u64().unwrap();
        // An 8 MiB malloc maps 8 MiB plus malloc's header page.
        let matches: Vec<_> = history
            .allocations()
            .map(|v| v.info())
            .filter(|a| kind_name(a.kind) == kind && a.size >= size && a.size < size + 65536)
            .collect();
        assert_eq!(
            matches.len() as u64,
            want["count"].as_u64().unwrap(),
            "number of {kind} allocations of {size} bytes"
        );
        let mut group = BTreeSet::new();
        for a in &matches {
            assert_eq!(
                a.transfer_count,
                want["transfers"].as_u64().unwrap(),
                "{kind} {size}: transfers"
            );
            assert_eq!(
                a.counters.direction(Direction::HtoD).bytes(),
                want["HtoD_bytes"].as_u64().unwrap(),
                "{kind} {size}: HtoD bytes"
            );
            assert_eq!(
                a.counters.direction(Direction::DtoH).bytes(),
                want["DtoH_bytes"].as_u64().unwrap(),
                "{kind} {size}: DtoH bytes"
            );
            // The call site is the workload's own code, identified by its build ID.
            let module = modules.get(a.tag.site.module).expect("module of the site");
            assert!(module.build_id.is_some(), "{module:?} has a build ID");
            assert_eq!(
                std::fs::canonicalize(&module.path).unwrap(),
                workload_real,
                "{kind} {size} allocated from {module:?}+{:#x}",
                a.tag.site.offset
            );
            group.insert((module.key(), a.tag.site.offset, a.tag.call_no));
        }
        // One call site per kind of allocation, called once per thread: call numbers 1..T.
        let sites: BTreeSet<_> = group.iter().map(|(m, o, _)| (m.clone(), *o)).collect();
        assert_eq!(
            sites.len(),
            1,
            "{kind} {size}: one call site, got {sites:?}"
        );
        let call_nos: BTreeSet<u32> = group.iter().map(|(_, _, n)| *n).collect();
        assert_eq!(
            call_nos,
            (1..=THREADS as u32).collect(),
            "{kind} {size}: call numbers"
        );
        tags.insert((kind.to_string(), size), group);
    }
    let distinct_sites: BTreeSet<_> = tags
        .values()
        .flat_map(|g| g.iter().map(|(m, o, _)| (m.clone(), *o)))
        .collect();
    assert_eq!(
        distinct_sites.len(),
        tags.len(),
        "each allocation kind has its own site"
    );
    tags
}

#[test]
fn records_exactly_what_the_workload_did_and_tags_are_stable_across_runs() {
    if !require_bpf("records_exactly_what_the_workload_did_and_tags_are_stable_across_runs") {
        return;
    }
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let workload = build_workload(&libs, dir.path());

    let mut runs = Vec::new();
    for run in 1..=2 {
        let out = dir.path().join(format!("run{run}.json"));
        let (output, expected) = run_traced(&libs, &workload, &out);
        assert_eq!(expected["threads"].as_u64(), Some(THREADS));
        let history =
            load_history(&out).unwrap_or_else(|e| panic!("reading {}: {e}", out.display()));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("0 dropped"), "no events dropped:\n{stderr}");
        assert!(
            stderr.contains("workload.c:"),
            "the summary shows symbolized call sites:\n{stderr}"
        );
        // Traced on the CPU stand-in: the summary and the history both say so.
        assert!(stderr.contains("CPU stand-in (TEST FIXTURE"), "{stderr}");
        assert_eq!(
            history
                .source_stats()
                .get(pinwise_core::history::STANDIN_SOURCE_STAT),
            Some(&1)
        );
        runs.push(check_history(&history, &expected, &workload));
    }
    assert_eq!(runs[0], runs[1], "tags differ between two runs");
}

#[test]
fn binary_dump_reads_back_with_the_same_counts() {
    if !require_bpf("binary_dump_reads_back_with_the_same_counts") {
        return;
    }
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let workload = build_workload(&libs, dir.path());
    let out = dir.path().join("run.bin");
    let summary = dir.path().join("summary.json");
    let output = pinwise()
        .env("LD_LIBRARY_PATH", libs.ld_library_path())
        .args(["trace", "--format", "bin", "-o"])
        .arg(&out)
        .arg("--summary-json")
        .arg(&summary)
        .arg("--")
        .arg(&workload)
        .arg("2")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let expected: serde_json::Value =
        serde_json::from_slice(String::from_utf8_lossy(&output.stdout).trim().as_bytes()).unwrap();
    let history = load_history(&out).unwrap();
    let total: u64 = history.allocations().map(|v| v.info().transfer_count).sum();
    let want = expected["HtoD"]["transfers"].as_u64().unwrap()
        + expected["DtoH"]["transfers"].as_u64().unwrap();
    assert_eq!(total, want, "transfers attributed to host allocations");
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    // It follows its published schema.
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../../../schemas/trace-summary.schema.json")).unwrap();
    let errors: Vec<String> = jsonschema::validator_for(&schema)
        .unwrap()
        .iter_errors(&s)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    assert_eq!(s["format"], "pinwise-trace-summary");
    assert_eq!(
        s["summary"]["by_direction"]["HtoD"]["all"],
        s["by_direction"]["HtoD"]
    );
    assert_eq!(s["by_direction"]["HtoD"], expected["HtoD"]);
    assert_eq!(s["tracer"]["ringbuf_drops"], 0);
    assert!(s["tracer"]["uprobes"].as_u64().unwrap() > 10);
    let costs = s["tracer"]["program_costs"].as_array().unwrap();
    assert!(
        costs
            .iter()
            .any(|c| c["program"] == "copy_htod" && c["run_count"].as_u64() > Some(0)),
        "per-probe BPF cost reported: {costs:?}"
    );
}

#[test]
fn passes_the_exit_status_of_the_command_through() {
    if !require_bpf("passes_the_exit_status_of_the_command_through") {
        return;
    }
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let output = pinwise()
        .env("LD_LIBRARY_PATH", libs.ld_library_path())
        .arg("trace")
        .arg("-o")
        .arg(dir.path().join("h.json"))
        .args(["--", "sh", "-c", "exit 3"])
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        dir.path().join("h.json").exists(),
        "the history is written anyway"
    );
}

#[test]
fn clear_errors_for_an_absent_pid_and_a_missing_libcuda() {
    if !require_bpf("clear_errors_for_an_absent_pid_and_a_missing_libcuda") {
        return;
    }
    let output = pinwise()
        .args(["trace", "--pid", "4000000000"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no process with PID 4000000000"),
        "{stderr}"
    );

    // This process maps no libcuda: tracing it by PID must say so.
    let output = pinwise()
        .args(["trace", "--pid", &std::process::id().to_string()])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no libcuda found"), "{stderr}");

    // A nonexistent override is named.
    let output = pinwise()
        .args([
            "trace",
            "--libcuda",
            "/nonexistent/libcuda.so.1",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("/nonexistent/libcuda.so.1"), "{stderr}");
}

#[test]
fn traces_a_running_process_by_pid_until_it_exits() {
    if !require_bpf("traces_a_running_process_by_pid_until_it_exits") {
        return;
    }
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let workload = build_workload(&libs, dir.path());
    // A shell that maps nothing of CUDA waits, then runs the workload: tracing the
    // workload by PID needs it to map libcuda first, so trace the shell's child instead:
    // start the workload paused behind a fifo.
    let fifo = dir.path().join("go");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let script = format!(
        "read _ < {fifo}; exec {workload} 2",
        fifo = fifo.display(),
        workload = workload.display()
    );
    // The workload links libcuda, so it maps it before main; `exec` keeps the PID.
    let mut target = Command::new("sh");
    target
        .args(["-c", &script])
        .env("LD_LIBRARY_PATH", libs.ld_library_path())
        .stdout(std::process::Stdio::piped());
    let child = target.spawn().unwrap();
    let pid = child.id();
    // `--libcuda` because the shell itself does not map libcuda yet.
    let out = dir.path().join("pid.json");
    let mut tracer = pinwise()
        .args(["trace", "--pid", &pid.to_string(), "--libcuda"])
        .arg(libs.libcuda())
        .arg("--libcudart")
        .arg(libs.libcudart())
        .arg("-o")
        .arg(&out)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Release the workload once pinwise says it is tracing.
    let mut reader = std::io::BufReader::new(tracer.stderr.take().unwrap());
    let mut stderr = String::new();
    loop {
        let mut line = String::new();
        let n = std::io::BufRead::read_line(&mut reader, &mut line).unwrap();
        stderr.push_str(&line);
        if n == 0 || line.contains(&format!("tracing PID {pid}")) {
            break;
        }
    }
    std::fs::write(&fifo, "go\n").unwrap();
    let workload_out = child.wait_with_output().unwrap();
    assert!(workload_out.status.success());
    let tracer_status = tracer.wait().unwrap();
    std::io::Read::read_to_string(&mut reader, &mut stderr).unwrap();
    assert!(tracer_status.success(), "{stderr}");
    assert!(stderr.contains(&format!("PID {pid} exited")), "{stderr}");
    let expected: serde_json::Value = serde_json::from_slice(
        String::from_utf8_lossy(&workload_out.stdout)
            .trim()
            .as_bytes(),
    )
    .unwrap();
    let history = load_history(&out).unwrap();
    let summary = history.summary(&CostModel::builtin());
    let got = summary.by_direction[Direction::HtoD.index()].all;
    assert_eq!(
        got.transfers,
        expected["HtoD"]["transfers"].as_u64().unwrap(),
        "{stderr}"
    );
    assert_eq!(got.bytes, expected["HtoD"]["bytes"].as_u64().unwrap());
}

#[test]
fn ctrl_c_writes_what_was_seen_and_passes_the_signal_status_through() {
    if !require_bpf("ctrl_c_writes_what_was_seen_and_passes_the_signal_status_through") {
        return;
    }
    use std::os::unix::process::CommandExt;
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("interrupted.json");
    // Its own process group, as a terminal's foreground job: Ctrl-C reaches pinwise and
    // the command alike.
    let mut tracer = pinwise()
        .env("LD_LIBRARY_PATH", libs.ld_library_path())
        .arg("trace")
        .arg("-o")
        .arg(&out)
        .args(["--", "sleep", "30"])
        .process_group(0)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let mut stderr = tracer.stderr.take().unwrap();
    // Wait until tracing has started (the first status line), then press Ctrl-C.
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !String::from_utf8_lossy(&seen).contains("tracing `sleep 30`") {
        use std::io::Read;
        if stderr.read(&mut byte).unwrap() == 0 {
            break;
        }
        seen.push(byte[0]);
    }
    // SAFETY: sends SIGINT to the process group we created for pinwise.
    assert_eq!(
        unsafe { libc::kill(-(tracer.id() as i32), libc::SIGINT) },
        0
    );
    let status = tracer.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    let text = format!("{}{rest}", String::from_utf8_lossy(&seen));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{text}"
    );
    assert!(
        text.contains("interrupted: writing what was seen"),
        "{text}"
    );
    assert_eq!(
        status.code(),
        Some(130),
        "128 + SIGINT, from the command: {text}"
    );
    assert!(
        load_history(&out).is_ok(),
        "the history was written: {text}"
    );
}

/// Reads `stderr` until `marker` appears; what was read.
fn read_until(stderr: &mut impl std::io::Read, marker: &str) -> String {
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !String::from_utf8_lossy(&seen).contains(marker) {
        if stderr.read(&mut byte).unwrap() == 0 {
            break;
        }
        seen.push(byte[0]);
    }
    String::from_utf8_lossy(&seen).into_owned()
}

#[test]
fn a_second_ctrl_c_leaves_a_command_that_ignores_it_running() {
    if !require_bpf("a_second_ctrl_c_leaves_a_command_that_ignores_it_running") {
        return;
    }
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("interrupted.json");
    let mut tracer = pinwise()
        .env("LD_LIBRARY_PATH", libs.ld_library_path())
        .arg("trace")
        .arg("-o")
        .arg(&out)
        .args(["--", "sh", "-c", "trap '' INT; sleep 30"])
        .process_group(0)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = tracer.stderr.take().unwrap();
    let mut text = read_until(&mut stderr, "tracing `sh");
    // The shell may not have run its `trap` yet when tracing starts.
    std::thread::sleep(std::time::Duration::from_millis(500));
    // SAFETY: sends SIGINT to the process group we created for pinwise.
    assert_eq!(
        unsafe { libc::kill(-(tracer.id() as i32), libc::SIGINT) },
        0
    );
    text += &read_until(&mut stderr, "Ctrl-C again");
    assert!(text.contains("waiting for PID"), "{text}");
    // SAFETY: sends SIGINT to pinwise alone.
    assert_eq!(unsafe { libc::kill(tracer.id() as i32, libc::SIGINT) }, 0);
    let status = tracer.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGINT), "{text}");
    assert!(
        load_history(&out).is_ok(),
        "the history was written before: {text}"
    );
    // The command, left running, is ended here (its group).
    // SAFETY: SIGKILL to the process group we created.
    unsafe { libc::kill(-(tracer.id() as i32), libc::SIGKILL) };
}

#[test]
fn refuses_to_run_without_privileges_and_says_why() {
    use std::os::unix::process::CommandExt;
    // Needs root to drop to another user.
    if pinwise_testkit::effective_uid() != Some(0) {
        eprintln!(
            "SKIPPED refuses_to_run_without_privileges_and_says_why: needs root to drop privileges"
        );
        return;
    }
    let output = pinwise()
        .args(["trace", "--", "true"])
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("not root") && stderr.contains("CAP_BPF"),
        "{stderr}"
    );
}

#[test]
fn follows_the_children_of_a_launched_command() {
    if !require_bpf("follows_the_children_of_a_launched_command") {
        return;
    }
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let workload = build_workload(&libs, dir.path());
    let out = dir.path().join("children.json");
    // The shell forks the workload (`; true` keeps it from exec'ing in place).
    let script = format!("{} 2; true", workload.display());
    let output = pinwise()
        .env("LD_LIBRARY_PATH", libs.ld_library_path())
        .arg("trace")
        .arg("-o")
        .arg(&out)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let expected: serde_json::Value =
        serde_json::from_slice(String::from_utf8_lossy(&output.stdout).trim().as_bytes()).unwrap();
    let history = load_history(&out).unwrap();
    let summary = history.summary(&CostModel::builtin());
    for dir in [Direction::HtoD, Direction::DtoH] {
        let got = summary.by_direction[dir.index()].all;
        assert_eq!(
            (got.transfers, got.bytes),
            (
                expected[dir.as_str()]["transfers"].as_u64().unwrap(),
                expected[dir.as_str()]["bytes"].as_u64().unwrap()
            ),
            "{} in the child: {stderr}",
            dir.as_str()
        );
    }
    let pids: BTreeSet<u32> = history.allocations().map(|v| v.info().pid).collect();
    assert_eq!(pids.len(), 1, "allocations are the child's: {pids:?}");
}

#[test]
fn page_faults_on_tracked_memory_when_asked_for() {
    if !require_bpf("page_faults_on_tracked_memory_when_asked_for") {
        return;
    }
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let workload = build_workload(&libs, dir.path());
    let out = dir.path().join("faults.json");
    let output = pinwise()
        .env("LD_LIBRARY_PATH", libs.ld_library_path())
        .arg("trace")
        .arg("--page-faults")
        .arg("-o")
        .arg(&out)
        .arg("--")
        .arg(&workload)
        .arg("1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let dump: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    // memset of the 8 MiB pageable buffer touches each of its pages.
    let pageable = dump["allocations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["kind"] == "PAGEABLE")
        .expect("the pageable buffer");
    let faults = pageable["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "PAGE_FAULT")
        .count();
    assert!(
        faults >= 4,
        "page faults recorded on the tracked buffer: {faults}\n{stderr}"
    );
}

/// A program with the runtime linked in (as `nvcc -cudart static` does): its own
/// `cudaMallocHost` calls the driver. The runtime probe on the executable's symbol gives
/// the application's call site, not the line inside the runtime that calls the driver.
const STATIC_RUNTIME_PROGRAM: &str = r#"
#include <stdio.h>
#include <stddef.h>
#include "cuda_driver_min.h"

/* The "runtime", statically linked: one call into the driver for every caller. */
__attribute__((noinline)) int cudaMallocHost(void **p, size_t n) {
    __asm__ volatile("");
    return cuMemAllocHost_v2(p, n) == 0 ? 0 : 2;
}

int main(void) {
    CUdevice dev; CUcontext ctx;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx))
        return 3;
    void *a, *b;
    if (cudaMallocHost(&a, 1 << 16)) return 4;   /* site one */
    if (cudaMallocHost(&b, 1 << 17)) return 5;   /* site two */
    cuMemFreeHost(a);
    cuMemFreeHost(b);
    return 0;
}
"#;

#[test]
fn static_runtime_in_the_executable_gives_the_application_call_site() {
    if !require_bpf("static_runtime_in_the_executable_gives_the_application_call_site") {
        return;
    }
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("static_rt");
    pinwise_testkit::compile_c_source(STATIC_RUNTIME_PROGRAM, &exe, &libs.cuda_link_args());
    let out = dir.path().join("static.json");
    let output = pinwise()
        .env("LD_LIBRARY_PATH", libs.ld_library_path())
        .arg("trace")
        .arg("-o")
        .arg(&out)
        .arg("--")
        .arg(&exe)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let history = load_history(&out).unwrap();
    let allocs: Vec<_> = history
        .allocations()
        .map(|v| v.info())
        .filter(|a| a.kind == AllocKind::PinnedAlloc)
        .collect();
    assert_eq!(allocs.len(), 2, "{stderr}");
    let symbolizer = pinwise_trace::Symbolizer::new();
    let modules = history.modules();
    let mut lines = Vec::new();
    for a in &allocs {
        let module = modules.get(a.tag.site.module).unwrap();
        let sym = symbolizer
            .symbolize(&module, a.tag.site.offset)
            .expect("site symbolized");
        assert_eq!(
            sym.function, "main",
            "{sym:?}: the caller of cudaMallocHost"
        );
        lines.push(sym.line);
        assert_eq!(a.tag.call_no, 1, "one allocation per site");
    }
    assert_ne!(lines[0], lines[1], "two call sites: {lines:?}");
}
