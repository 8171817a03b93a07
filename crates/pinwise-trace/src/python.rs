//! Python frames in the tracer: finding CPython 3.10-3.13 in a traced process, telling BPF
//! where its frame chains are, and naming the frames BPF captured.
//!
//! - **Detection.** When a traced process execs or maps a new executable file (and at an
//!   attach), the files it maps whose name starts with `python` or `libpython`
//!   (`python3.11`, `libpython3.12.so.1.0`) are read once (ELF symbols, cached by file; a
//!   launched command's are read before it starts): `_PyRuntime`, the type objects, the
//!   version (`Py_Version`, else the file name; 3.13's own `_Py_DebugOffsets` must agree
//!   with the layout). Other processes cost nothing but one BPF map lookup per event.
//! - **The BPF side** ([`bpf_entry`], map `py_procs`) gets `_PyRuntime`'s address and the
//!   per-version offsets of [`pinwise_pyframes::layout`], and walks the thread's frame chain
//!   at each allocation and sampled copy (`pinwise.bpf.c`, "Python frames"). The thread state
//!   is found as CPython's `PyGILState` API finds it: the pthread key in `_PyRuntime`, whose
//!   value glibc keeps in the thread's `struct pthread` at the thread pointer. The offsets of
//!   that storage in `struct pthread` are glibc's, found once in the tracer's own glibc
//!   ([`glibc_specific`]); a traced process on another glibc (a container) whose layout
//!   differs gets no frames (BPF checks that the thread state points back at the main
//!   interpreter), never wrong ones.
//! - **Naming.** The consumer thread names each captured (code object, instruction) pair
//!   at once, while the process lives, by reading the code object through
//!   `process_vm_readv` ([`pinwise_pyframes::CodeCache`], cached per code object and checked
//!   against the object's header on every use); the names go into the history's stacks.
//!   An event running a code object not named yet wakes the consumer at once (BPF map
//!   `py_codes` holds the named ones), and the consumer names a batch's frames before it
//!   translates the batch: an interpreter frees a module's code when the module finishes
//!   and all of it at exit. A code object named once keeps its name when it is gone by the
//!   time a later event is read ([`CodeCache::resolve_frames_remembered`]); one that was
//!   never named before it went is left out of the stack (counted:
//!   `tracer.python_frames_unnamed`).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};
use pinwise_pyframes::layout::{InstrKind, Layout, Version};
use pinwise_pyframes::mem::Memory;
use pinwise_pyframes::resolve::Types;
use pinwise_pyframes::{CodeCache, ProcessMemory, RawFrame};

use crate::procmaps::{path_in_process, ProcMaps};
use crate::skel::main::types::{pw_py_proc, pw_py_stack};

/// What one file holding a CPython interpreter says about it (addresses are link-time
/// virtual addresses, before the load bias).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PythonFile {
    /// The CPython minor version.
    pub version: Version,
    /// `_PyRuntime`.
    pub runtime: u64,
    /// `PyCode_Type`, `PyUnicode_Type`, `PyBytes_Type`.
    pub types: [u64; 3],
    /// `(file offset, virtual address, file size)` of each `PT_LOAD` segment.
    pub segments: Vec<(u64, u64, u64)>,
}

/// Bytes of `data` as interpreter memory at link-time addresses (for checks made on the
/// file before the process runs).
struct FileImage<'a> {
    /// `(virtual address, bytes)` of each section with contents.
    sections: Vec<(u64, &'a [u8])>,
}

impl Memory for FileImage<'_> {
    fn read(&self, addr: usize, buf: &mut [u8]) -> bool {
        let addr = addr as u64;
        for &(start, bytes) in &self.sections {
            let end = start + bytes.len() as u64;
            if addr >= start && addr + buf.len() as u64 <= end {
                let o = (addr - start) as usize;
                buf.copy_from_slice(&bytes[o..o + buf.len()]);
                return true;
            }
        }
        false
    }
}

/// `(3, minor)` from a file name containing `python3.MINOR`.
fn version_in_name(path: &str) -> Option<Version> {
    pinwise_pyframes::detect::version_in_name(path)
}

