//! Shared by the `pinwise agent` tests: the workload (bench/gpu/agent/workload.c, built
//! against the CPU stand-in for libcuda, a TEST FIXTURE), the agent process, a minimal HTTP
//! GET, and test cgroups (cgroup v2).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pinwise_testkit::{compile_c_source, StandinLibs};

pub const WORKLOAD: &str = include_str!("../../../../bench/gpu/agent/workload.c");

/// Builds the workload against the stand-in libcuda.
pub fn build_workload(libs: &StandinLibs, dir: &Path) -> PathBuf {
    let exe = dir.join("workload");
    let mut args = libs.cuda_link_args();
    args.push("-lpthread".into());
    compile_c_source(WORKLOAD, &exe, &args);
    exe
}

/// A running `pinwise agent`, its stderr collected by a thread.
pub struct AgentProcess {
    pub child: Child,
    pub addr: String,
    pub log: Arc<Mutex<String>>,
}

impl AgentProcess {
    /// Starts `pinwise agent --libcuda <stand-in> --listen 127.0.0.1:0 ARGS` and waits
    /// until it serves metrics.
    pub fn start(libs: &StandinLibs, args: &[&str]) -> AgentProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_pinwise"))
            .arg("agent")
            .arg("--libcuda")
            .arg(libs.libcuda())
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting pinwise agent");
        let mut lines = BufReader::new(child.stderr.take().unwrap());
        let mut log = String::new();
        let addr = loop {
            let mut line = String::new();
            let n = lines.read_line(&mut line).unwrap();
            log.push_str(&line);
            assert!(n > 0, "pinwise agent ended before serving metrics:\n{log}");
            if let Some(rest) = line.split("metrics on http://").nth(1) {
                break rest.trim().trim_end_matches("/metrics").to_string();
            }
        };
        let log = Arc::new(Mutex::new(log));
        {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                let mut rest = String::new();
                let _ = lines.read_to_string(&mut rest);
                log.lock().unwrap().push_str(&rest);
            });
        }
        AgentProcess { child, addr, log }
    }

    pub fn metrics(&self) -> String {
        http_get(&self.addr, "/metrics")
            .unwrap_or_else(|e| panic!("GET /metrics: {e}\n{}", self.log.lock().unwrap()))
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET path` from `addr` (HTTP/1.0, whole body).
pub fn http_get(addr: &str, path: &str) -> Result<String, String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").map_err(|e| e.to_string())?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(|e| e.to_string())?;
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no HTTP header")?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        return Err(format!("{head}\n{body}"));
    }
    Ok(body.to_string())
}

/// Percent-encodes a query parameter.
pub fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The value of the sample of `name` whose labels include all of `labels`, summed.
pub fn sample_sum(metrics: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Where cgroup v2 is mounted (`/sys/fs/cgroup` on a pure v2 system), from /proc/mounts.
pub fn cgroup2_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(f[1]))
    })
}

/// A child cgroup made for a test, removed (its processes killed) when dropped.
pub struct TestCgroup {
    pub dir: PathBuf,
    /// Its path as /proc/PID/cgroup shows it (relative to the v2 mount).
    pub path: String,
}

impl TestCgroup {
    pub fn create(mount: &Path, name: &str) -> TestCgroup {
        let dir = mount.join(name);
        std::fs::create_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot create the cgroup {}: {e}", dir.display()));
        TestCgroup {
            dir,
            path: format!("/{name}"),
        }
    }

    /// `program args` started inside this cgroup (a shell moves itself in, then execs).
    pub fn command(&self, program: &Path) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg("echo $$ > \"$0\" && exec \"$@\"")
            .arg(self.dir.join("cgroup.procs"))
            .arg(program);
        c
    }

    pub fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// SIGKILL to every process in it; waits until it is empty.
    pub fn kill_all(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let pids = self.pids();
            if pids.is_empty() || Instant::now() > deadline {
                return;
            }
            for pid in pids {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        self.kill_all();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Sends `signal` to `child`.
pub fn signal(child: &Child, signal: i32) {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(child.id() as i32, signal) };
}

/// Waits for `child` up to `limit`; `None` if it is still running.
pub fn wait_timeout(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Latest value of each (metric name, sorted attributes).
type Points = std::collections::BTreeMap<(String, Vec<(String, String)>), f64>;

/// A test OTLP/HTTP receiver: decodes every `POST /v1/metrics` body as an
/// `ExportMetricsServiceRequest` (opentelemetry-proto, prost) and keeps the latest value
/// of each (metric name, attributes) data point (cumulative: the latest is the total).
pub struct OtlpReceiver {
    pub addr: String,
    latest: Arc<Mutex<Points>>,
    pub requests: Arc<Mutex<u64>>,
    server: Arc<tiny_http::Server>,
}

impl OtlpReceiver {
    pub fn start() -> OtlpReceiver {
        use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
        use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
        use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point::Value};
        use prost::Message;
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
        let addr = server.server_addr().to_ip().unwrap().to_string();
        let latest = Arc::new(Mutex::new(Points::new()));
        let requests = Arc::new(Mutex::new(0));
        {
            let (server, latest, requests) = (
                Arc::clone(&server),
                Arc::clone(&latest),
                Arc::clone(&requests),
            );
            std::thread::spawn(move || {
                for mut req in server.incoming_requests() {
                    let mut body = Vec::new();
                    let _ = req.as_reader().read_to_end(&mut body);
                    let ok = req.url() == "/v1/metrics";
                    if let (true, Ok(msg)) = (ok, ExportMetricsServiceRequest::decode(&body[..])) {
                        *requests.lock().unwrap() += 1;
                        let mut l = latest.lock().unwrap();
                        for rm in msg.resource_metrics {
                            for sm in rm.scope_metrics {
                                for m in sm.metrics {
                                    let points = match m.data {
                                        Some(Data::Sum(s)) => s.data_points,
                                        Some(Data::Gauge(g)) => g.data_points,
                                        _ => Vec::new(),
                                    };
                                    for p in points {
                                        let mut attrs: Vec<(String, String)> = p
                                            .attributes
                                            .iter()
                                            .map(|kv| {
                                                let v = match kv
                                                    .value
                                                    .as_ref()
                                                    .and_then(|v| v.value.as_ref())
                                                {
                                                    Some(Any::StringValue(s)) => s.clone(),
                                                    other => format!("{other:?}"),
                                                };
                                                (kv.key.clone(), v)
                                            })
                                            .collect();
                                        attrs.sort();
                                        let v = match p.value {
                                            Some(Value::AsInt(i)) => i as f64,
                                            Some(Value::AsDouble(d)) => d,
                                            None => f64::NAN,
                                        };
                                        l.insert((m.name.clone(), attrs), v);
                                    }
                                }
                            }
                        }
                    }
                    let status = if ok { 200 } else { 404 };
                    let _ = req.respond(tiny_http::Response::empty(status));
                }
            });
        }
        OtlpReceiver {
            addr,
            latest,
            requests,
            server,
        }
    }

    /// The sum of the latest values of `name`'s points whose attributes include `labels`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.latest
            .lock()
            .unwrap()
            .iter()
            .filter(|((n, attrs), _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| attrs.iter().any(|(ak, av)| ak == k && av == v))
            })
            .map(|(_, v)| *v)
            .sum()
    }

    /// How many points of `name` have attributes including `labels`.
    pub fn points(&self, name: &str, labels: &[(&str, &str)]) -> usize {
        self.latest
            .lock()
            .unwrap()
            .keys()
            .filter(|(n, attrs)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| attrs.iter().any(|(ak, av)| ak == k && av == v))
            })
            .count()
    }

    /// Every (name, attributes) seen, for messages.
    pub fn dump(&self) -> String {
        format!("{:#?}", self.latest.lock().unwrap())
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.server.unblock();
    }
}
