//! The allocator on the CPU stand-in for libcuda.so.1 (a TEST FIXTURE: device memory is host
//! memory, pinning is mlock, asynchronous copies run on the stand-in's stream threads).
//! Nothing here measures time.

use std::sync::Arc;

use pinwise_alloc::backend::cuda::CudaBackend;
use pinwise_alloc::{AllocFlags, DevicePtr, EngineConfig, HostAllocator, PinBackend, StreamHandle};
use pinwise_core::{CostModel, ModuleId, Policy, Site};
use pinwise_cuda::{DeviceBuffer, Driver, Stream};
use pinwise_testkit::StandinLibs;

const KIB: usize = 1024;
const MIB: usize = 1 << 20;

fn standin() -> (StandinLibs, Arc<CudaBackend>) {
    let libs = StandinLibs::new();
    let driver = Arc::new(Driver::load_from(&libs.libcuda()).expect("load the stand-in"));
    let backend = CudaBackend::on_device(&driver, 0).expect("stand-in device 0");
    assert!(backend.is_fixture(), "{}", backend.describe());
    assert!(backend.describe().contains("TEST FIXTURE"));
    (libs, Arc::new(backend))
}

fn allocator(backend: &Arc<CudaBackend>, budget: u64) -> HostAllocator {
    let mut c = EngineConfig::new(Policy::new(CostModel::builtin()));
    c.budget_bytes = Some(budget);
    HostAllocator::new(backend.clone(), c).unwrap()
}

fn site(n: u64) -> Site {
    Site {
        module: ModuleId(1),
        offset: n,
    }
}

#[test]
fn copies_round_trip_and_hot_buffers_end_up_pinned() {
    if !pinwise_testkit::require_locked_memory(
        "copies_round_trip_and_hot_buffers_end_up_pinned",
        16 * MIB as u64,
    ) {
        return;
    }
    let (_libs, backend) = standin();
    let alloc = allocator(&backend, 256 * MIB as u64);
    let dev = DeviceBuffer::new(backend.context(), 8 * MIB).unwrap();
    let d = DevicePtr(dev.ptr().0);
    let mut pinned_seen = false;
    for round in 0..4u8 {
        let mut a = alloc.alloc_at(8 * MIB, site(1), AllocFlags::NONE).unwrap();
        pinned_seen |= a.is_pinned();
        a.as_mut_slice().fill(round);
        for _ in 0..8 {
            a.copy_to_device(d).unwrap();
        }
        let mut b = alloc.alloc_at(8 * MIB, site(2), AllocFlags::NONE).unwrap();
        b.copy_from_device(d).unwrap();
        assert!(b.as_slice().iter().all(|&x| x == round));
    }
    assert!(pinned_seen, "the hot site was pinned: {:?}", alloc.stats());
    let st = alloc.stats();
    assert!(st.promotions + st.pool_hits > 0, "{st:?}");
}

/// The driver refuses to pin (here: the pages were already registered by "the program"):
/// the allocation stays pageable, the failure is counted, nothing breaks.
#[test]
fn pinning_failure_on_the_driver_falls_back_to_pageable() {
    if !pinwise_testkit::require_locked_memory(
        "pinning_failure_on_the_driver_falls_back_to_pageable",
        64 * MIB as u64,
    ) {
        return;
    }
    let (_libs, backend) = standin();
    let alloc = allocator(&backend, 1 << 30);
    let dev = DeviceBuffer::new(backend.context(), 64 * MIB).unwrap();
    let d = DevicePtr(dev.ptr().0);
    let mut a = alloc.alloc_at(64 * MIB, site(3), AllocFlags::NONE).unwrap();
    assert!(!a.is_pinned());
    // SAFETY: the buffer's pages are ours and stay mapped until we unregister below.
    unsafe { backend.register(a.as_mut_ptr(), 64 * MIB).unwrap() };
    for _ in 0..4 {
        a.copy_to_device(d).unwrap();
    }
    let st = alloc.stats();
    assert_eq!(st.promotions, 0);
    assert_eq!(
        st.fallbacks, 1,
        "the refused promotion is counted once: {st:?}"
    );
    assert!(!a.is_pinned());
    assert_eq!(
        alloc.engine().budget().reserved(),
        0,
        "its budget was given back"
    );
    // SAFETY: registered above.
    unsafe { backend.unregister(a.as_mut_ptr()).unwrap() };
    // Invalid CUDA flags for a required pinned allocation: a clean error.
    let r = alloc.engine().alloc_with_cuda_flags(
        4096,
        site(4),
        AllocFlags::REQUIRE_PINNED,
        0xffff_0000,
    );
    assert!(r.is_err());
}

