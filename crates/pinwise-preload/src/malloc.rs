//! Allocation identity for the program's pageable memory: the malloc family
//! (`malloc`, `calloc`, `realloc`, `reallocarray`, `free`, `posix_memalign`,
//! `aligned_alloc`, `memalign`, `valloc`; the exports are in `exports::malloc_hooks`)
//! records every allocation of at least [`min_tracked`] bytes (64 KiB by default,
//! `PINWISE_MIN_TRACKED`, `pinwise run --min-tracked`) as a pageable allocation with its
//! call site and call stack, and its free, so that every pageable buffer a copy touches has
//! a record of its own (not an implicit "untracked" one).
//!
//! # Cost
//!
//! A recorded allocation's call stack costs microseconds; beyond a first allowance, a
//! thread spends at most 0.5 % of its time on them ([`crate::stack_budget`]), and
//! allocations beyond that are recorded with their call site alone.
//!
//! An allocation below the threshold costs the trampoline, one atomic load and a compare
//! on top of the real function. A `free` costs one more atomic load while nothing has been
//! recorded in the process; after that, a call of the real `malloc_usable_size` (the block
//! is tracked if it holds at least the threshold: a block that holds more than was asked
//! gives, at worst, a free the history counts as unmatched). Measured in
//! `bench/results/preload-malloc-hooks.md`.
//!
//! # Safety
//!
//! - Nothing is recorded before the library's constructor ran, while pinwise's own code
//!   runs on the thread ([`guard::inside`]), or for calls made from pinwise's own code
//!   (the caller's return address lies in this library).
//! - Recording enters [`guard::Inside`] first: what it allocates (a ring, a stack, the
//!   state itself on the first tracked allocation) goes straight to the real functions.
//! - A free is stamped before the memory is released, so that another thread reusing the
//!   address comes after it in the history; an allocation is stamped after the real
//!   function returned it.
//! - A panic turns pinwise off (the call was already made; its result is returned).
//! - Bootstrap: while the real functions are being looked up (`dlsym` may allocate), the
//!   exports serve from a small static arena whose blocks `free` ignores.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use pinwise_core::{EventKind, HostMemKind};

use crate::guard::{self, Inside};
use crate::recorder::{Remembered, Stamp};
use crate::state::{self, State};

/// The default threshold: allocations of at least 64 KiB are recorded.
pub const DEFAULT_MIN_TRACKED: usize = 64 << 10;

/// Allocations of at least this many bytes are recorded (`usize::MAX`: none, the hooks
/// only forward). Set when the library is loaded.
static MIN_TRACKED: AtomicUsize = AtomicUsize::new(usize::MAX);
/// This library's own code: `[start, end)` (calls from there are pinwise's own).
static OWN_START: AtomicUsize = AtomicUsize::new(0);
static OWN_END: AtomicUsize = AtomicUsize::new(0);

/// Allocations recorded.
pub static TRACKED_ALLOCS: AtomicU64 = AtomicU64::new(0);
/// Frees recorded.
pub static TRACKED_FREES: AtomicU64 = AtomicU64::new(0);
/// Stacks walked, and the time all stack work took (ns: walks and memo lookups).
pub static STACK_CAPTURES: AtomicU64 = AtomicU64::new(0);
/// See [`STACK_CAPTURES`].
pub static STACK_NS: AtomicU64 = AtomicU64::new(0);
/// Allocations recorded without a stack: the thread had spent its share of time on
/// captures (see [`crate::stack_budget`]).
pub static STACKS_SKIPPED: AtomicU64 = AtomicU64::new(0);
/// Recorded allocations whose stack was one captured before for the same call site and
/// Python stack (no walk: [`crate::recorder::Recorder::remembered_stack`]).
pub static STACK_MEMO_HITS: AtomicU64 = AtomicU64::new(0);

/// The threshold in force (`usize::MAX`: malloc tracking is off).
#[inline]
pub fn min_tracked() -> usize {
    MIN_TRACKED.load(Ordering::Relaxed)
}

