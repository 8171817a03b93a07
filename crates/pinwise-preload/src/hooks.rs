//! What every intercepted call does. The exports (`exports`) decode the C arguments and
//! call these with a closure that forwards the call to the real function; everything here
//! forwards unchanged when pinwise is off, when pinwise's own code is running on this
//! thread, or when anything inside pinwise panics (pinwise then turns itself off).

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};

use pinwise_alloc::{AllocError, StreamHandle};
use pinwise_core::{Direction, EventKind, HostMemKind, HostState};
use pinwise_cuda::sys::{
    CUdeviceptr, CUresult, CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, CUDA_ERROR_INVALID_VALUE,
    CUDA_MEMCPY2D, CUDA_MEMCPY3D, CUDA_SUCCESS, CU_MEMORYTYPE_ARRAY, CU_MEMORYTYPE_DEVICE,
    CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_UNIFIED, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
    CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_STREAM_PER_THREAD,
};

use crate::backend::StreamCapture;
use crate::guard::{self, Timing};
use crate::pinning::{Pinning, PROMOTED_RANGES};
use crate::real;
use crate::state::{self, State};
use crate::stats::{self, HookStats};
use crate::variants::{self, Hooked};
use pinwise_alloc::engine::monotonic_ns as now_ns;

/// Time the bookkeeping of one copy in this many (alternately whole and by stages: see
/// [`guard::timing_of`]).
const SAMPLE_EVERY: u32 = 8;

/// The state, when this hook should do its work.
#[inline]
fn active() -> Option<&'static State> {
    if !state::enabled() || guard::inside() {
        return None;
    }
    state::get()
}

/// The state, when a driver-level hook should do its work (`PINWISE_DRIVER_HOOKS=0` turns
/// them into plain forwarding, even where a driver hands out our exports itself).
#[inline]
fn driver_active() -> Option<&'static State> {
    if !state::DRIVER_HOOKS.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    active()
}

/// Runs pinwise's part of a hook; a panic turns pinwise off instead of unwinding into C.
fn guarded<R>(f: impl FnOnce() -> R) -> Option<R> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => Some(r),
        Err(_) => {
            state::turn_off("a panic inside a hook");
            None
        }
    }
}

// ---------- allocation ----------

/// `cuMemHostAlloc` / `cuMemAllocHost_v2` (flags 0) from return address `caller`.
///
/// # Safety
/// `pp` is NULL or writable (CUDA's contract).
pub unsafe fn host_alloc(
    caller: usize,
    pp: *mut *mut c_void,
    size: usize,
    flags: c_uint,
    forward: impl FnOnce() -> CUresult,
) -> CUresult {
    let Some(st) = driver_active() else {
        return forward();
    };
    if pp.is_null() || size == 0 {
        return forward();
    }
    let site_addr = allocation_site(st, caller);
    HookStats::bump(&st.stats.host_allocs);
    // While a context ends, requests go to CUDA as without pinwise: memory pinwise would
    // hand out now (a pool block, or a segment allocated just before the release) is
    // unmapped by the release a moment later. This narrows the race, it does not close it:
    // a request that passed this check just before the release began is served by the
    // pool, as a request already inside cuMemHostAlloc would be by CUDA.
    let served = if CONTEXTS_ENDING.load(Ordering::Acquire) > 0 {
        None
    } else {
        guarded(|| {
            let pinning = st.pinning_or_start()?;
            let site = st.recorder.resolve(site_addr);
            Some((pinning.alloc(size, flags, site), site))
        })
        .flatten()
    };
    match served {
        Some((Ok(a), site)) => {
            // SAFETY: `pp` is non-null and writable (checked above; CUDA's contract).
            unsafe { *pp = a.ptr as *mut c_void };
            HookStats::bump(if a.pinned {
                &st.stats.served_pinned
            } else {
                &st.stats.served_pageable
            });
            let stack = st.recorder.stack_from(site_addr);
            let stamp = st.recorder.stamp();
            st.recorder.record_with_stack(
                stamp,
                EventKind::Alloc {
                    start: a.ptr as u64,
                    size: size as u64,
                    kind: if a.pinned {
                        HostMemKind::PinnedAlloc
                    } else {
                        HostMemKind::Pageable
                    },
                    flags,
                },
                Some(site),
                0,
                stack,
            );
            return CUDA_SUCCESS;
        }
        Some((Err(AllocError::PinningUnavailable { .. }), _)) => {
            HookStats::bump(&st.stats.required_outside_budget);
        }
        _ => {}
    }
    HookStats::bump(&st.stats.forwarded);
    let rc = forward();
    // SAFETY: `pp` is non-null; on success CUDA wrote the allocation there.
    let p = if rc == CUDA_SUCCESS {
        unsafe { *pp }
    } else {
        std::ptr::null_mut()
    };
    if !p.is_null() {
        let stack = st.recorder.stack_from(site_addr);
        let stamp = st.recorder.stamp();
        st.recorder.record_with_stack(
            stamp,
            EventKind::Alloc {
                start: p as u64,
                size: size as u64,
                kind: HostMemKind::PinnedAlloc,
                flags,
            },
            None,
            site_addr,
            stack,
        );
    }
    rc
}

