//! Driver entry points: exported under the driver's names (for programs linked with
//! `-lcuda`) and handed out by `dlsym` and `cuGetProcAddress` (for cudart and everyone
//! who looks entry points up). Each forwards to the real variant it stands for.

#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::Ordering;

use pinwise_core::Direction;
use pinwise_cuda::sys::{
    pfn, CUcontext, CUdeviceptr, CUresult, CUstream, CUDA_ERROR_NOT_INITIALIZED, CUDA_MEMCPY2D,
    CUDA_MEMCPY3D,
};

use super::export_with_caller;
use crate::decode::HostCopy;
use crate::hooks;
use crate::real::{self, WRAPPERS};
use crate::variants::Hooked;

/// The real function of `$h` as type `$ty`, or `CUDA_ERROR_NOT_INITIALIZED` from the
/// enclosing function when there is no libcuda to forward to.
macro_rules! real_or_return {
    ($h:expr, $ty:ty) => {
        match real::real($h) {
            // SAFETY: libcuda's function for variant `$h`, whose C signature is `$ty`.
            Some(a) => unsafe { std::mem::transmute::<usize, $ty>(a) },
            None => return CUDA_ERROR_NOT_INITIALIZED,
        }
    };
}

// ---------- allocation ----------

unsafe extern "C" fn host_alloc(
    pp: *mut *mut c_void,
    size: usize,
    flags: c_uint,
    caller: usize,
) -> CUresult {
    let f = real_or_return!(Hooked::MemHostAlloc, pfn::cuMemHostAlloc);
    // SAFETY: CUDA's contract for the arguments, passed on.
    unsafe { hooks::alloc::host_alloc(caller, pp, size, flags, || f(pp, size, flags)) }
}
export_with_caller!(cuMemHostAlloc => host_alloc, 3);

unsafe extern "C" fn alloc_host(pp: *mut *mut c_void, size: usize, caller: usize) -> CUresult {
    let f = real_or_return!(Hooked::MemAllocHostV2, pfn::cuMemAllocHost_v2);
    // SAFETY: CUDA's contract for the arguments, passed on.
    unsafe { hooks::alloc::host_alloc(caller, pp, size, 0, || f(pp, size)) }
}
export_with_caller!(cuMemAllocHost_v2 => alloc_host, 2);

unsafe extern "C" fn free_host(p: *mut c_void, caller: usize) -> CUresult {
    let f = real_or_return!(Hooked::MemFreeHost, pfn::cuMemFreeHost);
    // SAFETY: CUDA's contract for the argument, passed on.
    hooks::alloc::host_free(caller, p, || unsafe { f(p) })
}
export_with_caller!(cuMemFreeHost => free_host, 1);

// ---------- registration ----------

unsafe extern "C" fn register_v1(
    p: *mut c_void,
    size: usize,
    flags: c_uint,
    caller: usize,
) -> CUresult {
    let f = real_or_return!(Hooked::MemHostRegister, pfn::cuMemHostRegister);
    // SAFETY: CUDA's contract for the arguments, passed on.
    hooks::alloc::host_register(caller, p, size, || unsafe { f(p, size, flags) })
}
export_with_caller!(cuMemHostRegister => register_v1, 3);

unsafe extern "C" fn register_v2(
    p: *mut c_void,
    size: usize,
    flags: c_uint,
    caller: usize,
) -> CUresult {
    let f = real_or_return!(Hooked::MemHostRegisterV2, pfn::cuMemHostRegister_v2);
    // SAFETY: CUDA's contract for the arguments, passed on.
    hooks::alloc::host_register(caller, p, size, || unsafe { f(p, size, flags) })
}
export_with_caller!(cuMemHostRegister_v2 => register_v2, 3);

unsafe extern "C" fn unregister(p: *mut c_void, caller: usize) -> CUresult {
    let f = real_or_return!(Hooked::MemHostUnregister, pfn::cuMemHostUnregister);
    // SAFETY: CUDA's contract for the argument, passed on.
    hooks::alloc::host_unregister(caller, p, || unsafe { f(p) })
}
export_with_caller!(cuMemHostUnregister => unregister, 1);

// ---------- pointer queries ----------

