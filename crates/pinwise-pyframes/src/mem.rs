//! Checked reads of this process's memory.
//!
//! Every read of interpreter memory goes through [`Memory`]. [`SelfMemory`] reads with
//! `process_vm_readv(2)` on the calling process: an unmapped or unreadable address makes
//! the system call fail (`EFAULT`) instead of faulting, so a torn frame chain, a stale
//! pointer or a wrong offset table gives no frames, never a crash of the host program.
//! Reading one's own process passes the kernel's ptrace access check whatever Yama's
//! `ptrace_scope`; where the system call is unavailable (a seccomp filter that denies it)
//! every read fails and a capture gives nothing.

use std::sync::atomic::{AtomicI32, Ordering};

/// A source of bytes at addresses, every read checked.
pub trait Memory {
    /// Fills `buf` from `addr`; false (and `buf` unspecified) if any byte is unreadable.
    fn read(&self, addr: usize, buf: &mut [u8]) -> bool;

    /// Fills each `bufs[i]` from `addrs[i]`, setting `ok[i]` to whether it could (the three
    /// slices have one length). [`SelfMemory`] does it in as few system calls as it can.
    fn read_many(&self, addrs: &[usize], bufs: &mut [&mut [u8]], ok: &mut [bool]) {
        for ((&a, b), ok) in addrs.iter().zip(bufs.iter_mut()).zip(ok.iter_mut()) {
            *ok = self.read(a, b);
        }
    }

    /// A native-endian `u64` at `addr`.
    fn read_u64(&self, addr: usize) -> Option<u64> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b).then(|| u64::from_ne_bytes(b))
    }
}

/// The lowest address treated as a possible pointer (the first page is never mapped).
const MIN_ADDR: usize = 0x1000;
/// One past the highest user-space address on x86-64 and AArch64 (47/48-bit).
const MAX_ADDR: usize = 1 << 48;

/// Whether `addr..addr+len` could be user-space memory at all (cheap, before a read).
pub fn plausible(addr: usize, len: usize) -> bool {
    addr >= MIN_ADDR && addr.checked_add(len).is_some_and(|end| end <= MAX_ADDR)
}

/// This process's id for `process_vm_readv`, kept so that a read costs one system call;
/// 0 until [`remember_pid`], and reset in a forked child.
static PID: AtomicI32 = AtomicI32::new(0);

extern "C" fn forked_child() {
    // SAFETY: getpid has no preconditions; it is async-signal-safe, as a fork handler
    // in the child must be.
    PID.store(unsafe { libc::getpid() }, Ordering::Relaxed);
}

/// Keeps this process's id for reads, and has a forked child keep its own (registers a
/// `pthread_atfork` handler: call once, outside allocation hooks).
pub fn remember_pid() {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: `forked_child` is an `extern "C" fn()` that lives for the whole process.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
        if rc == 0 {
            forked_child();
        }
    });
}

fn pid() -> libc::pid_t {
    match PID.load(Ordering::Relaxed) {
        // SAFETY: getpid has no preconditions.
        0 => unsafe { libc::getpid() },
        p => p,
    }
}

/// This process's memory, read with `process_vm_readv` (no allocation, one system call a
/// read, never a fault).
#[derive(Debug, Clone, Copy, Default)]
pub struct SelfMemory;

impl Memory for SelfMemory {
    fn read(&self, addr: usize, buf: &mut [u8]) -> bool {
        read_process(pid(), addr, buf)
    }

    fn read_many(&self, addrs: &[usize], bufs: &mut [&mut [u8]], ok: &mut [bool]) {
        read_process_many(pid(), addrs, bufs, ok)
    }
}

/// Another process's memory (the tracer reading a traced interpreter), read with
/// `process_vm_readv`: needs the right to ptrace it (root, or `CAP_SYS_PTRACE`). Reads of
/// a process that is gone fail, like reads of unmapped memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessMemory {
    /// The process read.
    pub pid: i32,
}

impl Memory for ProcessMemory {
    fn read(&self, addr: usize, buf: &mut [u8]) -> bool {
        read_process(self.pid, addr, buf)
    }

    fn read_many(&self, addrs: &[usize], bufs: &mut [&mut [u8]], ok: &mut [bool]) {
        read_process_many(self.pid, addrs, bufs, ok)
    }
}

