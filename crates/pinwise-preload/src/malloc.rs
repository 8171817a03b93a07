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
//! The untracked path (an allocation below the threshold, a free of a block that is not
//! tracked) reads one cache line of this library ([`HOT`]: the threshold, the free gate
//! and the next definitions of the hottest functions) and tail-calls the real function: no
//! thread-local storage, no atomic read-modify-write, no call of its own.
//!
//! - An allocation compares its size with the threshold before anything else.
//! - A `free` (or `realloc`'s old block) reads the free gate ([`free_may_be_tracked`]): while
//!   no allocation has been recorded in the process it says "not tracked" from that one
//!   word; after that, on glibc's heap, it reads the block's chunk size (the word before
//!   the block, which glibc's `free` reads next anyway) and only a chunk of at least the
//!   threshold goes further (to the real `malloc_usable_size`, on the out-of-line path).
//!   On another allocator's heap every free goes further once something was recorded.
//!   It also reads pinning's count of registered ranges (one word elsewhere).
//!
//! What is left on top of the real call: the export's trampoline (`mov` of the return
//! address, `jmp`), two or three loads, compares, and the indirect tail call. Measured in
//! `bench/results/preload-malloc-hooks.md`; glibc's own cost also changes with the number
//! of threads in the process (its arena lock: pinwise's state starts a thread) and with
//! the heap's layout (pinwise's own allocations move the program's blocks), which that file
//! separates from the hooks'.
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
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use pinwise_core::{EventKind, HostMemKind};

use crate::guard::{self, Inside};
use crate::linked_alloc::LiveSet;
use crate::recorder::{Remembered, Stamp};
use crate::state::{self, State};

/// The default threshold: allocations of at least 64 KiB are recorded.
pub const DEFAULT_MIN_TRACKED: usize = 64 << 10;

/// The words the untracked path of every hooked call reads, on one cache line of their
/// own (nothing else written there while the program runs).
#[repr(C, align(64))]
pub struct Hot {
    /// Allocations of at least this many bytes are recorded (`usize::MAX`: none, the hooks
    /// only forward). Set when the library is loaded.
    min: AtomicUsize,
    /// The free gate: see [`free_may_be_tracked`].
    free_min: AtomicUsize,
    /// The next `malloc` (`exports::libc_hooks::next` fills these slots).
    pub real_malloc: AtomicUsize,
    /// The next `free`.
    pub real_free: AtomicUsize,
    /// The next `calloc`.
    pub real_calloc: AtomicUsize,
    /// The next `realloc`.
    pub real_realloc: AtomicUsize,
    /// The next `posix_memalign`.
    pub real_posix_memalign: AtomicUsize,
    /// The next `aligned_alloc`.
    pub real_aligned_alloc: AtomicUsize,
}

const _: () = assert!(std::mem::size_of::<Hot>() == 64);

/// The process's hot words.
pub static HOT: Hot = Hot {
    min: AtomicUsize::new(usize::MAX),
    free_min: AtomicUsize::new(usize::MAX),
    real_malloc: AtomicUsize::new(0),
    real_free: AtomicUsize::new(0),
    real_calloc: AtomicUsize::new(0),
    real_realloc: AtomicUsize::new(0),
    real_posix_memalign: AtomicUsize::new(0),
    real_aligned_alloc: AtomicUsize::new(0),
};

/// Whether the next `free` is glibc's own (`free` is an alias of `__libc_free` there): its
/// blocks then carry glibc's chunk header, whose size word tells a small block from a
/// tracked one without a call. Set when the library is loaded.
static GLIBC_HEAP: AtomicBool = AtomicBool::new(false);

