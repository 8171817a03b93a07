//! C ABI of the tracer agent (`pinwise_tracer_*`): a C or C++ program traces itself (or
//! another process) with eBPF and asks, while it runs, which of its host allocations are
//! hot or cold.
//!
//! ```c
//! PinwiseTracer *t = pinwise_tracer_create(NULL);          /* NULL: default settings */
//! if (!t || pinwise_tracer_start_self(t) != 0)
//!     fprintf(stderr, "no tracing: %s\n", pinwise_tracer_last_error());
//! ... /* allocate, copy */
//! PinwiseAllocationInfo hot[8];
//! size_t n = pinwise_tracer_hotspots(t, 8, hot);
//! for (size_t i = 0; i < n; i++) {
//!     char where[256];
//!     pinwise_tracer_describe_site(t, &hot[i], where, sizeof where);
//!     printf("%zu transfers: %s\n", (size_t)hot[i].transfer_count, where);
//! }
//! pinwise_tracer_dump(t, "history.json", PINWISE_DUMP_JSON);
//! pinwise_tracer_destroy(t);                               /* stops tracing */
//! ```
//!
//! Tracing needs root (or CAP_BPF and CAP_PERFMON). Functions returning `int` return 0 on
//! success and -1 on failure; after a failure `pinwise_tracer_last_error()` says what went
//! wrong (per thread). No function panics across the boundary. A tracer handle may be
//! queried from several threads; start, stop and destroy must not race with other calls
//! on the same handle.

use std::ffi::{c_char, c_int};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use pinwise_core::history::{AllocKind, AllocState, AllocationInfo};
use pinwise_core::{Direction, DumpFormat};
use pinwise_trace::agent::{TraceStats, TracerAgent, TracerConfig};
use pinwise_trace::libs::LibraryOverrides;
use pinwise_trace::Symbolizer;

use crate::ffi::{guarded, last_error, opt_path};

/// Dump format: JSON.
pub const PINWISE_DUMP_JSON: u32 = 0;
/// Dump format: compact binary (appendable; periodic dumps append).
pub const PINWISE_DUMP_BINARY: u32 = 1;

/// Allocation kind: pageable memory whose allocation was seen (a large mmap).
pub const PINWISE_KIND_PAGEABLE: u32 = 0;
/// Allocation kind: page-locked memory allocated by CUDA.
pub const PINWISE_KIND_PINNED_ALLOC: u32 = 1;
/// Allocation kind: memory registered with `cudaHostRegister`/`cuMemHostRegister`.
pub const PINWISE_KIND_REGISTERED: u32 = 2;
/// Allocation kind: memory whose allocation was never seen (made from its transfers).
pub const PINWISE_KIND_UNTRACKED: u32 = 3;

/// Allocation state: still allocated.
pub const PINWISE_STATE_LIVE: u32 = 0;
/// Allocation state: freed.
pub const PINWISE_STATE_FREED: u32 = 1;
/// Allocation state: a new allocation took its addresses before its free was seen.
pub const PINWISE_STATE_REPLACED: u32 = 2;
/// Allocation state: unmapped while live.
pub const PINWISE_STATE_UNMAPPED: u32 = 3;
/// Allocation state: its process exited while it was live.
pub const PINWISE_STATE_EXITED: u32 = 4;

/// Settings for `pinwise_tracer_create`. Fill with `pinwise_tracer_config_init` first.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PinwiseTracerConfig {
    /// BPF ring buffer size in bytes (rounded up to a power of two); events that find it
    /// full are dropped and counted, never waited for.
    pub ringbuf_bytes: u32,
    /// Anonymous mappings from this size up become tracked pageable allocations.
    pub min_mmap_bytes: u64,
    /// Nonzero: record user page faults on tracked memory (costly).
    pub page_faults: u32,
    /// Nonzero: try the kernel hooks into the nvidia module.
    pub kernel_hooks: u32,
    /// Events kept per allocation (counters stay exact past it).
    pub max_events_per_allocation: u32,
    /// The libcuda to probe (NUL-terminated path), or NULL to look for it.
    pub libcuda: *const c_char,
    /// The libcudart to probe, or NULL to look for it.
    pub libcudart: *const c_char,
}