/// `cuMemFreeHost` from `caller`.
pub fn host_free(caller: usize, p: *mut c_void, forward: impl FnOnce() -> CUresult) -> CUresult {
    let Some(st) = driver_active() else {
        return forward();
    };
    if p.is_null() {
        return forward();
    }
    let site_addr = allocation_site(st, caller);
    HookStats::bump(&st.stats.host_frees);
    if let Some(pinning) = st.pinning() {
        if pinning.owns(p as usize) {
            let stamp = st.recorder.stamp();
            st.recorder
                .record(stamp, EventKind::Free { start: p as u64 }, None, site_addr);
            if let Some(rc) =
                guarded(|| pinning.free(p as usize, &st.stats, &st.recorder)).flatten()
            {
                return rc;
            }
        }
        if pinning.freed_lately(p as usize) {
            // A second free of a pinwise allocation: plain CUDA's answer. (Forwarded, the
            // driver might see the start of a pool segment, and free it.)
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    // Stamped before the memory is released, so that a reuse of the address by another
    // thread comes after this free in the history.
    let stamp = st.recorder.stamp();
    let rc = forward();
    if rc == CUDA_SUCCESS {
        st.recorder
            .record(stamp, EventKind::Free { start: p as u64 }, None, site_addr);
    } else {
        st.recorder.cancel(stamp);
    }
    rc
}

/// The call site of a pinned allocation or free: the application's call of the runtime
/// (shared cudart: from the runtime hook; static cudart: found on the stack), else the
/// driver hook's own caller.
fn allocation_site(st: &State, own: usize) -> usize {
    let site = guard::driver_site(own);
    if site == own && st.static_runtime.is_present() {
        if let Some(app) = st.static_runtime.application_caller() {
            return app;
        }
    }
    site
}

// ---------- registration by the program ----------

/// `cuMemHostRegister(_v2)` from `caller`.
pub fn host_register(
    caller: usize,
    p: *mut c_void,
    size: usize,
    forward: impl FnOnce() -> CUresult,
) -> CUresult {
    let Some(st) = driver_active() else {
        return forward();
    };
    let site_addr = guard::driver_site(caller);
    HookStats::bump(&st.stats.registrations);
    if let Some(pinning) = st.pinning() {
        guarded(|| pinning.before_program_register(p as usize, size, &st.stats, &st.recorder));
    }
    let rc = forward();
    if rc == CUDA_SUCCESS && !p.is_null() {
        let stamp = st.recorder.stamp();
        st.recorder.record(
            stamp,
            EventKind::PinPages {
                start: p as u64,
                bytes: size as u64,
                pages: None,
            },
            None,
            site_addr,
        );
    }
    rc
}

/// `cuMemHostUnregister` from `caller`. A pointer only pinwise registered is not the
/// program's to unregister: the answer is plain CUDA's (not registered).
pub fn host_unregister(
    caller: usize,
    p: *mut c_void,
    forward: impl FnOnce() -> CUresult,
) -> CUresult {
    let Some(st) = driver_active() else {
        return forward();
    };
    if registered_by_pinwise_only(p) {
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    }
    let site_addr = guard::driver_site(caller);
    HookStats::bump(&st.stats.unregistrations);
    let stamp = st.recorder.stamp();
    let rc = forward();
    if rc == CUDA_SUCCESS {
        st.recorder.record(
            stamp,
            EventKind::UnpinPages {
                start: p as u64,
                pages: None,
            },
            None,
            site_addr,
        );
    } else {
        st.recorder.cancel(stamp);
    }
    rc
}

// ---------- copies ----------

/// A copy that touches host memory, as the hooks describe it.
#[derive(Debug, Clone, Copy)]
pub struct Copy {
    /// Which way.
    pub direction: Direction,
    /// First host byte (0: none, a device-to-device copy).
    pub host: usize,
    /// The device side (0: none).
    pub device: u64,
    /// Bytes moved.
    pub bytes: usize,
    /// Host bytes spanned (more than `bytes` for pitched copies).
    pub span: usize,
    /// The stream, for the asynchronous forms.
    pub stream: Option<usize>,
    /// Whether the entry point has per-thread default-stream semantics.
    pub per_thread: bool,
}

impl Copy {
    /// A plain 1D copy.
    pub fn linear(
        direction: Direction,
        host: usize,
        device: u64,
        bytes: usize,
        stream: Option<usize>,
        h: Hooked,
    ) -> Copy {
        Copy {
            direction,
            host,
            device,
            bytes,
            span: bytes,
            stream,
            per_thread: h.per_thread(),
        }
    }
}

/// A copy entry point from `caller`; `describe` says what it copies (`None`: nothing that
/// involves host memory, or not decodable).
pub fn copy(
    caller: usize,
    describe: impl FnOnce(&State) -> Option<Copy>,
    forward: impl FnOnce() -> CUresult,
) -> CUresult {
    if !state::enabled() || !state::DRIVER_HOOKS.load(std::sync::atomic::Ordering::Relaxed) {
        return forward();
    }
    let Some((site_addr, timing)) = guard::copy_prologue(caller, SAMPLE_EVERY) else {
        return forward();
    };
    let Some(st) = state::get() else {
        return forward();
    };
    let t0 = if timing != Timing::No { now_ns() } else { 0 };
    let mut described_at = 0;
    let noted = guarded(|| {
        describe(st).map(|c| {
            if timing == Timing::Stages {
                described_at = now_ns();
            }
            (c, note(st, &c, true))
        })
    })
    .flatten();
    let before = if t0 != 0 {
        let t = now_ns();
        if described_at != 0 {
            st.stats.stage_describe.add(described_at.saturating_sub(t0));
            st.stats.stage_decide.add(t.saturating_sub(described_at));
        }
        t.saturating_sub(t0)
    } else {
        0
    };
    let rc = forward();
    let Some((c, noted)) = noted else {
        return rc;
    };
    if rc != CUDA_SUCCESS {
        // The driver refused the copy: nothing moved, so nothing is recorded; the program
        // gets the driver's error.
        HookStats::bump(&st.stats.failed_copies);
        return rc;
    }
    let t1 = if t0 != 0 { now_ns() } else { 0 };
    guarded(|| record_transfer(st, &c, &noted, site_addr));
    match timing {
        Timing::No => {}
        Timing::Stages => st.stats.stage_record.add(now_ns().saturating_sub(t1)),
        Timing::Total => {
            let record = now_ns().saturating_sub(t1);
            st.stats.hook_sample(before.saturating_add(record));
        }
    }
    if let Some(stream) = noted.finish_on {
        // The program's own pageable memory, registered by pinwise: as on pageable memory,
        // the copy is done when the call returns (the program may reuse the buffer at once).
        // Asked of the driver first (a capture the hooks did not count must not be
        // invalidated by a wait): a captured copy's registration is held instead.
        if let Some(p) = st.pinning() {
            match p.driver.capture_of(stream) {
                StreamCapture::None => {
                    let _ = p.driver.synchronize(stream);
                }
                _ => {
                    if let Some(i) = PROMOTED_RANGES.covering(c.host, c.span) {
                        PROMOTED_RANGES.hold(i);
                    }
                }
            }
        }
    }
    rc
}

/// What the hooks learned about a copy before it was issued.
struct Noted {
    /// The host side, pinned or pageable, as pinwise knows it.
    host_state: HostState,
    /// The copy's stream, the per-thread default stream made explicit.
    stream: Option<StreamHandle>,
    /// The stream to wait on after issuing the copy: an asynchronous copy on the program's
    /// own pageable memory that pinwise registered.
    finish_on: Option<usize>,
}

/// Learns from a copy before it is issued (promoting what turned hot). `learn: false`
/// only describes it (a copy that already happened: it must not register anything, since
/// no hook would wait for a later asynchronous copy on it).
fn note(st: &State, c: &Copy, learn: bool) -> Noted {
    let stream = c.stream.map(|s| {
        StreamHandle(if c.per_thread && s == 0 {
            CU_STREAM_PER_THREAD as u64
        } else {
            s as u64
        })
    });
    let (host_state, program_registered) = match (c.host, c.direction) {
        (0, _) | (_, Direction::DtoD) => (HostState::Unknown, false),
        _ if !learn => (HostState::Unknown, false),
        _ => match st.pinning_or_start() {
            // On a stream being captured into a graph, the copy runs on every replay, not
            // now: waiting for the stream (or recording a pool event on it) would
            // invalidate the capture, and what it moves says nothing about this moment.
            Some(p) if stream.is_some_and(|s| !not_captured(st, p, s)) => (
                p.note_captured_copy(c.host, c.span, &st.stats, &st.recorder),
                false,
            ),
            Some(p) => p.note_copy(
                c.host,
                c.bytes,
                c.span,
                c.direction,
                stream,
                &st.stats,
                &st.recorder,
            ),
            None => (HostState::Unknown, false),
        },
    };
    let finish_on = match stream {
        Some(s) if program_registered => Some(s.0 as usize),
        _ => None,
    };
    Noted {
        host_state,
        stream,
        finish_on,
    }
}

/// Records a copy the driver accepted, timestamped when it returned.
fn record_transfer(st: &State, c: &Copy, noted: &Noted, site_addr: usize) {
    let fingerprint = crate::fingerprint::of_copy(st, c);
    let stamp = st.recorder.stamp();
    st.recorder.record_fingerprinted(
        stamp,
        EventKind::Transfer {
            direction: c.direction,
            host: c.host as u64,
            device: c.device,
            bytes: c.bytes as u64,
            is_async: c.stream.is_some(),
            stream: noted.stream.map_or(0, |s| s.0),
            host_state: noted.host_state,
        },
        fingerprint,
        site_addr,
    );
}

/// Whether an asynchronous copy's stream is certainly not being captured into a CUDA graph
/// (one `cuStreamIsCapturing`). A capturing stream is counted in the statistics; one the
/// driver would not answer about (the legacy stream while a blocking stream captures) is
/// left alone as well, uncounted.
fn not_captured(st: &State, p: &Pinning, stream: StreamHandle) -> bool {
    if crate::capture::none_open() {
        return true;
    }
    match p.driver.capture_of(stream.0 as usize) {
        StreamCapture::None => true,
        StreamCapture::Capturing => {
            HookStats::bump(&st.stats.captured_copies);
            false
        }
        StreamCapture::Unknown => false,
    }
}

/// Host or device, as the driver says (pageable memory the driver does not know is host).
fn is_host(st: &State, ptr: u64) -> Option<bool> {
    let p = st.pinning_or_start()?;
    let mut t: c_uint = 0;
    let _inside = guard::Inside::enter();
    // SAFETY: a valid out-parameter of the attribute's type (CUmemorytype).
    let rc = unsafe {
        (p.driver.pointer_get_attribute)(
            &mut t as *mut c_uint as *mut c_void,
            CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            ptr,
        )
    };
    Some(rc != CUDA_SUCCESS || t == CU_MEMORYTYPE_HOST)
}

/// A unified copy (`cuMemcpy`, `cudaMemcpyDefault`): the driver tells each side.
pub fn unified(
    st: &State,
    dst: u64,
    src: u64,
    bytes: usize,
    stream: Option<usize>,
    per_thread: bool,
) -> Option<Copy> {
    let (dst_host, src_host) = match guard::runtime_copy_kind() {
        // cudaMemcpyHostToHost, HostToDevice, DeviceToHost, DeviceToDevice.
        Some(0) => (true, true),
        Some(1) => (false, true),
        Some(2) => (true, false),
        Some(3) => (false, false),
        _ => (is_host(st, dst)?, is_host(st, src)?),
    };
    let (direction, host, device) = match (src_host, dst_host) {
        (true, false) => (Direction::HtoD, src, dst),
        (false, true) => (Direction::DtoH, dst, src),
        (true, true) => (Direction::HtoH, dst, 0),
        (false, false) => (Direction::DtoD, 0, dst),
    };
    Some(Copy {
        direction,
        host: host as usize,
        device,
        bytes,
        span: bytes,
        stream,
        per_thread,
    })
}

/// Which side of a pitched copy is host memory, from its memory type.
fn side_is_host(st: &State, memory_type: c_uint, host: usize, device: u64) -> Option<bool> {
    match memory_type {
        CU_MEMORYTYPE_HOST => Some(true),
        CU_MEMORYTYPE_DEVICE | CU_MEMORYTYPE_ARRAY => Some(false),
        CU_MEMORYTYPE_UNIFIED => is_host(st, if host != 0 { host as u64 } else { device }),
        _ => None,
    }
}

/// One side of a pitched (2D/3D) copy, as its descriptor gives it.
struct PitchedSide {
    memory_type: c_uint,
    host: usize,
    device: u64,
    x_in_bytes: usize,
    y: usize,
    z: usize,
    pitch: usize,
    /// Rows per slice (3D only; unused with one slice).
    height: usize,
}

impl PitchedSide {
    /// First byte and span touched on this side for `width` bytes x `rows` x `slices`.
    fn range(&self, width: usize, rows: usize, slices: usize) -> (usize, usize) {
        let base = if self.host == 0 {
            self.device as usize
        } else {
            self.host
        };
        let first = base + (self.z * self.height + self.y) * self.pitch + self.x_in_bytes;
        let span =
            (slices.saturating_sub(1) * self.height + rows.saturating_sub(1)) * self.pitch + width;
        (first, span)
    }
}

/// A pitched copy of `width` bytes x `rows` x `slices` from `src` to `dst`.
fn pitched_copy(
    st: &State,
    src: PitchedSide,
    dst: PitchedSide,
    (width, rows, slices): (usize, usize, usize),
    stream: Option<usize>,
    per_thread: bool,
) -> Option<Copy> {
    let src_host = side_is_host(st, src.memory_type, src.host, src.device)?;
    let dst_host = side_is_host(st, dst.memory_type, dst.host, dst.device)?;
    let bytes = width.checked_mul(rows)?.checked_mul(slices)?;
    let (direction, (host, span), device) = match (src_host, dst_host) {
        (true, false) => (Direction::HtoD, src.range(width, rows, slices), dst.device),
        (false, true) => (Direction::DtoH, dst.range(width, rows, slices), src.device),
        (true, true) => (Direction::HtoH, dst.range(width, rows, slices), 0),
        (false, false) => (Direction::DtoD, (0, 0), dst.device),
    };
    Some(Copy {
        direction,
        host,
        device,
        bytes,
        span,
        stream,
        per_thread,
    })
}

/// A 2D copy from its descriptor (a pitched copy of one slice).
///
/// # Safety
/// `p` is NULL or points to a valid descriptor (CUDA's contract).
pub unsafe fn copy_2d(
    st: &State,
    p: *const CUDA_MEMCPY2D,
    stream: Option<usize>,
    per_thread: bool,
) -> Option<Copy> {
    // SAFETY: the caller's contract.
    let d = unsafe { p.as_ref()? };
    let src = PitchedSide {
        memory_type: d.srcMemoryType,
        host: d.srcHost as usize,
        device: d.srcDevice,
        x_in_bytes: d.srcXInBytes,
        y: d.srcY,
        z: 0,
        pitch: d.srcPitch,
        height: 0,
    };
    let dst = PitchedSide {
        memory_type: d.dstMemoryType,
        host: d.dstHost as usize,
        device: d.dstDevice,
        x_in_bytes: d.dstXInBytes,
        y: d.dstY,
        z: 0,
        pitch: d.dstPitch,
        height: 0,
    };
    pitched_copy(
        st,
        src,
        dst,
        (d.WidthInBytes, d.Height, 1),
        stream,
        per_thread,
    )
}

/// A 3D copy from its descriptor.
///
/// # Safety
/// `p` is NULL or points to a valid descriptor (CUDA's contract).
pub unsafe fn copy_3d(
    st: &State,
    p: *const CUDA_MEMCPY3D,
    stream: Option<usize>,
    per_thread: bool,
) -> Option<Copy> {
    // SAFETY: the caller's contract.
    let d = unsafe { p.as_ref()? };
    let src = PitchedSide {
        memory_type: d.srcMemoryType,
        host: d.srcHost as usize,
        device: d.srcDevice,
        x_in_bytes: d.srcXInBytes,
        y: d.srcY,
        z: d.srcZ,
        pitch: d.srcPitch,
        height: d.srcHeight,
    };
    let dst = PitchedSide {
        memory_type: d.dstMemoryType,
        host: d.dstHost as usize,
        device: d.dstDevice,
        x_in_bytes: d.dstXInBytes,
        y: d.dstY,
        z: d.dstZ,
        pitch: d.dstPitch,
        height: d.dstHeight,
    };
    let dims = (d.WidthInBytes, d.Height, d.Depth);
    pitched_copy(st, src, dst, dims, stream, per_thread)
}

// ---------- pointer queries ----------

/// Before a query about `ptr`: a served pageable allocation is registered first.
fn before_query(st: &State, ptr: usize) {
    if let Some(p) = st.pinning() {
        guarded(|| p.before_query(ptr, &st.stats, &st.recorder));
    }
}

/// `cuMemHostGetDevicePointer_v2`.
pub fn host_get_device_pointer(p: *mut c_void, forward: impl FnOnce() -> CUresult) -> CUresult {
    if let Some(st) = driver_active() {
        before_query(st, p as usize);
    }
    forward()
}

/// `cuMemHostGetFlags`: for pinwise's allocations, the flags the program asked for.
///
/// # Safety
/// `pflags` is NULL or writable (CUDA's contract).
pub unsafe fn host_get_flags(
    pflags: *mut c_uint,
    p: *mut c_void,
    forward: impl FnOnce() -> CUresult,
) -> CUresult {
    let Some(st) = driver_active() else {
        return forward();
    };
    before_query(st, p as usize);
    let Some((_, _, flags)) = st.pinning().and_then(|pn| pn.served_containing(p as usize)) else {
        return forward();
    };
    HookStats::bump(&st.stats.queries_answered);
    if pflags.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: non-null and writable (CUDA's contract).
    unsafe { *pflags = flags };
    CUDA_SUCCESS
}

/// Corrects a range attribute of a pinwise allocation (the driver sees the pool segment;
/// plain CUDA would report the allocation).
///
/// # Safety
/// `data` points to storage of the attribute's type.
unsafe fn correct_range(st: &State, attribute: c_int, data: *mut c_void, ptr: usize) {
    if data.is_null()
        || (attribute != CU_POINTER_ATTRIBUTE_RANGE_START_ADDR
            && attribute != CU_POINTER_ATTRIBUTE_RANGE_SIZE)
    {
        return;
    }
    let Some((start, size, _)) = st.pinning().and_then(|p| p.served_containing(ptr)) else {
        return;
    };
    HookStats::bump(&st.stats.queries_answered);
    // SAFETY: the caller's contract: RANGE_START_ADDR is a CUdeviceptr, RANGE_SIZE a size_t.
    unsafe {
        if attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR {
            *(data as *mut CUdeviceptr) = start as CUdeviceptr;
        } else {
            *(data as *mut usize) = size;
        }
    }
}

/// `cuPointerGetAttribute`.
///
/// # Safety
/// `data` is NULL or storage of the attribute's type (CUDA's contract).
pub unsafe fn pointer_get_attribute(
    data: *mut c_void,
    attribute: c_int,
    ptr: CUdeviceptr,
    forward: impl FnOnce() -> CUresult,
) -> CUresult {
    let Some(st) = driver_active() else {
        return forward();
    };
    before_query(st, ptr as usize);
    let rc = forward();
    if rc == CUDA_SUCCESS {
        // SAFETY: the caller's contract.
        unsafe { correct_range(st, attribute, data, ptr as usize) };
    }
    rc
}

/// `cuPointerGetAttributes`.
///
/// # Safety
/// `attributes` and `data` are NULL or arrays of `n` (CUDA's contract).
pub unsafe fn pointer_get_attributes(
    n: c_uint,
    attributes: *const c_int,
    data: *mut *mut c_void,
    ptr: CUdeviceptr,
    forward: impl FnOnce() -> CUresult,
) -> CUresult {
    let Some(st) = driver_active() else {
        return forward();
    };
    before_query(st, ptr as usize);
    let rc = forward();
    if rc == CUDA_SUCCESS && !attributes.is_null() && !data.is_null() {
        for i in 0..n as usize {
            // SAFETY: arrays of `n` entries (the caller's contract).
            unsafe { correct_range(st, *attributes.add(i), *data.add(i), ptr as usize) };
        }
    }
    rc
}

// ---------- entry points handed out ----------

/// `dlsym`'s decision (the trampoline forwards to the real `dlsym` when this returns NULL,
/// so that `RTLD_NEXT` keeps the caller's meaning): our wrapper for a hooked driver name.
///
/// # Safety
/// `name` is NULL or a C string; `handle` a handle or pseudo-handle (dlsym's contract).
pub unsafe fn dlsym_decision(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    real::ensure_real_dlsym();
    if name.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: a C string (dlsym's contract).
    let cname = unsafe { CStr::from_ptr(name) };
    let Some(h) = variants::by_symbol(cname.to_bytes()) else {
        return std::ptr::null_mut();
    };
    if !state::enabled()
        || !state::DRIVER_HOOKS.load(std::sync::atomic::Ordering::Relaxed)
        || guard::inside()
    {
        return std::ptr::null_mut();
    }
    let wrapper = real::wrapper(h);
    if wrapper == 0 {
        return std::ptr::null_mut();
    }
    if handle != libc::RTLD_DEFAULT && handle != libc::RTLD_NEXT {
        let found = {
            let _inside = guard::Inside::enter();
            // SAFETY: the program passed `handle` to dlsym, whose contract is ours.
            let found = real::dlsym(unsafe { real::Handle::from_raw(handle) }, cname);
            if found != 0 && !real::is_wrapper(found) {
                if let Some(lib) = real::handle_of(found) {
                    real::offer_libcuda_handle(lib);
                }
                real::offer_real(h, found);
            }
            found
        };
        if found == 0 {
            return std::ptr::null_mut(); // the real dlsym says why
        }
    }
    HookStats::bump(&stats::WRAPPED_BY_DLSYM);
    wrapper as *mut c_void
}

/// After a successful `cuGetProcAddress`: replaces the answer by our wrapper when it is a
/// hooked variant (identified by address, else by the driver's version rule).
///
/// # Safety
/// `symbol` is a C string and `pfn` a pointer the real call wrote (CUDA's contract).
pub unsafe fn wrap_proc_address(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
) {
    if symbol.is_null()
        || pfn.is_null()
        || !state::enabled()
        || !state::DRIVER_HOOKS.load(std::sync::atomic::Ordering::Relaxed)
        || guard::inside()
    {
        return;
    }
    // SAFETY: the caller's contract.
    let (name, answer) = unsafe { (CStr::from_ptr(symbol).to_bytes(), *pfn as usize) };
    if answer == 0 || variants::by_base(name).next().is_none() {
        return;
    }
    let _inside = guard::Inside::enter();
    if real::is_wrapper(answer) {
        // The driver answered our own export (its table refers to the interposed name).
        HookStats::bump(&stats::WRAPPED_BY_PROC_ADDRESS);
        return;
    }
    if real::libcuda_handle().is_none() {
        if let Some(lib) = real::handle_of(answer) {
            real::offer_libcuda_handle(lib);
        }
    }
    let by_identity = variants::by_base(name).find(|&h| real::exported(h) == Some(answer));
    let chosen = match by_identity {
        Some(h) => {
            HookStats::bump(&stats::WRAPPED_BY_PROC_ADDRESS);
            Some(h)
        }
        None => {
            let h = variants::by_rule(name, cuda_version, flags);
            if h.is_some() {
                HookStats::bump(&stats::WRAPPED_BY_RULE);
            } else {
                HookStats::bump(&stats::PROC_ADDRESS_UNRECOGNIZED);
            }
            h
        }
    };
    let Some(h) = chosen else { return };
    let wrapper = real::wrapper(h);
    if wrapper == 0 {
        return;
    }
    real::offer_real(h, answer);
    // SAFETY: `pfn` is the caller's writable out-parameter.
    unsafe { *pfn = wrapper as *mut c_void };
}

// ---------- the runtime level ----------

/// A runtime call from `caller` (0: unknown): driver hooks underneath attribute to it;
/// if none of them saw the call, `observe` records it at this level.
pub fn runtime_call(
    caller: usize,
    copy: bool,
    forward: impl FnOnce() -> c_int,
    observe: impl FnOnce(&'static State, c_int),
) -> c_int {
    runtime_call_kind(caller, copy, -1, forward, observe)
}

/// [`runtime_call`] for a 1D copy of `cudaMemcpyKind` `kind` (a unified driver copy
/// underneath then knows its direction without asking the driver).
pub fn runtime_call_kind(
    caller: usize,
    copy: bool,
    kind: c_int,
    forward: impl FnOnce() -> c_int,
    observe: impl FnOnce(&'static State, c_int),
) -> c_int {
    if !state::enabled() || guard::inside() {
        return forward();
    }
    let frame = guard::enter_runtime(
        caller,
        copy,
        if (0..=3).contains(&kind) { kind } else { -1 },
    );
    let rc = forward();
    let seen = guard::leave_runtime(frame);
    if !seen && rc == 0 {
        if let Some(st) = state::get() {
            HookStats::bump(&st.stats.runtime_only);
            guarded(|| observe(st, rc));
        }
    }
    rc
}

/// Records a pinned allocation the runtime made without a driver hook seeing it.
pub fn observe_alloc(st: &State, caller: usize, p: *mut c_void, size: usize, flags: c_uint) {
    if p.is_null() {
        return;
    }
    HookStats::bump(&st.stats.host_allocs);
    HookStats::bump(&st.stats.forwarded);
    let stack = st.recorder.stack_from(caller);
    let stamp = st.recorder.stamp();
    st.recorder.record_with_stack(
        stamp,
        EventKind::Alloc {
            start: p as u64,
            size: size as u64,
            kind: HostMemKind::PinnedAlloc,
            flags,
        },
        None,
        caller,
        stack,
    );
}

/// Records an event the runtime caused without a driver hook seeing it.
pub fn observe(st: &State, caller: usize, kind: EventKind) {
    let stamp = st.recorder.stamp();
    st.recorder.record(stamp, kind, None, caller);
}

/// Records a copy the runtime made without a driver hook seeing it.
pub fn observe_copy(st: &State, caller: usize, c: Option<Copy>) {
    if let Some(c) = c {
        // The copy already happened (no driver hook saw it): record it, learn nothing.
        let noted = note(st, &c, false);
        record_transfer(st, &c, &noted, caller);
    }
}

/// A runtime copy of `count` bytes of `cudaMemcpyKind` `kind` (0 HtoH, 1 HtoD, 2 DtoH,
/// 3 DtoD, 4 default).
pub fn runtime_copy(
    st: &State,
    dst: usize,
    src: usize,
    count: usize,
    kind: c_int,
    stream: Option<usize>,
    per_thread: bool,
) -> Option<Copy> {
    let linear = |direction, host: usize, device: usize| Copy {
        direction,
        host,
        device: device as u64,
        bytes: count,
        span: count,
        stream,
        per_thread,
    };
    match kind {
        0 => Some(linear(Direction::HtoH, dst, 0)),
        1 => Some(linear(Direction::HtoD, src, dst)),
        2 => Some(linear(Direction::DtoH, dst, src)),
        3 => Some(linear(Direction::DtoD, 0, dst)),
        4 => unified(st, dst as u64, src as u64, count, stream, per_thread),
        _ => None,
    }
}

/// Whether `ptr` is an allocation pinwise served (the runtime's free of it is pinwise's).
pub fn served_by_pinwise(ptr: *mut c_void) -> Option<&'static State> {
    if ptr.is_null() || !state::enabled() || guard::inside() {
        return None;
    }
    let st = state::current()?;
    st.pinning()?.owns(ptr as usize).then_some(st)
}

/// `cudaFreeHost` of an allocation pinwise served: freed here (cudart never saw it as
/// its own). Returns the runtime error code.
pub fn runtime_free_served(caller: usize, ptr: *mut c_void) -> c_int {
    let rc = host_free(caller, ptr, || CUDA_ERROR_INVALID_VALUE);
    if rc == CUDA_SUCCESS {
        0
    } else {
        1 // cudaErrorInvalidValue
    }
}

/// Before the runtime registers `[p, p + size)` for the program.
pub fn runtime_before_register(p: *mut c_void, size: usize) {
    if let Some(st) = active() {
        if let Some(pinning) = st.pinning() {
            guarded(|| pinning.before_program_register(p as usize, size, &st.stats, &st.recorder));
        }
    }
}

/// Whether `p` lies in memory registered, or allocated pinned, by pinwise: never the
/// program's to unregister (plain CUDA's answer: not registered). Any pointer inside a
/// registration of pinwise's counts, not only its page-aligned start (the driver would
/// answer an interior pointer with another error): the program registering memory of its
/// own makes pinwise give back registrations there first, so the two never overlap.
pub fn registered_by_pinwise_only(p: *mut c_void) -> bool {
    state::enabled()
        && (PROMOTED_RANGES.covering(p as usize, 1).is_some()
            || state::current()
                .and_then(|st| st.pinning())
                .is_some_and(|pn| pn.served_containing(p as usize).is_some()))
}

/// Before a runtime query about `ptr`.
pub fn runtime_before_query(ptr: *const c_void) {
    if let Some(st) = active() {
        before_query(st, ptr as usize);
    }
}

/// `cudaHostGetFlags` for an allocation pinwise served: the flags the program asked for.
pub fn served_flags(ptr: *const c_void) -> Option<c_uint> {
    let st = active()?;
    let (_, _, flags) = st.pinning()?.served_containing(ptr as usize)?;
    HookStats::bump(&st.stats.queries_answered);
    Some(flags)
}

// ---------- streams and contexts ending ----------

/// The pinwise state whose allocator may hold stream or event handles, when pinwise's own
/// code is not the caller. Never creates the state (nothing to forget then).
fn holding_handles() -> Option<&'static Pinning> {
    if !state::enabled() || guard::inside() {
        return None;
    }
    state::current()?.pinning()
}

/// `cuStreamDestroy(_v2)`: the handle dangles once the driver destroyed the stream, and the
/// real driver may crash when it is passed again. pinwise remembers the streams allocations
/// were copied on asynchronously (to make a freed block wait for those copies), so it lets go
/// of this one first: waits for its work if an allocation still holds it, and forgets it.
pub fn stream_destroy(stream: usize, forward: impl FnOnce() -> CUresult) -> CUresult {
    if let Some(p) = holding_handles() {
        let stream = StreamHandle(stream as u64);
        if guarded(|| p.engine.forget_stream(stream)) == Some(true) {
            if let Some(st) = state::current() {
                HookStats::bump(&st.stats.streams_forgotten);
            }
        }
    }
    forward()
}

/// `cuDevicePrimaryCtxRelease(_v2)`, `cuDevicePrimaryCtxReset(_v2)`, `cuCtxDestroy(_v2)`
/// (`destroyed`: that context, when the call names one): the context may end, and every
/// stream and event made in it with it. pinwise waits for the copies it tracks and drops its
/// stream and event handles first (a later free must not pass a dead handle to the driver),
/// and forgets a destroyed context it would otherwise make current for its own calls.
pub fn context_ending(destroyed: usize, forward: impl FnOnce() -> CUresult) -> CUresult {
    /// Lowers the count again, even if the work below unwinds.
    struct Ending;
    impl Drop for Ending {
        fn drop(&mut self) {
            CONTEXTS_ENDING.fetch_sub(1, Ordering::AcqRel);
        }
    }
    CONTEXTS_ENDING.fetch_add(1, Ordering::AcqRel);
    let _ending = Ending;
    end_context(destroyed, forward)
}

/// Context releases and destructions in progress (see [`host_alloc`]).
static CONTEXTS_ENDING: AtomicUsize = AtomicUsize::new(0);

fn end_context(destroyed: usize, forward: impl FnOnce() -> CUresult) -> CUresult {
    if let Some(p) = holding_handles() {
        guarded(|| {
            p.engine
                .forget_context_objects(|s| s.0 <= CU_STREAM_PER_THREAD as u64);
            // The pool's pinned memory ends with the context: hand none of it out again.
            // (Suspected cause of the SIGSEGVs exit_race's teardown variant had on an H100
            // under pinwise: pool blocks served after the primary context's release.)
            p.engine.retire_pool();
            if destroyed != 0 {
                p.driver.forget_context(destroyed);
            }
        });
        if let Some(st) = state::current() {
            HookStats::bump(&st.stats.contexts_ended);
        }
    }
    forward()
}
