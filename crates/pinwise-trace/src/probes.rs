//! What pinwise probes: one table of user-space entry points, the BPF program attached to
//! each, and the function id (the attach cookie) it reports as.
//!
//! Programs are shared between entry points with the same signature (`cuMemcpyHtoD_v2` and
//! `cuMemcpyHtoD_v2_ptds`, ...); the cookie tells them apart in events and counters.

use crate::skel::main::types::pw_func as f;

/// Which library an entry point lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Library {
    /// The CUDA driver, `libcuda.so.1`.
    Driver,
    /// The CUDA runtime: a shared `libcudart.so*`, or the executable itself when it links
    /// cudart statically.
    Runtime,
    /// The C library's malloc family (`libc.so.6`), probed only when asked for (`--malloc`):
    /// a uprobe is a trap per call.
    Libc,
    /// An allocator linked into the executable or a library (jemalloc, mimalloc), probed
    /// with the malloc family only when asked for (`--malloc`). A file probed in this role
    /// gets the [`Library::Libc`] entry points it defines as well (an allocator that
    /// replaces `malloc` in the executable: jemalloc unprefixed, mimalloc's override).
    Allocator,
}

/// One probed entry point.
#[derive(Debug, Clone, Copy)]
pub struct UprobeSpec {
    /// The exported symbol.
    pub symbol: &'static str,
    /// Where it lives.
    pub library: Library,
    /// BPF program attached at its entry.
    pub entry: &'static str,
    /// BPF program attached at its return, for calls whose result matters.
    pub ret: Option<&'static str>,
    /// Function id (`enum pw_func`), passed as the attach cookie.
    pub func: u32,
    /// The entry and return programs (`""`: none) used instead when copies are fingerprinted
    /// (`--fingerprint`): a synchronous download is reported at its return, when its bytes
    /// are in the host buffer; stream, event and context calls are probed only then.
    pub with_fingerprint: Option<(&'static str, &'static str)>,
}

impl UprobeSpec {
    /// Whether its `--fingerprint` programs serve asynchronous downloads only (the download
    /// itself, and the stream, event and context calls that tell when it completed).
    pub fn for_async_downloads(&self) -> bool {
        matches!(
            self.with_fingerprint,
            Some((
                "copy_dtoh_async_fp_entry"
                    | "sync_entry"
                    | "event_destroy"
                    | "stream_destroy"
                    | "ctx_change",
                _
            ))
        )
    }

    /// The entry program and the return program (if any) attached to this entry point;
    /// `None` for one probed only with `--fingerprint` (an empty `entry`) when not.
    pub fn programs(&self, fingerprint: bool) -> Option<(&'static str, Option<&'static str>)> {
        match self.with_fingerprint {
            Some((entry, ret)) if fingerprint => Some((entry, (!ret.is_empty()).then_some(ret))),
            _ if self.entry.is_empty() => None,
            _ => Some((self.entry, self.ret)),
        }
    }
}

const fn driver(symbol: &'static str, entry: &'static str, func: f) -> UprobeSpec {
    UprobeSpec {
        symbol,
        library: Library::Driver,
        entry,
        ret: None,
        func: func.0,
        with_fingerprint: None,
    }
}

/// A synchronous download: `entry` alone, or with `--fingerprint` the programs that report
/// it at its return.
const fn driver_dtoh(symbol: &'static str, func: f) -> UprobeSpec {
    UprobeSpec {
        with_fingerprint: Some(("copy_dtoh_fp_entry", "copy_dtoh_fp_return")),
        ..driver(symbol, "copy_dtoh", func)
    }
}

/// An asynchronous download: `copy_dtoh_async`, or with `--fingerprint` the programs that
/// report it at its return and remember it until it completes.
const fn driver_dtoh_async(symbol: &'static str, func: f) -> UprobeSpec {
    UprobeSpec {
        with_fingerprint: Some(("copy_dtoh_async_fp_entry", "copy_dtoh_async_fp_return")),
        ..driver(symbol, "copy_dtoh_async", func)
    }
}

/// A stream, event or context call that tells when asynchronous downloads completed,
/// probed only with `--fingerprint`: `sync_entry` and `sync_return`.
const fn driver_sync(symbol: &'static str, func: f) -> UprobeSpec {
    UprobeSpec {
        with_fingerprint: Some(("sync_entry", "sync_return")),
        ..driver(symbol, "", func)
    }
}

