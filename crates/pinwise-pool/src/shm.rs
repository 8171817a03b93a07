//! Shared memory: the service's segments (a sealed memfd each, on 2 MiB huge pages when the
//! system has them reserved) and the clients' mappings of them.

use std::ffi::c_void;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;

use rustix::fs::{self, MemfdFlags, SealFlags};
use rustix::mm::{self, MapFlags, ProtFlags};

/// 2 MiB: the huge-page size segments try first.
pub const HUGE_PAGE: usize = 2 << 20;

/// A shared read-write mapping of a memfd; unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; access goes through &self/&mut self.
unsafe impl Send for Mapping {}
// SAFETY: as above: shared references only read.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps the first `len` bytes of `fd`, shared, read-write.
    pub fn new(fd: BorrowedFd<'_>, len: usize) -> rustix::io::Result<Mapping> {
        if len == 0 {
            return Err(rustix::io::Errno::INVAL);
        }
        // SAFETY: a fresh mapping at an address the kernel chooses replaces nothing.
        let p = unsafe {
            mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )?
        };
        Ok(Mapping {
            ptr: NonNull::new(p.cast()).ok_or(rustix::io::Errno::INVAL)?,
            len,
        })
    }

    /// First byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty (never).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes. Another process (the service) may write them during a device-to-host copy
    /// the caller asked for; between copies only this process touches them.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` mapped bytes that live as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` is the only access in this process.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our own mapping; nothing refers to it after drop.
        let _ = unsafe { mm::munmap(self.ptr.as_ptr().cast::<c_void>(), self.len) };
    }
}

/// A segment of the service: a memfd sealed against resizing (so that no client can shrink
/// it under the service's mapping), mapped in the service.
#[derive(Debug)]
pub struct Segment {
    fd: OwnedFd,
    map: Mapping,
    huge: bool,
}

/// `n` rounded up to a multiple of `to` (a power of two); `None` on overflow.
pub fn round_up(n: usize, to: usize) -> Option<usize> {
    Some(n.checked_add(to - 1)? & !(to - 1))
}

impl Segment {
    /// A new segment of at least `len` bytes: 2 MiB huge pages when `try_huge` and the
    /// system has enough reserved (`vm.nr_hugepages`), 4 KiB pages otherwise. The pages
    /// are populated (faulted in) here.
    pub fn new(len: usize, try_huge: bool) -> rustix::io::Result<Segment> {
        if try_huge {
            if let Some(huge_len) = round_up(len, HUGE_PAGE) {
                if let Ok(s) = Segment::make(huge_len, true) {
                    return Ok(s);
                }
            }
        }
        let page = rustix::param::page_size();
        Segment::make(round_up(len, page).ok_or(rustix::io::Errno::NOMEM)?, false)
    }

    fn make(len: usize, huge: bool) -> rustix::io::Result<Segment> {
        let mut flags = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING;
        if huge {
            flags |= MemfdFlags::HUGETLB;
        }
        let fd = fs::memfd_create("pinwise-pool", flags)?;
        fs::ftruncate(&fd, len as u64)?;
        fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
        // A hugetlb mapping reserves its huge pages at mmap time (ENOMEM when there are not
        // enough), so a later fault cannot fail with SIGBUS.
        let map = Mapping::new(fd.as_fd(), len)?;
        Ok(Segment { fd, map, huge })
    }

    /// The memfd (what clients receive).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The service's mapping.
    pub fn mapping(&self) -> &Mapping {
        &self.map
    }

    /// Length in bytes (a page multiple).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether it is empty (never).
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Whether it is on 2 MiB huge pages.
    pub fn is_huge(&self) -> bool {
        self.huge
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_is_shared_with_a_second_mapping_and_cannot_be_shrunk() {
        let seg = Segment::new(10_000, false).unwrap();
        assert_eq!(
            seg.len(),
            round_up(10_000, rustix::param::page_size()).unwrap()
        );
        let mut other = Mapping::new(seg.fd(), seg.len()).unwrap();
        other.as_mut_slice()[..5].copy_from_slice(b"hello");
        assert_eq!(&seg.mapping().as_slice()[..5], b"hello");
        assert_eq!(
            fs::ftruncate(seg.fd(), 4096),
            Err(rustix::io::Errno::PERM),
            "sealed against shrinking"
        );
    }

    fn free_huge_pages() -> u64 {
        std::fs::read_to_string("/proc/meminfo")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("HugePages_Free:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    #[test]
    fn huge_pages_when_reserved_else_4_kib_pages() {
        let free = free_huge_pages();
        let seg = Segment::new(3 * HUGE_PAGE - 5000, true).unwrap();
        if free >= 3 {
            assert!(seg.is_huge(), "{free} huge pages free");
            assert_eq!(seg.len(), 3 * HUGE_PAGE);
        } else {
            assert!(!seg.is_huge(), "only {free} huge pages free: 4 KiB pages");
            assert_eq!(seg.len(), 3 * HUGE_PAGE - rustix::param::page_size());
        }
        let mut other = Mapping::new(seg.fd(), seg.len()).unwrap();
        other.as_mut_slice()[seg.len() - 1] = 9;
        assert_eq!(seg.mapping().as_slice()[seg.len() - 1], 9);
    }

    #[test]
    fn rounding() {
        assert_eq!(round_up(1, HUGE_PAGE), Some(HUGE_PAGE));
        assert_eq!(round_up(HUGE_PAGE, HUGE_PAGE), Some(HUGE_PAGE));
        assert_eq!(round_up(usize::MAX, HUGE_PAGE), None);
    }
}
