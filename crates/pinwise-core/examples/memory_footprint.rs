//! Measures what a history costs in memory and ingest time, with a counting global
//! allocator: a history of 1 million allocations and 10 million events (the issue's
//! figures), and the same allocations all live at once.
//!
//! Run: `cargo run --release -p pinwise-core --example memory_footprint`
//! (arguments: allocations, events, live window; defaults 1000000 10000000 4096).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};
use std::time::Instant;

use pinwise_core::history::{HistoryConfig, MemHistory};
use pinwise_core::synth::{SynthConfig, SynthEvents};
use pinwise_core::tag::ModuleTable;

/// Counts live heap bytes and their peak.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn note(delta: isize) {
    let now = LIVE.fetch_add(delta, Ordering::Relaxed) + delta;
    if now > 0 {
        PEAK.fetch_max(now as usize, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to the system allocator with the caller's arguments
// unchanged, and only adds bookkeeping on atomics (which never allocate).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours, forwarded.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            note(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc`/`realloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) };
        note(-(layout.size() as isize));
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours, forwarded.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            note(layout.size() as isize);
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` and `layout` are the caller's, valid per the GlobalAlloc contract.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            note(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live() -> usize {
    LIVE.load(Ordering::Relaxed).max(0) as usize
}

fn measure(label: &str, cfg: SynthConfig) {
    let modules = ModuleTable::shared();
    // Time the generator alone, to subtract it from the ingest run.
    let t = Instant::now();
    let generated = SynthEvents::new(cfg, &modules).fold(0u64, |n, e| n + (e.ts_ns & 1));
    let gen_s = t.elapsed().as_secs_f64();
    std::hint::black_box(generated);

    let before = live();
    PEAK.store(before, Ordering::Relaxed);
    let mut h = MemHistory::with_modules(HistoryConfig::default(), modules.clone());
    let t = Instant::now();
    let mut events = 0u64;
    let mut stream = SynthEvents::new(cfg, &modules);
    for e in &mut stream {
        h.ingest(&e);
        events += 1;
    }
    let total_s = t.elapsed().as_secs_f64();
    drop(stream);
    let peak = PEAK.load(Ordering::Relaxed) - before;
    let heap = live() - before;
    let s = *h.stats();
    let m = h.memory_usage();
    let records = h.len() as f64;
    let retained = s.events_retained as f64;
    let ingest_s = (total_s - gen_s).max(1e-9);
    println!("== {label}");
    println!(
        "workload: {} allocations requested, {} live window; {} events ingested, {} retained, {} records",
        cfg.allocations, cfg.live_window, events, s.events_retained, h.len()
    );
    println!(
        "ingest: {:.2} s with the generator, generator alone {:.2} s => {:.2} M events/s ingest (one thread)",
        total_s,
        gen_s,
        events as f64 / ingest_s / 1e6
    );
    println!(
        "heap held by the history (counting allocator): {} bytes = {:.1} MiB; peak while ingesting {:.1} MiB; live records at the end {}",
        heap,
        heap as f64 / (1 << 20) as f64,
        peak as f64 / (1 << 20) as f64,
        h.live_count()
    );
    println!(
        "  records      {:>12} bytes  {:>6.2} bytes/record",
        m.records,
        m.records as f64 / records
    );
    println!(
        "  event arena  {:>12} bytes  {:>6.2} bytes/retained event ({} bytes of encoded events: {:.2} bytes/event)",
        m.event_arena,
        m.event_arena as f64 / retained,
        m.event_bytes_used,
        m.event_bytes_used as f64 / retained
    );
    println!("  rank index   {:>12} bytes", m.rank_index);
    println!("  tables       {:>12} bytes", m.tables);
    println!("  capped       {:>12} bytes", m.capped_counters);
    let other = heap as i64
        - (m.records + m.event_arena + m.rank_index + m.tables + m.capped_counters) as i64;
    println!(
        "  the rest     {:>12} bytes  (live-address index, process list, hash-map slack)",
        other
    );
    let per_record = (heap - m.event_arena) as f64 / records;
    let per_event = m.event_arena as f64 / retained;
    println!(
        "per allocation record, everything but the arena: {:.2} bytes; per retained event, the arena: {:.2} bytes",
        per_record, per_event
    );
    println!(
        "budget check: heap {} <= 32 x records + 16 x events = {}: {}",
        heap,
        32 * h.len() as u64 + 16 * s.events_retained,
        heap as u64 <= 32 * h.len() as u64 + 16 * s.events_retained
    );
    let t = Instant::now();
    let mut n = 0;
    for _ in 0..100 {
        n += h.hotspots(10).len();
    }
    println!(
        "hotspots(10): {:.1} us per call (mean of 100, {} results each)",
        t.elapsed().as_secs_f64() / 100.0 * 1e6,
        n / 100
    );
    println!();
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let allocations = args.first().copied().unwrap_or(1_000_000);
    let events = args.get(1).copied().unwrap_or(10_000_000);
    let window = args.get(2).copied().unwrap_or(4096) as usize;
    println!("pinwise-core memory footprint (synthetic workload, seed 1; not a GPU measurement)\n");
    measure(
        "churn: allocations freed as they go",
        SynthConfig {
            allocations,
            events,
            live_window: window,
            ..SynthConfig::default()
        },
    );
    measure(
        "all allocations live at once (window = allocations; all freed by the end)",
        SynthConfig {
            allocations,
            events,
            live_window: allocations as usize,
            ..SynthConfig::default()
        },
    );
}
