//! `pinwise agent` (the real binary, root, BPF) killed with SIGKILL while a workload it
//! follows copies: the workload goes on and finishes with correct output, and the next
//! one runs untraced and correct too. Workloads use the CPU stand-in for libcuda (a TEST
//! FIXTURE, not a GPU). Skipped visibly without BPF; failing under `CI=true`.

mod agent_support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use agent_support::{build_workload, sample_sum, signal, wait_timeout, AgentProcess};
use pinwise_testkit::{require_bpf, StandinLibs};

#[test]
fn killing_the_agent_leaves_a_copying_workload_running_and_correct() {
    if !require_bpf("killing_the_agent_leaves_a_copying_workload_running_and_correct") {
        return;
    }
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let exe = build_workload(&libs, dir.path());
    let mut agent = AgentProcess::start(&libs, &["--comm", "workload"]);

    const COPIES: u64 = 300_000;
    let mut workload = libs
        .command(&exe)
        .args(["copies", &COPIES.to_string(), "0", "64"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = workload.id().to_string();
    // The agent follows it: its copies show in the metrics while it runs.
    let deadline = Instant::now() + Duration::from_secs(20);
    let seen = loop {
        let n = sample_sum(
            &agent.metrics(),
            "pinwise_transfers_total",
            &[("pid", &pid)],
        );
        if n > 0.0 || Instant::now() > deadline {
            break n;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        seen > 0.0,
        "the agent never showed PID {pid}:\n{}",
        agent.log()
    );
    assert!(
        workload.try_wait().unwrap().is_none(),
        "the workload finished before the kill: make it longer"
    );
    signal(&agent.child, libc::SIGKILL);
    let st = wait_timeout(&mut agent.child, Duration::from_secs(10)).expect("the agent died");
    assert!(!st.success());

    let status = wait_timeout(&mut workload, Duration::from_secs(60))
        .expect("the workload finished after the agent died");
    let mut out = String::new();
    std::io::Read::read_to_string(&mut workload.stdout.take().unwrap(), &mut out).unwrap();
    assert!(status.success(), "workload failed: {status}\n{out}");
    assert_eq!(out.trim(), format!("done {COPIES} 0 64 ok"));

    // Probes went with the agent: a new workload runs as before.
    let again = libs
        .command(&exe)
        .args(["copies", "10", "10", "4096"])
        .output()
        .unwrap();
    assert!(again.status.success());
    assert_eq!(
        String::from_utf8_lossy(&again.stdout).trim(),
        "done 10 10 4096 ok"
    );
}
