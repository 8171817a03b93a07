//! The agent's logic without BPF or root: a fake tracer ([`TraceBackend`]), a fake library
//! scan ([`LibraryScan`]) and the real [`ProcFs`] over a fake proc tree and pods
//! directory. Events are fed to the sink the tracer would feed; `/metrics` is read over
//! HTTP as Prometheus reads it.

use std::io::{Read, Write};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pinwise_agent::agent::{LibraryScan, TraceBackend, TracerCounters};
use pinwise_agent::cgroup::CgroupResolver;
use pinwise_agent::pods::PodResolver;
use pinwise_agent::table::{ProcFs, TableConfig};
use pinwise_agent::{Agent, AgentConfig, AgentError};
use pinwise_core::fingerprint::Fingerprint;
use pinwise_core::{Direction, Event, EventKind, HostState, ProbeKind};
use pinwise_trace::agent::EventSink;

#[derive(Default)]
struct Shared {
    counters: TracerCounters,
    probed: Vec<PathBuf>,
    stopped: bool,
}

struct FakeTracer(Arc<Mutex<Shared>>);

impl TraceBackend for FakeTracer {
    fn counters(&self) -> TracerCounters {
        self.0.lock().unwrap().counters
    }
    fn probe_driver_library(&self, path: &Path) -> Result<usize, AgentError> {
        let mut s = self.0.lock().unwrap();
        if s.probed.iter().any(|p| p == path) {
            return Ok(0);
        }
        s.probed.push(path.to_path_buf());
        Ok(5)
    }
    fn stop(&mut self) -> Result<(), AgentError> {
        self.0.lock().unwrap().stopped = true;
        Ok(())
    }
}

struct FakeScan;

impl LibraryScan for FakeScan {
    fn driver_libraries(&mut self) -> Vec<(u32, PathBuf)> {
        vec![
            (100, "/proc/100/root/usr/lib/libcuda.so.1".into()),
            (101, "/proc/100/root/usr/lib/libcuda.so.1".into()),
        ]
    }
}

const UID: &str = "0b8d8b36-4bd1-4a8a-9d3c-2a7f1e6b5c4d";

/// `<proc>/<pid>/{stat,comm,cgroup,fd/}`: started at tick 5 (after the attach at 0).
fn fake_process(proc_root: &Path, pid: u32, comm: &str, cgroup: &str, gpus: &[u32]) {
    let dir = proc_root.join(pid.to_string());
    std::fs::create_dir_all(dir.join("fd")).unwrap();
    std::fs::write(
        dir.join("stat"),
        format!("{pid} ({comm}) S 1 {pid} {pid} 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 5 100 10\n"),
    )
    .unwrap();
    std::fs::write(dir.join("comm"), format!("{comm}\n")).unwrap();
    std::fs::write(dir.join("cgroup"), format!("0::{cgroup}\n")).unwrap();
    symlink("/dev/nvidiactl", dir.join("fd/3")).unwrap();
    for (i, g) in gpus.iter().enumerate() {
        symlink(
            format!("/dev/nvidia{g}"),
            dir.join(format!("fd/{}", 10 + i)),
        )
        .unwrap();
    }
}

fn upload(pid: u32, host: u64, device: u64, bytes: u64, fp: Option<u64>) -> Event {
    copy(Direction::HtoD, pid, host, device, bytes, fp)
}

fn copy(
    direction: Direction,
    pid: u32,
    host: u64,
    device: u64,
    bytes: u64,
    fp: Option<u64>,
) -> Event {
    let e = Event::new(
        1,
        pid,
        pid,
        ProbeKind::Uprobe,
        EventKind::Transfer {
            direction,
            host,
            device,
            bytes,
            is_async: false,
            stream: 0,
            host_state: HostState::Unknown,
        },
    );
    match fp {
        Some(sampled) => e.with_fingerprint(Fingerprint {
            sampled,
            full: None,
        }),
        None => e,
    }
}

fn get_metrics(addr: std::net::SocketAddr) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text.split_once("\r\n\r\n").unwrap().1.to_string()
}

/// The value of the one sample of `name` whose line has all of `labels`.
fn value(metrics: &str, name: &str, labels: &[&str]) -> Option<f64> {
    let found: Vec<f64> = metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert!(found.len() <= 1, "{name} {labels:?}: {found:?}");
    found.first().copied()
}

