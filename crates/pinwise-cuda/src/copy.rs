//! Copies between host and device, synchronous and asynchronous.
//!
//! Every form here takes raw device addresses ([`DevicePtr`]), which any caller can make up,
//! so every form is `unsafe`: the caller promises that the device range is memory it owns
//! (a [`DeviceBuffer`](crate::DeviceBuffer) it holds, say), not memory another allocation,
//! library or thread relies on. [`DeviceBuffer`](crate::DeviceBuffer)'s methods are the safe,
//! range-checked forms. The synchronous forms borrow Rust slices for the host side; the
//! asynchronous forms return before the copy happens, so the host memory must stay valid
//! (and, for host-to-device copies, unchanged) until the stream reaches the copy: they take
//! raw pointers.

use std::ffi::c_void;

use crate::context::Context;
use crate::error::Result;
use crate::memory::DevicePtr;
use crate::stream::AsStream;
use crate::sys::*;

impl Context {
    /// `cuMemcpyHtoD_v2`: copies `src` to `dst`.
    ///
    /// # Safety
    /// `[dst, dst + src.len())` must be device memory the caller owns, which nobody else
    /// reads or writes during the call (under unified addressing, a host address here is
    /// written too: it must not be memory that Rust references or other code use).
    pub unsafe fn copy_htod(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        self.ensure_current()?;
        let driver = self.driver();
        // SAFETY: `src` is valid for its length during this synchronous call; `dst` is the
        // caller's (contract above).
        driver.check("cuMemcpyHtoD_v2", unsafe {
            (driver.api().cuMemcpyHtoD_v2)(dst.0, src.as_ptr() as *const c_void, src.len())
        })
    }

    /// `cuMemcpyDtoH_v2`: fills `dst` from `src`.
    ///
    /// # Safety
    /// `[src, src + dst.len())` must be device memory the caller may read, which nobody
    /// writes during the call (under unified addressing, a host address here must not be
    /// memory that others write meanwhile).
    pub unsafe fn copy_dtoh(&self, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        self.ensure_current()?;
        let driver = self.driver();
        // SAFETY: `dst` is valid and exclusively borrowed during this synchronous call;
        // `src` is readable (contract above).
        driver.check("cuMemcpyDtoH_v2", unsafe {
            (driver.api().cuMemcpyDtoH_v2)(dst.as_mut_ptr() as *mut c_void, src.0, dst.len())
        })
    }

    /// `cuMemcpyDtoD_v2`: copies `len` bytes from `src` to `dst`.
    /// [`DeviceBuffer::copy_from_device`](crate::DeviceBuffer::copy_from_device) is the safe
    /// form.
    ///
    /// # Safety
    /// `[dst, dst + len)` must be device memory the caller owns, which nobody else reads or
    /// writes during the call; `[src, src + len)` must be device memory the caller may read,
    /// which nobody writes during the call.
    pub unsafe fn copy_dtod(&self, dst: DevicePtr, src: DevicePtr, len: usize) -> Result<()> {
        self.ensure_current()?;
        let driver = self.driver();
        // SAFETY: both ranges are the caller's to use (contract above).
        driver.check("cuMemcpyDtoD_v2", unsafe {
            (driver.api().cuMemcpyDtoD_v2)(dst.0, src.0, len)
        })
    }

    /// `cuMemsetD8_v2`: sets `len` bytes from `dst` to `value`.
    /// [`DeviceBuffer::fill`](crate::DeviceBuffer::fill) is the safe form.
    ///
    /// # Safety
    /// `[dst, dst + len)` must be device memory the caller owns, which nobody else reads or
    /// writes during the call.
    pub unsafe fn memset_d8(&self, dst: DevicePtr, value: u8, len: usize) -> Result<()> {
        self.ensure_current()?;
        let driver = self.driver();
        // SAFETY: the range is the caller's to write (contract above).
        driver.check("cuMemsetD8_v2", unsafe {
            (driver.api().cuMemsetD8_v2)(dst.0, value, len)
        })
    }

    /// `cuMemcpy`: a copy between any two addresses (unified addressing decides which side
    /// is host or device).
    ///
    /// # Safety
    /// Host addresses among `dst`/`src` must be valid for `len` bytes (and `dst` writable and
    /// not otherwise borrowed) during the call; device ranges as in [`Context::copy_dtod`].
    pub unsafe fn copy(&self, dst: u64, src: u64, len: usize) -> Result<()> {
        self.ensure_current()?;
        let driver = self.driver();
        // SAFETY: caller contract.
        driver.check("cuMemcpy", unsafe {
            (driver.api().cuMemcpy)(dst, src, len)
        })
    }

