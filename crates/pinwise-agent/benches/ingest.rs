//! The agent's CPU cost per event: `ProcessTable::ingest` of host-to-device copies, without
//! fingerprints, with fingerprints (each compared by the redundancy tracker), and the
//! scrape (`metrics::render` of a snapshot) with 200 process series. CPU only: these are
//! the agent's own costs, not a traced program's (its cost is the uprobe's).
//!
//!   cargo bench -p pinwise-agent --bench ingest

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use pinwise_agent::cgroup::{parse_path, CgroupInfo};
use pinwise_agent::metrics::{render, Snapshot};
use pinwise_agent::table::{ProcessProbe, ProcessTable, TableConfig};
use pinwise_core::fingerprint::Fingerprint;
use pinwise_core::{CostModel, Direction, Event, EventKind, HostState, ProbeKind};

#[derive(Debug)]
struct Probe;

impl ProcessProbe for Probe {
    fn describe(&mut self, pid: u32) -> Option<(String, CgroupInfo, bool)> {
        Some((
            format!("p{pid}"),
            parse_path(&format!("/bench/g{pid}")),
            false,
        ))
    }
}

/// `n` uploads over 8 processes, 64 host buffers and 64 device ranges each; with
/// fingerprints, half repeat their buffer's previous bytes.
fn events(n: u64, fingerprints: bool) -> Vec<Event> {
    (0..n)
        .map(|i| {
            let pid = 100 + (i % 8) as u32;
            let slot = (i / 8) % 64;
            let e = Event::new(
                i,
                pid,
                pid,
                ProbeKind::Uprobe,
                EventKind::Transfer {
                    direction: Direction::HtoD,
                    host: 0x10_0000 + slot * 0x1_0000,
                    device: 0x7f00_0000 + slot * 0x1_0000,
                    bytes: 65536,
                    is_async: false,
                    stream: 0,
                    host_state: HostState::Unknown,
                },
            );
            if fingerprints {
                e.with_fingerprint(Fingerprint {
                    sampled: (i / 1024) % 2,
                    full: None,
                })
            } else {
                e
            }
        })
        .collect()
}

fn ingest(c: &mut Criterion) {
    const N: u64 = 65_536;
    let mut g = c.benchmark_group("agent_ingest");
    g.throughput(Throughput::Elements(N));
    for (name, fp) in [("copies", false), ("copies_fingerprinted", true)] {
        let evs = events(N, fp);
        g.bench_function(name, |b| {
            b.iter_batched(
                || {
                    ProcessTable::new(
                        TableConfig::default(),
                        CostModel::builtin(),
                        Box::new(Probe),
                    )
                },
                |mut t| {
                    t.ingest(&evs, 1);
                    t
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

fn scrape(c: &mut Criterion) {
    let mut t = ProcessTable::new(
        TableConfig::default(),
        CostModel::builtin(),
        Box::new(Probe),
    );
    let evs: Vec<Event> = (0..200u32)
        .flat_map(|p| {
            events(16, true).into_iter().map(move |mut e| {
                e.pid = 1000 + p;
                e.tid = e.pid;
                e
            })
        })
        .collect();
    t.ingest(&evs, 1);
    c.bench_function("agent_scrape_200_processes", |b| {
        b.iter(|| {
            let mut s = Snapshot {
                node: "n".into(),
                ..Snapshot::default()
            };
            s.totals = t.totals().clone();
            s.set_rows(t.summaries(), 200, 0);
            render(&s).len()
        })
    });
}

criterion_group!(benches, ingest, scrape);
criterion_main!(benches);