#[test]
fn enrolment_labels_redundancy_eviction_rescan_and_drops_without_bpf() {
    let dir = tempfile::tempdir().unwrap();
    let proc_root = dir.path().join("proc");
    let pods = dir.path().join("pods");
    std::fs::create_dir_all(pods.join(format!("ml_trainer-0_{UID}"))).unwrap();
    let pod_cgroup = format!("/kubepods/burstable/pod{UID}/{}", "ab".repeat(32));
    fake_process(&proc_root, 100, "python3", &pod_cgroup, &[2, 0]);
    fake_process(&proc_root, 101, "worker", "/system.slice/job.service", &[]);
    fake_process(&proc_root, 102, "late", "/system.slice/late.service", &[1]);

    let shared = Arc::new(Mutex::new(Shared::default()));
    let config = AgentConfig {
        node: "n1".into(),
        listen: "127.0.0.1:0".parse().unwrap(),
        table: TableConfig {
            max_processes: 2,
            exited_retention: Duration::from_secs(3600),
            ..TableConfig::default()
        },
        labels_every: Duration::from_secs(3600),
        rescan_every: None,
        ..AgentConfig::default()
    };
    let probe = ProcFs {
        proc_root: proc_root.clone(),
        attach_ticks: 0,
        cgroups: CgroupResolver::new(None),
        pods: PodResolver::new(Some(pods)),
    };
    let (mut agent, mut sink) = Agent::with_backend(
        config,
        Box::new(FakeTracer(Arc::clone(&shared))),
        Box::new(probe),
        Box::new(FakeScan),
    )
    .unwrap();

    // Enrolment at the first CUDA call; copies with fingerprints.
    sink.process_enrolled(100, 0, "python3");
    sink.process_enrolled(101, 0, "worker");
    // 100: the same 4 KiB uploaded 4 times to one device range (3 redundant), then other
    // bytes (fresh), then the first bytes again to another device offset (fresh: that
    // range never held them).
    let mut evs: Vec<Event> = (0..4)
        .map(|_| upload(100, 0x10000, 0xd000, 4096, Some(7)))
        .collect();
    evs.push(upload(100, 0x10000, 0xd000, 4096, Some(8)));
    evs.push(upload(100, 0x10000, 0xe000, 4096, Some(7)));
    // Downloads: the same device range fetched twice into the same host bytes, unchanged
    // (the second is redundant), then into other host bytes (fresh).
    evs.push(copy(Direction::DtoH, 100, 0x50000, 0xd000, 4096, Some(8)));
    evs.push(copy(Direction::DtoH, 100, 0x50000, 0xd000, 4096, Some(8)));
    evs.push(copy(Direction::DtoH, 100, 0x60000, 0xd000, 4096, Some(8)));
    // 101: no fingerprints (a tracer without --fingerprint): no redundancy series.
    evs.push(upload(101, 0x20000, 0xf000, 100, None));
    sink.events(&evs);
    // Drops counted by the tracer are exported.
    shared.lock().unwrap().counters.ringbuf_drops = 7;
    agent.tick();

    let m = get_metrics(agent.local_addr());
    let p100 = ["pid=\"100\"", "direction=\"HtoD\""];
    let d100 = ["pid=\"100\"", "direction=\"DtoH\""];
    assert_eq!(
        value(&m, "pinwise_redundant_transfers_total", &d100),
        Some(1.0)
    );
    assert_eq!(
        value(&m, "pinwise_fingerprinted_transfers_total", &d100),
        Some(3.0)
    );
    assert_eq!(
        value(&m, "pinwise_redundant_transfers_total", &p100),
        Some(3.0),
        "{m}"
    );
    assert_eq!(
        value(&m, "pinwise_redundant_transfer_bytes_total", &p100),
        Some(3.0 * 4096.0)
    );
    assert_eq!(
        value(&m, "pinwise_fingerprinted_transfers_total", &p100),
        Some(6.0)
    );
    assert_eq!(
        value(&m, "pinwise_redundant_transfers_total", &["pid=\"101\""]),
        None
    );
    assert_eq!(
        value(
            &m,
            "pinwise_node_redundant_transfers_total",
            &["direction=\"HtoD\""]
        ),
        Some(3.0)
    );
    // Labels from the fake /proc and pods directory.
    let labels_100 = [
        "pid=\"100\"",
        "comm=\"python3\"",
        "namespace=\"ml\"",
        "pod=\"trainer-0\"",
        "gpu=\"0,2\"",
        "qos=\"burstable\"",
        "direction=\"HtoD\"",
        "host_kind=\"pageable\"",
    ];
    assert_eq!(
        value(&m, "pinwise_transfers_total", &labels_100),
        Some(6.0),
        "{m}"
    );
    let labels_101 = ["pid=\"101\"", "gpu=\"\"", "namespace=\"\"", "pod=\"\""];
    assert_eq!(value(&m, "pinwise_transfers_total", &labels_101), Some(1.0));
    assert_eq!(value(&m, "pinwise_ringbuf_drops_total", &[]), Some(7.0));

    // The table holds 2: a third live process gets no summary (node totals only)...
    sink.process_enrolled(102, 0, "late");
    sink.events(&[upload(102, 0x30000, 0xa000, 10, None)]);
    agent.tick();
    let m = get_metrics(agent.local_addr());
    assert_eq!(
        value(&m, "pinwise_processes_untracked_total", &[]),
        Some(1.0)
    );
    assert_eq!(value(&m, "pinwise_transfers_total", &["pid=\"102\""]), None);
    // ...until one exits: then the exited one is evicted for a newcomer.
    sink.process_exited(101, 2);
    fake_process(&proc_root, 103, "next", "/system.slice/next.service", &[1]);
    sink.process_enrolled(103, 0, "next");
    sink.events(&[upload(103, 0x30000, 0xa000, 10, None)]);
    agent.tick();
    let m = get_metrics(agent.local_addr());
    assert_eq!(value(&m, "pinwise_processes_evicted_total", &[]), Some(1.0));
    assert_eq!(value(&m, "pinwise_transfers_total", &["pid=\"101\""]), None);
    assert_eq!(
        value(&m, "pinwise_transfers_total", &["pid=\"103\"", "gpu=\"1\""]),
        Some(1.0)
    );
    // Node totals keep the evicted process's and the untracked process's copies.
    // (100: 6, 101: 1, 103: 1 pageable; 102, without a summary: unknown.)
    let node = |kind: &str| {
        value(
            &m,
            "pinwise_node_transfers_total",
            &["direction=\"HtoD\"", &format!("host_kind=\"{kind}\"")],
        )
    };
    assert_eq!(node("pageable"), Some(8.0));
    assert_eq!(node("unknown"), Some(1.0));

    // The rescan probes a library it has not probed, once.
    assert_eq!(agent.rescan(), 1);
    assert_eq!(agent.rescan(), 0);
    assert_eq!(shared.lock().unwrap().probed.len(), 1);
    agent.stop().unwrap();
    assert!(shared.lock().unwrap().stopped);
}

