//! Criterion benchmarks of pinwise-core: ingest rate, queries on a history of 1 million
//! allocations and 10 million events, dump formats, and the policy's per-allocation cost.
//!
//! Run: `cargo bench -p pinwise-core --bench core` (set `PINWISE_BENCH_QUICK=1` to build
//! the large history at a tenth of the size). Memory per record and per event is measured
//! by `cargo run --release -p pinwise-core --example memory_footprint`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use pinwise_core::cost::{CostModel, PinMethod};
use pinwise_core::event::{Direction, Event};
use pinwise_core::format::{binary, json};
use pinwise_core::history::{HistoryConfig, MemHistory};
use pinwise_core::policy::{PinRequest, Policy, PredictedTransfers};
use pinwise_core::profile::Profile;
use pinwise_core::synth::{SynthConfig, SynthEvents};

/// The workload of the figures: 1 M allocations, 10 M events, 4096 live at once.
fn large() -> SynthConfig {
    let scale = if std::env::var_os("PINWISE_BENCH_QUICK").is_some() {
        10
    } else {
        1
    };
    SynthConfig {
        allocations: 1_000_000 / scale,
        events: 10_000_000 / scale,
        live_window: 4096,
        ..SynthConfig::default()
    }
}

/// A history of the stream `cfg`, cut 1 % before its end so that a window of allocations
/// is still live (the stream frees everything by its end).
fn build(cfg: SynthConfig) -> MemHistory {
    let mut h = MemHistory::new(HistoryConfig::default());
    let modules = h.modules();
    for e in SynthEvents::new(cfg, &modules).take((cfg.events - cfg.events / 100) as usize) {
        h.ingest(&e);
    }
    h
}

