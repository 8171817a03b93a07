//! Loading pinwise's BPF objects and attaching their programs.
//!
//! Two objects, compiled by `build.rs` and embedded here: the main one (uprobes on CUDA,
//! syscall and scheduler tracepoints, the shared maps) and the nvidia one (fentry/fexit on
//! the nvidia module's page locking), which reuses the main object's maps and is optional:
//! where the module or its BTF is missing, or the kernel refuses the programs, the reason
//! is kept and tracing goes on with user-space events.
//!
//! Uprobes are attached by file, system-wide (pid -1); the programs filter by process
//! (map `traced_tgids`), which is much cheaper than per-PID uprobes (libbpf-rs #981).

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use blazesym::inspect::source::{Elf as InspectElf, Source as InspectSource};
use blazesym::inspect::Inspector;
use blazesym::SymType;
use libbpf_rs::{
    Link, MapCore, MapFlags, Object, ObjectBuilder, OpenObject, TracepointCategory,
    UprobeMultiOpts, UprobeOpts,
};

use crate::error::TraceError;
use crate::libs::{file_id, is_cuda_standin};
use crate::probes::{
    self, Library, UprobeSpec, FORK_BTF_PROGRAM, FORK_TRACEPOINT, KERNEL_HOOKS,
    PAGE_FAULT_TRACEPOINT, TRACEPOINTS, UPROBES,
};
use crate::raw::counters;

static MAIN_OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/pinwise.bpf.o"));
static NVIDIA_OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/pinwise_nvidia.bpf.o"));

/// Maps of the main object that the nvidia object shares.
const SHARED_MAPS: [&str; 5] = ["traced_tgids", "events", "counters", "func_hits", "pending"];

/// Settings of the BPF side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BpfConfig {
    /// Ring buffer size in bytes (rounded up to a power of two, at least one page).
    pub ringbuf_bytes: u32,
    /// Anonymous mappings smaller than this are not reported.
    pub min_mmap_bytes: u64,
    /// The consumer is woken when this much data waits (it also polls on a timer).
    pub wakeup_bytes: u64,
    /// Report user page faults of traced processes.
    pub page_faults: bool,
    /// Try the kernel hooks into the nvidia module.
    pub kernel_hooks: bool,
    /// Allocation events (host allocations, registrations, mmaps) carry their user call
    /// chain, up to 32 frames (`bpf_get_stack`: frame pointers; the chain stops or goes
    /// astray at code built without them).
    pub alloc_stacks: bool,
    /// With `alloc_stacks`, malloc-family allocations also carry the registers and 16 KiB
    /// of user stack, unwound in user space with the modules' `.eh_frame`
    /// ([`crate::unwind`]): full chains through code built without frame pointers. Off by
    /// default (a 16 KiB copy per allocation event).
    pub dwarf_stacks: bool,
    /// One copy in this many, at random, carries its call chain too (0: none, 1: all).
    pub copy_stack_every: u32,
    /// With the malloc probes: blocks smaller than this are not reported (filtered in BPF).
    pub malloc_min_bytes: u64,
    /// Node-wide mode: any process entering a probed CUDA function becomes traced there
    /// (from that call on), without user space adding it (`pinwise agent`).
    pub enroll_on_cuda: bool,
    /// Events that carry a call chain (allocations with `alloc_stacks`, sampled copies)
    /// carry the Python frames of the thread too, in processes running CPython 3.10-3.13
    /// (see [`crate::python`]).
    pub python_frames: bool,
    /// Linear host-to-device copies carry the sampled lines of their source (8 reads of
    /// 64 bytes with `bpf_probe_read_user` at the copy's entry), from which user space
    /// computes their content fingerprint (see `pinwise_core::fingerprint`).
    pub fingerprint: bool,
    /// With `fingerprint`: every byte of every fingerprinted copy is hashed in BPF too
    /// (`--fingerprint full`; see `pw_full_hash` in `pinwise.bpf.c`).
    pub fingerprint_full: bool,
    /// With `fingerprint` and not `fingerprint_full`: the share of copies also hashed in
    /// full, to measure the sampled fingerprint's error, in parts per million (copies
    /// chosen by host address, device address and length, so that every repeat of a copy
    /// is chosen alike; those above 4 MiB only at 1 000 000).
    pub fingerprint_check_ppm: u32,
    /// Copies above this many bytes are never hashed in full (sampled only, counted in
    /// [`crate::translate::TranslateStats::fingerprint_full_over_cap`]): the hash runs in
    /// the copying thread's probe, which waits for it.
    pub fingerprint_full_max_bytes: u64,
    /// With `fingerprint`: asynchronous downloads are fingerprinted too, when a stream,
    /// event or context call guarantees they completed (probes on those calls; see
    /// [`crate::async_dl`]). A consumer that does not feed a history (`pinwise agent`) gains
    /// nothing from them and leaves them off.
    pub fingerprint_async: bool,
}

/// The default [`BpfConfig::fingerprint_full_max_bytes`]: 256 MiB.
pub const FULL_HASH_MAX_BYTES: u64 = 256 << 20;

