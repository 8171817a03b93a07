//! Runtime entry points (shared cudart): forwarded to the next definition. They tell the
//! driver hooks underneath the application's call site, keep the runtime's own pointer
//! queries during copies from promoting anything, and record the call themselves when no
//! driver hook saw it. `cudaFreeHost` of an allocation pinwise served is pinwise's.
//!
//! Functions with more than five integer arguments have no trampoline: their call site is
//! unknown (the driver hook's own is used).

#![allow(non_snake_case)]

use std::ffi::{c_int, c_uint, c_void};

use pinwise_core::EventKind;

use super::export_with_caller;
use crate::decode::{self, Memcpy3DParms};
use crate::hooks;
use crate::real::RuntimeFn;

type CudaError = c_int;
/// `cudaErrorInitializationError`: no runtime to forward to (only reachable if the program
/// calls a runtime function while no cudart is loaded).
const NO_RUNTIME: CudaError = 3;
/// `cudaErrorHostMemoryNotRegistered`.
const NOT_REGISTERED: CudaError = 713;

/// The real runtime function of `$slot` as type `$ty`, or `NO_RUNTIME` from the enclosing
/// function.
macro_rules! next_or_return {
    ($slot:expr, $ty:ty) => {
        match $slot.get() {
            // SAFETY: the runtime's function of that name, whose C signature is `$ty`.
            Some(a) => unsafe { std::mem::transmute::<usize, $ty>(a) },
            None => return NO_RUNTIME,
        }
    };
}

// ---------- memory ----------

static MALLOC_HOST: RuntimeFn = RuntimeFn::new(c"cudaMallocHost");
static HOST_ALLOC: RuntimeFn = RuntimeFn::new(c"cudaHostAlloc");
static FREE_HOST: RuntimeFn = RuntimeFn::new(c"cudaFreeHost");
static HOST_REGISTER: RuntimeFn = RuntimeFn::new(c"cudaHostRegister");
static HOST_UNREGISTER: RuntimeFn = RuntimeFn::new(c"cudaHostUnregister");
static HOST_GET_DEVICE_POINTER: RuntimeFn = RuntimeFn::new(c"cudaHostGetDevicePointer");
static HOST_GET_FLAGS: RuntimeFn = RuntimeFn::new(c"cudaHostGetFlags");
static POINTER_GET_ATTRIBUTES: RuntimeFn = RuntimeFn::new(c"cudaPointerGetAttributes");

unsafe extern "C" fn malloc_host(ptr: *mut *mut c_void, size: usize, caller: usize) -> CudaError {
    let f = next_or_return!(
        MALLOC_HOST,
        unsafe extern "C" fn(*mut *mut c_void, usize) -> CudaError
    );
    hooks::runtime::runtime_call(
        caller,
        false,
        // SAFETY: the caller's arguments (the runtime's contract), passed on.
        || unsafe { f(ptr, size) },
        // SAFETY: the call succeeded, so `ptr` is non-null and holds the allocation.
        |st, _| hooks::runtime::observe_alloc(st, caller, unsafe { *ptr }, size, 0),
    )
}
export_with_caller!(cudaMallocHost => malloc_host, 2);

unsafe extern "C" fn host_alloc(
    ptr: *mut *mut c_void,
    size: usize,
    flags: c_uint,
    caller: usize,
) -> CudaError {
    let f = next_or_return!(
        HOST_ALLOC,
        unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> CudaError
    );
    hooks::runtime::runtime_call(
        caller,
        false,
        // SAFETY: the caller's arguments, passed on.
        || unsafe { f(ptr, size, flags) },
        // SAFETY: the call succeeded, so `ptr` is non-null and holds the allocation.
        |st, _| hooks::runtime::observe_alloc(st, caller, unsafe { *ptr }, size, flags),
    )
}
export_with_caller!(cudaHostAlloc => host_alloc, 3);

unsafe extern "C" fn free_host(ptr: *mut c_void, caller: usize) -> CudaError {
    if hooks::runtime::served_by_pinwise(ptr).is_some() {
        let frame = crate::guard::enter_runtime(caller, false, -1);
        let rc = hooks::runtime::runtime_free_served(caller, ptr);
        crate::guard::leave_runtime(frame);
        return rc;
    }
    let f = next_or_return!(FREE_HOST, unsafe extern "C" fn(*mut c_void) -> CudaError);
    hooks::runtime::runtime_call(
        caller,
        false,
        // SAFETY: the caller's argument, passed on.
        || unsafe { f(ptr) },
        |st, _| hooks::runtime::observe(st, caller, EventKind::Free { start: ptr as u64 }),
    )
}
export_with_caller!(cudaFreeHost => free_host, 1);