/// One allocation, as the queries return it.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct PinwiseAllocationInfo {
    /// Process.
    pub pid: u32,
    /// `PINWISE_KIND_*`.
    pub kind: u32,
    /// `PINWISE_STATE_*`.
    pub state: u32,
    /// Call number at its call site (1 for the first allocation there; 0 for memory whose
    /// allocation was not seen).
    pub call_no: u32,
    /// First byte.
    pub start: u64,
    /// Length in bytes.
    pub size: u64,
    /// Index of its call site's module (for `pinwise_tracer_describe_site`).
    pub module: u32,
    /// Reserved (0).
    pub reserved: u32,
    /// Offset of the call site in its module's file (stable across runs of one build).
    pub offset: u64,
    /// Transfers to or from it (exact).
    pub transfer_count: u64,
    /// Bytes transferred (exact).
    pub bytes_transferred: u64,
    /// Bytes moved host to device.
    pub htod_bytes: u64,
    /// Bytes moved device to host.
    pub dtoh_bytes: u64,
    /// Bytes moved while the memory was pageable.
    pub pageable_bytes: u64,
    /// When it was allocated (CLOCK_MONOTONIC ns).
    pub alloc_ts_ns: u64,
}

/// What the tracer saw and what it cost (see `pinwise_tracer_get_stats`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct PinwiseTracerStats {
    /// Ring-buffer records received.
    pub records: u64,
    /// Events lost because the ring buffer was full.
    pub ringbuf_drops: u64,
    /// Calls whose entry or return was missed.
    pub incomplete_calls: u64,
    /// Records that could not be decoded.
    pub decode_errors: u64,
    /// Uprobes attached.
    pub uprobes: u64,
    /// 1 when the kernel hooks into the nvidia module are attached.
    pub kernel_hooks_attached: u32,
    /// Reserved (0).
    pub reserved: u32,
    /// Allocations in the history.
    pub allocations: u64,
    /// Kernel-side BPF run time of all probes, ns, and how many runs (system-wide).
    pub bpf_run_time_ns: u64,
    /// See `bpf_run_time_ns`.
    pub bpf_run_count: u64,
    /// Resident memory of this process, bytes.
    pub rss_bytes: u64,
}

/// A tracer instance (opaque to C).
// It holds no symbolizer: blazesym's is neither `Send` nor `Sync` (`Rc`s and `RefCell`s
// inside) and a tracer may be queried from several threads, so
// `pinwise_tracer_describe_site` makes its own.
pub struct PinwiseTracer {
    agent: TracerAgent,
}

// The header promises that one tracer may be queried from several threads at once (and C
// may hand it from thread to thread).
const _: () = {
    const fn queried_from_several_threads<T: Send + Sync>() {}
    queried_from_several_threads::<PinwiseTracer>();
};

/// # Safety
/// `t` is NULL or a live pointer from `pinwise_tracer_create`.
unsafe fn tracer<'a>(t: *const PinwiseTracer) -> Result<&'a PinwiseTracer, String> {
    // SAFETY: the caller's contract.
    unsafe { t.as_ref() }.ok_or_else(|| "the tracer is NULL".to_string())
}

/// # Safety
/// As [`tracer`], and no other call on `t` runs at the same time.
unsafe fn tracer_mut<'a>(t: *mut PinwiseTracer) -> Result<&'a mut PinwiseTracer, String> {
    // SAFETY: the caller's contract.
    unsafe { t.as_mut() }.ok_or_else(|| "the tracer is NULL".to_string())
}