impl Default for BpfConfig {
    fn default() -> Self {
        BpfConfig {
            ringbuf_bytes: 4 << 20,
            min_mmap_bytes: 1 << 20,
            wakeup_bytes: 256 << 10,
            page_faults: false,
            kernel_hooks: true,
            alloc_stacks: true,
            dwarf_stacks: false,
            copy_stack_every: 64,
            malloc_min_bytes: 64 << 10,
            enroll_on_cuda: false,
            python_frames: true,
            fingerprint: false,
            fingerprint_full: false,
            fingerprint_check_ppm: 0,
            fingerprint_full_max_bytes: FULL_HASH_MAX_BYTES,
            fingerprint_async: true,
        }
    }
}

/// The BPF map of traced Python processes (`py_procs`), through a handle of its own: the
/// event thread updates it without waiting for the lock on [`Probes`], which the thread
/// that probes new libraries may hold for a long while.
#[derive(Debug)]
pub struct PythonMap {
    procs: libbpf_rs::MapHandle,
    codes: libbpf_rs::MapHandle,
}

impl PythonMap {
    /// Tells BPF where process `pid`'s Python frames are (see [`crate::python`]).
    pub fn set(
        &self,
        pid: u32,
        proc_: &crate::skel::main::types::pw_py_proc,
    ) -> Result<(), TraceError> {
        // SAFETY: pw_py_proc is a #[repr(C)] struct of integers generated from BTF, with
        // explicit padding (pinwise_events.h): all of its bytes are initialised.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (proc_ as *const crate::skel::main::types::pw_py_proc).cast::<u8>(),
                std::mem::size_of_val(proc_),
            )
        };
        self.procs
            .update(&pid.to_ne_bytes(), bytes, MapFlags::ANY)
            .map_err(|e| TraceError::Load(format!("Python process map: {e:#}")))
    }

    /// Forgets process `pid`'s Python frames (it exited, or exec'd something else).
    pub fn forget(&self, pid: u32) {
        let _ = self.procs.delete(&pid.to_ne_bytes());
    }

    /// Tells BPF that code object `code` of process `pid` is named (remembered): events
    /// running only named code objects need not wake the consumer at once.
    pub fn named(&self, pid: u32, code: u64) {
        let mut key = [0u8; 16];
        key[..4].copy_from_slice(&pid.to_ne_bytes());
        key[8..].copy_from_slice(&code.to_ne_bytes());
        let _ = self.codes.update(&key, &[1], MapFlags::ANY);
    }
}

/// Whether the kernel hooks into the nvidia module run, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", content = "detail", rename_all = "snake_case")]
pub enum KernelHookStatus {
    /// fentry/fexit on `os_lock_user_pages`/`os_unlock_user_pages` are attached.
    Attached,
    /// Not tried: switched off, or there is no nvidia module with BTF here (the reason).
    NotApplicable(String),
    /// Tried and refused: the exact error.
    Refused(String),
}

/// One attached uprobe (entry or return).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AttachedUprobe {
    /// The probed symbol.
    pub symbol: &'static str,
    /// The file it lives in.
    pub path: PathBuf,
    /// The BPF program.
    pub program: &'static str,
    /// A return probe.
    pub retprobe: bool,
    /// The process whose calls trap (-1: every process mapping the file, filtered in BPF).
    pub pid: i32,
}

/// Kernel-side cost of one BPF program, from the kernel's run-time statistics.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ProgramCost {
    /// The program (see `src/bpf/*.bpf.c`).
    pub program: String,
    /// Times it ran (system-wide: a uprobe also runs, and returns early, for processes
    /// that are not traced).
    pub run_count: u64,
    /// Nanoseconds it ran in total.
    pub run_time_ns: u64,
}

impl ProgramCost {
    /// Mean nanoseconds per run.
    pub fn ns_per_run(&self) -> Option<f64> {
        (self.run_count > 0).then(|| self.run_time_ns as f64 / self.run_count as f64)
    }
}

/// The loaded programs, their links, and access to their maps.
pub struct Probes {
    main: Object,
    nvidia: Option<Object>,
    kernel_hooks: KernelHookStatus,
    links: Vec<Link>,
    /// Links dropped by [`Probes::drop_temporary`]: system-wide malloc probes, kept only
    /// until their per-process replacements are attached.
    temporary_links: Vec<Link>,
    uprobes: Vec<AttachedUprobe>,
    known_files: HashSet<(u64, u64)>,
    stats_fd: Option<OwnedFd>,
    stats_error: Option<String>,
    /// Uprobes go through `uprobe_multi` links (one per program and file): attaching is
    /// faster and detaching waits for one grace period per link, not per probe.
    multi: bool,
    /// A driver library probed is pinwise's CPU stand-in (see [`is_cuda_standin`]).
    cuda_standin: bool,
    /// Copies are fingerprinted (`--fingerprint`): entry points with
    /// [`UprobeSpec::with_fingerprint`] get those programs instead.
    fingerprint: bool,
    /// With `fingerprint`, also the entry points for asynchronous downloads
    /// ([`UprobeSpec::for_async_downloads`]).
    fingerprint_async: bool,
}

fn open(bytes: &[u8], name: &str) -> Result<OpenObject, TraceError> {
    ObjectBuilder::default()
        .name(name)
        .and_then(|b| b.open_memory(bytes))
        .map_err(|e| TraceError::Load(format!("opening BPF object {name}: {e:#}")))
}

