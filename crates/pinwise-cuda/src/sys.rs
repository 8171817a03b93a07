//! Raw CUDA driver API types and constants, as `cuda.h` declares them (CUDA 12/13).
//!
//! Only what pinwise uses. Handles are raw pointers here; the safe types of this crate keep
//! them as plain values.

#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::{c_char, c_float, c_int, c_uint, c_void};

/// `CUresult`: a CUDA status code.
pub type CUresult = c_int;
/// `CUdevice`: a device ordinal.
pub type CUdevice = c_int;
/// `CUuuid`: a device's 16-byte UUID.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CUuuid {
    /// The bytes.
    pub bytes: [u8; 16],
}
/// `CUdeviceptr`: a device address.
pub type CUdeviceptr = u64;
/// `CUcontext`: opaque context handle.
pub type CUcontext = *mut c_void;
/// `CUstream`: opaque stream handle (NULL is the default stream).
pub type CUstream = *mut c_void;
/// `CUevent`: opaque event handle.
pub type CUevent = *mut c_void;
/// `CUdevice_attribute`.
pub type CUdevice_attribute = c_int;
/// `CUpointer_attribute`.
pub type CUpointer_attribute = c_int;
/// `CUmemorytype`.
pub type CUmemorytype = c_uint;
/// `CUdriverProcAddressQueryResult`.
pub type CUdriverProcAddressQueryResult = c_int;
/// `CUstreamCaptureMode`.
pub type CUstreamCaptureMode = c_uint;
/// `CUstreamCaptureStatus`.
pub type CUstreamCaptureStatus = c_uint;

// ---- CUresult values ----
pub const CUDA_SUCCESS: CUresult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
pub const CUDA_ERROR_DEINITIALIZED: CUresult = 4;
pub const CUDA_ERROR_STUB_LIBRARY: CUresult = 34;
pub const CUDA_ERROR_NO_DEVICE: CUresult = 100;
pub const CUDA_ERROR_INVALID_DEVICE: CUresult = 101;
pub const CUDA_ERROR_INVALID_CONTEXT: CUresult = 201;
pub const CUDA_ERROR_INVALID_HANDLE: CUresult = 400;
pub const CUDA_ERROR_NOT_FOUND: CUresult = 500;
pub const CUDA_ERROR_NOT_READY: CUresult = 600;
pub const CUDA_ERROR_ILLEGAL_ADDRESS: CUresult = 700;
pub const CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: CUresult = 712;
pub const CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: CUresult = 713;
pub const CUDA_ERROR_NOT_PERMITTED: CUresult = 800;
pub const CUDA_ERROR_NOT_SUPPORTED: CUresult = 801;
pub const CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: CUresult = 900;
pub const CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: CUresult = 901;
pub const CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: CUresult = 906;
pub const CUDA_ERROR_UNKNOWN: CUresult = 999;

// ---- CUmemorytype ----
pub const CU_MEMORYTYPE_HOST: CUmemorytype = 1;
pub const CU_MEMORYTYPE_DEVICE: CUmemorytype = 2;
pub const CU_MEMORYTYPE_ARRAY: CUmemorytype = 3;
pub const CU_MEMORYTYPE_UNIFIED: CUmemorytype = 4;

// ---- cuMemHostAlloc flags ----
pub const CU_MEMHOSTALLOC_PORTABLE: c_uint = 0x01;
pub const CU_MEMHOSTALLOC_DEVICEMAP: c_uint = 0x02;
pub const CU_MEMHOSTALLOC_WRITECOMBINED: c_uint = 0x04;

// ---- cuMemHostRegister flags ----
pub const CU_MEMHOSTREGISTER_PORTABLE: c_uint = 0x01;
pub const CU_MEMHOSTREGISTER_DEVICEMAP: c_uint = 0x02;
pub const CU_MEMHOSTREGISTER_IOMEMORY: c_uint = 0x04;
pub const CU_MEMHOSTREGISTER_READ_ONLY: c_uint = 0x08;

// ---- streams and events ----
pub const CU_STREAM_DEFAULT: c_uint = 0x0;
pub const CU_STREAM_NON_BLOCKING: c_uint = 0x1;
/// `CU_STREAM_LEGACY` as a handle value.
pub const CU_STREAM_LEGACY: usize = 0x1;
/// `CU_STREAM_PER_THREAD` as a handle value.
pub const CU_STREAM_PER_THREAD: usize = 0x2;
pub const CU_EVENT_DEFAULT: c_uint = 0x0;
pub const CU_EVENT_BLOCKING_SYNC: c_uint = 0x1;
pub const CU_EVENT_DISABLE_TIMING: c_uint = 0x2;

