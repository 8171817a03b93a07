//! Call sites: from a raw return address in a traced process to a [`Site`] (module identity
//! + file offset) that is the same in every run of the same build, whatever ASLR and PIE do.
//!
//! The tracer keeps a snapshot of each traced process's `/proc/PID/maps` (re-read when an
//! address is not found in it, and when the process maps a new executable file), interns
//! each module once (build ID read with blazesym, else its path) into the history's
//! [`ModuleTable`], and maps an address to `(module, address - start + file offset)`.
//!
//! Choosing the *application's* call site of an allocation: BPF hands over exact return
//! addresses when it knows them (the caller of `cudaMallocHost`, the caller of the driver
//! function) and a window of the user stack. The first address outside CUDA, the C library
//! and pinwise itself wins. Words of the stack window count only if they point into
//! executable file mappings right after a call instruction (checked in the file's bytes).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pinwise_core::{ModuleId, ModuleIdentity, ModuleTable, Site};

use crate::libs::{is_driver_name, is_runtime_name};
use crate::procmaps::{path_in_process, Mapping, ProcMaps};

/// What a module is, for choosing the application's call site.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModuleRole {
    /// `libcuda.so*`.
    Driver,
    /// `libcudart.so*`.
    Runtime,
    /// The C and C++ runtime and the dynamic loader (`libc`, `ld-linux`, `libstdc++`, ...).
    System,
    /// pinwise's own libraries (`libpinwise*`).
    Pinwise,
    /// Anything else: the application, its libraries, PyTorch, Python.
    Application,
}

impl ModuleRole {
    /// The role of a module, from its file name.
    pub fn of_file_name(name: &str) -> ModuleRole {
        const SYSTEM: [&str; 9] = [
            "libc.so",
            "libc-",
            "ld-linux",
            "libpthread",
            "libdl.so",
            "librt.so",
            "libm.so",
            "libstdc++",
            "libgcc_s",
        ];
        if is_driver_name(name) {
            ModuleRole::Driver
        } else if is_runtime_name(name) {
            ModuleRole::Runtime
        } else if name.starts_with("libpinwise") {
            ModuleRole::Pinwise
        } else if SYSTEM.iter().any(|p| name.starts_with(p)) {
            ModuleRole::System
        } else {
            ModuleRole::Application
        }
    }

    /// Whether an allocation's call site may lie in such a module.
    pub fn is_application(self) -> bool {
        self == ModuleRole::Application
    }

    /// Whether this is CUDA's own code.
    pub fn is_cuda(self) -> bool {
        matches!(self, ModuleRole::Driver | ModuleRole::Runtime)
    }
}

/// The outcome of choosing an allocation's call site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SiteChoice {
    /// The application's call site, or the best exact address there was; `None` when no
    /// candidate could be placed in a module.
    pub site: Option<Site>,
    /// Whether the site lies in the application (not a fallback inside CUDA or libc).
    pub in_application: bool,
    /// Whether CUDA's own code was passed on the way to the first application frame: for
    /// an mmap, it means CUDA mapped that memory itself.
    pub through_cuda: bool,
}

struct ModuleEntry {
    identity: ModuleIdentity,
    /// Interned on first use, so that the module table holds only modules with sites.
    id: Option<ModuleId>,
    role: ModuleRole,
    /// Where the tracer can read the file.
    readable: PathBuf,
    /// The open file, for checking call instructions: opened on first need (a process
    /// can map hundreds of libraries; most are never looked into).
    file: Option<Option<File>>,
}

impl ModuleEntry {
    /// Reads what identifies the module (its build ID), while the process that maps it is
    /// alive (its `/proc/PID/root` may be needed to reach the file).
    fn open(pid: u32, m: &Mapping) -> ModuleEntry {
        let shown = m.file_path().unwrap_or("?").to_string();
        let readable = path_in_process(pid, &shown);
        ModuleEntry::new(shown, readable)
    }

