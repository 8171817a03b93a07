//! Finding the interpreter in this process: `_PyRuntime`, the version, the type objects.
//!
//! Looked up once with the dynamic linker (`dlsym`, which sees the symbols Debian's and
//! Ubuntu's `python3` executables export as well as those of a `libpython3.X.so`),
//! falling back to any loaded `libpython3.*` opened with `RTLD_NOLOAD` (an interpreter
//! embedded with `RTLD_LOCAL`). The version comes from `Py_Version` (3.11+), else from
//! the file name of the object that defines `_PyRuntime` or of `/proc/self/exe`
//! (`python3.10`, `libpython3.10.so.1.0`).

use std::ffi::{c_void, CStr, CString};

use crate::layout::{Layout, Version};
use crate::mem::{Memory, SelfMemory};
use crate::resolve::Types;

/// The symbols of one loaded CPython.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// CPython minor version.
    pub version: Version,
    /// Address of `_PyRuntime`.
    pub runtime: usize,
    /// Type objects for type checks.
    pub types: Types,
    /// The file that defines `_PyRuntime`.
    pub object: String,
}

fn sym(handle: *mut c_void, name: &CStr) -> usize {
    // SAFETY: `handle` is RTLD_DEFAULT or a handle from dlopen; `name` is NUL-terminated.
    // dlsym only looks the name up; it runs no code of the object.
    unsafe { libc::dlsym(handle, name.as_ptr()) as usize }
}