// ---- stream capture ----
pub const CU_STREAM_CAPTURE_MODE_GLOBAL: CUstreamCaptureMode = 0;
pub const CU_STREAM_CAPTURE_MODE_THREAD_LOCAL: CUstreamCaptureMode = 1;
pub const CU_STREAM_CAPTURE_MODE_RELAXED: CUstreamCaptureMode = 2;
pub const CU_STREAM_CAPTURE_STATUS_NONE: CUstreamCaptureStatus = 0;
pub const CU_STREAM_CAPTURE_STATUS_ACTIVE: CUstreamCaptureStatus = 1;
pub const CU_STREAM_CAPTURE_STATUS_INVALIDATED: CUstreamCaptureStatus = 2;

// ---- CUpointer_attribute ----
pub const CU_POINTER_ATTRIBUTE_CONTEXT: CUpointer_attribute = 1;
pub const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: CUpointer_attribute = 2;
pub const CU_POINTER_ATTRIBUTE_DEVICE_POINTER: CUpointer_attribute = 3;
pub const CU_POINTER_ATTRIBUTE_HOST_POINTER: CUpointer_attribute = 4;
pub const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: CUpointer_attribute = 9;
pub const CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: CUpointer_attribute = 11;
pub const CU_POINTER_ATTRIBUTE_RANGE_SIZE: CUpointer_attribute = 12;

// ---- CUdevice_attribute (a selection) ----
pub const CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: CUdevice_attribute = 1;
pub const CU_DEVICE_ATTRIBUTE_WARP_SIZE: CUdevice_attribute = 10;
pub const CU_DEVICE_ATTRIBUTE_CLOCK_RATE: CUdevice_attribute = 13;
pub const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: CUdevice_attribute = 16;
pub const CU_DEVICE_ATTRIBUTE_INTEGRATED: CUdevice_attribute = 18;
pub const CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: CUdevice_attribute = 19;
pub const CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: CUdevice_attribute = 33;
pub const CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: CUdevice_attribute = 34;
pub const CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: CUdevice_attribute = 36;
pub const CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: CUdevice_attribute = 37;
pub const CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: CUdevice_attribute = 40;
pub const CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: CUdevice_attribute = 41;
pub const CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: CUdevice_attribute = 50;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: CUdevice_attribute = 75;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: CUdevice_attribute = 76;
pub const CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS: CUdevice_attribute = 88;
pub const CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: CUdevice_attribute = 99;
pub const CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED: CUdevice_attribute = 113;

// ---- cuGetProcAddress ----
pub const CU_GET_PROC_ADDRESS_DEFAULT: u64 = 0;
pub const CU_GET_PROC_ADDRESS_LEGACY_STREAM: u64 = 1;
pub const CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM: u64 = 2;
pub const CU_GET_PROC_ADDRESS_SUCCESS: CUdriverProcAddressQueryResult = 0;
pub const CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND: CUdriverProcAddressQueryResult = 1;
pub const CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT: CUdriverProcAddressQueryResult = 2;

/// `CUDA_MEMCPY2D` (`CUDA_MEMCPY2D_v2`, 128 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUDA_MEMCPY2D {
    pub srcXInBytes: usize,
    pub srcY: usize,
    pub srcMemoryType: CUmemorytype,
    pub srcHost: *const c_void,
    pub srcDevice: CUdeviceptr,
    pub srcArray: *mut c_void,
    pub srcPitch: usize,
    pub dstXInBytes: usize,
    pub dstY: usize,
    pub dstMemoryType: CUmemorytype,
    pub dstHost: *mut c_void,
    pub dstDevice: CUdeviceptr,
    pub dstArray: *mut c_void,
    pub dstPitch: usize,
    pub WidthInBytes: usize,
    pub Height: usize,
}

impl Default for CUDA_MEMCPY2D {
    fn default() -> Self {
        CUDA_MEMCPY2D {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: 0,
            srcHost: std::ptr::null(),
            srcDevice: 0,
            srcArray: std::ptr::null_mut(),
            srcPitch: 0,
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: 0,
            dstHost: std::ptr::null_mut(),
            dstDevice: 0,
            dstArray: std::ptr::null_mut(),
            dstPitch: 0,
            WidthInBytes: 0,
            Height: 0,
        }
    }
}