impl PythonFile {
    /// Reads the interpreter in ELF file `data` (named `path`, for the version when the
    /// file has no `Py_Version`). `None`: no `_PyRuntime` and type objects, a version
    /// outside 3.10-3.13, or a 3.13 whose `_Py_DebugOffsets` disagree with the layout.
    pub fn parse(data: &[u8], path: &str) -> Option<PythonFile> {
        let file = object::File::parse(data).ok()?;
        let mut want: HashMap<&str, u64> = HashMap::new();
        for sym in file.dynamic_symbols().chain(file.symbols()) {
            let Ok(name) = sym.name() else { continue };
            if matches!(
                name,
                "_PyRuntime" | "PyCode_Type" | "PyUnicode_Type" | "PyBytes_Type" | "Py_Version"
            ) && sym.address() != 0
            {
                want.entry(name).or_insert(sym.address());
            }
        }
        let runtime = *want.get("_PyRuntime")?;
        let types = [
            *want.get("PyCode_Type")?,
            *want.get("PyUnicode_Type")?,
            *want.get("PyBytes_Type")?,
        ];
        let image = FileImage {
            sections: file
                .sections()
                .filter(|s| s.kind() != object::SectionKind::UninitializedData)
                .filter_map(|s| Some((s.address(), s.data().ok()?)))
                .filter(|(a, d)| *a != 0 && !d.is_empty())
                .collect(),
        };
        let hex = want
            .get("Py_Version")
            .and_then(|&addr| image.read_u64(addr as usize))
            .filter(|&h| h != 0);
        let version = match hex {
            Some(h) => Version::from_hex(h & 0xffff_ffff)?,
            None => version_in_name(path)?,
        };
        if version == Version::V313 {
            let hex = hex? & 0xffff_ffff;
            if let Err(e) = pinwise_pyframes::detect::check_debug_offsets(
                &image,
                runtime as usize,
                version.layout(),
                hex,
            ) {
                tracing::info!("{path}: CPython 3.13 not read ({e:?})");
                return None;
            }
        }
        let segments = file
            .segments()
            .map(|s| {
                let (off, size) = s.file_range();
                (off, s.address(), size)
            })
            .collect();
        Some(PythonFile {
            version,
            runtime,
            types,
            segments,
        })
    }

    /// The load bias of this file in a process where `mapping_start` maps file offset
    /// `mapping_offset` of it.
    pub fn bias(&self, mapping_start: u64, mapping_offset: u64) -> Option<u64> {
        let &(off, vaddr, _) = self
            .segments
            .iter()
            .find(|&&(off, _, size)| off <= mapping_offset && mapping_offset < off + size.max(1))?;
        let linked = vaddr.checked_add(mapping_offset - off)?;
        // The mapping starts on a page: so does the address the segment links it at.
        mapping_start.checked_sub(linked & !0xfff)
    }
}

/// Where glibc keeps a thread's pthread-key values, as offsets from the thread pointer
/// (`pthread_self()`, the fs base on x86-64): `specific_1stblock` (keys below 32, 16-byte
/// `{seq, data}` entries) and `specific` (the second-level pointers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GlibcSpecific {
    /// `struct pthread` → `specific_1stblock`.
    pub first_block: u32,
    /// `struct pthread` → `specific` (0 when not confirmed).
    pub second_level: u32,
}

/// Finds [`GlibcSpecific`] in this process's glibc: sets a fresh key on this thread to a
/// unique address and looks for it in this thread's `struct pthread`. Computed once.
pub fn glibc_specific() -> Option<GlibcSpecific> {
    static FOUND: OnceLock<Option<GlibcSpecific>> = OnceLock::new();
    *FOUND.get_or_init(|| {
        let found = find_glibc_specific();
        match found {
            Some(g) => tracing::debug!("glibc pthread-specific storage: {g:?}"),
            None => tracing::info!(
                "glibc's pthread-specific storage not found: no Python frames in traces"
            ),
        }
        found
    })
}

