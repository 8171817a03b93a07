//! pinwise-cuda against the CPU stand-in for libcuda.so.1 (TEST FIXTURE, not a GPU): the
//! driver, devices, copies in every form, streams and events, typed errors.
//!
//! Pinned buffers stay small (well under 1 MiB each), so that all tests of this binary
//! together stay under the 8 MiB `RLIMIT_MEMLOCK` a non-root user usually has.

mod common;

use std::ffi::c_void;
use std::ptr::NonNull;

use common::{pattern, standin};
use pinwise_cuda::sys::*;
use pinwise_cuda::{
    CudaError, DeviceBuffer, DevicePtr, Driver, Event, HostRegistration, MemoryType,
    PinnedAllocator, PinnedHostRegion, ProcAddress, Stream,
};

const MIB: usize = 1 << 20;

#[test]
fn driver_and_device_report_the_standin() {
    let s = standin();
    assert_eq!(s.driver.version().unwrap(), 13000);
    assert_eq!(s.driver.device_count().unwrap(), 1);
    let marker = s
        .driver
        .standin_marker()
        .expect("the stand-in says what it is");
    assert!(marker.contains("TEST FIXTURE"), "{marker}");
    let dev = s.driver.device(0).unwrap();
    assert_eq!(
        dev.name().unwrap(),
        "pinwise CPU stand-in (test fixture, not a GPU)"
    );
    assert_eq!(dev.total_memory().unwrap(), 16384 * MIB);
    let pci = dev.pci_ids().unwrap();
    assert_eq!((pci.domain, pci.bus, pci.device), (0, 0xa0, 0));
    assert_eq!(dev.pci_bus_id().unwrap(), "0000:a0:00.0");
    assert_eq!(dev.compute_capability().unwrap(), (9, 0));
    assert_eq!(
        dev.attribute(CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED)
            .unwrap(),
        1
    );
    let err = s.driver.device(7).unwrap_err();
    assert_eq!(err.cuda_name(), Some("CUDA_ERROR_INVALID_DEVICE"));
}

#[test]
fn the_loaded_file_is_the_library_behind_the_link() {
    let s = standin();
    // Loaded through the `libcuda.so.1` link; the loader mapped the stand-in itself.
    assert!(s.driver.path().ends_with("libcuda.so.1"));
    assert_eq!(
        s.driver.loaded_file(),
        Some(std::fs::canonicalize(s.libs.cuda_standin()).unwrap())
    );
}

