//! The loaded function table: one C function pointer per driver entry point pinwise uses,
//! looked up under the names the driver exports (`cuMemcpyHtoD_v2`, `cuMemHostRegister_v2`,
//! ...). Field names are those symbol names.
//!
//! Hot paths (the allocator, calibration, benchmarks) may call these pointers directly;
//! every call is `unsafe` and must follow CUDA's contract for that function. The pointers stay
//! valid for the life of the process (the library is never unloaded).

#![allow(non_snake_case)]

use libloading::Library;

use crate::error::CudaError;
use crate::sys::*;

macro_rules! driver_api {
    (
        required { $( $name:ident, )* }
        optional { $( $oname:ident, )* }
    ) => {
        /// The driver's entry points (see the module documentation); each field's type is
        /// its signature in [`crate::sys::pfn`].
        #[derive(Clone, Copy)]
        pub struct DriverApi {
            $( #[doc = concat!("`", stringify!($name), "`")]
               pub $name: pfn::$name, )*
            $( #[doc = concat!("`", stringify!($oname), "`, if this driver exports it")]
               pub $oname: Option<pfn::$oname>, )*
        }

        impl DriverApi {
            /// Looks every entry point up in `lib`; the first required one missing is an error.
            pub(crate) fn load(lib: &Library, path: &str) -> Result<DriverApi, CudaError> {
                Ok(DriverApi {
                    $( $name: {
                        // SAFETY: the symbol, if present, is the CUDA function of that name,
                        // whose C signature is the one declared in `sys::pfn` (cuda.h).
                        let symbol = unsafe { lib.get::<pfn::$name>(stringify!($name)) };
                        *symbol.map_err(|e| CudaError::MissingSymbol {
                            path: path.to_string(),
                            symbol: stringify!($name),
                            reason: crate::error::dl_reason(&e),
                        })?
                    }, )*
                    $( $oname: {
                        // SAFETY: as above.
                        let symbol = unsafe { lib.get::<pfn::$oname>(stringify!($oname)) };
                        symbol.ok().map(|s| *s)
                    }, )*
                })
            }
        }
    };
}

driver_api! {
    required {
        cuGetErrorName,
        cuGetErrorString,
        cuInit,
        cuDriverGetVersion,
        cuDeviceGet,
        cuDeviceGetCount,
        cuDeviceGetName,
        cuDeviceTotalMem_v2,
        cuDeviceGetAttribute,
        cuDeviceGetPCIBusId,
        cuDevicePrimaryCtxRetain,
        cuDevicePrimaryCtxRelease_v2,
        cuCtxSetCurrent,
        cuCtxGetCurrent,
        cuCtxSynchronize,
        cuMemGetInfo_v2,
        cuMemAlloc_v2,
        cuMemFree_v2,
        cuMemHostAlloc,
        cuMemAllocHost_v2,
        cuMemFreeHost,
        cuMemHostRegister_v2,
        cuMemHostUnregister,
        cuMemHostGetDevicePointer_v2,
        cuMemHostGetFlags,
        cuPointerGetAttribute,
        cuMemcpy,
        cuMemcpyAsync,
        cuMemcpyHtoD_v2,
        cuMemcpyDtoH_v2,
        cuMemcpyDtoD_v2,
        cuMemcpyHtoDAsync_v2,
        cuMemcpyDtoHAsync_v2,
        cuMemcpyDtoDAsync_v2,
        cuMemcpy2D_v2,
        cuMemcpy2DAsync_v2,
        cuMemcpy3D_v2,
        cuMemsetD8_v2,
        cuStreamCreate,
        cuStreamDestroy_v2,
        cuStreamSynchronize,
        cuStreamQuery,
        cuStreamWaitEvent,
        cuEventCreate,
        cuEventRecord,
        cuEventQuery,
        cuEventSynchronize,
        cuEventElapsedTime,
        cuEventDestroy_v2,
    }
    optional {
        cuDeviceGetUuid_v2,
        cuDeviceGetUuid,
        cuMemGetAddressRange_v2,
        cuIpcGetMemHandle,
        cuIpcOpenMemHandle_v2,
        cuIpcCloseMemHandle,
        cuGetProcAddress_v2,
    }
}

impl std::fmt::Debug for DriverApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverApi").finish_non_exhaustive()
    }
}