/// Writes the `const volatile cfg_*` settings into an object's `.rodata` before loading,
/// at the offsets the skeleton's generated `rodata` types give.
fn set_rodata(object: &mut OpenObject, config: &BpfConfig, is_main: bool) {
    use crate::skel::{main::types::rodata as MainRo, nvidia::types::rodata as NvRo};
    use std::mem::offset_of;
    let put = |data: &mut [u8], offset: usize, value: u64| {
        if let Some(slot) = data.get_mut(offset..offset + 8) {
            slot.copy_from_slice(&value.to_ne_bytes());
        }
    };
    let put32 = |data: &mut [u8], offset: usize, value: u32| {
        if let Some(slot) = data.get_mut(offset..offset + 4) {
            slot.copy_from_slice(&value.to_ne_bytes());
        }
    };
    for mut map in object.maps_mut() {
        if !map.name().to_string_lossy().ends_with(".rodata") {
            continue;
        }
        let Some(data) = map.initial_value_mut() else {
            continue;
        };
        // Below the ring's size, or the consumer is never woken before the ring is full.
        let ring = u64::from(ringbuf_size(config.ringbuf_bytes));
        let wakeup = config.wakeup_bytes.clamp(1, (ring / 8).max(1));
        if is_main {
            put(data, offset_of!(MainRo, cfg_wakeup_bytes), wakeup);
            put(
                data,
                offset_of!(MainRo, cfg_min_mmap_bytes),
                config.min_mmap_bytes,
            );
            put(
                data,
                offset_of!(MainRo, cfg_malloc_min_bytes),
                config.malloc_min_bytes,
            );
            put32(
                data,
                offset_of!(MainRo, cfg_copy_stack_every),
                config.copy_stack_every,
            );
            put32(
                data,
                offset_of!(MainRo, cfg_alloc_stacks),
                u32::from(config.alloc_stacks),
            );
            put32(
                data,
                offset_of!(MainRo, cfg_dwarf_stacks),
                u32::from(config.dwarf_stacks),
            );
            put32(
                data,
                offset_of!(MainRo, cfg_enroll_on_cuda),
                u32::from(config.enroll_on_cuda),
            );
            put32(
                data,
                offset_of!(MainRo, cfg_python_frames),
                u32::from(config.python_frames),
            );
            put32(
                data,
                offset_of!(MainRo, cfg_fingerprint),
                u32::from(config.fingerprint),
            );
            put32(
                data,
                offset_of!(MainRo, cfg_fp_full_ppm),
                if config.fingerprint_full {
                    1_000_000
                } else {
                    config.fingerprint_check_ppm.min(1_000_000)
                },
            );
            put(
                data,
                offset_of!(MainRo, cfg_fp_full_max_bytes),
                config.fingerprint_full_max_bytes,
            );
        } else {
            put(data, offset_of!(NvRo, cfg_wakeup_bytes), wakeup);
        }
    }
}

fn page_size() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as u32
    } else {
        4096
    }
}

/// The ring buffer size the kernel accepts: a power of two, at least a page.
pub fn ringbuf_size(requested: u32) -> u32 {
    requested
        .max(page_size())
        .checked_next_power_of_two()
        .unwrap_or(1 << 31)
}

/// Whether this kernel has `uprobe_multi` links (Linux 6.6 and later).
pub fn uprobe_multi_supported() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (major, minor) >= (6, 6)
}

/// Whether the kernel has BTF for itself (`/sys/kernel/btf/vmlinux`).
pub fn has_vmlinux_btf() -> bool {
    Path::new("/sys/kernel/btf/vmlinux").exists()
}

/// Why the kernel hooks into the nvidia module cannot be tried here, if they cannot.
pub fn nvidia_hooks_not_applicable() -> Option<String> {
    if !Path::new("/sys/kernel/btf/nvidia").exists() {
        return Some(if Path::new("/sys/module/nvidia").exists() {
            "the nvidia module is loaded but has no BTF (/sys/kernel/btf/nvidia missing)".into()
        } else {
            "no nvidia kernel module (no /sys/module/nvidia, no /sys/kernel/btf/nvidia)".into()
        });
    }
    match std::fs::read_to_string("/proc/kallsyms") {
        Ok(text) => {
            for (_, function) in KERNEL_HOOKS {
                let found = text.lines().any(|l| {
                    let mut f = l.split_whitespace();
                    f.nth(2) == Some(function)
                });
                if !found {
                    return Some(format!("{function} is not in /proc/kallsyms"));
                }
            }
            None
        }
        Err(e) => Some(format!("/proc/kallsyms unreadable: {e}")),
    }
}

impl Probes {
    /// Loads both objects and attaches the tracepoints (and the kernel hooks where they
    /// apply). Uprobes come later, per library ([`Probes::attach_library`]).
    pub fn load(config: &BpfConfig) -> Result<Probes, TraceError> {
        route_libbpf_logs();
        if uprobe_multi_supported() {
            match Self::load_with(config, true) {
                Ok(p) => return Ok(p),
                Err(e @ TraceError::NotPermitted { .. }) => return Err(e),
                Err(e) => tracing::debug!("loading with uprobe_multi failed ({e}); without"),
            }
        }
        Self::load_with(config, false)
    }