#[test]
fn sync_copies_move_the_right_bytes_both_ways() {
    let s = standin();
    let data = pattern(3 * MIB + 17, 1);
    let dev = DeviceBuffer::new(&s.ctx, data.len()).unwrap();

    // Pageable host memory.
    dev.copy_from_host(&data).unwrap();
    let mut back = vec![0u8; data.len()];
    dev.copy_to_host(&mut back).unwrap();
    assert!(back == data, "pageable round trip");

    // Pinned host memory, both allocators.
    let small = 256 * 1024 + 17;
    let mut pinned = PinnedHostRegion::new(&s.ctx, small, CU_MEMHOSTALLOC_PORTABLE).unwrap();
    assert_eq!(pinned.allocator(), PinnedAllocator::HostAlloc);
    pinned.as_mut_slice().copy_from_slice(&pattern(small, 2));
    dev.copy_from_host(pinned.as_slice()).unwrap();
    let mut other = PinnedHostRegion::alloc_host(&s.ctx, small).unwrap();
    dev.copy_to_host(other.as_mut_slice()).unwrap();
    assert!(other.as_slice() == pattern(small, 2), "pinned round trip");

    // Device to device, at an offset.
    let dev2 = DeviceBuffer::new(&s.ctx, data.len()).unwrap();
    // SAFETY: 100 bytes from offset 10 of `dev` into the start of `dev2`: both inside
    // buffers this test owns, which nothing else uses meanwhile.
    unsafe { s.ctx.copy_dtod(dev2.ptr(), dev.ptr().offset(10), 100) }.unwrap();
    let mut head = vec![0u8; 100];
    // SAFETY: the first 100 bytes of `dev2`, owned by this test.
    unsafe { s.ctx.copy_dtoh(&mut head, dev2.ptr()) }.unwrap();
    assert_eq!(head, pattern(small, 2)[10..110]);

    // Memset, raw and through the buffer.
    // SAFETY: bytes 5000..5100 of `dev2`, owned by this test.
    unsafe { s.ctx.memset_d8(dev2.ptr().offset(5000), 0x5a, 100) }.unwrap();
    // SAFETY: the same 100 bytes of `dev2`.
    unsafe { s.ctx.copy_dtoh(&mut head, dev2.ptr().offset(5000)) }.unwrap();
    assert!(head.iter().all(|&b| b == 0x5a));
    dev2.fill(0xab).unwrap();
    // SAFETY: as above.
    unsafe { s.ctx.copy_dtoh(&mut head, dev2.ptr().offset(5000)) }.unwrap();
    assert!(head.iter().all(|&b| b == 0xab));

    // The safe device-to-device form: a whole buffer into a larger one; not the reverse.
    let dev3 = DeviceBuffer::new(&s.ctx, data.len() + 64).unwrap();
    dev3.fill(0).unwrap();
    dev3.copy_from_device(&dev2).unwrap();
    let mut all = vec![0u8; data.len() + 64];
    dev3.copy_to_host(&mut all).unwrap();
    assert!(all[..data.len()].iter().all(|&b| b == 0xab));
    assert!(
        all[data.len()..].iter().all(|&b| b == 0),
        "only src.len() bytes copied"
    );
    assert!(matches!(
        dev2.copy_from_device(&dev3),
        Err(CudaError::InvalidArgument { .. })
    ));
}

#[test]
fn unified_cumemcpy_copies_in_every_direction() {
    let s = standin();
    let data = pattern(MIB, 3);
    let dev = DeviceBuffer::new(&s.ctx, MIB).unwrap();
    let mut back = vec![0u8; MIB];
    // SAFETY: both host buffers are valid for MIB bytes during the calls.
    unsafe {
        s.ctx.copy(dev.ptr().0, data.as_ptr() as u64, MIB).unwrap();
        s.ctx
            .copy(back.as_mut_ptr() as u64, dev.ptr().0, MIB)
            .unwrap();
    }
    assert!(back == data, "host -> device -> host through cuMemcpy");
    let mut copy = vec![0u8; 64];
    // SAFETY: as above (host to host).
    unsafe {
        s.ctx
            .copy(copy.as_mut_ptr() as u64, data.as_ptr() as u64, 64)
    }
    .unwrap();
    assert_eq!(copy, data[..64]);
}

#[test]
fn device_and_host_pointers_never_coincide() {
    let s = standin();
    let dev = DeviceBuffer::new(&s.ctx, MIB).unwrap();
    let host = vec![0u8; MIB];
    let pinned = PinnedHostRegion::alloc_host(&s.ctx, 64 * 1024).unwrap();
    let d = dev.ptr().0;
    for (h, len) in [
        (host.as_ptr() as u64, host.len() as u64),
        (pinned.as_ptr() as u64, pinned.len() as u64),
    ] {
        assert!(
            h + len <= d || d + MIB as u64 <= h,
            "host {h:#x}+{len} overlaps device {d:#x}"
        );
    }
    assert_eq!(s.ctx.memory_type(d).unwrap(), Some(MemoryType::Device));
    assert_eq!(
        s.ctx.memory_type(pinned.as_ptr() as u64 + 100).unwrap(),
        Some(MemoryType::Host)
    );
    assert_eq!(s.ctx.memory_type(host.as_ptr() as u64).unwrap(), None);
}

