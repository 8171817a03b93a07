//! How many events per second the tracer's user-space side handles: decoding ring-buffer
//! records, translating them into events (call sites resolved against this process's
//! maps, copy directions), and feeding the history. No BPF involved: this is the ceiling
//! on the sustained event rate that the consumer thread imposes, whatever the probes cost.
//!
//! `cargo bench -p pinwise-trace --bench consumer`

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use pinwise_core::{HistoryConfig, MemHistory, ModuleTable, SharedHistory};
use pinwise_trace::raw::{self, kinds, memtypes, CopyRecord, Header, RangeRecord};
use pinwise_trace::sites::SiteResolver;
use pinwise_trace::translate::Translator;

const RECORDS: usize = 10_000;

fn bytes_of<T: Copy>(value: &T) -> Vec<u8> {
    let size = std::mem::size_of::<T>();
    let mut out = vec![0u8; size];
    // SAFETY: T is a plain #[repr(C)] record of integers (generated from
    // pinwise_events.h); copying its bytes is sound and `out` has exactly its size.
    unsafe {
        std::ptr::copy_nonoverlapping((value as *const T).cast::<u8>(), out.as_mut_ptr(), size)
    };
    out
}

/// A host allocation, then `RECORDS` copies from it, as the ring buffer would carry them.
fn records() -> Vec<Vec<u8>> {
    let pid = std::process::id();
    let call_site = records as *const () as u64 + 16;
    let header = |kind, ts| Header {
        ts_ns: ts,
        pid,
        tid: pid,
        kind,
        ..Header::default()
    };
    let mut out = vec![bytes_of(&RangeRecord {
        h: header(kinds::HOST_ALLOC, 1),
        addr: 0x7000_0000,
        len: 1 << 20,
        call_site,
        site_source: raw::site_sources::RUNTIME,
        ..RangeRecord::default()
    })];
    for i in 0..RECORDS as u64 {
        out.push(bytes_of(&CopyRecord {
            h: header(kinds::COPY, 2 + i),
            dst: 0xd000_0000,
            src: 0x7000_0000 + (i % 256) * 4096,
            bytes: 4096,
            call_site,
            dst_type: memtypes::DEVICE,
            src_type: memtypes::HOST,
            ..CopyRecord::default()
        }));
    }
    out
}

fn consumer(c: &mut Criterion) {
    let input = records();
    let mut group = c.benchmark_group("consumer");
    group.throughput(Throughput::Elements(input.len() as u64));
    // One translator for all iterations (its maps snapshot and module entries are made
    // once, as in a long trace); a fresh history each time.
    let modules = ModuleTable::shared();
    let mut translator = Translator::new(SiteResolver::new(modules.clone()));
    group.bench_function("decode_translate_ingest", |b| {
        b.iter_batched(
            || {
                SharedHistory::from_history(MemHistory::with_modules(
                    HistoryConfig::default(),
                    modules.clone(),
                ))
            },
            |history| {
                let mut events = Vec::with_capacity(input.len());
                for bytes in &input {
                    let raw = raw::decode(bytes).expect("valid record");
                    translator.translate(&raw, &mut events);
                }
                history.ingest_batch(&events);
                history
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, consumer);
criterion_main!(benches);