    /// A module known as `shown`, readable at `readable`.
    fn new(shown: String, readable: PathBuf) -> ModuleEntry {
        let build_id = blazesym::helper::read_elf_build_id(&readable)
            .ok()
            .flatten()
            .map(|id| id.to_vec())
            .filter(|id| !id.is_empty());
        let name = shown.rsplit('/').next().unwrap_or("").to_string();
        let identity = match build_id {
            Some(id) => ModuleIdentity::with_build_id(shown, id),
            None => ModuleIdentity::from_path(shown),
        };
        ModuleEntry {
            identity,
            id: None,
            role: ModuleRole::of_file_name(&name),
            readable,
            file: None,
        }
    }

    /// The 8 bytes of code before file offset `offset`, if they can be read.
    fn code_before(&mut self, offset: u64) -> Option<[u8; 8]> {
        let readable = &self.readable;
        let file = self
            .file
            .get_or_insert_with(|| File::open(readable).ok())
            .as_ref()?;
        let mut code = [0u8; 8];
        file.read_exact_at(&mut code, offset.checked_sub(8)?).ok()?;
        Some(code)
    }
}

/// Counters of how call sites were resolved.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct SiteStats {
    /// Addresses placed in a module.
    pub resolved: u64,
    /// Addresses that fell in no file mapping, even after re-reading the maps.
    pub unresolved: u64,
    /// Times a `/proc/PID/maps` was read.
    pub maps_reads: u64,
    /// Allocations whose call site came from the stack window.
    pub from_stack: u64,
}

/// Turns addresses of traced processes into [`Site`]s. One per tracer; not thread-safe
/// (the tracer's event thread owns it).
pub struct SiteResolver {
    modules: Arc<ModuleTable>,
    by_file: HashMap<(u64, u64), ModuleEntry>,
    processes: HashMap<u32, ProcMaps>,
    /// Processes whose snapshot is known to be old (a library was mapped since).
    stale: HashSet<u32>,
    /// When each process's maps were last re-read because an address was missing.
    last_miss_reread: HashMap<u32, Instant>,
    /// Processes whose maps could not be read any more (exited): their last snapshot is
    /// all there is.
    gone: HashSet<u32>,
    call_checks: HashMap<(u64, u64, u64), bool>,
    stats: SiteStats,
}

impl SiteResolver {
    /// A resolver interning modules into `modules`.
    pub fn new(modules: Arc<ModuleTable>) -> Self {
        SiteResolver {
            modules,
            by_file: HashMap::new(),
            processes: HashMap::new(),
            stale: HashSet::new(),
            last_miss_reread: HashMap::new(),
            gone: HashSet::new(),
            call_checks: HashMap::new(),
            stats: SiteStats::default(),
        }
    }

    /// The module table sites refer to.
    pub fn modules(&self) -> &Arc<ModuleTable> {
        &self.modules
    }

    /// Counters so far.
    pub fn stats(&self) -> SiteStats {
        self.stats
    }

    /// Identifies a file ahead of time (the executable of a launched command, the libraries
    /// probed), so that sites the kernel placed in it resolve even if no maps snapshot of
    /// the process was taken before it exited.
    pub fn learn_file(&mut self, path: &std::path::Path) {
        let Some(key) = crate::libs::file_id(path) else {
            return;
        };
        // The canonical path, as /proc/PID/maps shows it: a module without a build ID is
        // known by its path, which must not depend on how it was reached.
        let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        self.by_file
            .entry(key)
            .or_insert_with(|| ModuleEntry::new(real.display().to_string(), real.clone()));
    }

    /// Re-reads the maps of `pid` (a library was loaded, or the process exec'd). Returns
    /// false when the process is gone (the old snapshot is kept).
    pub fn refresh(&mut self, pid: u32) -> bool {
        self.stale.remove(&pid);
        if self.gone.contains(&pid) {
            return false;
        }
        self.stats.maps_reads += 1;
        match ProcMaps::read(pid) {
            Ok(maps) if !maps.is_empty() => {
                // Identify the modules now: the process may be gone when an address in
                // them needs a site.
                for m in maps.mappings().iter().filter(|m| m.exec && m.is_file()) {
                    self.by_file
                        .entry((m.dev, m.inode))
                        .or_insert_with(|| ModuleEntry::open(pid, m));
                }
                self.processes.insert(pid, maps);
                true
            }
            _ => {
                self.gone.insert(pid);
                false
            }
        }
    }

