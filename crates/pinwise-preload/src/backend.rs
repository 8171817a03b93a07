//! The real driver functions pinwise calls itself, and the allocator's [`PinBackend`] on
//! them.
//!
//! Unlike pinwise-alloc's `CudaBackend` (which opens libcuda and retains a primary
//! context), this backend works inside the program: it calls the libcuda the program
//! loaded, through the real entry points (never our hooks), on the program's threads, in
//! whatever context the program made current. A call made on a thread with no current
//! context (a `free` from a worker thread) pushes the context pinwise saw first.
//!
//! Stream capture: pinwise's own driver calls run with the thread's capture mode relaxed
//! (`cuThreadExchangeStreamCaptureMode`, as CUDA libraries do), so that registering,
//! unregistering or waiting for a stream that is not being captured never invalidates a
//! capture in progress on another stream or thread; and the backend never records an
//! event on, or waits for, a stream being captured ([`DriverTable::capture_of`]).

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

use pinwise_alloc::backend::{BackendError, DevicePtr, EventHandle, PinBackend, StreamHandle};
use pinwise_cuda::sys::{
    pfn, CUcontext, CUevent, CUresult, CUstream, CUstreamCaptureMode, CUstreamCaptureStatus,
    CUDA_ERROR_NOT_READY, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, CUDA_SUCCESS,
    CU_EVENT_DISABLE_TIMING, CU_MEMHOSTALLOC_PORTABLE, CU_MEMHOSTREGISTER_DEVICEMAP,
    CU_MEMHOSTREGISTER_PORTABLE, CU_STREAM_CAPTURE_MODE_RELAXED, CU_STREAM_CAPTURE_STATUS_NONE,
};

use crate::guard::Inside;
use crate::real;
use crate::variants::Hooked;

/// The driver functions pinwise calls, resolved once from the loaded libcuda (its own
/// resolver: the real functions behind pinwise's hooks, never the hooks). The signatures
/// are `pinwise_cuda::sys::pfn`'s.
pub struct DriverTable {
    /// `cuMemHostAlloc`.
    pub mem_host_alloc: pfn::cuMemHostAlloc,
    /// `cuMemFreeHost`.
    pub mem_free_host: pfn::cuMemFreeHost,
    /// `cuMemHostRegister_v2`.
    pub mem_host_register: pfn::cuMemHostRegister_v2,
    /// `cuMemHostUnregister`.
    pub mem_host_unregister: pfn::cuMemHostUnregister,
    /// `cuPointerGetAttribute`.
    pub pointer_get_attribute: pfn::cuPointerGetAttribute,
    /// `cuMemcpyHtoD_v2`.
    pub memcpy_htod: pfn::cuMemcpyHtoD_v2,
    /// `cuMemcpyDtoH_v2`.
    pub memcpy_dtoh: pfn::cuMemcpyDtoH_v2,
    /// `cuMemcpyHtoDAsync_v2`.
    pub memcpy_htod_async: pfn::cuMemcpyHtoDAsync_v2,
    /// `cuMemcpyDtoHAsync_v2`.
    pub memcpy_dtoh_async: pfn::cuMemcpyDtoHAsync_v2,
    event_create: pfn::cuEventCreate,
    event_destroy: pfn::cuEventDestroy_v2,
    event_record: pfn::cuEventRecord,
    event_query: pfn::cuEventQuery,
    event_synchronize: pfn::cuEventSynchronize,
    stream_synchronize: pfn::cuStreamSynchronize,
    ctx_get_current: pfn::cuCtxGetCurrent,
    ctx_set_current: pfn::cuCtxSetCurrent,
    /// `cuCtxPushCurrent_v2`/`cuCtxPopCurrent_v2` (absent from old drivers and the stand-in:
    /// `cuCtxSetCurrent` then does).
    ctx_push_pop: Option<(pfn::cuCtxPushCurrent_v2, pfn::cuCtxPopCurrent_v2)>,
    get_error_name: Option<pfn::cuGetErrorName>,
    /// `cuStreamIsCapturing` (CUDA 10.0; absent: no stream is taken to be capturing).
    stream_is_capturing: Option<pfn::cuStreamIsCapturing>,
    /// `cuThreadExchangeStreamCaptureMode` (CUDA 10.1; absent: calls run in the thread's
    /// own mode).
    exchange_capture_mode: Option<pfn::cuThreadExchangeStreamCaptureMode>,
    /// Whether the libcuda is pinwise's CPU stand-in (a TEST FIXTURE).
    pub standin: bool,
    /// The first non-null context pinwise saw current (used where none is).
    saved_context: AtomicUsize,
}

