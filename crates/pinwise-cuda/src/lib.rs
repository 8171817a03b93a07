//! pinwise-cuda: the CUDA driver API (`libcuda.so.1`), loaded at run time.
//!
//! Nothing CUDA is needed to build. [`Driver::load`] opens `$PINWISE_LIBCUDA` or
//! `libcuda.so.1` with `libloading` and looks up every entry point under the name the driver
//! exports (`cuMemcpyHtoD_v2`, ...), into a function table ([`DriverApi`]) that hot paths may
//! call directly. Safe types sit on top:
//!
//! | type | what |
//! |---|---|
//! | [`Driver`] | the library: init, version, devices, `cuGetProcAddress`, error text |
//! | [`Device`] | name, memory, attributes, PCI ids, primary context |
//! | [`Context`] | a retained primary context; copies, memsets, pointer queries, memory info |
//! | [`Stream`], [`Event`] | streams (created or default) and events with timing |
//! | [`PerThreadStream`] | the calling thread's per-thread default stream (stays on that thread) |
//! | [`DeviceBuffer`] | `cuMemAlloc` memory |
//! | [`PinnedHostRegion`] | `cuMemHostAlloc` / `cuMemAllocHost` memory |
//! | [`HostRegistration`] | caller memory locked with `cuMemHostRegister` |
//! | [`IpcMemHandle`], [`IpcMapping`] | CUDA IPC: a device allocation opened by another process |
//! | [`nvml::Nvml`] | optional NVML: PCIe generation and width per device |
//!
//! Errors are [`CudaError`]s, never panics: a missing library (path and `dlerror` text), a
//! missing symbol (its name), or a failed call (the call, CUDA's code, name and message).
//!
//! ```no_run
//! use pinwise_cuda::{Driver, DeviceBuffer, PinnedHostRegion};
//!
//! let driver = Driver::shared()?;
//! let ctx = driver.device(0)?.primary_context()?;
//! let mut host = PinnedHostRegion::alloc_host(&ctx, 1 << 20)?;
//! host.as_mut_slice().fill(7);
//! let dev = DeviceBuffer::new(&ctx, 1 << 20)?;
//! dev.copy_from_host(host.as_slice())?;
//! # Ok::<(), pinwise_cuda::CudaError>(())
//! ```
//!
//! In tests, `pinwise_testkit::StandinLibs` provides the CPU stand-in for `libcuda.so.1`
//! (a TEST FIXTURE: not a GPU).

pub mod api;
mod context;
mod copy;
mod device;
mod driver;
mod error;
mod ipc;
mod memory;
pub mod nvml;
mod stream;
// Raw declarations mirroring cuda.h (constants, structs, function-pointer types): their
// documentation is NVIDIA's, not repeated here.
#[allow(missing_docs)]
pub mod sys;

pub use api::DriverApi;
pub use context::{Context, MemInfo};
pub use device::{format_uuid, Device, PciIds};
pub use driver::{Driver, ProcAddress, DEFAULT_LIBCUDA, LIBCUDA_ENV};
pub use error::{CudaError, Result};
pub use ipc::{IpcMapping, IpcMemHandle};
pub use memory::{
    DeviceBuffer, DevicePtr, HostRegistration, MemoryType, PinnedAllocator, PinnedHostRegion,
};
pub use stream::{AsStream, Event, PerThreadStream, Stream};

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn handles_are_send_and_sync() {
        assert_send_sync::<Driver>();
        assert_send_sync::<DriverApi>();
        assert_send_sync::<Device>();
        assert_send_sync::<Context>();
        assert_send_sync::<Stream>();
        assert_send_sync::<Event>();
        assert_send_sync::<DeviceBuffer>();
        assert_send_sync::<PinnedHostRegion>();
        assert_send_sync::<HostRegistration<'static>>();
        assert_send_sync::<CudaError>();
        assert_send_sync::<IpcMapping>();
    }

    #[test]
    fn a_missing_library_is_a_typed_error_with_the_path_and_loader_text() {
        let err = Driver::load_from(std::path::Path::new("/nonexistent/libcuda.so.1")).unwrap_err();
        match &err {
            CudaError::LibraryNotFound { path, reason } => {
                assert_eq!(path, "/nonexistent/libcuda.so.1");
                assert!(reason.contains("No such file"), "dlerror text: {reason}");
            }
            other => panic!("expected LibraryNotFound, got {other:?}"),
        }
        assert!(err.to_string().contains("/nonexistent/libcuda.so.1"));
    }

    #[test]
    fn absent_nvml_is_not_available() {
        let err = nvml::Nvml::load_from(std::path::Path::new("/nonexistent/libnvidia-ml.so.1"))
            .unwrap_err();
        assert!(
            matches!(err, nvml::NvmlError::NotAvailable { .. }),
            "{err:?}"
        );
    }
}
