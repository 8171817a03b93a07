//! Which cost table prices this process's decisions. pinwise-core's pricing chooses
//! ([`pinwise_core::decide::pricing::pricing_table`]: the calibration named by
//! `PINWISE_CALIBRATION`, else this GPU's calibration cached by the automatic calibration,
//! else the built-in H200 table); this module only finds the GPU's identity, from the
//! driver the program loaded, without starting GPU work (no calibration is measured inside
//! someone else's program).

use pinwise_core::decide::pricing::{cache_dir, pricing_table, PricingTable};
use pinwise_cuda::sys::{CUdevice, CUuuid, CUDA_SUCCESS};

use crate::config::Config;
use crate::guard::Inside;
use crate::real;

/// The table for `config`, for the GPU current in this process (see the module
/// documentation).
pub fn table(config: &Config) -> PricingTable {
    pricing_table(
        config.calibration.as_deref(),
        gpu_key().as_deref(),
        cache_dir().as_deref(),
    )
}

/// The UUID (`GPU-…`, as `nvidia-smi` prints it) of the device current on this thread, else
/// of device 0; `None` when the driver cannot say (no `cuDeviceGetUuid`, as on the CPU
/// stand-in, or no device).
pub fn gpu_key() -> Option<String> {
    let _inside = Inside::enter();
    use pinwise_cuda::sys::pfn;
    type GetDevice = pfn::cuCtxGetDevice;
    type DeviceGet = pfn::cuDeviceGet;
    type GetUuid = pfn::cuDeviceGetUuid_v2;
    let uuid_fn = real::driver_fn(c"cuDeviceGetUuid_v2").or(real::driver_fn(c"cuDeviceGetUuid"))?;
    // SAFETY: libcuda's cuDeviceGetUuid(_v2), whose C signature is `GetUuid` (cuda.h).
    let get_uuid: GetUuid = unsafe { std::mem::transmute::<usize, GetUuid>(uuid_fn) };
    let mut dev: CUdevice = 0;
    let current = real::driver_fn(c"cuCtxGetDevice").is_some_and(|f| {
        // SAFETY: libcuda's cuCtxGetDevice, signature `GetDevice` (cuda.h).
        let f: GetDevice = unsafe { std::mem::transmute::<usize, GetDevice>(f) };
        // SAFETY: valid out-parameter.
        unsafe { f(&mut dev) == CUDA_SUCCESS }
    });
    if !current {
        let f = real::driver_fn(c"cuDeviceGet")?;
        // SAFETY: libcuda's cuDeviceGet, signature `DeviceGet` (cuda.h).
        let f: DeviceGet = unsafe { std::mem::transmute::<usize, DeviceGet>(f) };
        // SAFETY: valid out-parameter.
        if unsafe { f(&mut dev, 0) } != CUDA_SUCCESS {
            return None;
        }
    }
    let mut id = CUuuid::default();
    // SAFETY: valid out-parameter of 16 bytes, and a device the driver named.
    (unsafe { get_uuid(&mut id, dev) } == CUDA_SUCCESS)
        .then(|| pinwise_cuda::format_uuid(&id.bytes))
}
