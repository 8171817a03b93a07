//! C ABI of the smart pinning allocator (`pinwise_alloc_*`).
//!
//! ```c
//! PinwiseAllocConfig cfg;
//! pinwise_alloc_config_init(&cfg);
//! PinwiseAllocator *a = pinwise_alloc_create(&cfg);
//! void *buf = pinwise_alloc(a, 64 << 20, 0);        /* the macro records the call site */
//! pinwise_alloc_copy_htod(a, dev, buf, 64 << 20, 0, 0);
//! pinwise_alloc_free(a, buf);
//! pinwise_alloc_destroy(a);                         /* writes the profile in profile mode */
//! ```
//!
//! Functions returning `int` return 0 on success and -1 on failure; functions returning a
//! pointer return NULL on failure. After a failure, `pinwise_alloc_last_error()` says what
//! went wrong (per thread). No function panics across the boundary.
//!
//! The call site of an allocation is the return address the header's `pinwise_alloc` macro
//! passes (`pinwise_call_site()`), normalized in-process to module build ID + offset, so a
//! profile written by one run applies to the next run of the same build.

use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

use pinwise_alloc::backend::cuda::CudaBackend;
use pinwise_alloc::{AllocFlags, DevicePtr, Engine, EngineConfig, StreamHandle};
use pinwise_core::decide::pricing;
use pinwise_core::{Direction, Policy, Site};

use crate::ffi::{guarded, last_error, opt_path};

/// Mode: learn within the run, per call site.
pub const PINWISE_MODE_ADAPTIVE: u32 = 0;
/// Mode: behave adaptively and write a profile to `profile_path` at `pinwise_alloc_destroy`.
pub const PINWISE_MODE_PROFILE: u32 = 1;
/// Mode: follow the profile at `profile_path` where it matches the run.
pub const PINWISE_MODE_USE: u32 = 2;

/// Allocation flag: the memory must be page-locked (fail rather than serve it pageable).
pub const PINWISE_ALLOC_REQUIRE_PINNED: u32 = 1;
/// Allocation flag: never pin this allocation.
pub const PINWISE_ALLOC_NEVER_PIN: u32 = 2;

/// Copy direction: host to device.
pub const PINWISE_HTOD: c_int = 0;
/// Copy direction: device to host.
pub const PINWISE_DTOH: c_int = 1;

/// Settings for `pinwise_alloc_create`. Fill with `pinwise_alloc_config_init` first.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PinwiseAllocConfig {
    /// `PINWISE_MODE_ADAPTIVE`, `PINWISE_MODE_PROFILE` or `PINWISE_MODE_USE`.
    pub mode: u32,
    /// CUDA device ordinal.
    pub device: u32,
    /// Hard cap on pinned bytes; 0: a quarter of the machine's memory.
    pub budget_bytes: u64,
    /// Profile file: written (profile mode) or read (use mode). NUL-terminated, or NULL.
    pub profile_path: *const c_char,
    /// Calibration CSV (`pinwise calibrate`); NULL: this GPU's cached automatic calibration
    /// (`pinwise bench alloc` makes one on first use), else the built-in H200 calibration.
    pub calibration_path: *const c_char,
}

impl Default for PinwiseAllocConfig {
    /// Adaptive mode, device 0, default budget, built-in calibration, no profile.
    fn default() -> Self {
        PinwiseAllocConfig {
            mode: PINWISE_MODE_ADAPTIVE,
            device: 0,
            budget_bytes: 0,
            profile_path: std::ptr::null(),
            calibration_path: std::ptr::null(),
        }
    }
}

/// Statistics of an allocator (see `pinwise_alloc_get_stats`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct PinwiseAllocStats {
    /// Page-locked bytes now.
    pub pinned_bytes: u64,
    /// The most bytes reserved for pinning at once: an upper bound of the page-locked bytes
    /// at any moment.
    pub pinned_bytes_peak: u64,
    /// The pinned budget in bytes.
    pub budget_bytes: u64,
    /// Allocations served.
    pub allocations: u64,
    /// Of those, served page-locked.
    pub pinned_allocations: u64,
    /// Pinned requests served from a free pooled block.
    pub pool_hits: u64,
    /// Pinned requests that needed new pinned memory.
    pub pool_misses: u64,
    /// Live pageable allocations registered in place because they turned hot.
    pub promotions: u64,
    /// Nanoseconds spent pinning.
    pub pin_ns: u64,
    /// Pinning attempts that failed and were served pageable instead.
    pub fallbacks: u64,
    /// Pinning attempts refused by the budget.
    pub budget_refusals: u64,
    /// Transfers noted on pinned memory.
    pub transfers_pinned: u64,
    /// Transfers noted on pageable memory.
    pub transfers_pageable: u64,
}

