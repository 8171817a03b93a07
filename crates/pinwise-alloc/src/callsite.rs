//! Call sites: turning "who asked for this allocation" into a [`Site`] that is the same in
//! every run of the same build.
//!
//! - From C (and from the preload library) the caller is a **return address**. It is
//!   normalized in-process: `dl_iterate_phdr` gives each loaded module's load bias, its
//!   `PT_LOAD` segments and its `PT_NOTE`s; the module is identified by its ELF build ID
//!   (else its path), and the address becomes an offset in the module's file (the same
//!   convention as the eBPF tracer's symbolizer). The module list is cached and rescanned
//!   only when an address falls outside every known module (a library loaded later).
//! - From Rust the caller is a [`std::panic::Location`] (`#[track_caller]`): the site is the
//!   module that contains pinwise-alloc's code, at a stable hash of `file:line:column` with
//!   the top bit set (so it never collides with a real file offset).

use std::ffi::CStr;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;
use pinwise_core::{ModuleId, ModuleIdentity, ModuleTable, Site};

/// Marks offsets that are hashes of source locations rather than file offsets.
pub const LOCATION_SITE_BIT: u64 = 1 << 63;

#[derive(Debug, Clone)]
struct LoadSegment {
    /// Runtime address range.
    start: usize,
    end: usize,
    /// `p_offset` of the segment: where its first byte lies in the file.
    offset: u64,
}

#[derive(Debug, Clone)]
struct LoadedModule {
    start: usize,
    end: usize,
    id: ModuleId,
    segments: Vec<LoadSegment>,
}

/// A module as `dl_iterate_phdr` describes it, before interning.
#[derive(Debug)]
struct ScannedModule {
    path: String,
    build_id: Option<Vec<u8>>,
    segments: Vec<LoadSegment>,
}

/// Turns return addresses and source locations into [`Site`]s, interning modules into a
/// shared [`ModuleTable`]. Cheap after the first call for a module: one read lock and a
/// binary search.
#[derive(Debug)]
pub struct InProcessSiteResolver {
    modules: Arc<ModuleTable>,
    loaded: RwLock<Vec<LoadedModule>>,
    self_module: OnceLock<ModuleId>,
}

impl InProcessSiteResolver {
    /// A resolver interning into `modules`.
    pub fn new(modules: Arc<ModuleTable>) -> Self {
        InProcessSiteResolver {
            modules,
            loaded: RwLock::new(Vec::new()),
            self_module: OnceLock::new(),
        }
    }

    /// The module table sites refer to.
    pub fn modules(&self) -> &Arc<ModuleTable> {
        &self.modules
    }

    /// The site of return address `addr`. An address in no loaded module gives the unknown
    /// module with the raw address as offset (it will not match across runs).
    pub fn resolve(&self, addr: usize) -> Site {
        if let Some(site) = self.lookup(addr) {
            return site;
        }
        self.rescan();
        self.lookup(addr).unwrap_or(Site {
            module: ModuleId::UNKNOWN,
            offset: addr as u64,
        })
    }

    /// The site of a Rust source location: this module at a hash of `file:line:column`.
    pub fn resolve_location(&self, loc: &Location<'_>) -> Site {
        Site {
            module: self.self_module(),
            offset: location_offset(loc.file(), loc.line(), loc.column()),
        }
    }

    /// The module that contains this crate's code.
    pub fn self_module(&self) -> ModuleId {
        *self.self_module.get_or_init(|| {
            let here = InProcessSiteResolver::resolve as *const () as usize;
            self.resolve(here).module
        })
    }

    fn lookup(&self, addr: usize) -> Option<Site> {
        let loaded = self.loaded.read();
        let i = loaded.partition_point(|m| m.start <= addr).checked_sub(1)?;
        let m = &loaded[i];
        if addr >= m.end {
            return None;
        }
        let seg = m
            .segments
            .iter()
            .find(|s| addr >= s.start && addr < s.end)?;
        Some(Site {
            module: m.id,
            offset: (addr - seg.start) as u64 + seg.offset,
        })
    }