/// On another allocator's heap (not glibc's): the tracked blocks of the exported malloc
/// family, so that a free asks this set (one hash, one probe) instead of calling the
/// allocator's `malloc_usable_size`.
static FOREIGN: LiveSet<{ 1 << 16 }> = LiveSet::new();
/// A tracked block found no room in [`FOREIGN`]: from then on, every free on another heap
/// asks the allocator's `malloc_usable_size` (a block at least the threshold is taken as
/// tracked, as on glibc's heap).
static FOREIGN_FULL: AtomicBool = AtomicBool::new(false);
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
    HOT.min.load(Ordering::Relaxed)
}

/// The address of the threshold's word, for code that compares with it directly (the
/// linked allocators' relays, [`crate::inline_patch::Bypass`]).
pub fn min_tracked_word() -> u64 {
    HOT.min.as_ptr() as u64
}

/// The free gate's value once a block has been recorded with threshold `min`: the chunk
/// size from which a free on glibc's heap is looked at, 0 (every free is) on another heap,
/// `usize::MAX` (none is) while tracking is off.
pub fn armed_gate(min: usize, glibc_heap: bool) -> usize {
    match (min, glibc_heap) {
        (usize::MAX, _) => usize::MAX,
        (min, true) => min,
        (_, false) => 0,
    }
}

/// Whether a free of `p` must be looked at further (`p` may be a tracked block of the
/// malloc family); false only when it certainly is not: null, nothing recorded yet in the
/// process (the gate is `usize::MAX`), or, on glibc's heap, a chunk smaller than the
/// threshold (a block of `n` bytes lies in a chunk of more than `n`). A false "maybe" only
/// costs the out-of-line path's time.
///
/// # Safety
/// `p` is null or a live block of the next allocator being freed or reallocated (the
/// caller's contract with `free`/`realloc`), not a block of [`boot`].
#[inline(always)]
pub unsafe fn free_may_be_tracked(p: *mut c_void) -> bool {
    // SAFETY: the caller's contract; the gate is the process's.
    unsafe { passes_gate(HOT.free_min.load(Ordering::Relaxed), p) }
}

/// [`free_may_be_tracked`] with the gate's value given.
///
/// # Safety
/// As [`free_may_be_tracked`]; a gate other than 0 and `usize::MAX` only with a block of
/// glibc's heap (its word before the block is read).
#[inline(always)]
unsafe fn passes_gate(gate: usize, p: *mut c_void) -> bool {
    if p.is_null() || gate == usize::MAX {
        return false;
    }
    if gate == 0 {
        return foreign_may_be_tracked(p as usize);
    }
    // SAFETY: the caller's contract: a non-zero gate below `usize::MAX` is only armed on
    // glibc's heap, whose blocks all have their chunk's size (flags in the low 3 bits) in
    // the word before them: glibc's `free` reads it first too.
    let chunk = unsafe { (p as *const usize).sub(1).read() } & !7;
    chunk >= gate
}

/// On another allocator's heap: whether block `p` may be tracked (in the set, or the set
/// overflowed).
#[inline(always)]
fn foreign_may_be_tracked(p: usize) -> bool {
    FOREIGN_FULL.load(Ordering::Relaxed) || FOREIGN.contains(p)
}

/// A block of the exported malloc family was recorded (`record_alloc` returned true): on
/// another allocator's heap it goes into the set its free asks. Before the block reaches
/// the program.
pub fn remember_tracked(p: *mut c_void) {
    if !glibc_heap() && !FOREIGN.insert(p as usize) {
        FOREIGN_FULL.store(true, Ordering::Relaxed);
    }
}

/// On another allocator's heap, for the free (or move) of block `p` being looked at: the
/// block's size as `before_release` wants it (`usize::MAX` for a tracked block, which leaves
/// the set; 0 for one that is not), asking the allocator (`usable`) only once the set
/// overflowed.
pub fn foreign_release_size(p: *mut c_void, usable: impl FnOnce(*mut c_void) -> usize) -> usize {
    if FOREIGN.remove(p as usize) {
        usize::MAX
    } else if FOREIGN_FULL.load(Ordering::Relaxed) {
        usable(p)
    } else {
        0
    }
}

