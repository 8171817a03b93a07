//! `pinwise run --pool` on the CPU stand-ins (TEST FIXTURES, not a GPU; nothing here measures
//! anything): a program's large pinned buffers come from a running `pinwise pool serve` and
//! its copies on them are done by the service, byte for byte as without pinwise; with no
//! service, and with the service killed in the middle of the run, the program gets the same
//! bytes from in-process pinning, and the fallbacks are counted.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{assert_ok, assert_same_stdout, clean_env, pinwise, Setup};
use pinwise_core::history::AllocKind;
use pinwise_core::pool_use::PoolUseStats;

/// The program's two 16 MiB pinned buffers (pool) and its 1 MiB one (in-process).
const BIG: u64 = 16 << 20;
const ROUNDS: u64 = 5;
/// Copies per round on the two big buffers: sync up, sync down, async up, async down.
const POOL_COPIES_PER_ROUND: u64 = 4;

/// A `pinwise pool serve` on the stand-in, killed when dropped.
struct Service {
    child: Child,
    socket: PathBuf,
}

impl Service {
    fn start(setup: &Setup) -> Service {
        let socket = setup.path("pool.sock");
        let mut c = setup.libs.command(pinwise());
        c.args([
            "pool",
            "serve",
            "--capacity",
            "256M",
            "--client-budget",
            "64M",
        ])
        .arg("--socket")
        .arg(&socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        clean_env(&mut c);
        let child = c.spawn().expect("start pinwise pool serve");
        let s = Service { child, socket };
        let t0 = Instant::now();
        while s.status().is_none() {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "the pool service did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        s
    }

    /// `pinwise pool status --json`, if the service answers.
    fn status(&self) -> Option<serde_json::Value> {
        let o = Command::new(pinwise())
            .args(["pool", "status", "--json", "--socket"])
            .arg(&self.socket)
            .output()
            .unwrap();
        o.status
            .success()
            .then(|| serde_json::from_slice(&o.stdout).expect("status JSON"))
    }

    fn pool_arg(&self) -> String {
        format!("--pool={}", self.socket.display())
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.kill();
    }
}

fn pool_stats(run: &serde_json::Value) -> PoolUseStats {
    serde_json::from_value(run["pool"].clone()).expect("the summary's pool statistics")
}

fn big_pinned_allocations(h: &pinwise_core::MemHistory) -> usize {
    common::allocations(h)
        .iter()
        .filter(|a| a.kind() == AllocKind::PinnedAlloc && a.size() == BIG)
        .count()
}

fn enough_locked_memory(test: &str) -> bool {
    pinwise_testkit::require_locked_memory(test, 64 << 20)
}

/// A test's start: enough locked memory (else it skips visibly: `None`), a scratch
/// directory, `pool_workload.c` built, its plain output (checked to succeed) and a
/// running service.
fn start(test: &str) -> Option<(Setup, PathBuf, std::process::Output, Service)> {
    if !enough_locked_memory(test) {
        return None;
    }
    let setup = Setup::new();
    let program = setup.build_driver("pool_workload.c", &[]);
    let plain = setup.run_plain(&program, &[]);
    assert_ok(&plain, "plain");
    let service = Service::start(&setup);
    Some((setup, program, plain, service))
}

#[test]
fn pinned_buffers_come_from_the_pool_and_copies_are_byte_exact() {
    let Some((setup, program, plain, service)) =
        start("pinned_buffers_come_from_the_pool_and_copies_are_byte_exact")
    else {
        return;
    };
    let run = setup.run_recorded(&program, &[&service.pool_arg()], "pooled.bin");
    assert_same_stdout(&run.out, &plain, "--pool with a service");
    let pool = pool_stats(run.process());
    assert!(pool.configured && pool.connected, "{pool:?}");
    assert_eq!(
        pool.buffers, 2,
        "the two 16 MiB buffers, not the 1 MiB one: {pool:?}"
    );
    assert!(
        pool.bytes >= 2 * BIG && pool.bytes_peak >= 2 * BIG,
        "{pool:?}"
    );
    assert_eq!(pool.copies, ROUNDS * POOL_COPIES_PER_ROUND, "{pool:?}");
    assert_eq!(pool.async_made_sync, ROUNDS * 2, "{pool:?}");
    assert_eq!(pool.fallbacks(), 0, "{pool:?}");
    assert_eq!((pool.copies_here, pool.ipc_failures), (0, 0), "{pool:?}");
    assert!(
        !pool.connection_lost && pool.service_clients_max >= 1,
        "{pool:?}"
    );
    // Served pinned (as CUDA would), and every copy recorded, on the pool's buffers too.
    assert_eq!(run.process()["served_pinned"], 3, "{}", run.process());
    assert_eq!(big_pinned_allocations(&run.history), 2);
    assert_eq!(
        common::transfers(&run.history, pinwise_core::Direction::HtoD),
        ROUNDS * 3
    );
    // Each allocation the pool served says so in its flags (the JSON form of the history).
    let o = Command::new(pinwise())
        .arg("convert")
        .arg(setup.path("pooled.bin"))
        .arg("-o")
        .arg(setup.path("pooled.json"))
        .output()
        .unwrap();
    assert_ok(&o, "pinwise convert");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(setup.path("pooled.json")).unwrap()).unwrap();
    let mut pooled_sizes: Vec<u64> = json["allocations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| {
            a["events"][0]["type"] == "ALLOC"
                && a["events"][0]["flags"].as_u64().unwrap()
                    & u64::from(pinwise_core::pool_use::ALLOC_FLAG_POOL)
                    != 0
        })
        .map(|a| a["size"].as_u64().unwrap())
        .collect();
    pooled_sizes.sort();
    assert_eq!(
        pooled_sizes,
        [BIG, BIG],
        "the two big buffers, not the small one"
    );
    let from_history = PoolUseStats::from_source_stats(run.history.source_stats())
        .expect("the history carries the pool's figures");
    assert_eq!(from_history.buffers, 2);
    assert_eq!(from_history.copies, pool.copies);
    // The summary says it.
    let err = String::from_utf8_lossy(&run.out.stderr);
    assert!(err.contains("pinned pool: 2 requests served"), "{err}");
    // So does `pinwise report`, in each format.
    let report = |format: &str| {
        let o = Command::new(pinwise())
            .args(["report", "--format", format])
            .arg(setup.path("pooled.bin"))
            .output()
            .unwrap();
        assert_ok(&o, "pinwise report");
        String::from_utf8(o.stdout).unwrap()
    };
    let text = report("text");
    assert!(
        text.contains("PINNED POOL") && text.contains("2 requests served from the node's pool"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&report("json")).unwrap();
    assert!(
        json["pool"]["pinned_bytes_via_pool_peak"].as_u64().unwrap() >= 2 * BIG,
        "{}",
        json["pool"]
    );
    // 8 bytes of GPU page table per 4 KiB page pinned (the measured figure).
    assert_eq!(
        json["pool"]["gpu_pagetable_bytes_moved_estimate"]
            .as_u64()
            .unwrap(),
        json["pool"]["pinned_bytes_via_pool_peak"].as_u64().unwrap() / 512
    );
    assert_eq!(json["pool"]["stats"]["copies"], pool.copies);
    assert!(report("html").contains("Pinned pool: pinned memory served"));
    // The client's exit freed its buffers and closed its device openings in the service
    // (the one client left is the status query itself).
    let t0 = Instant::now();
    loop {
        let s = service.status().expect("the service still answers");
        if s["buffers"] == 0 && s["devices"] == 0 && s["clients"] == 1 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "buffers left: {s}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn without_a_service_the_run_is_plain_and_the_fallback_counted() {
    let setup = Setup::new();
    let program = setup.build_driver("pool_workload.c", &[]);
    let plain = setup.run_plain(&program, &[]);
    assert_ok(&plain, "plain");
    let absent = setup.path("nobody.sock");
    let t0 = Instant::now();
    let run = setup.run_recorded(
        &program,
        &[&format!("--pool={}", absent.display())],
        "absent.bin",
    );
    assert!(
        t0.elapsed() < Duration::from_secs(60),
        "an absent service must not hold the program up"
    );
    assert_same_stdout(&run.out, &plain, "--pool without a service");
    let pool = pool_stats(run.process());
    assert!(pool.configured && !pool.connected, "{pool:?}");
    assert_eq!(pool.buffers, 0, "{pool:?}");
    assert_eq!(pool.alloc_fallbacks, 2, "both big requests: {pool:?}");
    let reason = pool.unavailable_reason.clone().unwrap_or_default();
    assert!(
        reason.contains("no pinwise pool at") && reason.contains("nobody.sock"),
        "{reason}"
    );
    // Served in-process, pinned, as without --pool.
    assert_eq!(run.process()["served_pinned"], 3, "{}", run.process());
    assert_eq!(big_pinned_allocations(&run.history), 2);
}

/// Waits for `path` to exist.
fn wait_for(path: &Path, child: &mut Child) {
    let t0 = Instant::now();
    while !path.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the program ended before {}: {status}", path.display());
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{} never came",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `pinwise run --pool` of the program, which after round 2 waits for `to_service` to be
/// done to the service; the run's output and the program's pool statistics.
fn run_and_meanwhile(
    setup: &Setup,
    program: &Path,
    service: &mut Service,
    to_service: impl FnOnce(&mut Service),
) -> (std::process::Output, PoolUseStats) {
    let (ready, go) = (setup.path("ready"), setup.path("go"));
    let summary = setup.path("meanwhile-summary.json");
    let mut c = setup.libs.command(pinwise());
    c.args([
        "run",
        "--no-malloc-hooks",
        &service.pool_arg(),
        "--stats-json",
    ])
    .arg(&summary)
    .arg("--")
    .arg(program)
    .current_dir(setup.dir.path())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    clean_env(&mut c);
    c.env("POOL_READY", &ready).env("POOL_GO", &go);
    let mut child = c.spawn().unwrap();
    wait_for(&ready, &mut child);
    to_service(service);
    std::fs::write(&go, b"").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_ok(&out, "--pool, the service interfered with");
    let pool = pool_stats(&common::summary(&summary)["processes"][0]);
    (out, pool)
}

#[test]
fn a_service_killed_mid_run_leaves_the_program_correct_and_the_fallback_counted() {
    let Some((setup, program, plain, mut service)) =
        start("a_service_killed_mid_run_leaves_the_program_correct_and_the_fallback_counted")
    else {
        return;
    };
    let (out, pool) = run_and_meanwhile(&setup, &program, &mut service, Service::kill);
    assert_same_stdout(&out, &plain, "--pool, service killed mid-run");
    assert!(pool.connection_lost, "{pool:?}");
    assert_eq!(pool.buffers, 2, "{pool:?}");
    // Two rounds through the service, the rest in-process on the buffers registered here.
    assert_eq!(pool.copies, 2 * POOL_COPIES_PER_ROUND, "{pool:?}");
    assert_eq!(pool.buffers_registered_here, 2, "{pool:?}");
    assert_eq!(
        pool.copies_here,
        (ROUNDS - 2) * POOL_COPIES_PER_ROUND,
        "{pool:?}"
    );
    assert!(pool.unavailable_reason.is_some(), "{pool:?}");
}

#[test]
fn a_copy_the_stopped_service_did_not_start_in_time_is_made_here_and_never_by_it() {
    let Some((setup, program, plain, mut service)) =
        start("a_copy_the_stopped_service_did_not_start_in_time_is_made_here_and_never_by_it")
    else {
        return;
    };
    let pid = service.child.id() as i32;
    // Stopped after round 2: round 3's first copy waits for its start (5 s), falls back
    // here, and the service, resumed later, finds the request past its deadline.
    // SAFETY: kill(2) on our own child's pid.
    let (out, pool) = run_and_meanwhile(&setup, &program, &mut service, |_| {
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    });
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    assert_same_stdout(&out, &plain, "--pool, service stopped mid-run");
    assert_eq!(pool.copies_not_started, 1, "{pool:?}");
    assert!(pool.connection_lost, "{pool:?}");
    assert_eq!(pool.copies, 2 * POOL_COPIES_PER_ROUND, "{pool:?}");
    assert_eq!(
        pool.copies_here,
        (ROUNDS - 2) * POOL_COPIES_PER_ROUND,
        "{pool:?}"
    );
    // The resumed service read the late request and did not copy.
    let t0 = Instant::now();
    let s = loop {
        let s = service.status().expect("the service answers again");
        if s["expired_copies"] == 1 || t0.elapsed() > Duration::from_secs(10) {
            break s;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        (&s["expired_copies"], &s["copies"]),
        (&1.into(), &(2 * POOL_COPIES_PER_ROUND).into()),
        "{s}"
    );
}

/// `pinwise run --no-malloc-hooks <pool_arg> --stats-json S -- program` and the plain run,
/// both with `env`; both must succeed. Returns (pinwise's output, plain output, the pool
/// statistics of the program's process).
fn run_both_with_env(
    setup: &Setup,
    program: &Path,
    pool_arg: &str,
    env: &[(&str, &str)],
) -> (std::process::Output, std::process::Output, PoolUseStats) {
    let mut plain = setup.libs.command(program);
    clean_env(&mut plain);
    plain
        .envs(env.iter().copied())
        .current_dir(setup.dir.path());
    let plain = plain.output().unwrap();
    assert_ok(&plain, "plain");
    let summary = setup.path(&format!("env-{}-summary.json", env.len()));
    let mut c = setup.libs.command(pinwise());
    c.args([
        "run",
        "--no-malloc-hooks",
        "--force",
        pool_arg,
        "--stats-json",
    ])
    .arg(&summary)
    .arg("--")
    .arg(program)
    .current_dir(setup.dir.path());
    clean_env(&mut c);
    c.envs(env.iter().copied());
    let out = c.output().unwrap();
    assert_ok(&out, "pinwise run --pool");
    let pool = pool_stats(&common::summary(&summary)["processes"][0]);
    (out, plain, pool)
}

#[test]
fn device_memory_without_an_ipc_handle_falls_back_to_pinning_here() {
    let Some((setup, program, _plain, service)) =
        start("device_memory_without_an_ipc_handle_falls_back_to_pinning_here")
    else {
        return;
    };
    // The stand-in refuses cuIpcGetMemHandle, as CUDA does for VMM and cudaMallocAsync memory.
    let (out, plain, pool) = run_both_with_env(
        &setup,
        &program,
        &service.pool_arg(),
        &[("PINWISE_STANDIN_NO_IPC", "1")],
    );
    assert_same_stdout(&out, &plain, "--pool, no IPC handles");
    assert_eq!(pool.buffers, 2, "{pool:?}");
    assert_eq!(pool.copies, 0, "{pool:?}");
    // One refused handle per buffer: each is registered here at its first copy.
    assert_eq!(pool.ipc_failures, 2, "{pool:?}");
    assert_eq!(pool.buffers_registered_here, 2, "{pool:?}");
    assert_eq!(pool.copies_here, ROUNDS * POOL_COPIES_PER_ROUND, "{pool:?}");
    assert!(!pool.connection_lost, "{pool:?}");
}

#[test]
fn a_pointer_query_registers_the_pool_buffer_here_and_is_answered_as_plain_cuda() {
    let Some((setup, program, _plain, service)) =
        start("a_pointer_query_registers_the_pool_buffer_here_and_is_answered_as_plain_cuda")
    else {
        return;
    };
    let (out, plain, pool) = run_both_with_env(
        &setup,
        &program,
        &service.pool_arg(),
        &[("POOL_QUERY", "1")],
    );
    assert!(
        String::from_utf8_lossy(&plain.stdout).starts_with("flags "),
        "the query's answer is part of what must match"
    );
    assert_same_stdout(&out, &plain, "--pool, pointer query");
    assert_eq!(pool.buffers, 2, "{pool:?}");
    assert_eq!(
        pool.buffers_registered_here, 1,
        "the queried buffer: {pool:?}"
    );
    // The first buffer's copies (sync and async up) went to the service, the queried
    // buffer's (sync and async down) stayed here.
    assert_eq!(pool.copies, ROUNDS * 2, "{pool:?}");
    assert_eq!(pool.copies_here, ROUNDS * 2, "{pool:?}");
}

#[test]
fn asynchronous_copies_on_pool_buffers_keep_their_stream_order() {
    let Some((setup, program, _plain, service)) =
        start("asynchronous_copies_on_pool_buffers_keep_their_stream_order")
    else {
        return;
    };
    // The stand-in runs each queued asynchronous copy 3 ms late: the small buffer's upload
    // (in-process) is still queued when the download into a pool buffer is issued, so the
    // service's copy must wait for the stream, or it reads the device range too early.
    let (out, plain, pool) = run_both_with_env(
        &setup,
        &program,
        &service.pool_arg(),
        &[("PINWISE_STANDIN_ASYNC_DELAY_US", "3000")],
    );
    assert_same_stdout(&out, &plain, "--pool, delayed asynchronous copies");
    assert_eq!(pool.copies, ROUNDS * POOL_COPIES_PER_ROUND, "{pool:?}");
    assert_eq!(pool.async_made_sync, ROUNDS * 2, "{pool:?}");
}

#[test]
fn every_pinned_request_through_the_pool_leaves_the_workloads_output_unchanged() {
    if !enough_locked_memory(
        "every_pinned_request_through_the_pool_leaves_the_workloads_output_unchanged",
    ) {
        return;
    }
    // The driver and runtime workloads of the other tests (mapped and portable requests,
    // pointer queries, 2D and unified copies, cuGetProcAddress entry points, frees on other
    // threads), with every pinned request the rule allows sent to the pool (--pool-min 1).
    let setup = Setup::new();
    let service = Service::start(&setup);
    for (name, exe) in [
        (
            "driver",
            setup.build_driver("driver_workload.c", &["-lpthread"]),
        ),
        ("cudart", setup.build_cudart("cudart_workload.c", &[])),
    ] {
        let plain = setup.run_plain(&exe, &[]);
        assert_ok(&plain, name);
        let run = setup.run_recorded(
            &exe,
            &[&service.pool_arg(), "--pool-min", "1"],
            &format!("{name}-all-pooled.bin"),
        );
        assert_same_stdout(&run.out, &plain, name);
        let pool = pool_stats(run.process());
        eprintln!("{name}: {pool:?}");
        assert!(
            pool.buffers > 0,
            "{name}: nothing came from the pool: {pool:?}"
        );
        assert!(pool.copies + pool.copies_here > 0, "{name}: {pool:?}");
        assert!(!pool.connection_lost, "{name}: {pool:?}");
    }
}

#[test]
fn a_service_that_does_not_answer_holds_the_program_up_about_a_second() {
    let Some((setup, program, plain, service)) =
        start("a_service_that_does_not_answer_holds_the_program_up_about_a_second")
    else {
        return;
    };
    // Stopped: the kernel still accepts the connection, nobody answers it.
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(
        unsafe { libc::kill(service.child.id() as i32, libc::SIGSTOP) },
        0
    );
    let t0 = Instant::now();
    let run = setup.run_recorded(&program, &[&service.pool_arg()], "stopped.bin");
    let took = t0.elapsed();
    assert_same_stdout(&run.out, &plain, "--pool, service stopped");
    let pool = pool_stats(run.process());
    assert!(!pool.connected, "{pool:?}");
    assert_eq!(pool.alloc_fallbacks, 2, "{pool:?}");
    let reason = pool.unavailable_reason.unwrap_or_default();
    assert!(reason.contains("connection"), "{reason}");
    // One connect attempt, given up after its 1 s limit; generous for a loaded machine,
    // and below the 20 s a call may wait once connected (which must not be what happened).
    assert!(took < Duration::from_secs(15), "took {took:?}");
}

#[test]
fn a_forked_child_never_keeps_the_parents_pool_connection() {
    let Some((setup, program, plain, service)) =
        start("a_forked_child_never_keeps_the_parents_pool_connection")
    else {
        return;
    };
    // The program forks a child that outlives it; the child holds every descriptor the
    // parent had when it forked, the pool connection's among them unless pinwise closes it
    // there.
    let hold = setup.path("hold");
    let (out, _, pool) = run_both_with_env(
        &setup,
        &program,
        &service.pool_arg(),
        &[("POOL_FORK_HOLD", hold.to_str().unwrap())],
    );
    assert_same_stdout(&out, &plain, "--pool, a forked child");
    assert_eq!(pool.buffers, 2, "{pool:?}");
    assert_eq!(pool.copies, ROUNDS * POOL_COPIES_PER_ROUND, "{pool:?}");
    // The parent has exited, its child lives on: the service must see the parent's
    // connection closed (its device openings released); the one client left is the
    // status query itself.
    let t0 = Instant::now();
    let last = loop {
        let s = service.status().expect("the service answers");
        if (s["clients"] == 1 && s["devices"] == 0) || t0.elapsed() > Duration::from_secs(10) {
            break s;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    std::fs::write(&hold, b"").unwrap();
    assert_eq!(
        (&last["clients"], &last["devices"], &last["buffers"]),
        (&1.into(), &0.into(), &0.into()),
        "the child kept the parent's connection: {last}"
    );
}

#[test]
fn registering_one_pool_buffer_here_holds_up_no_copy_on_another() {
    if !enough_locked_memory("registering_one_pool_buffer_here_holds_up_no_copy_on_another") {
        return;
    }
    let setup = Setup::new();
    let program = setup.build_driver("pool_workload.c", &["-lpthread"]);
    let service = Service::start(&setup);
    // A query about the second buffer registers it here; the stand-in holds that
    // registration until the program, having copied on the first buffer, opens the gate
    // (or fails it after 10 s). A table lock held across the registration would hold the
    // copy up until the registration failed.
    let gate = setup.path("gate");
    let gate_env = format!("{}:{BIG}", gate.display());
    let (out, plain, pool) = run_both_with_env(
        &setup,
        &program,
        &service.pool_arg(),
        &[
            ("POOL_GATE", gate.to_str().unwrap()),
            ("PINWISE_STANDIN_REGISTER_GATE", &gate_env),
        ],
    );
    assert!(
        String::from_utf8_lossy(&plain.stdout).contains("gated flags 0"),
        "{}",
        String::from_utf8_lossy(&plain.stdout)
    );
    assert_same_stdout(&out, &plain, "--pool, a registration held open");
    assert!(
        setup.path("gate.waiting").exists(),
        "the registration was held open"
    );
    assert_eq!(
        (pool.buffers_registered_here, pool.buffers_left_pageable),
        (1, 0),
        "the registration completed once the copy on the other buffer was done: {pool:?}"
    );
    // The gated copy and the rounds' copies on the first buffer went to the service.
    assert_eq!(pool.copies, 2 + ROUNDS * 2, "{pool:?}");
}