/// 16 threads allocating and freeing, with asynchronous copies on their own streams, on a
/// tight budget: data intact, budget held, nothing left pinned or locked at the end.
#[test]
fn sixteen_threads_with_async_copies_on_the_standin() {
    if !pinwise_testkit::require_locked_memory(
        "sixteen_threads_with_async_copies_on_the_standin",
        48 * MIB as u64,
    ) {
        return;
    }
    let (_libs, backend) = standin();
    set_async_delay_us(&backend, 200);
    let budget = 48 * MIB as u64;
    let alloc = allocator(&backend, budget);
    std::thread::scope(|s| {
        for t in 0..16u64 {
            let (alloc, backend) = (&alloc, &backend);
            s.spawn(move || {
                let ctx = backend.context();
                let stream = Stream::new(ctx).unwrap();
                let sh = StreamHandle(stream.handle() as u64);
                let dev = DeviceBuffer::new(ctx, 4 * MIB).unwrap();
                let d = DevicePtr(dev.ptr().0);
                let sizes = [4 * KIB, 96 * KIB, MIB, 4 * MIB];
                for i in 0..60u64 {
                    let size = sizes[((i + t) % 4) as usize];
                    let mut out = alloc
                        .alloc_at(size, site(100 * t + i % 3), AllocFlags::NONE)
                        .unwrap();
                    let pattern = (t as u8).wrapping_mul(37).wrapping_add(i as u8);
                    out.as_mut_slice().fill(pattern);
                    out.copy_to_device(d).unwrap();
                    let mut back = alloc
                        .alloc_at(size, site(100 * t + 50), AllocFlags::NONE)
                        .unwrap();
                    // SAFETY: `back` is not touched until the stream is synchronized below.
                    unsafe { back.copy_from_device_async(d, sh).unwrap() };
                    if i % 3 != 0 {
                        for _ in 0..6 {
                            // SAFETY: `out` is not written until it is dropped.
                            unsafe { out.copy_to_device_async(d, sh).unwrap() };
                        }
                    }
                    // Drop `out` while its async copies may still run: the pool must not
                    // hand its block to another thread until they completed.
                    drop(out);
                    stream.synchronize().unwrap();
                    assert!(
                        back.as_slice().iter().all(|&b| b == pattern),
                        "thread {t} round {i}: data corrupted"
                    );
                }
            });
        }
    });
    let st = alloc.stats();
    assert!(st.pinned_bytes_peak <= budget, "{st:?}");
    assert_eq!(st.live_allocations, 0);
    assert!(st.pinned_allocations > 0, "{st:?}");
    alloc.engine().trim();
    assert_eq!(alloc.stats().pinned_bytes, 0);
    set_async_delay_us(&backend, 0);
}

/// Makes the stand-in sleep before each queued asynchronous copy, so that a block reused
/// before its copies completed would show corrupted data.
fn set_async_delay_us(backend: &CudaBackend, us: u64) {
    let f = backend
        .context()
        .driver()
        .symbol_address("pinwise_standin_set_async_delay_us")
        .expect("the stand-in exports its delay knob");
    // SAFETY: the stand-in exports `extern "C" fn(u64)` under this name.
    let f: extern "C" fn(u64) = unsafe { std::mem::transmute(f) };
    f(us);
}
