//! The application's call site when cudart is linked statically into the executable.
//!
//! With the shared cudart the runtime hooks see the application's call to
//! `cudaMallocHost`, and the driver hook underneath attributes to it. A static cudart is
//! part of the executable, so no runtime hook runs: the driver hook's own return address is
//! inside cudart, the same for every allocation. If the executable defines the runtime's
//! allocation functions (its symbol table says where), the allocation hooks walk the stack
//! (the unwinder, through the frames' unwind tables) to the frame that called one of them:
//! that return address is the application's call site. A few microseconds, only for the
//! (rare, milliseconds-long) pinned allocations and frees; never for copies.

use std::ffi::{c_int, c_void};

/// The runtime's entry points whose callers are the application's call sites.
const ENTRY_POINTS: &[&str] = &["cudaMallocHost", "cudaHostAlloc", "cudaFreeHost"];

/// Where the statically linked runtime's entry points lie in this process.
#[derive(Debug, Clone, Default)]
pub struct StaticRuntime {
    ranges: Vec<(usize, usize)>,
}

impl StaticRuntime {
    /// The executable's own definitions of the runtime's allocation entry points (none
    /// when cudart is shared, or the executable is stripped).
    pub fn of_this_process() -> StaticRuntime {
        let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
            return StaticRuntime::default();
        };
        let Ok(symbols) = crate::elf::function_symbols(&exe, ENTRY_POINTS) else {
            return StaticRuntime::default();
        };
        let bias = main_program_bias();
        let ranges = symbols
            .iter()
            .filter(|s| s.size > 0)
            .map(|s| {
                let start = bias.wrapping_add(s.value as usize);
                (start, start + s.size as usize)
            })
            .collect();
        StaticRuntime { ranges }
    }

    /// Whether the executable has a static cudart's entry points.
    pub fn is_present(&self) -> bool {
        !self.ranges.is_empty()
    }

    fn contains(&self, ip: usize) -> bool {
        self.ranges.iter().any(|&(s, e)| ip >= s && ip < e)
    }

    /// The return address into the caller of the runtime entry point on this thread's
    /// stack, if there is one.
    pub fn application_caller(&self) -> Option<usize> {
        if !self.is_present() {
            return None;
        }
        struct Walk<'a> {
            runtime: &'a StaticRuntime,
            in_runtime: bool,
            frames: u32,
            found: Option<usize>,
        }
        unsafe extern "C" fn each(ctx: *mut c_void, arg: *mut c_void) -> c_int {
            // SAFETY: `arg` is the `Walk` passed below, alive for the whole walk; `ctx` is the
            // unwinder's context for this frame.
            let (walk, ip) = unsafe { (&mut *(arg as *mut Walk<'_>), _Unwind_GetIP(ctx)) };
            walk.frames += 1;
            if walk.runtime.contains(ip.wrapping_sub(1)) {
                walk.in_runtime = true;
            } else if walk.in_runtime {
                walk.found = Some(ip);
                return END_OF_STACK;
            }
            if walk.frames > 64 {
                return END_OF_STACK;
            }
            NO_REASON
        }
        let mut walk = Walk {
            runtime: self,
            in_runtime: false,
            frames: 0,
            found: None,
        };
        // SAFETY: the callback only reads the frame's IP and writes `walk`.
        unsafe { _Unwind_Backtrace(each, &mut walk as *mut Walk<'_> as *mut c_void) };
        walk.found
    }
}

const NO_REASON: c_int = 0;
const END_OF_STACK: c_int = 5;

extern "C" {
    fn _Unwind_Backtrace(
        trace: unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int,
        arg: *mut c_void,
    ) -> c_int;
    fn _Unwind_GetIP(ctx: *mut c_void) -> usize;
}

/// The main program's load bias once looked up (`usize::MAX`: not yet).
static MAIN_BIAS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(usize::MAX);

/// The load bias of the main program (the first object the loader lists; 0 for a non-PIE
/// executable). Looked up once, when the library is loaded (`state::on_load`), and kept: a
/// forked child never asks the loader, whose lock another thread of the parent may have
/// held at the fork (the child would wait for it forever).
pub(crate) fn main_program_bias() -> usize {
    use std::sync::atomic::Ordering;
    let known = MAIN_BIAS.load(Ordering::Acquire);
    if known != usize::MAX {
        return known;
    }
    let bias = look_up_main_program_bias();
    MAIN_BIAS.store(bias, Ordering::Release);
    bias
}

fn look_up_main_program_bias() -> usize {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: `data` is the `usize` passed below; `info` is valid during the callback.
        unsafe { *(data as *mut usize) = (*info).dlpi_addr as usize };
        1 // the main program comes first
    }
    let mut bias = 0usize;
    // SAFETY: the callback writes only `bias`, alive for the call.
    unsafe { libc::dl_iterate_phdr(Some(first), &mut bias as *mut usize as *mut c_void) };
    bias
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_binary_has_no_static_runtime_and_walks_to_nothing() {
        let r = StaticRuntime::of_this_process();
        assert!(!r.is_present());
        assert_eq!(r.application_caller(), None);
    }
}