unsafe extern "C" fn host_register(
    ptr: *mut c_void,
    size: usize,
    flags: c_uint,
    caller: usize,
) -> CudaError {
    let f = next_or_return!(
        HOST_REGISTER,
        unsafe extern "C" fn(*mut c_void, usize, c_uint) -> CudaError
    );
    hooks::runtime::runtime_before_register(ptr, size);
    hooks::runtime::runtime_call(
        caller,
        false,
        // SAFETY: the caller's arguments, passed on.
        || unsafe { f(ptr, size, flags) },
        |st, _| {
            hooks::runtime::observe(
                st,
                caller,
                EventKind::PinPages {
                    start: ptr as u64,
                    bytes: size as u64,
                    pages: None,
                },
            )
        },
    )
}
export_with_caller!(cudaHostRegister => host_register, 3);

unsafe extern "C" fn host_unregister(ptr: *mut c_void, caller: usize) -> CudaError {
    if hooks::query::registered_by_pinwise_only(ptr) {
        return NOT_REGISTERED;
    }
    let f = next_or_return!(
        HOST_UNREGISTER,
        unsafe extern "C" fn(*mut c_void) -> CudaError
    );
    hooks::runtime::runtime_call(
        caller,
        false,
        // SAFETY: the caller's argument, passed on.
        || unsafe { f(ptr) },
        |st, _| {
            hooks::runtime::observe(
                st,
                caller,
                EventKind::UnpinPages {
                    start: ptr as u64,
                    pages: None,
                },
            )
        },
    )
}
export_with_caller!(cudaHostUnregister => host_unregister, 1);

unsafe extern "C" fn host_get_device_pointer(
    pdev: *mut *mut c_void,
    phost: *mut c_void,
    flags: c_uint,
    caller: usize,
) -> CudaError {
    let f = next_or_return!(
        HOST_GET_DEVICE_POINTER,
        unsafe extern "C" fn(*mut *mut c_void, *mut c_void, c_uint) -> CudaError
    );
    hooks::query::runtime_before_query(phost);
    // SAFETY: the caller's arguments, passed on.
    hooks::runtime::runtime_call(
        caller,
        false,
        || unsafe { f(pdev, phost, flags) },
        |_, _| {},
    )
}
export_with_caller!(cudaHostGetDevicePointer => host_get_device_pointer, 3);

unsafe extern "C" fn host_get_flags(
    pflags: *mut c_uint,
    phost: *mut c_void,
    caller: usize,
) -> CudaError {
    hooks::query::runtime_before_query(phost);
    if let Some(flags) = hooks::query::served_flags(phost) {
        if pflags.is_null() {
            return 1; // cudaErrorInvalidValue
        }
        // SAFETY: non-null and writable (the runtime's contract).
        unsafe { *pflags = flags };
        return 0;
    }
    let f = next_or_return!(
        HOST_GET_FLAGS,
        unsafe extern "C" fn(*mut c_uint, *mut c_void) -> CudaError
    );
    // SAFETY: the caller's arguments, passed on.
    hooks::runtime::runtime_call(caller, false, || unsafe { f(pflags, phost) }, |_, _| {})
}
export_with_caller!(cudaHostGetFlags => host_get_flags, 2);

unsafe extern "C" fn pointer_get_attributes(
    attrs: *mut c_void,
    ptr: *const c_void,
    caller: usize,
) -> CudaError {
    let f = next_or_return!(
        POINTER_GET_ATTRIBUTES,
        unsafe extern "C" fn(*mut c_void, *const c_void) -> CudaError
    );
    hooks::query::runtime_before_query(ptr);
    // SAFETY: the caller's arguments, passed on.
    hooks::runtime::runtime_call(caller, false, || unsafe { f(attrs, ptr) }, |_, _| {})
}
export_with_caller!(cudaPointerGetAttributes => pointer_get_attributes, 2);

// ---------- 1D copies ----------

static MEMCPY: RuntimeFn = RuntimeFn::new(c"cudaMemcpy");
static MEMCPY_PTDS: RuntimeFn = RuntimeFn::new(c"cudaMemcpy_ptds");
static MEMCPY_ASYNC: RuntimeFn = RuntimeFn::new(c"cudaMemcpyAsync");
static MEMCPY_ASYNC_PTSZ: RuntimeFn = RuntimeFn::new(c"cudaMemcpyAsync_ptsz");

