//! What a process had already done to its host memory when the tracer attached to it
//! (`pinwise trace --pid`), as far as `/proc/PID/maps` and `/proc/PID/smaps` can tell.
//!
//! - **Pinned by the driver before the attach.** The NVIDIA driver backs `cuMemHostAlloc` /
//!   `cuMemAllocHost` memory with shared mappings of its control device: they show as
//!   `rw-s ... /dev/nvidiactl` in the maps. The CPU stand-in for libcuda (a test fixture)
//!   imitates this with a shared memfd named [`STANDIN_PINNED_NAME`], which shows as
//!   `/memfd:pinwise-standin-nvidiactl (deleted)`. Such a range is page-locked for sure; the
//!   tracer reports it as a pinned allocation (with no call site: its allocation was not
//!   seen) the first time a copy touches it, so that the driver's own internal mappings of
//!   the same device, which no copy touches, do not become records.
//! - **Shared anonymous memory: possibly pinned, not known.** From driver 580 on, the
//!   driver backs `cuMemAllocHost` / `cuMemHostAlloc` memory with shared anonymous mappings
//!   (`rw-s ... /dev/zero (deleted)`), whose smaps entries (`VmFlags: rd wr sh mr mw me ms`,
//!   `Locked: 0`) and whose process's `VmPin`/`VmLck` are exactly those of a program's own
//!   `mmap(MAP_SHARED | MAP_ANONYMOUS)` memory (measured on an H100 with driver 580.159.04:
//!   `bench/results/gpu-attach.md`). Nothing in `/proc` tells them apart, so such a range is
//!   counted as "possibly pinned" for the report and otherwise treated as unknown.
//! - **Other mappings of the driver's devices** (`/dev/nvidia0`, `/dev/nvidia-uvm`, ...) are
//!   device or managed memory, not host memory a copy stages through: left as they are.
//! - **Everything else** that existed before the attach has an unknown state: it may have
//!   been registered with `cuMemHostRegister` before the attach, and nothing in `/proc` says
//!   so (a registration leaves no mark in the maps). The tracer does not make records for
//!   memory whose allocation it did not see when attached (the history's
//!   `track_untracked` is off), so copies of it stay out of "pinning would save" and out of
//!   the pinning plan, and the report says how many there were.
//! - **mlocked memory** (`Locked:` in smaps) is counted for the report, not taken as
//!   pinned: the driver treats mlocked memory it did not register as pageable.

use std::collections::BTreeMap;
use std::io;

use crate::procmaps::{Mapping, ProcMaps};

/// The memfd name the CPU stand-in for libcuda (a test fixture) gives its pinned host
/// allocations, imitating the driver's `/dev/nvidiactl` mappings.
pub const STANDIN_PINNED_NAME: &str = "pinwise-standin-nvidiactl";

/// The pseudo-module of the call site given to ranges pinned before the attach (their
/// allocation was not seen): reports show `[pinned before the attach]+0x0`.
pub const PREATTACH_MODULE: &str = "[pinned before the attach]";

/// The driver's control device, whose shared mappings back `cuMemHostAlloc` memory.
pub const DRIVER_CONTROL_DEVICE: &str = "/dev/nvidiactl";

/// The path `/proc/PID/maps` shows for a shared anonymous mapping (with ` (deleted)`).
pub const SHARED_ANONYMOUS_PATH: &str = "/dev/zero";

/// What a mapping present at attach time is, for the tracer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MappingClass {
    /// Host memory the driver pinned (`/dev/nvidiactl`, or the stand-in's memfd).
    DriverPinned,
    /// A shared anonymous mapping (`/dev/zero (deleted)`, read-write): how driver 580 and
    /// later map pinned host memory, and also how a program's own `MAP_SHARED` memory
    /// looks. Its pinned state is unknown.
    SharedAnonymous,
    /// Another mapping of an NVIDIA device (device or managed memory).
    DriverDevice,
    /// Anything else: files, anonymous memory, the heap (state unknown if it is used).
    Other,
}

/// Classifies one mapping.
pub fn classify(m: &Mapping) -> MappingClass {
    let Some(path) = m.path.as_deref() else {
        return MappingClass::Other;
    };
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    let host_rw = m.read && m.write && m.shared;
    if path == DRIVER_CONTROL_DEVICE && host_rw {
        return MappingClass::DriverPinned;
    }
    if path
        .strip_prefix("/memfd:")
        .is_some_and(|name| name == STANDIN_PINNED_NAME)
        && host_rw
    {
        return MappingClass::DriverPinned;
    }
    if path.starts_with("/dev/nvidia") {
        return MappingClass::DriverDevice;
    }
    if path == SHARED_ANONYMOUS_PATH && host_rw {
        return MappingClass::SharedAnonymous;
    }
    MappingClass::Other
}

/// What the tracer learnt about a process when it attached.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PreAttach {
    /// Ranges the driver had pinned: start -> end.
    pub pinned: BTreeMap<u64, u64>,
    /// Bytes in `pinned`.
    pub pinned_bytes: u64,
    /// Shared anonymous mappings (possibly pinned by the driver; state unknown).
    pub possibly_pinned_mappings: u64,
    /// Their bytes.
    pub possibly_pinned_bytes: u64,
    /// Bytes of other writable host memory mapped at attach time (state unknown if used;
    /// `possibly_pinned_bytes` not included).
    pub unknown_bytes: u64,
    /// Bytes locked with mlock (smaps `Locked:`) outside the driver's mappings.
    pub mlocked_bytes: u64,
}

impl PreAttach {
    /// Surveys process `pid` (its maps, and its smaps for locked memory when readable).
    pub fn survey(pid: u32) -> io::Result<PreAttach> {
        let maps = ProcMaps::read(pid)?;
        let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
        Ok(PreAttach::from_maps(&maps, &smaps))
    }