unsafe extern "C" fn get_device_pointer(
    pdptr: *mut CUdeviceptr,
    p: *mut c_void,
    flags: c_uint,
    _caller: usize,
) -> CUresult {
    let f = real_or_return!(
        Hooked::MemHostGetDevicePointerV2,
        pfn::cuMemHostGetDevicePointer_v2
    );
    // SAFETY: CUDA's contract for the arguments, passed on.
    hooks::query::host_get_device_pointer(p, || unsafe { f(pdptr, p, flags) })
}
export_with_caller!(cuMemHostGetDevicePointer_v2 => get_device_pointer, 3);

unsafe extern "C" fn get_flags(pflags: *mut c_uint, p: *mut c_void, _caller: usize) -> CUresult {
    let f = real_or_return!(Hooked::MemHostGetFlags, pfn::cuMemHostGetFlags);
    // SAFETY: CUDA's contract for the arguments, passed on.
    unsafe { hooks::query::host_get_flags(pflags, p, || f(pflags, p)) }
}
export_with_caller!(cuMemHostGetFlags => get_flags, 2);

unsafe extern "C" fn get_attribute(
    data: *mut c_void,
    attribute: c_int,
    ptr: CUdeviceptr,
    _caller: usize,
) -> CUresult {
    let f = real_or_return!(Hooked::PointerGetAttribute, pfn::cuPointerGetAttribute);
    // SAFETY: CUDA's contract for the arguments, passed on.
    unsafe { hooks::query::pointer_get_attribute(data, attribute, ptr, || f(data, attribute, ptr)) }
}
export_with_caller!(cuPointerGetAttribute => get_attribute, 3);

unsafe extern "C" fn get_attributes(
    n: c_uint,
    attributes: *const c_int,
    data: *mut *mut c_void,
    ptr: CUdeviceptr,
    _caller: usize,
) -> CUresult {
    let f = real_or_return!(Hooked::PointerGetAttributes, pfn::cuPointerGetAttributes);
    // SAFETY: CUDA's contract for the arguments, passed on.
    unsafe {
        hooks::query::pointer_get_attributes(n, attributes, data, ptr, || {
            f(n, attributes, data, ptr)
        })
    }
}
export_with_caller!(cuPointerGetAttributes => get_attributes, 4);

// ---------- copies ----------

/// How a copy entry point's arguments are described and forwarded: one function per
/// shape, taking the variant (which real function, whether per-thread) and, for the
/// asynchronous forms, the stream.
mod shape {
    use super::*;

    pub(super) fn unified(
        h: Hooked,
        dst: CUdeviceptr,
        src: CUdeviceptr,
        n: usize,
        s: Option<CUstream>,
        caller: usize,
    ) -> CUresult {
        let describe =
            |st: &_| hooks::copy::unified(st, dst, src, n, s.map(|s| s as usize), h.per_thread());
        match s {
            None => {
                let f = real_or_return!(h, pfn::cuMemcpy);
                // SAFETY: CUDA's contract for the arguments, passed on.
                hooks::copy::copy(caller, describe, || unsafe { f(dst, src, n) })
            }
            Some(stream) => {
                let f = real_or_return!(h, pfn::cuMemcpyAsync);
                // SAFETY: CUDA's contract for the arguments, passed on.
                hooks::copy::copy(caller, describe, || unsafe { f(dst, src, n, stream) })
            }
        }
    }

    pub(super) fn htod(
        h: Hooked,
        dst: CUdeviceptr,
        src: *const c_void,
        n: usize,
        s: Option<CUstream>,
        caller: usize,
    ) -> CUresult {
        let describe = |_: &_| {
            let stream = s.map(|s| s as usize);
            let host = src as usize;
            Some(HostCopy::linear(
                Direction::HtoD,
                host,
                dst,
                n,
                stream,
                h.per_thread(),
            ))
        };
        match s {
            None => {
                let f = real_or_return!(h, pfn::cuMemcpyHtoD_v2);
                // SAFETY: CUDA's contract for the arguments, passed on.
                hooks::copy::copy(caller, describe, || unsafe { f(dst, src, n) })
            }
            Some(stream) => {
                let f = real_or_return!(h, pfn::cuMemcpyHtoDAsync_v2);
                // SAFETY: CUDA's contract for the arguments, passed on.
                hooks::copy::copy(caller, describe, || unsafe { f(dst, src, n, stream) })
            }
        }
    }