/// An allocator instance (opaque to C).
pub struct PinwiseAllocator {
    engine: Arc<Engine>,
}

/// # Safety
/// `a` is NULL or a pointer from `pinwise_alloc_create` not yet destroyed.
unsafe fn allocator<'a>(a: *const PinwiseAllocator) -> Result<&'a PinwiseAllocator, String> {
    // SAFETY: the caller's contract.
    unsafe { a.as_ref() }.ok_or_else(|| "the allocator is NULL".to_string())
}

/// The last error on this thread, as a NUL-terminated string ("" if none). Valid until the
/// next pinwise call on this thread.
#[no_mangle]
pub extern "C" fn pinwise_alloc_last_error() -> *const c_char {
    last_error()
}

/// Fills `config` with the defaults: adaptive mode, device 0, default budget, built-in
/// calibration, no profile.
///
/// # Safety
/// `config` is NULL (ignored) or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn pinwise_alloc_config_init(config: *mut PinwiseAllocConfig) {
    if config.is_null() {
        return;
    }
    // SAFETY: non-null and writable by the caller's contract.
    unsafe { config.write(PinwiseAllocConfig::default()) };
}

/// Creates an allocator on the CUDA driver (`$PINWISE_LIBCUDA` or `libcuda.so.1`). Returns
/// NULL on failure (no driver, no such device, unreadable profile or calibration, ...).
///
/// # Safety
/// `config` is NULL (defaults) or points to a config whose strings are NULL or
/// NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn pinwise_alloc_create(
    config: *const PinwiseAllocConfig,
) -> *mut PinwiseAllocator {
    guarded(std::ptr::null_mut(), || {
        // SAFETY: the caller's contract.
        let c = unsafe { config.as_ref() }.copied().unwrap_or_default();
        // SAFETY: the caller's contract on the strings.
        let profile = unsafe { opt_path(c.profile_path, "profile_path") }?;
        // SAFETY: as above.
        let calibration = unsafe { opt_path(c.calibration_path, "calibration_path") }?;
        let driver = pinwise_cuda::Driver::shared().map_err(|e| e.to_string())?;
        let backend =
            CudaBackend::on_device(&driver, c.device as usize).map_err(|e| e.to_string())?;
        // The table is pinwise-core's pricing's choice: the file named, else this GPU's
        // cached automatic calibration (made by `pinwise bench alloc` or
        // `pinwise_alloc::autocal`; never measured here, inside the program), else the
        // built-in table, said in the log. A named file that cannot be read is an error.
        let table = pricing::pricing_table(
            calibration.as_deref(),
            backend.gpu_key().as_deref(),
            pricing::cache_dir().as_deref(),
        );
        if calibration.is_some() && !matches!(table.source, pricing::TableSource::Named(_)) {
            return Err(table.problems.join("; "));
        }
        for problem in &table.problems {
            tracing::warn!("pinwise: {problem}");
        }
        tracing::info!(pricing = %table.source, "pinwise: decisions priced");
        let costs = table.model;
        let mut cfg = EngineConfig::new(Policy::new(costs));
        if c.budget_bytes > 0 {
            cfg.budget_bytes = Some(c.budget_bytes);
        }
        let cfg = match c.mode {
            PINWISE_MODE_ADAPTIVE => cfg,
            PINWISE_MODE_PROFILE => {
                let path = profile.ok_or("profile mode needs profile_path (where to write it)")?;
                cfg.recording(Some(path)).0
            }
            PINWISE_MODE_USE => {
                let path = profile.ok_or("use mode needs profile_path (the profile to follow)")?;
                cfg.with_profile_file(&path).map_err(|e| e.to_string())?
            }
            other => {
                return Err(format!(
                    "unknown mode {other} (0 adaptive, 1 profile, 2 use)"
                ))
            }
        };
        let engine = Engine::new(Arc::new(backend), cfg).map_err(|e| e.to_string())?;
        Ok(Box::into_raw(Box::new(PinwiseAllocator {
            engine: Arc::new(engine),
        })))
    })
}

