//! deploy/ checked offline, so that it cannot go stale:
//! - the Kubernetes manifest parses and follows a strict schema of the Namespace and
//!   DaemonSet fields it uses (deploy/kubernetes/schema/, types and enums as in the
//!   Kubernetes OpenAPI), keeps least privilege (not privileged; capabilities BPF, PERFMON,
//!   SYS_RESOURCE only; host paths read-only), and passes only flags `pinwise agent`
//!   accepts; where `kubernetes-validate` (PyPI) is installed, it validates against the
//!   official schemas too;
//! - the systemd unit starts `pinwise agent` with flags it accepts;
//! - the Grafana dashboard parses, has the fields Grafana needs, and queries only metric
//!   names the agent exports (taken from a rendered scrape, not a list kept by hand).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use pinwise_agent::cgroup::parse_path;
use pinwise_agent::metrics::{render, Snapshot, METRIC_NAMES};
use pinwise_agent::process::{HostKind, ProcessSummary};
use pinwise_core::Direction;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Every sample name a scrape of a busy agent shows (counters with `_total`).
fn exported_names() -> BTreeSet<String> {
    let mut s = Snapshot {
        node: "n".into(),
        // `pinwise agent --pool`, the service answering: its gauges are on the list too.
        pool: Some(Some(pinwise_pool::Stats {
            clients: 2,
            bytes: 1 << 30,
            ..Default::default()
        })),
        ..Snapshot::default()
    };
    let mut rows = Vec::new();
    for pid in 1..=3 {
        let mut p = ProcessSummary::new(pid, "p".into(), parse_path("/docker/x"), false);
        for k in [HostKind::Pageable, HostKind::Pinned] {
            let c = &mut p.copies[Direction::HtoD.index()][k as usize];
            c.transfers = 1;
            c.bytes = 10 * u64::from(pid);
            c.est_seconds = 1e-6;
            c.saving_seconds = 1e-7;
        }
        p.redundant[0].fingerprinted = 2;
        p.redundant[0].transfers = 1;
        p.redundant[0].bytes = 10;
        p.redundant[0].est_seconds = 1e-6;
        rows.push(p);
    }
    s.totals.copies = rows[0].copies;
    s.totals.redundant = rows[0].redundant;
    s.otlp_exports = Some((3, 1));
    // A cap of 2 makes the `other` series too.
    s.set_rows(rows.iter(), 2, 0);
    render(&s)
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap().to_string())
        .collect()
}

#[test]
fn the_metric_name_list_is_what_a_scrape_shows() {
    let exported = exported_names();
    let listed: BTreeSet<String> = METRIC_NAMES.iter().map(|s| s.to_string()).collect();
    assert_eq!(exported, listed);
}

/// The long flags `pinwise agent --help` lists.
fn agent_flags() -> BTreeSet<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_pinwise"))
        .args(["agent", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with("--"))
        .map(|w| {
            w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
                .to_string()
        })
        .collect()
}

fn check_flags(args: &[String], flags: &BTreeSet<String>, what: &str) {
    for a in args.iter().filter(|a| a.starts_with("--")) {
        let name = a.split('=').next().unwrap();
        assert!(
            flags.contains(name),
            "{what}: `pinwise agent` has no {name}"
        );
    }
}

