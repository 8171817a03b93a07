//! Device buffers, pinned host regions, host registrations, pointer queries.

use std::ffi::{c_uint, c_void};
use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::context::Context;
use crate::error::{CudaError, Result};
use crate::sys::*;

/// A device address (`CUdeviceptr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct DevicePtr(pub CUdeviceptr);

impl DevicePtr {
    /// The address `bytes` further on.
    pub fn offset(self, bytes: usize) -> DevicePtr {
        DevicePtr(self.0 + bytes as u64)
    }
}

/// What kind of memory an address is, by `cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_MEMORY_TYPE)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemoryType {
    /// Page-locked host memory CUDA knows (allocated pinned or registered).
    Host,
    /// Device memory.
    Device,
    /// A CUDA array.
    Array,
    /// Unified (managed) memory.
    Unified,
}

impl MemoryType {
    fn from_raw(raw: CUmemorytype) -> Option<MemoryType> {
        match raw {
            CU_MEMORYTYPE_HOST => Some(MemoryType::Host),
            CU_MEMORYTYPE_DEVICE => Some(MemoryType::Device),
            CU_MEMORYTYPE_ARRAY => Some(MemoryType::Array),
            CU_MEMORYTYPE_UNIFIED => Some(MemoryType::Unified),
            _ => None,
        }
    }
}

impl Context {
    /// `cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_MEMORY_TYPE)`. `Ok(None)` for memory CUDA
    /// does not know (plain pageable memory: the driver answers `CUDA_ERROR_INVALID_VALUE`).
    pub fn memory_type(&self, address: u64) -> Result<Option<MemoryType>> {
        let driver = self.driver();
        let mut raw: CUmemorytype = 0;
        // SAFETY: `raw` is the documented `CUmemorytype` out-parameter of this attribute.
        let rc = unsafe {
            (driver.api().cuPointerGetAttribute)(
                &mut raw as *mut CUmemorytype as *mut c_void,
                CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                address,
            )
        };
        if rc == CUDA_ERROR_INVALID_VALUE {
            return Ok(None);
        }
        driver.check("cuPointerGetAttribute", rc)?;
        Ok(MemoryType::from_raw(raw))
    }
}

/// Device memory from `cuMemAlloc_v2`, freed on drop.
#[derive(Debug)]
pub struct DeviceBuffer {
    ctx: Context,
    ptr: DevicePtr,
    len: usize,
}

impl DeviceBuffer {
    /// `cuMemAlloc_v2` of `len` bytes.
    pub fn new(ctx: &Context, len: usize) -> Result<DeviceBuffer> {
        ctx.ensure_current()?;
        let driver = ctx.driver();
        let mut ptr: CUdeviceptr = 0;
        // SAFETY: valid out-parameter; context current.
        driver.check("cuMemAlloc_v2", unsafe {
            (driver.api().cuMemAlloc_v2)(&mut ptr, len)
        })?;
        Ok(DeviceBuffer {
            ctx: ctx.clone(),
            ptr: DevicePtr(ptr),
            len,
        })
    }

    /// The device address.
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn fits(&self, call: &'static str, len: usize) -> Result<()> {
        if len > self.len {
            return Err(CudaError::InvalidArgument {
                call,
                reason: format!("{len} bytes do not fit a device buffer of {}", self.len),
            });
        }
        Ok(())
    }

    /// Copies `src` to the start of the buffer (`cuMemcpyHtoD_v2`).
    pub fn copy_from_host(&self, src: &[u8]) -> Result<()> {
        self.fits("cuMemcpyHtoD_v2", src.len())?;
        // SAFETY: `fits` checked that the range lies inside this buffer's own allocation,
        // which only this buffer's methods reach (device memory: no Rust reference aliases it).
        unsafe { self.ctx.copy_htod(self.ptr, src) }
    }

    /// Copies the start of the buffer into `dst` (`cuMemcpyDtoH_v2`).
    pub fn copy_to_host(&self, dst: &mut [u8]) -> Result<()> {
        self.fits("cuMemcpyDtoH_v2", dst.len())?;
        // SAFETY: `fits` checked that the range lies inside this buffer's own allocation.
        unsafe { self.ctx.copy_dtoh(dst, self.ptr) }
    }

    /// Copies all of `src` to the start of this buffer (`cuMemcpyDtoD_v2`).
    pub fn copy_from_device(&self, src: &DeviceBuffer) -> Result<()> {
        self.fits("cuMemcpyDtoD_v2", src.len)?;
        // SAFETY: `fits` checked that the destination range lies inside this buffer; the
        // source is all of `src`'s own allocation. Both are reached only through these
        // buffers' methods.
        unsafe { self.ctx.copy_dtod(self.ptr, src.ptr, src.len) }
    }