/// One read of process `pid`'s memory.
fn read_process(pid: libc::pid_t, addr: usize, buf: &mut [u8]) -> bool {
    if buf.is_empty() {
        return true;
    }
    if !plausible(addr, buf.len()) {
        return false;
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` describes `buf`, which we borrow mutably for the call; the kernel
    // validates the remote range and fails with EFAULT rather than faulting if any of
    // it is unmapped, so no address given here can crash the process.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    n == buf.len() as isize
}

/// Batched reads of process `pid`'s memory (see [`Memory::read_many`]).
fn read_process_many(pid: libc::pid_t, addrs: &[usize], bufs: &mut [&mut [u8]], ok: &mut [bool]) {
    const BATCH: usize = 64;
    let count = addrs.len().min(bufs.len()).min(ok.len());
    let mut i = 0;
    while i < count {
        if !plausible(addrs[i], bufs[i].len()) {
            ok[i] = false;
            i += 1;
            continue;
        }
        // One call for the run of plausible requests from `i` (at most BATCH).
        let mut local = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; BATCH];
        let mut remote = local;
        let mut n = 0;
        while i + n < count && n < BATCH && plausible(addrs[i + n], bufs[i + n].len()) {
            let buf = &mut bufs[i + n];
            local[n] = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.len(),
            };
            remote[n] = libc::iovec {
                iov_base: addrs[i + n] as *mut libc::c_void,
                iov_len: buf.len(),
            };
            n += 1;
        }
        // SAFETY: `local[..n]` describe the distinct buffers `bufs[i..i+n]`, borrowed
        // mutably for the call; the kernel checks the remote ranges and stops at the
        // first unreadable one (EFAULT) instead of faulting.
        let got = unsafe {
            libc::process_vm_readv(pid, local.as_ptr(), n as _, remote.as_ptr(), n as _, 0)
        };
        // Requests wholly transferred are good; the transfer stops at the first bad one.
        let mut left = got.max(0) as usize;
        let mut done = 0;
        while done < n && left >= local[done].iov_len {
            left -= local[done].iov_len;
            ok[i + done] = true;
            done += 1;
        }
        if done < n {
            ok[i + done] = false;
            done += 1;
        }
        i += done;
    }
}

/// A fake memory for tests: byte regions at chosen addresses; everything else unreadable.
#[cfg(test)]
#[derive(Debug, Default)]
pub struct FakeMemory {
    regions: Vec<(usize, Vec<u8>)>,
    /// Reads made so far.
    pub reads: std::cell::Cell<usize>,
}

#[cfg(test)]
impl FakeMemory {
    /// Adds `bytes` at `addr`.
    pub fn put(&mut self, addr: usize, bytes: Vec<u8>) {
        self.regions.push((addr, bytes));
    }

    /// Writes a u64 at `addr`, inside an existing region.
    pub fn set_u64(&mut self, addr: usize, v: u64) {
        self.set(addr, &v.to_ne_bytes());
    }

    /// Writes bytes at `addr`, inside an existing region.
    pub fn set(&mut self, addr: usize, bytes: &[u8]) {
        for (base, data) in &mut self.regions {
            if addr >= *base && addr + bytes.len() <= *base + data.len() {
                let o = addr - *base;
                data[o..o + bytes.len()].copy_from_slice(bytes);
                return;
            }
        }
        panic!("no region holds {addr:#x}");
    }
}

#[cfg(test)]
impl Memory for FakeMemory {
    fn read(&self, addr: usize, buf: &mut [u8]) -> bool {
        self.reads.set(self.reads.get() + 1);
        self.read_quietly(addr, buf)
    }

    /// One call for the lot, as the real reader makes one system call.
    fn read_many(&self, addrs: &[usize], bufs: &mut [&mut [u8]], ok: &mut [bool]) {
        self.reads.set(self.reads.get() + 1);
        for ((&a, b), ok) in addrs.iter().zip(bufs.iter_mut()).zip(ok.iter_mut()) {
            *ok = self.read_quietly(a, b);
        }
    }
}

#[cfg(test)]
impl FakeMemory {
    fn read_quietly(&self, addr: usize, buf: &mut [u8]) -> bool {
        for (base, data) in &self.regions {
            if addr >= *base && addr + buf.len() <= *base + data.len() {
                let o = addr - *base;
                buf.copy_from_slice(&data[o..o + buf.len()]);
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_memory_exactly() {
        let data: Vec<u8> = (0..=255).collect();
        let mut buf = [0u8; 256];
        assert!(SelfMemory.read(data.as_ptr() as usize, &mut buf));
        assert_eq!(&buf[..], &data[..]);
        let x = 0x1122_3344_5566_7788u64;
        assert_eq!(SelfMemory.read_u64(&x as *const u64 as usize), Some(x));
    }

    #[test]
    fn unmapped_and_absurd_addresses_fail_without_faulting() {
        let mut buf = [0u8; 64];
        for addr in [
            0,
            8,
            0xfff,
            0x1000,
            0xdead_beef,
            0x7fff_ffff_fff0,
            usize::MAX - 8,
            0xffff_8000_0000_0000,
        ] {
            assert!(!SelfMemory.read(addr, &mut buf), "{addr:#x} read");
        }
        // A page we map and then unmap: it was valid, now it is not.
        // SAFETY: an anonymous private mapping, checked for failure, unmapped below.
        let page = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(page, libc::MAP_FAILED);
        assert!(SelfMemory.read(page as usize, &mut buf));
        // SAFETY: `page` is the 4096-byte mapping made above, not used after this.
        assert_eq!(unsafe { libc::munmap(page, 4096) }, 0);
        assert!(!SelfMemory.read(page as usize, &mut buf));
        // A read that starts mapped and runs off the end of a mapping fails whole.
        // SAFETY: as above; two pages, the second unmapped at once.
        let two = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(two, libc::MAP_FAILED);
        // SAFETY: unmaps the second page of the mapping made above.
        assert_eq!(
            unsafe { libc::munmap(two.cast::<u8>().add(4096).cast(), 4096) },
            0
        );
        assert!(!SelfMemory.read(two as usize + 4096 - 32, &mut buf));
        assert!(SelfMemory.read(two as usize + 4096 - 64, &mut buf));
        // SAFETY: the first page of that mapping, unused after this.
        assert_eq!(unsafe { libc::munmap(two, 4096) }, 0);
    }

    #[test]
    fn the_remembered_pid_is_this_process_and_a_forked_child_gets_its_own() {
        remember_pid();
        // SAFETY: getpid has no preconditions.
        assert_eq!(pid(), unsafe { libc::getpid() });
        // SAFETY: the child only calls async-signal-safe functions (getpid, _exit) and
        // reads an atomic before exiting; the parent waits for it.
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            // SAFETY: getpid has no preconditions.
            let ok = pid() == unsafe { libc::getpid() } && pid() != 0;
            // SAFETY: _exit ends the forked child at once, running nothing of the parent's.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above; `status` is a valid out-parameter.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "child saw a stale pid"
        );
    }

    #[test]
    fn batched_reads_mark_each_request_and_go_on_past_bad_ones() {
        let a: Vec<u8> = (0..100).collect();
        let b: Vec<u8> = (100..200).collect();
        let addrs = [
            a.as_ptr() as usize,
            0x10,
            b.as_ptr() as usize,
            0x7fff_dead_0000,
            a.as_ptr() as usize + 50,
        ];
        let mut bufs = [[0u8; 50]; 5];
        let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
        let mut ok = [false; 5];
        SelfMemory.read_many(&addrs, &mut refs, &mut ok);
        assert_eq!(ok, [true, false, true, false, true]);
        assert_eq!(&bufs[0][..], &a[..50]);
        assert_eq!(&bufs[2][..], &b[..50]);
        assert_eq!(&bufs[4][..], &a[50..]);
        // More requests than one batch.
        let addrs: Vec<usize> = (0..150).map(|i| a.as_ptr() as usize + i % 90).collect();
        let mut bufs = vec![[0u8; 10]; 150];
        let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
        let mut ok = vec![false; 150];
        SelfMemory.read_many(&addrs, &mut refs, &mut ok);
        assert!(ok.iter().all(|&o| o));
        for (i, buf) in bufs.iter().enumerate() {
            assert_eq!(buf[0], (i % 90) as u8);
        }
    }

    #[test]
    fn another_process_is_read_by_pid_and_a_gone_one_fails() {
        let data: Vec<u8> = (0..=255).collect();
        // SAFETY: getpid has no preconditions.
        let me = ProcessMemory {
            pid: unsafe { libc::getpid() },
        };
        let mut buf = [0u8; 256];
        assert!(me.read(data.as_ptr() as usize, &mut buf));
        assert_eq!(&buf[..], &data[..]);
        // A child that has exited and been reaped: its pid names no process.
        let child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        let mut child = child;
        child.wait().unwrap();
        let gone = ProcessMemory { pid };
        assert!(!gone.read(data.as_ptr() as usize, &mut buf));
        let mut ok = [true; 1];
        gone.read_many(&[data.as_ptr() as usize], &mut [&mut buf[..]], &mut ok);
        assert_eq!(ok, [false]);
    }

    #[test]
    fn plausible_rejects_null_page_kernel_and_overflow() {
        assert!(!plausible(0, 8));
        assert!(!plausible(0xff8, 8));
        assert!(plausible(0x1000, 8));
        assert!(!plausible((1 << 48) - 4, 8));
        assert!(!plausible(usize::MAX, 1));
    }
}
