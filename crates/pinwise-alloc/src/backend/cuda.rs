//! [`PinBackend`] on the CUDA driver, through pinwise-cuda.
//!
//! A thin layer: each method makes the context current on the calling thread (a no-op when
//! it already is) and calls one driver entry point from pinwise-cuda's function table, whose
//! errors carry CUDA's own names. Nothing is allocated on success paths.

use std::ffi::c_void;
use std::sync::Arc;

use pinwise_cuda::sys::{CUevent, CUstream, CUDA_ERROR_NOT_READY, CU_EVENT_DISABLE_TIMING};
use pinwise_cuda::{Context, CudaError, Driver};

use super::{BackendError, DevicePtr, EventHandle, PinBackend, StreamHandle};

/// The CUDA driver as the allocator's backend: one device's primary context.
#[derive(Debug, Clone)]
pub struct CudaBackend {
    ctx: Context,
    description: String,
    fixture: bool,
}

impl CudaBackend {
    /// A backend on `ctx`.
    pub fn new(ctx: Context) -> Self {
        let driver = ctx.driver();
        let marker = driver.standin_marker();
        let device = ctx
            .device()
            .name()
            .unwrap_or_else(|_| "unknown device".into());
        let version = driver
            .version()
            .map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10))
            .unwrap_or_else(|_| "?".into());
        let description = match &marker {
            Some(m) => format!(
                "CPU stand-in for libcuda ({m}) at {}: TEST FIXTURE, not a GPU",
                driver.path()
            ),
            None => format!("CUDA driver {version} ({}), {device}", driver.path()),
        };
        CudaBackend {
            ctx,
            description,
            fixture: marker.is_some(),
        }
    }

    /// Device `ordinal` of `driver` (initialized), through its primary context.
    pub fn on_device(driver: &Arc<Driver>, ordinal: usize) -> Result<Self, CudaError> {
        driver.init()?;
        Ok(CudaBackend::new(driver.device(ordinal)?.primary_context()?))
    }

    /// Device 0 of the process-wide driver (`$PINWISE_LIBCUDA` or `libcuda.so.1`).
    pub fn open_default() -> Result<Self, CudaError> {
        CudaBackend::on_device(&Driver::shared()?, 0)
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// What identifies this GPU for a cached calibration: its UUID (`GPU-...`), or where
    /// the driver has no UUID call, its name and PCI bus id. `None` when neither can be
    /// had.
    pub fn gpu_key(&self) -> Option<String> {
        let dev = self.ctx.device();
        if let Ok(Some(uuid)) = dev.uuid() {
            return Some(uuid);
        }
        let name = dev.name().ok()?;
        let bus = dev.pci_bus_id().unwrap_or_else(|_| "?".into());
        Some(format!("{name} at {bus}"))
    }

    /// Runs a driver call with the context current, mapping errors.
    fn call(
        &self,
        op: &'static str,
        f: impl FnOnce(&pinwise_cuda::DriverApi) -> pinwise_cuda::sys::CUresult,
    ) -> Result<(), BackendError> {
        self.ctx.ensure_current().map_err(|e| err(op, e))?;
        let driver = self.ctx.driver();
        driver.check(op, f(driver.api())).map_err(|e| err(op, e))
    }
}

fn err(op: &'static str, e: CudaError) -> BackendError {
    BackendError::new(op, e)
}

impl PinBackend for CudaBackend {
    fn describe(&self) -> String {
        self.description.clone()
    }

    fn is_fixture(&self) -> bool {
        self.fixture
    }