/// `CUDA_MEMCPY3D` (`CUDA_MEMCPY3D_v2`, 200 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUDA_MEMCPY3D {
    pub srcXInBytes: usize,
    pub srcY: usize,
    pub srcZ: usize,
    pub srcLOD: usize,
    pub srcMemoryType: CUmemorytype,
    pub srcHost: *const c_void,
    pub srcDevice: CUdeviceptr,
    pub srcArray: *mut c_void,
    pub reserved0: *mut c_void,
    pub srcPitch: usize,
    pub srcHeight: usize,
    pub dstXInBytes: usize,
    pub dstY: usize,
    pub dstZ: usize,
    pub dstLOD: usize,
    pub dstMemoryType: CUmemorytype,
    pub dstHost: *mut c_void,
    pub dstDevice: CUdeviceptr,
    pub dstArray: *mut c_void,
    pub reserved1: *mut c_void,
    pub dstPitch: usize,
    pub dstHeight: usize,
    pub WidthInBytes: usize,
    pub Height: usize,
    pub Depth: usize,
}

impl Default for CUDA_MEMCPY3D {
    fn default() -> Self {
        CUDA_MEMCPY3D {
            srcXInBytes: 0,
            srcY: 0,
            srcZ: 0,
            srcLOD: 0,
            srcMemoryType: 0,
            srcHost: std::ptr::null(),
            srcDevice: 0,
            srcArray: std::ptr::null_mut(),
            reserved0: std::ptr::null_mut(),
            srcPitch: 0,
            srcHeight: 0,
            dstXInBytes: 0,
            dstY: 0,
            dstZ: 0,
            dstLOD: 0,
            dstMemoryType: 0,
            dstHost: std::ptr::null_mut(),
            dstDevice: 0,
            dstArray: std::ptr::null_mut(),
            reserved1: std::ptr::null_mut(),
            dstPitch: 0,
            dstHeight: 0,
            WidthInBytes: 0,
            Height: 0,
            Depth: 0,
        }
    }
}

const _: () = assert!(std::mem::size_of::<CUDA_MEMCPY2D>() == 128);
const _: () = assert!(std::mem::size_of::<CUDA_MEMCPY3D>() == 200);

/// `CUipcMemHandle`: 64 opaque bytes naming a device allocation for other processes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CUipcMemHandle {
    /// The driver's bytes.
    pub reserved: [u8; 64],
}
/// `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`.
pub const CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS: c_uint = 0x1;

/// Declares the C signature of each driver entry point once, as a function-pointer type in
/// [`pfn`] named after the symbol (`pfn::cuMemcpyHtoD_v2`, as `cudaTypedefs.h` declares
/// `PFN_cuMemcpyHtoD_v2`). Every table of entry points (this crate's
/// [`DriverApi`](crate::DriverApi), pinwise-preload's driver table and exports) takes its
/// types from here. A per-thread-default-stream variant (`_ptds`, `_ptsz`) has its base's
/// signature.
macro_rules! driver_functions {
    ($( $name:ident: fn($($arg:ty),* $(,)?); )*) => {
        /// Function-pointer types of the driver's entry points (see [`driver_functions`]).
        pub mod pfn {
            #![allow(non_camel_case_types)]
            use super::*;
            $(
                #[doc = concat!("`", stringify!($name), "`")]
                pub type $name = unsafe extern "C" fn($($arg),*) -> CUresult;
            )*
        }
    };
}

