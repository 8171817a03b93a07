//! Driver entry points: exported under the driver's names (for programs linked with
//! `-lcuda`) and handed out by `dlsym` and `cuGetProcAddress` (for cudart and everyone
//! who looks entry points up). Each forwards to the real variant it stands for.

#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::Ordering;

use pinwise_core::Direction;
use pinwise_cuda::sys::{
    CUcontext, CUdeviceptr, CUresult, CUstream, CUDA_ERROR_NOT_INITIALIZED, CUDA_MEMCPY2D,
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

type HostAllocFn = unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> CUresult;
type AllocHostFn = unsafe extern "C" fn(*mut *mut c_void, usize) -> CUresult;
type PtrFn = unsafe extern "C" fn(*mut c_void) -> CUresult;
type RegisterFn = unsafe extern "C" fn(*mut c_void, usize, c_uint) -> CUresult;
type DevPtrFn = unsafe extern "C" fn(*mut CUdeviceptr, *mut c_void, c_uint) -> CUresult;
type FlagsFn = unsafe extern "C" fn(*mut c_uint, *mut c_void) -> CUresult;
type AttrFn = unsafe extern "C" fn(*mut c_void, c_int, CUdeviceptr) -> CUresult;
type AttrsFn =
    unsafe extern "C" fn(c_uint, *const c_int, *mut *mut c_void, CUdeviceptr) -> CUresult;
type UnifiedFn = unsafe extern "C" fn(CUdeviceptr, CUdeviceptr, usize) -> CUresult;
type UnifiedAsyncFn = unsafe extern "C" fn(CUdeviceptr, CUdeviceptr, usize, CUstream) -> CUresult;
type HtoDFn = unsafe extern "C" fn(CUdeviceptr, *const c_void, usize) -> CUresult;
type HtoDAsyncFn = unsafe extern "C" fn(CUdeviceptr, *const c_void, usize, CUstream) -> CUresult;
type DtoHFn = unsafe extern "C" fn(*mut c_void, CUdeviceptr, usize) -> CUresult;
type DtoHAsyncFn = unsafe extern "C" fn(*mut c_void, CUdeviceptr, usize, CUstream) -> CUresult;
type Copy2DFn = unsafe extern "C" fn(*const CUDA_MEMCPY2D) -> CUresult;
type Copy2DAsyncFn = unsafe extern "C" fn(*const CUDA_MEMCPY2D, CUstream) -> CUresult;
type Copy3DFn = unsafe extern "C" fn(*const CUDA_MEMCPY3D) -> CUresult;
type Copy3DAsyncFn = unsafe extern "C" fn(*const CUDA_MEMCPY3D, CUstream) -> CUresult;
type ProcV1Fn = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> CUresult;
type ProcV2Fn =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CUresult;

// ---------- allocation ----------

unsafe extern "C" fn host_alloc(
    pp: *mut *mut c_void,
    size: usize,
    flags: c_uint,
    caller: usize,
) -> CUresult {
    let f = real_or_return!(Hooked::MemHostAlloc, HostAllocFn);
    // SAFETY: CUDA's contract for the arguments, passed on.
    unsafe { hooks::alloc::host_alloc(caller, pp, size, flags, || f(pp, size, flags)) }
}
export_with_caller!(cuMemHostAlloc => host_alloc, 3);

unsafe extern "C" fn alloc_host(pp: *mut *mut c_void, size: usize, caller: usize) -> CUresult {
    let f = real_or_return!(Hooked::MemAllocHostV2, AllocHostFn);
    // SAFETY: CUDA's contract for the arguments, passed on.
    unsafe { hooks::alloc::host_alloc(caller, pp, size, 0, || f(pp, size)) }
}
export_with_caller!(cuMemAllocHost_v2 => alloc_host, 2);

unsafe extern "C" fn free_host(p: *mut c_void, caller: usize) -> CUresult {
    let f = real_or_return!(Hooked::MemFreeHost, PtrFn);
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
    let f = real_or_return!(Hooked::MemHostRegister, RegisterFn);
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
    let f = real_or_return!(Hooked::MemHostRegisterV2, RegisterFn);
    // SAFETY: CUDA's contract for the arguments, passed on.
    hooks::alloc::host_register(caller, p, size, || unsafe { f(p, size, flags) })
}
export_with_caller!(cuMemHostRegister_v2 => register_v2, 3);

unsafe extern "C" fn unregister(p: *mut c_void, caller: usize) -> CUresult {
    let f = real_or_return!(Hooked::MemHostUnregister, PtrFn);
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
    let f = real_or_return!(Hooked::MemHostGetDevicePointerV2, DevPtrFn);
    // SAFETY: CUDA's contract for the arguments, passed on.
    hooks::query::host_get_device_pointer(p, || unsafe { f(pdptr, p, flags) })
}
export_with_caller!(cuMemHostGetDevicePointer_v2 => get_device_pointer, 3);

unsafe extern "C" fn get_flags(pflags: *mut c_uint, p: *mut c_void, _caller: usize) -> CUresult {
    let f = real_or_return!(Hooked::MemHostGetFlags, FlagsFn);
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
    let f = real_or_return!(Hooked::PointerGetAttribute, AttrFn);
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
    let f = real_or_return!(Hooked::PointerGetAttributes, AttrsFn);
    // SAFETY: CUDA's contract for the arguments, passed on.
    unsafe {
        hooks::query::pointer_get_attributes(n, attributes, data, ptr, || {
            f(n, attributes, data, ptr)
        })
    }
}
export_with_caller!(cuPointerGetAttributes => get_attributes, 4);

// ---------- 1D copies ----------

fn unified(h: Hooked, dst: CUdeviceptr, src: CUdeviceptr, n: usize, caller: usize) -> CUresult {
    let f = real_or_return!(h, UnifiedFn);
    hooks::copy::copy(
        caller,
        |st| hooks::copy::unified(st, dst, src, n, None, h.per_thread()),
        // SAFETY: CUDA's contract for the arguments, passed on.
        || unsafe { f(dst, src, n) },
    )
}

fn unified_async(
    h: Hooked,
    dst: CUdeviceptr,
    src: CUdeviceptr,
    n: usize,
    s: CUstream,
    caller: usize,
) -> CUresult {
    let f = real_or_return!(h, UnifiedAsyncFn);
    hooks::copy::copy(
        caller,
        |st| hooks::copy::unified(st, dst, src, n, Some(s as usize), h.per_thread()),
        // SAFETY: CUDA's contract for the arguments, passed on.
        || unsafe { f(dst, src, n, s) },
    )
}

fn htod(
    h: Hooked,
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
    s: Option<CUstream>,
    caller: usize,
) -> CUresult {
    let copy = |_: &_| {
        Some(HostCopy::linear(
            Direction::HtoD,
            src as usize,
            dst,
            n,
            s.map(|s| s as usize),
            h.per_thread(),
        ))
    };
    match s {
        None => {
            let f = real_or_return!(h, HtoDFn);
            // SAFETY: CUDA's contract for the arguments, passed on.
            hooks::copy::copy(caller, copy, || unsafe { f(dst, src, n) })
        }
        Some(stream) => {
            let f = real_or_return!(h, HtoDAsyncFn);
            // SAFETY: CUDA's contract for the arguments, passed on.
            hooks::copy::copy(caller, copy, || unsafe { f(dst, src, n, stream) })
        }
    }
}

fn dtoh(
    h: Hooked,
    dst: *mut c_void,
    src: CUdeviceptr,
    n: usize,
    s: Option<CUstream>,
    caller: usize,
) -> CUresult {
    let copy = |_: &_| {
        Some(HostCopy::linear(
            Direction::DtoH,
            dst as usize,
            src,
            n,
            s.map(|s| s as usize),
            h.per_thread(),
        ))
    };
    match s {
        None => {
            let f = real_or_return!(h, DtoHFn);
            // SAFETY: CUDA's contract for the arguments, passed on.
            hooks::copy::copy(caller, copy, || unsafe { f(dst, src, n) })
        }
        Some(stream) => {
            let f = real_or_return!(h, DtoHAsyncFn);
            // SAFETY: CUDA's contract for the arguments, passed on.
            hooks::copy::copy(caller, copy, || unsafe { f(dst, src, n, stream) })
        }
    }
}

unsafe extern "C" fn memcpy(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    n: usize,
    caller: usize,
) -> CUresult {
    unified(Hooked::Memcpy, dst, src, n, caller)
}
export_with_caller!(cuMemcpy => memcpy, 3);
unsafe extern "C" fn memcpy_ptds(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    n: usize,
    caller: usize,
) -> CUresult {
    unified(Hooked::MemcpyPtds, dst, src, n, caller)
}
export_with_caller!(cuMemcpy_ptds => memcpy_ptds, 3);
unsafe extern "C" fn memcpy_async(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    n: usize,
    s: CUstream,
    caller: usize,
) -> CUresult {
    unified_async(Hooked::MemcpyAsync, dst, src, n, s, caller)
}
export_with_caller!(cuMemcpyAsync => memcpy_async, 4);
unsafe extern "C" fn memcpy_async_ptsz(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    n: usize,
    s: CUstream,
    caller: usize,
) -> CUresult {
    unified_async(Hooked::MemcpyAsyncPtsz, dst, src, n, s, caller)
}
export_with_caller!(cuMemcpyAsync_ptsz => memcpy_async_ptsz, 4);

unsafe extern "C" fn htod_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
    caller: usize,
) -> CUresult {
    htod(Hooked::MemcpyHtoD, dst, src, n, None, caller)
}
export_with_caller!(cuMemcpyHtoD_v2 => htod_v2, 3);
unsafe extern "C" fn htod_v2_ptds(
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
    caller: usize,
) -> CUresult {
    htod(Hooked::MemcpyHtoDPtds, dst, src, n, None, caller)
}
export_with_caller!(cuMemcpyHtoD_v2_ptds => htod_v2_ptds, 3);
unsafe extern "C" fn htod_async_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
    s: CUstream,
    caller: usize,
) -> CUresult {
    htod(Hooked::MemcpyHtoDAsync, dst, src, n, Some(s), caller)
}
export_with_caller!(cuMemcpyHtoDAsync_v2 => htod_async_v2, 4);
unsafe extern "C" fn htod_async_v2_ptsz(
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
    s: CUstream,
    caller: usize,
) -> CUresult {
    htod(Hooked::MemcpyHtoDAsyncPtsz, dst, src, n, Some(s), caller)
}
export_with_caller!(cuMemcpyHtoDAsync_v2_ptsz => htod_async_v2_ptsz, 4);