fn dump_format(format: u32) -> Result<DumpFormat, String> {
    match format {
        PINWISE_DUMP_JSON => Ok(DumpFormat::Json),
        PINWISE_DUMP_BINARY => Ok(DumpFormat::Binary),
        other => Err(format!(
            "unknown dump format {other} (PINWISE_DUMP_JSON or PINWISE_DUMP_BINARY)"
        )),
    }
}

fn info_to_c(a: &AllocationInfo) -> PinwiseAllocationInfo {
    let kind = match a.kind {
        AllocKind::Pageable => PINWISE_KIND_PAGEABLE,
        AllocKind::PinnedAlloc => PINWISE_KIND_PINNED_ALLOC,
        AllocKind::Registered => PINWISE_KIND_REGISTERED,
        AllocKind::Untracked => PINWISE_KIND_UNTRACKED,
    };
    let state = match a.state {
        AllocState::Live => PINWISE_STATE_LIVE,
        AllocState::Freed => PINWISE_STATE_FREED,
        AllocState::Replaced => PINWISE_STATE_REPLACED,
        AllocState::Unmapped => PINWISE_STATE_UNMAPPED,
        AllocState::Exited => PINWISE_STATE_EXITED,
    };
    PinwiseAllocationInfo {
        pid: a.pid,
        kind,
        state,
        call_no: a.tag.call_no,
        start: a.start,
        size: a.size,
        module: a.tag.site.module.0,
        reserved: 0,
        offset: a.tag.site.offset,
        transfer_count: a.transfer_count,
        bytes_transferred: a.bytes_transferred,
        htod_bytes: a.counters.direction(Direction::HtoD).bytes(),
        dtoh_bytes: a.counters.direction(Direction::DtoH).bytes(),
        pageable_bytes: a.counters.pageable_bytes(),
        alloc_ts_ns: a.alloc_ts_ns,
    }
}

/// Copies up to `capacity` infos to `out`; returns how many there were in all.
///
/// # Safety
/// `out` is NULL (only counting) or valid for writing `capacity` elements.
unsafe fn write_infos(
    infos: &[AllocationInfo],
    out: *mut PinwiseAllocationInfo,
    capacity: usize,
) -> usize {
    if !out.is_null() {
        for (i, a) in infos.iter().take(capacity).enumerate() {
            // SAFETY: i < capacity and `out` holds `capacity` elements (caller's contract).
            unsafe { out.add(i).write(info_to_c(a)) };
        }
    }
    infos.len()
}

/// The last error on this thread, as a NUL-terminated string ("" if none). Valid until the
/// next pinwise call on this thread.
#[no_mangle]
pub extern "C" fn pinwise_tracer_last_error() -> *const c_char {
    last_error()
}

/// Fills `config` with the defaults: 4 MiB ring buffer, mappings from 1 MiB tracked, no
/// page faults, kernel hooks tried, 1024 events per allocation, libraries looked for.
///
/// # Safety
/// `config` is NULL (ignored) or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn pinwise_tracer_config_init(config: *mut PinwiseTracerConfig) {
    if config.is_null() {
        return;
    }
    let d = TracerConfig::default();
    // SAFETY: non-null and writable by the caller's contract.
    unsafe {
        config.write(PinwiseTracerConfig {
            ringbuf_bytes: d.bpf.ringbuf_bytes,
            min_mmap_bytes: d.bpf.min_mmap_bytes,
            page_faults: u32::from(d.bpf.page_faults),
            kernel_hooks: u32::from(d.bpf.kernel_hooks),
            max_events_per_allocation: d.history.max_events_per_allocation,
            libcuda: std::ptr::null(),
            libcudart: std::ptr::null(),
        })
    };
}