fn hooked<F: Copy>(h: Hooked) -> Result<F, String> {
    let a = real::real(h).ok_or_else(|| format!("libcuda has no {}", h.symbol()))?;
    // SAFETY: `a` is libcuda's `h`, whose C signature is `F` (cuda.h); the caller picks `F`.
    Ok(unsafe { std::mem::transmute_copy::<usize, F>(&a) })
}

fn named<F: Copy>(name: &CStr) -> Result<F, String> {
    let a = real::driver_fn(name)
        .ok_or_else(|| format!("libcuda has no {}", name.to_string_lossy()))?;
    // SAFETY: `a` is libcuda's function of that name, whose C signature is `F` (cuda.h).
    Ok(unsafe { std::mem::transmute_copy::<usize, F>(&a) })
}

impl DriverTable {
    /// Resolves the functions from the loaded libcuda; `Err` names what is missing (no
    /// libcuda loaded, or an old one).
    pub fn load() -> Result<DriverTable, String> {
        let _inside = Inside::enter();
        real::libcuda_handle().ok_or("libcuda.so.1 is not loaded")?;
        Ok(DriverTable {
            mem_host_alloc: hooked(Hooked::MemHostAlloc)?,
            mem_free_host: hooked(Hooked::MemFreeHost)?,
            mem_host_register: hooked(Hooked::MemHostRegisterV2)
                .or_else(|_| hooked(Hooked::MemHostRegister))?,
            mem_host_unregister: hooked(Hooked::MemHostUnregister)?,
            pointer_get_attribute: hooked(Hooked::PointerGetAttribute)?,
            memcpy_htod: hooked(Hooked::MemcpyHtoD)?,
            memcpy_dtoh: hooked(Hooked::MemcpyDtoH)?,
            memcpy_htod_async: hooked(Hooked::MemcpyHtoDAsync)?,
            memcpy_dtoh_async: hooked(Hooked::MemcpyDtoHAsync)?,
            event_create: named(c"cuEventCreate")?,
            event_destroy: named(c"cuEventDestroy_v2").or_else(|_| named(c"cuEventDestroy"))?,
            event_record: named(c"cuEventRecord")?,
            event_query: named(c"cuEventQuery")?,
            event_synchronize: named(c"cuEventSynchronize")?,
            stream_synchronize: named(c"cuStreamSynchronize")?,
            ctx_get_current: named(c"cuCtxGetCurrent")?,
            ctx_set_current: named(c"cuCtxSetCurrent")?,
            ctx_push_pop: named(c"cuCtxPushCurrent_v2")
                .ok()
                .zip(named(c"cuCtxPopCurrent_v2").ok()),
            get_error_name: named(c"cuGetErrorName").ok(),
            stream_is_capturing: named(c"cuStreamIsCapturing").ok(),
            exchange_capture_mode: named(c"cuThreadExchangeStreamCaptureMode").ok(),
            standin: real::libcuda_is_standin(),
            saved_context: AtomicUsize::new(0),
        })
    }

    /// The context current on this thread (0: none), remembered if it is the first seen.
    pub fn current_context(&self) -> usize {
        let mut ctx: CUcontext = std::ptr::null_mut();
        // SAFETY: valid out-parameter.
        let rc = unsafe { (self.ctx_get_current)(&mut ctx) };
        let ctx = if rc == CUDA_SUCCESS { ctx as usize } else { 0 };
        if ctx != 0 {
            let _ =
                self.saved_context
                    .compare_exchange(0, ctx, Ordering::AcqRel, Ordering::Relaxed);
        }
        ctx
    }

