//! The loaded function table: one C function pointer per driver entry point pinwise uses,
//! looked up under the names the driver exports (`cuMemcpyHtoD_v2`, `cuMemHostRegister_v2`,
//! ...). Field names are those symbol names.
//!
//! Hot paths (the allocator, calibration, benchmarks) may call these pointers directly;
//! every call is `unsafe` and must follow CUDA's contract for that function. The pointers stay
//! valid for the life of the process (the library is never unloaded).

#![allow(non_snake_case)]

use std::ffi::{c_char, c_float, c_int, c_uint, c_void};

use libloading::Library;

use crate::error::CudaError;
use crate::sys::*;

macro_rules! driver_api {
    (
        required { $( $name:ident : fn($($arg:ty),* $(,)?); )* }
        optional { $( $oname:ident : fn($($oarg:ty),* $(,)?); )* }
    ) => {
        /// The driver's entry points (see the module documentation).
        #[derive(Clone, Copy)]
        pub struct DriverApi {
            $( #[doc = concat!("`", stringify!($name), "`")]
               pub $name: unsafe extern "C" fn($($arg),*) -> CUresult, )*
            $( #[doc = concat!("`", stringify!($oname), "`, if this driver exports it")]
               pub $oname: Option<unsafe extern "C" fn($($oarg),*) -> CUresult>, )*
        }

        impl DriverApi {
            /// Looks every entry point up in `lib`; the first required one missing is an error.
            pub(crate) fn load(lib: &Library, path: &str) -> Result<DriverApi, CudaError> {
                Ok(DriverApi {
                    $( $name: {
                        // SAFETY: the symbol, if present, is the CUDA function of that name,
                        // whose C signature is the one declared here (cuda.h).
                        let symbol = unsafe {
                            lib.get::<unsafe extern "C" fn($($arg),*) -> CUresult>(stringify!($name))
                        };
                        *symbol.map_err(|e| CudaError::MissingSymbol {
                            path: path.to_string(),
                            symbol: stringify!($name),
                            reason: crate::error::dl_reason(&e),
                        })?
                    }, )*
                    $( $oname: {
                        // SAFETY: as above.
                        let symbol = unsafe {
                            lib.get::<unsafe extern "C" fn($($oarg),*) -> CUresult>(stringify!($oname))
                        };
                        symbol.ok().map(|s| *s)
                    }, )*
                })
            }
        }
    };
}

driver_api! {
    required {
        cuGetErrorName: fn(CUresult, *mut *const c_char);
        cuGetErrorString: fn(CUresult, *mut *const c_char);
        cuInit: fn(c_uint);
        cuDriverGetVersion: fn(*mut c_int);
        cuDeviceGet: fn(*mut CUdevice, c_int);
        cuDeviceGetCount: fn(*mut c_int);
        cuDeviceGetName: fn(*mut c_char, c_int, CUdevice);
        cuDeviceTotalMem_v2: fn(*mut usize, CUdevice);
        cuDeviceGetAttribute: fn(*mut c_int, CUdevice_attribute, CUdevice);
        cuDeviceGetPCIBusId: fn(*mut c_char, c_int, CUdevice);
        cuDevicePrimaryCtxRetain: fn(*mut CUcontext, CUdevice);
        cuDevicePrimaryCtxRelease_v2: fn(CUdevice);
        cuCtxSetCurrent: fn(CUcontext);
        cuCtxGetCurrent: fn(*mut CUcontext);
        cuCtxSynchronize: fn();
        cuMemGetInfo_v2: fn(*mut usize, *mut usize);
        cuMemAlloc_v2: fn(*mut CUdeviceptr, usize);
        cuMemFree_v2: fn(CUdeviceptr);
        cuMemHostAlloc: fn(*mut *mut c_void, usize, c_uint);
        cuMemAllocHost_v2: fn(*mut *mut c_void, usize);
        cuMemFreeHost: fn(*mut c_void);
        cuMemHostRegister_v2: fn(*mut c_void, usize, c_uint);
        cuMemHostUnregister: fn(*mut c_void);
        cuMemHostGetDevicePointer_v2: fn(*mut CUdeviceptr, *mut c_void, c_uint);
        cuMemHostGetFlags: fn(*mut c_uint, *mut c_void);
        cuPointerGetAttribute: fn(*mut c_void, CUpointer_attribute, CUdeviceptr);
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
        cuMemsetD8_v2: fn(CUdeviceptr, u8, usize);
        cuStreamCreate: fn(*mut CUstream, c_uint);
        cuStreamDestroy_v2: fn(CUstream);
        cuStreamSynchronize: fn(CUstream);
        cuStreamQuery: fn(CUstream);
        cuStreamWaitEvent: fn(CUstream, CUevent, c_uint);
        cuEventCreate: fn(*mut CUevent, c_uint);
        cuEventRecord: fn(CUevent, CUstream);
        cuEventQuery: fn(CUevent);
        cuEventSynchronize: fn(CUevent);
        cuEventElapsedTime: fn(*mut c_float, CUevent, CUevent);
        cuEventDestroy_v2: fn(CUevent);
    }
    optional {
        cuDeviceGetUuid_v2: fn(*mut CUuuid, CUdevice);
        cuDeviceGetUuid: fn(*mut CUuuid, CUdevice);
        cuMemGetAddressRange_v2: fn(*mut CUdeviceptr, *mut usize, CUdeviceptr);
        cuIpcGetMemHandle: fn(*mut CUipcMemHandle, CUdeviceptr);
        cuIpcOpenMemHandle_v2: fn(*mut CUdeviceptr, CUipcMemHandle, c_uint);
        cuIpcCloseMemHandle: fn(CUdeviceptr);
        cuGetProcAddress_v2: fn(*const c_char, *mut *mut c_void, c_int, u64, *mut CUdriverProcAddressQueryResult);
    }
}

impl std::fmt::Debug for DriverApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverApi").finish_non_exhaustive()
    }
}