/// Creates a tracer (not tracing yet). `config` NULL means the defaults. Returns NULL on
/// failure (see `pinwise_tracer_last_error`).
///
/// # Safety
/// `config` is NULL or points to a config filled by `pinwise_tracer_config_init` (its
/// strings NULL or NUL-terminated).
#[no_mangle]
pub unsafe extern "C" fn pinwise_tracer_create(
    config: *const PinwiseTracerConfig,
) -> *mut PinwiseTracer {
    guarded(std::ptr::null_mut(), || {
        let mut cfg = TracerConfig::default();
        // SAFETY: the caller's contract.
        if let Some(c) = unsafe { config.as_ref() } {
            cfg.bpf.ringbuf_bytes = c.ringbuf_bytes;
            cfg.bpf.min_mmap_bytes = c.min_mmap_bytes.max(1);
            cfg.bpf.page_faults = c.page_faults != 0;
            cfg.bpf.kernel_hooks = c.kernel_hooks != 0;
            cfg.history.max_events_per_allocation = c.max_events_per_allocation.max(2);
            cfg.libraries = LibraryOverrides {
                // SAFETY: the caller's contract on the strings.
                libcuda: unsafe { opt_path(c.libcuda, "libcuda")? },
                // SAFETY: as above.
                libcudart: unsafe { opt_path(c.libcudart, "libcudart")? },
            };
        }
        Ok(Box::into_raw(Box::new(PinwiseTracer {
            agent: TracerAgent::new(cfg),
        })))
    })
}

/// Starts tracing this process (its CUDA libraries need not be loaded yet). Returns 0, or
/// -1 (not root, BPF unavailable, no libcuda found, already tracing, ...).
///
/// # Safety
/// `t` is NULL or a live tracer, not used by another thread during the call.
#[no_mangle]
pub unsafe extern "C" fn pinwise_tracer_start_self(t: *mut PinwiseTracer) -> c_int {
    guarded(-1, || {
        // SAFETY: the caller's contract.
        let t = unsafe { tracer_mut(t)? };
        t.agent.start_self().map_err(|e| e.to_string())?;
        Ok(0)
    })
}

/// Starts tracing the running process `pid` (and the children it forks from now on).
///
/// # Safety
/// As `pinwise_tracer_start_self`.
#[no_mangle]
pub unsafe extern "C" fn pinwise_tracer_start_pid(t: *mut PinwiseTracer, pid: u32) -> c_int {
    guarded(-1, || {
        // SAFETY: the caller's contract.
        let t = unsafe { tracer_mut(t)? };
        t.agent.start_pid(pid).map_err(|e| e.to_string())?;
        Ok(0)
    })
}

fn stats_to_c(t: &PinwiseTracer, s: &TraceStats) -> PinwiseTracerStats {
    PinwiseTracerStats {
        records: s.records,
        ringbuf_drops: s.ringbuf_drops,
        incomplete_calls: s.pending_full + s.returns_without_entry,
        decode_errors: s.decode_errors,
        uprobes: s.uprobes as u64,
        kernel_hooks_attached: u32::from(matches!(
            s.kernel_hooks,
            Some(pinwise_trace::loader::KernelHookStatus::Attached)
        )),
        reserved: 0,
        allocations: t.agent.history().read().len() as u64,
        bpf_run_time_ns: s.program_costs.iter().map(|c| c.run_time_ns).sum(),
        bpf_run_count: s.program_costs.iter().map(|c| c.run_count).sum(),
        rss_bytes: s.tracer_rss_bytes,
    }
}

/// Stops tracing: every event seen so far is in the history; probes are detached. The
/// history stays queryable. `stats` (may be NULL) receives the final statistics.
///
/// # Safety
/// As `pinwise_tracer_start_self`; `stats` is NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn pinwise_tracer_stop(
    t: *mut PinwiseTracer,
    stats: *mut PinwiseTracerStats,
) -> c_int {
    guarded(-1, || {
        // SAFETY: the caller's contract.
        let t = unsafe { tracer_mut(t)? };
        let s = t.agent.stop().map_err(|e| e.to_string())?;
        // SAFETY: NULL or writable by the caller's contract.
        if let Some(out) = unsafe { stats.as_mut() } {
            *out = stats_to_c(t, &s);
        }
        Ok(0)
    })
}