type MemcpyFn = unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int) -> CudaError;
type MemcpyAsyncFn =
    unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int, *mut c_void) -> CudaError;

fn memcpy_common(
    slot: &RuntimeFn,
    per_thread: bool,
    dst: *mut c_void,
    src: *const c_void,
    count: usize,
    kind: c_int,
    caller: usize,
) -> CudaError {
    let f = next_or_return!(slot, MemcpyFn);
    hooks::runtime::runtime_call_kind(
        caller,
        true,
        kind,
        // SAFETY: the caller's arguments, passed on.
        || unsafe { f(dst, src, count, kind) },
        |st, _| {
            let c = hooks::runtime::runtime_copy(
                st,
                dst as usize,
                src as usize,
                count,
                kind,
                None,
                per_thread,
            );
            hooks::runtime::observe_copy(st, caller, c)
        },
    )
}

#[allow(clippy::too_many_arguments)]
fn memcpy_async_common(
    slot: &RuntimeFn,
    per_thread: bool,
    dst: *mut c_void,
    src: *const c_void,
    count: usize,
    kind: c_int,
    stream: *mut c_void,
    caller: usize,
) -> CudaError {
    let f = next_or_return!(slot, MemcpyAsyncFn);
    hooks::runtime::runtime_call_kind(
        caller,
        true,
        kind,
        // SAFETY: the caller's arguments, passed on.
        || unsafe { f(dst, src, count, kind, stream) },
        |st, _| {
            let c = hooks::runtime::runtime_copy(
                st,
                dst as usize,
                src as usize,
                count,
                kind,
                Some(stream as usize),
                per_thread,
            );
            hooks::runtime::observe_copy(st, caller, c)
        },
    )
}

unsafe extern "C" fn memcpy(
    dst: *mut c_void,
    src: *const c_void,
    count: usize,
    kind: c_int,
    caller: usize,
) -> CudaError {
    memcpy_common(&MEMCPY, false, dst, src, count, kind, caller)
}
export_with_caller!(cudaMemcpy => memcpy, 4);
unsafe extern "C" fn memcpy_ptds(
    dst: *mut c_void,
    src: *const c_void,
    count: usize,
    kind: c_int,
    caller: usize,
) -> CudaError {
    memcpy_common(&MEMCPY_PTDS, true, dst, src, count, kind, caller)
}
export_with_caller!(cudaMemcpy_ptds => memcpy_ptds, 4);
unsafe extern "C" fn memcpy_async(
    dst: *mut c_void,
    src: *const c_void,
    count: usize,
    kind: c_int,
    stream: *mut c_void,
    caller: usize,
) -> CudaError {
    memcpy_async_common(&MEMCPY_ASYNC, false, dst, src, count, kind, stream, caller)
}
export_with_caller!(cudaMemcpyAsync => memcpy_async, 5);
unsafe extern "C" fn memcpy_async_ptsz(
    dst: *mut c_void,
    src: *const c_void,
    count: usize,
    kind: c_int,
    stream: *mut c_void,
    caller: usize,
) -> CudaError {
    memcpy_async_common(
        &MEMCPY_ASYNC_PTSZ,
        true,
        dst,
        src,
        count,
        kind,
        stream,
        caller,
    )
}
export_with_caller!(cudaMemcpyAsync_ptsz => memcpy_async_ptsz, 5);

// ---------- symbols ----------

static TO_SYMBOL: RuntimeFn = RuntimeFn::new(c"cudaMemcpyToSymbol");
static TO_SYMBOL_PTDS: RuntimeFn = RuntimeFn::new(c"cudaMemcpyToSymbol_ptds");
static FROM_SYMBOL: RuntimeFn = RuntimeFn::new(c"cudaMemcpyFromSymbol");
static FROM_SYMBOL_PTDS: RuntimeFn = RuntimeFn::new(c"cudaMemcpyFromSymbol_ptds");
static TO_SYMBOL_ASYNC: RuntimeFn = RuntimeFn::new(c"cudaMemcpyToSymbolAsync");
static TO_SYMBOL_ASYNC_PTSZ: RuntimeFn = RuntimeFn::new(c"cudaMemcpyToSymbolAsync_ptsz");
static FROM_SYMBOL_ASYNC: RuntimeFn = RuntimeFn::new(c"cudaMemcpyFromSymbolAsync");
static FROM_SYMBOL_ASYNC_PTSZ: RuntimeFn = RuntimeFn::new(c"cudaMemcpyFromSymbolAsync_ptsz");