    fn load_with(config: &BpfConfig, multi: bool) -> Result<Probes, TraceError> {
        let mut open_main = open(MAIN_OBJECT, "pinwise")?;
        set_rodata(&mut open_main, config, true);
        let btf = has_vmlinux_btf();
        for mut map in open_main.maps_mut() {
            if map.name() == "events" {
                map.set_max_entries(ringbuf_size(config.ringbuf_bytes))
                    .map_err(|e| TraceError::Load(format!("ring buffer size: {e:#}")))?;
            }
        }
        for mut prog in open_main.progs_mut() {
            let name = prog.name().to_string_lossy().into_owned();
            if name == PAGE_FAULT_TRACEPOINT.0 {
                prog.set_autoload(config.page_faults);
            } else if name == FORK_BTF_PROGRAM {
                prog.set_autoload(btf);
            } else if name == FORK_TRACEPOINT.0 {
                prog.set_autoload(!btf);
            }
            let section = prog.section().to_string_lossy();
            if multi && (section.starts_with("uprobe") || section.starts_with("uretprobe")) {
                prog.set_attach_type(libbpf_rs::ProgramAttachType::TraceUprobeMulti);
            }
        }
        let main = open_main.load().map_err(|e| TraceError::from_load(&e))?;

        let mut probes = Probes {
            main,
            nvidia: None,
            kernel_hooks: KernelHookStatus::NotApplicable("not tried".into()),
            links: Vec::new(),
            temporary_links: Vec::new(),
            uprobes: Vec::new(),
            known_files: HashSet::new(),
            stats_fd: None,
            stats_error: None,
            multi,
            cuda_standin: false,
            fingerprint: config.fingerprint,
            fingerprint_async: config.fingerprint_async,
        };

        let mut tracepoints: Vec<(&str, &str, &str)> = TRACEPOINTS.to_vec();
        if config.page_faults {
            tracepoints.push(PAGE_FAULT_TRACEPOINT);
        }
        if !btf {
            tracepoints.push(FORK_TRACEPOINT);
        }
        for (program, category, name) in tracepoints {
            let prog = probes.program(program)?;
            let link = prog
                .attach_tracepoint(TracepointCategory::Custom(category.into()), name)
                .map_err(|e| TraceError::Attach {
                    what: format!("tracepoint {category}/{name}"),
                    detail: format!("{e:#}"),
                })?;
            probes.links.push(link);
        }
        if btf {
            let link =
                probes
                    .program(FORK_BTF_PROGRAM)?
                    .attach()
                    .map_err(|e| TraceError::Attach {
                        what: "tp_btf/sched_process_fork".into(),
                        detail: format!("{e:#}"),
                    })?;
            probes.links.push(link);
        }

        probes.kernel_hooks = if !config.kernel_hooks {
            KernelHookStatus::NotApplicable("switched off".into())
        } else if let Some(why) = nvidia_hooks_not_applicable() {
            KernelHookStatus::NotApplicable(why)
        } else {
            match probes.load_kernel_hooks(config) {
                Ok(()) => KernelHookStatus::Attached,
                Err(e) => {
                    tracing::warn!("kernel hooks into the nvidia module refused: {e}");
                    KernelHookStatus::Refused(e)
                }
            }
        };
        probes.enable_stats();
        Ok(probes)
    }

    fn load_kernel_hooks(&mut self, config: &BpfConfig) -> Result<(), String> {
        let mut open_nv = open(NVIDIA_OBJECT, "pinwise_nvidia").map_err(|e| e.to_string())?;
        set_rodata(&mut open_nv, config, false);
        let mut fds: HashMap<String, OwnedFd> = HashMap::new();
        for map in self.main.maps() {
            let name = map.name().to_string_lossy().into_owned();
            if SHARED_MAPS.contains(&name.as_str()) {
                let fd = map
                    .as_fd()
                    .try_clone_to_owned()
                    .map_err(|e| format!("dup of map {name}: {e}"))?;
                fds.insert(name, fd);
            }
        }
        for mut map in open_nv.maps_mut() {
            let name = map.name().to_string_lossy().into_owned();
            if let Some(fd) = fds.get(&name) {
                map.reuse_fd(fd.as_fd())
                    .map_err(|e| format!("sharing map {name}: {e:#}"))?;
            }
        }
        // libbpf stops at the first program the kernel refuses and names it only in its
        // log: that line is the exact refusal (on the H200: `prog 'on_lock_user_pages':
        // BPF program load failed: -EPERM`).
        let sections: Vec<(String, String)> = open_nv
            .progs()
            .map(|p| {
                let name = p.name().to_string_lossy().into_owned();
                (name, p.section().to_string_lossy().into_owned())
            })
            .collect();
        let (loaded, refusals) = with_load_failures_logged(|| open_nv.load());
        let nv = loaded.map_err(|e| nvidia_load_error(&e, &refusals, &sections))?;
        let mut links = Vec::new();
        for (program, function) in KERNEL_HOOKS {
            let prog = nv
                .progs_mut()
                .find(|p| p.name() == *program)
                .ok_or_else(|| format!("program {program} missing from the object"))?;
            links.push(
                prog.attach_trace()
                    .map_err(|e| format!("attaching to {function}: {e:#}"))?,
            );
        }
        self.links.extend(links);
        self.nvidia = Some(nv);
        Ok(())
    }