/// 1 while tracing, 0 otherwise (or for NULL).
///
/// # Safety
/// `t` is NULL or a live tracer.
#[no_mangle]
pub unsafe extern "C" fn pinwise_tracer_is_running(t: *const PinwiseTracer) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { t.as_ref() }.map_or(0, |t| c_int::from(t.agent.is_running()))
}

/// Statistics now (while tracing) or of the last trace.
///
/// # Safety
/// `t` is NULL or a live tracer; `out` valid for writing.
#[no_mangle]
pub unsafe extern "C" fn pinwise_tracer_get_stats(
    t: *const PinwiseTracer,
    out: *mut PinwiseTracerStats,
) -> c_int {
    guarded(-1, || {
        // SAFETY: the caller's contract.
        let t = unsafe { tracer(t)? };
        // SAFETY: as above.
        let out = unsafe { out.as_mut() }.ok_or("stats pointer is NULL")?;
        *out = stats_to_c(t, &t.agent.stats());
        Ok(0)
    })
}

/// Writes the (up to) `n` allocations with the most transfers to `out`, hottest first;
/// returns how many were written.
///
/// # Safety
/// `t` is NULL or a live tracer; `out` valid for writing `n` elements.
#[no_mangle]
pub unsafe extern "C" fn pinwise_tracer_hotspots(
    t: *const PinwiseTracer,
    n: usize,
    out: *mut PinwiseAllocationInfo,
) -> usize {
    // SAFETY: the caller's contract.
    unsafe { write_ranked(t, n, out, TracerAgent::hotspots) }
}

/// The body of `pinwise_tracer_hotspots`/`_coldspots`: writes the (up to) `n` allocations
/// `rank` picks to `out`; returns how many were written.
///
/// # Safety
/// As `pinwise_tracer_hotspots`.
unsafe fn write_ranked(
    t: *const PinwiseTracer,
    n: usize,
    out: *mut PinwiseAllocationInfo,
    rank: fn(&TracerAgent, usize) -> Vec<AllocationInfo>,
) -> usize {
    guarded(0, || {
        // SAFETY: the caller's contract.
        let t = unsafe { tracer(t)? };
        if out.is_null() && n > 0 {
            return Err("output array is NULL".into());
        }
        // SAFETY: `out` holds `n` elements (caller's contract).
        Ok(unsafe { write_infos(&rank(&t.agent, n), out, n) })
    })
}

/// Writes the (up to) `n` allocations with the fewest transfers to `out`, coldest first;
/// returns how many were written.
///
/// # Safety
/// As `pinwise_tracer_hotspots`.
#[no_mangle]
pub unsafe extern "C" fn pinwise_tracer_coldspots(
    t: *const PinwiseTracer,
    n: usize,
    out: *mut PinwiseAllocationInfo,
) -> usize {
    // SAFETY: the caller's contract.
    unsafe { write_ranked(t, n, out, TracerAgent::coldspots) }
}

/// Allocations with at least `min_transfers` transfers: writes up to `capacity` of them to
/// `out` (may be NULL to count) and returns how many there are in all.
///
/// # Safety
/// `t` is NULL or a live tracer; `out` NULL or valid for writing `capacity` elements.
#[no_mangle]
pub unsafe extern "C" fn pinwise_tracer_hotspots_threshold(
    t: *const PinwiseTracer,
    min_transfers: u64,
    out: *mut PinwiseAllocationInfo,
    capacity: usize,
) -> usize {
    guarded(0, || {
        // SAFETY: the caller's contract.
        let t = unsafe { tracer(t)? };
        let infos = t.agent.hotspots_threshold(min_transfers);
        // SAFETY: the caller's contract on `out`.
        Ok(unsafe { write_infos(&infos, out, capacity) })
    })
}

