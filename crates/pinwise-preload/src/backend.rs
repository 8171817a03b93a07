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

/// Where a driver function is found: the real function behind a hooked variant (never
/// pinwise's own wrapper), the symbol of the field's own name, or another name of the same
/// signature (an older version).
enum Source {
    Hooked(Hooked),
    Own,
    Named(&'static CStr),
}

/// The first of `sources` libcuda has, as the function type `F` (`pfn::own`).
fn resolve<F: Copy>(own: &'static CStr, sources: &[Source]) -> Result<F, String> {
    let found = sources.iter().find_map(|s| match s {
        Source::Hooked(h) => real::real(*h),
        Source::Own => real::driver_fn(own),
        Source::Named(name) => real::driver_fn(name),
    });
    let a = found.ok_or_else(|| format!("libcuda has no {}", own.to_string_lossy()))?;
    // SAFETY: `a` is libcuda's function of that name or an alternative of the same C
    // signature, which is `F` (the caller passes `pfn::<own>`, declared from cuda.h).
    Ok(unsafe { std::mem::transmute_copy::<usize, F>(&a) })
}

/// The C string of a symbol name.
macro_rules! cname {
    ($sym:ident) => {
        match CStr::from_bytes_with_nul(concat!(stringify!($sym), "\0").as_bytes()) {
            Ok(c) => c,
            Err(_) => panic!("a symbol name has no NUL inside"),
        }
    };
}

/// The preload's driver table, generated from one list: each line is a field, the driver
/// symbol whose `pinwise_cuda::sys::pfn` type it has, and where it is found (required
/// functions: the first source libcuda has, else `DriverTable::load` fails; optional ones:
/// `None` when absent). `extra` fields are not driver functions.
macro_rules! driver_table {
    (
        required { $( $(#[$m:meta])* $vis:vis $field:ident: $sym:ident = [$($src:expr),+ $(,)?]; )* }
        optional { $( $(#[$om:meta])* $ofield:ident: $osym:ident; )* }
        extra { $( $(#[$em:meta])* $evis:vis $efield:ident: $ety:ty = $einit:expr; )* }
    ) => {
        /// The driver functions pinwise calls, resolved once from the loaded libcuda with
        /// its own resolver ([`resolve`]: the real functions behind pinwise's hooks, never
        /// the hooks). The signatures are `pinwise_cuda::sys::pfn`'s.
        pub struct DriverTable {
            $( $(#[$m])* #[doc = concat!("`", stringify!($sym), "`.")] $vis $field: pfn::$sym, )*
            $( $(#[$om])* #[doc = concat!("`", stringify!($osym), "`, if this driver has it.")] $ofield: Option<pfn::$osym>, )*
            $( $(#[$em])* $evis $efield: $ety, )*
        }

        impl DriverTable {
            /// Resolves the functions from the loaded libcuda; `Err` names what is missing
            /// (no libcuda loaded, or an old one).
            pub fn load() -> Result<DriverTable, String> {
                let _inside = Inside::enter();
                real::libcuda_handle().ok_or("libcuda.so.1 is not loaded")?;
                Ok(DriverTable {
                    $( $field: resolve::<pfn::$sym>(cname!($sym), &[$($src),+])?, )*
                    $( $ofield: resolve::<pfn::$osym>(cname!($osym), &[Source::Own]).ok(), )*
                    $( $efield: $einit, )*
                })
            }
        }
    };
}

driver_table! {
    required {
        pub mem_host_alloc: cuMemHostAlloc = [Source::Hooked(Hooked::MemHostAlloc)];
        pub mem_free_host: cuMemFreeHost = [Source::Hooked(Hooked::MemFreeHost)];
        pub mem_host_register: cuMemHostRegister_v2 = [
            Source::Hooked(Hooked::MemHostRegisterV2),
            Source::Hooked(Hooked::MemHostRegister),
        ];
        pub mem_host_unregister: cuMemHostUnregister = [Source::Hooked(Hooked::MemHostUnregister)];
        pub pointer_get_attribute: cuPointerGetAttribute = [Source::Hooked(Hooked::PointerGetAttribute)];
        pub memcpy_htod: cuMemcpyHtoD_v2 = [Source::Hooked(Hooked::MemcpyHtoD)];
        pub memcpy_dtoh: cuMemcpyDtoH_v2 = [Source::Hooked(Hooked::MemcpyDtoH)];
        pub memcpy_htod_async: cuMemcpyHtoDAsync_v2 = [Source::Hooked(Hooked::MemcpyHtoDAsync)];
        pub memcpy_dtoh_async: cuMemcpyDtoHAsync_v2 = [Source::Hooked(Hooked::MemcpyDtoHAsync)];
        event_create: cuEventCreate = [Source::Own];
        event_destroy: cuEventDestroy_v2 = [Source::Own, Source::Named(c"cuEventDestroy")];
        event_record: cuEventRecord = [Source::Own];
        event_query: cuEventQuery = [Source::Own];
        event_synchronize: cuEventSynchronize = [Source::Own];
        stream_synchronize: cuStreamSynchronize = [Source::Own];
        ctx_get_current: cuCtxGetCurrent = [Source::Own];
        ctx_set_current: cuCtxSetCurrent = [Source::Own];
    }
    optional {
        /// Absent from old drivers and the stand-in: `cuCtxSetCurrent` then does (with
        /// `ctx_pop`: used only as a pair).
        ctx_push: cuCtxPushCurrent_v2;
        /// See `ctx_push`.
        ctx_pop: cuCtxPopCurrent_v2;
        get_error_name: cuGetErrorName;
        /// CUDA 10.0; absent: no stream is taken to be capturing.
        stream_is_capturing: cuStreamIsCapturing;
        /// CUDA 10.1; absent: calls run in the thread's own mode.
        exchange_capture_mode: cuThreadExchangeStreamCaptureMode;
    }
    extra {
        /// Whether the libcuda is pinwise's CPU stand-in (a TEST FIXTURE).
        pub standin: bool = real::libcuda_is_standin();
        /// The first non-null context pinwise saw current (used where none is).
        saved_context: AtomicUsize = AtomicUsize::new(0);
    }
}

impl DriverTable {
    /// `cuCtxPushCurrent_v2` and `cuCtxPopCurrent_v2`, when the driver has both.
    fn ctx_push_pop(&self) -> Option<(pfn::cuCtxPushCurrent_v2, pfn::cuCtxPopCurrent_v2)> {
        self.ctx_push.zip(self.ctx_pop)
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
        match self.ctx_push_pop() {
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
