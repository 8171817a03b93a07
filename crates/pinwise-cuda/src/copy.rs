//! Copies between host and device, synchronous and asynchronous.
//!
//! The synchronous forms borrow Rust slices for the duration of the call and are safe. The
//! asynchronous forms return before the copy happens, so the host memory must stay valid
//! (and, for host-to-device copies, unchanged) until the stream reaches the copy: they are
//! `unsafe` and take raw pointers.

use std::ffi::c_void;

use crate::context::Context;
use crate::error::Result;
use crate::memory::DevicePtr;
use crate::stream::Stream;
use crate::sys::*;

impl Context {
    /// `cuMemcpyHtoD_v2`: copies `src` to `dst`.
    pub fn copy_htod(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        self.ensure_current()?;
        let driver = self.driver();
        // SAFETY: `src` is valid for its length during this synchronous call; the driver
        // checks `dst`.
        driver.check("cuMemcpyHtoD_v2", unsafe {
            (driver.api().cuMemcpyHtoD_v2)(dst.0, src.as_ptr() as *const c_void, src.len())
        })
    }

    /// `cuMemcpyDtoH_v2`: fills `dst` from `src`.
    pub fn copy_dtoh(&self, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        self.ensure_current()?;
        let driver = self.driver();
        // SAFETY: `dst` is valid and exclusively borrowed during this synchronous call.
        driver.check("cuMemcpyDtoH_v2", unsafe {
            (driver.api().cuMemcpyDtoH_v2)(dst.as_mut_ptr() as *mut c_void, src.0, dst.len())
        })
    }

    /// `cuMemcpyDtoD_v2`.
    pub fn copy_dtod(&self, dst: DevicePtr, src: DevicePtr, len: usize) -> Result<()> {
        self.ensure_current()?;
        let driver = self.driver();
        // SAFETY: device addresses only; the driver checks them.
        driver.check("cuMemcpyDtoD_v2", unsafe {
            (driver.api().cuMemcpyDtoD_v2)(dst.0, src.0, len)
        })
    }

    /// `cuMemsetD8_v2`.
    pub fn memset_d8(&self, dst: DevicePtr, value: u8, len: usize) -> Result<()> {
        self.ensure_current()?;
        let driver = self.driver();
        // SAFETY: a device address; the driver checks it.
        driver.check("cuMemsetD8_v2", unsafe {
            (driver.api().cuMemsetD8_v2)(dst.0, value, len)
        })
    }

    /// `cuMemcpy`: a copy between any two addresses (unified addressing decides which side
    /// is host or device).
    ///
    /// # Safety
    /// Host addresses among `dst`/`src` must be valid for `len` bytes (and `dst` writable and
    /// not otherwise borrowed) during the call.
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
    /// `[src, src + len)` must stay valid and unchanged until the stream reaches the copy.
    pub unsafe fn copy_htod_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
        stream: &Stream,
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
    /// stream reaches the copy.
    pub unsafe fn copy_dtoh_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        len: usize,
        stream: &Stream,
    ) -> Result<()> {
        self.ensure_current()?;
        let driver = self.driver();
        // SAFETY: caller contract.
        driver.check("cuMemcpyDtoHAsync_v2", unsafe {
            (driver.api().cuMemcpyDtoHAsync_v2)(dst as *mut c_void, src.0, len, stream.handle())
        })
    }

    /// `cuMemcpyDtoDAsync_v2` on `stream`.
    pub fn copy_dtod_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        len: usize,
        stream: &Stream,
    ) -> Result<()> {
        self.ensure_current()?;
        let driver = self.driver();
        // SAFETY: device addresses only; the driver checks them.
        driver.check("cuMemcpyDtoDAsync_v2", unsafe {
            (driver.api().cuMemcpyDtoDAsync_v2)(dst.0, src.0, len, stream.handle())
        })
    }

    /// `cuMemcpyAsync` on `stream` (unified addressing).
    ///
    /// # Safety
    /// Host memory among `dst`/`src` must stay valid (and untouched by others) until the
    /// stream reaches the copy.
    pub unsafe fn copy_async(&self, dst: u64, src: u64, len: usize, stream: &Stream) -> Result<()> {
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
    /// during the call.
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