/// Destroys an allocator: waits for pending copies, releases its pinned memory, and in
/// profile mode writes the profile (a failure to write it is reported with -1; the
/// allocator is destroyed either way). Allocations still live are not freed.
///
/// # Safety
/// `a` is NULL (ignored) or from `pinwise_alloc_create`, and not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn pinwise_alloc_destroy(a: *mut PinwiseAllocator) -> c_int {
    if a.is_null() {
        return 0;
    }
    guarded(-1, || {
        // SAFETY: the caller's contract: created by `pinwise_alloc_create`, destroyed once.
        let a = unsafe { Box::from_raw(a) };
        let r = a.engine.shutdown();
        drop(a);
        r.map(|_| 0).map_err(|e| e.to_string())
    })
}

/// Allocates `size` bytes for call site `call_site` (a return address; the header's
/// `pinwise_alloc` macro passes it). `flags`: `PINWISE_ALLOC_*`. NULL on failure.
///
/// As with `malloc`, the bytes are not initialized (memory reused from the pool holds
/// what was written before).
///
/// # Safety
/// `a` is from `pinwise_alloc_create` and not destroyed.
#[no_mangle]
pub unsafe extern "C" fn pinwise_alloc_malloc_at(
    a: *mut PinwiseAllocator,
    size: usize,
    flags: u32,
    call_site: *const c_void,
) -> *mut c_void {
    guarded(std::ptr::null_mut(), || {
        // SAFETY: the caller's contract.
        let a = unsafe { allocator(a) }?;
        let site = if call_site.is_null() {
            Site::UNKNOWN
        } else {
            a.engine.sites().resolve(call_site as usize)
        };
        let r = a
            .engine
            .alloc(size, site, AllocFlags(flags))
            .map_err(|e| e.to_string())?;
        Ok(r.ptr as *mut c_void)
    })
}

/// Frees memory from `pinwise_alloc_malloc_at`. A pointer this allocator did not hand out
/// is refused with -1 and left alone.
///
/// # Safety
/// `a` is from `pinwise_alloc_create`; `ptr` is not used after a successful free.
#[no_mangle]
pub unsafe extern "C" fn pinwise_alloc_free(a: *mut PinwiseAllocator, ptr: *mut c_void) -> c_int {
    guarded(-1, || {
        // SAFETY: the caller's contract.
        let a = unsafe { allocator(a) }?;
        // SAFETY: the caller does not use `ptr` after the free; unknown pointers are refused.
        unsafe { a.engine.free(ptr as *mut u8) }.map_err(|e| e.to_string())?;
        Ok(0)
    })
}

fn direction(d: c_int) -> Result<Direction, String> {
    match d {
        PINWISE_HTOD => Ok(Direction::HtoD),
        PINWISE_DTOH => Ok(Direction::DtoH),
        other => Err(format!(
            "unknown direction {other} (PINWISE_HTOD 0, PINWISE_DTOH 1)"
        )),
    }
}

fn stream_of(stream: u64, is_async: c_int) -> Option<StreamHandle> {
    (is_async != 0).then_some(StreamHandle(stream))
}

/// Tells the allocator about a copy the caller makes itself (call it just before the copy):
/// `bytes` between the allocation containing `ptr` and the device; `stream`/`is_async` for
/// `cuMemcpy*Async` copies. Returns 1 if the host side is pinned for the copy, 0 if
/// pageable, -1 if `ptr` is not in any allocation of this allocator (or on error).
///
/// # Safety
/// `a` is from `pinwise_alloc_create`.
#[no_mangle]
pub unsafe extern "C" fn pinwise_alloc_note_transfer(
    a: *mut PinwiseAllocator,
    ptr: *const c_void,
    bytes: usize,
    dir: c_int,
    stream: u64,
    is_async: c_int,
) -> c_int {
    guarded(-1, || {
        // SAFETY: the caller's contract.
        let a = unsafe { allocator(a) }?;
        let d = direction(dir)?;
        match a
            .engine
            .note_transfer(ptr as *const u8, bytes, d, stream_of(stream, is_async))
        {
            Some(pinned) => Ok(pinned as c_int),
            None => Err(format!(
                "{ptr:p} is not in any allocation of this pinwise allocator"
            )),
        }
    })
}