/// The free gate's value now (see [`free_may_be_tracked`]).
pub fn free_gate() -> usize {
    HOT.free_min.load(Ordering::Relaxed)
}

/// Arms the free gate (a block is about to be handed out as tracked).
#[inline]
fn arm_free_gate() {
    if HOT.free_min.load(Ordering::Relaxed) == usize::MAX {
        let gate = armed_gate(min_tracked(), GLIBC_HEAP.load(Ordering::Relaxed));
        HOT.free_min.store(gate, Ordering::Relaxed);
    }
}

/// Says whether the next allocator is glibc's (its `free` is `__libc_free`); when the
/// library is loaded, before any allocation is tracked.
pub fn set_glibc_heap(yes: bool) {
    GLIBC_HEAP.store(yes, Ordering::Relaxed);
}

/// Whether the next allocator is glibc's (see [`set_glibc_heap`]).
#[inline]
pub fn glibc_heap() -> bool {
    GLIBC_HEAP.load(Ordering::Relaxed)
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
    let min = if on { min } else { usize::MAX };
    HOT.min.store(min, Ordering::Release);
    // Blocks recorded under the old threshold (only a test configures twice) keep their
    // frees looked at: the gate only goes down.
    let gate = HOT.free_min.load(Ordering::Relaxed);
    if gate != usize::MAX {
        HOT.free_min
            .store(gate.min(armed_gate(min, glibc_heap())), Ordering::Relaxed);
    }
}