fn find_glibc_specific() -> Option<GlibcSpecific> {
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: creates a key without a destructor; deleted below.
    if unsafe { libc::pthread_key_create(&mut key, None) } != 0 {
        return None;
    }
    let marker = Box::new(0x5eed_u64);
    let value = &*marker as *const u64 as usize;
    // SAFETY: `key` was created above; the value is only an address (never dereferenced
    // through the key).
    let set = unsafe { libc::pthread_setspecific(key, value as *const libc::c_void) } == 0;
    // SAFETY: pthread_self has no preconditions.
    let me = unsafe { libc::pthread_self() } as usize;
    let found = if set && key < 32 {
        scan_thread(me, key as usize, value)
    } else {
        None
    };
    // SAFETY: `key` was created above and is not used after this.
    unsafe { libc::pthread_key_delete(key) };
    drop(marker);
    found
}

/// Looks for `value` as key `key`'s entry in the `struct pthread` at `me`.
fn scan_thread(me: usize, key: usize, value: usize) -> Option<GlibcSpecific> {
    // SAFETY: getpid has no preconditions.
    let mem = ProcessMemory {
        pid: unsafe { libc::getpid() },
    };
    let mut buf = vec![0u8; 4096];
    let len = [4096usize, 2048, 1024]
        .into_iter()
        .find(|&l| mem.read(me, &mut buf[..l]))?;
    let word = |o: usize| -> Option<usize> {
        Some(u64::from_ne_bytes(buf.get(o..o + 8)?.try_into().ok()?) as usize)
    };
    let at = (16..len)
        .step_by(8)
        .find(|&o| word(o) == Some(value) && word(o - 8).is_some_and(|seq| seq % 2 == 1))?;
    let first_block = at.checked_sub(8 + 16 * key)?;
    // glibc points specific[0] at specific_1stblock, right after it.
    let second = first_block + 32 * 16;
    let second_level = if word(second) == Some(me + first_block) {
        second
    } else {
        0
    };
    Some(GlibcSpecific {
        first_block: u32::try_from(first_block).ok()?,
        second_level: u32::try_from(second_level).ok()?,
    })
}

/// The BPF map entry for an interpreter whose `_PyRuntime` is at `runtime`.
pub fn bpf_entry(layout: &Layout, runtime: u64, glibc: GlibcSpecific) -> pw_py_proc {
    let n = |v: usize| v as u32;
    pw_py_proc {
        runtime,
        runtime_tss: n(layout.runtime_tss),
        runtime_main_interp: n(layout.runtime_main_interp),
        tls_first_block: glibc.first_block,
        tls_second_level: glibc.second_level,
        tstate_interp: n(layout.tstate_interp),
        tstate_frame: n(layout.tstate_frame),
        cframe_current: layout.cframe_current.map_or(-1, |o| o as i32),
        frame_code: n(layout.frame_code),
        frame_back: n(layout.frame_back),
        frame_instr: n(layout.frame_instr),
        frame_owner: layout.frame_owner.map_or(-1, |o| o as i32),
        owner_cstack: u32::from(layout.owner_cstack),
        frame_size: n(layout.frame_size.min(128)),
        contiguous: u32::from(layout.instr_kind == InstrKind::Pointer),
    }
}

/// A traced process found running CPython.
#[derive(Debug)]
pub struct PythonProcess {
    /// The interpreter's version.
    pub version: Version,
    /// `_PyRuntime` in the process.
    pub runtime: u64,
    /// An address in the interpreter's code (its module is the interpreter's).
    pub text: u64,
    /// The file holding the interpreter, as the process maps it.
    pub path: String,
    types: Types,
    cache: CodeCache,
}

impl PythonProcess {
    /// The same interpreter in a forked child: same addresses, and the code objects named
    /// so far (the child has them too, at the same addresses, until it frees them), so
    /// that a child that exits before its events are read still has them named.
    pub fn forked(&self) -> PythonProcess {
        PythonProcess {
            version: self.version,
            runtime: self.runtime,
            text: self.text,
            path: self.path.clone(),
            types: self.types,
            cache: self.cache.clone(),
        }
    }

