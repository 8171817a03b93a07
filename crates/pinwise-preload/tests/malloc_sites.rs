//! Allocation identity for pageable memory: a C program and a Rust program whose pageable
//! buffers come from several functions (malloc, calloc, posix_memalign, realloc; Rust's
//! system allocator), freed and allocated again at reused addresses, run under
//! `pinwise run` against the cudart stand-in (a TEST FIXTURE). Every allocation at or
//! above the threshold has its own record with its site, call number and exact counts (no
//! implicit record for it), its stack names the functions that made it, and the names
//! stay in the history after the program's binary is gone.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use common::*;
use pinwise_core::history::{AllocKind, AllocState, AllocationView};
use pinwise_core::{Direction, Frame, MemHistory};

/// The function that contains an allocation's call site, from the names the history
/// stored.
fn site_function(h: &MemHistory, a: &AllocationView<'_>) -> Option<String> {
    h.symbol(a.site()).map(|s| s.function.clone())
}

/// The names of the native functions on an allocation's stack, innermost first.
fn stack_functions(h: &MemHistory, a: &AllocationView<'_>) -> Vec<String> {
    a.stack()
        .map(|s| {
            s.iter()
                .filter_map(|f| match f {
                    Frame::Native(site) => h.symbol(*site).map(|x| x.function.clone()),
                    Frame::Python(_) => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Pageable records made by allocations (call number > 0), by the function of their call
/// site: (call number, size, state, HtoD, DtoH) in call order.
type BySite = BTreeMap<String, Vec<(u32, u64, AllocState, u64, u64)>>;

fn pageable_by_function(h: &MemHistory, keep: impl Fn(&str) -> bool) -> BySite {
    let mut m = BySite::new();
    for a in h.allocations() {
        if a.kind() != AllocKind::Pageable || a.tag().call_no == 0 {
            continue;
        }
        let Some(f) = site_function(h, &a) else {
            continue;
        };
        if !keep(&f) {
            continue;
        }
        let c = a.counters();
        m.entry(f).or_default().push((
            a.tag().call_no,
            a.size(),
            a.state(),
            c.direction(Direction::HtoD).transfers(),
            c.direction(Direction::DtoH).transfers(),
        ));
    }
    for v in m.values_mut() {
        v.sort_by_key(|e| e.0);
    }
    m
}

fn build_c(s: &Setup) -> std::path::PathBuf {
    // No tail calls: each allocating function must be the caller of malloc.
    s.build_cudart("malloc_sites.c", &["-fno-optimize-sibling-calls"])
}

#[test]
fn every_pageable_buffer_of_a_c_program_has_its_own_exact_record_site_and_stack() {
    let s = Setup::new();
    let exe = build_c(&s);
    let plain = s.run_plain(&exe, &[]);
    assert_ok(&plain, "plain");
    let expected = calls(&plain);
    let run = s.run_recorded(&exe, &["--min-tracked", "64K"], "sites.bin");
    assert_same_stdout(&run.out, &plain, "under pinwise");
    let got = calls(&run.out);
    assert!(got["reused"] >= 1, "addresses were reused: {got:?}");
    let h = &run.history;

    let freed = AllocState::Freed;
    let big = 4u64 << 20;
    let mut big_calls: Vec<_> = (1..=6).map(|n| (n, big, freed, 2, 0)).collect();
    big_calls.push((7, 100 << 10, freed, 1, 0));
    let want: BySite = [
        ("alloc_big".to_string(), big_calls),
        (
            "alloc_zeroed".to_string(),
            (1..=6).map(|n| (n, 64 << 10, freed, 0, 1)).collect(),
        ),
        (
            "alloc_aligned".to_string(),
            (1..=3).map(|n| (n, 1 << 20, freed, 1, 1)).collect(),
        ),
        ("grow".to_string(), vec![(1, 300 << 10, freed, 1, 1)]),
    ]
    .into_iter()
    .collect();
    let ours = |f: &str| f.starts_with("alloc_") || f == "grow";
    assert_eq!(pageable_by_function(h, ours), want);
    assert_eq!(expected["big"], 7);
    assert_eq!(expected["zeroed"], 6);
    assert_eq!(expected["aligned"], 3);

    // The one implicit record is the 4 KiB buffer under the threshold.
    assert_eq!(h.stats().implicit_records, 1, "{:?}", h.stats());
    let implicit: Vec<_> = h.allocations().filter(|a| a.tag().call_no == 0).collect();
    assert_eq!(implicit.len(), 1);
    assert_eq!(implicit[0].kind(), AllocKind::Untracked);
    assert_eq!(implicit[0].transfer_count(), 1);
    assert_eq!(
        h.stats().transfers[Direction::HtoD.index()].transfers,
        expected["htod"]
    );
    assert_eq!(
        h.stats().transfers[Direction::DtoH.index()].transfers,
        expected["dtoh"]
    );
    assert_eq!(h.stats().unmatched_frees, 0, "{:?}", h.stats());

    // Stacks: from the allocating function out to main; the user frame is the function.
    for a in h.allocations() {
        let Some(f) = site_function(h, &a).filter(|f| ours(f)) else {
            continue;
        };
        let functions = stack_functions(h, &a);
        assert_eq!(functions.first(), Some(&f), "{functions:?}");
        assert!(functions.iter().any(|x| x == "main"), "{functions:?}");
        let stack = a.stack().unwrap();
        let user = h.user_frame(&stack).expect("a user frame");
        assert!(
            h.frame_label(&stack[user])
                .starts_with(&format!("{f} (malloc_sites.c:")),
            "{}",
            h.frame_label(&stack[user])
        );
    }
    let src = run.process();
    assert_eq!(src["events_lost"], 0, "{src}");
    assert!(h.source_stats()["preload.malloc_tracked_allocs"] >= 17);
    assert!(h.source_stats()["preload.stack_captures"] >= 17);
}

#[test]
fn a_lower_threshold_tracks_the_small_buffer_too_and_none_turns_tracking_off() {
    let s = Setup::new();
    let exe = build_c(&s);
    let run = s.run_recorded(&exe, &["--min-tracked", "4K"], "small.json");
    let h = &run.history;
    assert_eq!(h.stats().implicit_records, 0, "{:?}", h.stats());
    let small = pageable_by_function(h, |f| f == "alloc_small");
    assert_eq!(
        small["alloc_small"],
        vec![(1, 4096, AllocState::Freed, 1, 0)]
    );
    // Without the hooks, copies into the program's buffers make implicit records again.
    let off = s.run_recorded(&exe, &["--no-malloc-hooks"], "off.json");
    assert!(pageable_by_function(&off.history, |_| true).is_empty());
    assert!(off.history.stats().implicit_records >= 2);
    assert!(off.history.stacks().is_empty());
}

#[test]
fn a_history_names_its_functions_after_the_program_is_deleted() {
    let s = Setup::new();
    let exe = build_c(&s);
    let hist = s.path("gone.bin");
    let out = s.run_pinwise(
        &["--min-tracked", "64K", "-o", hist.to_str().unwrap()],
        &exe,
        &[],
    );
    assert_ok(&out, "recorded run");
    std::fs::remove_file(&exe).unwrap();
    let report = |extra: &[&str]| {
        let out = Command::new(pinwise())
            .arg("report")
            .arg(&hist)
            .args(extra)
            .output()
            .unwrap();
        assert_ok(&out, "report");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = report(&[]);
    assert!(text.contains("alloc_big (malloc_sites.c:"), "{text}");
    let stacks = report(&["--stacks"]);
    assert!(stacks.contains("main (malloc_sites.c:"), "{stacks}");
    assert!(stacks.contains(">#0 alloc_big"), "{stacks}");
    // The HTML page has the stacks in its tooltips, the Perfetto export in its args.
    let page = s.path("gone.html");
    report(&["--html", page.to_str().unwrap()]);
    let page = std::fs::read_to_string(&page).unwrap();
    assert!(
        page.contains("#1 main (malloc_sites.c:"),
        "no stack in the HTML page"
    );
    let trace = s.path("gone.trace.json");
    let out = Command::new(pinwise())
        .arg("export")
        .arg(&hist)
        .arg("--perfetto")
        .arg(&trace)
        .output()
        .unwrap();
    assert_ok(&out, "export");
    let trace: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().expect("trace events");
    let big = events
        .iter()
        .find(|e| {
            e["args"]["user_frame"]
                .as_str()
                .is_some_and(|f| f.starts_with("alloc_big (malloc_sites.c:"))
        })
        .expect("an allocation slice with its user frame");
    let stack: Vec<&str> = big["args"]["stack"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f.as_str())
        .collect();
    assert!(stack[0].starts_with("alloc_big"), "{stack:?}");
    assert!(stack.iter().any(|f| f.starts_with("main (")), "{stack:?}");
    // The names came from the history: the binary is gone.
    assert!(!exe.exists());
}

#[test]
fn a_threshold_pinwise_run_cannot_read_is_refused_with_its_name() {
    let s = Setup::new();
    let exe = build_c(&s);
    for bad in ["lots", "0"] {
        let out = s.run_pinwise(&["--min-tracked", bad], &exe, &[]);
        assert!(!out.status.success(), "--min-tracked {bad} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--min-tracked"), "{err}");
        assert!(out.stdout.is_empty(), "the program ran");
    }
}

fn rustc() -> std::path::PathBuf {
    if let Some(r) = std::env::var_os("RUSTC") {
        return r.into();
    }
    if let Some(cargo) = std::env::var_os("CARGO") {
        let sibling = std::path::Path::new(&cargo).with_file_name("rustc");
        if sibling.is_file() {
            return sibling;
        }
    }
    "rustc".into()
}

#[test]
fn every_pageable_buffer_of_a_rust_program_has_its_own_record_and_stack() {
    let s = Setup::new();
    let exe = s.path("rust_sites");
    let dir = s.libs.dir().display().to_string();
    let out = Command::new(rustc())
        .args(["-O", "-g", "--edition", "2021", "-L", &dir, "-C"])
        .arg(format!("link-arg=-Wl,-rpath,{dir}"))
        .arg(program_source("rust_sites.rs"))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run rustc");
    assert_ok(&out, "rustc");
    let plain = s.run_plain(&exe, &[]);
    assert_ok(&plain, "plain");
    let expected = calls(&plain);
    let run = s.run_recorded(&exe, &["--min-tracked", "64K"], "rust-sites.bin");
    assert_same_stdout(&run.out, &plain, "under pinwise");
    let h = &run.history;
    // By the program function on each stack (the call site itself is in Rust's allocator
    // code): (size, HtoD, DtoH) of each record, all freed.
    let mut by_function: BTreeMap<&str, Vec<(u64, u64, u64)>> = BTreeMap::new();
    for a in h.allocations() {
        if a.kind() != AllocKind::Pageable || a.tag().call_no == 0 {
            continue;
        }
        let functions = stack_functions(h, &a);
        let Some(f) = ["make_input", "make_output", "make_aligned"]
            .into_iter()
            .find(|f| functions.iter().any(|x| x.ends_with(&format!("::{f}"))))
        else {
            continue;
        };
        assert_eq!(a.state(), AllocState::Freed);
        let stack = a.stack().unwrap();
        let user = h.frame_label(&stack[h.user_frame(&stack).unwrap()]);
        assert!(user.contains(f), "user frame {user} for {functions:?}");
        let c = a.counters();
        by_function.entry(f).or_default().push((
            a.size(),
            c.direction(Direction::HtoD).transfers(),
            c.direction(Direction::DtoH).transfers(),
        ));
    }
    let want: BTreeMap<&str, Vec<(u64, u64, u64)>> = [
        ("make_input", vec![(2 << 20, 2, 0); 4]),
        ("make_output", vec![(256 << 10, 0, 1); 4]),
        ("make_aligned", vec![(1 << 20, 1, 1); 2]),
    ]
    .into_iter()
    .collect();
    assert_eq!(by_function, want);
    assert_eq!(expected["inputs"], 4);
    assert_eq!(h.stats().implicit_records, 0, "{:?}", h.stats());
    assert_eq!(
        h.stats().transfers[Direction::HtoD.index()].transfers,
        expected["htod"]
    );
    assert_eq!(
        h.stats().transfers[Direction::DtoH.index()].transfers,
        expected["dtoh"]
    );
}

#[test]
fn the_other_workloads_run_unchanged_with_tracking_on() {
    let s = Setup::new();
    for source in ["cudart_workload.c", "fork_workload.c"] {
        let exe = s.build_cudart(source, &[]);
        let plain = s.run_plain(&exe, &[]);
        assert_ok(&plain, source);
        let name = format!("{}.json", source.trim_end_matches(".c"));
        let run = s.run_recorded(&exe, &["--min-tracked", "64K"], &name);
        assert_same_stdout(&run.out, &plain, source);
        let expected = calls(&plain);
        let h = &run.history;
        assert_eq!(
            h.stats().transfers[Direction::HtoD.index()].transfers,
            expected["htod"],
            "{source}"
        );
        assert_eq!(
            h.stats().transfers[Direction::DtoH.index()].transfers,
            expected["dtoh"],
            "{source}"
        );
    }
}

#[test]
fn a_python_programs_buffers_are_named_by_their_python_lines() {
    let Some(python) = python3() else {
        return;
    };
    let s = Setup::new();
    let script = program_source("py_sites.py");
    let cudart = s.libs.dir().join("libcudart.so.13");
    let cudart = cudart.to_str().unwrap();
    let exe = std::path::Path::new(python);
    let plain = s.run_plain(exe, &[script.to_str().unwrap(), cudart]);
    assert_ok(&plain, "plain");
    let hist = s.path("py.json");
    let out = s.run_pinwise(
        &["--min-tracked", "64K", "-o", hist.to_str().unwrap()],
        exe,
        &[script.to_str().unwrap(), cudart],
    );
    assert_ok(&out, "under pinwise");
    assert_same_stdout(&out, &plain, "python");
    let h = history(&hist);
    let mut made = Vec::new();
    for a in h.allocations() {
        let Some(stack) = a.stack() else { continue };
        let python: Vec<_> = stack
            .iter()
            .filter_map(|f| match f {
                Frame::Python(p) => Some(p.clone()),
                Frame::Native(_) => None,
            })
            .collect();
        if python
            .first()
            .is_some_and(|p| &*p.function == "make_buffer")
        {
            assert!(python[0].file.ends_with("py_sites.py"), "{python:?}");
            assert!(
                python.iter().any(|p| &*p.function == "main")
                    && python.iter().any(|p| &*p.function == "<module>"),
                "{python:?}"
            );
            let user = h.frame_label(&stack[h.user_frame(&stack).unwrap()]);
            assert!(user.starts_with("py_sites.py:"), "{user}");
            assert!(user.ends_with(" in make_buffer"), "{user}");
            made.push((a.size(), a.transfer_count(), a.state()));
        }
    }
    // A bytearray holds one byte more than its length (a terminating NUL).
    assert_eq!(made, vec![((256 << 10) + 1, 1, AllocState::Freed); 3]);
}

/// A Python loop allocating on one line: its stack is walked once and then found in the
/// recorder's memo (same call site, same Python stack), so the walks stay few however
/// often the line allocates; another line gets its own stack, and a remembered stack names
/// the right line. (Memo lookups are charged to the thread's capture budget, so under a
/// loaded machine some allocations may still go without a stack: counted as skipped.)
#[test]
fn a_python_line_that_allocates_in_a_loop_has_its_stack_remembered() {
    let Some(python) = python3() else {
        return;
    };
    let s = Setup::new();
    let script = program_source("py_loop_alloc.py");
    let exe = std::path::Path::new(python);
    let plain = s.run_plain(exe, &[script.to_str().unwrap()]);
    assert_ok(&plain, "plain");
    let hist = s.path("loop.json");
    let out = s.run_pinwise(
        &["--min-tracked", "64K", "-o", hist.to_str().unwrap()],
        exe,
        &[script.to_str().unwrap()],
    );
    assert_ok(&out, "under pinwise");
    assert_same_stdout(&out, &plain, "python");
    let h = history(&hist);
    // Per function: records, records with a stack, the lines their stacks name, and the
    // lines of `main` they were called from.
    let mut by_function: BTreeMap<&str, (usize, usize, BTreeSet<u32>)> = BTreeMap::new();
    let mut callers: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
    for a in h.allocations() {
        let function = match a.size() {
            100_001 => "loop_line",
            104_097 => "other_line",
            _ => continue,
        };
        let e = by_function.entry(function).or_default();
        e.0 += 1;
        let Some(stack) = a.stack() else { continue };
        let first = stack
            .iter()
            .find_map(|f| match f {
                Frame::Python(p) => Some(p.clone()),
                Frame::Native(_) => None,
            })
            .expect("a Python frame");
        assert_eq!(&*first.function, function, "{stack:?}");
        e.1 += 1;
        e.2.insert(first.line);
        let caller = stack
            .iter()
            .find_map(|f| match f {
                Frame::Python(p) if &*p.function == "main" => Some(p.line),
                _ => None,
            })
            .expect("called from main");
        callers.entry(function).or_default().insert(caller);
    }
    let stats = h.source_stats();
    assert_eq!(by_function["loop_line"].0, 101, "{by_function:?}");
    assert_eq!(by_function["other_line"].0, 100, "{by_function:?}");
    assert_eq!(by_function["loop_line"].2, BTreeSet::from([9]));
    assert_eq!(by_function["other_line"].2, BTreeSet::from([13]));
    // Two lines under three Python stacks (`loop_line` is called from two lines of
    // `main`): three walks for the loops' 201 allocations at most; without the memo the
    // thread's free captures and burst would walk dozens of them. The interpreter's own
    // large allocations at start-up are walked too.
    let others = stats["preload.malloc_tracked_allocs"] - 201;
    assert!(stats["preload.stack_captures"] <= others + 3, "{stats:?}");
    let with_stack = by_function["loop_line"].1 + by_function["other_line"].1;
    assert!(with_stack >= 3, "{by_function:?}");
    // The outer frames are remembered too: `loop_line` from the loop's line and from the
    // last call's (two memo keys), `other_line` from its loop's.
    assert_eq!(
        callers["loop_line"],
        BTreeSet::from([19, 28]),
        "{callers:?}"
    );
    assert_eq!(callers["other_line"], BTreeSet::from([24]), "{callers:?}");
    assert!(stats["preload.stack_memo_hits"] > 0, "{stats:?}");
    // Every loop allocation with a stack beyond the (at most three) walked ones had it from
    // the memo (start-up allocations may have memo hits too).
    assert!(
        stats["preload.stack_memo_hits"] as usize >= with_stack - 3,
        "{stats:?} {by_function:?}"
    );
}

/// Frames already named are remembered by (code object address, instruction offset), checked
/// against the code object's header at each use: a function defined where a deleted one
/// was (the same address, another name and line) is named as what it is.
#[test]
fn a_code_object_at_a_reused_address_is_named_afresh() {
    let Some(python) = python3() else {
        return;
    };
    let s = Setup::new();
    let script = program_source("py_reused_code.py");
    let exe = std::path::Path::new(python);
    let hist = s.path("reused_code.json");
    let out = s.run_pinwise(
        &["--min-tracked", "64K", "-o", hist.to_str().unwrap()],
        exe,
        &[script.to_str().unwrap()],
    );
    assert_ok(&out, "under pinwise");
    let ids: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert_eq!(ids.len(), 20, "{ids:?}");
    let distinct: std::collections::BTreeSet<_> = ids.iter().collect();
    assert!(
        distinct.len() < ids.len(),
        "no code object took a deleted one's address: the test would not test reuse ({ids:?})"
    );
    let h = history(&hist);
    let mut named = Vec::new();
    for a in h.allocations() {
        let Some(i) = a.size().checked_sub(100_001) else {
            continue;
        };
        if i % 4096 != 0 || i / 4096 >= 20 {
            continue;
        }
        let i = i / 4096;
        let stack = a.stack().expect("every f_<i> allocation has a stack");
        let first = stack
            .iter()
            .find_map(|f| match f {
                Frame::Python(p) => Some(p.clone()),
                Frame::Native(_) => None,
            })
            .expect("a Python frame");
        assert_eq!(
            (&*first.file, &*first.function, first.line),
            ("reused_code.py", &*format!("f_{i}"), i as u32 + 2),
            "allocation {i}"
        );
        named.push(i);
    }
    named.sort_unstable();
    assert_eq!(named, (0..20).collect::<Vec<u64>>());
}

#[test]
fn tracked_blocks_freed_while_threads_are_torn_down_and_in_a_fork_child_are_safe() {
    let s = Setup::new();
    // -O0: at -O1 the compiler may drop a malloc/free pair whose memory is not used.
    let exe = s.build_plain("thread_teardown.c", &["-pthread", "-O0"]);
    let plain = s.run_plain(&exe, &[]);
    assert_ok(&plain, "plain");
    let run = s.run_recorded(&exe, &["--min-tracked", "64K"], "teardown.bin");
    assert_same_stdout(&run.out, &plain, "under pinwise");
    let h = &run.history;
    // Each of the 8 threads: 20 blocks while running, one kept until its destructor, one
    // made and freed in the destructor; every one recorded with its free (the parent's
    // history: the fork child used no CUDA, so it writes nothing).
    let blocks: Vec<_> = h
        .allocations()
        .filter(|a| a.kind() == AllocKind::Pageable && a.size() == 1 << 20)
        .collect();
    assert_eq!(blocks.len(), 8 * 22, "{:?}", h.stats());
    assert!(blocks.iter().all(|a| a.state() == AllocState::Freed));
    assert_eq!(h.stats().unmatched_frees, 0, "{:?}", h.stats());
    assert_eq!(run.process()["events_lost"], 0);
}

/// A fixture program of `fixtures/rust-allocators` (built by `cargo build --workspace`
/// next to `pinwise`).
fn allocator_fixture(name: &str) -> std::path::PathBuf {
    let exe = build_dir().join(name);
    assert!(
        exe.is_file(),
        "{} is missing: run `cargo build --workspace` (it builds fixtures/rust-allocators)",
        exe.display()
    );
    exe
}

/// The records of an allocator fixture's run, by the workload function on each stack:
/// (size, HtoD, DtoH) in call order, and the call numbers of each function's site.
type ByWorkload = BTreeMap<&'static str, Vec<(u64, u64, u64)>>;

fn by_workload_function(h: &MemHistory) -> (ByWorkload, BTreeMap<&'static str, Vec<u32>>) {
    let mut records = ByWorkload::new();
    let mut calls: BTreeMap<&'static str, Vec<u32>> = BTreeMap::new();
    let mut all: Vec<_> = h
        .allocations()
        .filter(|a| a.kind() == AllocKind::Pageable && a.tag().call_no > 0)
        .collect();
    all.sort_by_key(|a| a.alloc_ts_ns());
    for a in all {
        let functions = stack_functions(h, &a);
        let Some(f) = ["make_input", "make_output", "make_aligned", "grow"]
            .into_iter()
            .find(|f| {
                functions
                    .iter()
                    .any(|x| x == &format!("pinwise_fixture_allocators::{f}"))
            })
        else {
            continue;
        };
        assert_eq!(a.state(), AllocState::Freed, "{f}");
        // The user frame is the workload function, past the allocator and Rust's std.
        let stack = a.stack().unwrap();
        let user = h.frame_label(&stack[h.user_frame(&stack).unwrap()]);
        assert!(user.contains(f), "user frame {user} for {functions:?}");
        let c = a.counters();
        records.entry(f).or_default().push((
            a.size(),
            c.direction(Direction::HtoD).transfers(),
            c.direction(Direction::DtoH).transfers(),
        ));
        calls.entry(f).or_default().push(a.tag().call_no);
    }
    (records, calls)
}

/// The records every run of the allocator fixtures must have: 4 zeroed 2 MiB inputs
/// copied twice each, 4 256 KiB outputs copied back once, 2 page-aligned 1 MiB blocks and
/// one block grown by realloc to 300 KiB, each copied both ways.
pub fn allocator_fixture_records() -> ByWorkload {
    [
        ("make_input", vec![(2 << 20, 2, 0); 4]),
        ("make_output", vec![(256 << 10, 0, 1); 4]),
        ("make_aligned", vec![(1 << 20, 1, 1); 2]),
        ("grow", vec![(300 << 10, 1, 1)]),
    ]
    .into_iter()
    .collect()
}

#[test]
fn rust_programs_on_jemalloc_and_mimalloc_have_exact_records_sites_and_stacks() {
    let s = Setup::new();
    for (name, allocator) in [
        ("pw-sites-jemalloc", "jemalloc"),
        ("pw-sites-mimalloc", "mimalloc"),
    ] {
        let exe = allocator_fixture(name);
        let plain = s.run_plain(&exe, &[]);
        assert_ok(&plain, name);
        let expected = calls(&plain);
        let run = s.run_recorded(&exe, &["--min-tracked", "64K"], &format!("{name}.bin"));
        assert_same_stdout(&run.out, &plain, name);
        assert!(String::from_utf8_lossy(&run.out.stdout).starts_with(allocator));
        let h = &run.history;
        let (records, call_numbers) = by_workload_function(h);
        assert_eq!(records, allocator_fixture_records(), "{name}");
        // Each function's blocks come from one call site, numbered in order there.
        assert_eq!(call_numbers["make_input"], [1, 2, 3, 4], "{name}");
        assert_eq!(call_numbers["make_output"], [1, 2, 3, 4], "{name}");
        // Blocks freed and made again reuse addresses: records that share a start.
        let mut starts: Vec<u64> = h
            .allocations()
            .filter(|a| a.kind() == AllocKind::Pageable)
            .map(|a| a.start())
            .collect();
        let n = starts.len();
        starts.sort_unstable();
        starts.dedup();
        assert!(starts.len() < n, "{name}: no address was reused");
        // Nothing implicit, nothing unmatched, every copy counted.
        assert_eq!(h.stats().implicit_records, 0, "{name}: {:?}", h.stats());
        assert_eq!(h.stats().unmatched_frees, 0, "{name}: {:?}", h.stats());
        assert_eq!(
            h.allocations()
                .filter(|a| a.kind() == AllocKind::Pageable)
                .count(),
            11,
            "{name}: the small blocks are not recorded"
        );
        assert_eq!(
            h.stats().transfers[Direction::HtoD.index()].transfers,
            expected["htod"]
        );
        assert_eq!(
            h.stats().transfers[Direction::DtoH.index()].transfers,
            expected["dtoh"]
        );
        let stats = h.source_stats();
        assert!(stats["preload.linked_allocator_hooks"] >= 4, "{stats:?}");
        assert_eq!(
            stats["preload.linked_allocator_hook_failures"], 0,
            "{stats:?}"
        );
        assert_eq!(stats["preload.linked_allocator_set_full"], 0, "{stats:?}");
        // With the hooks off nothing is patched or recorded, and the program is unchanged.
        let off = s.run_recorded(&exe, &["--no-malloc-hooks"], &format!("{name}-off.json"));
        assert_same_stdout(&off.out, &plain, name);
        assert_eq!(
            off.history
                .allocations()
                .filter(|a| a.kind() == AllocKind::Pageable)
                .count(),
            0
        );
        assert_eq!(
            off.history
                .source_stats()
                .get("preload.linked_allocator_hooks"),
            Some(&0)
        );
    }
}

/// Every function of the malloc family and its edge cases (`free(NULL)`, `realloc(NULL,
/// n)`, `realloc(p, 0)`, a tracked block shrunk below the threshold, a small one grown above
/// it, a tracked block freed by another thread, small blocks coming and going while tracked
/// ones are live, failed calls): the program's output is unchanged, every block of at
/// least the threshold has exactly one record, freed, and every free matched one (the
/// hooks' cheap "not tracked" test on `free` and `realloc` never misses a tracked block,
/// and records no free of an untracked one).
#[test]
fn every_function_of_the_malloc_family_and_its_edge_cases_are_recorded_exactly() {
    let s = Setup::new();
    let exe = s.build_cudart(
        "malloc_edges.c",
        &["-fno-optimize-sibling-calls", "-pthread"],
    );
    check_malloc_edges(&s, &exe);
}

/// The same when the next `free` after pinwise's is not glibc's (a library the program
/// links defines `free`, as tcmalloc or a preloaded jemalloc would): pinwise cannot read
/// glibc's chunk header then, and asks the allocator's `malloc_usable_size` instead.
#[test]
fn the_edge_cases_are_recorded_exactly_over_another_libraries_free() {
    let s = Setup::new();
    let shim = s.path("libfree_shim.so");
    pinwise_testkit::compile_c_source(
        "/* A library defining free (over glibc's own), loaded after the preload. */\n\
         #include <stddef.h>\n\
         extern void __libc_free(void *);\n\
         static volatile size_t frees;\n\
         void free(void *p) { frees++; __libc_free(p); }\n",
        &shim,
        &["-shared", "-fPIC"],
    );
    let dir = shim.parent().unwrap().display().to_string();
    let exe = s.build_cudart(
        "malloc_edges.c",
        &[
            "-fno-optimize-sibling-calls",
            "-pthread",
            &format!("-L{dir}"),
            "-lfree_shim",
            &format!("-Wl,-rpath,{dir}"),
        ],
    );
    check_malloc_edges(&s, &exe);
}

fn check_malloc_edges(s: &Setup, exe: &std::path::Path) {
    let plain = s.run_plain(exe, &[]);
    assert_ok(&plain, "plain");
    assert!(
        String::from_utf8_lossy(&plain.stdout).contains("overflow 1 einval 1"),
        "{plain:?}"
    );
    let run = s.run_recorded(exe, &["--min-tracked", "64K"], "edges.bin");
    assert_same_stdout(&run.out, &plain, "under pinwise");
    let h = &run.history;
    let freed = AllocState::Freed;
    let one = |size: u64, htod: u64| vec![(1, size, freed, htod, 0)];
    let want: BySite = [
        ("f_malloc", one(100 << 10, 1)),
        ("f_calloc", one(100 << 10, 0)),
        ("f_realloc_null", one(100 << 10, 0)),
        ("f_posix_memalign", one(100 << 10, 0)),
        ("f_aligned_alloc", one(128 << 10, 0)),
        ("f_memalign", one(100 << 10, 0)),
        ("f_valloc", one(100 << 10, 0)),
        ("f_reallocarray", one(100 << 10, 0)),
        ("f_grow", one(200 << 10, 0)),
        ("f_zeroed_away", one(100 << 10, 0)),
        ("f_thread_block", one(100 << 10, 0)),
    ]
    .into_iter()
    .map(|(f, v)| (f.to_string(), v))
    .collect();
    let got = pageable_by_function(h, |f| f.starts_with("f_"));
    assert_eq!(got, want);
    assert_eq!(calls(&plain)["tracked"], want.len() as u64);
    // No block of the program's was recorded from another site (the small ones, the
    // failed calls), and every recorded free matched a recorded allocation.
    let from_main: Vec<_> = h
        .allocations()
        .filter(|a| {
            a.kind() == AllocKind::Pageable
                && a.tag().call_no > 0
                && site_function(h, a).is_some_and(|f| f == "main")
        })
        .map(|a| a.size())
        .collect();
    assert!(from_main.is_empty(), "{from_main:?}");
    assert_eq!(h.stats().unmatched_frees, 0, "{:?}", h.stats());
    let src = run.process();
    assert_eq!(src["events_lost"], 0, "{src}");
}
