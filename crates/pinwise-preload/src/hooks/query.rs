//! Pointer queries (`cuPointerGetAttribute(s)`, `cuMemHostGetFlags`,
//! `cuMemHostGetDevicePointer`, their runtime forms): a served pageable allocation is
//! registered before the driver is asked, and pinwise's own allocations are described as
//! plain CUDA would describe them.

use std::ffi::{c_int, c_uint, c_void};

use pinwise_cuda::sys::{
    CUdeviceptr, CUresult, CUDA_ERROR_INVALID_VALUE, CUDA_SUCCESS, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
    CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
};

use super::{active, driver_active, guarded};
use crate::pinning::PROMOTED_RANGES;
use crate::state::{self, State};
use crate::stats::HookStats;

/// Before a query about `ptr`: a served pageable allocation, or a pool buffer, is
/// registered first, so that the driver answers as plain CUDA would.
///
/// The runtime's own queries inside a copy it is making (a statically linked cudart asks
/// about its copies' host sides) are not the program's: they register nothing (the copy
/// itself is pinwise's business: a pool buffer's copy goes to the service).
fn before_query(st: &State, ptr: usize) {
    if crate::guard::in_runtime_copy() {
        return;
    }
    // A pool buffer is registered here first (`pinwise run --pool`).
    guarded(|| crate::pool::before_query(st, ptr));
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
    let Some(flags) = st
        .pinning()
        .and_then(|pn| pn.served_containing(p as usize))
        .map(|(_, _, flags)| flags)
        .or_else(|| crate::pool::flags_of(p as usize))
    else {
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
    let Some((start, size)) = st
        .pinning()
        .and_then(|p| p.served_containing(ptr))
        .map(|(start, size, _)| (start, size))
        .or_else(|| crate::pool::range_of(ptr))
    else {
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

/// Whether `p` lies in memory registered, or allocated pinned, by pinwise: never the
/// program's to unregister (plain CUDA's answer: not registered). Any pointer inside a
/// registration of pinwise's counts, not only its page-aligned start (the driver would
/// answer an interior pointer with another error): the program registering memory of its
/// own makes pinwise give back registrations there first, so the two never overlap.
pub fn registered_by_pinwise_only(p: *mut c_void) -> bool {
    state::enabled()
        && (PROMOTED_RANGES.covering(p as usize, 1).is_some()
            || crate::pool::flags_of(p as usize).is_some()
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
    // A pool buffer's flags even when pinning never started in this process.
    let flags = st
        .pinning()
        .and_then(|pn| pn.served_containing(ptr as usize))
        .map(|(_, _, flags)| flags)
        .or_else(|| crate::pool::flags_of(ptr as usize))?;
    HookStats::bump(&st.stats.queries_answered);
    Some(flags)
}
