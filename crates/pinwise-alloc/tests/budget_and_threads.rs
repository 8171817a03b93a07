//! The budget is never exceeded, under any interleaving of threads; many threads allocating,
//! copying asynchronously and freeing neither deadlock nor corrupt each other's data.
//! On the mock backend (a test fixture), which counts the bytes actually page-locked.

use std::sync::Arc;

use pinwise_alloc::testing::MockBackend;
use pinwise_alloc::{
    AllocFlags, EngineConfig, HostAllocator, HostBuffer, PinBackend, StreamHandle,
};
use pinwise_core::{CostModel, ModuleId, Policy, Site};
use proptest::prelude::*;

const KIB: usize = 1024;
const MIB: usize = 1 << 20;

fn allocator(mock: &Arc<MockBackend>, budget: u64) -> HostAllocator {
    let mut c = EngineConfig::new(Policy::new(CostModel::builtin()));
    c.budget_bytes = Some(budget);
    HostAllocator::new(mock.clone(), c).unwrap()
}

fn site(n: u64) -> Site {
    Site {
        module: ModuleId(1),
        offset: n,
    }
}

#[derive(Debug, Clone)]
struct Op {
    site: u64,
    size: usize,
    transfers: u32,
    require_pinned: bool,
    keep: bool,
}

fn op() -> impl Strategy<Value = Op> {
    (
        0u64..6,
        prop::sample::select(vec![4 * KIB, 64 * KIB, 300 * KIB, MIB, 3 * MIB, 8 * MIB]),
        0u32..24,
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.4),
    )
        .prop_map(|(site, size, transfers, require_pinned, keep)| Op {
            site,
            size,
            transfers,
            require_pinned,
            keep,
        })
}

/// Runs `ops` on one thread: allocate, copy (half of them asynchronously), keep a few
/// buffers alive for a while, free.
fn run_ops(alloc: &HostAllocator, mock: &MockBackend, thread: u64, ops: &[Op]) {
    let dev = mock.alloc_device(8 * MIB);
    let stream = StreamHandle(100 + thread);
    let mut kept: Vec<HostBuffer> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let flags = if op.require_pinned {
            AllocFlags::REQUIRE_PINNED
        } else {
            AllocFlags::NONE
        };
        let b = match alloc.alloc_at(op.size, site(thread * 10 + op.site), flags) {
            Ok(b) => b,
            // Required pinned memory may be refused when the budget is full: that is the
            // contract, not a failure.
            Err(pinwise_alloc::AllocError::PinningUnavailable { .. }) => continue,
            Err(e) => panic!("unexpected allocation error: {e}"),
        };
        for t in 0..op.transfers {
            if t % 2 == 0 {
                b.copy_to_device(dev).unwrap();
            } else {
                // SAFETY: the buffer is not written before the stream is synchronized or the
                // buffer dropped (the engine then waits for the copy).
                unsafe { b.copy_to_device_async(dev, stream).unwrap() };
            }
        }
        if op.keep {
            kept.push(b);
        }
        if kept.len() > 3 || (i % 7 == 6 && !kept.is_empty()) {
            kept.remove(0);
        }
    }
    drop(kept);
    mock.synchronize_stream(stream).unwrap();
    mock.free_device(dev);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Whatever the threads do, the bytes actually page-locked never exceed the budget.
    #[test]
    fn budget_is_never_exceeded(
        budget_mib in 1u64..24,
        ops in prop::collection::vec(prop::collection::vec(op(), 1..40), 4),
    ) {
        let budget = budget_mib * MIB as u64;
        let mock = Arc::new(MockBackend::new());
        let alloc = allocator(&mock, budget);
        std::thread::scope(|s| {
            for (t, ops) in ops.iter().enumerate() {
                let (alloc, mock) = (&alloc, &mock);
                s.spawn(move || run_ops(alloc, mock, t as u64, ops));
            }
        });
        prop_assert!(mock.peak_pinned_bytes() <= budget,
            "pinned {} > budget {}", mock.peak_pinned_bytes(), budget);
        prop_assert!(alloc.engine().budget().peak() <= budget);
        drop(alloc);
        prop_assert_eq!(mock.pinned_bytes(), 0, "everything unpinned at the end");
    }
}

/// 16 threads allocating, copying synchronously and asynchronously and freeing, on a tight
/// budget: no deadlock, no corruption (each thread checks its data came back intact), the
/// budget held, everything unpinned at the end.
#[test]
fn sixteen_threads_with_async_copies() {
    let budget = 24 * MIB as u64;
    let mock = Arc::new(MockBackend::new());
    let alloc = allocator(&mock, budget);
    std::thread::scope(|s| {
        for t in 0..16u64 {
            let (alloc, mock) = (&alloc, &mock);
            s.spawn(move || {
                let dev = mock.alloc_device(4 * MIB);
                let stream = StreamHandle(1000 + t);
                let sizes = [4 * KIB, 64 * KIB, MIB, 4 * MIB];
                for i in 0..200u64 {
                    let size = sizes[((i + t) % 4) as usize];
                    let hot = i % 3 != 0;
                    let mut out = alloc
                        .alloc_at(size, site(t * 100 + i % 4), AllocFlags::NONE)
                        .unwrap();
                    let pattern = (t as u8).wrapping_mul(31).wrapping_add(i as u8);
                    out.as_mut_slice().fill(pattern);
                    out.copy_to_device(dev).unwrap();
                    let mut back = alloc
                        .alloc_at(size, site(t * 100 + 50), AllocFlags::NONE)
                        .unwrap();
                    // SAFETY: `back` is not touched until the stream is synchronized below.
                    unsafe { back.copy_from_device_async(dev, stream).unwrap() };
                    if hot {
                        for _ in 0..8 {
                            // SAFETY: `out` is not written until it is dropped.
                            unsafe { out.copy_to_device_async(dev, stream).unwrap() };
                        }
                    }
                    mock.synchronize_stream(stream).unwrap();
                    assert!(
                        back.as_slice().iter().all(|&b| b == pattern),
                        "thread {t} round {i}: data corrupted"
                    );
                    drop(out);
                    drop(back);
                }
                mock.free_device(dev);
            });
        }
    });
    assert!(mock.peak_pinned_bytes() <= budget);
    let stats = alloc.stats();
    assert_eq!(stats.live_allocations, 0);
    assert!(
        stats.pinned_allocations > 0,
        "hot buffers were pinned: {stats:?}"
    );
    drop(alloc);
    assert_eq!(mock.pinned_bytes(), 0);
}