#[test]
fn async_copies_on_a_stream_complete_with_events() {
    let s = standin();
    let n = 256 * 1024;
    let stream = Stream::new(&s.ctx).unwrap();
    let (start, end) = (Event::new(&s.ctx).unwrap(), Event::new(&s.ctx).unwrap());
    let mut src = PinnedHostRegion::alloc_host(&s.ctx, n).unwrap();
    src.as_mut_slice().copy_from_slice(&pattern(n, 4));
    let dst = PinnedHostRegion::alloc_host(&s.ctx, n).unwrap();
    let dev = DeviceBuffer::new(&s.ctx, n).unwrap();
    start.record(&stream).unwrap();
    // SAFETY: both pinned regions outlive the stream synchronization below and are not
    // touched until then.
    unsafe {
        s.ctx
            .copy_htod_async(dev.ptr(), src.as_ptr(), n, &stream)
            .unwrap();
        s.ctx
            .copy_dtoh_async(dst.as_mut_ptr(), dev.ptr(), n, &stream)
            .unwrap();
    }
    end.record(&stream).unwrap();
    end.synchronize().unwrap();
    assert!(end.is_complete().unwrap());
    assert!(stream.is_complete().unwrap());
    assert!(dst.as_slice() == src.as_slice(), "async round trip");
    let ms = start.elapsed_ms(&end).unwrap();
    assert!(ms >= 0.0, "elapsed {ms} ms");

    // Pageable memory with the async forms (the driver copies before returning).
    let pageable = pattern(n, 5);
    let mut back = vec![0u8; n];
    // SAFETY: pageable memory is consumed before the call returns; synchronized below anyway.
    unsafe {
        s.ctx
            .copy_htod_async(dev.ptr(), pageable.as_ptr(), n, &stream)
            .unwrap();
        s.ctx
            .copy_dtoh_async(back.as_mut_ptr(), dev.ptr(), n, &stream)
            .unwrap();
    }
    stream.synchronize().unwrap();
    assert!(back == pageable);

    // Unified async copy and device to device on the legacy default stream.
    let default = Stream::default_stream(&s.ctx);
    let dev2 = DeviceBuffer::new(&s.ctx, n).unwrap();
    // SAFETY: all of `dev` into all of `dev2` (both n bytes), buffers this test owns and
    // uses only on this stream until the synchronization.
    unsafe { s.ctx.copy_dtod_async(dev2.ptr(), dev.ptr(), n, &default) }.unwrap();
    let out = PinnedHostRegion::alloc_host(&s.ctx, n).unwrap();
    // SAFETY: `out` is pinned and untouched until the synchronization.
    unsafe {
        s.ctx
            .copy_async(out.as_mut_ptr() as u64, dev2.ptr().0, n, &default)
            .unwrap()
    };
    default.synchronize().unwrap();
    assert!(out.as_slice() == pageable, "dtod + cuMemcpyAsync");
}

#[test]
fn a_stream_waits_for_an_event_recorded_on_another() {
    let s = standin();
    let n = 256 * 1024;
    let (a, b) = (Stream::new(&s.ctx).unwrap(), Stream::new(&s.ctx).unwrap());
    let done_on_a = Event::new(&s.ctx).unwrap();
    let mut src = PinnedHostRegion::alloc_host(&s.ctx, n).unwrap();
    src.as_mut_slice().copy_from_slice(&pattern(n, 6));
    let out = PinnedHostRegion::alloc_host(&s.ctx, n).unwrap();
    let dev = DeviceBuffer::new(&s.ctx, n).unwrap();
    // SAFETY: pinned regions live and are untouched until `b` is synchronized.
    unsafe {
        s.ctx
            .copy_htod_async(dev.ptr(), src.as_ptr(), n, &a)
            .unwrap();
        done_on_a.record(&a).unwrap();
        b.wait_event(&done_on_a).unwrap();
        s.ctx
            .copy_dtoh_async(out.as_mut_ptr(), dev.ptr(), n, &b)
            .unwrap();
    }
    b.synchronize().unwrap();
    assert!(out.as_slice() == src.as_slice());
}