type SymbolFn =
    unsafe extern "C" fn(*const c_void, *const c_void, usize, usize, c_int) -> CudaError;
type SymbolAsyncFn = unsafe extern "C" fn(
    *const c_void,
    *const c_void,
    usize,
    usize,
    c_int,
    *mut c_void,
) -> CudaError;

#[allow(clippy::too_many_arguments)]
fn symbol_common(
    slot: &RuntimeFn,
    to_symbol: bool,
    per_thread: bool,
    a: *const c_void,
    b: *const c_void,
    count: usize,
    offset: usize,
    kind: c_int,
    caller: usize,
) -> CudaError {
    let f = next_or_return!(slot, SymbolFn);
    // To a symbol: (symbol, src); from a symbol: (dst, symbol).
    let host = if to_symbol { b } else { a };
    hooks::runtime::runtime_call(
        caller,
        true,
        // SAFETY: the caller's arguments, passed on.
        || unsafe { f(a, b, count, offset, kind) },
        |st, _| {
            hooks::runtime::observe_copy(
                st,
                caller,
                decode::symbol_copy(to_symbol, host, count, kind, None, per_thread),
            )
        },
    )
}

#[allow(clippy::too_many_arguments)]
fn symbol_async_common(
    slot: &RuntimeFn,
    to_symbol: bool,
    per_thread: bool,
    a: *const c_void,
    b: *const c_void,
    count: usize,
    offset: usize,
    kind: c_int,
    stream: *mut c_void,
) -> CudaError {
    let f = next_or_return!(slot, SymbolAsyncFn);
    let host = if to_symbol { b } else { a };
    hooks::runtime::runtime_call(
        0,
        true,
        // SAFETY: the caller's arguments, passed on.
        || unsafe { f(a, b, count, offset, kind, stream) },
        |st, _| {
            let c = decode::symbol_copy(
                to_symbol,
                host,
                count,
                kind,
                Some(stream as usize),
                per_thread,
            );
            hooks::runtime::observe_copy(st, 0, c)
        },
    )
}

unsafe extern "C" fn to_symbol(
    s: *const c_void,
    src: *const c_void,
    count: usize,
    offset: usize,
    kind: c_int,
    caller: usize,
) -> CudaError {
    symbol_common(&TO_SYMBOL, true, false, s, src, count, offset, kind, caller)
}
export_with_caller!(cudaMemcpyToSymbol => to_symbol, 5);
unsafe extern "C" fn to_symbol_ptds(
    s: *const c_void,
    src: *const c_void,
    count: usize,
    offset: usize,
    kind: c_int,
    caller: usize,
) -> CudaError {
    symbol_common(
        &TO_SYMBOL_PTDS,
        true,
        true,
        s,
        src,
        count,
        offset,
        kind,
        caller,
    )
}
export_with_caller!(cudaMemcpyToSymbol_ptds => to_symbol_ptds, 5);
unsafe extern "C" fn from_symbol(
    dst: *const c_void,
    s: *const c_void,
    count: usize,
    offset: usize,
    kind: c_int,
    caller: usize,
) -> CudaError {
    symbol_common(
        &FROM_SYMBOL,
        false,
        false,
        dst,
        s,
        count,
        offset,
        kind,
        caller,
    )
}
export_with_caller!(cudaMemcpyFromSymbol => from_symbol, 5);
unsafe extern "C" fn from_symbol_ptds(
    dst: *const c_void,
    s: *const c_void,
    count: usize,
    offset: usize,
    kind: c_int,
    caller: usize,
) -> CudaError {
    symbol_common(
        &FROM_SYMBOL_PTDS,
        false,
        true,
        dst,
        s,
        count,
        offset,
        kind,
        caller,
    )
}
export_with_caller!(cudaMemcpyFromSymbol_ptds => from_symbol_ptds, 5);