    fn enable_stats(&mut self) {
        // SAFETY: bpf_enable_stats takes an enum value and returns a new fd or -errno.
        let fd = unsafe {
            libbpf_rs::libbpf_sys::bpf_enable_stats(libbpf_rs::libbpf_sys::BPF_STATS_RUN_TIME)
        };
        if fd >= 0 {
            // SAFETY: the fd was just returned to us by the kernel and is owned by no one else.
            self.stats_fd = Some(unsafe { OwnedFd::from_raw_fd(fd) });
        } else {
            self.stats_error = Some(std::io::Error::from_raw_os_error(-fd).to_string());
        }
    }

    fn program(&self, name: &str) -> Result<libbpf_rs::ProgramMut<'_>, TraceError> {
        self.main
            .progs_mut()
            .find(|p| p.name() == name)
            .ok_or_else(|| TraceError::Load(format!("program {name} missing from the object")))
    }

    fn map(&self, name: &str) -> libbpf_rs::Map<'_> {
        self.main
            .maps()
            .find(|m| m.name() == name)
            .unwrap_or_else(|| panic!("map {name} is defined in pinwise.bpf.c"))
    }

    /// The ring buffer every probe writes to.
    pub fn events_map(&self) -> libbpf_rs::Map<'_> {
        self.map("events")
    }

    /// Whether the kernel hooks run, or why not.
    pub fn kernel_hooks(&self) -> &KernelHookStatus {
        &self.kernel_hooks
    }

    /// Why per-program run-time statistics are unavailable, if they are.
    pub fn stats_error(&self) -> Option<&str> {
        self.stats_error.as_deref()
    }

    /// The uprobes attached so far.
    pub fn uprobes(&self) -> &[AttachedUprobe] {
        &self.uprobes
    }

    /// Whether a file (by `(dev, inode)` as [`file_id`] gives it) was looked at already
    /// (probed, or found to export nothing pinwise probes).
    pub fn knows_file(&self, path: &Path) -> bool {
        file_id(path).is_some_and(|id| self.known_files.contains(&id))
    }

    /// Whether a driver library probed is pinwise's CPU stand-in for libcuda (a test
    /// fixture): then no GPU moved the bytes traced.
    pub fn cuda_standin(&self) -> bool {
        self.cuda_standin
    }

    /// The files with uprobes on them.
    pub fn probed_files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = Vec::new();
        for u in &self.uprobes {
            if !files.contains(&u.path) {
                files.push(u.path.clone());
            }
        }
        files
    }

    /// Attaches every probe of `library`'s role to the functions `path` exports. Returns
    /// how many were attached; a file looked at before (same device and inode) is skipped
    /// (returns 0): probing it twice would report each call twice.
    pub fn attach_library(&mut self, path: &Path, library: Library) -> Result<usize, TraceError> {
        self.attach_file(path, library, -1, false)
    }

    /// Attaches the malloc-family probes on the C library `path` for process `pid` only
    /// (the trap is inserted in that process alone, and follows it across exec), or for
    /// every process (`pid` -1: each call of every process using that libc traps, to be
    /// filtered in BPF) as temporary probes that [`Probes::drop_temporary`] removes.
    pub fn attach_libc(&mut self, path: &Path, pid: i32) -> Result<usize, TraceError> {
        self.attach_file(path, Library::Libc, pid, pid < 0)
    }

    /// Attaches the malloc-family probes on an allocator linked into `path` (an executable
    /// or library defining jemalloc's or mimalloc's entry points, or its own `malloc`), for
    /// process `pid` only or, with -1, as temporary probes like [`Probes::attach_libc`]'s.
    /// Returns 0 when `path` defines none of them.
    pub fn attach_allocator(&mut self, path: &Path, pid: i32) -> Result<usize, TraceError> {
        self.attach_file(path, Library::Allocator, pid, pid < 0)
    }

    /// Detaches the temporary (system-wide) malloc probes.
    pub fn drop_temporary(&mut self) {
        self.temporary_links.clear();
        self.uprobes.retain(|u| {
            !(u.pid < 0
                && UPROBES.iter().any(|s| {
                    s.symbol == u.symbol && matches!(s.library, Library::Libc | Library::Allocator)
                }))
        });
    }

    fn attach_file(
        &mut self,
        path: &Path,
        library: Library,
        pid: i32,
        temporary: bool,
    ) -> Result<usize, TraceError> {
        let id = file_id(path).ok_or_else(|| TraceError::NoSuchLibrary(path.to_path_buf()))?;
        let per_process = matches!(library, Library::Libc | Library::Allocator);
        if !per_process && self.known_files.contains(&id) {
            return Ok(0);
        }
        let specs: Vec<&UprobeSpec> = UPROBES
            .iter()
            .filter(|s| {
                s.library == library
                    || (library == Library::Allocator && s.library == Library::Libc)
            })
            .collect();
        let offsets = symbol_offsets(path, specs.iter().map(|s| s.symbol))?;
        // (program, retprobe) -> the probes it gets in this file.
        type Group<'a> = ((&'static str, bool), Vec<(&'a UprobeSpec, u64)>);
        let mut groups: Vec<Group> = Vec::new();
        for spec in specs {
            let Some(&offset) = offsets.get(spec.symbol) else {
                continue;
            };
            let fingerprint =
                self.fingerprint && (self.fingerprint_async || !spec.for_async_downloads());
            let Some((entry, ret)) = spec.programs(fingerprint) else {
                continue;
            };
            let progs = [(entry, false)].into_iter().chain(ret.map(|r| (r, true)));
            for key in progs {
                match groups.iter_mut().find(|(k, _)| *k == key) {
                    // Two symbols at one address (aliases: aligned_alloc and memalign in
                    // some libcs) get one probe, or each call would be seen twice.
                    Some((_, list)) if list.iter().any(|(_, o)| *o == offset) => {}
                    Some((_, list)) => list.push((spec, offset)),
                    None => groups.push((key, vec![(spec, offset)])),
                }
            }
        }
        // Return probes first, and no entry probe where its return probe failed: an entry
        // seen without its return would stay in the `pending` map, where it hides that
        // thread's deeper calls and its mmaps (a process traced already, whose library was
        // found while tracing, may call in between). A return seen without its entry is
        // only counted.
        groups.sort_by_key(|((_, retprobe), _)| !retprobe);
        let mut no_return: HashSet<&str> = HashSet::new();
        let mut attached = 0;
        let mut errors = Vec::new();
        for ((program, retprobe), mut probes) in groups {
            if !retprobe {
                probes.retain(|(spec, _)| !no_return.contains(spec.symbol));
                if probes.is_empty() {
                    continue;
                }
            }
            let prog = self.program(program)?;
            let links: Vec<(Result<Link, libbpf_rs::Error>, Vec<&UprobeSpec>)> = if self.multi {
                let opts = UprobeMultiOpts {
                    offsets: probes.iter().map(|(_, o)| *o as usize).collect(),
                    cookies: probes.iter().map(|(s, _)| u64::from(s.func)).collect(),
                    retprobe,
                    ..Default::default()
                };
                vec![(
                    prog.attach_uprobe_multi_with_opts(pid, path, "", opts),
                    probes.iter().map(|(s, _)| *s).collect(),
                )]
            } else {
                probes
                    .iter()
                    .map(|(spec, offset)| {
                        let opts = UprobeOpts {
                            cookie: u64::from(spec.func),
                            retprobe,
                            ..Default::default()
                        };
                        (
                            prog.attach_uprobe_with_opts(pid, path, *offset as usize, opts),
                            vec![*spec],
                        )
                    })
                    .collect()
            };
            for (link, specs) in links {
                match link {
                    Ok(link) => {
                        if temporary {
                            self.temporary_links.push(link);
                        } else {
                            self.links.push(link);
                        }
                        for spec in specs {
                            self.uprobes.push(AttachedUprobe {
                                symbol: spec.symbol,
                                path: path.to_path_buf(),
                                program,
                                retprobe,
                                pid,
                            });
                            attached += 1;
                        }
                    }
                    Err(e) => {
                        let names: Vec<&str> = specs.iter().map(|s| s.symbol).collect();
                        errors.push(format!("{}: {e:#}", names.join(", ")));
                        if retprobe {
                            no_return.extend(names);
                        }
                    }
                }
            }
        }
        if attached == 0 && !errors.is_empty() {
            return Err(TraceError::NothingAttached {
                path: path.to_path_buf(),
                detail: errors.join("; "),
            });
        }
        for e in &errors {
            tracing::warn!("uprobe on {} not attached: {e}", path.display());
        }
        if library != Library::Allocator {
            // (An executable probed for its allocator may still be probed in another role.)
            self.known_files.insert(id);
        }
        if attached > 0 && library == Library::Driver && is_cuda_standin(path) {
            self.cuda_standin = true;
        }
        Ok(attached)
    }

    /// Attaches one BPF program at a file offset of `path` as an entry uprobe reporting
    /// function id `func` (for self-tests; real probes go through
    /// [`Probes::attach_library`]).
    pub fn attach_raw_uprobe(
        &mut self,
        path: &Path,
        offset: u64,
        program: &'static str,
        func: u32,
    ) -> Result<(), TraceError> {
        let prog = self.program(program)?;
        let link = if self.multi {
            let opts = UprobeMultiOpts {
                offsets: vec![offset as usize],
                cookies: vec![u64::from(func)],
                ..Default::default()
            };
            prog.attach_uprobe_multi_with_opts(-1, path, "", opts)
        } else {
            let opts = UprobeOpts {
                cookie: u64::from(func),
                ..Default::default()
            };
            prog.attach_uprobe_with_opts(-1, path, offset as usize, opts)
        };
        let link = link.map_err(|e| TraceError::Attach {
            what: format!("uprobe {program} on {}+{offset:#x}", path.display()),
            detail: format!("{e:#}"),
        })?;
        self.links.push(link);
        Ok(())
    }

    /// Adds a process to the traced set.
    pub fn trace_process(&self, pid: u32) -> Result<(), TraceError> {
        self.map("traced_tgids")
            .update(&pid.to_ne_bytes(), &[1], MapFlags::ANY)
            .map_err(|e| TraceError::Load(format!("adding PID {pid} to the traced set: {e:#}")))
    }

    /// Removes a process from the traced set.
    pub fn untrace_process(&self, pid: u32) {
        let _ = self.map("traced_tgids").delete(&pid.to_ne_bytes());
    }

    /// The processes traced now.
    pub fn traced_processes(&self) -> Vec<u32> {
        self.map("traced_tgids")
            .keys()
            .filter_map(|k| Some(u32::from_ne_bytes(k.as_slice().try_into().ok()?)))
            .collect()
    }

    /// While set, children forked by `pid` are traced (the tracer launching a command).
    pub fn set_spawner(&self, pid: u32, on: bool) -> Result<(), TraceError> {
        let map = self.map("spawners");
        let r = if on {
            map.update(&pid.to_ne_bytes(), &[1], MapFlags::ANY)
        } else {
            map.delete(&pid.to_ne_bytes())
        };
        r.map_err(|e| TraceError::Load(format!("spawner map: {e:#}")))
    }

    /// Threads whose mmaps and page faults are not reported (the tracer's own, when it
    /// traces itself).
    pub fn ignore_thread(&self, tid: u32) -> Result<(), TraceError> {
        self.map("ignored_tids")
            .update(&tid.to_ne_bytes(), &[1], MapFlags::ANY)
            .map_err(|e| TraceError::Load(format!("ignored-thread map: {e:#}")))
    }

    /// Handles of their own on the maps of Python processes (see [`PythonMap`]).
    pub fn python_map(&self) -> Result<PythonMap, TraceError> {
        let handle = |name: &str| {
            libbpf_rs::MapHandle::try_from(&self.map(name))
                .map_err(|e| TraceError::Load(format!("map {name}: {e:#}")))
        };
        Ok(PythonMap {
            procs: handle("py_procs")?,
            codes: handle("py_codes")?,
        })
    }

    fn percpu_sums(&self, map: &str, count: u32) -> Vec<u64> {
        let map = self.map(map);
        (0..count)
            .map(|i| {
                map.lookup_percpu(&i.to_ne_bytes(), MapFlags::ANY)
                    .ok()
                    .flatten()
                    .map(|per_cpu| {
                        per_cpu
                            .iter()
                            .filter_map(|v| Some(u64::from_ne_bytes(v.get(..8)?.try_into().ok()?)))
                            .sum()
                    })
                    .unwrap_or(0)
            })
            .collect()
    }

    /// The BPF-side counters (`enum pw_counter`), summed over CPUs.
    pub fn counters(&self) -> Vec<u64> {
        self.percpu_sums("counters", counters::COUNT)
    }

    /// Events dropped because the ring buffer was full.
    pub fn ringbuf_drops(&self) -> u64 {
        self.counters()[counters::RINGBUF_DROPS as usize]
    }

    /// Hits per function id (`enum pw_func`) in traced processes, summed over CPUs.
    pub fn function_hits(&self) -> Vec<u64> {
        self.percpu_sums("func_hits", probes::FUNC_COUNT as u32)
    }

    /// Kernel-side cost of every loaded program (empty where statistics are unavailable).
    pub fn program_costs(&self) -> Vec<ProgramCost> {
        let mut out = Vec::new();
        let objects = std::iter::once(&self.main).chain(self.nvidia.as_ref());
        for object in objects {
            for prog in object.progs() {
                if !prog.autoload() {
                    continue;
                }
                if let Some((run_count, run_time_ns)) = run_stats(prog.as_fd().as_raw_fd()) {
                    out.push(ProgramCost {
                        program: prog.name().to_string_lossy().into_owned(),
                        run_count,
                        run_time_ns,
                    });
                }
            }
        }
        out
    }
}