    /// Names the frames BPF captured in process `pid`, innermost first. A frame whose code
    /// object is gone by now (freed, or the process exited) is named as it was read for an
    /// earlier event ([`CodeCache::resolve_frames_remembered`]), or left out if it never
    /// was.
    pub fn resolve(&mut self, pid: u32, stack: &pw_py_stack) -> Vec<pinwise_core::PyFrame> {
        let layout = self.version.layout();
        let n = (stack.nframes as usize).min(stack.frames.len());
        let raw: Vec<RawFrame> = stack.frames[..n]
            .iter()
            .map(|f| RawFrame {
                code: f.code as usize,
                instr_offset: pinwise_pyframes::instr_offset(layout, f.code as usize, f.instr),
            })
            .collect();
        let mem = ProcessMemory { pid: pid as i32 };
        self.cache
            .resolve_frames_remembered(&mem, layout, &self.types, &raw)
            .into_iter()
            .map(|f| pinwise_core::PyFrame::new(&f.file, f.line, &f.function))
            .collect()
    }

    /// The BPF map entry for this process.
    pub fn bpf_entry(&self, glibc: GlibcSpecific) -> pw_py_proc {
        bpf_entry(self.version.layout(), self.runtime, glibc)
    }
}

/// Whether a mapped file may hold a CPython interpreter (only those files are read): an
/// executable named `python…` or a `libpython…` library (not extension modules such as
/// `_C.cpython-311-x86_64-linux-gnu.so`).
fn may_be_python(name: &str) -> bool {
    name.starts_with("python") || name.starts_with("libpython")
}

/// Finds CPython in processes' maps, reading each candidate file once.
#[derive(Debug, Default)]
pub struct PythonFinder {
    /// By `(device, inode)`: what the file holds (`None`: no interpreter we read).
    files: HashMap<(u64, u64), Option<Arc<PythonFile>>>,
}

impl PythonFinder {
    /// A finder with nothing read yet.
    pub fn new() -> PythonFinder {
        PythonFinder::default()
    }

    /// Reads the interpreters among `files` now (those a process will map), so that
    /// finding them in its maps later costs no file read.
    pub fn warm(&mut self, files: &[std::path::PathBuf]) {
        for path in files {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            if !name.as_deref().is_some_and(may_be_python) {
                continue;
            }
            let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
            let Some(key) = crate::libs::file_id(&real) else {
                continue;
            };
            let shown = real.display().to_string();
            self.files
                .entry(key)
                .or_insert_with(|| read_python_file(&real, &shown));
        }
    }

    /// The interpreter process `pid` runs, per its `maps`, if any.
    pub fn find(&mut self, pid: u32, maps: &ProcMaps) -> Option<PythonProcess> {
        let mut seen = std::collections::HashSet::new();
        for m in maps.mappings() {
            if !m.is_file() || !m.file_name().is_some_and(may_be_python) {
                continue;
            }
            if !seen.insert((m.dev, m.inode)) {
                continue;
            }
            let path = m.file_path()?.to_owned();
            let file = self
                .files
                .entry((m.dev, m.inode))
                .or_insert_with(|| read_python_file(&path_in_process(pid, &path), &path))
                .clone();
            let Some(file) = file else { continue };
            // The lowest mapping of the file gives the bias; the executable one, the text.
            let same = |x: &&crate::procmaps::Mapping| x.dev == m.dev && x.inode == m.inode;
            let first = maps
                .mappings()
                .iter()
                .filter(same)
                .min_by_key(|x| x.start)?;
            let Some(bias) = file.bias(first.start, first.offset) else {
                continue;
            };
            let text = maps
                .mappings()
                .iter()
                .filter(same)
                .find(|x| x.exec)
                .map_or(first.start, |x| x.start);
            let types = Types {
                code: (file.types[0] + bias) as usize,
                str: (file.types[1] + bias) as usize,
                bytes: (file.types[2] + bias) as usize,
            };
            tracing::info!(
                "PID {pid} runs CPython {} ({path}): Python frames on",
                file.version.name()
            );
            return Some(PythonProcess {
                version: file.version,
                runtime: file.runtime + bias,
                text,
                path,
                types,
                cache: CodeCache::new(),
            });
        }
        None
    }
}