#[test]
fn pitched_2d_and_3d_copies() {
    let s = standin();
    // 8 rows of 100 bytes from a host image with pitch 128 into device rows of pitch 256.
    let (width, height, host_pitch, dev_pitch) = (100usize, 8usize, 128usize, 256usize);
    let image = pattern(host_pitch * height, 7);
    let dev = DeviceBuffer::new(&s.ctx, dev_pitch * height).unwrap();
    dev.fill(0).unwrap();
    let up = CUDA_MEMCPY2D {
        srcMemoryType: CU_MEMORYTYPE_HOST,
        srcHost: image.as_ptr() as *const c_void,
        srcPitch: host_pitch,
        dstMemoryType: CU_MEMORYTYPE_DEVICE,
        dstDevice: dev.ptr().0,
        dstPitch: dev_pitch,
        WidthInBytes: width,
        Height: height,
        ..Default::default()
    };
    // SAFETY: `image` is valid for the rows described.
    unsafe { s.ctx.copy_2d(&up) }.unwrap();
    let mut flat = vec![0u8; dev_pitch * height];
    dev.copy_to_host(&mut flat).unwrap();
    for row in 0..height {
        assert_eq!(
            flat[row * dev_pitch..row * dev_pitch + width],
            image[row * host_pitch..row * host_pitch + width]
        );
        assert!(flat[row * dev_pitch + width..(row + 1) * dev_pitch]
            .iter()
            .all(|&b| b == 0));
    }

    // 3D: 2 slices of 3 rows of 10 bytes, packed on the device, back into a padded host box.
    let packed = pattern(2 * 3 * 10, 8);
    let dev3 = DeviceBuffer::new(&s.ctx, packed.len()).unwrap();
    dev3.copy_from_host(&packed).unwrap();
    let (pitch, rows_per_slice) = (16usize, 4usize);
    let mut boxed = vec![0u8; pitch * rows_per_slice * 2];
    let down = CUDA_MEMCPY3D {
        srcMemoryType: CU_MEMORYTYPE_DEVICE,
        srcDevice: dev3.ptr().0,
        srcPitch: 10,
        srcHeight: 3,
        dstMemoryType: CU_MEMORYTYPE_HOST,
        dstHost: boxed.as_mut_ptr() as *mut c_void,
        dstPitch: pitch,
        dstHeight: rows_per_slice,
        WidthInBytes: 10,
        Height: 3,
        Depth: 2,
        ..Default::default()
    };
    // SAFETY: `boxed` is valid and writable for the rows described.
    unsafe { s.ctx.copy_3d(&down) }.unwrap();
    for z in 0..2 {
        for y in 0..3 {
            let at = (z * rows_per_slice + y) * pitch;
            assert_eq!(
                boxed[at..at + 10],
                packed[(z * 3 + y) * 10..(z * 3 + y) * 10 + 10]
            );
        }
    }
}

