//! What the allocator needs from CUDA, behind a small trait.
//!
//! [`PinBackend`] is the allocator's only door to the GPU driver: page-lock memory (allocate
//! it pinned, or register memory that already exists), mark completion points on streams
//! (events), and copy. [`cuda::CudaBackend`] implements it on `pinwise-cuda`; the
//! `testing::MockBackend` (feature `testing`) implements it in plain memory so that pools, the budget
//! and the predictors are tested without any CUDA at all.
//!
//! Handles are plain integers (the driver's pointers and handles) so that the trait is easy
//! to implement and to call from C.

pub mod cuda;

use std::fmt;

/// A device address: pinwise-cuda's one device pointer type (`CUdeviceptr`, a `u64`).
pub use pinwise_cuda::DevicePtr;

/// A stream (`CUstream`); `StreamHandle::DEFAULT` (0) is the legacy default stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamHandle(pub u64);

impl StreamHandle {
    /// The legacy default stream.
    pub const DEFAULT: StreamHandle = StreamHandle(0);
}

/// A completion event (`CUevent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventHandle(pub u64);

/// How a piece of host memory is page-locked (pinwise-core's names, shared with the cost
/// model): `MallocHost` (`cuMemHostAlloc`) or `RegisterTouched` (`cuMemHostRegister`).
pub use pinwise_core::PinMethod;

/// A failure reported by a backend: which operation failed and the driver's own words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{op} failed: {message}")]
pub struct BackendError {
    /// The operation, as the driver names it (`cuMemHostAlloc`, `cuMemHostRegister`, ...).
    pub op: &'static str,
    /// The driver's error name and message (or the stand-in's, or the mock's).
    pub message: String,
}

impl BackendError {
    /// An error of operation `op` with `message`.
    pub fn new(op: &'static str, message: impl fmt::Display) -> Self {
        BackendError {
            op,
            message: message.to_string(),
        }
    }
}

/// The driver operations the allocator uses.
///
/// Implementations must be callable from any thread. None of these is ever called while
/// the allocator holds one of its locks, except [`PinBackend::event_completed`] (a
/// non-blocking query).
pub trait PinBackend: Send + Sync + 'static {
    /// A short description for logs and reports (`"CUDA driver 13.0, NVIDIA H200"`, ...).
    fn describe(&self) -> String;

    /// True when this backend is a test fixture (the CPU stand-in or the mock): nothing
    /// measured on it is a GPU figure.
    fn is_fixture(&self) -> bool;

    /// Allocates `len` bytes of page-locked host memory (`cuMemHostAlloc` with `flags`).
    /// The memory is page-aligned.
    fn alloc_pinned(&self, len: usize, flags: u32) -> Result<*mut u8, BackendError>;

    /// Frees memory from [`PinBackend::alloc_pinned`] (`cuMemFreeHost`).
    ///
    /// # Safety
    /// `ptr` came from `alloc_pinned` of this backend and is not used afterwards.
    unsafe fn free_pinned(&self, ptr: *mut u8) -> Result<(), BackendError>;

    /// Page-locks `len` bytes of existing host memory at `ptr` (`cuMemHostRegister`).
    /// `ptr` and `len` are page-aligned.
    ///
    /// # Safety
    /// `ptr..ptr+len` is mapped memory of this process that stays mapped until
    /// [`PinBackend::unregister`].
    unsafe fn register(&self, ptr: *mut u8, len: usize) -> Result<(), BackendError>;

    /// Unlocks a range registered with [`PinBackend::register`] (`cuMemHostUnregister`).
    ///
    /// # Safety
    /// `ptr` is the start of a range this backend registered.
    unsafe fn unregister(&self, ptr: *mut u8) -> Result<(), BackendError>;

    /// Creates a completion event (timing disabled).
    fn create_event(&self) -> Result<EventHandle, BackendError>;

    /// Destroys an event from [`PinBackend::create_event`].
    fn destroy_event(&self, event: EventHandle);

    /// Records `event` on `stream`: it completes when the work queued before it has.
    fn record_event(&self, event: EventHandle, stream: StreamHandle) -> Result<(), BackendError>;

    /// Whether the work before `event`'s last record has completed (non-blocking).
    fn event_completed(&self, event: EventHandle) -> Result<bool, BackendError>;

    /// Waits until the work before `event`'s last record has completed.
    fn synchronize_event(&self, event: EventHandle) -> Result<(), BackendError>;

    /// Waits until all work queued on `stream` has completed.
    fn synchronize_stream(&self, stream: StreamHandle) -> Result<(), BackendError>;

    /// Copies `len` bytes from host `src` to device `dst`; synchronously when `stream` is
    /// `None`, else queued on `stream`.
    ///
    /// # Safety
    /// `src..src+len` is readable (until the copy completes, for an async copy), and
    /// `dst..dst+len` is device memory of the current context.
    unsafe fn copy_htod(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
        stream: Option<StreamHandle>,
    ) -> Result<(), BackendError>;

    /// Copies `len` bytes from device `src` to host `dst`; synchronously when `stream` is
    /// `None`, else queued on `stream`.
    ///
    /// # Safety
    /// `dst..dst+len` is writable (until the copy completes, for an async copy), and
    /// `src..src+len` is device memory of the current context.
    unsafe fn copy_dtoh(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        len: usize,
        stream: Option<StreamHandle>,
    ) -> Result<(), BackendError>;
}