    /// Drops the snapshot of `pid` (after exec: the old address space is gone).
    pub fn forget(&mut self, pid: u32) {
        self.processes.remove(&pid);
        self.stale.remove(&pid);
        self.gone.remove(&pid);
        self.last_miss_reread.remove(&pid);
    }

    /// Notes that `pid` mapped something new: its maps are re-read before the next use
    /// (the old snapshot stays if the process is gone by then).
    pub fn mark_stale(&mut self, pid: u32) {
        self.stale.insert(pid);
    }

    /// The current snapshot of `pid`'s maps, read if there is none yet or it is stale.
    pub fn maps(&mut self, pid: u32) -> Option<&ProcMaps> {
        if !self.processes.contains_key(&pid) || self.stale.contains(&pid) {
            self.refresh(pid);
        }
        self.processes.get(&pid)
    }

    /// The mapping (file or not) `addr` lies in, for telling host from device memory.
    pub fn mapping_of(&mut self, pid: u32, addr: u64) -> Option<Mapping> {
        self.find_mapping(pid, addr, true, |_| true)
    }

    /// The file mapping `addr` lies in.
    fn mapping(&mut self, pid: u32, addr: u64, reread_on_miss: bool) -> Option<Mapping> {
        self.find_mapping(pid, addr, reread_on_miss, Mapping::is_file)
    }

    /// The mapping `addr` lies in, if `wanted` accepts it. On a miss the maps are re-read,
    /// at most every 10 ms per process: addresses in no file (JIT code calling CUDA, say)
    /// would otherwise cost a read of `/proc/PID/maps` per event. A newly mapped library
    /// does not wait for that: its mmap marks the snapshot stale.
    fn find_mapping(
        &mut self,
        pid: u32,
        addr: u64,
        reread_on_miss: bool,
        wanted: impl Fn(&Mapping) -> bool,
    ) -> Option<Mapping> {
        let hit = self
            .maps(pid)
            .and_then(|m| m.find(addr))
            .filter(|m| wanted(m));
        if hit.is_some() || !reread_on_miss {
            return hit.cloned();
        }
        let now = Instant::now();
        let recent = self
            .last_miss_reread
            .get(&pid)
            .is_some_and(|t| now.duration_since(*t) < Duration::from_millis(10));
        if recent {
            return None;
        }
        self.last_miss_reread.insert(pid, now);
        if !self.refresh(pid) {
            return None;
        }
        self.processes
            .get(&pid)?
            .find(addr)
            .filter(|m| wanted(m))
            .cloned()
    }

    /// A place in a module, before it is interned (only chosen sites are).
    fn entry(&mut self, pid: u32, m: &Mapping) -> &mut ModuleEntry {
        self.by_file
            .entry((m.dev, m.inode))
            .or_insert_with(|| ModuleEntry::open(pid, m))
    }

    /// Interns the module of `file` (a key of `by_file`) and makes the site.
    fn intern(&mut self, place: Place) -> Site {
        let modules = &self.modules;
        let entry = self
            .by_file
            .get_mut(&place.file)
            .expect("places are made from known files");
        let module = *entry
            .id
            .get_or_insert_with(|| modules.intern(&entry.identity));
        Site {
            module,
            offset: place.offset,
        }
    }

    /// The site of an exact address (a return address BPF read at a function entry).
    pub fn site(&mut self, pid: u32, addr: u64) -> Option<Site> {
        let place = self.place(pid, addr, true)?;
        Some(self.intern(place))
    }

    fn place(&mut self, pid: u32, addr: u64, reread_on_miss: bool) -> Option<Place> {
        if addr == 0 {
            return None;
        }
        let Some(m) = self.mapping(pid, addr, reread_on_miss) else {
            if reread_on_miss {
                self.stats.unresolved += 1;
            }
            return None;
        };
        let role = self.entry(pid, &m).role;
        self.stats.resolved += 1;
        Some(Place {
            file: (m.dev, m.inode),
            offset: m.file_offset(addr),
            role,
        })
    }

