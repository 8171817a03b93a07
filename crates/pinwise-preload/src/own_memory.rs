//! pinwise's own memory: the library's Rust allocations (stacks, the history, rings,
//! tables) come from mimalloc, which maps segments of its own, never from the program's
//! malloc heap.
//!
//! Why: in glibc's heap pinwise's small, long-lived blocks sat between the program's
//! blocks. After many recorded allocations the program's freed blocks could no longer
//! merge back into the top chunk, and glibc served its later small blocks by splitting and
//! coalescing free chunks instead: +15 to +45 ns per 4 KiB `malloc`+`free` pair on the H100
//! after 2,020 recorded allocations, which no hook instruction accounted for
//! (`bench/results/preload-malloc-hooks.md`, eighth session). C code the library calls
//! (libc, the unwinder) still allocates from the program's heap.
//!
//! mimalloc reads its options from `MIMALLOC_*` variables, and the program's environment may
//! hold some for the program's own mimalloc. pinwise sets, before its first allocation (a
//! constructor of high priority, and on every call until done), every option that could
//! change what the program sees or crash it:
//! - it never purges on a timer (`purge_delay` -1): purging is the only thing that makes it
//!   read the clock while it runs, and the vDSO's clock reads the CPU's counter, which a
//!   program may have made fault ([`crate::cycles`]); freed memory stays in its segments
//!   for pinwise's next allocations;
//! - it never tears itself down at exit (`destroy_on_exit` 2: its exit handler returns at
//!   once). Its handler runs before pinwise's own exit work, which still allocates; with
//!   `MIMALLOC_DESTROY_ON_EXIT=1` the program died of SIGSEGV at exit;
//! - it may take memory from the system and its arenas as it needs (`disallow_os_alloc`,
//!   `disallow_arena_alloc` 0), with no limit on the address bits it uses (`max_vabits` 0),
//!   reserves nothing in advance (`reserve_os_memory`, `reserve_huge_os_pages` 0) and uses
//!   no large OS pages (`allow_large_os_pages` 0): set for the program, the first aborted it
//!   at start and the third crashed it;
//! - it prints nothing (statistics, verbose messages, warnings and errors off).
//!
//! Every call also holds [`CounterReadable`]: a thread's first allocation makes its heap,
//! whose random key is seeded from the clock.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::{c_int, c_long};
use std::sync::atomic::{AtomicBool, Ordering};

use mimalloc::MiMalloc;

use crate::cycles::CounterReadable;

/// The allocator of pinwise's own Rust allocations.
pub struct OwnMemory;

// mimalloc's options (`mi_option_t` of the vendored v3 `mimalloc.h`, which libmimalloc-sys
// builds by default).
const SHOW_ERRORS: c_int = 0;
const SHOW_STATS: c_int = 1;
const VERBOSE: c_int = 2;
const ALLOW_LARGE_OS_PAGES: c_int = 6;
const RESERVE_HUGE_OS_PAGES: c_int = 7;
const RESERVE_OS_MEMORY: c_int = 9;
const PURGE_DELAY: c_int = 15;
const DISALLOW_OS_ALLOC: c_int = 17;
const DESTROY_ON_EXIT: c_int = 22;
const DISALLOW_ARENA_ALLOC: c_int = 26;
const MAX_VABITS: c_int = 38;

/// The options pinwise sets, whatever the environment says (see the module's doc).
const OPTIONS: [(c_int, c_long); 11] = [
    (PURGE_DELAY, -1),
    (DESTROY_ON_EXIT, 2),
    (DISALLOW_OS_ALLOC, 0),
    (DISALLOW_ARENA_ALLOC, 0),
    (MAX_VABITS, 0),
    (RESERVE_OS_MEMORY, 0),
    (RESERVE_HUGE_OS_PAGES, 0),
    (ALLOW_LARGE_OS_PAGES, 0),
    (SHOW_STATS, 0),
    (VERBOSE, 0),
    (SHOW_ERRORS, 0),
];

extern "C" {
    fn mi_option_set(option: c_int, value: c_long);
    #[cfg(test)]
    fn mi_option_get(option: c_int) -> c_long;
}

/// Whether the options were set.
static CONFIGURED: AtomicBool = AtomicBool::new(false);

#[inline]
fn configure() {
    if CONFIGURED.load(Ordering::Relaxed) {
        return;
    }
    // Racing first calls set the same values.
    for (option, value) in OPTIONS {
        // SAFETY: sets one of mimalloc's options; allowed at any time, before its first
        // allocation included.
        unsafe { mi_option_set(option, value) };
    }
    CONFIGURED.store(true, Ordering::Relaxed);
}

/// [`configure`] when the library is loaded, before mimalloc's own constructor (a lower
/// `.init_array` priority runs first), so that no option is read from the environment.
extern "C" fn configure_at_load() {
    configure();
}

#[used]
#[link_section = ".init_array.00100"]
static CONFIGURE_AT_LOAD: extern "C" fn() = configure_at_load;

// SAFETY: every call forwards to mimalloc's `GlobalAlloc` with the caller's arguments; the
// guard and the options change no result.
unsafe impl GlobalAlloc for OwnMemory {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        configure();
        let _counter = CounterReadable::here();
        // SAFETY: the caller's contract.
        unsafe { MiMalloc.alloc(layout) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        configure();
        let _counter = CounterReadable::here();
        // SAFETY: the caller's contract.
        unsafe { MiMalloc.alloc_zeroed(layout) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let _counter = CounterReadable::here();
        // SAFETY: the caller's contract: `ptr` came from this allocator.
        unsafe { MiMalloc.dealloc(ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _counter = CounterReadable::here();
        // SAFETY: the caller's contract: `ptr` came from this allocator.
        unsafe { MiMalloc.realloc(ptr, layout, new_size) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_round_trip_and_the_options_are_set() {
        let layout = Layout::from_size_align(4096, 64).unwrap();
        // SAFETY: a non-zero layout; the block is written within it and freed once.
        unsafe {
            let p = OwnMemory.alloc_zeroed(layout);
            assert!(!p.is_null());
            assert_eq!(p as usize % 64, 0, "alignment kept");
            assert!(std::slice::from_raw_parts(p, 4096).iter().all(|&b| b == 0));
            p.write_bytes(7, 4096);
            let q = OwnMemory.realloc(p, layout, 1 << 20);
            assert!(!q.is_null());
            assert!(std::slice::from_raw_parts(q, 4096).iter().all(|&b| b == 7));
            OwnMemory.dealloc(q, Layout::from_size_align(1 << 20, 64).unwrap());
        }
        assert!(CONFIGURED.load(Ordering::Relaxed));
        for (option, value) in OPTIONS {
            // SAFETY: reads one of mimalloc's options.
            assert_eq!(unsafe { mi_option_get(option) }, value, "option {option}");
        }
    }
}