/// `cudaMemcpyToSymbolAsync` (six arguments: no trampoline, call site unknown).
///
/// # Safety
/// The runtime's contract.
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpyToSymbolAsync(
    s: *const c_void,
    src: *const c_void,
    count: usize,
    offset: usize,
    kind: c_int,
    stream: *mut c_void,
) -> CudaError {
    symbol_async_common(
        &TO_SYMBOL_ASYNC,
        true,
        false,
        s,
        src,
        count,
        offset,
        kind,
        stream,
    )
}
/// `cudaMemcpyToSymbolAsync_ptsz`.
///
/// # Safety
/// The runtime's contract.
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpyToSymbolAsync_ptsz(
    s: *const c_void,
    src: *const c_void,
    count: usize,
    offset: usize,
    kind: c_int,
    stream: *mut c_void,
) -> CudaError {
    symbol_async_common(
        &TO_SYMBOL_ASYNC_PTSZ,
        true,
        true,
        s,
        src,
        count,
        offset,
        kind,
        stream,
    )
}
/// `cudaMemcpyFromSymbolAsync`.
///
/// # Safety
/// The runtime's contract.
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpyFromSymbolAsync(
    dst: *const c_void,
    s: *const c_void,
    count: usize,
    offset: usize,
    kind: c_int,
    stream: *mut c_void,
) -> CudaError {
    symbol_async_common(
        &FROM_SYMBOL_ASYNC,
        false,
        false,
        dst,
        s,
        count,
        offset,
        kind,
        stream,
    )
}
/// `cudaMemcpyFromSymbolAsync_ptsz`.
///
/// # Safety
/// The runtime's contract.
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpyFromSymbolAsync_ptsz(
    dst: *const c_void,
    s: *const c_void,
    count: usize,
    offset: usize,
    kind: c_int,
    stream: *mut c_void,
) -> CudaError {
    symbol_async_common(
        &FROM_SYMBOL_ASYNC_PTSZ,
        false,
        true,
        dst,
        s,
        count,
        offset,
        kind,
        stream,
    )
}

// ---------- 2D and 3D copies ----------

static MEMCPY_2D: RuntimeFn = RuntimeFn::new(c"cudaMemcpy2D");
static MEMCPY_2D_PTDS: RuntimeFn = RuntimeFn::new(c"cudaMemcpy2D_ptds");
static MEMCPY_2D_ASYNC: RuntimeFn = RuntimeFn::new(c"cudaMemcpy2DAsync");
static MEMCPY_2D_ASYNC_PTSZ: RuntimeFn = RuntimeFn::new(c"cudaMemcpy2DAsync_ptsz");
static MEMCPY_3D: RuntimeFn = RuntimeFn::new(c"cudaMemcpy3D");
static MEMCPY_3D_PTDS: RuntimeFn = RuntimeFn::new(c"cudaMemcpy3D_ptds");
static MEMCPY_3D_ASYNC: RuntimeFn = RuntimeFn::new(c"cudaMemcpy3DAsync");
static MEMCPY_3D_ASYNC_PTSZ: RuntimeFn = RuntimeFn::new(c"cudaMemcpy3DAsync_ptsz");

type Memcpy2DFn = unsafe extern "C" fn(
    *mut c_void,
    usize,
    *const c_void,
    usize,
    usize,
    usize,
    c_int,
) -> CudaError;
type Memcpy2DAsyncFn = unsafe extern "C" fn(
    *mut c_void,
    usize,
    *const c_void,
    usize,
    usize,
    usize,
    c_int,
    *mut c_void,
) -> CudaError;

/// `cudaMemcpy2D` (seven arguments: no trampoline, call site unknown).
///
/// # Safety
/// The runtime's contract.
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpy2D(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: c_int,
) -> CudaError {
    let f = next_or_return!(MEMCPY_2D, Memcpy2DFn);
    hooks::runtime::runtime_call(
        0,
        true,
        // SAFETY: the caller's arguments, passed on.
        || unsafe { f(dst, dpitch, src, spitch, width, height, kind) },
        |st, _| {
            hooks::runtime::observe_copy(
                st,
                0,
                decode::runtime_copy_2d(dst, dpitch, src, spitch, width, height, kind, None, false),
            )
        },
    )
}
/// `cudaMemcpy2D_ptds`.
///
/// # Safety
/// The runtime's contract.
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpy2D_ptds(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: c_int,
) -> CudaError {
    let f = next_or_return!(MEMCPY_2D_PTDS, Memcpy2DFn);
    hooks::runtime::runtime_call(
        0,
        true,
        // SAFETY: the caller's arguments, passed on.
        || unsafe { f(dst, dpitch, src, spitch, width, height, kind) },
        |st, _| {
            hooks::runtime::observe_copy(
                st,
                0,
                decode::runtime_copy_2d(dst, dpitch, src, spitch, width, height, kind, None, true),
            )
        },
    )
}
/// `cudaMemcpy2DAsync`.
///
/// # Safety
/// The runtime's contract.
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpy2DAsync(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: c_int,
    stream: *mut c_void,
) -> CudaError {
    let f = next_or_return!(MEMCPY_2D_ASYNC, Memcpy2DAsyncFn);
    hooks::runtime::runtime_call(
        0,
        true,
        // SAFETY: the caller's arguments, passed on.
        || unsafe { f(dst, dpitch, src, spitch, width, height, kind, stream) },
        |st, _| {
            hooks::runtime::observe_copy(
                st,
                0,
                decode::runtime_copy_2d(
                    dst,
                    dpitch,
                    src,
                    spitch,
                    width,
                    height,
                    kind,
                    Some(stream as usize),
                    false,
                ),
            )
        },
    )
}
/// `cudaMemcpy2DAsync_ptsz`.
///
/// # Safety
/// The runtime's contract.
#[no_mangle]
pub unsafe extern "C" fn cudaMemcpy2DAsync_ptsz(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: c_int,
    stream: *mut c_void,
) -> CudaError {
    let f = next_or_return!(MEMCPY_2D_ASYNC_PTSZ, Memcpy2DAsyncFn);
    hooks::runtime::runtime_call(
        0,
        true,
        // SAFETY: the caller's arguments, passed on.
        || unsafe { f(dst, dpitch, src, spitch, width, height, kind, stream) },
        |st, _| {
            hooks::runtime::observe_copy(
                st,
                0,
                decode::runtime_copy_2d(
                    dst,
                    dpitch,
                    src,
                    spitch,
                    width,
                    height,
                    kind,
                    Some(stream as usize),
                    true,
                ),
            )
        },
    )
}