/// The file that contains `addr`, per the dynamic linker.
fn object_of(addr: usize) -> Option<String> {
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: `info` is a valid out-parameter; dladdr only reads the link maps.
    let ok = unsafe { libc::dladdr(addr as *const c_void, &mut info) };
    if ok == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by the dynamic linker, valid while
    // the object stays loaded (we copy it at once).
    Some(
        unsafe { CStr::from_ptr(info.dli_fname) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// `(3, minor)` from a name that contains `python3.MINOR` (`/usr/bin/python3.12`,
/// `libpython3.10.so.1.0`, `python3.13d`).
pub fn version_in_name(name: &str) -> Option<Version> {
    let base = name.rsplit('/').next()?;
    let at = base.find("python3.")? + "python3.".len();
    let digits: String = base[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Version::from_minor(3, digits.parse().ok()?)
}

fn try_handle(handle: *mut c_void) -> Option<Found> {
    let runtime = sym(handle, c"_PyRuntime");
    if runtime == 0 {
        return None;
    }
    let object = object_of(runtime).unwrap_or_default();
    let hex_at = sym(handle, c"Py_Version");
    let hex = if hex_at != 0 {
        SelfMemory.read_u64(hex_at)?
    } else {
        0
    };
    let version = if hex != 0 {
        Version::from_hex(hex)?
    } else {
        version_in_name(&object).or_else(|| {
            let exe = std::fs::read_link("/proc/self/exe").ok()?;
            version_in_name(&exe.to_string_lossy())
        })?
    };
    if version == Version::V313
        && check_debug_offsets(&SelfMemory, runtime, version.layout(), hex).is_err()
    {
        return None;
    }
    let types = Types {
        code: sym(handle, c"PyCode_Type"),
        str: sym(handle, c"PyUnicode_Type"),
        bytes: sym(handle, c"PyBytes_Type"),
    };
    if types.code == 0 || types.str == 0 || types.bytes == 0 {
        return None;
    }
    Some(Found {
        version,
        runtime,
        types,
        object,
    })
}

/// The paths of loaded objects whose file name starts with `libpython3.`.
fn loaded_libpythons() -> Vec<String> {
    match std::fs::read_to_string("/proc/self/maps") {
        Ok(maps) => libpythons_in(&maps),
        Err(_) => Vec::new(),
    }
}

/// [`loaded_libpythons`] of the text of a maps file: each path once, in order (without the
/// ` (deleted)` the kernel adds to removed files).
///
/// Only lines naming a `libpython3.` file are parsed (with `procfs-core`), and none starting
/// `/SYSV`: procfs-core reads such a path at fixed byte offsets and could panic on an odd
/// one, and this runs inside the program at start-up.
fn libpythons_in(maps: &str) -> Vec<String> {
    use procfs_core::process::{MMapPath, MemoryMaps};
    use procfs_core::FromBufRead;

    let mut out: Vec<String> = Vec::new();
    for line in maps.lines() {
        let path = line.splitn(6, ' ').nth(5).unwrap_or("").trim_start();
        if !path.contains("libpython3.") || path.starts_with("/SYSV") {
            continue;
        }
        let Ok(parsed) = MemoryMaps::from_buf_read(line.as_bytes()) else {
            continue;
        };
        for m in parsed {
            let MMapPath::Path(p) = m.pathname else {
                continue;
            };
            let p = p.to_string_lossy();
            let p = p.strip_suffix(" (deleted)").unwrap_or(&p);
            let is_libpython = p
                .rsplit('/')
                .next()
                .is_some_and(|b| b.starts_with("libpython3."));
            if is_libpython && out.last().map(String::as_str) != Some(p) {
                out.push(p.to_string());
            }
        }
    }
    out
}

/// Why 3.13's `_Py_DebugOffsets` rules an interpreter out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DebugOffsetsMismatch {
    /// `_PyRuntime` could not be read.
    Unreadable,
    /// No `xdebugpy` cookie at the start of `_PyRuntime`.
    NoCookie,
    /// The structure's version is not the interpreter's `Py_Version`.
    Version(u64),
    /// A free-threaded build.
    FreeThreaded,
    /// The interpreter puts a field elsewhere: (position in the structure, its offset, ours).
    Field(usize, u64, u64),
}

/// Checks 3.13's `_Py_DebugOffsets` at `runtime` against `layout` (`hex`: `Py_Version`).
pub fn check_debug_offsets<M: Memory>(
    mem: &M,
    runtime: usize,
    layout: &Layout,
    hex: u64,
) -> Result<(), DebugOffsetsMismatch> {
    use crate::layout::debug313;
    let mut d = [0u8; debug313::SIZE];
    if !mem.read(runtime, &mut d) {
        return Err(DebugOffsetsMismatch::Unreadable);
    }
    let at = |pos: usize| u64::from_ne_bytes(d[pos..pos + 8].try_into().unwrap());
    if &d[..8] != debug313::COOKIE {
        return Err(DebugOffsetsMismatch::NoCookie);
    }
    if at(debug313::VERSION) != hex {
        return Err(DebugOffsetsMismatch::Version(at(debug313::VERSION)));
    }
    if at(debug313::FREE_THREADED) != 0 {
        return Err(DebugOffsetsMismatch::FreeThreaded);
    }
    for (pos, ours) in debug313::expected(layout) {
        if at(pos) != ours {
            return Err(DebugOffsetsMismatch::Field(pos, at(pos), ours));
        }
    }
    Ok(())
}

/// Looks for a supported CPython in this process.
pub fn find() -> Option<Found> {
    if let Some(f) = try_handle(libc::RTLD_DEFAULT) {
        return Some(f);
    }
    for path in loaded_libpythons() {
        let Ok(c) = CString::new(path) else { continue };
        // SAFETY: RTLD_NOLOAD only returns a handle to an object already loaded (running
        // no initialisers); the handle is closed below.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
        if handle.is_null() {
            continue;
        }
        let found = try_handle(handle);
        // SAFETY: `handle` came from the dlopen above; closing it drops the reference
        // RTLD_NOLOAD added, and the object stays loaded (the process loaded it).
        unsafe { libc::dlclose(handle) };
        if found.is_some() {
            return found;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::FakeMemory;

    #[test]
    fn libpythons_are_found_in_maps_text() {
        let maps = "\
5600000000-5600001000 r--p 00000000 fe:01 11 /usr/bin/python3.12
7f0000000000-7f0000100000 r--p 00000000 fe:01 12                         /usr/lib/libpython3.12.so.1.0
7f0000100000-7f0000200000 r-xp 00100000 fe:01 12                         /usr/lib/libpython3.12.so.1.0
7f0000200000-7f0000300000 r--p 00000000 fe:01 13                         /opt/py/lib/libpython3.11d.so (deleted)
7f0000300000-7f0000400000 r--p 00000000 fe:01 14                         /usr/lib/libpython2.7.so
7f0000400000-7f0000500000 rw-p 00000000 00:00 0                          [anon:libpython3.x]
7f0000500000-7f0000600000 rw-p 00000000 00:00 0
";
        assert_eq!(
            libpythons_in(maps),
            [
                "/usr/lib/libpython3.12.so.1.0",
                "/opt/py/lib/libpython3.11d.so"
            ]
        );
        assert!(libpythons_in("").is_empty());
    }

    #[test]
    fn versions_from_file_names() {
        assert_eq!(version_in_name("/usr/bin/python3.12"), Some(Version::V312));
        assert_eq!(
            version_in_name("/root/.pyenv/versions/3.10.13/lib/libpython3.10.so.1.0"),
            Some(Version::V310)
        );
        assert_eq!(version_in_name("python3.13d"), Some(Version::V313));
        assert_eq!(version_in_name("/usr/bin/python3"), None);
        assert_eq!(version_in_name("/opt/python3.12/bin/python"), None);
        assert_eq!(version_in_name("libpython3.9.so"), None);
    }

    fn debug_block(layout: &Layout, hex: u64) -> FakeMemory {
        let mut d = vec![0u8; crate::layout::debug313::SIZE];
        d[..8].copy_from_slice(b"xdebugpy");
        d[8..16].copy_from_slice(&hex.to_ne_bytes());
        for (pos, v) in crate::layout::debug313::expected(layout) {
            d[pos..pos + 8].copy_from_slice(&v.to_ne_bytes());
        }
        let mut mem = FakeMemory::default();
        mem.put(0x1000_0000, d);
        mem
    }

    #[test]
    fn debug_offsets_that_agree_pass_and_any_difference_refuses() {
        let l = Version::V313.layout();
        let hex = 0x030D_01F0;
        let mut mem = debug_block(l, hex);
        assert_eq!(check_debug_offsets(&mem, 0x1000_0000, l, hex), Ok(()));
        assert_eq!(
            check_debug_offsets(&mem, 0x1000_0000, l, 0x030D_02F0),
            Err(DebugOffsetsMismatch::Version(hex))
        );
        assert_eq!(
            check_debug_offsets(&mem, 0x2000_0000, l, hex),
            Err(DebugOffsetsMismatch::Unreadable)
        );
        // A patch release that moved `instr_ptr`.
        mem.set_u64(0x1000_0000 + 248, 64);
        assert_eq!(
            check_debug_offsets(&mem, 0x1000_0000, l, hex),
            Err(DebugOffsetsMismatch::Field(248, 64, 56))
        );
        let mut mem = debug_block(l, hex);
        mem.set_u64(0x1000_0000 + 16, 1);
        assert_eq!(
            check_debug_offsets(&mem, 0x1000_0000, l, hex),
            Err(DebugOffsetsMismatch::FreeThreaded)
        );
        mem.set(0x1000_0000, b"notdebug");
        assert_eq!(
            check_debug_offsets(&mem, 0x1000_0000, l, hex),
            Err(DebugOffsetsMismatch::NoCookie)
        );
    }

    /// This test binary is not Python: nothing is found.
    #[test]
    fn a_rust_test_binary_is_not_a_python_process() {
        assert_eq!(find(), None);
    }
}
