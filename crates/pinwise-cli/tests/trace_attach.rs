//! `pinwise trace --pid`, the real binary, attached to a program that pinned memory with
//! `cuMemAllocHost` and mapped pageable memory *before* the attach, on the CPU stand-in
//! for libcuda (a TEST FIXTURE, not a GPU; its pinned memory is a shared memfd named like
//! the driver's `/dev/nvidiactl` mappings). Needs root for BPF: skipped with a visible
//! message elsewhere, failing under `CI=true` when BPF is unavailable.
//!
//! What must hold: the pre-attach pinned buffer is known as pinned (no advice to pin it),
//! the pre-attach pageable buffer has an unknown state (no record, kept out of the saving
//! and the plan, and the report says so), memory mapped after the attach is known pageable,
//! and the report's sentences agree with each other.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use pinwise_core::history::AllocKind;
use pinwise_core::{load_history, CostModel, Direction, MemHistory};
use pinwise_testkit::{compile_c_source, require_bpf, StandinLibs};

const MIB: u64 = 1 << 20;

/// bench/gpu/trace/pin_then_copy.c: pins 4 MiB (cuMemAllocHost), maps 2 MiB of pageable
/// memory and 1 MiB of shared anonymous memory, says `ready PINNED EARLY`, waits for a line
/// on stdin (the tracer is attached by then), then copies: 20 HtoD and 5 DtoH of the pinned
/// buffer, 10 HtoD of the early pageable one, 5 HtoD of the shared one and, unless its
/// argument is `early-only`, 30 HtoD of 8 MiB mapped after.
const PROGRAM: &str = include_str!("../../../bench/gpu/trace/pin_then_copy.c");

fn pinwise() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pinwise"))
}

struct Attached {
    history: MemHistory,
    trace_stderr: String,
    pinned: u64,
    early: u64,
    out: PathBuf,
}

/// Starts the program, attaches `pinwise trace --pid` to it once it pinned, lets it copy,
/// and returns the history.
fn attach_and_trace(libs: &StandinLibs, dir: &Path, arg: &str) -> Attached {
    let exe = dir.join("pin_then_copy");
    let mut args: Vec<String> = libs.cuda_link_args();
    args.push("-O1".into());
    compile_c_source(PROGRAM, &exe, &args);
    let mut program: Child = libs
        .command(&exe)
        .arg(arg)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting the program");
    let mut lines = BufReader::new(program.stdout.take().unwrap()).lines();
    let ready = lines.next().expect("the program's ready line").unwrap();
    let words: Vec<&str> = ready.split_whitespace().collect();
    assert_eq!(words.first(), Some(&"ready"), "{ready}");
    let pinned: u64 = words[1].parse().unwrap();
    let early: u64 = words[2].parse().unwrap();

    let out = dir.join(format!("attach-{arg}.json"));
    let mut trace = pinwise()
        .arg("trace")
        .arg("--pid")
        .arg(program.id().to_string())
        // The program maps the stand-in under its own file name, not libcuda.so*.
        .arg("--libcuda")
        .arg(libs.libcuda())
        .arg("-o")
        .arg(&out)
        .stderr(Stdio::piped())
        .spawn()
        .expect("running pinwise trace");
    let mut trace_err = BufReader::new(trace.stderr.take().unwrap());
    let mut stderr = String::new();
    // Attached once it says it is tracing.
    loop {
        let mut line = String::new();
        let n = trace_err.read_line(&mut line).unwrap();
        stderr.push_str(&line);
        assert!(n > 0, "pinwise trace ended before tracing:\n{stderr}");
        if line.contains("tracing PID") {
            break;
        }
    }
    let mut stdin = program.stdin.take().unwrap();
    stdin.write_all(b"go\n").unwrap();
    drop(stdin);
    let status = program.wait().unwrap();
    assert!(status.success(), "the program failed: {status}");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut trace_err, &mut rest).unwrap();
    stderr.push_str(&rest);
    let st = trace.wait().unwrap();
    assert!(st.success(), "pinwise trace failed ({st}):\n{stderr}");
    Attached {
        history: load_history(&out).unwrap_or_else(|e| panic!("{e}\n{stderr}")),
        trace_stderr: stderr,
        pinned,
        early,
        out,
    }
}

fn report(path: &Path, json: bool) -> String {
    let mut c = pinwise();
    c.arg("report").arg(path);
    if json {
        c.arg("--json");
    }
    let output = c.output().unwrap();
    assert!(
        output.status.success(),
        "pinwise report failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    if json {
        text
    } else {
        // Sentences are wrapped: one space between words.
        text.split_whitespace().collect::<Vec<_>>().join(" ")
    }
}