/// Allocations with at most `max_transfers` transfers (see
/// `pinwise_tracer_hotspots_threshold`).
///
/// # Safety
/// As `pinwise_tracer_hotspots_threshold`.
#[no_mangle]
pub unsafe extern "C" fn pinwise_tracer_coldspots_threshold(
    t: *const PinwiseTracer,
    max_transfers: u64,
    out: *mut PinwiseAllocationInfo,
    capacity: usize,
) -> usize {
    guarded(0, || {
        // SAFETY: the caller's contract.
        let t = unsafe { tracer(t)? };
        let infos = t.agent.coldspots_threshold(max_transfers);
        // SAFETY: the caller's contract on `out`.
        Ok(unsafe { write_infos(&infos, out, capacity) })
    })
}

/// The live allocation of process `pid` containing `addr`: 1 and `*out` filled when there
/// is one, 0 when none, -1 on error.
///
/// # Safety
/// `t` is NULL or a live tracer; `out` valid for writing.
#[no_mangle]
pub unsafe extern "C" fn pinwise_tracer_lookup(
    t: *const PinwiseTracer,
    pid: u32,
    addr: u64,
    out: *mut PinwiseAllocationInfo,
) -> c_int {
    guarded(-1, || {
        // SAFETY: the caller's contract.
        let t = unsafe { tracer(t)? };
        // SAFETY: as above.
        let out = unsafe { out.as_mut() }.ok_or("output pointer is NULL")?;
        match t.agent.history().lookup(pid, addr) {
            Some(info) => {
                *out = info_to_c(&info);
                Ok(1)
            }
            None => Ok(0),
        }
    })
}

/// Writes "module+0xOFFSET function (file:line)" for the allocation's call site into `buf`
/// (NUL-terminated, truncated to `len`). Returns the length of the full text (excluding the
/// NUL), or -1.
///
/// # Safety
/// `t` is NULL or a live tracer; `info` valid; `buf` valid for writing `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn pinwise_tracer_describe_site(
    t: *const PinwiseTracer,
    info: *const PinwiseAllocationInfo,
    buf: *mut c_char,
    len: usize,
) -> c_int {
    guarded(-1, || {
        // SAFETY: the caller's contract.
        let t = unsafe { tracer(t)? };
        // SAFETY: as above.
        let info = unsafe { info.as_ref() }.ok_or("info pointer is NULL")?;
        let modules = t.agent.history().modules();
        let text = match modules.get(pinwise_core::ModuleId(info.module)) {
            Some(m) => {
                let name = std::path::Path::new(&m.path)
                    .file_name()
                    .map_or_else(|| m.path.clone(), |n| n.to_string_lossy().into_owned());
                match Symbolizer::new().symbolize(&m, info.offset) {
                    Some(sym) => format!("{name}+{:#x} {sym}", info.offset),
                    None => format!("{name}+{:#x}", info.offset),
                }
            }
            None => format!("?+{:#x}", info.offset),
        };
        if !buf.is_null() && len > 0 {
            let n = text.len().min(len - 1);
            // SAFETY: `buf` holds `len` bytes and n + 1 <= len.
            unsafe {
                std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), buf, n);
                buf.add(n).write(0);
            }
        }
        Ok(c_int::try_from(text.len()).unwrap_or(c_int::MAX))
    })
}

/// Writes the history as it is now to `path` (`PINWISE_DUMP_JSON` or `PINWISE_DUMP_BINARY`).
///
/// # Safety
/// `t` is NULL or a live tracer; `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pinwise_tracer_dump(
    t: *const PinwiseTracer,
    path: *const c_char,
    format: u32,
) -> c_int {
    guarded(-1, || {
        // SAFETY: the caller's contract.
        let t = unsafe { tracer(t)? };
        // SAFETY: as above.
        let path = unsafe { opt_path(path, "path")? }.ok_or("path is NULL")?;
        t.agent
            .dump(&path, dump_format(format)?)
            .map_err(|e| e.to_string())?;
        Ok(0)
    })
}