#[test]
fn bad_pointers_sizes_and_double_frees_are_typed_cuda_errors() {
    let s = standin();
    let dev = DeviceBuffer::new(&s.ctx, 4096).unwrap();
    let api = s.driver.api();

    // A copy larger than the allocation: refused by the driver, named by CUDA.
    let too_big = vec![0u8; 8192];
    // SAFETY: deliberately outside the contract (8 KiB into a 4 KiB buffer): the driver
    // (here the stand-in) checks the allocation's bounds and refuses before writing, which
    // is what this test asserts. Nothing else uses `dev`.
    let err = unsafe { s.ctx.copy_htod(dev.ptr(), &too_big) }.unwrap_err();
    assert_eq!(err.code(), Some(CUDA_ERROR_INVALID_VALUE));
    assert_eq!(err.cuda_name(), Some("CUDA_ERROR_INVALID_VALUE"));
    match &err {
        CudaError::Driver { call, message, .. } => {
            assert_eq!(*call, "cuMemcpyHtoD_v2");
            assert_eq!(message.as_deref(), Some("invalid argument"));
        }
        other => panic!("expected a driver error, got {other:?}"),
    }
    assert!(err.to_string().contains("cuMemcpyHtoD_v2"), "{err}");

    // The safe wrapper refuses it before the driver sees it.
    assert!(matches!(
        dev.copy_from_host(&too_big),
        Err(CudaError::InvalidArgument { .. })
    ));

    // A device pointer that was never allocated (inside the device range, past the buffer).
    let mut out = [0u8; 16];
    // SAFETY: deliberately an address nobody allocated: the driver refuses it (asserted) and
    // the write side is `out`, borrowed here.
    let err = unsafe {
        s.ctx
            .copy_dtoh(&mut out, DevicePtr(dev.ptr().0 + (1 << 30)))
    }
    .unwrap_err();
    assert!(err.is(CUDA_ERROR_INVALID_VALUE), "{err}");

    // A host pointer passed where device memory is needed.
    let host = [7u8; 16];
    let mut target = [0u8; 16];
    let target_ptr = DevicePtr(target.as_mut_ptr() as u64);
    // SAFETY: deliberately outside the contract: pageable host memory CUDA does not know is
    // no device address, so the driver refuses it before writing (asserted). Were it
    // written, only `target` would change, which nothing references during the call.
    let err = unsafe { s.ctx.copy_htod(target_ptr, &host) }.unwrap_err();
    assert!(err.is(CUDA_ERROR_INVALID_VALUE), "{err}");
    assert_eq!(target, [0u8; 16], "refused before writing");

    // Zero-byte allocation.
    let err = DeviceBuffer::new(&s.ctx, 0).unwrap_err();
    assert!(err.is(CUDA_ERROR_INVALID_VALUE), "{err}");

    // Double free.
    let mut p: CUdeviceptr = 0;
    // SAFETY: raw calls with valid out-parameters, as a program would make them.
    let (first, second) = unsafe {
        s.driver
            .check("cuMemAlloc_v2", (api.cuMemAlloc_v2)(&mut p, 4096))
            .unwrap();
        ((api.cuMemFree_v2)(p), (api.cuMemFree_v2)(p))
    };
    assert_eq!(first, CUDA_SUCCESS);
    let err = s.driver.check("cuMemFree_v2", second).unwrap_err();
    assert_eq!(err.cuda_name(), Some("CUDA_ERROR_INVALID_VALUE"));

    // Freeing host memory CUDA never allocated.
    let mut heap = vec![0u8; 64];
    // SAFETY: the driver must refuse it without touching it.
    let rc = unsafe { (api.cuMemFreeHost)(heap.as_mut_ptr() as *mut c_void) };
    assert_eq!(rc, CUDA_ERROR_INVALID_VALUE);

    // Unregistering what was never registered.
    // SAFETY: as above.
    let rc = unsafe { (api.cuMemHostUnregister)(heap.as_mut_ptr() as *mut c_void) };
    let err = s.driver.check("cuMemHostUnregister", rc).unwrap_err();
    assert_eq!(
        err.cuda_name(),
        Some("CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED")
    );

    // Registering the same memory twice.
    let mut buf = vec![0u8; 3 * 4096];
    let reg = HostRegistration::new(&s.ctx, &mut buf, 0).unwrap();
    // SAFETY: `buf` stays alive; the second registration must be refused.
    let again = unsafe {
        HostRegistration::from_raw(&s.ctx, NonNull::new(reg.as_mut_ptr()).unwrap(), 4096, 0)
    }
    .unwrap_err();
    assert_eq!(
        again.cuda_name(),
        Some("CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED")
    );
    reg.unregister().unwrap();

    // Bad flags.
    let err = PinnedHostRegion::new(&s.ctx, 4096, 0x80).unwrap_err();
    assert!(err.is(CUDA_ERROR_INVALID_VALUE), "{err}");

    // A pinned region of 0 bytes: the driver would answer success with no memory.
    for err in [
        PinnedHostRegion::new(&s.ctx, 0, 0).unwrap_err(),
        PinnedHostRegion::alloc_host(&s.ctx, 0).unwrap_err(),
    ] {
        assert!(
            matches!(&err, CudaError::InvalidArgument { reason, .. } if reason.contains("0 bytes")),
            "{err:?}"
        );
    }
}

#[test]
fn calls_without_a_current_context_fail_with_invalid_context() {
    let s = standin();
    let api = *s.driver.api();
    let driver = s.driver.clone();
    std::thread::spawn(move || {
        let mut p: CUdeviceptr = 0;
        // SAFETY: raw calls with valid arguments on a thread with no current context.
        let rc = unsafe {
            (api.cuCtxSetCurrent)(std::ptr::null_mut());
            (api.cuMemAlloc_v2)(&mut p, 4096)
        };
        let err = driver.check("cuMemAlloc_v2", rc).unwrap_err();
        assert_eq!(err.cuda_name(), Some("CUDA_ERROR_INVALID_CONTEXT"));
    })
    .join()
    .unwrap();
}