fn ingest(c: &mut Criterion) {
    // 1 M events (100 k allocations) generated once; each iteration ingests them into a
    // fresh history on one thread.
    let cfg = SynthConfig {
        allocations: 100_000,
        events: 1_000_000,
        live_window: 4096,
        ..SynthConfig::default()
    };
    let modules = pinwise_core::tag::ModuleTable::shared();
    let events: Vec<Event> = SynthEvents::new(cfg, &modules).collect();
    let mut g = c.benchmark_group("ingest");
    g.throughput(Throughput::Elements(events.len() as u64));
    g.sample_size(20);
    g.bench_function("synthetic_1M_events_4096_live", |b| {
        b.iter_batched(
            || MemHistory::with_modules(HistoryConfig::default(), modules.clone()),
            |mut h| {
                h.ingest_batch(&events);
                h
            },
            BatchSize::LargeInput,
        )
    });
    // 100 k allocations all live at once: a large live-address index.
    let all_live: Vec<Event> = SynthEvents::new(
        SynthConfig {
            live_window: 100_000,
            ..cfg
        },
        &modules,
    )
    .collect();
    g.bench_function("synthetic_1M_events_100k_live", |b| {
        b.iter_batched(
            || MemHistory::with_modules(HistoryConfig::default(), modules.clone()),
            |mut h| {
                h.ingest_batch(&all_live);
                h
            },
            BatchSize::LargeInput,
        )
    });
    // The same events with a small cap: the capped path (side-table counters).
    g.bench_function("synthetic_1M_events_cap_4", |b| {
        b.iter_batched(
            || {
                MemHistory::with_modules(
                    HistoryConfig {
                        max_events_per_allocation: 4,
                        ..HistoryConfig::default()
                    },
                    modules.clone(),
                )
            },
            |mut h| {
                h.ingest_batch(&events);
                h
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

fn queries(c: &mut Criterion) {
    let cfg = large();
    let h = build(cfg);
    eprintln!(
        "query history: {} records, {} live, {} events retained",
        h.len(),
        h.live_count(),
        h.stats().events_retained
    );
    let mut g = c.benchmark_group("queries_1M_allocations_10M_events");
    g.bench_function("hotspots_10", |b| {
        b.iter(|| black_box(h.hotspots(black_box(10))).len())
    });
    g.bench_function("coldspots_10", |b| {
        b.iter(|| black_box(h.coldspots(black_box(10))).len())
    });
    g.bench_function("hotspots_100_infos", |b| {
        b.iter(|| {
            h.hotspots(100)
                .iter()
                .map(|v| v.info().bytes_transferred)
                .sum::<u64>()
        })
    });
    let top = h.hotspots(1)[0].transfer_count();
    g.bench_function("hotspots_threshold_top_half", |b| {
        b.iter(|| black_box(h.hotspots_threshold(black_box(top / 2))).len())
    });
    let live: Vec<(u32, u64)> = h
        .allocations()
        .filter(|v| v.state() == pinwise_core::history::AllocState::Live)
        .take(1000)
        .map(|v| (v.pid(), v.start() + v.size() / 2))
        .collect();
    assert_eq!(live.len(), 1000, "the query history has live allocations");
    g.bench_function("lookup_interior_pointer_x1000", |b| {
        b.iter(|| {
            live.iter()
                .filter(|(pid, addr)| h.lookup(*pid, *addr).is_some())
                .count()
        })
    });
    g.sample_size(10);
    let cost = CostModel::builtin();
    g.bench_function("summary", |b| {
        b.iter(|| black_box(h.summary(&cost)).records)
    });
    g.finish();
}

fn formats(c: &mut Criterion) {
    let h = build(SynthConfig {
        allocations: 100_000,
        events: 1_000_000,
        live_window: 4096,
        ..SynthConfig::default()
    });
    let bin = binary::to_bytes(&h);
    let text = json::to_string(&h);
    eprintln!(
        "dumps of 100k allocations / 1M events: binary {} bytes, JSON {} bytes",
        bin.len(),
        text.len()
    );
    let mut g = c.benchmark_group("formats_100k_allocations_1M_events");
    g.sample_size(10);
    g.throughput(Throughput::Elements(h.stats().events_retained));
    g.bench_function("binary_write", |b| b.iter(|| binary::to_bytes(&h).len()));
    g.bench_function("binary_read", |b| {
        b.iter(|| binary::read(&bin).unwrap().len())
    });
    g.bench_function("json_write", |b| b.iter(|| json::to_string(&h).len()));
    g.bench_function("json_read", |b| {
        b.iter(|| json::read(text.as_bytes()).unwrap().len())
    });
    g.bench_function("profile_from_history", |b| {
        b.iter(|| Profile::from_history(&h).entries.len())
    });
    g.finish();
}

fn policy(c: &mut Criterion) {
    let policy = Policy::new(CostModel::builtin());
    let mut g = c.benchmark_group("policy");
    let req = PinRequest {
        size: 24 << 20,
        transfers: PredictedTransfers::none()
            .with(Direction::HtoD, 7.0, 24 << 20)
            .with(Direction::DtoH, 2.0, 1 << 20),
        remaining_budget: 1 << 30,
        method: PinMethod::RegisterTouched,
    };
    g.bench_function("decide", |b| b.iter(|| policy.decide(black_box(&req)).pin));
    let h = build(SynthConfig {
        allocations: 20_000,
        events: 200_000,
        ..SynthConfig::default()
    });
    let profile = Profile::from_history(&h);
    let e = profile.entries[profile.entries.len() / 2].clone();
    let key = profile.modules[e.module as usize].key.clone();
    g.bench_function("profile_lookup_by_key", |b| {
        b.iter(|| {
            profile
                .lookup(black_box(&key), e.offset, e.call_no)
                .is_some()
        })
    });
    g.bench_function("profile_lookup_by_module_index", |b| {
        b.iter(|| {
            profile
                .lookup_in(black_box(e.module), e.offset, e.call_no)
                .is_some()
        })
    });
    g.sample_size(10);
    g.bench_function("plan_20k_tags_1GiB", |b| {
        b.iter(|| {
            pinwise_core::decide::plan::PinPlan::new(&profile, &policy, 1 << 30)
                .pinned()
                .count()
        })
    });
    g.finish();
}

criterion_group!(benches, ingest, queries, formats, policy);
criterion_main!(benches);
