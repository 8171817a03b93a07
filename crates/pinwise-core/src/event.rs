//! Events: the one vocabulary every source of information speaks.
//!
//! The eBPF tracer, the in-process hooks of the preload library and the allocator's own
//! callbacks all describe what they saw as [`Event`]s. [`crate::history::MemHistory`]
//! turns a stream of them into per-allocation histories.
//!
//! An `Event` is small and `Copy`; it refers to its call site through a [`Site`], whose
//! module is an interned [`ModuleId`](crate::tag::ModuleId) (see [`crate::tag`]), so building one never allocates.

use serde::{Deserialize, Serialize};

use crate::fingerprint::Fingerprint;
use crate::stack::StackId;
use crate::tag::Site;

/// Direction of a copy, as CUDA names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Direction {
    /// Host to device.
    HtoD,
    /// Device to host.
    DtoH,
    /// Device to device (no host memory involved; kept for completeness of the summary).
    DtoD,
    /// Host to host through the CUDA API.
    HtoH,
}

impl Direction {
    /// All directions, in a fixed order (useful for per-direction arrays).
    pub const ALL: [Direction; 4] = [
        Direction::HtoD,
        Direction::DtoH,
        Direction::DtoD,
        Direction::HtoH,
    ];

    /// Index into per-direction arrays, in the order of [`Direction::ALL`].
    pub const fn index(self) -> usize {
        match self {
            Direction::HtoD => 0,
            Direction::DtoH => 1,
            Direction::DtoD => 2,
            Direction::HtoH => 3,
        }
    }

    /// CUDA's spelling, also used in the JSON dump: `HtoD`, `DtoH`, `DtoD`, `HtoH`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Direction::HtoD => "HtoD",
            Direction::DtoH => "DtoH",
            Direction::DtoD => "DtoD",
            Direction::HtoH => "HtoH",
        }
    }
}

/// What kind of host memory an allocation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HostMemKind {
    /// Ordinary pageable memory (malloc, mmap, a Python buffer, ...).
    Pageable,
    /// Page-locked memory allocated by CUDA (`cuMemHostAlloc`, `cuMemAllocHost`, `cudaMallocHost`, ...).
    PinnedAlloc,
    /// Pageable memory that was later page-locked with `cuMemHostRegister`.
    Registered,
}

/// Which kind of probe or hook saw an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ProbeKind {
    /// A uprobe or uretprobe on a user-space function (libcuda, libcudart, the executable).
    Uprobe,
    /// A BPF program attached inside the kernel (fentry/fexit on the nvidia module).
    KernelHook,
    /// A kernel tracepoint (syscalls, page faults, scheduler).
    Tracepoint,
    /// An in-process hook of the preload library.
    InProcessHook,
    /// A callback from pinwise's own allocator.
    AllocatorCallback,
}

impl ProbeKind {
    /// The spelling used in dumps: `uprobe`, `kernel_hook`, `tracepoint`, `hook`, `callback`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ProbeKind::Uprobe => "uprobe",
            ProbeKind::KernelHook => "kernel_hook",
            ProbeKind::Tracepoint => "tracepoint",
            ProbeKind::InProcessHook => "hook",
            ProbeKind::AllocatorCallback => "callback",
        }
    }
}

/// Whether the host side of a copy was pageable or pinned when the copy was issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HostState {
    /// The source knows nothing; [`crate::history::MemHistory`] decides from the allocation
    /// the host pointer falls in (pinned or registered allocation: pinned; otherwise pageable).
    Unknown,
    /// Pageable at that moment.
    Pageable,
    /// Page-locked at that moment.
    Pinned,
}

/// What happened. Addresses are virtual addresses in the traced process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    /// A host allocation came into being.
    Alloc {
        /// First byte.
        start: u64,
        /// Length in bytes.
        size: u64,
        /// How it was allocated.
        kind: HostMemKind,
        /// The CUDA flags passed with it (`CU_MEMHOSTALLOC_*`), 0 when none.
        flags: u32,
    },
    /// A host allocation was freed (`cuMemFreeHost`, `free`, pinwise's allocator).
    Free {
        /// The pointer that was freed (the allocation's start).
        start: u64,
    },
    /// Pages were locked: `cuMemHostRegister`, or the kernel's `os_lock_user_pages`.
    PinPages {
        /// First byte of the locked range.
        start: u64,
        /// Bytes locked (0 when only a page count is known).
        bytes: u64,
        /// Pages locked, when the source knows it (the kernel hook does).
        pages: Option<u64>,
    },
    /// Pages were unlocked: `cuMemHostUnregister`, or the kernel's `os_unlock_user_pages`.
    UnpinPages {
        /// First byte of the unlocked range.
        start: u64,
        /// Pages unlocked, when known.
        pages: Option<u64>,
    },
    /// A copy between host and device (or within one side) through the CUDA API.
    Transfer {
        /// Which way the bytes went.
        direction: Direction,
        /// The host pointer of the copy (source for HtoD, destination for DtoH); 0 for DtoD.
        host: u64,
        /// The device pointer of the copy; 0 for HtoH.
        device: u64,
        /// Bytes copied.
        bytes: u64,
        /// `true` for the `*Async` forms.
        is_async: bool,
        /// The CUDA stream handle (0 = the default stream).
        stream: u64,
        /// Pageable or pinned host side, if the source knows.
        host_state: HostState,
    },
    /// An anonymous mapping of host memory appeared (`mmap`).
    Mmap {
        /// First byte.
        start: u64,
        /// Length in bytes.
        len: u64,
    },
    /// A mapping went away (`munmap`).
    Munmap {
        /// First byte.
        start: u64,
        /// Length in bytes.
        len: u64,
    },
    /// A user page fault at an address (only recorded on tracked regions).
    PageFault {
        /// The faulting address.
        addr: u64,
    },
}

/// One observation, from any source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// When it happened, in nanoseconds of `CLOCK_MONOTONIC` (what `bpf_ktime_get_ns` returns).
    pub ts_ns: u64,
    /// Process (thread-group) id of the process it happened in.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Which probe saw it.
    pub probe: ProbeKind,
    /// The application's call site, normalized, when known.
    pub site: Option<Site>,
    /// The call stack, interned in the history's [`StackTable`](crate::stack::StackTable),
    /// when the source captured one. The history keeps the stacks of allocations (the
    /// event that makes a record); other events' stacks are not retained.
    pub stack: Option<StackId>,
    /// What happened.
    pub kind: EventKind,
    /// For a host-to-device or device-to-host transfer: the fingerprint of the bytes moved,
    /// when the source computed one (see [`crate::fingerprint`]).
    pub fingerprint: Option<Fingerprint>,
}

impl Event {
    /// An event with no call site, at `ts_ns`, from `probe`, in process `pid` thread `tid`.
    pub const fn new(ts_ns: u64, pid: u32, tid: u32, probe: ProbeKind, kind: EventKind) -> Self {
        Event {
            ts_ns,
            pid,
            tid,
            probe,
            site: None,
            stack: None,
            kind,
            fingerprint: None,
        }
    }

    /// The same event with the fingerprint of the bytes it moved.
    pub const fn with_fingerprint(mut self, fingerprint: Fingerprint) -> Self {
        self.fingerprint = Some(fingerprint);
        self
    }

    /// The same event with a call site.
    pub const fn with_site(mut self, site: Site) -> Self {
        self.site = Some(site);
        self
    }

    /// The same event with a call stack.
    pub const fn with_stack(mut self, stack: StackId) -> Self {
        self.stack = Some(stack);
        self
    }
}