/// The address of the threshold's word, for code that compares with it directly (the
/// linked allocators' relays, [`crate::inline_patch::Bypass`]).
pub fn min_tracked_word() -> u64 {
    MIN_TRACKED.as_ptr() as u64
}

/// Whether an allocation of `size` bytes is recorded.
#[inline]
pub fn is_tracked_size(size: usize) -> bool {
    size >= min_tracked()
}

/// Whether recorded allocations carry call stacks (kept by [`crate::unwind`], which
/// captures them).
#[inline]
pub fn stacks_enabled() -> bool {
    crate::unwind::stacks_enabled()
}

/// What the environment says, read when the library is loaded: the threshold (the size
/// grammar of `PINWISE_BUDGET`; `None`: the default), whether the malloc hooks record at
/// all (`PINWISE_MALLOC_HOOKS`), whether stacks are captured (`PINWISE_STACKS`). Errors
/// are reported by [`crate::config::Config`], which reads the same variables.
pub fn configure(min_tracked: Option<&str>, hooks: Option<bool>, stacks: Option<bool>) {
    let min = match min_tracked.map(pinwise_core::units::parse_size_or_ram_percent) {
        Some(Ok(n)) => usize::try_from(n).unwrap_or(usize::MAX).max(1),
        _ => DEFAULT_MIN_TRACKED,
    };
    let on = hooks.unwrap_or(true);
    crate::unwind::set_stacks_enabled(stacks.unwrap_or(true));
    find_own_text();
    MIN_TRACKED.store(if on { min } else { usize::MAX }, Ordering::Release);
}

/// Turns malloc tracking off for the rest of the process (a forked child keeps it: the
/// state it creates is its own).
pub fn turn_off() {
    MIN_TRACKED.store(usize::MAX, Ordering::Release);
}

fn is_own(addr: usize) -> bool {
    addr >= OWN_START.load(Ordering::Relaxed) && addr < OWN_END.load(Ordering::Relaxed)
}

/// Finds the address range of this library's loaded segments.
fn find_own_text() {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is the `(usize, usize, usize)` below; `info` is valid during the
        // callback, its program headers `dlpi_phnum` entries long.
        let (here, out, info) = unsafe {
            let d = &mut *(data as *mut (usize, usize, usize));
            (d.0, d, &*info)
        };
        if info.dlpi_phdr.is_null() {
            return 0;
        }
        // SAFETY: as above.
        let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
        let bias = info.dlpi_addr as usize;
        let loads = phdrs.iter().filter(|p| p.p_type == libc::PT_LOAD);
        let start = loads.clone().map(|p| bias + p.p_vaddr as usize).min();
        let end = loads.map(|p| bias + (p.p_vaddr + p.p_memsz) as usize).max();
        if let (Some(s), Some(e)) = (start, end) {
            if here >= s && here < e {
                out.1 = s;
                out.2 = e;
                return 1;
            }
        }
        0
    }
    let mut data = (find_own_text as *const () as usize, 0usize, 0usize);
    // SAFETY: the callback only reads the loader's headers and writes `data`.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut data as *mut _ as *mut c_void) };
    OWN_START.store(data.1, Ordering::Relaxed);
    OWN_END.store(data.2, Ordering::Relaxed);
}

/// Runs pinwise's part; a panic turns pinwise off.
fn guarded(f: impl FnOnce()) {
    if catch_unwind(AssertUnwindSafe(f)).is_err() {
        state::turn_off("a panic inside a malloc hook");
    }
}