    pub(super) fn dtoh(
        h: Hooked,
        dst: *mut c_void,
        src: CUdeviceptr,
        n: usize,
        s: Option<CUstream>,
        caller: usize,
    ) -> CUresult {
        let describe = |_: &_| {
            let stream = s.map(|s| s as usize);
            let host = dst as usize;
            Some(HostCopy::linear(
                Direction::DtoH,
                host,
                src,
                n,
                stream,
                h.per_thread(),
            ))
        };
        match s {
            None => {
                let f = real_or_return!(h, pfn::cuMemcpyDtoH_v2);
                // SAFETY: CUDA's contract for the arguments, passed on.
                hooks::copy::copy(caller, describe, || unsafe { f(dst, src, n) })
            }
            Some(stream) => {
                let f = real_or_return!(h, pfn::cuMemcpyDtoHAsync_v2);
                // SAFETY: CUDA's contract for the arguments, passed on.
                hooks::copy::copy(caller, describe, || unsafe { f(dst, src, n, stream) })
            }
        }
    }

    pub(super) fn copy2d(
        h: Hooked,
        p: *const CUDA_MEMCPY2D,
        s: Option<CUstream>,
        caller: usize,
    ) -> CUresult {
        let describe = |st: &_| {
            // SAFETY: `p` is NULL or a valid descriptor (CUDA's contract).
            unsafe { hooks::copy::copy_2d(st, p, s.map(|s| s as usize), h.per_thread()) }
        };
        match s {
            None => {
                let f = real_or_return!(h, pfn::cuMemcpy2D_v2);
                // SAFETY: CUDA's contract for the argument, passed on.
                hooks::copy::copy(caller, describe, || unsafe { f(p) })
            }
            Some(stream) => {
                let f = real_or_return!(h, pfn::cuMemcpy2DAsync_v2);
                // SAFETY: CUDA's contract for the arguments, passed on.
                hooks::copy::copy(caller, describe, || unsafe { f(p, stream) })
            }
        }
    }

    pub(super) fn copy3d(
        h: Hooked,
        p: *const CUDA_MEMCPY3D,
        s: Option<CUstream>,
        caller: usize,
    ) -> CUresult {
        let describe = |st: &_| {
            // SAFETY: `p` is NULL or a valid descriptor (CUDA's contract).
            unsafe { hooks::copy::copy_3d(st, p, s.map(|s| s as usize), h.per_thread()) }
        };
        match s {
            None => {
                let f = real_or_return!(h, pfn::cuMemcpy3D_v2);
                // SAFETY: CUDA's contract for the argument, passed on.
                hooks::copy::copy(caller, describe, || unsafe { f(p) })
            }
            Some(stream) => {
                let f = real_or_return!(h, pfn::cuMemcpy3DAsync_v2);
                // SAFETY: CUDA's contract for the arguments, passed on.
                hooks::copy::copy(caller, describe, || unsafe { f(p, stream) })
            }
        }
    }
}