    /// The program is destroying context `ctx`: pinwise no longer makes it current for its
    /// own calls (a dead handle).
    pub fn forget_context(&self, ctx: usize) {
        let _ = self
            .saved_context
            .compare_exchange(ctx, 0, Ordering::AcqRel, Ordering::Relaxed);
    }

    /// Whether `stream` (a handle as the program passed it, per-thread default stream as
    /// `CU_STREAM_PER_THREAD`) is being captured into a graph: one `cuStreamIsCapturing`.
    pub fn capture_of(&self, stream: usize) -> StreamCapture {
        let Some(is_capturing) = self.stream_is_capturing else {
            return StreamCapture::None;
        };
        let mut status: CUstreamCaptureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: a stream handle the program just used (or a default-stream handle) and a
        // valid out-parameter.
        let rc = unsafe { is_capturing(stream as CUstream, &mut status) };
        match (rc, status) {
            (CUDA_SUCCESS, CU_STREAM_CAPTURE_STATUS_NONE) => StreamCapture::None,
            (CUDA_SUCCESS, _) => StreamCapture::Capturing,
            _ => StreamCapture::Unknown,
        }
    }

    /// Runs `f` with this thread's stream-capture mode relaxed, restoring it after (even if
    /// `f` panics): pinwise's own calls are then not "potentially unsafe" calls that would
    /// invalidate a capture in progress elsewhere.
    pub fn relaxed<R>(&self, f: impl FnOnce() -> R) -> R {
        /// Puts the thread's mode back when dropped.
        struct Restore(pfn::cuThreadExchangeStreamCaptureMode, CUstreamCaptureMode);
        impl Drop for Restore {
            fn drop(&mut self) {
                // SAFETY: a valid in-out parameter; the mode the thread had before.
                unsafe { (self.0)(&mut self.1) };
            }
        }
        let Some(exchange) = self.exchange_capture_mode else {
            return f();
        };
        let mut mode: CUstreamCaptureMode = CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: a valid in-out parameter; the thread's previous mode comes back in it.
        let _restore =
            (unsafe { exchange(&mut mode) } == CUDA_SUCCESS).then_some(Restore(exchange, mode));
        f()
    }

    /// Runs `f` with a context current (the thread's own, else `preferred`, else the first
    /// one pinwise saw) and the thread's capture mode relaxed ([`DriverTable::relaxed`]).
    pub fn with_context<R>(&self, preferred: usize, f: impl FnOnce() -> R) -> R {
        let _inside = Inside::enter();
        let f = || self.relaxed(f);
        if self.current_context() != 0 {
            return f();
        }
        let ctx = if preferred != 0 {
            preferred
        } else {
            self.saved_context.load(Ordering::Acquire)
        };
        if ctx == 0 {
            return f();
        }
        match self.ctx_push_pop {
            Some((push, pop)) => {
                // SAFETY: a context handle the driver gave out in this process.
                let pushed = unsafe { push(ctx as CUcontext) } == CUDA_SUCCESS;
                let r = f();
                if pushed {
                    let mut popped: CUcontext = std::ptr::null_mut();
                    // SAFETY: pops the context pushed above.
                    unsafe { pop(&mut popped) };
                }
                r
            }
            None => {
                // SAFETY: as above; the thread had no current context, restored after.
                let set = unsafe { (self.ctx_set_current)(ctx as CUcontext) } == CUDA_SUCCESS;
                let r = f();
                if set {
                    // SAFETY: back to no current context, as the thread was.
                    unsafe { (self.ctx_set_current)(std::ptr::null_mut()) };
                }
                r
            }
        }
    }

    /// Waits for `stream`'s work (`cuStreamSynchronize`; the caller checked that it is not
    /// being captured), the thread's capture mode relaxed.
    pub fn synchronize(&self, stream: usize) -> CUresult {
        let _inside = Inside::enter();
        // SAFETY: a stream handle the program just used (or a default-stream handle).
        self.relaxed(|| unsafe { (self.stream_synchronize)(stream as CUstream) })
    }

