//! The primary context of a device: retained while any clone lives, made current on the
//! threads that use it.

use std::sync::Arc;

use crate::device::Device;
use crate::driver::Driver;
use crate::error::Result;
use crate::sys::*;

/// A retained primary context. Cheap to clone; released when the last clone is dropped.
///
/// Like cudart, the safe types of this crate make their context current on the calling
/// thread when it is not ([`Context::ensure_current`]), so they can be used from any thread.
#[derive(Debug, Clone)]
pub struct Context {
    inner: Arc<Retained>,
}

#[derive(Debug)]
struct Retained {
    device: Device,
    /// The `CUcontext` handle, kept as an integer (handles are usable from any thread).
    handle: usize,
}

impl Drop for Retained {
    fn drop(&mut self) {
        let driver = self.device.driver();
        // SAFETY: releases the retain taken in `retain_primary`.
        let rc = unsafe { (driver.api().cuDevicePrimaryCtxRelease_v2)(self.device.ordinal()) };
        if let Err(e) = driver.check("cuDevicePrimaryCtxRelease_v2", rc) {
            tracing::warn!("releasing the primary context: {e}");
        }
    }
}

/// Free and total device memory (`cuMemGetInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemInfo {
    /// Bytes free.
    pub free: usize,
    /// Bytes in total.
    pub total: usize,
}

impl Context {
    /// `cuDevicePrimaryCtxRetain`.
    pub(crate) fn retain_primary(device: &Device) -> Result<Context> {
        let driver = device.driver();
        let mut handle: CUcontext = std::ptr::null_mut();
        // SAFETY: valid out-parameter.
        driver.check("cuDevicePrimaryCtxRetain", unsafe {
            (driver.api().cuDevicePrimaryCtxRetain)(&mut handle, device.ordinal())
        })?;
        Ok(Context {
            inner: Arc::new(Retained {
                device: device.clone(),
                handle: handle as usize,
            }),
        })
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.inner.device
    }

    /// The driver.
    pub fn driver(&self) -> &Arc<Driver> {
        self.inner.device.driver()
    }

    /// The raw `CUcontext`.
    pub fn handle(&self) -> CUcontext {
        self.inner.handle as CUcontext
    }

    /// `cuCtxSetCurrent`: makes this context current on the calling thread.
    pub fn make_current(&self) -> Result<()> {
        let driver = self.driver();
        // SAFETY: a live context handle (retained by `self`).
        driver.check("cuCtxSetCurrent", unsafe {
            (driver.api().cuCtxSetCurrent)(self.handle())
        })
    }

    /// Makes this context current on the calling thread unless it already is.
    pub fn ensure_current(&self) -> Result<()> {
        let driver = self.driver();
        let mut current: CUcontext = std::ptr::null_mut();
        // SAFETY: valid out-parameter.
        driver.check("cuCtxGetCurrent", unsafe {
            (driver.api().cuCtxGetCurrent)(&mut current)
        })?;
        if current as usize == self.inner.handle {
            Ok(())
        } else {
            self.make_current()
        }
    }

    /// `cuCtxSynchronize`: waits for all work of the context.
    pub fn synchronize(&self) -> Result<()> {
        self.ensure_current()?;
        let driver = self.driver();
        // SAFETY: no arguments; context current.
        driver.check("cuCtxSynchronize", unsafe {
            (driver.api().cuCtxSynchronize)()
        })
    }

    /// `cuMemGetInfo_v2`.
    pub fn mem_info(&self) -> Result<MemInfo> {
        self.ensure_current()?;
        let driver = self.driver();
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-parameters; context current.
        driver.check("cuMemGetInfo_v2", unsafe {
            (driver.api().cuMemGetInfo_v2)(&mut free, &mut total)
        })?;
        Ok(MemInfo { free, total })
    }
}