impl Drop for Probes {
    /// Detaches every probe. Each detach waits for the kernel's grace periods (30-110 ms
    /// each on the dev VM); dropping the links from several threads lets those waits
    /// overlap.
    fn drop(&mut self) {
        let links = std::mem::take(&mut self.links);
        std::thread::scope(|scope| {
            for link in links {
                // If no thread can be started, the closure (and the link) is dropped here.
                let _ = std::thread::Builder::new()
                    .name("pinwise-detach".into())
                    .spawn_scoped(scope, move || drop(link));
            }
        });
    }
}

/// (run_cnt, run_time_ns) of a program, from `bpf_prog_get_info_by_fd`.
fn run_stats(fd: i32) -> Option<(u64, u64)> {
    let mut info = libbpf_rs::libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: `info` is a zeroed bpf_prog_info (no pointers to fill in), `len` its size;
    // the kernel writes at most `len` bytes into it.
    let rc = unsafe { libbpf_rs::libbpf_sys::bpf_prog_get_info_by_fd(fd, &mut info, &mut len) };
    (rc == 0).then_some((info.run_cnt, info.run_time_ns))
}

/// File offsets of the function symbols `names` in the ELF file `path` (names it lacks
/// are absent from the result).
pub fn symbol_offsets<'a>(
    path: &Path,
    names: impl Iterator<Item = &'a str>,
) -> Result<HashMap<&'a str, u64>, TraceError> {
    let names: Vec<&str> = names.collect();
    let inspector = Inspector::new();
    let mut src = InspectElf::new(path);
    src.debug_syms = false;
    let found = inspector
        .lookup(&InspectSource::Elf(src), &names)
        .map_err(|e| TraceError::NothingAttached {
            path: path.to_path_buf(),
            detail: format!("reading its symbols: {e}"),
        })?;
    let mut out = HashMap::new();
    for (name, infos) in names.iter().zip(found) {
        if let Some(offset) = infos
            .iter()
            .filter(|i| i.sym_type == SymType::Function)
            .find_map(|i| i.file_offset)
        {
            out.insert(*name, offset);
        }
    }
    Ok(out)
}