    /// `CUDA_ERROR_NAME (code)` for an error code.
    pub fn error_text(&self, rc: CUresult) -> String {
        let mut name: *const c_char = std::ptr::null();
        if let Some(f) = self.get_error_name {
            // SAFETY: valid out-parameter; the driver returns a static string.
            if unsafe { f(rc, &mut name) } == CUDA_SUCCESS && !name.is_null() {
                // SAFETY: a NUL-terminated static string of the driver.
                let s = unsafe { CStr::from_ptr(name) }.to_string_lossy();
                return format!("{s} ({rc})");
            }
        }
        format!("CUresult {rc}")
    }

    /// Registers `[ptr, ptr + len)` (page-aligned) as the pinned memory CUDA would have
    /// allocated: portable and mapped.
    ///
    /// # Safety
    /// The range is mapped memory that stays mapped until [`DriverTable::unregister`].
    pub unsafe fn register(&self, ptr: usize, len: usize) -> CUresult {
        let flags = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP;
        // SAFETY: the caller's contract.
        self.with_context(0, || unsafe {
            (self.mem_host_register)(ptr as *mut c_void, len, flags)
        })
    }

    /// Unregisters a range [`DriverTable::register`] registered, in `context` if the thread has
    /// none current.
    ///
    /// # Safety
    /// `ptr` starts a range registered by [`DriverTable::register`].
    pub unsafe fn unregister(&self, ptr: usize, context: usize) -> CUresult {
        // SAFETY: the caller's contract.
        self.with_context(context, || unsafe {
            (self.mem_host_unregister)(ptr as *mut c_void)
        })
    }
}

/// What `cuStreamIsCapturing` says about a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamCapture {
    /// Not capturing (or the driver has no stream capture).
    None,
    /// Being captured into a graph (active, or invalidated and not yet ended).
    Capturing,
    /// The driver would not say: the legacy stream while a blocking stream captures
    /// (`CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`), an unknown handle, no context. Treated as
    /// capturing: pinwise leaves the stream alone.
    Unknown,
}

/// The allocator's backend on the program's own libcuda.
pub struct PreloadBackend {
    driver: &'static DriverTable,
}

impl PreloadBackend {
    /// A backend calling `driver`.
    pub fn new(driver: &'static DriverTable) -> Self {
        PreloadBackend { driver }
    }

    fn call(&self, op: &'static str, f: impl FnOnce() -> CUresult) -> Result<(), BackendError> {
        let rc = self.driver.with_context(0, f);
        if rc == CUDA_SUCCESS {
            Ok(())
        } else {
            Err(BackendError::new(op, self.driver.error_text(rc)))
        }
    }
}

impl PinBackend for PreloadBackend {
    fn describe(&self) -> String {
        if self.driver.standin {
            "the program's libcuda.so.1: pinwise's CPU stand-in (TEST FIXTURE, not a GPU)".into()
        } else {
            "the program's libcuda.so.1".into()
        }
    }

    fn is_fixture(&self) -> bool {
        self.driver.standin
    }

    fn alloc_pinned(&self, len: usize, flags: u32) -> Result<*mut u8, BackendError> {
        // Pool segments are shared by allocations of any context: portable.
        let flags = if flags == 0 {
            CU_MEMHOSTALLOC_PORTABLE
        } else {
            flags
        };
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-parameter.
        self.call("cuMemHostAlloc", || unsafe {
            (self.driver.mem_host_alloc)(&mut p, len, flags)
        })?;
        if p.is_null() {
            return Err(BackendError::new("cuMemHostAlloc", "returned NULL"));
        }
        Ok(p as *mut u8)
    }

    unsafe fn free_pinned(&self, ptr: *mut u8) -> Result<(), BackendError> {
        // SAFETY: memory from `alloc_pinned`, unused from now on (the caller's contract).
        self.call("cuMemFreeHost", || unsafe {
            (self.driver.mem_free_host)(ptr as *mut c_void)
        })
    }