    /// `addr`'s place if the code right before it in its file is a call instruction, i.e.
    /// `addr` is a return address and not a stale pointer into code.
    fn follows_call(&mut self, pid: u32, addr: u64) -> Option<Place> {
        let m = self.mapping(pid, addr, false)?;
        if !m.exec {
            return None;
        }
        let offset = m.file_offset(addr);
        let key = (m.dev, m.inode, offset);
        let ok = match self.call_checks.get(&key) {
            Some(ok) => *ok,
            None => {
                let ok = self
                    .entry(pid, &m)
                    .code_before(offset)
                    .is_some_and(|code| is_call_before(&code));
                self.call_checks.insert(key, ok);
                ok
            }
        };
        if !ok {
            return None;
        }
        let role = self.entry(pid, &m).role;
        Some(Place {
            file: (m.dev, m.inode),
            offset,
            role,
        })
    }

    /// Places an exact address the kernel already placed in a file (see [`ExactAddr`]),
    /// else through the maps.
    fn place_exact(&mut self, pid: u32, exact: &ExactAddr) -> Option<Place> {
        if let Some((dev, ino)) = exact.file {
            let file = (kernel_dev_key(dev), ino);
            if !self.by_file.contains_key(&file) {
                // A file not seen yet: the process's maps may name it.
                self.maps(pid);
                if !self.by_file.contains_key(&file) && !self.gone.contains(&pid) {
                    self.refresh(pid);
                }
            }
            if let Some(entry) = self.by_file.get(&file) {
                self.stats.resolved += 1;
                return Some(Place {
                    file,
                    offset: exact.offset,
                    role: entry.role,
                });
            }
        }
        self.place(pid, exact.addr, true)
    }

    /// Chooses the application's call site among exact return addresses (tried first, in
    /// order) and then the words of a stack window (only those that follow a call).
    pub fn choose(&mut self, pid: u32, exact: &[ExactAddr], stack: &[u8]) -> SiteChoice {
        let mut fallback: Option<Place> = None;
        let mut through_cuda = false;
        let mut chosen: Option<Place> = None;
        for exact in exact {
            if let Some(place) = self.place_exact(pid, exact) {
                if place.role.is_application() {
                    chosen = Some(place);
                    break;
                }
                through_cuda |= place.role.is_cuda();
                fallback.get_or_insert(place);
            }
        }
        if chosen.is_none() {
            for word in stack.chunks_exact(8) {
                let addr = u64::from_le_bytes(word.try_into().expect("8-byte chunk"));
                if addr < 0x1000 {
                    continue;
                }
                if let Some(place) = self.follows_call(pid, addr) {
                    if place.role.is_application() {
                        self.stats.from_stack += 1;
                        chosen = Some(place);
                        break;
                    }
                    through_cuda |= place.role.is_cuda();
                    fallback.get_or_insert(place);
                }
            }
        }
        let in_application = chosen.is_some();
        SiteChoice {
            site: chosen.or(fallback).map(|p| self.intern(p)),
            in_application,
            through_cuda,
        }
    }
}

/// A return address BPF read at a function entry, with its file placement if the kernel
/// made one at event time (`bpf_find_vma`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExactAddr {
    /// The address in the process.
    pub addr: u64,
    /// The file it lies in: (kernel `dev_t`, inode), when placed.
    pub file: Option<(u64, u64)>,
    /// Its offset in that file (meaningful with `file`).
    pub offset: u64,
}

impl ExactAddr {
    /// An address the kernel did not place.
    pub fn at(addr: u64) -> Self {
        ExactAddr {
            addr,
            file: None,
            offset: 0,
        }
    }
}

/// The kernel's `dev_t` (major << 20 | minor) as the `major << 32 | minor` key that
/// `/proc/PID/maps` and [`crate::libs::file_id`] give.
pub fn kernel_dev_key(dev: u64) -> u64 {
    ((dev >> 20) << 32) | (dev & 0xf_ffff)
}

/// An address placed in a module file, not interned yet.
#[derive(Debug, Clone, Copy)]
struct Place {
    file: (u64, u64),
    offset: u64,
    role: ModuleRole,
}