unsafe extern "C" fn dtoh_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    n: usize,
    caller: usize,
) -> CUresult {
    dtoh(Hooked::MemcpyDtoH, dst, src, n, None, caller)
}
export_with_caller!(cuMemcpyDtoH_v2 => dtoh_v2, 3);
unsafe extern "C" fn dtoh_v2_ptds(
    dst: *mut c_void,
    src: CUdeviceptr,
    n: usize,
    caller: usize,
) -> CUresult {
    dtoh(Hooked::MemcpyDtoHPtds, dst, src, n, None, caller)
}
export_with_caller!(cuMemcpyDtoH_v2_ptds => dtoh_v2_ptds, 3);
unsafe extern "C" fn dtoh_async_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    n: usize,
    s: CUstream,
    caller: usize,
) -> CUresult {
    dtoh(Hooked::MemcpyDtoHAsync, dst, src, n, Some(s), caller)
}
export_with_caller!(cuMemcpyDtoHAsync_v2 => dtoh_async_v2, 4);
unsafe extern "C" fn dtoh_async_v2_ptsz(
    dst: *mut c_void,
    src: CUdeviceptr,
    n: usize,
    s: CUstream,
    caller: usize,
) -> CUresult {
    dtoh(Hooked::MemcpyDtoHAsyncPtsz, dst, src, n, Some(s), caller)
}
export_with_caller!(cuMemcpyDtoHAsync_v2_ptsz => dtoh_async_v2_ptsz, 4);