    unsafe fn register(&self, ptr: *mut u8, len: usize) -> Result<(), BackendError> {
        // SAFETY: the caller's contract (mapped until unregistered).
        let rc = unsafe { self.driver.register(ptr as usize, len) };
        if rc == CUDA_SUCCESS {
            Ok(())
        } else {
            Err(BackendError::new(
                "cuMemHostRegister_v2",
                self.driver.error_text(rc),
            ))
        }
    }

    unsafe fn unregister(&self, ptr: *mut u8) -> Result<(), BackendError> {
        // SAFETY: the caller passes the start of a range this backend registered.
        let rc = unsafe { self.driver.unregister(ptr as usize, 0) };
        if rc == CUDA_SUCCESS {
            Ok(())
        } else {
            Err(BackendError::new(
                "cuMemHostUnregister",
                self.driver.error_text(rc),
            ))
        }
    }

    fn create_event(&self) -> Result<EventHandle, BackendError> {
        let mut e: CUevent = std::ptr::null_mut();
        // SAFETY: valid out-parameter.
        self.call("cuEventCreate", || unsafe {
            (self.driver.event_create)(&mut e, CU_EVENT_DISABLE_TIMING)
        })?;
        Ok(EventHandle(e as u64))
    }

    fn destroy_event(&self, event: EventHandle) {
        // SAFETY: an event from `create_event`, destroyed once.
        let _ = self.call("cuEventDestroy_v2", || unsafe {
            (self.driver.event_destroy)(event.0 as CUevent)
        });
    }

    fn record_event(&self, event: EventHandle, stream: StreamHandle) -> Result<(), BackendError> {
        // An event recorded in a capture becomes part of the graph, and querying it would
        // invalidate the capture: none is recorded (nor, then, the stream waited for). Asked
        // with a context current, as the call itself.
        self.call("cuEventRecord", || {
            if self.driver.capture_of(stream.0 as usize) != StreamCapture::None {
                return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
            }
            // SAFETY: a live event, and a stream the program copied on.
            unsafe { (self.driver.event_record)(event.0 as CUevent, stream.0 as CUstream) }
        })
    }

    fn event_completed(&self, event: EventHandle) -> Result<bool, BackendError> {
        // SAFETY: a live event.
        let rc = self.driver.with_context(0, || unsafe {
            (self.driver.event_query)(event.0 as CUevent)
        });
        match rc {
            CUDA_SUCCESS => Ok(true),
            CUDA_ERROR_NOT_READY => Ok(false),
            rc => Err(BackendError::new(
                "cuEventQuery",
                self.driver.error_text(rc),
            )),
        }
    }

    fn synchronize_event(&self, event: EventHandle) -> Result<(), BackendError> {
        // SAFETY: a live event.
        self.call("cuEventSynchronize", || unsafe {
            (self.driver.event_synchronize)(event.0 as CUevent)
        })
    }

    fn synchronize_stream(&self, stream: StreamHandle) -> Result<(), BackendError> {
        self.call("cuStreamSynchronize", || {
            if self.driver.capture_of(stream.0 as usize) != StreamCapture::None {
                return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
            }
            // SAFETY: a stream the program copied on.
            unsafe { (self.driver.stream_synchronize)(stream.0 as CUstream) }
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
            // SAFETY: the caller's contract: `src` readable, `dst` device memory.
            None => self.call("cuMemcpyHtoD_v2", || unsafe {
                (self.driver.memcpy_htod)(dst.0, src as *const c_void, len)
            }),
            // SAFETY: as above, until the copy completes.
            Some(s) => self.call("cuMemcpyHtoDAsync_v2", || unsafe {
                (self.driver.memcpy_htod_async)(dst.0, src as *const c_void, len, s.0 as CUstream)
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
            // SAFETY: the caller's contract: `dst` writable, `src` device memory.
            None => self.call("cuMemcpyDtoH_v2", || unsafe {
                (self.driver.memcpy_dtoh)(dst as *mut c_void, src.0, len)
            }),
            // SAFETY: as above, until the copy completes.
            Some(s) => self.call("cuMemcpyDtoHAsync_v2", || unsafe {
                (self.driver.memcpy_dtoh_async)(dst as *mut c_void, src.0, len, s.0 as CUstream)
            }),
        }
    }
}