/// One exported copy entry point of a shape, sync (no stream argument) or async: the
/// implementation (in a module of the symbol's name, so that each symbol gets its own) and
/// the exported trampoline, a real `#[no_mangle]` symbol (uprobes and `dlsym` need one).
macro_rules! copy_export {
    ($name:ident, $h:ident, unified, sync) => {
        mod $name {
            use super::*;
            pub(super) unsafe extern "C" fn imp(
                dst: CUdeviceptr,
                src: CUdeviceptr,
                n: usize,
                caller: usize,
            ) -> CUresult {
                shape::unified(Hooked::$h, dst, src, n, None, caller)
            }
        }
        export_with_caller!($name => $name::imp, 3);
    };
    ($name:ident, $h:ident, unified, async) => {
        mod $name {
            use super::*;
            pub(super) unsafe extern "C" fn imp(
                dst: CUdeviceptr,
                src: CUdeviceptr,
                n: usize,
                s: CUstream,
                caller: usize,
            ) -> CUresult {
                shape::unified(Hooked::$h, dst, src, n, Some(s), caller)
            }
        }
        export_with_caller!($name => $name::imp, 4);
    };
    ($name:ident, $h:ident, htod, sync) => {
        mod $name {
            use super::*;
            pub(super) unsafe extern "C" fn imp(
                dst: CUdeviceptr,
                src: *const c_void,
                n: usize,
                caller: usize,
            ) -> CUresult {
                shape::htod(Hooked::$h, dst, src, n, None, caller)
            }
        }
        export_with_caller!($name => $name::imp, 3);
    };
    ($name:ident, $h:ident, htod, async) => {
        mod $name {
            use super::*;
            pub(super) unsafe extern "C" fn imp(
                dst: CUdeviceptr,
                src: *const c_void,
                n: usize,
                s: CUstream,
                caller: usize,
            ) -> CUresult {
                shape::htod(Hooked::$h, dst, src, n, Some(s), caller)
            }
        }
        export_with_caller!($name => $name::imp, 4);
    };
    ($name:ident, $h:ident, dtoh, sync) => {
        mod $name {
            use super::*;
            pub(super) unsafe extern "C" fn imp(
                dst: *mut c_void,
                src: CUdeviceptr,
                n: usize,
                caller: usize,
            ) -> CUresult {
                shape::dtoh(Hooked::$h, dst, src, n, None, caller)
            }
        }
        export_with_caller!($name => $name::imp, 3);
    };
    ($name:ident, $h:ident, dtoh, async) => {
        mod $name {
            use super::*;
            pub(super) unsafe extern "C" fn imp(
                dst: *mut c_void,
                src: CUdeviceptr,
                n: usize,
                s: CUstream,
                caller: usize,
            ) -> CUresult {
                shape::dtoh(Hooked::$h, dst, src, n, Some(s), caller)
            }
        }
        export_with_caller!($name => $name::imp, 4);
    };
    ($name:ident, $h:ident, copy2d, sync) => {
        mod $name {
            use super::*;
            pub(super) unsafe extern "C" fn imp(p: *const CUDA_MEMCPY2D, caller: usize) -> CUresult {
                shape::copy2d(Hooked::$h, p, None, caller)
            }
        }
        export_with_caller!($name => $name::imp, 1);
    };
    ($name:ident, $h:ident, copy2d, async) => {
        mod $name {
            use super::*;
            pub(super) unsafe extern "C" fn imp(
                p: *const CUDA_MEMCPY2D,
                s: CUstream,
                caller: usize,
            ) -> CUresult {
                shape::copy2d(Hooked::$h, p, Some(s), caller)
            }
        }
        export_with_caller!($name => $name::imp, 2);
    };
    ($name:ident, $h:ident, copy3d, sync) => {
        mod $name {
            use super::*;
            pub(super) unsafe extern "C" fn imp(p: *const CUDA_MEMCPY3D, caller: usize) -> CUresult {
                shape::copy3d(Hooked::$h, p, None, caller)
            }
        }
        export_with_caller!($name => $name::imp, 1);
    };
    ($name:ident, $h:ident, copy3d, async) => {
        mod $name {
            use super::*;
            pub(super) unsafe extern "C" fn imp(
                p: *const CUDA_MEMCPY3D,
                s: CUstream,
                caller: usize,
            ) -> CUresult {
                shape::copy3d(Hooked::$h, p, Some(s), caller)
            }
        }
        export_with_caller!($name => $name::imp, 2);
    };
}

/// The copy entry points, from one table: `symbol => variant: shape, sync | async`. Each
/// line makes one exported symbol and its entry in [`COPY_WRAPPERS`].
macro_rules! copy_exports {
    ($( $name:ident => $h:ident: $shape:ident, $mode:ident; )*) => {
        $( copy_export!($name, $h, $shape, $mode); )*

        /// The copy wrappers, by the variant each stands for.
        const COPY_WRAPPERS: &[(Hooked, unsafe extern "C" fn())] = &[$( (Hooked::$h, $name), )*];
    };
}