/// Why the nvidia object did not load: the program the kernel refused at BPF_PROG_LOAD and
/// its error, as libbpf logged them, or else libbpf's error (a step before BPF_PROG_LOAD
/// failed: BTF, attach target, map).
fn nvidia_load_error(
    err: &libbpf_rs::Error,
    refusals: &[String],
    sections: &[(String, String)],
) -> String {
    let Some(refusal) = refusals.first() else {
        return format!(
            "loading the nvidia hooks (fexit/os_lock_user_pages, fentry/os_unlock_user_pages) \
             failed before any BPF_PROG_LOAD was refused: {err:#}"
        );
    };
    let section = sections
        .iter()
        .find(|(name, _)| refusal.contains(&format!("'{name}'")))
        .map_or("an nvidia hook", |(_, section)| section.as_str());
    format!("the kernel refused BPF_PROG_LOAD of {section} ({refusal}): {err:#}")
}

thread_local! {
    /// libbpf's "BPF program load failed" lines, while [`with_load_failures_logged`] runs
    /// on this thread (libbpf logs from the thread that loads).
    static LOAD_FAILURES: std::cell::RefCell<Option<Vec<String>>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `f` (a libbpf load) and returns, with its result, the programs libbpf reported
/// the kernel refused (its log lines, without the `libbpf: ` prefix).
fn with_load_failures_logged<T>(f: impl FnOnce() -> T) -> (T, Vec<String>) {
    LOAD_FAILURES.with(|c| *c.borrow_mut() = Some(Vec::new()));
    let out = f();
    let lines = LOAD_FAILURES
        .with(|c| c.borrow_mut().take())
        .unwrap_or_default();
    (out, lines)
}

/// Sends libbpf's own messages to `tracing` (warnings as debug: pinwise reports what
/// matters itself).
fn route_libbpf_logs() {
    libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Debug, libbpf_print)));
}