/// A call whose entry alone matters to asynchronous downloads, probed only with
/// `--fingerprint`.
const fn driver_fp_entry(symbol: &'static str, entry: &'static str, func: f) -> UprobeSpec {
    UprobeSpec {
        with_fingerprint: Some((entry, "")),
        ..driver(symbol, "", func)
    }
}

const fn driver_ret(
    symbol: &'static str,
    entry: &'static str,
    ret: &'static str,
    func: f,
) -> UprobeSpec {
    UprobeSpec {
        symbol,
        library: Library::Driver,
        entry,
        ret: Some(ret),
        func: func.0,
        with_fingerprint: None,
    }
}

const fn libc(symbol: &'static str, entry: &'static str, ret: bool, func: f) -> UprobeSpec {
    UprobeSpec {
        symbol,
        library: Library::Libc,
        entry,
        ret: if ret { Some("malloc_return") } else { None },
        func: func.0,
        with_fingerprint: None,
    }
}

const fn allocator(symbol: &'static str, entry: &'static str, ret: bool, func: f) -> UprobeSpec {
    UprobeSpec {
        library: Library::Allocator,
        ..libc(symbol, entry, ret, func)
    }
}

const fn runtime(symbol: &'static str, func: f) -> UprobeSpec {
    UprobeSpec {
        symbol,
        library: Library::Runtime,
        entry: "runtime_alloc_entry",
        ret: None,
        func: func.0,
        with_fingerprint: None,
    }
}

