//! pinwise inside someone else's process: what must not change (dlsym answers, stdout,
//! exit status, programs without CUDA or without a libcuda), what must be a clear error
//! before anything runs (a corrupt profile, bad arguments), and the escape hatches (the
//! dump signal, the log file, a program with its own `free`). Stand-ins are TEST FIXTURES.

mod common;

use std::process::Command;

use common::*;
use pinwise_core::Direction;

#[test]
fn dlsym_answers_do_not_change_rtld_next_included() {
    let s = Setup::new();
    let exe = s.build_plain("rtld_next.c", &["-ldl"]);
    let plain = s.run_plain(&exe, &[]);
    assert_ok(&plain, "plain");
    let text = String::from_utf8_lossy(&plain.stdout);
    assert!(text.contains("[wrapped] through RTLD_NEXT"), "{text}");
    assert!(text.contains("cuMemcpyHtoD_v2 in libm: null"), "{text}");
    let out = s.run_pinwise(&[], &exe, &[]);
    assert_ok(&out, "under pinwise");
    assert_eq!(String::from_utf8_lossy(&out.stdout), text);
}

#[test]
fn a_program_without_cuda_is_untouched_and_its_status_passes_through() {
    let s = Setup::new();
    let exe = s.build_plain("exit_status.c", &[]);
    let out = s.run_pinwise(&[], &exe, &["7"]);
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "running\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("exited with status 7"), "{err}");
    assert!(err.contains("no CUDA host-memory call was seen"), "{err}");

    let out = s.run_pinwise(&[], &exe, &["term"]);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGTERM),
        "pinwise dies of the command's signal: {:?}",
        out.status
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("was killed by signal 15"), "{err}");
}