/// A collector that is down: the push fails, is counted in the metrics, and nothing else
/// is affected (the scrape still answers, the agent stops cleanly).
#[cfg(feature = "otlp")]
#[test]
fn a_failed_otlp_push_is_counted_and_harms_nothing() {
    // A port nobody listens on: the connection is refused at once.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let dir = tempfile::tempdir().unwrap();
    let shared = Arc::new(Mutex::new(Shared::default()));
    let config = AgentConfig {
        node: "n1".into(),
        listen: "127.0.0.1:0".parse().unwrap(),
        rescan_every: None,
        otlp: Some(pinwise_agent::otlp::OtlpConfig {
            endpoint: format!("http://127.0.0.1:{port}"),
            interval: Duration::from_secs(3600),
        }),
        ..AgentConfig::default()
    };
    let probe = ProcFs {
        proc_root: dir.path().to_path_buf(),
        attach_ticks: 0,
        cgroups: CgroupResolver::new(None),
        pods: PodResolver::new(None),
    };
    let (agent, _sink) = Agent::with_backend(
        config,
        Box::new(FakeTracer(Arc::clone(&shared))),
        Box::new(probe),
        Box::new(FakeScan),
    )
    .unwrap();
    let before = get_metrics(agent.local_addr());
    assert_eq!(
        value(
            &before,
            "pinwise_otlp_exports_total",
            &["result=\"failed\""]
        ),
        Some(0.0)
    );
    agent.flush_otlp();
    let after = get_metrics(agent.local_addr());
    assert_eq!(
        value(&after, "pinwise_otlp_exports_total", &["result=\"failed\""]),
        Some(1.0),
        "{after}"
    );
    assert_eq!(
        value(&after, "pinwise_otlp_exports_total", &["result=\"ok\""]),
        Some(0.0)
    );
    agent.stop().unwrap();
    assert!(shared.lock().unwrap().stopped);
}