/// Every user-space entry point pinwise probes. Symbols a library does not export are
/// skipped (older drivers lack some `_ptds`/`_ptsz` forms; the stand-in has a subset).
pub const UPROBES: &[UprobeSpec] = &[
    // libc's malloc family, only with `--malloc` (sizes filtered in BPF).
    libc("malloc", "malloc_entry", true, f::PW_FN_malloc),
    libc("calloc", "calloc_entry", true, f::PW_FN_calloc),
    libc("realloc", "realloc_entry", true, f::PW_FN_realloc),
    libc("free", "free_entry", false, f::PW_FN_free),
    libc(
        "posix_memalign",
        "posix_memalign_entry",
        true,
        f::PW_FN_posix_memalign,
    ),
    libc(
        "aligned_alloc",
        "memalign_entry",
        true,
        f::PW_FN_aligned_alloc,
    ),
    libc("memalign", "memalign_entry", true, f::PW_FN_memalign),
    libc("valloc", "valloc_entry", true, f::PW_FN_valloc),
    // Allocators linked into a program (only with `--malloc`), each entry point on the
    // program of its signature. jemalloc as tikv-jemallocator builds it: Rust's global
    // allocator calls malloc, calloc, mallocx (alignment or zeroing in the flags),
    // realloc, rallocx and sdallocx.
    allocator("_rjem_malloc", "malloc_entry", true, f::PW_FN_rjem_malloc),
    allocator("_rjem_calloc", "calloc_entry", true, f::PW_FN_rjem_calloc),
    allocator(
        "_rjem_realloc",
        "realloc_entry",
        true,
        f::PW_FN_rjem_realloc,
    ),
    allocator("_rjem_free", "free_entry", false, f::PW_FN_rjem_free),
    allocator("_rjem_mallocx", "malloc_entry", true, f::PW_FN_rjem_mallocx),
    allocator(
        "_rjem_rallocx",
        "realloc_entry",
        true,
        f::PW_FN_rjem_rallocx,
    ),
    allocator("_rjem_dallocx", "free_entry", false, f::PW_FN_rjem_dallocx),
    allocator(
        "_rjem_sdallocx",
        "free_entry",
        false,
        f::PW_FN_rjem_sdallocx,
    ),
    allocator(
        "_rjem_posix_memalign",
        "posix_memalign_entry",
        true,
        f::PW_FN_rjem_posix_memalign,
    ),
    allocator(
        "_rjem_aligned_alloc",
        "memalign_entry",
        true,
        f::PW_FN_rjem_aligned_alloc,
    ),
    // jemalloc unprefixed (its malloc, free, ... are the Libc entry points of the file).
    allocator("mallocx", "malloc_entry", true, f::PW_FN_mallocx),
    allocator("rallocx", "realloc_entry", true, f::PW_FN_rallocx),
    allocator("dallocx", "free_entry", false, f::PW_FN_dallocx),
    allocator("sdallocx", "free_entry", false, f::PW_FN_sdallocx),
    // mimalloc (the `mimalloc` crate's global allocator calls the aligned forms and
    // mi_free; C programs the plain ones).
    allocator("mi_malloc", "malloc_entry", true, f::PW_FN_mi_malloc),
    allocator("mi_zalloc", "malloc_entry", true, f::PW_FN_mi_zalloc),
    allocator("mi_calloc", "calloc_entry", true, f::PW_FN_mi_calloc),
    allocator("mi_realloc", "realloc_entry", true, f::PW_FN_mi_realloc),
    allocator("mi_free", "free_entry", false, f::PW_FN_mi_free),
    allocator(
        "mi_malloc_aligned",
        "malloc_entry",
        true,
        f::PW_FN_mi_malloc_aligned,
    ),
    allocator(
        "mi_zalloc_aligned",
        "malloc_entry",
        true,
        f::PW_FN_mi_zalloc_aligned,
    ),
    allocator(
        "mi_realloc_aligned",
        "realloc_entry",
        true,
        f::PW_FN_mi_realloc_aligned,
    ),
    allocator(
        "mi_posix_memalign",
        "posix_memalign_entry",
        true,
        f::PW_FN_mi_posix_memalign,
    ),
    allocator(
        "mi_aligned_alloc",
        "memalign_entry",
        true,
        f::PW_FN_mi_aligned_alloc,
    ),
    // Copies: one probe hit each, at entry.
    driver("cuMemcpyHtoD_v2", "copy_htod", f::PW_FN_cuMemcpyHtoD_v2),
    driver(
        "cuMemcpyHtoD_v2_ptds",
        "copy_htod",
        f::PW_FN_cuMemcpyHtoD_v2_ptds,
    ),
    driver(
        "cuMemcpyHtoDAsync_v2",
        "copy_htod_async",
        f::PW_FN_cuMemcpyHtoDAsync_v2,
    ),
    driver(
        "cuMemcpyHtoDAsync_v2_ptsz",
        "copy_htod_async",
        f::PW_FN_cuMemcpyHtoDAsync_v2_ptsz,
    ),
    driver_dtoh("cuMemcpyDtoH_v2", f::PW_FN_cuMemcpyDtoH_v2),
    driver_dtoh("cuMemcpyDtoH_v2_ptds", f::PW_FN_cuMemcpyDtoH_v2_ptds),
    driver_dtoh_async("cuMemcpyDtoHAsync_v2", f::PW_FN_cuMemcpyDtoHAsync_v2),
    driver_dtoh_async(
        "cuMemcpyDtoHAsync_v2_ptsz",
        f::PW_FN_cuMemcpyDtoHAsync_v2_ptsz,
    ),
    driver("cuMemcpy", "copy_unified", f::PW_FN_cuMemcpy),
    driver("cuMemcpy_ptds", "copy_unified", f::PW_FN_cuMemcpy_ptds),
    driver(
        "cuMemcpyAsync",
        "copy_unified_async",
        f::PW_FN_cuMemcpyAsync,
    ),
    driver(
        "cuMemcpyAsync_ptsz",
        "copy_unified_async",
        f::PW_FN_cuMemcpyAsync_ptsz,
    ),
    driver("cuMemcpy2D_v2", "copy_2d", f::PW_FN_cuMemcpy2D_v2),
    driver("cuMemcpy2D_v2_ptds", "copy_2d", f::PW_FN_cuMemcpy2D_v2_ptds),
    driver(
        "cuMemcpy2DUnaligned_v2",
        "copy_2d",
        f::PW_FN_cuMemcpy2DUnaligned_v2,
    ),
    driver(
        "cuMemcpy2DUnaligned_v2_ptds",
        "copy_2d",
        f::PW_FN_cuMemcpy2DUnaligned_v2_ptds,
    ),
    driver(
        "cuMemcpy2DAsync_v2",
        "copy_2d_async",
        f::PW_FN_cuMemcpy2DAsync_v2,
    ),
    driver(
        "cuMemcpy2DAsync_v2_ptsz",
        "copy_2d_async",
        f::PW_FN_cuMemcpy2DAsync_v2_ptsz,
    ),
    driver("cuMemcpy3D_v2", "copy_3d", f::PW_FN_cuMemcpy3D_v2),
    driver("cuMemcpy3D_v2_ptds", "copy_3d", f::PW_FN_cuMemcpy3D_v2_ptds),
    driver(
        "cuMemcpy3DAsync_v2",
        "copy_3d_async",
        f::PW_FN_cuMemcpy3DAsync_v2,
    ),
    driver(
        "cuMemcpy3DAsync_v2_ptsz",
        "copy_3d_async",
        f::PW_FN_cuMemcpy3DAsync_v2_ptsz,
    ),
    driver("cuMemcpyHtoA_v2", "copy_htoa", f::PW_FN_cuMemcpyHtoA_v2),
    driver(
        "cuMemcpyHtoA_v2_ptds",
        "copy_htoa",
        f::PW_FN_cuMemcpyHtoA_v2_ptds,
    ),
    driver(
        "cuMemcpyHtoAAsync_v2",
        "copy_htoa_async",
        f::PW_FN_cuMemcpyHtoAAsync_v2,
    ),
    driver(
        "cuMemcpyHtoAAsync_v2_ptsz",
        "copy_htoa_async",
        f::PW_FN_cuMemcpyHtoAAsync_v2_ptsz,
    ),
    driver("cuMemcpyAtoH_v2", "copy_atoh", f::PW_FN_cuMemcpyAtoH_v2),
    driver(
        "cuMemcpyAtoH_v2_ptds",
        "copy_atoh",
        f::PW_FN_cuMemcpyAtoH_v2_ptds,
    ),
    driver(
        "cuMemcpyAtoHAsync_v2",
        "copy_atoh_async",
        f::PW_FN_cuMemcpyAtoHAsync_v2,
    ),
    driver(
        "cuMemcpyAtoHAsync_v2_ptsz",
        "copy_atoh_async",
        f::PW_FN_cuMemcpyAtoHAsync_v2_ptsz,
    ),
    // Host memory: allocations need their result, so an entry and a return.
    driver_ret(
        "cuMemHostAlloc",
        "host_alloc_entry",
        "host_alloc_return",
        f::PW_FN_cuMemHostAlloc,
    ),
    driver_ret(
        "cuMemAllocHost_v2",
        "alloc_host_entry",
        "host_alloc_return",
        f::PW_FN_cuMemAllocHost_v2,
    ),
    driver("cuMemFreeHost", "host_free", f::PW_FN_cuMemFreeHost),
    driver_ret(
        "cuMemHostRegister_v2",
        "host_register_entry",
        "host_register_return",
        f::PW_FN_cuMemHostRegister_v2,
    ),
    driver(
        "cuMemHostUnregister",
        "host_unregister",
        f::PW_FN_cuMemHostUnregister,
    ),
    // Device memory, so that unified copies can tell device addresses from host ones.
    driver_ret(
        "cuMemAlloc_v2",
        "dev_alloc_entry",
        "dev_alloc_return",
        f::PW_FN_cuMemAlloc_v2,
    ),
    driver_ret(
        "cuMemAllocPitch_v2",
        "dev_alloc_pitch_entry",
        "dev_alloc_return",
        f::PW_FN_cuMemAllocPitch_v2,
    ),
    driver_ret(
        "cuMemAllocAsync",
        "dev_alloc_entry",
        "dev_alloc_return",
        f::PW_FN_cuMemAllocAsync,
    ),
    driver_ret(
        "cuMemAllocAsync_ptsz",
        "dev_alloc_entry",
        "dev_alloc_return",
        f::PW_FN_cuMemAllocAsync_ptsz,
    ),
    driver("cuMemFree_v2", "dev_free", f::PW_FN_cuMemFree_v2),
    driver("cuMemFreeAsync", "dev_free", f::PW_FN_cuMemFreeAsync),
    driver(
        "cuMemFreeAsync_ptsz",
        "dev_free",
        f::PW_FN_cuMemFreeAsync_ptsz,
    ),
    // With `--fingerprint`: when asynchronous downloads completed (see "asynchronous
    // downloads" in pinwise.bpf.c).
    driver_sync("cuStreamSynchronize", f::PW_FN_cuStreamSynchronize),
    driver_sync(
        "cuStreamSynchronize_ptsz",
        f::PW_FN_cuStreamSynchronize_ptsz,
    ),
    driver_sync("cuStreamQuery", f::PW_FN_cuStreamQuery),
    driver_sync("cuStreamQuery_ptsz", f::PW_FN_cuStreamQuery_ptsz),
    driver_sync("cuCtxSynchronize", f::PW_FN_cuCtxSynchronize),
    // CUDA 13 (cudart 13's cudaDeviceSynchronize); absent from older drivers, where it is
    // not attached.
    driver_sync("cuCtxSynchronize_v2", f::PW_FN_cuCtxSynchronize_v2),
    driver_sync("cuEventRecord", f::PW_FN_cuEventRecord),
    driver_sync("cuEventRecord_ptsz", f::PW_FN_cuEventRecord_ptsz),
    driver_sync("cuEventRecordWithFlags", f::PW_FN_cuEventRecordWithFlags),
    driver_sync(
        "cuEventRecordWithFlags_ptsz",
        f::PW_FN_cuEventRecordWithFlags_ptsz,
    ),
    driver_sync("cuEventSynchronize", f::PW_FN_cuEventSynchronize),
    driver_sync("cuStreamBeginCapture", f::PW_FN_cuStreamBeginCapture),
    driver_sync(
        "cuStreamBeginCapture_ptsz",
        f::PW_FN_cuStreamBeginCapture_ptsz,
    ),
    driver_sync("cuStreamBeginCapture_v2", f::PW_FN_cuStreamBeginCapture_v2),
    driver_sync(
        "cuStreamBeginCapture_v2_ptsz",
        f::PW_FN_cuStreamBeginCapture_v2_ptsz,
    ),
    driver_sync(
        "cuStreamBeginCaptureToGraph",
        f::PW_FN_cuStreamBeginCaptureToGraph,
    ),
    driver_sync(
        "cuStreamBeginCaptureToGraph_ptsz",
        f::PW_FN_cuStreamBeginCaptureToGraph_ptsz,
    ),
    driver_sync("cuStreamEndCapture", f::PW_FN_cuStreamEndCapture),
    driver_sync("cuStreamEndCapture_ptsz", f::PW_FN_cuStreamEndCapture_ptsz),
    driver_sync("cuEventQuery", f::PW_FN_cuEventQuery),
    driver_fp_entry(
        "cuEventDestroy_v2",
        "event_destroy",
        f::PW_FN_cuEventDestroy_v2,
    ),
    driver_fp_entry(
        "cuStreamDestroy_v2",
        "stream_destroy",
        f::PW_FN_cuStreamDestroy_v2,
    ),
    driver_fp_entry("cuCtxSetCurrent", "ctx_change", f::PW_FN_cuCtxSetCurrent),
    driver_fp_entry(
        "cuCtxPushCurrent_v2",
        "ctx_change",
        f::PW_FN_cuCtxPushCurrent_v2,
    ),
    driver_fp_entry(
        "cuCtxPopCurrent_v2",
        "ctx_change",
        f::PW_FN_cuCtxPopCurrent_v2,
    ),
    driver_fp_entry("cuCtxDestroy_v2", "ctx_change", f::PW_FN_cuCtxDestroy_v2),
    driver_fp_entry(
        "cuDevicePrimaryCtxRelease",
        "ctx_change",
        f::PW_FN_cuDevicePrimaryCtxRelease,
    ),
    driver_fp_entry(
        "cuDevicePrimaryCtxRelease_v2",
        "ctx_change",
        f::PW_FN_cuDevicePrimaryCtxRelease_v2,
    ),
    driver_fp_entry(
        "cuDevicePrimaryCtxReset",
        "ctx_change",
        f::PW_FN_cuDevicePrimaryCtxReset,
    ),
    driver_fp_entry(
        "cuDevicePrimaryCtxReset_v2",
        "ctx_change",
        f::PW_FN_cuDevicePrimaryCtxReset_v2,
    ),
    // Runtime: the application's call site of host allocations.
    runtime("cudaMallocHost", f::PW_FN_cudaMallocHost),
    runtime("cudaHostAlloc", f::PW_FN_cudaHostAlloc),
    runtime("cudaHostRegister", f::PW_FN_cudaHostRegister),
];

