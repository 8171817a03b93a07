//! Runtime entry points (shared cudart): forwarded to the next definition. They tell the
//! driver hooks underneath the application's call site, keep the runtime's own pointer
//! queries during copies from promoting anything, and record the call themselves when no
//! driver hook saw it. `cudaFreeHost` of an allocation pinwise served is pinwise's.
//!
//! Functions with more than five integer arguments have no trampoline: their call site is
//! unknown (the driver hook's own is used).

#![allow(non_snake_case)]

use std::ffi::{c_int, c_uint, c_void, CStr};

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

// ---------- copies ----------

type MemcpyFn = unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int) -> CudaError;
type MemcpyAsyncFn =
    unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int, *mut c_void) -> CudaError;
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
type Memcpy3DFn = unsafe extern "C" fn(*const Memcpy3DParms) -> CudaError;
type Memcpy3DAsyncFn = unsafe extern "C" fn(*const Memcpy3DParms, *mut c_void) -> CudaError;

/// How a runtime copy's arguments are described and forwarded: one function per shape,
/// taking the real function's slot, whether the entry point is per-thread, and for the
/// asynchronous forms the stream.
mod shape {
    use super::*;

    #[allow(clippy::too_many_arguments)]
    pub(super) fn memcpy(
        slot: &RuntimeFn,
        per_thread: bool,
        dst: *mut c_void,
        src: *const c_void,
        count: usize,
        kind: c_int,
        stream: Option<*mut c_void>,
        caller: usize,
    ) -> CudaError {
        let forward = || match stream {
            None => {
                let f = next_or_return!(slot, MemcpyFn);
                // SAFETY: the caller's arguments, passed on.
                unsafe { f(dst, src, count, kind) }
            }
            Some(s) => {
                let f = next_or_return!(slot, MemcpyAsyncFn);
                // SAFETY: the caller's arguments, passed on.
                unsafe { f(dst, src, count, kind, s) }
            }
        };
        hooks::runtime::runtime_call_kind(caller, true, kind, forward, |st, _| {
            let stream = stream.map(|s| s as usize);
            let c = hooks::runtime::runtime_copy(
                st,
                dst as usize,
                src as usize,
                count,
                kind,
                stream,
                per_thread,
            );
            hooks::runtime::observe_copy(st, caller, c)
        })
    }

