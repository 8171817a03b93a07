//! `/proc/PID/maps`: which file (and which offset in it) an address of a process lies in.

use std::io;
use std::path::{Path, PathBuf};

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Readable.
    pub read: bool,
    /// Writable.
    pub write: bool,
    /// Executable.
    pub exec: bool,
    /// Shared (`s`), not private copy-on-write (`p`): device-file and memfd mappings.
    pub shared: bool,
    /// Offset in the file of `start`.
    pub offset: u64,
    /// Device of the file (`major:minor` as one number, `major << 32 | minor`).
    pub dev: u64,
    /// Inode of the file; 0 for anonymous memory.
    pub inode: u64,
    /// The file, a pseudo-name (`[heap]`, `[stack]`, ...) or nothing.
    pub path: Option<String>,
}

impl Mapping {
    /// Whether `addr` lies in this mapping.
    pub fn contains(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end
    }

    /// The file offset of `addr` (which must lie in this mapping).
    pub fn file_offset(&self, addr: u64) -> u64 {
        addr - self.start + self.offset
    }

    /// Whether this maps a file (not anonymous memory or a pseudo-mapping).
    pub fn is_file(&self) -> bool {
        self.inode != 0 && self.path.as_deref().is_some_and(|p| p.starts_with('/'))
    }

    /// The file's path without the ` (deleted)` suffix the kernel adds to removed files.
    pub fn file_path(&self) -> Option<&str> {
        let p = self.path.as_deref()?;
        if !p.starts_with('/') {
            return None;
        }
        Some(p.strip_suffix(" (deleted)").unwrap_or(p))
    }

    /// The file's name (last path component).
    pub fn file_name(&self) -> Option<&str> {
        self.file_path().map(|p| p.rsplit('/').next().unwrap_or(p))
    }
}

/// The mappings of one process, sorted by address.
#[derive(Debug, Clone, Default)]
pub struct ProcMaps {
    mappings: Vec<Mapping>,
}

impl ProcMaps {
    /// Reads `/proc/PID/maps`.
    pub fn read(pid: u32) -> io::Result<ProcMaps> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
        Ok(ProcMaps::parse(&text))
    }

    /// Parses the text of a maps file (each line with `procfs-core`); lines that do not
    /// parse are skipped.
    pub fn parse(text: &str) -> ProcMaps {
        let mut mappings: Vec<Mapping> = text.lines().filter_map(parse_line).collect();
        mappings.sort_by_key(|m| m.start);
        ProcMaps { mappings }
    }

    /// The mapping `addr` lies in.
    pub fn find(&self, addr: u64) -> Option<&Mapping> {
        let i = self.mappings.partition_point(|m| m.start <= addr);
        let m = self.mappings.get(i.checked_sub(1)?)?;
        m.contains(addr).then_some(m)
    }

    /// All mappings.
    pub fn mappings(&self) -> &[Mapping] {
        &self.mappings
    }

    /// Whether there are no mappings (the process is gone, or a kernel thread).
    pub fn is_empty(&self) -> bool {
        self.mappings.is_empty()
    }
}