copy_exports! {
    cuMemcpy => Memcpy: unified, sync;
    cuMemcpy_ptds => MemcpyPtds: unified, sync;
    cuMemcpyAsync => MemcpyAsync: unified, async;
    cuMemcpyAsync_ptsz => MemcpyAsyncPtsz: unified, async;
    cuMemcpyHtoD_v2 => MemcpyHtoD: htod, sync;
    cuMemcpyHtoD_v2_ptds => MemcpyHtoDPtds: htod, sync;
    cuMemcpyHtoDAsync_v2 => MemcpyHtoDAsync: htod, async;
    cuMemcpyHtoDAsync_v2_ptsz => MemcpyHtoDAsyncPtsz: htod, async;
    cuMemcpyDtoH_v2 => MemcpyDtoH: dtoh, sync;
    cuMemcpyDtoH_v2_ptds => MemcpyDtoHPtds: dtoh, sync;
    cuMemcpyDtoHAsync_v2 => MemcpyDtoHAsync: dtoh, async;
    cuMemcpyDtoHAsync_v2_ptsz => MemcpyDtoHAsyncPtsz: dtoh, async;
    cuMemcpy2D_v2 => Memcpy2D: copy2d, sync;
    cuMemcpy2D_v2_ptds => Memcpy2DPtds: copy2d, sync;
    cuMemcpy2DUnaligned_v2 => Memcpy2DUnaligned: copy2d, sync;
    cuMemcpy2DUnaligned_v2_ptds => Memcpy2DUnalignedPtds: copy2d, sync;
    cuMemcpy2DAsync_v2 => Memcpy2DAsync: copy2d, async;
    cuMemcpy2DAsync_v2_ptsz => Memcpy2DAsyncPtsz: copy2d, async;
    cuMemcpy3D_v2 => Memcpy3D: copy3d, sync;
    cuMemcpy3D_v2_ptds => Memcpy3DPtds: copy3d, sync;
    cuMemcpy3DAsync_v2 => Memcpy3DAsync: copy3d, async;
    cuMemcpy3DAsync_v2_ptsz => Memcpy3DAsyncPtsz: copy3d, async;
}

// ---------- cuGetProcAddress ----------

unsafe extern "C" fn proc_v1(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    _caller: usize,
) -> CUresult {
    let f = real_or_return!(Hooked::GetProcAddress, pfn::cuGetProcAddress);
    // SAFETY: CUDA's contract for the arguments, passed on.
    let rc = unsafe { f(symbol, pfn, version, flags) };
    if rc == 0 {
        // SAFETY: the real call succeeded, so `symbol` is a C string and `pfn` was written.
        unsafe { hooks::procaddr::wrap_proc_address(symbol, pfn, version, flags) };
    }
    rc
}
export_with_caller!(cuGetProcAddress => proc_v1, 4);

unsafe extern "C" fn proc_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
    _caller: usize,
) -> CUresult {
    let f = real_or_return!(Hooked::GetProcAddressV2, pfn::cuGetProcAddress_v2);
    // SAFETY: CUDA's contract for the arguments, passed on.
    let rc = unsafe { f(symbol, pfn, version, flags, status) };
    if rc == 0 {
        // SAFETY: the real call succeeded, so `symbol` is a C string and `pfn` was written.
        unsafe { hooks::procaddr::wrap_proc_address(symbol, pfn, version, flags) };
    }
    rc
}
export_with_caller!(cuGetProcAddress_v2 => proc_v2, 5);

// ---------- streams and contexts ending ----------

unsafe extern "C" fn stream_destroy(stream: CUstream, _caller: usize) -> CUresult {
    let f = real_or_return!(Hooked::StreamDestroy, pfn::cuStreamDestroy);
    // SAFETY: CUDA's contract for the argument, passed on.
    hooks::context::stream_destroy(stream as usize, || unsafe { f(stream) })
}
export_with_caller!(cuStreamDestroy => stream_destroy, 1);

unsafe extern "C" fn stream_destroy_v2(stream: CUstream, _caller: usize) -> CUresult {
    let f = real_or_return!(Hooked::StreamDestroyV2, pfn::cuStreamDestroy_v2);
    // SAFETY: CUDA's contract for the argument, passed on.
    hooks::context::stream_destroy(stream as usize, || unsafe { f(stream) })
}
export_with_caller!(cuStreamDestroy_v2 => stream_destroy_v2, 1);

unsafe extern "C" fn ctx_destroy(ctx: CUcontext, _caller: usize) -> CUresult {
    let f = real_or_return!(Hooked::CtxDestroy, pfn::cuCtxDestroy);
    // SAFETY: CUDA's contract for the argument, passed on.
    hooks::context::context_ending(ctx as usize, || unsafe { f(ctx) })
}
export_with_caller!(cuCtxDestroy => ctx_destroy, 1);

unsafe extern "C" fn ctx_destroy_v2(ctx: CUcontext, _caller: usize) -> CUresult {
    let f = real_or_return!(Hooked::CtxDestroyV2, pfn::cuCtxDestroy_v2);
    // SAFETY: CUDA's contract for the argument, passed on.
    hooks::context::context_ending(ctx as usize, || unsafe { f(ctx) })
}
export_with_caller!(cuCtxDestroy_v2 => ctx_destroy_v2, 1);