    fn rescan(&self) {
        let scanned = scan_modules();
        let mut loaded: Vec<LoadedModule> = scanned
            .into_iter()
            .filter(|m| !m.segments.is_empty())
            .map(|m| {
                let identity = match m.build_id {
                    Some(id) if !id.is_empty() => ModuleIdentity::with_build_id(m.path, id),
                    _ => ModuleIdentity::from_path(m.path),
                };
                LoadedModule {
                    start: m.segments.iter().map(|s| s.start).min().unwrap_or(0),
                    end: m.segments.iter().map(|s| s.end).max().unwrap_or(0),
                    id: self.modules.intern(&identity),
                    segments: m.segments,
                }
            })
            .collect();
        loaded.sort_by_key(|m| m.start);
        *self.loaded.write() = loaded;
    }
}

/// The offset a source location stands for: FNV-1a of `file:line:column`, top bit set.
pub fn location_offset(file: &str, line: u32, column: u32) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET_BASIS;
    let mut feed = |bytes: &[u8]| {
        for &b in bytes {
            h ^= b as u64;
            h = h.wrapping_mul(PRIME);
        }
    };
    feed(file.as_bytes());
    feed(b":");
    feed(&line.to_le_bytes());
    feed(b":");
    feed(&column.to_le_bytes());
    (h >> 1) | LOCATION_SITE_BIT
}

/// Set while [`scan_modules`] walks the loader's list of modules, or while a fork is under
/// way ([`hold_walks_for_fork`]). A child forked while a thread of its parent was inside
/// `dl_iterate_phdr` inherits the loader's lock held by a thread that does not exist in it,
/// and anything in the child that asks the loader (`dlopen`, `dlsym`, an unwinder) waits
/// forever; so a fork waits for a walk of pinwise's to end, and no walk starts during one.
static LOADER_WALK: AtomicBool = AtomicBool::new(false);

/// Marks a walk of the loader's list as under way until dropped (waiting for a fork under
/// way, or another walk, to end first).
struct LoaderWalk;

impl LoaderWalk {
    fn begin() -> LoaderWalk {
        while LOADER_WALK
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::thread::yield_now();
        }
        LoaderWalk
    }
}

impl Drop for LoaderWalk {
    fn drop(&mut self) {
        LOADER_WALK.store(false, Ordering::Release);
    }
}

/// For a `pthread_atfork` prepare handler: takes the walk marker if no walk of the loader's
/// list is under way (one atomic operation, async-signal-safe); `true` when taken, and then
/// no walk starts until [`release_walks_after_fork`]. The caller retries for a bounded
/// time, and forks regardless if a walk does not end.
pub fn hold_walks_for_fork() -> bool {
    LOADER_WALK
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
}

/// After the fork (in the parent and in the child), when [`hold_walks_for_fork`] took the
/// marker: walks may start again.
pub fn release_walks_after_fork() {
    LOADER_WALK.store(false, Ordering::Release);
}

/// Lists the loaded modules with `dl_iterate_phdr`.
fn scan_modules() -> Vec<ScannedModule> {
    let _walk = LoaderWalk::begin();
    let mut out: Vec<ScannedModule> = Vec::new();
    // SAFETY: the callback only reads the `dl_phdr_info` the loader passes for the duration
    // of the call, and `data` is the `Vec` above, alive for the whole call.
    unsafe {
        libc::dl_iterate_phdr(
            Some(scan_one),
            &mut out as *mut Vec<ScannedModule> as *mut libc::c_void,
        );
    }
    out
}

unsafe extern "C" fn scan_one(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: `data` is the `&mut Vec<ScannedModule>` passed by `scan_modules`.
    let out = unsafe { &mut *(data as *mut Vec<ScannedModule>) };
    // SAFETY: the loader passes a valid `dl_phdr_info` for the duration of the callback.
    let info = unsafe { &*info };
    let bias = info.dlpi_addr as usize;
    let phdrs: &[libc::Elf64_Phdr] = if info.dlpi_phdr.is_null() || info.dlpi_phnum == 0 {
        &[]
    } else {
        // SAFETY: the loader's program header table of `dlpi_phnum` entries.
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) }
    };
    let name = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: a NUL-terminated string owned by the loader.
        unsafe { CStr::from_ptr(info.dlpi_name) }
            .to_string_lossy()
            .into_owned()
    };
    let path = if name.is_empty() {
        std::fs::read_link("/proc/self/exe")
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "[main]".to_string())
    } else {
        name
    };
    let mut segments = Vec::new();
    let mut build_id = None;
    for ph in phdrs {
        match ph.p_type {
            libc::PT_LOAD if ph.p_memsz > 0 => {
                let start = bias.wrapping_add(ph.p_vaddr as usize);
                segments.push(LoadSegment {
                    start,
                    end: start + ph.p_memsz as usize,
                    offset: ph.p_offset,
                });
            }
            libc::PT_NOTE if build_id.is_none() && ph.p_filesz > 0 => {
                let start = bias.wrapping_add(ph.p_vaddr as usize) as *const u8;
                // SAFETY: a PT_NOTE segment is mapped (it lies inside a PT_LOAD segment) for
                // `p_filesz` bytes at its load address.
                let notes = unsafe { std::slice::from_raw_parts(start, ph.p_filesz as usize) };
                build_id = gnu_build_id(notes, ph.p_align.max(4) as usize);
            }
            _ => {}
        }
    }
    out.push(ScannedModule {
        path,
        build_id,
        segments,
    });
    0
}