fn read_python_file(path: &Path, shown: &str) -> Option<Arc<PythonFile>> {
    let data = std::fs::read(path)
        .map_err(|e| tracing::debug!("{}: {e}", path.display()))
        .ok()?;
    PythonFile::parse(&data, shown).map(Arc::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The offsets found in this process's glibc lead, from another thread's thread
    /// pointer, to that thread's value for a key: what BPF does with the fs base.
    #[test]
    fn glibc_specific_storage_is_found_and_reads_other_threads_values() {
        let g = glibc_specific().expect("glibc's pthread-specific storage");
        assert!(g.first_block > 0 && g.first_block < 4096, "{g:?}");
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: creates a key without destructor; deleted at the end.
        assert_eq!(unsafe { libc::pthread_key_create(&mut key, None) }, 0);
        let k = key as usize;
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            let v = 0xabcd_0000usize + k;
            // SAFETY: `key` is live; the value is only an address.
            unsafe { libc::pthread_setspecific(key, v as *const libc::c_void) };
            // SAFETY: no preconditions.
            tx.send((unsafe { libc::pthread_self() } as usize, v))
                .unwrap();
            done_rx.recv().unwrap();
        });
        let (tp, v) = rx.recv().unwrap();
        // SAFETY: getpid has no preconditions.
        let mem = ProcessMemory {
            pid: unsafe { libc::getpid() },
        };
        let slot = if k < 32 {
            tp + g.first_block as usize + 16 * k + 8
        } else {
            assert_ne!(g.second_level, 0);
            let block = mem
                .read_u64(tp + g.second_level as usize + 8 * (k / 32))
                .unwrap() as usize;
            block + 16 * (k % 32) + 8
        };
        assert_eq!(mem.read_u64(slot), Some(v as u64));
        done_tx.send(()).unwrap();
        t.join().unwrap();
        // SAFETY: the key is not used after this.
        unsafe { libc::pthread_key_delete(key) };
    }

    /// The interpreters installed here (Debian's `python3`, pyenv's builds if present)
    /// are read from their files: version and symbols.
    #[test]
    fn installed_interpreters_are_recognised_from_their_files() {
        let mut found = 0;
        for (path, minor) in [
            ("/usr/bin/python3.11", Version::V311),
            (
                "/root/.pyenv/versions/3.10.13/lib/libpython3.10.so.1.0",
                Version::V310,
            ),
            (
                "/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0",
                Version::V311,
            ),
            (
                "/root/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0",
                Version::V312,
            ),
            (
                "/root/.pyenv/versions/3.13.0/lib/libpython3.13.so.1.0",
                Version::V313,
            ),
        ] {
            let Ok(data) = std::fs::read(path) else {
                eprintln!("not here: {path}");
                continue;
            };
            let f = PythonFile::parse(&data, path).unwrap_or_else(|| panic!("{path}"));
            assert_eq!(f.version, minor, "{path}");
            assert!(f.runtime != 0 && f.types.iter().all(|&t| t != 0), "{path}");
            found += 1;
        }
        eprintln!("{found} interpreters read");
        // Not an interpreter: this test binary.
        let me = std::fs::read("/proc/self/exe").unwrap();
        assert_eq!(PythonFile::parse(&me, "/proc/self/exe"), None);
    }

    #[test]
    fn the_bias_follows_the_segment_that_maps_the_offset() {
        let f = PythonFile {
            version: Version::V311,
            runtime: 0x20_1000,
            types: [1, 2, 3],
            segments: vec![
                (0, 0, 0x1000),
                (0x1000, 0x1000, 0x5000),
                (0x6000, 0x20_6000, 0x800),
            ],
        };
        // A PIE mapped at 0x5555_0000_0000.
        assert_eq!(f.bias(0x5555_0000_0000, 0), Some(0x5555_0000_0000));
        assert_eq!(f.bias(0x5555_0000_1000, 0x1000), Some(0x5555_0000_0000));
        assert_eq!(f.bias(0x5555_0020_6000, 0x6000), Some(0x5555_0000_0000));
        // A non-PIE executable linked at 0x400000.
        let exe = PythonFile {
            segments: vec![(0, 0x40_0000, 0x1000)],
            ..f.clone()
        };
        assert_eq!(exe.bias(0x40_0000, 0), Some(0));
        // An offset no segment maps.
        assert_eq!(f.bias(0x1000, 0x9000), None);
    }
}
