//! What an append of a periodic binary dump costs (`BinaryAppender`: pinwise-preload's
//! history written every second, `pinwise trace --dump-every`): bytes written and time spent
//! encoding (the history's lock is held for that time), per append, against a one-shot dump
//! of the same history. Synthetic histories (`pinwise_core::synth`, and hand-made events):
//! CPU-side figures, nothing about a GPU.
//!
//! Run: `cargo run --release -p pinwise-core --example append_cost`.
//!
//! Scenarios:
//! - **churn**: the synthetic stream of `core-performance.md` (100 000 allocations,
//!   1 000 000 events, 4096 live at once), appended every 100 000 events (ten appends);
//! - **many live, few touched**: 100 000 allocations all live; each round copies into 100
//!   of them (10 copies each) and appends;
//! - **hot buffers at the cap**: 64 live buffers each holding 1024 events (the default
//!   per-allocation cap), each copied into again every round (the largest an append of
//!   these records gets).

use std::time::Instant;

use pinwise_core::event::{Direction, Event, EventKind, HostMemKind, HostState, ProbeKind};
use pinwise_core::format::{binary, BinaryAppender};
use pinwise_core::history::{HistoryConfig, MemHistory};
use pinwise_core::synth::{SynthConfig, SynthEvents};
use pinwise_core::tag::Site;

const PID: u32 = 42;

fn alloc(ts: u64, start: u64, size: u64) -> Event {
    Event::new(
        ts,
        PID,
        PID,
        ProbeKind::InProcessHook,
        EventKind::Alloc {
            start,
            size,
            kind: HostMemKind::Pageable,
            flags: 0,
        },
    )
    .with_site(Site::UNKNOWN)
}

fn copy(ts: u64, host: u64) -> Event {
    Event::new(
        ts,
        PID,
        PID,
        ProbeKind::InProcessHook,
        EventKind::Transfer {
            direction: Direction::HtoD,
            host,
            device: 0xd000_0000,
            bytes: 4096,
            is_async: false,
            stream: 0,
            host_state: HostState::Pageable,
        },
    )
}

/// Appends after each round, printing bytes and encoding time per append.
fn report(
    name: &str,
    h: &mut MemHistory,
    rounds: usize,
    mut round: impl FnMut(&mut MemHistory, usize),
) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut app = BinaryAppender::create(dir.path().join("a.bin")).expect("create");
    let mut rows = Vec::new();
    for r in 0..=rounds {
        if r > 0 {
            round(h, r);
        }
        let t = Instant::now();
        let e = app.encode(h).expect("encode");
        let ns = t.elapsed().as_nanos() as f64;
        rows.push((e.len(), e.records(), ns));
        app.write(e, false).expect("write");
    }
    let t = Instant::now();
    let whole = binary::to_bytes(h).len();
    let whole_ns = t.elapsed().as_nanos() as f64;
    println!("\n## {name}\n");
    println!(
        "history: {} records, {} live, {} events retained; one-shot dump {} bytes in {:.2} ms",
        h.len(),
        h.live_count(),
        h.stats().events_retained,
        whole,
        whole_ns / 1e6
    );
    println!("\n| append | bytes | records | encode (ms) |\n|---|---|---|---|");
    for (i, (bytes, records, ns)) in rows.iter().enumerate() {
        println!("| {} | {bytes} | {records} | {:.3} |", i + 1, ns / 1e6);
    }
}

fn main() {
    // churn
    let mut h = MemHistory::new(HistoryConfig::default());
    let events: Vec<Event> = SynthEvents::new(
        SynthConfig {
            allocations: 100_000,
            events: 1_000_000,
            live_window: 4096,
            ..SynthConfig::default()
        },
        &h.modules(),
    )
    .collect();
    let chunks: Vec<&[Event]> = events.chunks(100_000).collect();
    h.ingest_batch(chunks[0]);
    report(
        "churn: 100 000 allocations, 1 000 000 events, 4096 live; an append every 100 000 events",
        &mut h,
        chunks.len() - 1,
        |h, r| h.ingest_batch(chunks[r]),
    );

    // many live, few touched
    let mut h = MemHistory::new(HistoryConfig::default());
    let base = |i: u64| 0x1000_0000_0000 + (i << 20);
    let mut ts = 1_000;
    for i in 0..100_000 {
        ts += 10;
        h.ingest(&alloc(ts, base(i), 1 << 19));
    }
    report(
        "many live, few touched: 100 000 live allocations; 100 of them copied into 10 times a round",
        &mut h,
        5,
        |h, r| {
            for k in 0..100u64 {
                for _ in 0..10 {
                    ts += 10;
                    h.ingest(&copy(ts, base((k * 997 + r as u64 * 7919) % 100_000)));
                }
            }
        },
    );

    // hot buffers at the cap
    let mut h = MemHistory::new(HistoryConfig::default());
    let mut ts = 1_000;
    for i in 0..64 {
        ts += 10;
        h.ingest(&alloc(ts, base(i), 1 << 19));
        for _ in 0..1100 {
            ts += 10;
            h.ingest(&copy(ts, base(i)));
        }
    }
    report(
        "hot buffers at the cap: 64 live buffers of 1024 retained events, each copied into every round",
        &mut h,
        5,
        |h, _| {
            for i in 0..64 {
                ts += 10;
                h.ingest(&copy(ts, base(i)));
            }
        },
    );
}