#[test]
fn a_corrupt_or_missing_profile_is_a_clear_error_and_nothing_runs() {
    let s = Setup::new();
    let exe = s.build_plain("exit_status.c", &[]);
    let bad = s.path("bad.profile.json");
    std::fs::write(
        &bad,
        br#"{"format": "pinwise-profile", "version": 1, "entries": 5}"#,
    )
    .unwrap();
    for (path, needle) in [
        (bad.clone(), "entries"),
        (s.path("absent.profile.json"), "absent.profile.json"),
    ] {
        let out = s.run_pinwise(
            &["--mode", "use", "--profile", path.to_str().unwrap()],
            &exe,
            &[],
        );
        assert!(!out.status.success());
        assert!(out.stdout.is_empty(), "the command did not run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("cannot be used"), "{err}");
        assert!(
            err.contains(path.to_str().unwrap()),
            "names the file: {err}"
        );
        assert!(err.contains(needle), "says what is wrong: {err}");
    }
    let history_dump = s.path("not-a-profile.json");
    std::fs::write(
        &history_dump,
        br#"{"format": "pinwise-history", "version": 1}"#,
    )
    .unwrap();
    let out = s.run_pinwise(
        &["--mode", "use", "--profile", history_dump.to_str().unwrap()],
        &exe,
        &[],
    );
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
}

#[test]
fn bad_arguments_are_clear_errors() {
    let s = Setup::new();
    let exe = s.build_plain("exit_status.c", &[]);
    let out = s.run_pinwise(&["--budget", "lots"], &exe, &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--budget"));
    let out = s.run_pinwise(
        &["--preload", "/nonexistent/libpinwise_preload.so"],
        &exe,
        &[],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/libpinwise_preload.so"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn without_a_libcuda_the_program_fails_exactly_as_it_would_alone() {
    // A library directory with cudart but no libcuda: the runtime reports an insufficient
    // driver. pinwise changes nothing about that.
    let s = Setup::new();
    let lonely = s.path("no-libcuda");
    std::fs::create_dir(&lonely).unwrap();
    for name in ["libcudart.so.13", "libcudart.so"] {
        std::os::unix::fs::symlink(s.libs.cudart_standin(), lonely.join(name)).unwrap();
    }
    let exe = s.path("cudart_workload");
    let dir = lonely.display().to_string();
    pinwise_testkit::compile_c(
        &program_source("cudart_workload.c"),
        &exe,
        &[
            format!("-L{dir}"),
            "-lcudart".into(),
            format!("-Wl,-rpath,{dir}"),
        ],
    );
    let run = |with_pinwise: bool| {
        let mut c = if with_pinwise {
            let mut c = Command::new(pinwise());
            c.arg("run").arg("--").arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        c.env("LD_LIBRARY_PATH", &dir)
            .env_remove("PINWISE_LIBCUDA")
            .env_remove("LD_PRELOAD")
            .current_dir(s.dir.path());
        c.output().unwrap()
    };
    let plain = run(false);
    let under = run(true);
    assert_eq!(plain.status.code(), Some(2), "the runtime finds no driver");
    assert_eq!(under.status.code(), plain.status.code());
    assert_eq!(under.stdout, plain.stdout);
    let first_line = |o: &std::process::Output| {
        String::from_utf8_lossy(&o.stderr)
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    };
    assert_eq!(first_line(&under), first_line(&plain));
    assert!(first_line(&plain).contains("cudaErrorInsufficientDriver"));
}

#[test]
fn the_dump_signal_writes_the_history_of_a_program_that_never_exits_normally() {
    let s = Setup::new();
    let exe = s.build_cudart("dump_workload.c", &[]);
    let hist = s.path("dump.json");
    let out = s.run_pinwise(
        &["--dump-signal", "USR2", "-o", hist.to_str().unwrap()],
        &exe,
        &[],
    );
    assert_ok(&out, "dump");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
    let h = history(&hist);
    assert_eq!(
        transfers(&h, Direction::HtoD),
        5,
        "written by the dump, not at exit"
    );
}

#[test]
fn the_log_goes_where_asked_and_stdout_stays_the_programs() {
    let s = Setup::new();
    let exe = s.build_cudart("cudart_workload.c", &[]);
    let plain = s.run_plain(&exe, &["3"]);
    assert_ok(&plain, "plain");
    let log = s.path("pinwise.log");
    let mut c = s.libs.command(pinwise());
    c.args(["run", "--log"])
        .arg(&log)
        .arg("--")
        .arg(&exe)
        .arg("3")
        .env("PINWISE_LOG_LEVEL", "debug")
        .env_remove("LD_PRELOAD")
        .current_dir(s.dir.path());
    let out = c.output().unwrap();
    assert_ok(&out, "with a log");
    assert_same_stdout(&out, &plain, "with a log");
    let text = std::fs::read_to_string(&log).expect("the log file was written");
    assert!(!text.is_empty());
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("DEBUG"),
        "nothing logged to stderr"
    );
}

#[test]
fn a_program_with_its_own_free_keeps_its_pageable_memory_unregistered() {
    let s = Setup::new();
    let exe = s.build_cudart(
        "cudart_workload.c",
        &[program_source("own_free.c").to_str().unwrap()],
    );
    let plain = s.run_plain(&exe, &[]);
    assert_ok(&plain, "plain");
    let sum = s.path("own-free.json");
    let out = s.run_pinwise(&["--stats-json", sum.to_str().unwrap()], &exe, &[]);
    assert_ok(&out, "own free");
    assert_same_stdout(&out, &plain, "own free");
    let p = &summary(&sum)["processes"][0];
    assert_eq!(p["promotions_on_transfers"], 0, "{p}");
    let problems = p["problems"].to_string();
    assert!(problems.contains("its own free"), "{problems}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("its own free"),
        "the summary says so"
    );
}

#[test]
fn async_copies_on_registered_program_memory_keep_pageable_semantics() {
    // CUDA promises that an asynchronous copy from (into) pageable memory has read (written)
    // the buffer when it returns; the program relies on it. Once pinwise registers the hot
    // buffers, the stand-in's copies on them really are late (the delay below): pinwise must
    // wait for them before returning.
    let s = Setup::new();
    let exe = s.build_cudart("async_pageable.c", &[]);
    let run = |with_pinwise: bool, sum: &std::path::Path| {
        let mut c = if with_pinwise {
            let mut c = s.libs.command(pinwise());
            c.args(["run", "--stats-json"]).arg(sum).arg("--").arg(&exe);
            c
        } else {
            s.libs.command(&exe)
        };
        c.env("PINWISE_STANDIN_ASYNC_DELAY_US", "20000")
            .env_remove("LD_PRELOAD")
            .current_dir(s.dir.path());
        c.output().unwrap()
    };
    let sum = s.path("async.json");
    let plain = run(false, &sum);
    assert_ok(&plain, "plain");
    let under = run(true, &sum);
    assert_ok(&under, "under pinwise");
    assert_same_stdout(&under, &plain, "under pinwise");
    let p = &summary(&sum)["processes"][0];
    assert!(
        p["promotions_on_transfers"].as_u64() >= Some(1),
        "the buffers were registered, so the copies ran pinned: {p}"
    );
    assert!(p["transfers_pinned"].as_u64() >= Some(8), "{p}");
}

#[test]
fn unregistering_a_buffer_pinwise_registered_gets_plain_cudas_answer() {
    let s = Setup::new();
    let exe = s.build_cudart("unregister_promoted.c", &[]);
    let plain = s.run_plain(&exe, &[]);
    assert_ok(&plain, "plain");
    let sum = s.path("unregister.json");
    let out = s.run_pinwise(&["--stats-json", sum.to_str().unwrap()], &exe, &[]);
    assert_ok(&out, "under pinwise");
    assert_same_stdout(&out, &plain, "under pinwise");
    let p = &summary(&sum)["processes"][0];
    assert!(
        p["promotions_on_transfers"].as_u64() >= Some(1),
        "the buffer was registered before the program unregistered it: {p}"
    );
}