#[test]
fn safe_types_work_from_other_threads() {
    let s = standin();
    let dev = std::sync::Arc::new(DeviceBuffer::new(&s.ctx, MIB).unwrap());
    let data = pattern(MIB, 9);
    let writer = {
        let dev = dev.clone();
        let data = data.clone();
        std::thread::spawn(move || dev.copy_from_host(&data).unwrap())
    };
    writer.join().unwrap();
    let mut back = vec![0u8; MIB];
    std::thread::spawn(move || {
        dev.copy_to_host(&mut back).unwrap();
        back
    })
    .join()
    .map(|back| assert!(back == data))
    .unwrap();
}

#[test]
fn per_thread_streams_carry_copies_and_events_on_each_thread() {
    let s = standin();
    let n = 64 * 1024;
    // Each thread makes its own per-thread stream (the type cannot cross threads).
    let workers: Vec<_> = (0..2u8)
        .map(|seed| {
            let ctx = s.ctx.clone();
            std::thread::spawn(move || {
                let stream = Stream::per_thread(&ctx);
                assert_eq!(stream.handle() as usize, CU_STREAM_PER_THREAD);
                let done = Event::new(&ctx).unwrap();
                let mut src = PinnedHostRegion::alloc_host(&ctx, n).unwrap();
                src.as_mut_slice().copy_from_slice(&pattern(n, 20 + seed));
                let dst = PinnedHostRegion::alloc_host(&ctx, n).unwrap();
                let dev = DeviceBuffer::new(&ctx, n).unwrap();
                // SAFETY: `dev` and both pinned regions belong to this thread and stay
                // alive and untouched until the stream is synchronized below.
                unsafe {
                    ctx.copy_htod_async(dev.ptr(), src.as_ptr(), n, &stream)
                        .unwrap();
                    ctx.copy_dtoh_async(dst.as_mut_ptr(), dev.ptr(), n, &stream)
                        .unwrap();
                }
                done.record(&stream).unwrap();
                stream.synchronize().unwrap();
                assert!(done.is_complete().unwrap());
                assert!(stream.is_complete().unwrap());
                dst.as_slice() == src.as_slice()
            })
        })
        .collect();
    for w in workers {
        assert!(w.join().unwrap(), "round trip on a per-thread stream");
    }
}

#[test]
fn mem_info_accounts_for_allocations() {
    let s = standin();
    let before = s.ctx.mem_info().unwrap();
    assert_eq!(before.total, 16384 * MIB);
    let big = DeviceBuffer::new(&s.ctx, 1 << 30).unwrap();
    let during = s.ctx.mem_info().unwrap();
    assert!(during.free <= during.total - (1 << 30), "{during:?}");
    drop(big);
}

#[test]
fn get_proc_address_hands_out_the_driver_variants() {
    let s = standin();
    let found = |name: &str, flags| match s.driver.get_proc_address(name, 13000, flags).unwrap() {
        Some(ProcAddress::Found(p)) => p,
        other => panic!("{name}: {other:?}"),
    };
    let ptds = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    for (base, flags, symbol) in [
        ("cuMemcpyHtoD", 0, "cuMemcpyHtoD_v2"),
        ("cuMemcpyHtoD", ptds, "cuMemcpyHtoD_v2_ptds"),
        ("cuMemcpyHtoDAsync", ptds, "cuMemcpyHtoDAsync_v2_ptsz"),
        ("cuMemcpy", ptds, "cuMemcpy_ptds"),
        ("cuMemHostRegister", 0, "cuMemHostRegister_v2"),
        ("cuMemAllocHost", 0, "cuMemAllocHost_v2"),
        ("cuGetProcAddress", 0, "cuGetProcAddress_v2"),
    ] {
        assert_eq!(
            found(base, flags),
            s.driver.symbol_address(symbol).unwrap(),
            "{base} with flags {flags} should be {symbol}"
        );
    }
    assert_eq!(
        s.driver.get_proc_address("cuNoSuchCall", 13000, 0).unwrap(),
        Some(ProcAddress::SymbolNotFound)
    );
    assert_eq!(
        s.driver
            .get_proc_address("cuGetProcAddress", 11000, 0)
            .unwrap(),
        Some(ProcAddress::VersionNotSufficient)
    );
}