    /// The survey of a process with these maps and this smaps text (may be empty).
    pub fn from_maps(maps: &ProcMaps, smaps: &str) -> PreAttach {
        let mut p = PreAttach::default();
        for m in maps.mappings() {
            let len = m.end.saturating_sub(m.start);
            match classify(m) {
                MappingClass::DriverPinned => {
                    p.pinned.insert(m.start, m.end);
                    p.pinned_bytes += len;
                }
                MappingClass::SharedAnonymous => {
                    p.possibly_pinned_mappings += 1;
                    p.possibly_pinned_bytes += len;
                }
                MappingClass::DriverDevice => {}
                MappingClass::Other => {
                    if m.read && m.write && !m.exec {
                        p.unknown_bytes += len;
                    }
                }
            }
        }
        for (start, locked) in smaps_locked(smaps) {
            let in_driver = maps
                .find(start)
                .is_some_and(|m| classify(m) == MappingClass::DriverPinned);
            if !in_driver {
                p.mlocked_bytes += locked;
            }
        }
        p
    }
}

/// (mapping start, `Locked:` bytes) of every smaps entry with locked memory.
///
/// Read by hand rather than with procfs-core's smaps parser: that one refuses a whole
/// entry (or file) for one field that is not a number, where only `Locked:` matters here.
fn smaps_locked(text: &str) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut current: Option<u64> = None;
    for line in text.lines() {
        if let Some(kib) = line.strip_prefix("Locked:") {
            let kib: u64 = kib
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .unwrap_or(0);
            if let (Some(start), true) = (current, kib > 0) {
                out.push((start, kib * 1024));
            }
            continue;
        }
        // A mapping's header line starts with `start-end perms`.
        let head = line.split_whitespace().next().unwrap_or("");
        if let Some((start, end)) = head.split_once('-') {
            if let (Ok(s), Ok(_)) = (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16)) {
                current = Some(s);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0c0a00000-55d0c0a02000 r-xp 00000000 fe:01 1234                       /usr/bin/app
55d0c1000000-55d0c1021000 rw-p 00000000 00:00 0                          [heap]
7f0000000000-7f0000400000 rw-s 00000000 00:05 410                        /dev/nvidiactl
7f0000400000-7f0000401000 r--s 00000000 00:05 410                        /dev/nvidiactl
7f0000500000-7f0000600000 rw-s 00000000 00:05 411                        /dev/nvidia-uvm
7f0000600000-7f0000700000 rw-s 00000000 00:05 412                        /dev/nvidia0
7f0000800000-7f0000a00000 rw-s 00000000 00:01 77                         /memfd:pinwise-standin-nvidiactl (deleted)
7f0000a00000-7f0000b00000 rw-s 00000000 00:01 78                         /memfd:something-else (deleted)
7f0000c00000-7f0000d00000 rw-p 00000000 00:00 0 
7f0000e00000-7f0001200000 rw-s 00000000 00:01 2053                       /dev/zero (deleted)
7f0001200000-7f0001300000 r--s 00000000 00:01 2054                       /dev/zero (deleted)
";

    const SMAPS: &str = "\
7f0000000000-7f0000400000 rw-s 00000000 00:05 410                        /dev/nvidiactl
Size:               4096 kB
Locked:             4096 kB
7f0000c00000-7f0000d00000 rw-p 00000000 00:00 0 
Size:               1024 kB
Locked:              512 kB
VmFlags: rd wr mr mw me ac lo
";

    #[test]
    fn driver_control_mappings_and_the_standin_memfd_are_pinned() {
        let maps = ProcMaps::parse(MAPS);
        let classes: Vec<MappingClass> = maps.mappings().iter().map(classify).collect();
        use MappingClass::*;
        assert_eq!(
            classes,
            [
                Other,
                Other,
                DriverPinned,
                // Read-only: not host memory the application writes and copies from.
                DriverDevice,
                DriverDevice,
                DriverDevice,
                DriverPinned,
                Other,
                Other,
                // How driver 580 maps cuMemAllocHost memory (and any MAP_SHARED anonymous
                // memory): possibly pinned.
                SharedAnonymous,
                // Read-only shared anonymous memory is not a copy's staging buffer.
                Other
            ]
        );
    }

    #[test]
    fn survey_sums_pinned_unknown_and_mlocked_memory() {
        let p = PreAttach::from_maps(&ProcMaps::parse(MAPS), SMAPS);
        assert_eq!(
            p.pinned.iter().map(|(&s, &e)| (s, e)).collect::<Vec<_>>(),
            [
                (0x7f00_0000_0000, 0x7f00_0040_0000),
                (0x7f00_0080_0000, 0x7f00_00a0_0000)
            ]
        );
        assert_eq!(p.pinned_bytes, 0x40_0000 + 0x20_0000);
        // The heap, the other memfd and the anonymous mapping; not the shared anonymous one,
        // counted apart as possibly pinned.
        assert_eq!(p.unknown_bytes, 0x21000 + 0x10_0000 + 0x10_0000);
        assert_eq!(
            (p.possibly_pinned_mappings, p.possibly_pinned_bytes),
            (1, 0x40_0000)
        );
        // The driver's locked pages are not counted as mlocked.
        assert_eq!(p.mlocked_bytes, 512 * 1024);
    }

    #[test]
    fn a_private_mapping_of_the_control_device_is_not_pinned_memory() {
        let maps =
            ProcMaps::parse("7f0000000000-7f0000400000 rw-p 00000000 00:05 410 /dev/nvidiactl\n");
        assert_eq!(classify(&maps.mappings()[0]), MappingClass::DriverDevice);
    }
}
