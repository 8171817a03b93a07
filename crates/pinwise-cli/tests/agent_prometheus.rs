//! The CI test: a real Prometheus server (Debian's `prometheus` package, installed
//! by scripts/setup.sh with PINWISE_SETUP_TESTS=1) scrapes `pinwise agent` (the real
//! binary, root, BPF) every second while two workloads with known transfer counts run in
//! two cgroups made for the test (cgroup v2), and a third that forks, execs and is killed
//! runs in a third. Prometheus's query API must give exactly each cgroup's transfers and
//! bytes, by direction and host memory kind, and the drop counter; the agent must be
//! alive after the kill and stop cleanly on SIGTERM. Workloads use the CPU stand-in for
//! libcuda (a TEST FIXTURE, not a GPU).
//!
//! The agent runs with `--fingerprint` (redundant uploads: the workloads re-send the same
//! bytes a known number of times) and `--otlp` to a test receiver that decodes the OTLP
//! requests: the receiver must get the same numbers Prometheus has.
//!
//! Skipped visibly without BPF, cgroup v2 or prometheus; under `CI=true` each of those
//! fails the test instead.

mod agent_support;

use std::collections::BTreeMap;
use std::io::BufRead;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agent_support::*;
use pinwise_testkit::{in_ci, require_bpf, StandinLibs};

const NAME: &str = "prometheus_scrapes_the_agent_and_finds_each_cgroups_transfers_exactly";

fn missing(what: String) -> bool {
    if in_ci() {
        panic!("{NAME}: {what} (CI=true, so this fails)");
    }
    eprintln!("SKIPPED {NAME}: {what}");
    false
}

