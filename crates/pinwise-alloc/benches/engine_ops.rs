//! What the allocator's bookkeeping costs per operation, on the mock backend (a test
//! fixture: no driver calls happen in these steady states, so the figures are the engine's
//! own work: locks, maps, predictor, policy). Results: bench/results/alloc-engine-overhead.md.
//!
//!   cargo bench -p pinwise-alloc --bench engine_ops

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use pinwise_alloc::testing::MockBackend;
use pinwise_alloc::{AllocFlags, Engine, EngineConfig};
use pinwise_core::{CostModel, Direction, ModuleId, Policy, Site};

fn engine() -> Engine {
    let mut c = EngineConfig::new(Policy::new(CostModel::builtin()));
    c.budget_bytes = Some(1 << 30);
    Engine::new(Arc::new(MockBackend::new()), c).unwrap()
}

fn site(n: u64) -> Site {
    Site {
        module: ModuleId(1),
        offset: n,
    }
}

/// A hot site: warmed up so that its allocations come pinned from the pool.
fn warm(e: &Engine, s: Site, size: usize) {
    for _ in 0..4 {
        let a = e.alloc(size, s, AllocFlags::NONE).unwrap();
        for _ in 0..16 {
            e.note_transfer(a.ptr, size, Direction::HtoD, None);
        }
        // SAFETY: allocated above.
        unsafe { e.free(a.ptr).unwrap() };
    }
}

/// The bench alloc matrix's h1 c8 r1 iteration without its copies: one hot buffer (two
/// notes) and eight cold ones (the first noted once), each allocated, filled and freed;
/// `alloc`/`free` are the strategy's.
fn iteration(
    size: usize,
    alloc: &mut dyn FnMut(usize, usize) -> *mut u8,
    note: &mut dyn FnMut(*mut u8, Direction),
    free: &mut dyn FnMut(*mut u8),
) {
    let mut ptrs = [std::ptr::null_mut(); 9];
    for (role, p) in ptrs.iter_mut().enumerate() {
        *p = alloc(size, role);
    }
    for &p in &ptrs {
        // SAFETY: a live allocation of `size` bytes.
        unsafe { std::ptr::write_bytes(p, 1, size) };
    }
    note(ptrs[0], Direction::HtoD);
    note(ptrs[0], Direction::DtoH);
    note(ptrs[1], Direction::HtoD);
    for p in ptrs {
        free(black_box(p));
    }
}

/// Per-allocation cost at small sizes against plain `malloc` (what the pageable strategy
/// of `bench alloc` does), alone and in a matrix iteration.
fn small_sizes(c: &mut Criterion) {
    for size in [4096usize, 16384] {
        let kib = size >> 10;
        c.bench_function(&format!("malloc+free {kib} KiB (libc, baseline)"), |b| {
            b.iter(|| {
                // SAFETY: malloc/free of a fresh block.
                unsafe {
                    let p = libc::malloc(black_box(size));
                    libc::free(black_box(p));
                }
            })
        });
        let e = engine();
        c.bench_function(&format!("alloc+free {kib} KiB (pageable, heap)"), |b| {
            b.iter(|| {
                let a = e.alloc(size, site(1), AllocFlags::NONE).unwrap();
                // SAFETY: allocated just above.
                unsafe { e.free(black_box(a.ptr)).unwrap() };
            })
        });
        c.bench_function(
            &format!("matrix iteration h1 c8 r1 {kib} KiB, no copies (libc malloc)"),
            |b| {
                b.iter(|| {
                    iteration(
                        size,
                        // SAFETY: malloc of a non-zero size; checked below by the fill.
                        &mut |s, _| unsafe { libc::malloc(s) as *mut u8 },
                        &mut |_, _| {},
                        // SAFETY: from the malloc above, freed once.
                        &mut |p| unsafe { libc::free(p as *mut libc::c_void) },
                    )
                })
            },
        );
        let e = engine();
        c.bench_function(
            &format!("matrix iteration h1 c8 r1 {kib} KiB, no copies (engine, adaptive)"),
            |b| {
                b.iter(|| {
                    iteration(
                        size,
                        &mut |s, role| {
                            e.alloc(s, site(100 + role as u64), AllocFlags::NONE)
                                .unwrap()
                                .ptr
                        },
                        &mut |p, d| {
                            e.note_transfer(p, size, d, None);
                        },
                        // SAFETY: allocated by this engine in this iteration, freed once.
                        &mut |p| unsafe { e.free(p).unwrap() },
                    )
                })
            },
        );
    }
}

fn bench(c: &mut Criterion) {
    let e = engine();
    c.bench_function("alloc+free 4 KiB (pageable, heap)", |b| {
        b.iter(|| {
            let a = e.alloc(4096, site(1), AllocFlags::NONE).unwrap();
            // SAFETY: allocated just above.
            unsafe { e.free(black_box(a.ptr)).unwrap() };
        })
    });
    warm(&e, site(2), 1 << 20);
    c.bench_function(
        "alloc + 16 notes + free, 1 MiB hot (pinned, pool hit)",
        |b| {
            b.iter(|| {
                let a = e.alloc(1 << 20, site(2), AllocFlags::NONE).unwrap();
                assert!(a.pinned);
                for _ in 0..16 {
                    e.note_transfer(a.ptr, 1 << 20, Direction::HtoD, None);
                }
                // SAFETY: allocated just above.
                unsafe { e.free(black_box(a.ptr)).unwrap() };
            })
        },
    );
    c.bench_function("alloc+free 1 MiB required pinned (pool hit)", |b| {
        b.iter(|| {
            let a = e
                .alloc(1 << 20, site(5), AllocFlags::REQUIRE_PINNED)
                .unwrap();
            // SAFETY: allocated just above.
            unsafe { e.free(black_box(a.ptr)).unwrap() };
        })
    });
    let pinned = e.alloc(1 << 20, site(2), AllocFlags::NONE).unwrap();
    c.bench_function("note_transfer (pinned block)", |b| {
        b.iter(|| e.note_transfer(black_box(pinned.ptr), 1 << 20, Direction::HtoD, None))
    });
    let small = e.alloc(4096, site(3), AllocFlags::NONE).unwrap();
    c.bench_function("note_transfer (pageable heap)", |b| {
        b.iter(|| e.note_transfer(black_box(small.ptr), 4096, Direction::HtoD, None))
    });
    let mapped = e.alloc(256 << 10, site(4), AllocFlags::NEVER_PIN).unwrap();
    c.bench_function("note_transfer (pageable mapping, never pinned)", |b| {
        b.iter(|| e.note_transfer(black_box(mapped.ptr), 4096, Direction::HtoD, None))
    });
    // SAFETY: allocated above.
    unsafe {
        e.free(pinned.ptr).unwrap();
        e.free(small.ptr).unwrap();
        e.free(mapped.ptr).unwrap();
    }
}

criterion_group!(benches, bench, small_sizes);
criterion_main!(benches);