/// Every series the cardinality cap allows reaches the collector: 220 processes with
/// copies in 10 (direction, host kind) cells each make 2200 points of
/// `pinwise_transfers`, above the OpenTelemetry SDK's default limit of 2000 per
/// instrument, and none is folded into an overflow point.
#[cfg(feature = "otlp")]
#[test]
fn otlp_carries_every_series_the_cap_allows() {
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    use prost::Message;

    let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
    let port = server.server_addr().to_ip().unwrap().port();
    let bodies: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    {
        let (server, bodies) = (Arc::clone(&server), Arc::clone(&bodies));
        std::thread::spawn(move || {
            for mut req in server.incoming_requests() {
                let mut body = Vec::new();
                let _ = req.as_reader().read_to_end(&mut body);
                bodies.lock().unwrap().push(body);
                let _ = req.respond(tiny_http::Response::empty(200));
            }
        });
    }
    let dir = tempfile::tempdir().unwrap();
    let config = AgentConfig {
        node: "n1".into(),
        listen: "127.0.0.1:0".parse().unwrap(),
        rescan_every: None,
        max_series_processes: 250,
        otlp: Some(pinwise_agent::otlp::OtlpConfig {
            endpoint: format!("http://127.0.0.1:{port}"),
            interval: Duration::from_secs(3600),
        }),
        ..AgentConfig::default()
    };
    let probe = ProcFs {
        proc_root: dir.path().to_path_buf(),
        attach_ticks: 0,
        cgroups: CgroupResolver::new(None),
        pods: PodResolver::new(None),
    };
    let (agent, mut sink) = Agent::with_backend(
        config,
        Box::new(FakeTracer(Arc::default())),
        Box::new(probe),
        Box::new(FakeScan),
    )
    .unwrap();
    const PROCESSES: u32 = 220;
    let mut evs = Vec::new();
    for pid in 1..=PROCESSES {
        sink.process_enrolled(pid, 0, "w");
        // Pinned and registered ranges, then copies of every direction from pageable,
        // pinned and registered memory.
        for (start, kind) in [
            (0x10000u64, pinwise_core::HostMemKind::PinnedAlloc),
            (0x20000, pinwise_core::HostMemKind::Registered),
        ] {
            evs.push(Event::new(
                1,
                pid,
                pid,
                ProbeKind::Uprobe,
                EventKind::Alloc {
                    start,
                    size: 0x1000,
                    kind,
                    flags: 0,
                },
            ));
        }
        for d in Direction::ALL {
            for host in [0x10000u64, 0x20000, 0x90000] {
                evs.push(copy(d, pid, host, 0xd000, 64, None));
            }
        }
    }
    sink.events(&evs);
    agent.flush_otlp();
    let bodies = bodies.lock().unwrap();
    let mut points = 0;
    let mut overflow = 0;
    for b in bodies.iter() {
        let req = ExportMetricsServiceRequest::decode(&b[..]).expect("an OTLP request");
        for m in req
            .resource_metrics
            .iter()
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| &s.metrics)
            .filter(|m| m.name == "pinwise_transfers")
        {
            let Some(Data::Sum(sum)) = &m.data else {
                panic!("pinwise_transfers is a sum")
            };
            for p in &sum.data_points {
                points += 1;
                if p.attributes
                    .iter()
                    .any(|kv| kv.key == "otel.metric.overflow")
                {
                    overflow += 1;
                }
            }
        }
    }
    // Per process: DtoD copies are `none`; HtoD, DtoH, HtoH each pageable, pinned,
    // registered: 1 + 3 * 3 = 10 cells.
    let cells_per_process = 10;
    assert_eq!(overflow, 0);
    assert_eq!(points, PROCESSES as usize * cells_per_process);
    assert!(
        points > 2000,
        "the test must exceed the SDK's default limit"
    );
    agent.stop().unwrap();
}