/// The program got `ptr`, `size` bytes (at or above the threshold), from `caller`.
/// Returns whether the allocation was recorded.
#[cold]
#[inline(never)]
pub fn record_alloc(caller: usize, ptr: *mut c_void, size: usize) -> bool {
    if ptr.is_null() || !state::enabled() || is_own(caller) || guard::inside() {
        return false;
    }
    let Some(st) = state::get() else {
        return false;
    };
    let mut recorded = false;
    let _inside = Inside::enter();
    guarded(|| {
        let stack = if stacks_enabled() {
            let t0 = pinwise_core::units::monotonic_ns();
            if crate::stack_budget::may_capture(t0) {
                // A stack already walked for this call site and Python stack is taken from
                // the memo: no walk, only the lookup's time from the budget.
                let (s, walked) = match st.recorder.remembered_stack(caller) {
                    Remembered::Hit(id) => (Some(id), false),
                    Remembered::Off => (None, false),
                    Remembered::Miss(key) => (st.recorder.capture_stack(caller, key), true),
                };
                let took = pinwise_core::units::monotonic_ns().saturating_sub(t0);
                crate::stack_budget::spent(took, walked);
                STACK_NS.fetch_add(took, Ordering::Relaxed);
                if walked {
                    STACK_CAPTURES.fetch_add(1, Ordering::Relaxed);
                } else if s.is_some() {
                    STACK_MEMO_HITS.fetch_add(1, Ordering::Relaxed);
                }
                s
            } else {
                STACKS_SKIPPED.fetch_add(1, Ordering::Relaxed);
                None
            }
        } else {
            None
        };
        let stamp = st.recorder.stamp();
        st.recorder.record_with_stack(
            stamp,
            EventKind::Alloc {
                start: ptr as u64,
                size: size as u64,
                kind: HostMemKind::Pageable,
                flags: 0,
            },
            None,
            caller,
            stack,
        );
        TRACKED_ALLOCS.fetch_add(1, Ordering::Relaxed);
        recorded = true;
    });
    recorded
}

/// A free being recorded: stamped before the memory goes back.
#[must_use]
pub struct Release {
    st: &'static State,
    stamp: Stamp,
    _inside: Inside,
}

/// Before `ptr` is freed (or moved by `realloc`) from `caller`: the stamp of its free when
/// it is a tracked block. `usable(ptr, threshold)` is the allocator's `malloc_usable_size`
/// (0: unknown, or certainly below the threshold).
#[inline]
pub fn before_release(
    caller: usize,
    ptr: *mut c_void,
    usable: impl FnOnce(*mut c_void, usize) -> usize,
) -> Option<Release> {
    let min = min_tracked();
    if min == usize::MAX || ptr.is_null() {
        return None;
    }
    // No state: nothing was recorded in this process, so no free needs to be.
    let st = state::current()?;
    before_release_slow(st, caller, ptr, min, usable)
}

/// Every free once the process has pinwise's state: whether the block is tracked.
#[inline(never)]
fn before_release_slow(
    st: &'static State,
    caller: usize,
    ptr: *mut c_void,
    min: usize,
    usable: impl FnOnce(*mut c_void, usize) -> usize,
) -> Option<Release> {
    if usable(ptr, min) < min || is_own(caller) || !state::enabled() || guard::inside() {
        return None;
    }
    let inside = Inside::enter();
    let stamp = st.recorder.stamp();
    Some(Release {
        st,
        stamp,
        _inside: inside,
    })
}

/// After the real call: `released` says whether `ptr` went back (a failed `realloc`
/// keeps it).
pub fn after_release(r: Release, ptr: *mut c_void, released: bool) {
    let Release { st, stamp, _inside } = r;
    if released {
        st.recorder
            .record(stamp, EventKind::Free { start: ptr as u64 }, None, 0);
        TRACKED_FREES.fetch_add(1, Ordering::Relaxed);
    } else {
        st.recorder.cancel(stamp);
    }
}