/// Checks what both runs share: the pre-attach pinned buffer is a pinned allocation with
/// its copies, the pre-attach pageable buffer has no record and its copies are counted as
/// unattributed, and the history says it was attached.
fn check_common(a: &Attached) {
    let h = &a.history;
    assert!(!h.config().track_untracked, "attached: no implicit records");
    let stats = h.source_stats();
    assert_eq!(
        stats.get(pinwise_core::history::ATTACHED_SOURCE_STAT),
        Some(&1)
    );
    assert!(
        stats
            .get(pinwise_core::history::ATTACH_PINNED_BYTES_STAT)
            .is_some_and(|&b| b >= 4 * MIB),
        "the pre-attach pinned buffer was found in the maps: {stats:?}"
    );
    assert!(
        stats
            .get(pinwise_core::history::ATTACH_POSSIBLY_PINNED_BYTES_STAT)
            .is_some_and(|&b| b >= MIB),
        "the pre-attach shared anonymous buffer is counted as possibly pinned: {stats:?}"
    );
    let pinned: Vec<_> = h
        .allocations()
        .map(|v| v.info())
        .filter(|i| i.kind == AllocKind::PinnedAlloc)
        .collect();
    assert_eq!(pinned.len(), 1, "one pinned allocation: {pinned:?}");
    let p = &pinned[0];
    assert_eq!((p.start, p.size), (a.pinned, 4 * MIB));
    assert_eq!(p.counters.direction(Direction::HtoD).transfers(), 20);
    assert_eq!(p.counters.direction(Direction::DtoH).transfers(), 5);
    assert_eq!(p.counters.pageable_bytes(), 0, "copies of it were pinned");
    assert!(
        h.allocations()
            .map(|v| v.info())
            .all(|i| !(i.start <= a.early && a.early < i.start + i.size)),
        "no record for memory mapped before the attach"
    );
    let summary = h.summary(&CostModel::builtin());
    let htod = summary.by_direction[Direction::HtoD.index()];
    let all_htod = h.stats().transfers[Direction::HtoD.index()];
    assert_eq!(
        all_htod.transfers - htod.attributed.transfers(),
        15,
        "the early and shared buffers' copies are counted, not attributed"
    );
    assert!(
        a.trace_stderr
            .contains("15 host<->device transfers touched memory whose allocation"),
        "{}",
        a.trace_stderr
    );
}

#[test]
fn attach_knows_memory_pinned_before_it_and_gives_no_advice_on_unknown_memory() {
    let name = "attach_knows_memory_pinned_before_it_and_gives_no_advice_on_unknown_memory";
    if !require_bpf(name) {
        return;
    }
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let a = attach_and_trace(&libs, dir.path(), "with-late");
    check_common(&a);
    // The buffer mapped after the attach is known pageable: it alone makes the saving.
    let summary = a.history.summary(&CostModel::builtin());
    let htod = summary.by_direction[Direction::HtoD.index()].attributed;
    assert_eq!(htod.pageable_bytes, 30 * 8 * MIB);
    let late: Vec<_> = a
        .history
        .allocations()
        .map(|v| v.info())
        .filter(|i| i.kind == AllocKind::Pageable)
        .collect();
    assert_eq!(late.len(), 1, "{late:?}");
    assert_eq!(late[0].transfer_count, 30);

    let json: serde_json::Value = serde_json::from_str(&report(&a.out, true)).unwrap();
    assert!(json["saving"]["transfer_saving_ns"].as_f64().unwrap() > 0.0);
    assert_eq!(json["saving"]["allocations_worth_pinning"], 1, "{json:#}");
    assert!(json["budget"]["tags_worth_pinning"].as_u64().unwrap() >= 1);
    let text = report(&a.out, false);
    assert!(!text.contains("would pin nothing"), "{text}");
    assert!(
        text.contains("attached to a running process"),
        "the report says what it could not know:\n{text}"
    );
    assert!(
        text.contains("15 host<->device transfers (25.0 MiB)"),
        "{text}"
    );
    // The shared anonymous buffer (how driver 580 maps pinned memory) is named as possibly
    // pinned, of unknown state.
    assert!(
        text.contains("of shared anonymous memory") && text.contains("counts as of unknown state"),
        "{text}"
    );
}

#[test]
fn attach_with_only_pre_attach_memory_has_nothing_to_save_and_says_so_consistently() {
    let name = "attach_with_only_pre_attach_memory_has_nothing_to_save_and_says_so_consistently";
    if !require_bpf(name) {
        return;
    }
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let a = attach_and_trace(&libs, dir.path(), "early-only");
    check_common(&a);
    let json: serde_json::Value = serde_json::from_str(&report(&a.out, true)).unwrap();
    // Nothing known pageable: no saving, no allocation worth pinning, no pinning plan.
    assert_eq!(json["saving"]["transfer_saving_ns"].as_f64(), Some(0.0));
    assert_eq!(json["saving"]["allocations_worth_pinning"], 0);
    // The one tag worth pinning is the buffer pinned before the attach, which the run had
    // pinned already; the report says so, and that the saving leaves it out.
    assert_eq!(json["budget"]["tags_worth_pinning"], 1, "{json:#}");
    assert_eq!(json["budget"]["tags_pinned_in_run"], 1, "{json:#}");
    let text = report(&a.out, false);
    assert!(
        text.contains("Pinning that memory would save 0 ns"),
        "{text}"
    );
    assert!(
        text.contains("This run had pinned 1 of these allocations already"),
        "{text}"
    );
    assert!(text.contains("[pinned before the attach]+0x0"), "{text}");
    assert!(text.contains("attached to a running process"), "{text}");
}