/// Whether the 8 bytes of code before a return address end with an x86-64 call:
/// `E8 rel32` (5 bytes), or `FF /2` (indirect call) in its 2-, 3-, 4-, 6- and 7-byte forms
/// (register, `[reg]`, `[reg+disp8]`, SIB, `[reg+disp32]`, `[rip+disp32]`); a REX prefix
/// before `FF` does not change where the instruction ends.
pub fn is_call_before(code: &[u8; 8]) -> bool {
    if code[3] == 0xE8 {
        return true;
    }
    for len in [2usize, 3, 4, 6, 7] {
        let at = 8 - len;
        if code[at] != 0xFF {
            continue;
        }
        let modrm = code[at + 1];
        if (modrm >> 3) & 7 != 2 {
            continue;
        }
        let md = modrm >> 6;
        let rm = modrm & 7;
        let sib_base = code.get(at + 2).map(|sib| sib & 7);
        let encoded = match (md, rm) {
            (3, _) => 2,
            (0, 4) => {
                if sib_base == Some(5) {
                    7
                } else {
                    3
                }
            }
            (0, 5) => 6,
            (0, _) => 2,
            (1, 4) => 4,
            (1, _) => 3,
            (2, 4) => 7,
            (2, _) => 6,
            _ => continue,
        };
        if encoded == len {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends_with(bytes: &[u8]) -> [u8; 8] {
        let mut code = [0x90u8; 8];
        code[8 - bytes.len()..].copy_from_slice(bytes);
        code
    }

    #[test]
    fn recognizes_call_instructions_before_return_addresses() {
        assert!(is_call_before(&ends_with(&[0xE8, 1, 2, 3, 4]))); // call rel32
        assert!(is_call_before(&ends_with(&[0xFF, 0xD0]))); // call rax
        assert!(is_call_before(&ends_with(&[0x41, 0xFF, 0xD3]))); // call r11
        assert!(is_call_before(&ends_with(&[0xFF, 0x15, 1, 2, 3, 4]))); // call [rip+x]
        assert!(is_call_before(&ends_with(&[0xFF, 0x50, 0x08]))); // call [rax+8]
        assert!(is_call_before(&ends_with(&[0xFF, 0x54, 0x24, 0x08]))); // call [rsp+8]
        assert!(is_call_before(&ends_with(&[0xFF, 0x90, 1, 2, 3, 4]))); // call [rax+disp32]
        assert!(is_call_before(&ends_with(&[0xFF, 0x10]))); // call [rax]
        assert!(!is_call_before(&[0x90; 8])); // nops
        assert!(!is_call_before(&ends_with(&[0xFF, 0xE0]))); // jmp rax (FF /4)
        assert!(!is_call_before(&ends_with(&[0x48, 0x89, 0xC7]))); // mov rdi, rax
    }

    #[test]
    fn roles_of_modules() {
        assert_eq!(ModuleRole::of_file_name("libcuda.so.1"), ModuleRole::Driver);
        assert_eq!(
            ModuleRole::of_file_name("libcudart.so.13"),
            ModuleRole::Runtime
        );
        assert_eq!(ModuleRole::of_file_name("libc.so.6"), ModuleRole::System);
        assert_eq!(
            ModuleRole::of_file_name("ld-linux-x86-64.so.2"),
            ModuleRole::System
        );
        assert_eq!(
            ModuleRole::of_file_name("libstdc++.so.6"),
            ModuleRole::System
        );
        assert_eq!(
            ModuleRole::of_file_name("libpinwise_preload.so"),
            ModuleRole::Pinwise
        );
        assert_eq!(
            ModuleRole::of_file_name("libtorch_cuda.so"),
            ModuleRole::Application
        );
        assert_eq!(ModuleRole::of_file_name("app"), ModuleRole::Application);
    }

    #[test]
    fn places_own_code_in_this_module_with_a_stable_offset() {
        let table = ModuleTable::shared();
        let mut resolver = SiteResolver::new(table.clone());
        let pid = std::process::id();
        let here = places_own_code_in_this_module_with_a_stable_offset as *const () as u64;
        let site = resolver
            .site(pid, here)
            .expect("own code is in a file mapping");
        let exe = std::env::current_exe().unwrap();
        let identity = table.get(site.module).unwrap();
        assert_eq!(
            std::fs::canonicalize(&identity.path).unwrap(),
            std::fs::canonicalize(&exe).unwrap()
        );
        // The same address from another snapshot gives the same site.
        resolver.forget(pid);
        assert_eq!(resolver.site(pid, here), Some(site));
        // Anonymous memory is no module.
        let heap = Box::new(0u64);
        assert_eq!(resolver.site(pid, &*heap as *const u64 as u64), None);
        assert_eq!(resolver.stats().unresolved, 1);
        // Misses do not re-read the maps every time (at most every 10 ms).
        let reads = resolver.stats().maps_reads;
        for _ in 0..50 {
            assert_eq!(resolver.site(pid, &*heap as *const u64 as u64), None);
        }
        assert!(
            resolver.stats().maps_reads - reads < 50,
            "{:?}",
            resolver.stats()
        );
    }

    /// An address in this test binary's code that follows a `call rel32`.
    fn a_return_address_in_this_binary() -> u64 {
        let start = places_own_code_in_this_module_with_a_stable_offset as *const () as u64;
        let mem = File::open("/proc/self/mem").unwrap();
        let mut code = [0u8; 512];
        mem.read_exact_at(&mut code, start).unwrap();
        (8..code.len() as u64)
            .find(|&end| {
                let window: [u8; 8] = code[(end - 8) as usize..end as usize].try_into().unwrap();
                window[3] == 0xE8 && is_call_before(&window)
            })
            .map(|end| start + end)
            .expect("the test function makes calls")
    }

    #[test]
    fn chooses_the_first_application_frame_of_a_stack_window() {
        let table = ModuleTable::shared();
        let mut resolver = SiteResolver::new(table.clone());
        let pid = std::process::id();
        let ret = a_return_address_in_this_binary();
        let in_libc = libc::getpid as *const () as u64;
        let heap = Box::new(7u64);
        let mut stack = Vec::new();
        for word in [0u64, &*heap as *const u64 as u64, 0x1234, ret, 0] {
            stack.extend_from_slice(&word.to_le_bytes());
        }
        // libc is passed over; the stack's return address is the application's site.
        let choice = resolver.choose(pid, &[ExactAddr::at(in_libc)], &stack);
        assert!(choice.in_application);
        assert!(!choice.through_cuda);
        assert_eq!(choice.site, resolver.site(pid, ret));
        assert_eq!(resolver.stats().from_stack, 1);

        // Without an application frame, the first exact address is the fallback.
        let choice = resolver.choose(pid, &[ExactAddr::at(in_libc)], &[0u8; 16]);
        assert!(!choice.in_application);
        assert_eq!(choice.site, resolver.site(pid, in_libc));
        assert_ne!(choice.site.unwrap().module, ModuleId::UNKNOWN);

        // A pointer into code that does not follow a call is not a frame.
        let not_after_call =
            places_own_code_in_this_module_with_a_stable_offset as *const () as u64;
        let choice = resolver.choose(pid, &[], &not_after_call.to_le_bytes());
        assert_eq!(choice.site, None);
    }

    #[test]
    fn a_site_placed_by_the_kernel_resolves_after_the_process_is_gone() {
        use std::os::unix::fs::MetadataExt;
        let table = ModuleTable::shared();
        let mut resolver = SiteResolver::new(table.clone());
        let exe = std::env::current_exe().unwrap();
        resolver.learn_file(&exe);
        let meta = std::fs::metadata(&exe).unwrap();
        let kernel_dev =
            (u64::from(libc::major(meta.dev())) << 20) | u64::from(libc::minor(meta.dev()));
        assert_eq!(
            kernel_dev_key(kernel_dev),
            crate::libs::file_id(&exe).unwrap().0
        );
        // No such process: only the kernel's placement and the learned file can help.
        let gone = u32::MAX - 3;
        let exact = ExactAddr {
            addr: 0xdead_beef,
            file: Some((kernel_dev, meta.ino())),
            offset: 0x1234,
        };
        let choice = resolver.choose(gone, &[exact], &[]);
        let site = choice.site.expect("placed");
        assert!(choice.in_application);
        assert_eq!(site.offset, 0x1234);
        let module = table.get(site.module).unwrap();
        assert_eq!(
            std::path::Path::new(&module.path),
            std::fs::canonicalize(&exe).unwrap()
        );
        // Unplaced, the same address is nowhere.
        assert_eq!(
            resolver
                .choose(gone, &[ExactAddr::at(0xdead_beef)], &[])
                .site,
            None
        );
    }
}
