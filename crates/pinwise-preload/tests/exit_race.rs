//! Process exit with CUDA work under way (issue 10: a JAX program killed by SIGSEGV at exit
//! under `pinwise run`). `exit_race.c` has 16 threads copying, allocating and freeing through
//! `cuGetProcAddress` entry points while the main thread exits; in its variants a client is
//! torn down at exit as PJRT's destructor does it (streams destroyed before the pinned
//! buffers copied on them are freed, then the primary context released), or the threads tear
//! themselves down as they exit. Run many times in every mode, each run must exit 0 as it
//! does without pinwise, print the same, and leave pinwise's statistics.
//!
//! The libcuda stand-in (a TEST FIXTURE) runs with `PINWISE_STANDIN_STRICT_HANDLES=1`: a
//! stream or event used after it was destroyed (by the program, or with its context) aborts
//! the process, where the real driver's behaviour is undefined (its handles point at freed
//! objects).

mod common;

use std::time::{Duration, Instant};

use common::*;

/// Time for each variant's repetitions (all modes together), so that the test stays bounded
/// on a slow machine; at least one full pass over the modes is always made.
const BUDGET: Duration = Duration::from_secs(15);
/// Passes over the modes at most.
const PASSES: usize = 12;

const MODES: [&[&str]; 5] = [
    &["--mode", "adaptive"],
    &["--mode", "profile", "--profile", "p.profile.json"],
    &["--mode", "use", "--profile", "p.profile.json"],
    &["--mode", "adaptive", "--keep-pinned"],
    &["--mode", "adaptive", "--no-promote"],
];

fn strict(c: &mut std::process::Command) -> &mut std::process::Command {
    c.env("PINWISE_STANDIN_STRICT_HANDLES", "1")
}

fn run_variant(variant: &str) {
    let s = Setup::new();
    let exe = s.build_driver("exit_race.c", &["-lpthread"]);
    let mut plain_cmd = s.libs.command(&exe);
    strict(&mut plain_cmd)
        .arg(variant)
        .current_dir(s.dir.path());
    let plain = plain_cmd.output().expect("run the program");
    assert_ok(&plain, &format!("{variant} without pinwise"));
    let text = String::from_utf8_lossy(&plain.stdout).into_owned();
    assert!(text.starts_with("checksum "), "{text}");
    assert!(text.ends_with("workers running: 16\n"), "{text}");

    let started = Instant::now();
    let mut runs = 0;
    for pass in 0..PASSES {
        if pass > 0 && started.elapsed() > BUDGET {
            break;
        }
        for mode in MODES {
            let stats = s.path(&format!("stats-{runs}.json"));
            let mut c = s.libs.command(common::pinwise());
            strict(&mut c)
                .arg("run")
                .args(mode)
                .args(["--stats-json", stats.to_str().unwrap(), "--"])
                .arg(&exe)
                .arg(variant)
                .current_dir(s.dir.path())
                .env_remove("LD_PRELOAD");
            let out = c.output().expect("run pinwise");
            let what = format!("{variant}, run {runs}, {}", mode.join(" "));
            assert_ok(&out, &what);
            assert_same_stdout(&out, &plain, &what);
            let summary = summary(&stats);
            let top = &summary["processes"][0];
            assert_eq!(
                top["top_process"], true,
                "{what}: the program's own statistics were written at exit: {summary}"
            );
            assert_eq!(top["snapshot"], false, "{what}: written at exit");
            assert!(
                top["events"].as_u64().unwrap_or(0) > 0,
                "{what}: the program's calls were recorded: {top}"
            );
            if variant == "teardown" {
                // The client's streams held staging buffers copied on them; its context
                // release came with the allocator started.
                assert!(
                    top["streams_forgotten"].as_u64().unwrap_or(0) >= 1,
                    "{what}: pinwise let go of the destroyed streams: {top}"
                );
                assert!(
                    top["contexts_ended"].as_u64().unwrap_or(0) >= 1,
                    "{what}: pinwise saw the context released: {top}"
                );
            }
            runs += 1;
        }
    }
    eprintln!(
        "{variant}: {runs} runs under pinwise in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn exit_with_threads_copying_allocating_and_freeing() {
    run_variant("exit");
}

#[test]
fn exit_after_a_client_teardown_streams_first_then_buffers_then_context() {
    run_variant("teardown");
}

#[test]
fn exit_while_threads_tear_themselves_down() {
    run_variant("threadexit");
}

/// pinwise's exit handler runs after `exit` destroyed the exiting thread's thread-local
/// storage; logging from it (`tracing`'s formatter keeps a thread-local buffer) panicked
/// there ("cannot access a Thread Local Storage value during or after destruction"), cutting
/// the exit work short. It now runs on a thread of its own.
#[test]
fn the_exit_work_logs_and_completes_with_logging_on() {
    let s = Setup::new();
    let exe = s.build_driver("exit_race.c", &["-lpthread"]);
    for run in 0..5 {
        let stats = s.path(&format!("stats-{run}.json"));
        let mut c = s.libs.command(common::pinwise());
        strict(&mut c)
            .env("PINWISE_LOG_LEVEL", "info")
            .args(["run", "--log", "stderr", "--stats-json"])
            .arg(&stats)
            .arg("--")
            .arg(&exe)
            .arg("exit")
            .current_dir(s.dir.path())
            .env_remove("LD_PRELOAD");
        let out = c.output().expect("run pinwise");
        assert_ok(&out, &format!("run {run}"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "run {run}: {err}");
        assert!(
            err.contains("pinwise-preload outputs written") && err.contains("snapshot=false"),
            "run {run}: the exit handler logged its last line: {err}"
        );
        assert_eq!(summary(&stats)["processes"][0]["top_process"], true);
    }
}