unsafe extern "C" fn primary_release(dev: c_int, _caller: usize) -> CUresult {
    let f = real_or_return!(Hooked::PrimaryCtxRelease, pfn::cuDevicePrimaryCtxRelease);
    // SAFETY: CUDA's contract for the argument, passed on.
    hooks::context::context_ending(0, || unsafe { f(dev) })
}
export_with_caller!(cuDevicePrimaryCtxRelease => primary_release, 1);

unsafe extern "C" fn primary_release_v2(dev: c_int, _caller: usize) -> CUresult {
    let f = real_or_return!(
        Hooked::PrimaryCtxReleaseV2,
        pfn::cuDevicePrimaryCtxRelease_v2
    );
    // SAFETY: CUDA's contract for the argument, passed on.
    hooks::context::context_ending(0, || unsafe { f(dev) })
}
export_with_caller!(cuDevicePrimaryCtxRelease_v2 => primary_release_v2, 1);

unsafe extern "C" fn primary_reset(dev: c_int, _caller: usize) -> CUresult {
    let f = real_or_return!(Hooked::PrimaryCtxReset, pfn::cuDevicePrimaryCtxReset);
    // SAFETY: CUDA's contract for the argument, passed on.
    hooks::context::context_ending(0, || unsafe { f(dev) })
}
export_with_caller!(cuDevicePrimaryCtxReset => primary_reset, 1);

unsafe extern "C" fn primary_reset_v2(dev: c_int, _caller: usize) -> CUresult {
    let f = real_or_return!(Hooked::PrimaryCtxResetV2, pfn::cuDevicePrimaryCtxReset_v2);
    // SAFETY: CUDA's contract for the argument, passed on.
    hooks::context::context_ending(0, || unsafe { f(dev) })
}
export_with_caller!(cuDevicePrimaryCtxReset_v2 => primary_reset_v2, 1);

// ---------- stream captures (see crate::capture) ----------

macro_rules! capture_begin {
    ($name:ident, $h:expr) => {
        #[doc = concat!("`", stringify!($name), "`: counted in `crate::capture`, after pinwise's pageable-served pinned requests are registered.")]
        #[no_mangle]
        pub unsafe extern "C" fn $name(stream: CUstream) -> CUresult {
            let f = real_or_return!($h, pfn::cuStreamBeginCapture);
            // SAFETY: CUDA's contract for the argument, passed on.
            crate::hooks::alloc::before_capture_begin();
            crate::capture::begin(|| unsafe { f(stream) })
        }
    };
}
macro_rules! capture_begin_mode {
    ($name:ident, $h:expr) => {
        #[doc = concat!("`", stringify!($name), "`: counted in `crate::capture`.")]
        #[no_mangle]
        pub unsafe extern "C" fn $name(stream: CUstream, mode: c_uint) -> CUresult {
            let f = real_or_return!($h, pfn::cuStreamBeginCapture_v2);
            // SAFETY: CUDA's contract for the arguments, passed on.
            crate::hooks::alloc::before_capture_begin();
            crate::capture::begin(|| unsafe { f(stream, mode) })
        }
    };
}
macro_rules! capture_begin_to_graph {
    ($name:ident, $h:expr) => {
        #[doc = concat!("`", stringify!($name), "`: counted in `crate::capture`.")]
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            stream: CUstream,
            graph: *mut c_void,
            deps: *const c_void,
            edges: *const c_void,
            n: usize,
            mode: c_uint,
        ) -> CUresult {
            let f = real_or_return!($h, pfn::cuStreamBeginCaptureToGraph);
            // SAFETY: CUDA's contract for the arguments, passed on.
            crate::hooks::alloc::before_capture_begin();
            crate::capture::begin(|| unsafe { f(stream, graph, deps, edges, n, mode) })
        }
    };
}
macro_rules! capture_end {
    ($name:ident, $h:expr) => {
        #[doc = concat!("`", stringify!($name), "`: counted in `crate::capture`.")]
        #[no_mangle]
        pub unsafe extern "C" fn $name(stream: CUstream, graph: *mut *mut c_void) -> CUresult {
            let f = real_or_return!($h, pfn::cuStreamEndCapture);
            // SAFETY: CUDA's contract for the arguments, passed on.
            crate::capture::end(|| unsafe { f(stream, graph) })
        }
    };
}
capture_begin!(cuStreamBeginCapture, Hooked::StreamBeginCapture);
capture_begin!(cuStreamBeginCapture_ptsz, Hooked::StreamBeginCapturePtsz);
capture_begin_mode!(cuStreamBeginCapture_v2, Hooked::StreamBeginCaptureV2);
capture_begin_mode!(
    cuStreamBeginCapture_v2_ptsz,
    Hooked::StreamBeginCaptureV2Ptsz
);
capture_begin_to_graph!(
    cuStreamBeginCaptureToGraph,
    Hooked::StreamBeginCaptureToGraph
);
capture_begin_to_graph!(
    cuStreamBeginCaptureToGraph_ptsz,
    Hooked::StreamBeginCaptureToGraphPtsz
);
capture_end!(cuStreamEndCapture, Hooked::StreamEndCapture);
capture_end!(cuStreamEndCapture_ptsz, Hooked::StreamEndCapturePtsz);