/// Turns malloc tracking off for the rest of the process (a forked child keeps it: the
/// state it creates is its own).
pub fn turn_off() {
    HOT.min.store(usize::MAX, Ordering::Release);
    HOT.free_min.store(usize::MAX, Ordering::Relaxed);
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
    // Before the block can reach the program (and so another thread's free of it).
    arm_free_gate();
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
        p.wrapping_sub(base()) < SIZE
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
        // The free gate (the only test that changes the process's): closed until a block
        // is recorded, armed at the threshold on glibc's heap, only lowered by a new
        // threshold, closed again when tracking is turned off.
        set_glibc_heap(true);
        configure(Some("128K"), None, Some(false));
        assert_eq!(free_gate(), usize::MAX, "nothing recorded yet");
        arm_free_gate();
        assert_eq!(free_gate(), 128 << 10);
        configure(Some("1M"), None, Some(false));
        assert_eq!(
            free_gate(),
            128 << 10,
            "blocks of the old threshold stay looked at"
        );
        configure(Some("4K"), None, Some(false));
        assert_eq!(free_gate(), 4 << 10);
        turn_off();
        assert_eq!(free_gate(), usize::MAX);
        assert_eq!(min_tracked(), usize::MAX);
        set_glibc_heap(false);
        configure(Some("128K"), None, Some(false));
        arm_free_gate();
        assert_eq!(free_gate(), 0, "another heap: every free looked at");
        turn_off();
        configure(None, Some(false), None);
        // This library's code was found (the test binary's, here).
        assert!(is_own(find_own_text as *const () as usize));
        assert!(!is_own(0x10));
    }

    #[test]
    fn the_gates_values_follow_the_threshold_and_the_heap() {
        assert_eq!(armed_gate(64 << 10, true), 64 << 10);
        assert_eq!(armed_gate(64 << 10, false), 0);
        assert_eq!(armed_gate(usize::MAX, true), usize::MAX);
        assert_eq!(armed_gate(usize::MAX, false), usize::MAX);
    }

    #[test]
    fn a_closed_or_open_gate_reads_no_memory_and_null_never_passes() {
        // An address whose word before is unmapped: a read would crash the test.
        let bad = 0x18 as *mut c_void;
        // SAFETY: gates 0 and MAX read nothing of the block (what this test checks); null
        // is never read.
        unsafe {
            assert!(!passes_gate(usize::MAX, bad));
            assert!(
                !passes_gate(0, bad),
                "not in the set of another heap's blocks"
            );
            assert!(!passes_gate(0, std::ptr::null_mut()));
            assert!(!passes_gate(64 << 10, std::ptr::null_mut()));
        }
    }

    extern "C" {
        /// glibc's `valloc` (not in the `libc` crate).
        fn valloc(size: usize) -> *mut c_void;
    }

    /// One of glibc's allocation functions, by number, for `size` bytes.
    fn glibc_alloc(which: u64, size: usize) -> *mut c_void {
        // SAFETY: glibc's allocation functions with valid arguments; every block is freed
        // by the caller.
        unsafe {
            match which % 7 {
                0 => libc::malloc(size),
                1 => libc::calloc(1, size),
                2 => {
                    let mut p = std::ptr::null_mut();
                    if libc::posix_memalign(&mut p, 64, size) != 0 {
                        return std::ptr::null_mut();
                    }
                    p
                }
                3 => libc::memalign(4096, size),
                4 => libc::aligned_alloc(256, size.next_multiple_of(256)),
                5 => valloc(size),
                _ => {
                    // A block grown by realloc from a small one.
                    let p = libc::malloc(16);
                    libc::realloc(p, size)
                }
            }
        }
    }

    #[test]
    fn on_glibcs_heap_a_block_of_at_least_the_threshold_always_passes_the_gate() {
        // The test binary's allocator is glibc's (Rust's `System` is malloc).
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut small_passed = 0;
        for _ in 0..4000 {
            let min = [
                4 << 10,
                64 << 10,
                1 << 20,
                1 + (next() % (256 << 10)) as usize,
            ][(next() % 4) as usize];
            let gate = armed_gate(min, true);
            // Sizes around the threshold and far from it (mmapped chunks too).
            let size = match next() % 3 {
                0 => min.saturating_sub(64) + (next() % 128) as usize,
                1 => 1 + (next() % (4 << 20)) as usize,
                _ => 1 + (next() % 512) as usize,
            };
            let which = next();
            let p = glibc_alloc(which, size);
            assert!(!p.is_null(), "glibc gave no block of {size} bytes");
            // SAFETY: a live block of glibc's heap.
            let passes = unsafe { passes_gate(gate, p) };
            if size >= min {
                assert!(
                    passes,
                    "a {size}-byte block (function {}) with threshold {min} would be missed",
                    which % 7
                );
            } else if size + 64 <= min && passes {
                // Not wrong (a false "maybe" only costs time), but not what keeps it cheap.
                small_passed += 1;
            }
            // SAFETY: the block is glibc's, freed once.
            unsafe { libc::free(p) };
        }
        assert_eq!(
            small_passed, 0,
            "blocks well below the threshold went the slow way"
        );
    }

    #[test]
    fn on_another_heap_a_tracked_block_passes_the_gate_until_its_free_is_looked_at() {
        // Addresses no other test uses (the set is the process's).
        let p = 0x7e57_0000_1000usize as *mut c_void;
        let q = 0x7e57_0000_2000usize as *mut c_void;
        // SAFETY: gate 0 reads nothing of the blocks.
        unsafe {
            assert!(!passes_gate(0, p));
            FOREIGN.insert(p as usize);
            assert!(passes_gate(0, p), "a tracked block is looked at");
            assert!(!passes_gate(0, q), "another block is not");
        }
        let asked = std::cell::Cell::new(false);
        let usable = |_| {
            asked.set(true);
            1 << 20
        };
        assert_eq!(foreign_release_size(q, usable), 0, "not tracked");
        assert_eq!(foreign_release_size(p, usable), usize::MAX, "tracked");
        assert!(
            !asked.get(),
            "the allocator is not asked while the set has room"
        );
        // SAFETY: as above.
        assert!(!unsafe { passes_gate(0, p) }, "freed: out of the set");
        assert_eq!(foreign_release_size(p, usable), 0);
    }
}
