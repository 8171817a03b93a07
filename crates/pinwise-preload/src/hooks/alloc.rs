//! Pinned allocations (`cuMemHostAlloc`, `cuMemAllocHost`, `cuMemFreeHost`), the program's
//! own registrations (`cuMemHostRegister`, `cuMemHostUnregister`), and the `free`/`munmap`
//! hooks' work on memory pinwise registered.

use std::ffi::{c_uint, c_void};

use pinwise_alloc::AllocError;
use pinwise_core::{EventKind, HostMemKind};
use pinwise_cuda::sys::{
    CUresult, CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, CUDA_ERROR_INVALID_VALUE, CUDA_SUCCESS,
};

use super::query::registered_by_pinwise_only;
use super::{driver_active, guarded};
use crate::guard;
use crate::pinning::PROMOTED_RANGES;
use crate::promote::Owner;
use crate::state::{self, State};
use crate::stats::HookStats;

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
    // Pinwise's allocator times what it does with the standard library's clock.
    let _counter = crate::cycles::CounterReadable::here();
    let site_addr = allocation_site(st, caller);
    HookStats::bump(&st.stats.host_allocs);
    // While a context ends, requests go to CUDA as without pinwise: memory pinwise would
    // hand out now (a pool block, or a segment allocated just before the release) is
    // unmapped by the release a moment later. This narrows the race, it does not close it:
    // a request that passed this check just before the release began is served by the
    // pool, as a request already inside cuMemHostAlloc would be by CUDA.
    if !super::context::contexts_ending() {
        if let Some(ptr) = guarded(|| crate::pool::alloc(st, size, flags)).flatten() {
            // SAFETY: `pp` is non-null and writable (checked above; CUDA's contract).
            unsafe { *pp = ptr as *mut c_void };
            HookStats::bump(&st.stats.served_pinned);
            record_pinned_alloc(
                st,
                site_addr,
                ptr,
                size,
                flags | pinwise_core::pool_use::ALLOC_FLAG_POOL,
            );
            return CUDA_SUCCESS;
        }
    }
    let served = if super::context::contexts_ending() {
        None
    } else {
        guarded(|| {
            let pinning = st.pinning_or_start()?;
            let site = st.recorder.resolve(site_addr);
            Some((
                pinning.alloc(size, flags, site, &st.stats, &st.recorder),
                site,
            ))
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
        if let Some(pinning) = st.pinning() {
            guarded(|| pinning.outside_locked(p as usize, size));
        }
        record_pinned_alloc(st, site_addr, p as usize, size, flags);
    }
    rc
}

/// Records a pinned allocation of `size` bytes at `start` made from `site_addr`, with its
/// stack (captured before the event's timestamp is taken).
pub(super) fn record_pinned_alloc(
    st: &State,
    site_addr: usize,
    start: usize,
    size: usize,
    flags: c_uint,
) {
    let stack = st.recorder.stack_from(site_addr);
    let stamp = st.recorder.stamp();
    st.recorder.record_with_stack(
        stamp,
        EventKind::Alloc {
            start: start as u64,
            size: size as u64,
            kind: HostMemKind::PinnedAlloc,
            flags,
        },
        None,
        site_addr,
        stack,
    );
}

/// `cuMemFreeHost` from `caller`.
pub fn host_free(caller: usize, p: *mut c_void, forward: impl FnOnce() -> CUresult) -> CUresult {
    let Some(st) = driver_active() else {
        return forward();
    };
    if p.is_null() {
        return forward();
    }
    let _counter = crate::cycles::CounterReadable::here();
    let site_addr = allocation_site(st, caller);
    HookStats::bump(&st.stats.host_frees);
    if crate::pool::touches(p as usize, 1) {
        // Stamped before the buffer goes back, as below.
        let stamp = st.recorder.stamp();
        if guarded(|| crate::pool::free(st, p as usize)) == Some(true) {
            st.recorder
                .record(stamp, EventKind::Free { start: p as u64 }, None, site_addr);
            return CUDA_SUCCESS;
        }
        st.recorder.cancel(stamp);
    }
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
    let taken = st
        .pinning()
        .and_then(|pinning| guarded(|| pinning.outside_releasing(p as usize)).flatten());
    let rc = forward();
    if let Some(pinning) = st.pinning() {
        guarded(|| pinning.outside_released(p as usize, taken, rc == CUDA_SUCCESS));
    }
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
    // Started here if not yet: the program's own pinned bytes set the ceiling of what
    // pinwise pins later (`pinwise_core::decide::ceiling`).
    if let Some(pinning) = guarded(|| st.pinning_or_start()).flatten() {
        guarded(|| pinning.before_program_register(p as usize, size, &st.stats, &st.recorder));
    }
    let rc = forward();
    if rc == CUDA_SUCCESS && !p.is_null() {
        if let Some(pinning) = st.pinning() {
            guarded(|| pinning.outside_locked(p as usize, size));
        }
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
    let taken = st
        .pinning()
        .and_then(|pinning| guarded(|| pinning.outside_releasing(p as usize)).flatten());
    let rc = forward();
    if let Some(pinning) = st.pinning() {
        guarded(|| pinning.outside_released(p as usize, taken, rc == CUDA_SUCCESS));
    }
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

/// Before a stream capture begins (`cuStreamBeginCapture*`): the allocations pinwise served
/// pageable for pinned requests are registered, as a copy captured into the graph needs
/// ([`crate::pinning::Pinning::before_capture`]).
pub fn before_capture_begin() {
    let Some(st) = driver_active() else {
        return;
    };
    if let Some(pinning) = st.pinning() {
        guarded(|| pinning.before_capture(&st.stats, &st.recorder));
    }
}

/// Before `free(p)` or `realloc(p, ..)`: unregisters pinwise's registrations inside the
/// block. Cost while nothing is promoted: one atomic load (the caller checks
/// [`crate::promote::PromotedTable::any_active`] first).
pub fn before_free(p: usize) {
    let Some(st) = state::current() else {
        return;
    };
    let Some(pinning) = st.pinning() else { return };
    // SAFETY: `p` is a live heap block the program is about to free (its contract with
    // free/realloc); malloc_usable_size only reads its header.
    let usable = unsafe { libc::malloc_usable_size(p as *mut libc::c_void) };
    let end = p.saturating_add(usable.max(1));
    while let Some(i) = PROMOTED_RANGES.overlapping_used(Owner::Program, p, end) {
        if !pinning.demote(i, &st.stats, &st.recorder) {
            break;
        }
    }
}

/// Before `munmap(addr, len)`: unregisters pinwise's registrations of those pages.
pub fn before_munmap(addr: usize, len: usize) {
    let Some(st) = state::current() else {
        return;
    };
    let Some(pinning) = st.pinning() else { return };
    let end = addr.saturating_add(len);
    while let Some(i) = PROMOTED_RANGES.overlapping_registered(addr, end) {
        if !pinning.demote(i, &st.stats, &st.recorder) {
            break;
        }
    }
}
