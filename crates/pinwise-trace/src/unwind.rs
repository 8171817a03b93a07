//! Unwinding a user stack copied by BPF with the modules' `.eh_frame` (`--dwarf-stacks`):
//! full call chains through code built without frame pointers, where the kernel's
//! frame-pointer walk (`bpf_get_stack`) stops or goes astray.
//!
//! BPF sends, with a malloc-family allocation, the thread's `ip`, `sp` and `bp` and up to
//! 16 KiB of its stack from `sp` (`struct pw_unwind_event`). Here `framehop` unwinds them,
//! with one module per executable file mapping of the process: its `.eh_frame` and
//! `.eh_frame_hdr` read from the file (`object`), placed at the mapping's load bias. Modules
//! are added as the unwind reaches them (a process maps hundreds of libraries; a stack
//! touches a few), and kept per file for the life of the trace.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder};
use object::{Object, ObjectSection, ObjectSegment};

use crate::procmaps::{path_in_process, Mapping};

/// Frames unwound at most.
pub const MAX_FRAMES: usize = pinwise_core::stack::MAX_FRAMES;

/// The unwind sections of one file, and where its code lies relative to a load bias.
struct FileUnwind {
    text_svma: Option<Range<u64>>,
    eh_frame_svma: Option<Range<u64>>,
    eh_frame: Option<Arc<[u8]>>,
    eh_frame_hdr_svma: Option<Range<u64>>,
    eh_frame_hdr: Option<Arc<[u8]>>,
    got_svma: Option<Range<u64>>,
    /// `(p_offset, p_vaddr, p_filesz, executable)` of each loadable segment.
    segments: Vec<(u64, u64, u64, bool)>,
}

impl FileUnwind {
    fn read(path: &std::path::Path) -> Option<FileUnwind> {
        let data = std::fs::read(path).ok()?;
        let file = object::File::parse(&*data).ok()?;
        let section = |name: &str| {
            file.section_by_name(name).map(|s| {
                (
                    s.address()..s.address() + s.size(),
                    s.data().ok().map(Arc::from),
                )
            })
        };
        let (text_svma, _) = section(".text").unzip();
        let (eh_frame_svma, eh_frame) = section(".eh_frame").unzip();
        let (eh_frame_hdr_svma, eh_frame_hdr) = section(".eh_frame_hdr").unzip();
        let (got_svma, _) = section(".got").unzip();
        let segments = file
            .segments()
            .map(|s| {
                let (off, size) = s.file_range();
                let exec = matches!(s.flags(), object::SegmentFlags::Elf { p_flags, .. } if p_flags.0 & 1 != 0);
                (off, s.address(), size, exec)
            })
            .collect();
        Some(FileUnwind {
            text_svma,
            eh_frame_svma,
            eh_frame: eh_frame.flatten(),
            eh_frame_hdr_svma,
            eh_frame_hdr: eh_frame_hdr.flatten(),
            got_svma,
            segments,
        })
    }

    /// The load bias of an executable mapping of this file at `start` from file offset
    /// `offset` (page-aligned: the executable segment may begin later in that page, its
    /// address a page more than its offset, as lld lays files out).
    fn bias(&self, start: u64, offset: u64) -> Option<u64> {
        let &(p_offset, p_vaddr, _, _) = self.segments.iter().find(|(o, _, size, exec)| {
            *exec && offset >= (o & !0xfff) && offset < o + size.max(&1)
        })?;
        // The mapping's first byte is file offset `offset`, at p_vaddr + (offset - p_offset).
        Some(
            start
                .wrapping_sub(p_vaddr)
                .wrapping_add(p_offset)
                .wrapping_sub(offset),
        )
    }
}

/// The unwinder of one process.
struct ProcessUnwind {
    unwinder: UnwinderX86_64<Arc<[u8]>>,
    cache: CacheX86_64,
    /// Mapping starts added as modules.
    added: Vec<u64>,
}

/// Unwinds the stacks BPF copied, per process.
#[derive(Default)]
pub struct StackUnwinder {
    files: HashMap<(u64, u64), Option<Arc<FileUnwind>>>,
    processes: HashMap<u32, ProcessUnwind>,
}

impl StackUnwinder {
    /// Forgets a process (exited, or exec'd: a new address space).
    pub fn forget(&mut self, pid: u32) {
        self.processes.remove(&pid);
    }

    /// The call chain of a thread of `pid` whose registers were `ip`, `sp`, `bp` and whose
    /// stack from `sp` is `stack`: `ip` first, then return addresses, innermost first.
    /// `mapping` finds the file mapping an address lies in (the process's maps).
    pub fn unwind(
        &mut self,
        pid: u32,
        ip: u64,
        sp: u64,
        bp: u64,
        stack: &[u8],
        mut mapping: impl FnMut(u64) -> Option<Mapping>,
    ) -> Vec<u64> {
        // Each pass adds the modules of the frames found that have none yet, and walks
        // again (a process maps hundreds of files; a stack touches a few).
        let mut frames = self.walk(pid, ip, sp, bp, stack);
        for _ in 0..MAX_FRAMES {
            let mut added = false;
            for (i, &a) in frames.iter().enumerate() {
                // A return address may be one past its call's last byte.
                let at = if i == 0 { a } else { a.saturating_sub(1) };
                if let Some(m) = mapping(at) {
                    added |= self.add_module(pid, &m);
                }
            }
            if !added {
                break;
            }
            frames = self.walk(pid, ip, sp, bp, stack);
        }
        frames
    }