/// Tracepoints of the main object: (BPF program, category, name).
pub const TRACEPOINTS: &[(&str, &str, &str)] = &[
    ("on_mmap_enter", "syscalls", "sys_enter_mmap"),
    ("on_mmap_exit", "syscalls", "sys_exit_mmap"),
    ("on_munmap", "syscalls", "sys_enter_munmap"),
    ("on_exit", "sched", "sched_process_exit"),
    ("on_exec", "sched", "sched_process_exec"),
];

/// The page-fault tracepoint (loaded only when asked for).
pub const PAGE_FAULT_TRACEPOINT: (&str, &str, &str) =
    ("on_page_fault", "exceptions", "page_fault_user");

/// The fork hook: with BTF (`tp_btf`) or, without, the classic tracepoint.
pub const FORK_BTF_PROGRAM: &str = "on_fork_btf";
/// See [`FORK_BTF_PROGRAM`].
pub const FORK_TRACEPOINT: (&str, &str, &str) = ("on_fork_tp", "sched", "sched_process_fork");

/// The kernel hooks of the nvidia object, and the module function each attaches to.
pub const KERNEL_HOOKS: &[(&str, &str)] = &[
    ("on_lock_user_pages", "os_lock_user_pages"),
    ("on_unlock_user_pages", "os_unlock_user_pages"),
];