// ---------- 2D and 3D copies ----------

fn copy2d(h: Hooked, p: *const CUDA_MEMCPY2D, s: Option<CUstream>, caller: usize) -> CUresult {
    // SAFETY: `p` is NULL or a valid descriptor (CUDA's contract).
    let describe =
        |st: &_| unsafe { hooks::copy::copy_2d(st, p, s.map(|s| s as usize), h.per_thread()) };
    match s {
        None => {
            let f = real_or_return!(h, Copy2DFn);
            // SAFETY: CUDA's contract for the argument, passed on.
            hooks::copy::copy(caller, describe, || unsafe { f(p) })
        }
        Some(stream) => {
            let f = real_or_return!(h, Copy2DAsyncFn);
            // SAFETY: CUDA's contract for the arguments, passed on.
            hooks::copy::copy(caller, describe, || unsafe { f(p, stream) })
        }
    }
}

fn copy3d(h: Hooked, p: *const CUDA_MEMCPY3D, s: Option<CUstream>, caller: usize) -> CUresult {
    // SAFETY: `p` is NULL or a valid descriptor (CUDA's contract).
    let describe =
        |st: &_| unsafe { hooks::copy::copy_3d(st, p, s.map(|s| s as usize), h.per_thread()) };
    match s {
        None => {
            let f = real_or_return!(h, Copy3DFn);
            // SAFETY: CUDA's contract for the argument, passed on.
            hooks::copy::copy(caller, describe, || unsafe { f(p) })
        }
        Some(stream) => {
            let f = real_or_return!(h, Copy3DAsyncFn);
            // SAFETY: CUDA's contract for the arguments, passed on.
            hooks::copy::copy(caller, describe, || unsafe { f(p, stream) })
        }
    }
}

