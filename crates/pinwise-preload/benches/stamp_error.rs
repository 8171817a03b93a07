//! How far event stamps converted to `CLOCK_MONOTONIC` ns ([`stamp`]) fall from the clock:
//! the library's own stamp and conversion code (its `stamp` and `cycles` modules, compiled
//! in here), driven as the drain drives it. For `STAMP_ERROR_SECS` seconds (default 10),
//! every 10 ms a collection starts (an anchor), and in between samples are taken: the
//! ordered counter read on both sides of a clock read. At each collection the samples
//! before it are converted, as the drain converts the events it ingests, and compared with
//! their clock read; a sample whose two counter reads are more than 2 µs apart (preempted)
//! is left out. Prints the distribution of the error, ns, less each sample's own
//! uncertainty (half the counter's span around the clock read, in ns).
//!
//! ```sh
//! cargo bench -p pinwise-preload --bench stamp_error
//! ```
// The modules are compiled here for a part of their code (and their tests module without a
// harness to run it).
#![allow(dead_code, unused_imports)]

#[path = "../src/cycles.rs"]
mod cycles;
#[path = "../src/stamp.rs"]
mod stamp;

use pinwise_core::units::monotonic_ns;

fn main() {
    let secs: u64 = std::env::var("STAMP_ERROR_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    stamp::choose(false);
    if let Err(why) = stamp::source() {
        println!(
            "stamps read the clock here ({}): nothing to convert",
            why.describe()
        );
        return;
    }
    let mut conv = stamp::Converter::new();
    // (counter before, clock, counter after)
    let mut samples: Vec<(u64, u64, u64)> = Vec::new();
    let mut errors: Vec<u64> = Vec::new();
    let mut raw: Vec<u64> = Vec::new();
    let mut spans: Vec<u64> = Vec::new();
    let mut skipped = 0u64;
    let mut ns_per_tick = 0.0f64;
    let begin = monotonic_ns();
    let end = begin + secs * 1_000_000_000;
    let mut next = 0;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let first = loop {
        if let (_, Some(a)) = stamp::collection_start() {
            break a;
        }
    };
    conv.add(first);
    let mut last_stamp = 0;
    let mut missed = 0u64;
    loop {
        let now = monotonic_ns();
        if now >= next {
            // As the drain: an interrupted anchor is not added.
            match stamp::collection_start() {
                (_, Some(a)) => {
                    conv.add(a);
                    if a.ns > first.ns + 1_000_000 {
                        ns_per_tick = (a.ns - first.ns) as f64 / (a.ticks - first.ticks) as f64;
                    }
                }
                (_, None) => missed += 1,
            }
            for (t0, ns, t1) in samples.drain(..) {
                let span_ns = ((t1 - t0) as f64 * ns_per_tick) as u64;
                if ns_per_tick == 0.0 || span_ns > 2_000 {
                    skipped += 1;
                    continue;
                }
                last_stamp = t0 + (t1 - t0) / 2;
                let c = conv.convert(last_stamp);
                errors.push(c.abs_diff(ns).saturating_sub(span_ns / 2));
                raw.push(c.abs_diff(ns));
                spans.push(span_ns);
            }
            conv.forget_below(last_stamp);
            if now >= end {
                break;
            }
            next = now + 10_000_000;
        }
        let t0 = stamp::now();
        let ns = monotonic_ns();
        let t1 = stamp::now();
        samples.push((t0, ns, t1));
        // 0 to 255 µs to the next sample, spinning (a sleep would wake on a tick).
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let until = monotonic_ns() + (rng % 256) * 1_000;
        while monotonic_ns() < until {
            std::hint::spin_loop();
        }
    }
    errors.sort_unstable();
    raw.sort_unstable();
    spans.sort_unstable();
    let q = |v: &[u64], p: f64| v[((v.len() - 1) as f64 * p) as usize];
    println!(
        "{} samples over {secs} s ({skipped} preempted left out), counter {:.4} ns per tick",
        errors.len(),
        ns_per_tick
    );
    println!(
        "error beyond the sample's own uncertainty, ns: median {} p90 {} p99 {} max {}",
        q(&errors, 0.5),
        q(&errors, 0.9),
        q(&errors, 0.99),
        errors.last().unwrap()
    );
    println!(
        "|converted - clock read|, ns: median {} p90 {} p99 {} max {}",
        q(&raw, 0.5),
        q(&raw, 0.9),
        q(&raw, 0.99),
        raw.last().unwrap()
    );
    println!(
        "the sample's span (counter reads around the clock read), ns: median {} max {}",
        q(&spans, 0.5),
        spans.last().unwrap()
    );
    let s = conv.stats();
    println!(
        "anchors {} ({missed} interrupted, not taken); largest distance of an anchor from \
         the line extrapolated to it: {} ns",
        s.anchors, s.check_max_ns
    );
}