fn memcpy_3d_common(
    slot: &RuntimeFn,
    per_thread: bool,
    p: *const Memcpy3DParms,
    caller: usize,
) -> CudaError {
    let f = next_or_return!(
        slot,
        unsafe extern "C" fn(*const Memcpy3DParms) -> CudaError
    );
    hooks::runtime::runtime_call(
        caller,
        true,
        // SAFETY: the caller's argument, passed on.
        || unsafe { f(p) },
        // SAFETY: the call succeeded, so `p` was a valid descriptor.
        |st, _| {
            hooks::runtime::observe_copy(
                st,
                caller,
                unsafe { p.as_ref() }.and_then(|d| decode::runtime_copy_3d(d, None, per_thread)),
            )
        },
    )
}

fn memcpy_3d_async_common(
    slot: &RuntimeFn,
    per_thread: bool,
    p: *const Memcpy3DParms,
    stream: *mut c_void,
    caller: usize,
) -> CudaError {
    let f = next_or_return!(
        slot,
        unsafe extern "C" fn(*const Memcpy3DParms, *mut c_void) -> CudaError
    );
    hooks::runtime::runtime_call(
        caller,
        true,
        // SAFETY: the caller's arguments, passed on.
        || unsafe { f(p, stream) },
        // SAFETY: the call succeeded, so `p` was a valid descriptor.
        |st, _| {
            let d = unsafe { p.as_ref() };
            let c = d.and_then(|d| decode::runtime_copy_3d(d, Some(stream as usize), per_thread));
            hooks::runtime::observe_copy(st, caller, c)
        },
    )
}

unsafe extern "C" fn memcpy_3d(p: *const Memcpy3DParms, caller: usize) -> CudaError {
    memcpy_3d_common(&MEMCPY_3D, false, p, caller)
}
export_with_caller!(cudaMemcpy3D => memcpy_3d, 1);
unsafe extern "C" fn memcpy_3d_ptds(p: *const Memcpy3DParms, caller: usize) -> CudaError {
    memcpy_3d_common(&MEMCPY_3D_PTDS, true, p, caller)
}
export_with_caller!(cudaMemcpy3D_ptds => memcpy_3d_ptds, 1);
unsafe extern "C" fn memcpy_3d_async(
    p: *const Memcpy3DParms,
    stream: *mut c_void,
    caller: usize,
) -> CudaError {
    memcpy_3d_async_common(&MEMCPY_3D_ASYNC, false, p, stream, caller)
}
export_with_caller!(cudaMemcpy3DAsync => memcpy_3d_async, 2);
unsafe extern "C" fn memcpy_3d_async_ptsz(
    p: *const Memcpy3DParms,
    stream: *mut c_void,
    caller: usize,
) -> CudaError {
    memcpy_3d_async_common(&MEMCPY_3D_ASYNC_PTSZ, true, p, stream, caller)
}
export_with_caller!(cudaMemcpy3DAsync_ptsz => memcpy_3d_async_ptsz, 2);
