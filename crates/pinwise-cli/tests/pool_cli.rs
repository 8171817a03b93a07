//! `pinwise pool serve` and `pinwise pool status` on the CPU stand-in for libcuda (a TEST
//! FIXTURE): the service starts, answers a client, and a missing service is a clear error.
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pinwise_testkit::StandinLibs;

fn pinwise() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pinwise"));
    c.env("NO_COLOR", "1");
    c
}

#[test]
fn status_without_a_service_says_so_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("none.sock");
    let o = pinwise()
        .args(["pool", "status", "--socket", sock.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("pinwise: error: no pinwise pool at ") && err.contains("none.sock"),
        "{err}"
    );
}

#[test]
fn serve_then_status_reports_the_accounting() {
    if !pinwise_testkit::require_locked_memory("serve_then_status_reports_the_accounting", 64 << 20)
    {
        return;
    }
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("sub/pool.sock");
    let mut service = libs.command(env!("CARGO_BIN_EXE_pinwise"));
    let mut service = service
        .args([
            "pool",
            "serve",
            "--capacity",
            "64M",
            "--client-budget",
            "16M",
        ])
        .arg("--socket")
        .arg(&sock)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let out = loop {
        let o = pinwise()
            .args([
                "pool",
                "status",
                "--json",
                "--socket",
                sock.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        if o.status.success() || t0.elapsed() > Duration::from_secs(20) {
            break o;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // The agent's `--pool` asks the same service (and gets the same accounting).
    let from_agent = pinwise_agent::agent::pool_stats(&sock);
    let _ = service.kill();
    let _ = service.wait();
    let from_agent = from_agent.expect("the agent reaches the pool");
    assert_eq!(
        (from_agent.capacity, from_agent.client_budget),
        (64 << 20, 16 << 20)
    );
    assert_eq!(
        from_agent.clients, 0,
        "the agent's own connection is not a client of the pool"
    );
    assert_eq!(
        pinwise_agent::agent::pool_stats(&sock),
        None,
        "a pool that went away is None"
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stats["capacity"], 64 << 20);
    assert_eq!(stats["client_budget"], 16 << 20);
    assert_eq!(stats["clients"], 1, "the status connection itself");
    assert_eq!(stats["buffers"], 0);
}

#[test]
fn pool_min_takes_the_variables_grammar_and_names_a_bad_value() {
    for bad in ["0", "25%", "8Q"] {
        let o = pinwise()
            .args([
                "run",
                "--pool=/nonexistent/pool.sock",
                "--pool-min",
                bad,
                "--",
                "true",
            ])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("--pool-min") && err.contains(&format!("`{bad}`")),
            "{bad}: {err}"
        );
    }
}
