//! The runtime level (shared cudart): a runtime call tells the driver hooks underneath its
//! application call site, and is recorded here when no driver hook saw it.

use std::ffi::{c_int, c_uint, c_void};

use pinwise_core::EventKind;
use pinwise_cuda::sys::{CUDA_ERROR_INVALID_VALUE, CUDA_SUCCESS};

use super::alloc::host_free;
use super::copy::{is_host, note, record_transfer};
use super::{active, guarded};
use crate::decode::{self, HostCopy};
use crate::guard;
use crate::state::{self, State};
use crate::stats::HookStats;

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
    super::alloc::record_pinned_alloc(st, caller, p as usize, size, flags);
}

/// Records an event the runtime caused without a driver hook seeing it.
pub fn observe(st: &State, caller: usize, kind: EventKind) {
    let stamp = st.recorder.stamp();
    st.recorder.record(stamp, kind, None, caller);
}

/// Records a copy the runtime made without a driver hook seeing it.
pub fn observe_copy(st: &State, caller: usize, c: Option<HostCopy>) {
    if let Some(c) = c {
        // The copy already happened (no driver hook saw it): record it, learn nothing.
        let noted = note(st, &c, false);
        record_transfer(st, &c, &noted, caller, false);
    }
}

/// A runtime copy of `count` bytes of `cudaMemcpyKind` `kind` (see
/// [`decode::runtime_copy`]; for `cudaMemcpyDefault` inside another runtime copy of a known
/// kind, that kind, else the driver tells each side).
pub fn runtime_copy(
    st: &State,
    dst: usize,
    src: usize,
    count: usize,
    kind: c_int,
    stream: Option<usize>,
    per_thread: bool,
) -> Option<HostCopy> {
    let kind = match kind {
        4 => guard::runtime_copy_kind().unwrap_or(4),
        k => k,
    };
    decode::runtime_copy(dst, src, count, kind, stream, per_thread, |p| {
        is_host(st, p)
    })
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