/// One line, parsed by `procfs-core`; `None` for a line it refuses.
fn parse_line(line: &str) -> Option<Mapping> {
    use procfs_core::process::{MMPermissions, MMapPath, MemoryMaps};
    use procfs_core::FromBufRead;

    let path_field = line.splitn(6, ' ').nth(5).unwrap_or("").trim();
    // procfs-core reads `/SYSV` and 8 hex digits at fixed byte offsets: a file named
    // otherwise `/SYSV...` would panic there or be refused. Such a file keeps its path as
    // written, and procfs-core parses the line without it.
    let odd_sysv = path_field.starts_with("/SYSV")
        && !path_field
            .get(5..13)
            .is_some_and(|key| key.bytes().all(|b| b.is_ascii_hexdigit()));
    // The kernel ends the inode field with a space even when no path follows; a line
    // without it (hand-written input) is one procfs-core would refuse.
    let text = if odd_sysv {
        let fields: Vec<&str> = line.splitn(6, ' ').take(5).collect();
        format!("{} ", fields.join(" "))
    } else {
        format!("{line} ")
    };
    let m = MemoryMaps::from_buf_read(text.as_bytes())
        .ok()?
        .0
        .into_iter()
        .next()?;
    let path = match m.pathname {
        _ if odd_sysv => Some(path_field.to_string()),
        MMapPath::Path(p) => Some(p.to_string_lossy().into_owned()),
        MMapPath::Heap => Some("[heap]".to_string()),
        MMapPath::Stack => Some("[stack]".to_string()),
        MMapPath::TStack(tid) => Some(format!("[stack:{tid}]")),
        MMapPath::Vdso => Some("[vdso]".to_string()),
        MMapPath::Vvar => Some("[vvar]".to_string()),
        MMapPath::Vsyscall => Some("[vsyscall]".to_string()),
        MMapPath::Rollup => Some("[rollup]".to_string()),
        MMapPath::Anonymous => None,
        // What the kernel writes for System V shared memory (`/SYSV%08x (deleted)`).
        MMapPath::Vsys(key) => Some(format!("/SYSV{:08x} (deleted)", key as u32)),
        MMapPath::Other(name) => Some(format!("[{name}]")),
    };
    let (major, minor) = m.dev;
    Some(Mapping {
        start: m.address.0,
        end: m.address.1,
        read: m.perms.contains(MMPermissions::READ),
        write: m.perms.contains(MMPermissions::WRITE),
        exec: m.perms.contains(MMPermissions::EXECUTE),
        shared: m.perms.contains(MMPermissions::SHARED),
        offset: m.offset,
        dev: (u64::from(major as u32) << 32) | u64::from(minor as u32),
        inode: m.inode,
        path,
    })
}