    /// Sets every byte to `value` (`cuMemsetD8_v2`).
    pub fn fill(&self, value: u8) -> Result<()> {
        // SAFETY: exactly this buffer's own allocation.
        unsafe { self.ctx.memset_d8(self.ptr, value, self.len) }
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        let driver = self.ctx.driver().clone();
        let result = self.ctx.ensure_current().and_then(|_| {
            // SAFETY: allocated by `new`, freed once.
            driver.check("cuMemFree_v2", unsafe {
                (driver.api().cuMemFree_v2)(self.ptr.0)
            })
        });
        if let Err(e) = result {
            tracing::warn!("freeing device memory: {e}");
        }
    }
}

/// How a pinned region was allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinnedAllocator {
    /// `cuMemHostAlloc` with flags.
    HostAlloc,
    /// `cuMemAllocHost_v2`.
    AllocHost,
}

/// Page-locked host memory allocated by CUDA, freed (`cuMemFreeHost`) on drop.
#[derive(Debug)]
pub struct PinnedHostRegion {
    ctx: Context,
    ptr: NonNull<u8>,
    len: usize,
    flags: c_uint,
    allocator: PinnedAllocator,
}

// SAFETY: the region owns its memory like a `Box<[u8]>`; CUDA lets any thread use or free it.
unsafe impl Send for PinnedHostRegion {}
// SAFETY: shared access only reads (`as_slice`); writing needs `&mut self`.
unsafe impl Sync for PinnedHostRegion {}

impl PinnedHostRegion {
    /// `cuMemHostAlloc` of `len` bytes with `CU_MEMHOSTALLOC_*` flags.
    pub fn new(ctx: &Context, len: usize, flags: c_uint) -> Result<PinnedHostRegion> {
        Self::refuse_empty("cuMemHostAlloc", len)?;
        ctx.ensure_current()?;
        let driver = ctx.driver();
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-parameter; context current.
        driver.check("cuMemHostAlloc", unsafe {
            (driver.api().cuMemHostAlloc)(&mut p, len, flags)
        })?;
        Self::wrap(
            ctx,
            p,
            len,
            flags,
            PinnedAllocator::HostAlloc,
            "cuMemHostAlloc",
        )
    }

    /// `cuMemAllocHost_v2` of `len` bytes.
    pub fn alloc_host(ctx: &Context, len: usize) -> Result<PinnedHostRegion> {
        Self::refuse_empty("cuMemAllocHost_v2", len)?;
        ctx.ensure_current()?;
        let driver = ctx.driver();
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-parameter; context current.
        driver.check("cuMemAllocHost_v2", unsafe {
            (driver.api().cuMemAllocHost_v2)(&mut p, len)
        })?;
        Self::wrap(
            ctx,
            p,
            len,
            0,
            PinnedAllocator::AllocHost,
            "cuMemAllocHost_v2",
        )
    }

    /// The driver answers a 0-byte request with success and no memory (seen on an H200,
    /// driver 580.159.04: `bench/results/gpu-cuda-smoke.md`); a region needs at least a byte.
    fn refuse_empty(call: &'static str, len: usize) -> Result<()> {
        if len == 0 {
            return Err(CudaError::InvalidArgument {
                call,
                reason: "a pinned region of 0 bytes".to_string(),
            });
        }
        Ok(())
    }

    fn wrap(
        ctx: &Context,
        p: *mut c_void,
        len: usize,
        flags: c_uint,
        allocator: PinnedAllocator,
        call: &'static str,
    ) -> Result<PinnedHostRegion> {
        let ptr = NonNull::new(p as *mut u8).ok_or_else(|| CudaError::InvalidArgument {
            call,
            reason: "the driver reported success but returned NULL".to_string(),
        })?;
        Ok(PinnedHostRegion {
            ctx: ctx.clone(),
            ptr,
            len,
            flags,
            allocator,
        })
    }

    /// First byte.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// First byte, for writing (e.g. as the destination of an async copy).
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The flags it was allocated with.
    pub fn flags(&self) -> c_uint {
        self.flags
    }

    /// Which CUDA call allocated it.
    pub fn allocator(&self) -> PinnedAllocator {
        self.allocator
    }

    /// The bytes. (An async copy in flight may still be writing them: synchronize first.)
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: CUDA allocated `len` bytes at `ptr`, valid until drop.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// `cuMemHostGetDevicePointer_v2`: where the device sees this memory. Writing through it
    /// (a device-side copy) changes the region's bytes.
    pub fn device_pointer(&self) -> Result<DevicePtr> {
        self.ctx.ensure_current()?;
        let driver = self.ctx.driver();
        let mut d: CUdeviceptr = 0;
        // SAFETY: valid out-parameter and a live pinned pointer; context current.
        driver.check("cuMemHostGetDevicePointer_v2", unsafe {
            (driver.api().cuMemHostGetDevicePointer_v2)(&mut d, self.as_mut_ptr() as *mut c_void, 0)
        })?;
        Ok(DevicePtr(d))
    }

