//! Measures what a history costs in memory and ingest time, with a counting global
//! allocator: a history of 1 million allocations and 10 million events (the issue's
//! figures), and the same allocations all live at once.
//!
//! Run: `cargo run --release -p pinwise-core --example memory_footprint`
//! (arguments: allocations, events, live window, scenarios `churn`, `live` or `both`;
//! defaults 1000000 10000000 4096 both).
//!
//! Ingest rates are given twice: per second of wall time, and per second this thread spent
//! on a CPU (from `/proc/thread-self/schedstat`), which is what "on one core" means on a
//! machine shared with other work. Only ingestion is timed (events are generated a million
//! at a time into a buffer first).

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

/// Nanoseconds this thread has spent on a CPU (0 if the kernel does not say).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn measure(label: &str, cfg: SynthConfig) {
    let modules = ModuleTable::shared();
    let before = live();
    PEAK.store(before, Ordering::Relaxed);
    let mut h = MemHistory::with_modules(HistoryConfig::default(), modules.clone());
    // The stream is generated a million events at a time into a buffer; only ingesting
    // the buffer is timed. The buffer is freed before the heap is measured (the peak
    // below includes it: 1 M events of 88 bytes).
    let mut stream = SynthEvents::new(cfg, &modules);
    let mut buffer: Vec<pinwise_core::event::Event> = Vec::with_capacity(1 << 20);
    let (mut wall_s, mut cpu_ns, mut events) = (0.0f64, 0u64, 0u64);
    loop {
        buffer.clear();
        buffer.extend(stream.by_ref().take(1 << 20));
        if buffer.is_empty() {
            break;
        }
        let t = Instant::now();
        let c = thread_cpu_ns();
        h.ingest_batch(&buffer);
        cpu_ns += thread_cpu_ns() - c;
        wall_s += t.elapsed().as_secs_f64();
        events += buffer.len() as u64;
    }
    let buffer_bytes = buffer.capacity() * std::mem::size_of::<pinwise_core::event::Event>();
    drop(buffer);
    drop(stream);
    let peak = PEAK.load(Ordering::Relaxed) - before;
    let heap = live() - before;
    let s = *h.stats();
    let m = h.memory_usage();
    let records = h.len() as f64;
    let retained = s.events_retained as f64;
    println!("== {label}");
    println!(
        "workload: {} allocations requested, {} live window; {} events ingested, {} retained, {} records",
        cfg.allocations, cfg.live_window, events, s.events_retained, h.len()
    );
    println!(
        "ingest: {:.2} s wall => {:.2} M events/s; {:.2} s on a CPU => {:.2} M events/s on one core",
        wall_s,
        events as f64 / wall_s / 1e6,
        cpu_ns as f64 / 1e9,
        events as f64 / (cpu_ns as f64 / 1e9).max(1e-9) / 1e6
    );
    println!(
        "heap held by the history (counting allocator): {} bytes = {:.1} MiB; peak while ingesting {:.1} MiB ({:.1} MiB of it the event buffer); live records at the end {}",
        heap,
        heap as f64 / (1 << 20) as f64,
        peak as f64 / (1 << 20) as f64,
        buffer_bytes as f64 / (1 << 20) as f64,
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
    let which = std::env::args().nth(4).unwrap_or_else(|| "both".into());
    println!("pinwise-core memory footprint (synthetic workload, seed 1; not a GPU measurement)\n");
    if which != "live" {
        measure(
            "churn: allocations freed as they go",
            SynthConfig {
                allocations,
                events,
                live_window: window,
                ..SynthConfig::default()
            },
        );
    }
    if which != "churn" {
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
}