/// Number of function ids (`PW_FN_COUNT`).
pub const FUNC_COUNT: usize = f::PW_FN_COUNT.0 as usize;

/// Human name of a function id (`enum pw_func`): the probed symbol, or the kernel event.
pub fn func_name(func: u32) -> &'static str {
    if let Some(spec) = UPROBES.iter().find(|p| p.func == func) {
        return spec.symbol;
    }
    match f(func) {
        f::PW_FN_sys_mmap => "mmap",
        f::PW_FN_sys_munmap => "munmap",
        f::PW_FN_page_fault_user => "page_fault_user",
        f::PW_FN_os_lock_user_pages => "os_lock_user_pages",
        f::PW_FN_os_unlock_user_pages => "os_unlock_user_pages",
        f::PW_FN_sched_process_fork => "sched_process_fork",
        f::PW_FN_sched_process_exit => "sched_process_exit",
        f::PW_FN_sched_process_exec => "sched_process_exec",
        _ => "?",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn entry_points_probed_only_with_fingerprints_serve_asynchronous_downloads() {
        let mut async_only = 0;
        for p in UPROBES {
            if p.programs(false).is_none() {
                // Without --fingerprint nothing is attached; with it but without
                // asynchronous downloads (the agent), nothing either.
                assert!(p.for_async_downloads(), "{}", p.symbol);
                assert!(p.programs(true).is_some(), "{}", p.symbol);
                async_only += 1;
            }
        }
        assert!(async_only >= 20, "the stream, event and context calls");
        let dtoh_async = UPROBES
            .iter()
            .find(|p| p.symbol == "cuMemcpyDtoHAsync_v2")
            .unwrap();
        assert!(dtoh_async.for_async_downloads());
        assert_eq!(dtoh_async.programs(false), Some(("copy_dtoh_async", None)));
        let sync = UPROBES
            .iter()
            .find(|p| p.symbol == "cuStreamSynchronize")
            .unwrap();
        assert_eq!(
            sync.programs(true),
            Some(("sync_entry", Some("sync_return")))
        );
        let destroy = UPROBES
            .iter()
            .find(|p| p.symbol == "cuStreamDestroy_v2")
            .unwrap();
        assert_eq!(destroy.programs(true), Some(("stream_destroy", None)));
    }

    #[test]
    fn every_function_id_is_used_once_and_named() {
        let mut seen = HashSet::new();
        for p in UPROBES {
            assert!(seen.insert(p.func), "{} reuses id {}", p.symbol, p.func);
            assert!(p.func > 0 && (p.func as usize) < FUNC_COUNT);
            assert_eq!(func_name(p.func), p.symbol);
        }
        for id in 1..FUNC_COUNT as u32 {
            assert_ne!(func_name(id), "?", "function id {id} has no name");
        }
    }
}