unsafe extern "C" fn c2d(p: *const CUDA_MEMCPY2D, caller: usize) -> CUresult {
    copy2d(Hooked::Memcpy2D, p, None, caller)
}
export_with_caller!(cuMemcpy2D_v2 => c2d, 1);
unsafe extern "C" fn c2d_ptds(p: *const CUDA_MEMCPY2D, caller: usize) -> CUresult {
    copy2d(Hooked::Memcpy2DPtds, p, None, caller)
}
export_with_caller!(cuMemcpy2D_v2_ptds => c2d_ptds, 1);
unsafe extern "C" fn c2d_unaligned(p: *const CUDA_MEMCPY2D, caller: usize) -> CUresult {
    copy2d(Hooked::Memcpy2DUnaligned, p, None, caller)
}
export_with_caller!(cuMemcpy2DUnaligned_v2 => c2d_unaligned, 1);
unsafe extern "C" fn c2d_unaligned_ptds(p: *const CUDA_MEMCPY2D, caller: usize) -> CUresult {
    copy2d(Hooked::Memcpy2DUnalignedPtds, p, None, caller)
}
export_with_caller!(cuMemcpy2DUnaligned_v2_ptds => c2d_unaligned_ptds, 1);
unsafe extern "C" fn c2d_async(p: *const CUDA_MEMCPY2D, s: CUstream, caller: usize) -> CUresult {
    copy2d(Hooked::Memcpy2DAsync, p, Some(s), caller)
}
export_with_caller!(cuMemcpy2DAsync_v2 => c2d_async, 2);
unsafe extern "C" fn c2d_async_ptsz(
    p: *const CUDA_MEMCPY2D,
    s: CUstream,
    caller: usize,
) -> CUresult {
    copy2d(Hooked::Memcpy2DAsyncPtsz, p, Some(s), caller)
}
export_with_caller!(cuMemcpy2DAsync_v2_ptsz => c2d_async_ptsz, 2);
unsafe extern "C" fn c3d(p: *const CUDA_MEMCPY3D, caller: usize) -> CUresult {
    copy3d(Hooked::Memcpy3D, p, None, caller)
}
export_with_caller!(cuMemcpy3D_v2 => c3d, 1);
unsafe extern "C" fn c3d_ptds(p: *const CUDA_MEMCPY3D, caller: usize) -> CUresult {
    copy3d(Hooked::Memcpy3DPtds, p, None, caller)
}
export_with_caller!(cuMemcpy3D_v2_ptds => c3d_ptds, 1);
unsafe extern "C" fn c3d_async(p: *const CUDA_MEMCPY3D, s: CUstream, caller: usize) -> CUresult {
    copy3d(Hooked::Memcpy3DAsync, p, Some(s), caller)
}
export_with_caller!(cuMemcpy3DAsync_v2 => c3d_async, 2);
unsafe extern "C" fn c3d_async_ptsz(
    p: *const CUDA_MEMCPY3D,
    s: CUstream,
    caller: usize,
) -> CUresult {
    copy3d(Hooked::Memcpy3DAsyncPtsz, p, Some(s), caller)
}
export_with_caller!(cuMemcpy3DAsync_v2_ptsz => c3d_async_ptsz, 2);