/// Finds the `NT_GNU_BUILD_ID` note in a note segment (with `object`'s note iterator, which
/// only reads the slice: no allocation but the returned copy, no lock; it runs inside the
/// `dl_iterate_phdr` callback). An alignment other than 8 reads as 4, as the loader lays
/// notes out.
pub fn gnu_build_id(notes: &[u8], align: usize) -> Option<Vec<u8>> {
    use object::elf::{FileHeader64, NT_GNU_BUILD_ID};
    use object::read::elf::NoteIterator;
    use object::NativeEndian;

    let align = if align == 8 { 8 } else { 4 };
    let mut iter =
        NoteIterator::<FileHeader64<NativeEndian>>::new(NativeEndian, align, notes).ok()?;
    while let Ok(Some(note)) = iter.next() {
        if note.n_type(NativeEndian) == NT_GNU_BUILD_ID && note.name() == b"GNU" {
            return Some(note.desc().to_vec());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fork_holds_walks_of_the_loader_and_waits_for_one_under_way() {
        // Held for a fork: a second hold fails, and a walk waits until it is released.
        assert!(hold_walks_for_fork());
        assert!(!hold_walks_for_fork());
        let walker = std::thread::spawn(|| scan_modules().len());
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!walker.is_finished(), "a walk started during a fork");
        release_walks_after_fork();
        assert!(walker.join().unwrap() > 0, "the walk lists the modules");
        // A walk under way keeps a fork's hold off until it ends.
        let walk = LoaderWalk::begin();
        assert!(!hold_walks_for_fork());
        drop(walk);
        // (Retried: under `cargo test` another test's walk may be under way.)
        let held = (0..10_000).any(|_| {
            hold_walks_for_fork() || {
                std::thread::yield_now();
                false
            }
        });
        assert!(held);
        release_walks_after_fork();
    }

    #[test]
    fn own_code_resolves_to_a_module_with_a_stable_offset() {
        let table = ModuleTable::shared();
        let r = InProcessSiteResolver::new(table.clone());
        let addr = own_code_resolves_to_a_module_with_a_stable_offset as *const () as usize;
        let site = r.resolve(addr);
        assert_ne!(site.module, ModuleId::UNKNOWN);
        let identity = table.get(site.module).unwrap();
        assert!(
            identity.path.contains("pinwise_alloc"),
            "test binary path: {}",
            identity.path
        );
        // Two addresses 16 bytes apart are 16 apart in the file too.
        assert_eq!(r.resolve(addr + 16).offset, site.offset + 16);
        // A second resolver (another "run") gives the same site for the same code.
        let r2 = InProcessSiteResolver::new(ModuleTable::shared());
        assert_eq!(r2.resolve(addr).offset, site.offset);
    }

    #[test]
    fn the_offset_is_the_file_offset() {
        // Read the executable's program headers from the file and check that the offset we
        // computed maps back into a PT_LOAD segment with the same code bytes.
        let r = InProcessSiteResolver::new(ModuleTable::shared());
        let f = the_offset_is_the_file_offset as *const () as usize;
        let site = r.resolve(f);
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let off = site.offset as usize;
        // SAFETY: `f` is the address of this function's code, mapped and readable.
        let code = unsafe { std::slice::from_raw_parts(f as *const u8, 16) };
        assert_eq!(
            &exe[off..off + 16],
            code,
            "file bytes at the offset are the code"
        );
    }

    #[test]
    fn unknown_addresses_are_unknown_not_a_crash() {
        let r = InProcessSiteResolver::new(ModuleTable::shared());
        let s = r.resolve(8);
        assert_eq!(s.module, ModuleId::UNKNOWN);
        assert_eq!(s.offset, 8);
    }

    #[test]
    fn build_id_is_found_and_used() {
        let table = ModuleTable::shared();
        let r = InProcessSiteResolver::new(table.clone());
        let site = r.resolve(build_id_is_found_and_used as *const () as usize);
        let id = table.get(site.module).unwrap();
        // Rust test binaries are linked with a build ID by default on Linux.
        assert!(
            id.build_id.as_ref().is_some_and(|b| !b.is_empty()),
            "{id:?}"
        );
        // The one in the file, as read from its sections.
        use object::Object as _;
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let file = object::File::parse(&*exe).unwrap();
        assert_eq!(
            id.build_id.as_deref(),
            file.build_id().unwrap(),
            "in memory as in the file"
        );
    }

    #[test]
    fn location_sites_are_stable_and_distinct() {
        let r = InProcessSiteResolver::new(ModuleTable::shared());
        #[track_caller]
        fn here() -> &'static Location<'static> {
            Location::caller()
        }
        let (a, b) = (here(), here());
        let (sa, sb) = (r.resolve_location(a), r.resolve_location(b));
        assert_ne!(sa, sb, "two lines, two sites");
        assert_eq!(sa, r.resolve_location(a));
        assert_eq!(sa.offset & LOCATION_SITE_BIT, LOCATION_SITE_BIT);
        assert_eq!(sa.module, r.self_module());
    }

    /// One note: header, name padded, desc padded (to `align`).
    fn note(name: &[u8], kind: u32, desc: &[u8], align: usize) -> Vec<u8> {
        let mut n = Vec::new();
        n.extend_from_slice(&(name.len() as u32).to_ne_bytes());
        n.extend_from_slice(&(desc.len() as u32).to_ne_bytes());
        n.extend_from_slice(&kind.to_ne_bytes());
        n.extend_from_slice(name);
        n.resize(n.len().next_multiple_of(align), 0);
        n.extend_from_slice(desc);
        n.resize(n.len().next_multiple_of(align), 0);
        n
    }

    #[test]
    fn the_build_id_note_is_found_among_others_at_either_alignment() {
        let id = [
            0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb,
        ];
        for align in [4, 8] {
            let mut n = note(b"GNU\0", 5, &[0xc0, 0, 0, 0xc0, 4, 0, 0, 0], align); // property
            n.extend(note(b"Go\0\0", 4, b"go-build-id", align)); // Go's own build ID
            n.extend(note(b"GNU\0", 1, &[0, 0, 0, 0, 3, 0, 0, 0], align)); // ABI tag
            n.extend(note(b"GNU\0", 3, &id, align));
            assert_eq!(gnu_build_id(&n, align), Some(id.to_vec()), "align {align}");
            // Cut inside the build ID's description: not found, no panic.
            let cut = n.len() - 8;
            assert_eq!(gnu_build_id(&n[..cut], align), None, "align {align}");
        }
        // p_align 0, 1 and 16 read as 4 (what the loader lays out in practice).
        let n = note(b"GNU\0", 3, &id, 4);
        for align in [0, 1, 16] {
            assert_eq!(gnu_build_id(&n, align), Some(id.to_vec()), "align {align}");
        }
        // Only notes of another owner: none.
        assert_eq!(gnu_build_id(&note(b"XYZ\0", 3, &id, 4), 4), None);
    }

    #[test]
    fn note_parsing() {
        let mut n = Vec::new();
        n.extend_from_slice(&4u32.to_ne_bytes());
        n.extend_from_slice(&3u32.to_ne_bytes());
        n.extend_from_slice(&1u32.to_ne_bytes()); // another note type first
        n.extend_from_slice(b"GNU\0");
        n.extend_from_slice(&[1, 2, 3, 0]);
        n.extend_from_slice(&4u32.to_ne_bytes());
        n.extend_from_slice(&2u32.to_ne_bytes());
        n.extend_from_slice(&3u32.to_ne_bytes());
        n.extend_from_slice(b"GNU\0");
        n.extend_from_slice(&[0xab, 0xcd, 0, 0]);
        assert_eq!(gnu_build_id(&n, 4), Some(vec![0xab, 0xcd]));
        assert_eq!(gnu_build_id(&n[..20], 4), None);
        assert_eq!(gnu_build_id(&[], 4), None);
    }
}