/// Fills [`WRAPPERS`] with the exported wrappers' addresses.
pub fn register_wrappers() {
    let set = |h: Hooked, f: unsafe extern "C" fn()| {
        WRAPPERS[h as usize].store(f as usize, Ordering::Relaxed);
    };
    set(Hooked::MemHostAlloc, cuMemHostAlloc);
    set(Hooked::MemAllocHostV2, cuMemAllocHost_v2);
    set(Hooked::MemFreeHost, cuMemFreeHost);
    set(Hooked::MemHostRegister, cuMemHostRegister);
    set(Hooked::MemHostRegisterV2, cuMemHostRegister_v2);
    set(Hooked::MemHostUnregister, cuMemHostUnregister);
    set(
        Hooked::MemHostGetDevicePointerV2,
        cuMemHostGetDevicePointer_v2,
    );
    set(Hooked::MemHostGetFlags, cuMemHostGetFlags);
    set(Hooked::PointerGetAttribute, cuPointerGetAttribute);
    set(Hooked::PointerGetAttributes, cuPointerGetAttributes);
    for &(h, f) in COPY_WRAPPERS {
        set(h, f);
    }
    set(Hooked::GetProcAddress, cuGetProcAddress);
    set(Hooked::GetProcAddressV2, cuGetProcAddress_v2);
    set(Hooked::StreamDestroy, cuStreamDestroy);
    set(Hooked::StreamDestroyV2, cuStreamDestroy_v2);
    set(Hooked::CtxDestroy, cuCtxDestroy);
    set(Hooked::CtxDestroyV2, cuCtxDestroy_v2);
    set(Hooked::PrimaryCtxRelease, cuDevicePrimaryCtxRelease);
    set(Hooked::PrimaryCtxReleaseV2, cuDevicePrimaryCtxRelease_v2);
    set(Hooked::PrimaryCtxReset, cuDevicePrimaryCtxReset);
    set(Hooked::PrimaryCtxResetV2, cuDevicePrimaryCtxReset_v2);
    let set_addr = |h: Hooked, f: *const ()| {
        WRAPPERS[h as usize].store(f as usize, Ordering::Relaxed);
    };
    set_addr(
        Hooked::StreamBeginCapture,
        cuStreamBeginCapture as *const (),
    );
    set_addr(
        Hooked::StreamBeginCapturePtsz,
        cuStreamBeginCapture_ptsz as *const (),
    );
    set_addr(
        Hooked::StreamBeginCaptureV2,
        cuStreamBeginCapture_v2 as *const (),
    );
    set_addr(
        Hooked::StreamBeginCaptureV2Ptsz,
        cuStreamBeginCapture_v2_ptsz as *const (),
    );
    set_addr(
        Hooked::StreamBeginCaptureToGraph,
        cuStreamBeginCaptureToGraph as *const (),
    );
    set_addr(
        Hooked::StreamBeginCaptureToGraphPtsz,
        cuStreamBeginCaptureToGraph_ptsz as *const (),
    );
    set_addr(Hooked::StreamEndCapture, cuStreamEndCapture as *const ());
    set_addr(
        Hooked::StreamEndCapturePtsz,
        cuStreamEndCapture_ptsz as *const (),
    );
    debug_assert!(WRAPPERS.iter().all(|w| w.load(Ordering::Relaxed) != 0));
}