fn prometheus_binary() -> Option<PathBuf> {
    std::env::var_os("PINWISE_PROMETHEUS")
        .map(PathBuf::from)
        .into_iter()
        .chain([
            "/usr/bin/prometheus".into(),
            "/usr/local/bin/prometheus".into(),
        ])
        .find(|p| p.is_file())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Prometheus {
    child: Child,
    addr: String,
    _data: tempfile::TempDir,
}

impl Prometheus {
    fn start(binary: &Path, target: &str) -> Prometheus {
        let data = tempfile::tempdir().unwrap();
        let config = data.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: pinwise\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                data.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(data.path().join("prometheus.log")).unwrap())
            .spawn()
            .expect("starting prometheus");
        let p = Prometheus {
            child,
            addr,
            _data: data,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while http_get(&p.addr, "/-/ready").is_err() {
            assert!(
                Instant::now() < deadline,
                "prometheus never became ready: {}",
                p.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        p
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._data.path().join("prometheus.log")).unwrap_or_default()
    }

    /// `/api/v1/query`: each result's labels and value.
    fn query(&self, promql: &str) -> Vec<(BTreeMap<String, String>, f64)> {
        let body = http_get(
            &self.addr,
            &format!("/api/v1/query?query={}", url_encode(promql)),
        )
        .unwrap_or_else(|e| panic!("query {promql}: {e}"));
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"], "success", "{body}");
        v["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let labels = r["metric"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                    .collect();
                let value = r["value"][1].as_str().unwrap().parse().unwrap();
                (labels, value)
            })
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `(cgroup, direction, host_kind) -> value` of `sum by (...)` over the test's cgroups.
type ByCell = BTreeMap<(String, String, String), u64>;

fn by_cell(p: &Prometheus, metric: &str, prefix: &str) -> ByCell {
    p.query(&format!(
        "sum by (cgroup, direction, host_kind) ({metric}{{cgroup=~\"{prefix}.*\"}})"
    ))
    .into_iter()
    .map(|(l, v)| {
        (
            (
                l["cgroup"].clone(),
                l["direction"].clone(),
                l["host_kind"].clone(),
            ),
            v as u64,
        )
    })
    .collect()
}

fn cell(cg: &TestCgroup, dir: &str, kind: &str, v: u64) -> ((String, String, String), u64) {
    ((cg.path.clone(), dir.into(), kind.into()), v)
}

#[test]
fn prometheus_scrapes_the_agent_and_finds_each_cgroups_transfers_exactly() {
    if !require_bpf(NAME) {
        return;
    }
    let Some(prometheus) = prometheus_binary() else {
        missing(
            "prometheus is not installed (Debian package `prometheus`; scripts/setup.sh \
             installs it with PINWISE_SETUP_TESTS=1, or set PINWISE_PROMETHEUS)"
                .into(),
        );
        return;
    };
    let Some(mount) = cgroup2_mount() else {
        missing("no cgroup v2 hierarchy is mounted".into());
        return;
    };
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let exe = build_workload(&libs, dir.path());
    let prefix = format!("pinwise-agent-test-{}-", std::process::id());
    let a = TestCgroup::create(&mount, &format!("{prefix}a"));
    let b = TestCgroup::create(&mount, &format!("{prefix}b"));
    let c = TestCgroup::create(&mount, &format!("{prefix}c"));
    let prefix_path = format!("/{prefix}");

    let otlp = OtlpReceiver::start();
    let otlp_url = format!("http://{}", otlp.addr);
    let agent = AgentProcess::start(
        &libs,
        &[
            "--cgroup",
            &prefix_path,
            "--node",
            "testnode",
            "--fingerprint",
            "--otlp",
            &otlp_url,
            "--otlp-interval",
            "1s",
        ],
    );
    let prom = Prometheus::start(&prometheus, &agent.addr);

    // A: 7 pageable and 3 pinned HtoD copies of 4 KiB, one DtoH into the pinned buffer;
    // every pageable copy after the first and every pinned copy after the first re-sends
    // the bytes the device range holds: 6 + 2 redundant uploads.
    // B: 11 pageable HtoD copies of 64 KiB whose first byte changes each time (`vary`: none
    // redundant), one DtoH.
    let run = |cg: &TestCgroup, args: &[&str]| {
        let out = libs
            .configure(&mut cg.command(&exe))
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "{args:?}: {}\n{text}", out.status);
        text
    };
    assert_eq!(
        run(&a, &["copies", "7", "3", "4096"]).trim(),
        "done 7 3 4096 ok"
    );
    assert_eq!(
        run(&b, &["copies", "11", "0", "65536", "vary"]).trim(),
        "done 11 0 65536 ok"
    );

    // C: copies (2 pageable, 1 pinned HtoD, 1 DtoH of 1 KiB: 1 redundant upload), forks a
    // child that execs the workload again (the same copies), then both are killed with
    // SIGKILL.
    let mut forker = libs
        .configure(&mut c.command(&exe))
        .args(["copies", "2", "1", "1024", "forkexec"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(forker.stdout.take().unwrap()).lines();
    for _ in 0..2 {
        let line = lines.next().expect("a done line").unwrap();
        assert_eq!(line, "done 2 1 1024 ok");
    }
    c.kill_all();
    let _ = forker.wait();

    let expected: ByCell = [
        cell(&a, "HtoD", "pageable", 7),
        cell(&a, "HtoD", "pinned", 3),
        cell(&a, "DtoH", "pinned", 1),
        cell(&b, "HtoD", "pageable", 11),
        cell(&b, "DtoH", "pinned", 1),
        cell(&c, "HtoD", "pageable", 4),
        cell(&c, "HtoD", "pinned", 2),
        cell(&c, "DtoH", "pinned", 2),
    ]
    .into_iter()
    .collect();
    let expected_bytes: ByCell = expected
        .iter()
        .map(|(k, n)| {
            let size = if k.0 == a.path {
                4096
            } else if k.0 == b.path {
                65536
            } else {
                1024
            };
            (k.clone(), n * size)
        })
        .collect();

    // Scraped every second: wait until Prometheus has the final numbers.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (transfers, bytes) = loop {
        let t = by_cell(&prom, "pinwise_transfers_total", &prefix_path);
        let by = by_cell(&prom, "pinwise_transfer_bytes_total", &prefix_path);
        if (t == expected && by == expected_bytes) || Instant::now() > deadline {
            break (t, by);
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(transfers, expected, "transfers per cgroup\n{}", agent.log());
    assert_eq!(bytes, expected_bytes, "bytes per cgroup");

    // Redundant uploads per cgroup (A: 6 + 2; B: none of 11; C: 1 per process), and the
    // uploads fingerprinted (every HtoD copy: its pages are present).
    let per_cgroup = |metric: &str, direction: &str| -> BTreeMap<String, u64> {
        prom.query(&format!(
            "sum by (cgroup) ({metric}{{cgroup=~\"{prefix_path}.*\",direction=\"{direction}\"}})"
        ))
        .into_iter()
        .map(|(l, v)| (l["cgroup"].clone(), v as u64))
        .collect()
    };
    let want = |a_: u64, b_: u64, c_: u64| -> BTreeMap<String, u64> {
        [
            (a.path.clone(), a_),
            (b.path.clone(), b_),
            (c.path.clone(), c_),
        ]
        .into_iter()
        .collect()
    };
    assert_eq!(
        per_cgroup("pinwise_fingerprinted_transfers_total", "HtoD"),
        want(10, 11, 6)
    );
    assert_eq!(
        per_cgroup("pinwise_redundant_transfers_total", "HtoD"),
        want(8, 0, 2)
    );
    assert_eq!(
        per_cgroup("pinwise_redundant_transfer_bytes_total", "HtoD"),
        want(8 * 4096, 0, 2 * 1024)
    );
    // The synchronous downloads (one per process) are fingerprinted too; none repeats an
    // earlier download of its range into the same host bytes.
    assert_eq!(
        per_cgroup("pinwise_fingerprinted_transfers_total", "DtoH"),
        want(1, 1, 2)
    );
    assert_eq!(
        per_cgroup("pinwise_redundant_transfers_total", "DtoH"),
        want(0, 0, 0)
    );

    // The OTLP receiver has the same numbers (pushed every second; cumulative).
    let otlp_cell = |metric: &str, k: &(String, String, String)| {
        otlp.sum(
            metric,
            &[("cgroup", &k.0), ("direction", &k.1), ("host_kind", &k.2)],
        ) as u64
    };
    let otlp_matches = || {
        expected
            .iter()
            .all(|(k, n)| otlp_cell("pinwise_transfers", k) == *n)
            && expected_bytes
                .iter()
                .all(|(k, n)| otlp_cell("pinwise_transfer_bytes", k) == *n)
            && [(&a, 8u64), (&b, 0), (&c, 2)].iter().all(|(cg, n)| {
                otlp.sum(
                    "pinwise_redundant_transfers",
                    &[("cgroup", &cg.path), ("direction", "HtoD")],
                ) as u64
                    == *n
            })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !otlp_matches() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(
        otlp_matches(),
        "OTLP differs from Prometheus ({} requests):\n{}",
        otlp.requests.lock().unwrap(),
        otlp.dump()
    );
    // The same labels as the Prometheus series.
    let promq = prom.query(&format!(
        "pinwise_transfers_total{{cgroup=\"{}\",host_kind=\"pinned\",direction=\"HtoD\"}}",
        a.path
    ));
    assert_eq!(promq.len(), 1, "{promq:?}");
    let prom_labels = &promq[0].0;
    let mut otlp_labels = Vec::new();
    for name in prom_labels.keys() {
        if name == "__name__" || name == "job" || name == "instance" {
            continue;
        }
        otlp_labels.push((name.as_str(), prom_labels[name].as_str()));
    }
    assert_eq!(
        otlp.sum("pinwise_transfers", &otlp_labels),
        promq[0].1,
        "OTLP points with Prometheus's labels {otlp_labels:?}"
    );
    // Pushes are counted, none failed.
    let pushes = prom.query("pinwise_otlp_exports_total");
    let by_result: BTreeMap<String, f64> = pushes
        .iter()
        .map(|(l, v)| (l["result"].clone(), *v))
        .collect();
    assert!(by_result.get("ok").is_some_and(|&n| n >= 1.0), "{pushes:?}");
    assert_eq!(by_result.get("failed"), Some(&0.0), "{pushes:?}");
    assert_eq!(
        otlp.points("pinwise_ringbuf_drops", &[("node", "testnode")]),
        1
    );
    assert_eq!(
        otlp.sum("pinwise_ringbuf_drops", &[("node", "testnode")]),
        0.0
    );

    // The drop counter is exported (and nothing was dropped in so small a run).
    let drops = prom.query("pinwise_ringbuf_drops_total");
    assert_eq!(drops.len(), 1, "{drops:?}");
    assert_eq!(drops[0].0["node"], "testnode");
    assert_eq!(drops[0].1, 0.0);
    // The pinned-memory gauges and cost estimates are there for the workloads.
    let est = prom.query(&format!(
        "sum(pinwise_transfer_estimated_seconds_total{{cgroup=~\"{prefix_path}.*\"}})"
    ));
    assert!(est.first().is_some_and(|(_, v)| *v > 0.0), "{est:?}");
    // Other processes (outside the test's cgroups) are filtered out, not exported.
    let others = prom.query(&format!(
        "pinwise_transfers_total{{cgroup!~\"{prefix_path}.*\"}}"
    ));
    assert!(others.is_empty(), "{others:?}");

    // The agent survived the kill: still up, still scraped.
    let mut agent = agent;
    assert!(agent.child.try_wait().unwrap().is_none(), "{}", agent.log());
    let up = prom.query("up{job=\"pinwise\"}");
    assert_eq!(up.first().map(|u| u.1), Some(1.0), "{up:?}");

    // SIGTERM: drains, detaches, exits 0.
    signal(&agent.child, libc::SIGTERM);
    let st = wait_timeout(&mut agent.child, Duration::from_secs(15)).expect("agent stopped");
    assert!(st.success(), "{st}\n{}", agent.log());
    drop(prom);
}