    fn alloc_pinned(&self, len: usize, flags: u32) -> Result<*mut u8, BackendError> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-parameter; the context is current (`call`).
        self.call("cuMemHostAlloc", |api| unsafe {
            (api.cuMemHostAlloc)(&mut p, len, flags)
        })?;
        if p.is_null() {
            return Err(BackendError::new("cuMemHostAlloc", "returned NULL"));
        }
        Ok(p as *mut u8)
    }

    unsafe fn free_pinned(&self, ptr: *mut u8) -> Result<(), BackendError> {
        // SAFETY: the caller passes memory from `alloc_pinned`, unused from now on.
        self.call("cuMemFreeHost", |api| unsafe {
            (api.cuMemFreeHost)(ptr as *mut c_void)
        })
    }

    unsafe fn register(&self, ptr: *mut u8, len: usize) -> Result<(), BackendError> {
        // SAFETY: the caller guarantees the range is mapped and stays so until unregistered.
        self.call("cuMemHostRegister_v2", |api| unsafe {
            (api.cuMemHostRegister_v2)(ptr as *mut c_void, len, 0)
        })
    }

    unsafe fn unregister(&self, ptr: *mut u8) -> Result<(), BackendError> {
        // SAFETY: the caller passes the start of a range this backend registered.
        self.call("cuMemHostUnregister", |api| unsafe {
            (api.cuMemHostUnregister)(ptr as *mut c_void)
        })
    }

    fn create_event(&self) -> Result<EventHandle, BackendError> {
        let mut e: CUevent = std::ptr::null_mut();
        // SAFETY: valid out-parameter; context current.
        self.call("cuEventCreate", |api| unsafe {
            (api.cuEventCreate)(&mut e, CU_EVENT_DISABLE_TIMING)
        })?;
        Ok(EventHandle(e as u64))
    }

    fn destroy_event(&self, event: EventHandle) {
        // SAFETY: an event from `create_event`, destroyed once by the event pool.
        let _ = self.call("cuEventDestroy_v2", |api| unsafe {
            (api.cuEventDestroy_v2)(event.0 as CUevent)
        });
    }

    fn record_event(&self, event: EventHandle, stream: StreamHandle) -> Result<(), BackendError> {
        // SAFETY: a live event and a stream handle the caller copied on.
        self.call("cuEventRecord", |api| unsafe {
            (api.cuEventRecord)(event.0 as CUevent, stream.0 as CUstream)
        })
    }

    fn event_completed(&self, event: EventHandle) -> Result<bool, BackendError> {
        self.ctx
            .ensure_current()
            .map_err(|e| err("cuEventQuery", e))?;
        let driver = self.ctx.driver();
        // SAFETY: a live event from `create_event`.
        let rc = unsafe { (driver.api().cuEventQuery)(event.0 as CUevent) };
        if rc == CUDA_ERROR_NOT_READY {
            return Ok(false);
        }
        driver
            .check("cuEventQuery", rc)
            .map(|_| true)
            .map_err(|e| err("cuEventQuery", e))
    }

    fn synchronize_event(&self, event: EventHandle) -> Result<(), BackendError> {
        // SAFETY: a live event from `create_event`.
        self.call("cuEventSynchronize", |api| unsafe {
            (api.cuEventSynchronize)(event.0 as CUevent)
        })
    }

    fn synchronize_stream(&self, stream: StreamHandle) -> Result<(), BackendError> {
        // SAFETY: a stream handle the caller copied on (0: the legacy default stream).
        self.call("cuStreamSynchronize", |api| unsafe {
            (api.cuStreamSynchronize)(stream.0 as CUstream)
        })
    }

    unsafe fn copy_htod(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
        stream: Option<StreamHandle>,
    ) -> Result<(), BackendError> {
        match stream {
            // SAFETY: the caller guarantees `src` is readable for `len` during the call.
            None => self.call("cuMemcpyHtoD_v2", |api| unsafe {
                (api.cuMemcpyHtoD_v2)(dst.0, src as *const c_void, len)
            }),
            // SAFETY: the caller guarantees `src` stays readable until the copy completes.
            Some(s) => self.call("cuMemcpyHtoDAsync_v2", |api| unsafe {
                (api.cuMemcpyHtoDAsync_v2)(dst.0, src as *const c_void, len, s.0 as CUstream)
            }),
        }
    }

    unsafe fn copy_dtoh(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        len: usize,
        stream: Option<StreamHandle>,
    ) -> Result<(), BackendError> {
        match stream {
            // SAFETY: the caller guarantees `dst` is writable for `len` during the call.
            None => self.call("cuMemcpyDtoH_v2", |api| unsafe {
                (api.cuMemcpyDtoH_v2)(dst as *mut c_void, src.0, len)
            }),
            // SAFETY: the caller guarantees `dst` stays writable until the copy completes.
            Some(s) => self.call("cuMemcpyDtoHAsync_v2", |api| unsafe {
                (api.cuMemcpyDtoHAsync_v2)(dst as *mut c_void, src.0, len, s.0 as CUstream)
            }),
        }
    }
}