    /// To a symbol: `(a, b)` = (symbol, src); from a symbol: (dst, symbol).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn symbol(
        slot: &RuntimeFn,
        to_symbol: bool,
        per_thread: bool,
        a: *const c_void,
        b: *const c_void,
        count: usize,
        offset: usize,
        kind: c_int,
        stream: Option<*mut c_void>,
        caller: usize,
    ) -> CudaError {
        let host = if to_symbol { b } else { a };
        let forward = || match stream {
            None => {
                let f = next_or_return!(slot, SymbolFn);
                // SAFETY: the caller's arguments, passed on.
                unsafe { f(a, b, count, offset, kind) }
            }
            Some(s) => {
                let f = next_or_return!(slot, SymbolAsyncFn);
                // SAFETY: the caller's arguments, passed on.
                unsafe { f(a, b, count, offset, kind, s) }
            }
        };
        hooks::runtime::runtime_call(caller, true, forward, |st, _| {
            let stream = stream.map(|s| s as usize);
            let c = decode::symbol_copy(to_symbol, host, count, kind, stream, per_thread);
            hooks::runtime::observe_copy(st, caller, c)
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn copy2d(
        slot: &RuntimeFn,
        per_thread: bool,
        dst: *mut c_void,
        dpitch: usize,
        src: *const c_void,
        spitch: usize,
        width: usize,
        height: usize,
        kind: c_int,
        stream: Option<*mut c_void>,
    ) -> CudaError {
        let forward = || match stream {
            None => {
                let f = next_or_return!(slot, Memcpy2DFn);
                // SAFETY: the caller's arguments, passed on.
                unsafe { f(dst, dpitch, src, spitch, width, height, kind) }
            }
            Some(s) => {
                let f = next_or_return!(slot, Memcpy2DAsyncFn);
                // SAFETY: the caller's arguments, passed on.
                unsafe { f(dst, dpitch, src, spitch, width, height, kind, s) }
            }
        };
        hooks::runtime::runtime_call(0, true, forward, |st, _| {
            let stream = stream.map(|s| s as usize);
            let c = decode::runtime_copy_2d(
                dst, dpitch, src, spitch, width, height, kind, stream, per_thread,
            );
            hooks::runtime::observe_copy(st, 0, c)
        })
    }

    pub(super) fn copy3d(
        slot: &RuntimeFn,
        per_thread: bool,
        p: *const Memcpy3DParms,
        stream: Option<*mut c_void>,
        caller: usize,
    ) -> CudaError {
        let forward = || match stream {
            None => {
                let f = next_or_return!(slot, Memcpy3DFn);
                // SAFETY: the caller's argument, passed on.
                unsafe { f(p) }
            }
            Some(s) => {
                let f = next_or_return!(slot, Memcpy3DAsyncFn);
                // SAFETY: the caller's arguments, passed on.
                unsafe { f(p, s) }
            }
        };
        hooks::runtime::runtime_call(caller, true, forward, |st, _| {
            // SAFETY: the call succeeded, so `p` was a valid descriptor.
            let d = unsafe { p.as_ref() };
            let stream = stream.map(|s| s as usize);
            let c = d.and_then(|d| decode::runtime_copy_3d(d, stream, per_thread));
            hooks::runtime::observe_copy(st, caller, c)
        })
    }
}

/// The real runtime function of the name `$name`, looked up once.
macro_rules! slot_of {
    ($name:ident) => {
        RuntimeFn::new(
            match CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                Ok(c) => c,
                Err(_) => panic!("a symbol name has no NUL inside"),
            },
        )
    };
}

/// One exported runtime copy entry point of a shape, sync or async, per-thread or not: a
/// real `#[no_mangle]` symbol each (uprobes and `dlsym` need one). Entry points with at most
/// five integer arguments get a trampoline that passes the call site on; longer ones do not
/// (their call site is unknown: the driver hook's own is used).
macro_rules! runtime_copy_export {
    ($name:ident, memcpy, sync, $pt:literal) => {
        mod $name {
            use super::*;
            pub(super) static SLOT: RuntimeFn = slot_of!($name);
            pub(super) unsafe extern "C" fn imp(
                dst: *mut c_void,
                src: *const c_void,
                count: usize,
                kind: c_int,
                caller: usize,
            ) -> CudaError {
                shape::memcpy(&SLOT, $pt, dst, src, count, kind, None, caller)
            }
        }
        export_with_caller!($name => $name::imp, 4);
    };
    ($name:ident, memcpy, async, $pt:literal) => {
        mod $name {
            use super::*;
            pub(super) static SLOT: RuntimeFn = slot_of!($name);
            pub(super) unsafe extern "C" fn imp(
                dst: *mut c_void,
                src: *const c_void,
                count: usize,
                kind: c_int,
                stream: *mut c_void,
                caller: usize,
            ) -> CudaError {
                shape::memcpy(&SLOT, $pt, dst, src, count, kind, Some(stream), caller)
            }
        }
        export_with_caller!($name => $name::imp, 5);
    };
    ($name:ident, to_symbol, sync, $pt:literal) => {
        runtime_copy_export!(@symbol $name, true, $pt);
    };
    ($name:ident, from_symbol, sync, $pt:literal) => {
        runtime_copy_export!(@symbol $name, false, $pt);
    };
    (@symbol $name:ident, $to:literal, $pt:literal) => {
        mod $name {
            use super::*;
            pub(super) static SLOT: RuntimeFn = slot_of!($name);
            pub(super) unsafe extern "C" fn imp(
                a: *const c_void,
                b: *const c_void,
                count: usize,
                offset: usize,
                kind: c_int,
                caller: usize,
            ) -> CudaError {
                shape::symbol(&SLOT, $to, $pt, a, b, count, offset, kind, None, caller)
            }
        }
        export_with_caller!($name => $name::imp, 5);
    };
    ($name:ident, to_symbol, async, $pt:literal) => {
        runtime_copy_export!(@symbol_async $name, true, $pt);
    };
    ($name:ident, from_symbol, async, $pt:literal) => {
        runtime_copy_export!(@symbol_async $name, false, $pt);
    };
    (@symbol_async $name:ident, $to:literal, $pt:literal) => {
        mod $name {
            use super::*;
            pub(super) static SLOT: RuntimeFn = slot_of!($name);
        }
        #[doc = concat!("`", stringify!($name), "` (six arguments: no trampoline, call site unknown).")]
        ///
        /// # Safety
        /// The runtime's contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            a: *const c_void,
            b: *const c_void,
            count: usize,
            offset: usize,
            kind: c_int,
            stream: *mut c_void,
        ) -> CudaError {
            shape::symbol(&$name::SLOT, $to, $pt, a, b, count, offset, kind, Some(stream), 0)
        }
    };
    ($name:ident, copy2d, sync, $pt:literal) => {
        mod $name {
            use super::*;
            pub(super) static SLOT: RuntimeFn = slot_of!($name);
        }
        #[doc = concat!("`", stringify!($name), "` (seven arguments: no trampoline, call site unknown).")]
        ///
        /// # Safety
        /// The runtime's contract.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            dst: *mut c_void,
            dpitch: usize,
            src: *const c_void,
            spitch: usize,
            width: usize,
            height: usize,
            kind: c_int,
        ) -> CudaError {
            shape::copy2d(&$name::SLOT, $pt, dst, dpitch, src, spitch, width, height, kind, None)
        }
    };
    ($name:ident, copy2d, async, $pt:literal) => {
        mod $name {
            use super::*;
            pub(super) static SLOT: RuntimeFn = slot_of!($name);
        }
        #[doc = concat!("`", stringify!($name), "` (eight arguments: no trampoline, call site unknown).")]
        ///
        /// # Safety
        /// The runtime's contract.
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $name(
            dst: *mut c_void,
            dpitch: usize,
            src: *const c_void,
            spitch: usize,
            width: usize,
            height: usize,
            kind: c_int,
            stream: *mut c_void,
        ) -> CudaError {
            let stream = Some(stream);
            shape::copy2d(&$name::SLOT, $pt, dst, dpitch, src, spitch, width, height, kind, stream)
        }
    };
    ($name:ident, copy3d, sync, $pt:literal) => {
        mod $name {
            use super::*;
            pub(super) static SLOT: RuntimeFn = slot_of!($name);
            pub(super) unsafe extern "C" fn imp(p: *const Memcpy3DParms, caller: usize) -> CudaError {
                shape::copy3d(&SLOT, $pt, p, None, caller)
            }
        }
        export_with_caller!($name => $name::imp, 1);
    };
    ($name:ident, copy3d, async, $pt:literal) => {
        mod $name {
            use super::*;
            pub(super) static SLOT: RuntimeFn = slot_of!($name);
            pub(super) unsafe extern "C" fn imp(
                p: *const Memcpy3DParms,
                stream: *mut c_void,
                caller: usize,
            ) -> CudaError {
                shape::copy3d(&SLOT, $pt, p, Some(stream), caller)
            }
        }
        export_with_caller!($name => $name::imp, 2);
    };
}

