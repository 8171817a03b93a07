//! Criterion benchmarks of copy fingerprints on the CPU: the sampled and the full
//! fingerprint of a 4 KiB, 1 MiB and 64 MiB buffer, and the redundancy tracker's work per
//! copy. This is the CPU part of what `pinwise run` adds per copy (the GPU machine's
//! figures, hook included, come from bench/gpu/redundant/run.sh).
//!
//! Run: `cargo bench -p pinwise-core --bench fingerprint`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pinwise_core::event::Direction;
use pinwise_core::fingerprint::{full, sampled, CopyObservation, Fingerprint, RedundancyTracker};

fn hashes(c: &mut Criterion) {
    for (name, size) in [
        ("4KiB", 4usize << 10),
        ("1MiB", 1 << 20),
        ("64MiB", 64 << 20),
    ] {
        let buf: Vec<u8> = (0..size).map(|i| (i * 31) as u8).collect();
        let mut g = c.benchmark_group(format!("fingerprint_{name}"));
        g.throughput(Throughput::Bytes(size as u64));
        if size >= 64 << 20 {
            g.sample_size(10);
        }
        g.bench_function("sampled", |b| b.iter(|| sampled(black_box(&buf))));
        g.bench_function("full", |b| b.iter(|| full(black_box(&buf))));
        g.finish();
    }
}

fn tracker(c: &mut Criterion) {
    // 1024 host buffers uploaded in turn to their own device ranges: every copy after the
    // first round is compared with a device range's content and found redundant.
    let mut t = RedundancyTracker::new();
    let mut i = 0u64;
    c.bench_function("tracker_observe_upload", |b| {
        b.iter(|| {
            i += 1;
            let k = i % 1024;
            black_box(t.observe(&CopyObservation {
                pid: 1,
                record: k as u32,
                host_offset: 0,
                device: 0xd000_0000 + k * (1 << 20),
                bytes: 1 << 20,
                direction: Direction::HtoD,
                fingerprint: Fingerprint {
                    sampled: k,
                    full: None,
                },
            }))
        })
    });
}

criterion_group!(benches, hashes, tracker);
criterion_main!(benches);