    fn walk(&mut self, pid: u32, ip: u64, sp: u64, bp: u64, stack: &[u8]) -> Vec<u64> {
        let Some(p) = self.processes.get_mut(&pid) else {
            return vec![ip];
        };
        let mut read = |addr: u64| -> Result<u64, ()> {
            let off = addr.checked_sub(sp).ok_or(())? as usize;
            let bytes = stack.get(off..off + 8).ok_or(())?;
            Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| ())?))
        };
        let mut frames = Vec::new();
        let mut it = p.unwinder.iter_frames(
            ip,
            UnwindRegsX86_64::new(ip, sp, bp),
            &mut p.cache,
            &mut read,
        );
        while frames.len() < MAX_FRAMES {
            match it.next() {
                Ok(Some(FrameAddress::InstructionPointer(a))) => frames.push(a),
                Ok(Some(FrameAddress::ReturnAddress(a))) => frames.push(a.get()),
                // The end of the stack, or of the window copied (an error).
                Ok(None) | Err(_) => break,
            }
        }
        if frames.is_empty() {
            frames.push(ip);
        }
        frames
    }

    /// Adds the module of mapping `m` to `pid`'s unwinder; false when it was there already
    /// or has no unwind information.
    fn add_module(&mut self, pid: u32, m: &Mapping) -> bool {
        let p = self.processes.entry(pid).or_insert_with(|| ProcessUnwind {
            unwinder: UnwinderX86_64::new(),
            cache: CacheX86_64::new(),
            added: Vec::new(),
        });
        if p.added.contains(&m.start) {
            return false;
        }
        p.added.push(m.start);
        let Some(path) = m.file_path() else {
            return false;
        };
        let file = self
            .files
            .entry((m.dev, m.inode))
            .or_insert_with(|| FileUnwind::read(&path_in_process(pid, path)).map(Arc::new))
            .clone();
        let Some(f) = file else {
            return false;
        };
        let Some(bias) = f.bias(m.start, m.offset) else {
            return false;
        };
        if f.eh_frame.is_none() {
            return false;
        }
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: f.text_svma.clone(),
            got_svma: f.got_svma.clone(),
            eh_frame_svma: f.eh_frame_svma.clone(),
            eh_frame: f.eh_frame.clone(),
            eh_frame_hdr_svma: f.eh_frame_hdr_svma.clone(),
            eh_frame_hdr: f.eh_frame_hdr.clone(),
            ..Default::default()
        };
        p.unwinder
            .add_module(Module::new(path.to_string(), m.start..m.end, bias, info));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_test_binarys_unwind_sections() {
        let exe = std::env::current_exe().unwrap();
        let f = FileUnwind::read(&exe).expect("readable");
        assert!(f.eh_frame.is_some(), "an .eh_frame");
        assert!(f.eh_frame_hdr.is_some(), "an .eh_frame_hdr");
        assert!(!f.segments.is_empty());
    }

    /// This thread's registers and 16 KiB of its stack, at the caller's return.
    #[inline(never)]
    fn snapshot() -> (u64, u64, u64, Vec<u8>) {
        let (ip, sp, bp): (u64, u64, u64);
        // SAFETY: reads the instruction pointer (lea), stack and frame pointers.
        unsafe {
            std::arch::asm!(
                "lea {ip}, [rip]",
                "mov {sp}, rsp",
                "mov {bp}, rbp",
                ip = out(reg) ip,
                sp = out(reg) sp,
                bp = out(reg) bp,
            )
        };
        let mut stack = vec![0u8; 16384];
        // SAFETY: reads this thread's own stack from sp up (mapped: at least this much
        // lies between sp and the stack's top in a test thread).
        let n = unsafe {
            let local = libc::iovec {
                iov_base: stack.as_mut_ptr().cast(),
                iov_len: stack.len(),
            };
            let remote = libc::iovec {
                iov_base: sp as *mut libc::c_void,
                iov_len: stack.len(),
            };
            libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0)
        };
        stack.truncate(n.max(0) as usize);
        (ip, sp, bp, stack)
    }

    #[inline(never)]
    fn level_two() -> (u64, u64, u64, Vec<u8>) {
        std::hint::black_box(snapshot())
    }

    #[inline(never)]
    fn level_one() -> (u64, u64, u64, Vec<u8>) {
        std::hint::black_box(level_two())
    }

    #[test]
    fn unwinds_this_threads_stack_through_its_callers() {
        let (ip, sp, bp, stack) = level_one();
        let maps = crate::procmaps::ProcMaps::read(std::process::id()).unwrap();
        let mut u = StackUnwinder::default();
        let frames = u.unwind(std::process::id(), ip, sp, bp, &stack, |a| {
            maps.find(a).filter(|m| m.exec && m.is_file()).cloned()
        });
        // snapshot, level_two, level_one, this test, then the test harness's frames.
        let within = |f: fn() -> (u64, u64, u64, Vec<u8>), a: u64| {
            let start = f as *const () as u64;
            a > start && a < start + 4096
        };
        assert!(frames.len() >= 4, "{frames:x?}");
        assert!(within(level_two, frames[1]), "{frames:x?}");
        assert!(within(level_one, frames[2]), "{frames:x?}");
    }
}
