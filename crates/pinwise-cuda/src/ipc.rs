//! CUDA IPC: a device allocation's handle (`cuIpcGetMemHandle`) that another process opens
//! (`cuIpcOpenMemHandle_v2`) to copy into or out of it, and allocation ranges
//! (`cuMemGetAddressRange_v2`). These entry points are optional in [`crate::DriverApi`]: a
//! driver without them answers [`CudaError::MissingSymbol`] here.

use crate::context::Context;
use crate::error::{CudaError, Result};
use crate::memory::DevicePtr;
use crate::sys::*;

/// The 64 bytes that name a device allocation to other processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpcMemHandle(pub [u8; 64]);

fn missing(ctx: &Context, symbol: &'static str) -> CudaError {
    CudaError::MissingSymbol {
        path: ctx.driver().path().to_string(),
        symbol,
        reason: "this driver does not export it".into(),
    }
}

impl Context {
    /// `cuIpcGetMemHandle`: the handle of the device allocation that starts at `base`.
    pub fn ipc_handle(&self, base: DevicePtr) -> Result<IpcMemHandle> {
        self.ensure_current()?;
        let f = self
            .driver()
            .api()
            .cuIpcGetMemHandle
            .ok_or_else(|| missing(self, "cuIpcGetMemHandle"))?;
        let mut h = CUipcMemHandle { reserved: [0; 64] };
        // SAFETY: valid out-parameter; context current; the driver checks `base`.
        self.driver()
            .check("cuIpcGetMemHandle", unsafe { f(&mut h, base.0) })?;
        Ok(IpcMemHandle(h.reserved))
    }

    /// `cuIpcOpenMemHandle_v2` (with `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`): maps another
    /// process's allocation into this context; closed when the [`IpcMapping`] drops.
    pub fn open_ipc_handle(&self, handle: IpcMemHandle) -> Result<IpcMapping> {
        self.ensure_current()?;
        let f = self
            .driver()
            .api()
            .cuIpcOpenMemHandle_v2
            .ok_or_else(|| missing(self, "cuIpcOpenMemHandle_v2"))?;
        let mut ptr: CUdeviceptr = 0;
        // SAFETY: valid out-parameter; the handle is passed by value as cuda.h declares.
        self.driver().check("cuIpcOpenMemHandle_v2", unsafe {
            f(
                &mut ptr,
                CUipcMemHandle { reserved: handle.0 },
                CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
            )
        })?;
        let len = match self.address_range(DevicePtr(ptr)) {
            Ok((_, len)) => len,
            Err(e) => {
                let _ = close(self, ptr);
                return Err(e);
            }
        };
        Ok(IpcMapping {
            ctx: self.clone(),
            ptr: DevicePtr(ptr),
            len,
        })
    }

    /// `cuMemGetAddressRange_v2`: the start and size of the allocation that holds `ptr`.
    pub fn address_range(&self, ptr: DevicePtr) -> Result<(DevicePtr, usize)> {
        self.ensure_current()?;
        let f = self
            .driver()
            .api()
            .cuMemGetAddressRange_v2
            .ok_or_else(|| missing(self, "cuMemGetAddressRange_v2"))?;
        let (mut base, mut size) = (0 as CUdeviceptr, 0usize);
        // SAFETY: valid out-parameters; context current.
        self.driver().check("cuMemGetAddressRange_v2", unsafe {
            f(&mut base, &mut size, ptr.0)
        })?;
        Ok((DevicePtr(base), size))
    }
}

fn close(ctx: &Context, ptr: CUdeviceptr) -> Result<()> {
    ctx.ensure_current()?;
    let f = ctx
        .driver()
        .api()
        .cuIpcCloseMemHandle
        .ok_or_else(|| missing(ctx, "cuIpcCloseMemHandle"))?;
    // SAFETY: `ptr` came from cuIpcOpenMemHandle in this context and is closed once.
    ctx.driver().check("cuIpcCloseMemHandle", unsafe { f(ptr) })
}

/// Another process's device allocation opened in this context; `cuIpcCloseMemHandle` on drop.
#[derive(Debug)]
pub struct IpcMapping {
    ctx: Context,
    ptr: DevicePtr,
    len: usize,
}

impl IpcMapping {
    /// Where the allocation is in this context.
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty (never, for a real allocation).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The context it is open in.
    pub fn context(&self) -> &Context {
        &self.ctx
    }
}

impl Drop for IpcMapping {
    fn drop(&mut self) {
        if let Err(e) = close(&self.ctx, self.ptr.0) {
            tracing::warn!("closing an IPC mapping: {e}");
        }
    }
}