/// Copies `bytes` from host `src` (in an allocation of this allocator, or not) to device
/// address `dst`, noting the transfer; synchronous unless `is_async` (then on `stream`).
///
/// # Safety
/// `a` is from `pinwise_alloc_create`; `src` is readable for `bytes` (until the copy
/// completed, if asynchronous); `dst` is device memory of the allocator's device.
#[no_mangle]
pub unsafe extern "C" fn pinwise_alloc_copy_htod(
    a: *mut PinwiseAllocator,
    dst: u64,
    src: *const c_void,
    bytes: usize,
    stream: u64,
    is_async: c_int,
) -> c_int {
    guarded(-1, || {
        // SAFETY: the caller's contract.
        let a = unsafe { allocator(a) }?;
        let s = stream_of(stream, is_async);
        let _ = a
            .engine
            .note_transfer(src as *const u8, bytes, Direction::HtoD, s);
        // SAFETY: the caller's contract on `src` and `dst`.
        unsafe {
            a.engine
                .backend()
                .copy_htod(DevicePtr(dst), src as *const u8, bytes, s)
        }
        .map_err(|e| e.to_string())?;
        Ok(0)
    })
}

/// Copies `bytes` from device address `src` to host `dst`, noting the transfer; synchronous
/// unless `is_async` (then on `stream`).
///
/// # Safety
/// `a` is from `pinwise_alloc_create`; `dst` is writable for `bytes` (until the copy
/// completed, if asynchronous); `src` is device memory of the allocator's device.
#[no_mangle]
pub unsafe extern "C" fn pinwise_alloc_copy_dtoh(
    a: *mut PinwiseAllocator,
    dst: *mut c_void,
    src: u64,
    bytes: usize,
    stream: u64,
    is_async: c_int,
) -> c_int {
    guarded(-1, || {
        // SAFETY: the caller's contract.
        let a = unsafe { allocator(a) }?;
        let s = stream_of(stream, is_async);
        let _ = a
            .engine
            .note_transfer(dst as *const u8, bytes, Direction::DtoH, s);
        // SAFETY: the caller's contract on `dst` and `src`.
        unsafe {
            a.engine
                .backend()
                .copy_dtoh(dst as *mut u8, DevicePtr(src), bytes, s)
        }
        .map_err(|e| e.to_string())?;
        Ok(0)
    })
}

/// 1 if the allocation starting at `ptr` is page-locked now, 0 if pageable, -1 if `ptr`
/// is not the start of a live allocation of this allocator.
///
/// # Safety
/// `a` is from `pinwise_alloc_create`.
#[no_mangle]
pub unsafe extern "C" fn pinwise_alloc_is_pinned(
    a: *const PinwiseAllocator,
    ptr: *const c_void,
) -> c_int {
    guarded(-1, || {
        // SAFETY: the caller's contract.
        let a = unsafe { allocator(a) }?;
        match a.engine.lookup(ptr as *const u8) {
            Some((_, pinned)) => Ok(pinned as c_int),
            None => Err(format!(
                "{ptr:p} is not a live allocation of this allocator"
            )),
        }
    })
}

/// Fills `out` with the allocator's statistics.
///
/// # Safety
/// `a` is from `pinwise_alloc_create`; `out` is valid for writing.
#[no_mangle]
pub unsafe extern "C" fn pinwise_alloc_get_stats(
    a: *const PinwiseAllocator,
    out: *mut PinwiseAllocStats,
) -> c_int {
    guarded(-1, || {
        // SAFETY: the caller's contract.
        let a = unsafe { allocator(a) }?;
        if out.is_null() {
            return Err("the stats output pointer is NULL".into());
        }
        let s = a.engine.stats();
        // SAFETY: non-null and writable by the caller's contract.
        unsafe {
            out.write(PinwiseAllocStats {
                pinned_bytes: s.pinned_bytes,
                pinned_bytes_peak: s.pinned_bytes_peak,
                budget_bytes: s.budget_bytes,
                allocations: s.allocations,
                pinned_allocations: s.pinned_allocations,
                pool_hits: s.pool_hits,
                pool_misses: s.pool_misses,
                promotions: s.promotions,
                pin_ns: s.pin_ns,
                fallbacks: s.fallbacks,
                budget_refusals: s.budget_refusals,
                transfers_pinned: s.transfers_pinned,
                transfers_pageable: s.transfers_pageable,
            })
        };
        Ok(0)
    })
}

/// 1 when the allocator runs on a test fixture (the CPU stand-in for libcuda), 0 on a real
/// GPU driver, -1 on error.
///
/// # Safety
/// `a` is from `pinwise_alloc_create`.
#[no_mangle]
pub unsafe extern "C" fn pinwise_alloc_is_fixture(a: *const PinwiseAllocator) -> c_int {
    guarded(-1, || {
        // SAFETY: the caller's contract.
        let a = unsafe { allocator(a) }?;
        Ok(a.engine.backend().is_fixture() as c_int)
    })
}