/// The malloc-tracking counters, as history source statistics.
pub fn source_stats() -> [(&'static str, u64); 10] {
    let min = min_tracked();
    let [hooked, failed, full] = crate::linked_alloc::source_stats();
    [
        hooked,
        failed,
        full,
        (
            "preload.malloc_min_tracked",
            if min == usize::MAX { 0 } else { min as u64 },
        ),
        (
            "preload.malloc_tracked_allocs",
            TRACKED_ALLOCS.load(Ordering::Relaxed),
        ),
        (
            "preload.malloc_tracked_frees",
            TRACKED_FREES.load(Ordering::Relaxed),
        ),
        (
            "preload.stack_captures",
            STACK_CAPTURES.load(Ordering::Relaxed),
        ),
        ("preload.stack_capture_ns", STACK_NS.load(Ordering::Relaxed)),
        (
            "preload.stack_captures_skipped",
            STACKS_SKIPPED.load(Ordering::Relaxed),
        ),
        (
            "preload.stack_memo_hits",
            STACK_MEMO_HITS.load(Ordering::Relaxed),
        ),
    ]
}

/// A small static arena that serves allocations while the real functions are being
/// looked up (`dlsym` may call `calloc`): blocks from here are never given to the real
/// allocator (`free` ignores them, `realloc` copies them out).
pub mod boot {
    use std::sync::atomic::{AtomicUsize, Ordering};

    const SIZE: usize = 64 << 10;
    const ALIGN: usize = 16;

    #[repr(C, align(4096))]
    struct Arena(std::cell::UnsafeCell<[u8; SIZE]>);
    // SAFETY: blocks are handed out once each (an atomic bump), never shared by the arena.
    unsafe impl Sync for Arena {}

    static ARENA: Arena = Arena(std::cell::UnsafeCell::new([0; SIZE]));
    static USED: AtomicUsize = AtomicUsize::new(0);

    fn base() -> usize {
        ARENA.0.get() as usize
    }

    /// Whether `p` is a block of the arena.
    #[inline]
    pub fn contains(p: usize) -> bool {
        p >= base() && p < base() + SIZE
    }

    /// `size` bytes aligned to `align` (a power of two), zeroed (the arena is never
    /// reused), with the size stored in the 8 bytes before; null when the arena is full.
    pub fn alloc(size: usize, align: usize) -> *mut u8 {
        let align = align.max(ALIGN);
        loop {
            let used = USED.load(Ordering::Relaxed);
            let start = (base() + used + 8).next_multiple_of(align);
            let Some(end) = start.checked_add(size) else {
                return std::ptr::null_mut();
            };
            if end > base() + SIZE {
                return std::ptr::null_mut();
            }
            if USED
                .compare_exchange(used, end - base(), Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                // SAFETY: `start - 8 .. end` lies inside the arena and was just claimed
                // by this call alone.
                unsafe { ((start - 8) as *mut usize).write_unaligned(size) };
                return start as *mut u8;
            }
        }
    }

    /// The size a block of the arena was allocated with.
    ///
    /// # Safety
    /// `p` is a block [`alloc`] returned.
    pub unsafe fn size_of(p: usize) -> usize {
        // SAFETY: `alloc` wrote the size just before the block.
        unsafe { ((p - 8) as *const usize).read_unaligned() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_arena_hands_out_aligned_disjoint_blocks_that_remember_their_size() {
        let a = boot::alloc(100, 16) as usize;
        let b = boot::alloc(10, 256) as usize;
        assert!(a != 0 && b != 0);
        assert_eq!(a % 16, 0);
        assert_eq!(b % 256, 0);
        assert!(b >= a + 100, "disjoint");
        assert!(boot::contains(a) && boot::contains(b));
        assert!(!boot::contains(&a as *const usize as usize));
        // SAFETY: blocks of the arena.
        unsafe {
            assert_eq!(boot::size_of(a), 100);
            assert_eq!(boot::size_of(b), 10);
        }
        assert!(
            boot::alloc(1 << 20, 16).is_null(),
            "more than the arena refused"
        );
    }

    #[test]
    fn the_threshold_follows_the_size_grammar_and_can_be_turned_off() {
        configure(Some("128K"), None, Some(false));
        assert_eq!(min_tracked(), 128 << 10);
        assert!(is_tracked_size(128 << 10) && !is_tracked_size((128 << 10) - 1));
        assert!(!stacks_enabled());
        configure(Some("not a size"), None, None);
        assert_eq!(min_tracked(), DEFAULT_MIN_TRACKED);
        assert!(stacks_enabled());
        configure(None, Some(false), None);
        assert_eq!(min_tracked(), usize::MAX);
        assert!(!is_tracked_size(usize::MAX - 1));
        // This library's code was found (the test binary's, here).
        assert!(is_own(find_own_text as *const () as usize));
        assert!(!is_own(0x10));
    }
}