/// A path under which this process (the tracer) can open a file that process `pid` maps
/// as `path`: through `/proc/PID/root` when the process lives in another mount namespace.
/// When the process is gone (its root unreadable), the path as it is, on the guess that it
/// lived in the tracer's namespace.
pub fn path_in_process(pid: u32, path: &str) -> PathBuf {
    let own_root = std::fs::read_link("/proc/self/root").ok();
    match std::fs::read_link(format!("/proc/{pid}/root")) {
        Ok(theirs) if own_root.as_ref() != Some(&theirs) => {
            Path::new(&format!("/proc/{pid}/root")).join(path.trim_start_matches('/'))
        }
        _ => PathBuf::from(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
55d0c0a00000-55d0c0a02000 r--p 00000000 fe:01 1234                       /usr/bin/app
55d0c0a02000-55d0c0a05000 r-xp 00002000 fe:01 1234                       /usr/bin/app
55d0c1000000-55d0c1021000 rw-p 00000000 00:00 0                          [heap]
7f0000000000-7f0000100000 rw-p 00000000 00:00 0 
7f1000000000-7f1000200000 r-xp 00010000 fe:01 99                         /opt/my lib/libcuda.so.1 (deleted)
7fff00000000-7fff00021000 rw-p 00000000 00:00 0                          [stack]
";

    #[test]
    fn finds_the_mapping_and_file_offset_of_an_address() {
        let maps = ProcMaps::parse(SAMPLE);
        assert_eq!(maps.mappings().len(), 6);
        let m = maps.find(0x55d0c0a02010).unwrap();
        assert!(m.exec && m.read && !m.write && !m.shared);
        assert_eq!(m.file_offset(0x55d0c0a02010), 0x2010);
        assert_eq!(m.file_name(), Some("app"));
        assert_eq!(m.dev, (0xfe << 32) | 1);
        assert_eq!(m.inode, 1234);

        let lib = maps.find(0x7f1000000100).unwrap();
        assert_eq!(lib.file_path(), Some("/opt/my lib/libcuda.so.1"));
        assert_eq!(lib.file_offset(0x7f1000000100), 0x10100);

        let anon = maps.find(0x7f0000000010).unwrap();
        assert!(!anon.is_file());
        assert_eq!(anon.path, None);
        assert!(!maps.find(0x55d0c1000000).unwrap().is_file());

        assert!(maps.find(0x1000).is_none());
        assert!(maps.find(0x55d0c0a05000).is_none());
        assert!(maps.find(0xffff_ffff_ffff_ffff).is_none());
    }

    /// Lines as the kernel writes them for the odd cases, and lines it never writes.
    const ODD: &str = "\
7f2000000000-7f2000001000 rw-s 00000000 00:01 2049                       /dev/zero (deleted)
7f2000001000-7f2000002000 rw-s 00000000 00:01 77                         /memfd:pinwise pool (deleted)
7f2000002000-7f2000003000 rw-s 00000000 00:01 98307                      /SYSV0000abcd (deleted)
7f2000003000-7f2000004000 rw-p 00000000 00:00 0                          [anon:tensor arena]
7f2000004000-7f2000005000 rw-p 00000000 00:00 0                          [stack:4242]
7f2000005000-7f2000006000 r-xp 00000000 00:00 0                          [vdso]
7f2000006000-7f2000007000 rw-p 00000000 00:00 0
7f2000007000-7f2000008000 r-xp 0001f000 103:02 4711                      /home/a user/lib  two  spaces.so
not a maps line at all
7f2000009000 rw-p 00000000 00:00 0
7f200000a000-7f200000b000 rw-p zzzz 00:00 0
7f200000b000-7f200000c000 rw-p 00000000 00:00 0                          /SYSV1
7f200000c000-7f200000d000 rw-p 00000000 00:00 0                          /SYSVnot-hex-at-all
";

    #[test]
    fn odd_paths_are_kept_as_the_kernel_writes_them_and_bad_lines_skipped() {
        let maps = ProcMaps::parse(ODD);
        let paths: Vec<Option<&str>> = maps.mappings().iter().map(|m| m.path.as_deref()).collect();
        assert_eq!(
            paths,
            [
                Some("/dev/zero (deleted)"),
                Some("/memfd:pinwise pool (deleted)"),
                Some("/SYSV0000abcd (deleted)"),
                Some("[anon:tensor arena]"),
                Some("[stack:4242]"),
                Some("[vdso]"),
                None,
                Some("/home/a user/lib  two  spaces.so"),
                Some("/SYSV1"),
                Some("/SYSVnot-hex-at-all"),
            ]
        );
        let m = maps.mappings();
        assert!(m[0].shared && m[0].write && !m[0].exec);
        assert_eq!(m[0].file_path(), Some("/dev/zero"));
        assert_eq!(m[0].dev, 1);
        assert_eq!(m[1].file_name(), Some("memfd:pinwise pool"));
        assert_eq!(m[2].inode, 98307);
        assert!(!m[3].is_file() && m[3].file_path().is_none());
        assert!(!m[6].is_file());
        assert_eq!(m[7].dev, (0x103 << 32) | 2);
        assert_eq!(m[7].offset, 0x1f000);
        assert_eq!(m[7].file_name(), Some("lib  two  spaces.so"));
        assert!(m[7].is_file());
    }

    #[test]
    fn unsorted_input_is_sorted_and_empty_input_is_empty() {
        let text = "\
7f0000002000-7f0000003000 r--p 00000000 00:00 0 
7f0000000000-7f0000001000 r--p 00000000 00:00 0 
";
        let maps = ProcMaps::parse(text);
        assert_eq!(maps.mappings()[0].start, 0x7f0000000000);
        assert_eq!(maps.find(0x7f0000002fff).unwrap().end, 0x7f0000003000);
        assert!(maps.find(0x7f0000001000).is_none());
        assert!(ProcMaps::parse("").is_empty());
    }

    #[test]
    fn reads_this_process() {
        let maps = ProcMaps::read(std::process::id()).unwrap();
        let here = finds_the_mapping_and_file_offset_of_an_address as *const () as u64;
        let m = maps.find(here).expect("own code is mapped");
        assert!(m.exec && m.is_file());
    }
}