driver_functions! {
    cuGetErrorName: fn(CUresult, *mut *const c_char);
    cuGetErrorString: fn(CUresult, *mut *const c_char);
    cuInit: fn(c_uint);
    cuDriverGetVersion: fn(*mut c_int);
    cuDeviceGet: fn(*mut CUdevice, c_int);
    cuCtxGetDevice: fn(*mut CUdevice);
    cuDeviceGetCount: fn(*mut c_int);
    cuDeviceGetName: fn(*mut c_char, c_int, CUdevice);
    cuDeviceTotalMem_v2: fn(*mut usize, CUdevice);
    cuDeviceGetAttribute: fn(*mut c_int, CUdevice_attribute, CUdevice);
    cuDeviceGetPCIBusId: fn(*mut c_char, c_int, CUdevice);
    cuDeviceGetUuid: fn(*mut CUuuid, CUdevice);
    cuDeviceGetUuid_v2: fn(*mut CUuuid, CUdevice);
    cuDevicePrimaryCtxRetain: fn(*mut CUcontext, CUdevice);
    cuDevicePrimaryCtxRelease: fn(CUdevice);
    cuDevicePrimaryCtxRelease_v2: fn(CUdevice);
    cuDevicePrimaryCtxReset: fn(CUdevice);
    cuDevicePrimaryCtxReset_v2: fn(CUdevice);
    cuCtxSetCurrent: fn(CUcontext);
    cuCtxGetCurrent: fn(*mut CUcontext);
    cuCtxPushCurrent_v2: fn(CUcontext);
    cuCtxPopCurrent_v2: fn(*mut CUcontext);
    cuCtxSynchronize: fn();
    cuCtxDestroy: fn(CUcontext);
    cuCtxDestroy_v2: fn(CUcontext);
    cuMemGetInfo_v2: fn(*mut usize, *mut usize);
    cuMemAlloc_v2: fn(*mut CUdeviceptr, usize);
    cuMemFree_v2: fn(CUdeviceptr);
    cuMemGetAddressRange_v2: fn(*mut CUdeviceptr, *mut usize, CUdeviceptr);
    cuMemHostAlloc: fn(*mut *mut c_void, usize, c_uint);
    cuMemAllocHost_v2: fn(*mut *mut c_void, usize);
    cuMemFreeHost: fn(*mut c_void);
    cuMemHostRegister: fn(*mut c_void, usize, c_uint);
    cuMemHostRegister_v2: fn(*mut c_void, usize, c_uint);
    cuMemHostUnregister: fn(*mut c_void);
    cuMemHostGetDevicePointer_v2: fn(*mut CUdeviceptr, *mut c_void, c_uint);
    cuMemHostGetFlags: fn(*mut c_uint, *mut c_void);
    cuPointerGetAttribute: fn(*mut c_void, CUpointer_attribute, CUdeviceptr);
    cuPointerGetAttributes: fn(c_uint, *const CUpointer_attribute, *mut *mut c_void, CUdeviceptr);
    cuMemcpy: fn(CUdeviceptr, CUdeviceptr, usize);
    cuMemcpyAsync: fn(CUdeviceptr, CUdeviceptr, usize, CUstream);
    cuMemcpyHtoD_v2: fn(CUdeviceptr, *const c_void, usize);
    cuMemcpyDtoH_v2: fn(*mut c_void, CUdeviceptr, usize);
    cuMemcpyDtoD_v2: fn(CUdeviceptr, CUdeviceptr, usize);
    cuMemcpyHtoDAsync_v2: fn(CUdeviceptr, *const c_void, usize, CUstream);
    cuMemcpyDtoHAsync_v2: fn(*mut c_void, CUdeviceptr, usize, CUstream);
    cuMemcpyDtoDAsync_v2: fn(CUdeviceptr, CUdeviceptr, usize, CUstream);
    cuMemcpy2D_v2: fn(*const CUDA_MEMCPY2D);
    cuMemcpy2DAsync_v2: fn(*const CUDA_MEMCPY2D, CUstream);
    cuMemcpy3D_v2: fn(*const CUDA_MEMCPY3D);
    cuMemcpy3DAsync_v2: fn(*const CUDA_MEMCPY3D, CUstream);
    cuMemsetD8_v2: fn(CUdeviceptr, u8, usize);
    cuStreamCreate: fn(*mut CUstream, c_uint);
    cuStreamDestroy: fn(CUstream);
    cuStreamDestroy_v2: fn(CUstream);
    cuStreamSynchronize: fn(CUstream);
    cuStreamQuery: fn(CUstream);
    cuStreamWaitEvent: fn(CUstream, CUevent, c_uint);
    cuStreamIsCapturing: fn(CUstream, *mut CUstreamCaptureStatus);
    cuStreamBeginCapture: fn(CUstream);
    cuStreamBeginCapture_v2: fn(CUstream, CUstreamCaptureMode);
    cuStreamBeginCaptureToGraph: fn(CUstream, *mut c_void, *const c_void, *const c_void, usize, CUstreamCaptureMode);
    cuStreamEndCapture: fn(CUstream, *mut *mut c_void);
    cuThreadExchangeStreamCaptureMode: fn(*mut CUstreamCaptureMode);
    cuEventCreate: fn(*mut CUevent, c_uint);
    cuEventRecord: fn(CUevent, CUstream);
    cuEventQuery: fn(CUevent);
    cuEventSynchronize: fn(CUevent);
    cuEventElapsedTime: fn(*mut c_float, CUevent, CUevent);
    cuEventDestroy: fn(CUevent);
    cuEventDestroy_v2: fn(CUevent);
    cuIpcGetMemHandle: fn(*mut CUipcMemHandle, CUdeviceptr);
    cuIpcOpenMemHandle_v2: fn(*mut CUdeviceptr, CUipcMemHandle, c_uint);
    cuIpcCloseMemHandle: fn(CUdeviceptr);
    cuGetProcAddress: fn(*const c_char, *mut *mut c_void, c_int, u64);
    cuGetProcAddress_v2: fn(*const c_char, *mut *mut c_void, c_int, u64, *mut CUdriverProcAddressQueryResult);
}