#[test]
fn the_daemonset_is_valid_least_privilege_and_uses_real_flags() {
    let text = read("deploy/kubernetes/daemonset.yaml");
    let schema: serde_json::Value = serde_json::from_str(&read(
        "deploy/kubernetes/schema/daemonset-minimal.schema.json",
    ))
    .unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v: serde_json::Value = serde::Deserialize::deserialize(doc).expect("YAML parses");
        let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{}: {errors:#?}", v["kind"]);
        docs.push(v);
    }
    let ds = docs
        .iter()
        .find(|d| d["kind"] == "DaemonSet")
        .expect("a DaemonSet");
    assert!(docs
        .iter()
        .any(|d| d["kind"] == "Namespace" && d["metadata"]["name"] == ds["metadata"]["namespace"]));
    // The selector selects the pods.
    let sel = ds["spec"]["selector"]["matchLabels"].as_object().unwrap();
    for (k, v) in sel {
        assert_eq!(&ds["spec"]["template"]["metadata"]["labels"][k], v);
    }
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostPID"], true);
    let c = &pod["containers"][0];
    let sc = &c["securityContext"];
    assert_eq!(sc["privileged"], false);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    let added: BTreeSet<&str> = sc["capabilities"]["add"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(added, BTreeSet::from(["BPF", "PERFMON", "SYS_RESOURCE"]));
    for m in c["volumeMounts"].as_array().unwrap() {
        assert_eq!(m["readOnly"], true, "{m}");
    }
    // Every mount has its volume, and every volume is mounted.
    let volumes: BTreeSet<&str> = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    let mounts: BTreeSet<&str> = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(volumes, mounts);
    let args: Vec<String> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    check_flags(&args, &agent_flags(), "the DaemonSet");
    // It listens where the port and the scrape annotation say.
    let port = c["ports"][0]["containerPort"].as_u64().unwrap();
    assert!(
        args.contains(&format!("--listen=0.0.0.0:{port}")),
        "{args:?}"
    );
    assert_eq!(
        ds["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"],
        port.to_string()
    );
    // The libcuda it probes, the cgroupfs and pods directory it reads are in read-only
    // mounts.
    for flag in ["--libcuda=", "--cgroupfs=", "--pods-dir="] {
        let path = args.iter().find_map(|a| a.strip_prefix(flag)).unwrap();
        assert!(
            c["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| path.starts_with(m["mountPath"].as_str().unwrap())),
            "{flag}{path} is in no mount"
        );
    }

    // The official schemas, where kubernetes-validate is installed.
    let kv = std::env::var_os("PINWISE_KUBERNETES_VALIDATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("kubernetes-validate"));
    match Command::new(&kv)
        .args(["--strict", "-k", "1.33.0"])
        .arg(repo().join("deploy/kubernetes/daemonset.yaml"))
        .output()
    {
        Ok(out) => assert!(
            out.status.success(),
            "kubernetes-validate: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(_) => eprintln!(
            "NOTE: kubernetes-validate (PyPI) not installed: the official-schema check was not run"
        ),
    }
}

#[test]
fn the_systemd_unit_starts_the_agent_with_real_flags() {
    let unit = read("deploy/systemd/pinwise-agent.service");
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let words: Vec<String> = exec.split_whitespace().map(String::from).collect();
    assert!(
        words[0].ends_with("/pinwise") && words[1] == "agent",
        "{exec}"
    );
    check_flags(&words[2..], &agent_flags(), "the systemd unit");
    assert!(unit.contains("ExecReload=/bin/kill -HUP $MAINPID"));
    assert!(unit.contains("KillSignal=SIGTERM"));
}

#[test]
fn the_dashboard_queries_only_exported_metrics() {
    let text = read("deploy/grafana/pinwise-agent.json");
    let d: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    for key in ["uid", "title", "schemaVersion", "panels", "templating"] {
        assert!(d.get(key).is_some(), "the dashboard lacks {key}");
    }
    let exported = exported_names();
    let mut exprs: Vec<String> = Vec::new();
    let mut ids = BTreeSet::new();
    for p in d["panels"].as_array().unwrap() {
        assert!(
            ids.insert(p["id"].as_u64().expect("panel id")),
            "duplicate id"
        );
        for key in ["type", "title", "gridPos", "targets"] {
            assert!(p.get(key).is_some(), "panel {} lacks {key}", p["title"]);
        }
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "panel {} has no query", p["title"]);
        for t in targets {
            exprs.push(t["expr"].as_str().expect("a PromQL expr").to_string());
        }
    }
    for v in d["templating"]["list"].as_array().unwrap() {
        if let Some(q) = v["query"]["query"].as_str() {
            exprs.push(q.to_string());
        }
    }
    let mut used = BTreeSet::new();
    for e in &exprs {
        let mut rest = e.as_str();
        while let Some(at) = rest.find("pinwise_") {
            let name: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(
                exported.contains(&name),
                "the dashboard queries {name}, which the agent does not export (in `{e}`)"
            );
            used.insert(name.clone());
            rest = &rest[at + name.len()..];
        }
    }
    assert!(used.len() >= 10, "the dashboard uses few metrics: {used:?}");
}