/// While tracing, writes the history to `path` every `interval_ms` milliseconds (binary:
/// appended; JSON: rewritten), and once more at stop.
///
/// # Safety
/// As `pinwise_tracer_start_self`; `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pinwise_tracer_dump_every(
    t: *mut PinwiseTracer,
    path: *const c_char,
    format: u32,
    interval_ms: u32,
) -> c_int {
    guarded(-1, || {
        // SAFETY: the caller's contract.
        let t = unsafe { tracer_mut(t)? };
        // SAFETY: as above.
        let path = unsafe { opt_path(path, "path")? }.ok_or("path is NULL")?;
        if interval_ms == 0 {
            return Err("interval_ms must be positive".into());
        }
        t.agent
            .dump_every(
                &path,
                dump_format(format)?,
                Duration::from_millis(u64::from(interval_ms)),
            )
            .map_err(|e| e.to_string())?;
        Ok(0)
    })
}

/// Stops tracing if needed and frees the tracer. NULL is ignored.
///
/// # Safety
/// `t` is NULL or a live tracer, not used again afterwards.
#[no_mangle]
pub unsafe extern "C" fn pinwise_tracer_destroy(t: *mut PinwiseTracer) {
    if t.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `t` came from Box::into_raw in pinwise_tracer_create (caller's contract)
        // and is not used again.
        drop(unsafe { Box::from_raw(t) });
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::{CStr, CString};

    #[test]
    fn null_handles_and_bad_arguments_fail_with_a_message() {
        // SAFETY: NULL handles are part of the contract.
        unsafe {
            assert_eq!(pinwise_tracer_start_self(std::ptr::null_mut()), -1);
            let msg = CStr::from_ptr(pinwise_tracer_last_error())
                .to_str()
                .unwrap();
            assert!(msg.contains("NULL"), "{msg}");
            assert_eq!(pinwise_tracer_is_running(std::ptr::null()), 0);
            pinwise_tracer_destroy(std::ptr::null_mut());

            let t = pinwise_tracer_create(std::ptr::null());
            assert!(!t.is_null());
            assert_eq!(pinwise_tracer_is_running(t), 0);
            let path = CString::new("/tmp/x").unwrap();
            assert_eq!(pinwise_tracer_dump(t, path.as_ptr(), 7), -1);
            let msg = CStr::from_ptr(pinwise_tracer_last_error())
                .to_str()
                .unwrap();
            assert!(msg.contains("unknown dump format 7"), "{msg}");
            assert_eq!(pinwise_tracer_stop(t, std::ptr::null_mut()), -1);
            let msg = CStr::from_ptr(pinwise_tracer_last_error())
                .to_str()
                .unwrap();
            assert!(msg.contains("not tracing"), "{msg}");
            // Queries on a tracer that never ran: an empty history.
            let mut out = [PinwiseAllocationInfo::default(); 4];
            assert_eq!(pinwise_tracer_hotspots(t, 4, out.as_mut_ptr()), 0);
            assert_eq!(
                pinwise_tracer_lookup(t, 1, 0x1000, out.as_mut_ptr()),
                0,
                "no allocation there"
            );
            pinwise_tracer_destroy(t);
        }
    }

    #[test]
    fn config_init_fills_the_defaults() {
        let mut c = std::mem::MaybeUninit::<PinwiseTracerConfig>::uninit();
        // SAFETY: a valid pointer to writable memory.
        let c = unsafe {
            pinwise_tracer_config_init(c.as_mut_ptr());
            c.assume_init()
        };
        assert_eq!(c.ringbuf_bytes, 4 << 20);
        assert_eq!(c.kernel_hooks, 1);
        assert!(c.libcuda.is_null());
    }
}