fn libbpf_print(level: libbpf_rs::PrintLevel, msg: String) {
    let msg = msg.trim_end();
    match level {
        libbpf_rs::PrintLevel::Warn => {
            tracing::debug!(target: "libbpf", "{msg}");
            if msg.contains("BPF program load failed") {
                let line = msg.strip_prefix("libbpf: ").unwrap_or(msg).to_string();
                LOAD_FAILURES.with(|c| {
                    if let Some(lines) = c.borrow_mut().as_mut() {
                        lines.push(line);
                    }
                });
            }
        }
        _ => tracing::trace!(target: "libbpf", "{msg}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_nvidia_module_the_hooks_fail_before_bpf_prog_load_and_say_so() {
        let name = "without_the_nvidia_module_the_hooks_fail_before_bpf_prog_load_and_say_so";
        if !pinwise_testkit::require_bpf(name) {
            return;
        }
        if Path::new("/sys/kernel/btf/nvidia").exists() {
            eprintln!("SKIPPED {name}: this machine has the nvidia module's BTF");
            return;
        }
        let config = BpfConfig {
            kernel_hooks: false,
            ..BpfConfig::default()
        };
        let mut probes = Probes::load(&config).expect("the main object loads");
        let err = probes.load_kernel_hooks(&config).unwrap_err();
        assert!(
            err.contains("before any BPF_PROG_LOAD was refused"),
            "{err}"
        );
        assert!(err.contains("os_lock_user_pages"), "{err}");
    }

    #[test]
    fn a_refused_program_is_named_with_its_attach_point_and_the_kernel_s_error() {
        let ((), lines) = with_load_failures_logged(|| {
            libbpf_print(
                libbpf_rs::PrintLevel::Warn,
                "libbpf: prog 'on_lock_user_pages': BPF program load failed: -EPERM\n".into(),
            );
            libbpf_print(
                libbpf_rs::PrintLevel::Warn,
                "libbpf: prog 'on_lock_user_pages': failed to load: -EPERM\n".into(),
            );
        });
        assert_eq!(
            lines,
            ["prog 'on_lock_user_pages': BPF program load failed: -EPERM"]
        );
        let sections = [
            (
                "on_lock_user_pages".to_string(),
                "fexit/os_lock_user_pages".to_string(),
            ),
            (
                "on_unlock_user_pages".to_string(),
                "fentry/os_unlock_user_pages".to_string(),
            ),
        ];
        let err = libbpf_rs::Error::from(std::io::Error::from_raw_os_error(libc::EPERM));
        let text = nvidia_load_error(&err, &lines, &sections);
        assert!(
            text.starts_with(
                "the kernel refused BPF_PROG_LOAD of fexit/os_lock_user_pages (prog \
                 'on_lock_user_pages': BPF program load failed: -EPERM)"
            ),
            "{text}"
        );
        assert!(
            !text.contains("os_unlock"),
            "only the refused program: {text}"
        );
        // Nothing captured outside a load; a failure before BPF_PROG_LOAD says so.
        libbpf_print(
            libbpf_rs::PrintLevel::Warn,
            "libbpf: prog 'x': BPF program load failed: -EINVAL".into(),
        );
        assert!(LOAD_FAILURES.with(|c| c.borrow().is_none()));
        let text = nvidia_load_error(&err, &[], &sections);
        assert!(
            text.contains("before any BPF_PROG_LOAD was refused"),
            "{text}"
        );
    }
}