#[test]
fn a_missing_symbol_is_a_typed_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("libcuda_partial.so");
    // A "driver" with only the first two entry points of the table.
    pinwise_testkit::compile_c_source(
        "int cuGetErrorName(int e, const char **s) { return 0; }\n\
         int cuGetErrorString(int e, const char **s) { return 0; }\n",
        &lib,
        &["-shared", "-fPIC"],
    );
    let err = Driver::load_from(&lib).unwrap_err();
    match &err {
        CudaError::MissingSymbol { symbol, path, .. } => {
            assert_eq!(*symbol, "cuInit");
            assert!(path.ends_with("libcuda_partial.so"));
        }
        other => panic!("expected MissingSymbol, got {other:?}"),
    }
    assert!(err.to_string().contains("cuInit"), "{err}");
}

#[test]
fn pinned_regions_report_flags_and_device_pointers() {
    let s = standin();
    let pinned = PinnedHostRegion::new(
        &s.ctx,
        8192,
        CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP,
    )
    .unwrap();
    assert_eq!(
        pinned.driver_flags().unwrap(),
        CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP
    );
    // With unified addressing the device sees it at the host address.
    assert_eq!(pinned.device_pointer().unwrap().0, pinned.as_ptr() as u64);
    let mut buf = vec![0u8; 4096];
    let reg = HostRegistration::new(&s.ctx, &mut buf, CU_MEMHOSTREGISTER_PORTABLE).unwrap();
    assert_eq!(
        s.ctx.memory_type(reg.as_ptr() as u64).unwrap(),
        Some(MemoryType::Host)
    );
    drop(reg);
    assert_eq!(s.ctx.memory_type(buf.as_ptr() as u64).unwrap(), None);
}

#[test]
fn ipc_export_keeps_the_bytes_and_a_process_cannot_open_its_own_handle() {
    let s = standin();
    let ctx = s.driver.device(0).unwrap().primary_context().unwrap();
    let dev = DeviceBuffer::new(&ctx, 3 * 4096 + 5).unwrap();
    let data = pattern(dev.len(), 9);
    dev.copy_from_host(&data).unwrap();
    // Interior pointers: the range names the allocation; only its start has a handle.
    let inner = dev.ptr().offset(4100);
    assert_eq!(ctx.address_range(inner).unwrap(), (dev.ptr(), dev.len()));
    assert_eq!(
        ctx.ipc_handle(inner).unwrap_err().cuda_name(),
        Some("CUDA_ERROR_INVALID_VALUE")
    );
    let h = ctx.ipc_handle(dev.ptr()).unwrap();
    assert_eq!(
        ctx.ipc_handle(dev.ptr()).unwrap(),
        h,
        "the same handle again"
    );
    // The stand-in moved the allocation onto shared memory at the same address: same bytes,
    // and still writable.
    let mut back = vec![0u8; dev.len()];
    dev.copy_to_host(&mut back).unwrap();
    assert_eq!(back, data);
    dev.fill(3).unwrap();
    dev.copy_to_host(&mut back).unwrap();
    assert!(back.iter().all(|&b| b == 3));
    assert_eq!(
        ctx.open_ipc_handle(h).unwrap_err().cuda_name(),
        Some("CUDA_ERROR_INVALID_CONTEXT"),
        "CUDA refuses a process's own handle"
    );
    let mut garbage = h;
    garbage.0[0] ^= 0xff;
    assert_eq!(
        ctx.open_ipc_handle(garbage).unwrap_err().cuda_name(),
        Some("CUDA_ERROR_INVALID_VALUE")
    );
    drop(dev); // frees the exported allocation (and its memfd)
}