    /// `cuMemHostGetFlags`.
    pub fn driver_flags(&self) -> Result<c_uint> {
        self.ctx.ensure_current()?;
        let driver = self.ctx.driver();
        let mut flags: c_uint = 0;
        // SAFETY: valid out-parameter and a live pinned pointer; context current.
        driver.check("cuMemHostGetFlags", unsafe {
            (driver.api().cuMemHostGetFlags)(&mut flags, self.as_mut_ptr() as *mut c_void)
        })?;
        Ok(flags)
    }
}

impl Drop for PinnedHostRegion {
    fn drop(&mut self) {
        let driver = self.ctx.driver().clone();
        let result = self.ctx.ensure_current().and_then(|_| {
            // SAFETY: allocated by CUDA in `new`/`alloc_host`, freed once.
            driver.check("cuMemFreeHost", unsafe {
                (driver.api().cuMemFreeHost)(self.ptr.as_ptr() as *mut c_void)
            })
        });
        if let Err(e) = result {
            tracing::warn!("freeing pinned host memory: {e}");
        }
    }
}

/// Caller memory page-locked with `cuMemHostRegister_v2`, unregistered on drop (or by
/// [`HostRegistration::unregister`], which reports errors).
#[derive(Debug)]
pub struct HostRegistration<'a> {
    ctx: Context,
    ptr: NonNull<u8>,
    len: usize,
    flags: c_uint,
    registered: bool,
    _memory: PhantomData<&'a mut [u8]>,
}

// SAFETY: behaves like the `&mut [u8]` it holds, which is Send.
unsafe impl Send for HostRegistration<'_> {}
// SAFETY: shared access only reads (`as_slice`), like `&[u8]`.
unsafe impl Sync for HostRegistration<'_> {}

impl<'a> HostRegistration<'a> {
    /// Registers `memory` with `CU_MEMHOSTREGISTER_*` flags. The memory stays borrowed (and
    /// reachable through [`HostRegistration::as_mut_slice`]) until the registration ends.
    pub fn new(ctx: &Context, memory: &'a mut [u8], flags: c_uint) -> Result<HostRegistration<'a>> {
        let ptr = NonNull::from(&mut *memory).cast::<u8>();
        // SAFETY: the memory is borrowed mutably for 'a, which outlives the registration.
        unsafe { Self::register(ctx, ptr, memory.len(), flags) }
    }

    /// Registers memory the caller manages itself (an allocator's mapping, for instance).
    ///
    /// # Safety
    /// `[ptr, ptr + len)` must stay mapped until the registration ends, and the caller must
    /// not create references to it that conflict with [`HostRegistration::as_slice`] /
    /// [`HostRegistration::as_mut_slice`] if it uses them.
    pub unsafe fn from_raw(
        ctx: &Context,
        ptr: NonNull<u8>,
        len: usize,
        flags: c_uint,
    ) -> Result<HostRegistration<'static>> {
        // SAFETY: forwarded caller contract.
        unsafe { HostRegistration::register(ctx, ptr, len, flags) }
    }

    /// # Safety
    /// As [`HostRegistration::from_raw`].
    unsafe fn register<'b>(
        ctx: &Context,
        ptr: NonNull<u8>,
        len: usize,
        flags: c_uint,
    ) -> Result<HostRegistration<'b>> {
        ctx.ensure_current()?;
        let driver = ctx.driver();
        // SAFETY: the range stays valid while registered (caller contract); context current.
        driver.check("cuMemHostRegister_v2", unsafe {
            (driver.api().cuMemHostRegister_v2)(ptr.as_ptr() as *mut c_void, len, flags)
        })?;
        Ok(HostRegistration {
            ctx: ctx.clone(),
            ptr,
            len,
            flags,
            registered: true,
            _memory: PhantomData,
        })
    }

    /// First byte.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// First byte, for writing (e.g. as the destination of an async copy).
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the registration covers no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The flags it was registered with.
    pub fn flags(&self) -> c_uint {
        self.flags
    }

    /// The registered bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the range is valid for 'a (or by `from_raw`'s contract).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The registered bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Ends the registration now (`cuMemHostUnregister`), reporting failure.
    pub fn unregister(mut self) -> Result<()> {
        self.unregister_now()
    }

    fn unregister_now(&mut self) -> Result<()> {
        if !std::mem::replace(&mut self.registered, false) {
            return Ok(());
        }
        self.ctx.ensure_current()?;
        let driver = self.ctx.driver();
        // SAFETY: registered by `register`, unregistered once.
        driver.check("cuMemHostUnregister", unsafe {
            (driver.api().cuMemHostUnregister)(self.ptr.as_ptr() as *mut c_void)
        })
    }
}

impl Drop for HostRegistration<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.unregister_now() {
            tracing::warn!("unregistering host memory: {e}");
        }
    }
}