// ---------- cuGetProcAddress ----------

unsafe extern "C" fn proc_v1(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    _caller: usize,
) -> CUresult {
    let f = real_or_return!(Hooked::GetProcAddress, ProcV1Fn);
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
    let f = real_or_return!(Hooked::GetProcAddressV2, ProcV2Fn);
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

type StreamFn = unsafe extern "C" fn(CUstream) -> CUresult;
type DeviceFn = unsafe extern "C" fn(c_int) -> CUresult;
type ContextFn = unsafe extern "C" fn(CUcontext) -> CUresult;

unsafe extern "C" fn stream_destroy(stream: CUstream, _caller: usize) -> CUresult {
    let f = real_or_return!(Hooked::StreamDestroy, StreamFn);
    // SAFETY: CUDA's contract for the argument, passed on.
    hooks::context::stream_destroy(stream as usize, || unsafe { f(stream) })
}
export_with_caller!(cuStreamDestroy => stream_destroy, 1);

unsafe extern "C" fn stream_destroy_v2(stream: CUstream, _caller: usize) -> CUresult {
    let f = real_or_return!(Hooked::StreamDestroyV2, StreamFn);
    // SAFETY: CUDA's contract for the argument, passed on.
    hooks::context::stream_destroy(stream as usize, || unsafe { f(stream) })
}
export_with_caller!(cuStreamDestroy_v2 => stream_destroy_v2, 1);

unsafe extern "C" fn ctx_destroy(ctx: CUcontext, _caller: usize) -> CUresult {
    let f = real_or_return!(Hooked::CtxDestroy, ContextFn);
    // SAFETY: CUDA's contract for the argument, passed on.
    hooks::context::context_ending(ctx as usize, || unsafe { f(ctx) })
}
export_with_caller!(cuCtxDestroy => ctx_destroy, 1);

unsafe extern "C" fn ctx_destroy_v2(ctx: CUcontext, _caller: usize) -> CUresult {
    let f = real_or_return!(Hooked::CtxDestroyV2, ContextFn);
    // SAFETY: CUDA's contract for the argument, passed on.
    hooks::context::context_ending(ctx as usize, || unsafe { f(ctx) })
}
export_with_caller!(cuCtxDestroy_v2 => ctx_destroy_v2, 1);

unsafe extern "C" fn primary_release(dev: c_int, _caller: usize) -> CUresult {
    let f = real_or_return!(Hooked::PrimaryCtxRelease, DeviceFn);
    // SAFETY: CUDA's contract for the argument, passed on.
    hooks::context::context_ending(0, || unsafe { f(dev) })
}
export_with_caller!(cuDevicePrimaryCtxRelease => primary_release, 1);

unsafe extern "C" fn primary_release_v2(dev: c_int, _caller: usize) -> CUresult {
    let f = real_or_return!(Hooked::PrimaryCtxReleaseV2, DeviceFn);
    // SAFETY: CUDA's contract for the argument, passed on.
    hooks::context::context_ending(0, || unsafe { f(dev) })
}
export_with_caller!(cuDevicePrimaryCtxRelease_v2 => primary_release_v2, 1);

unsafe extern "C" fn primary_reset(dev: c_int, _caller: usize) -> CUresult {
    let f = real_or_return!(Hooked::PrimaryCtxReset, DeviceFn);
    // SAFETY: CUDA's contract for the argument, passed on.
    hooks::context::context_ending(0, || unsafe { f(dev) })
}
export_with_caller!(cuDevicePrimaryCtxReset => primary_reset, 1);

unsafe extern "C" fn primary_reset_v2(dev: c_int, _caller: usize) -> CUresult {
    let f = real_or_return!(Hooked::PrimaryCtxResetV2, DeviceFn);
    // SAFETY: CUDA's contract for the argument, passed on.
    hooks::context::context_ending(0, || unsafe { f(dev) })
}
export_with_caller!(cuDevicePrimaryCtxReset_v2 => primary_reset_v2, 1);

// ---------- stream captures (see crate::capture) ----------

type BeginFn = unsafe extern "C" fn(CUstream) -> CUresult;
type BeginModeFn = unsafe extern "C" fn(CUstream, c_uint) -> CUresult;
type BeginToGraphFn = unsafe extern "C" fn(
    CUstream,
    *mut c_void,
    *const c_void,
    *const c_void,
    usize,
    c_uint,
) -> CUresult;
type EndFn = unsafe extern "C" fn(CUstream, *mut *mut c_void) -> CUresult;

macro_rules! capture_begin {
    ($name:ident, $h:expr) => {
        #[doc = concat!("`", stringify!($name), "`: counted in `crate::capture`.")]
        #[no_mangle]
        pub unsafe extern "C" fn $name(stream: CUstream) -> CUresult {
            let f = real_or_return!($h, BeginFn);
            // SAFETY: CUDA's contract for the argument, passed on.
            crate::capture::begin(|| unsafe { f(stream) })
        }
    };
}
macro_rules! capture_begin_mode {
    ($name:ident, $h:expr) => {
        #[doc = concat!("`", stringify!($name), "`: counted in `crate::capture`.")]
        #[no_mangle]
        pub unsafe extern "C" fn $name(stream: CUstream, mode: c_uint) -> CUresult {
            let f = real_or_return!($h, BeginModeFn);
            // SAFETY: CUDA's contract for the arguments, passed on.
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
            let f = real_or_return!($h, BeginToGraphFn);
            // SAFETY: CUDA's contract for the arguments, passed on.
            crate::capture::begin(|| unsafe { f(stream, graph, deps, edges, n, mode) })
        }
    };
}
macro_rules! capture_end {
    ($name:ident, $h:expr) => {
        #[doc = concat!("`", stringify!($name), "`: counted in `crate::capture`.")]
        #[no_mangle]
        pub unsafe extern "C" fn $name(stream: CUstream, graph: *mut *mut c_void) -> CUresult {
            let f = real_or_return!($h, EndFn);
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
    set(Hooked::Memcpy, cuMemcpy);
    set(Hooked::MemcpyPtds, cuMemcpy_ptds);
    set(Hooked::MemcpyAsync, cuMemcpyAsync);
    set(Hooked::MemcpyAsyncPtsz, cuMemcpyAsync_ptsz);
    set(Hooked::MemcpyHtoD, cuMemcpyHtoD_v2);
    set(Hooked::MemcpyHtoDPtds, cuMemcpyHtoD_v2_ptds);
    set(Hooked::MemcpyDtoH, cuMemcpyDtoH_v2);
    set(Hooked::MemcpyDtoHPtds, cuMemcpyDtoH_v2_ptds);
    set(Hooked::MemcpyHtoDAsync, cuMemcpyHtoDAsync_v2);
    set(Hooked::MemcpyHtoDAsyncPtsz, cuMemcpyHtoDAsync_v2_ptsz);
    set(Hooked::MemcpyDtoHAsync, cuMemcpyDtoHAsync_v2);
    set(Hooked::MemcpyDtoHAsyncPtsz, cuMemcpyDtoHAsync_v2_ptsz);
    set(Hooked::Memcpy2D, cuMemcpy2D_v2);
    set(Hooked::Memcpy2DPtds, cuMemcpy2D_v2_ptds);
    set(Hooked::Memcpy2DUnaligned, cuMemcpy2DUnaligned_v2);
    set(Hooked::Memcpy2DUnalignedPtds, cuMemcpy2DUnaligned_v2_ptds);
    set(Hooked::Memcpy3D, cuMemcpy3D_v2);
    set(Hooked::Memcpy3DPtds, cuMemcpy3D_v2_ptds);
    set(Hooked::Memcpy2DAsync, cuMemcpy2DAsync_v2);
    set(Hooked::Memcpy2DAsyncPtsz, cuMemcpy2DAsync_v2_ptsz);
    set(Hooked::Memcpy3DAsync, cuMemcpy3DAsync_v2);
    set(Hooked::Memcpy3DAsyncPtsz, cuMemcpy3DAsync_v2_ptsz);
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