/// The runtime's copy entry points, from one table: `symbol: shape, sync | async,
/// per-thread`. Each line makes one exported symbol.
macro_rules! runtime_copy_exports {
    ($( $name:ident: $shape:ident, $mode:ident, $pt:literal; )*) => {
        $( runtime_copy_export!($name, $shape, $mode, $pt); )*
    };
}

runtime_copy_exports! {
    cudaMemcpy: memcpy, sync, false;
    cudaMemcpy_ptds: memcpy, sync, true;
    cudaMemcpyAsync: memcpy, async, false;
    cudaMemcpyAsync_ptsz: memcpy, async, true;
    cudaMemcpyToSymbol: to_symbol, sync, false;
    cudaMemcpyToSymbol_ptds: to_symbol, sync, true;
    cudaMemcpyFromSymbol: from_symbol, sync, false;
    cudaMemcpyFromSymbol_ptds: from_symbol, sync, true;
    cudaMemcpyToSymbolAsync: to_symbol, async, false;
    cudaMemcpyToSymbolAsync_ptsz: to_symbol, async, true;
    cudaMemcpyFromSymbolAsync: from_symbol, async, false;
    cudaMemcpyFromSymbolAsync_ptsz: from_symbol, async, true;
    cudaMemcpy2D: copy2d, sync, false;
    cudaMemcpy2D_ptds: copy2d, sync, true;
    cudaMemcpy2DAsync: copy2d, async, false;
    cudaMemcpy2DAsync_ptsz: copy2d, async, true;
    cudaMemcpy3D: copy3d, sync, false;
    cudaMemcpy3D_ptds: copy3d, sync, true;
    cudaMemcpy3DAsync: copy3d, async, false;
    cudaMemcpy3DAsync_ptsz: copy3d, async, true;
}