    /// `cuMemcpyHtoDAsync_v2` on `stream`.
    ///
    /// # Safety
    /// `[src, src + len)` must stay valid and unchanged until the stream reaches the copy;
    /// `[dst, dst + len)` must be device memory the caller owns, which nobody else uses
    /// until then.
    pub unsafe fn copy_htod_async<S: AsStream + ?Sized>(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
        stream: &S,
    ) -> Result<()> {
        self.ensure_current()?;
        let driver = self.driver();
        // SAFETY: caller contract.
        driver.check("cuMemcpyHtoDAsync_v2", unsafe {
            (driver.api().cuMemcpyHtoDAsync_v2)(dst.0, src as *const c_void, len, stream.handle())
        })
    }

    /// `cuMemcpyDtoHAsync_v2` on `stream`.
    ///
    /// # Safety
    /// `[dst, dst + len)` must stay valid, and not be read or written by anyone else, until the
    /// stream reaches the copy; `[src, src + len)` must be device memory the caller may read,
    /// which nobody writes until then.
    pub unsafe fn copy_dtoh_async<S: AsStream + ?Sized>(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        len: usize,
        stream: &S,
    ) -> Result<()> {
        self.ensure_current()?;
        let driver = self.driver();
        // SAFETY: caller contract.
        driver.check("cuMemcpyDtoHAsync_v2", unsafe {
            (driver.api().cuMemcpyDtoHAsync_v2)(dst as *mut c_void, src.0, len, stream.handle())
        })
    }

    /// `cuMemcpyDtoDAsync_v2` on `stream`.
    ///
    /// # Safety
    /// As [`Context::copy_dtod`], until the stream reaches the copy (not only during the
    /// call).
    pub unsafe fn copy_dtod_async<S: AsStream + ?Sized>(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        len: usize,
        stream: &S,
    ) -> Result<()> {
        self.ensure_current()?;
        let driver = self.driver();
        // SAFETY: both ranges are the caller's to use until the stream reaches the copy
        // (contract above).
        driver.check("cuMemcpyDtoDAsync_v2", unsafe {
            (driver.api().cuMemcpyDtoDAsync_v2)(dst.0, src.0, len, stream.handle())
        })
    }

    /// `cuMemcpyAsync` on `stream` (unified addressing).
    ///
    /// # Safety
    /// Host memory among `dst`/`src` must stay valid (and untouched by others) until the
    /// stream reaches the copy; device ranges as in [`Context::copy_dtod`], until then too.
    pub unsafe fn copy_async<S: AsStream + ?Sized>(
        &self,
        dst: u64,
        src: u64,
        len: usize,
        stream: &S,
    ) -> Result<()> {
        self.ensure_current()?;
        let driver = self.driver();
        // SAFETY: caller contract.
        driver.check("cuMemcpyAsync", unsafe {
            (driver.api().cuMemcpyAsync)(dst, src, len, stream.handle())
        })
    }

    /// `cuMemcpy2D_v2` with a caller-built descriptor.
    ///
    /// # Safety
    /// Every host range the descriptor names must be valid (and writable for the destination)
    /// during the call; device ranges as in [`Context::copy_dtod`].
    pub unsafe fn copy_2d(&self, copy: &CUDA_MEMCPY2D) -> Result<()> {
        self.ensure_current()?;
        let driver = self.driver();
        // SAFETY: caller contract; the descriptor outlives the call.
        driver.check("cuMemcpy2D_v2", unsafe {
            (driver.api().cuMemcpy2D_v2)(copy)
        })
    }

    /// `cuMemcpy3D_v2` with a caller-built descriptor.
    ///
    /// # Safety
    /// As [`Context::copy_2d`].
    pub unsafe fn copy_3d(&self, copy: &CUDA_MEMCPY3D) -> Result<()> {
        self.ensure_current()?;
        let driver = self.driver();
        // SAFETY: caller contract; the descriptor outlives the call.
        driver.check("cuMemcpy3D_v2", unsafe {
            (driver.api().cuMemcpy3D_v2)(copy)
        })
    }
}
