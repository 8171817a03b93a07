//! Per-thread state of the hooks: the re-entrancy guard, the runtime call in progress, the
//! sampling tick, and the thread's event ring.
//!
//! One `const`-initialized thread-local struct without a destructor: a hook reaches all of
//! it with one thread-local access, and touching it never allocates. (The `free`/`realloc`/
//! `munmap` hooks' fast path does not touch it at all: they may run while a thread is being
//! torn down.)

use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering};

/// Everything a hook keeps per thread.
pub struct ThreadState {
    /// Depth of pinwise's own code on this thread: while > 0, hooks forward at once.
    depth: Cell<u32>,
    /// Whether a runtime call is in progress.
    runtime_active: Cell<bool>,
    /// The application's call site of the runtime call in progress (0: unknown).
    runtime_site: Cell<usize>,
    /// Whether a driver hook observed the runtime call in progress.
    runtime_seen: Cell<bool>,
    /// Whether the runtime call in progress is a copy (its pointer queries are the
    /// runtime's own, not the program's).
    runtime_copy: Cell<bool>,
    /// The `cudaMemcpyKind` of the runtime copy in progress (-1: none or unknown): tells a
    /// unified driver copy underneath its direction without asking the driver.
    runtime_kind: Cell<i32>,
    /// Calls counted for sampling the hook cost.
    sample_tick: Cell<u32>,
    /// This thread's event ring (owned by [`crate::recorder`]) and the generation it
    /// belongs to (a forked child's generation differs), and the thread id.
    pub ring: Cell<*const ()>,
    /// See `ring`.
    pub ring_generation: Cell<u64>,
    /// See `ring`.
    pub tid: Cell<u32>,
}

thread_local! {
    static THREAD: ThreadState = const {
        ThreadState {
            depth: Cell::new(0),
            runtime_active: Cell::new(false),
            runtime_site: Cell::new(0),
            runtime_seen: Cell::new(false),
            runtime_copy: Cell::new(false),
            runtime_kind: Cell::new(-1),
            sample_tick: Cell::new(0),
            ring: Cell::new(std::ptr::null()),
            ring_generation: Cell::new(0),
            tid: Cell::new(0),
        }
    };
}

/// Where this thread's [`ThreadState`] lies from the thread pointer, when this library's
/// thread-local storage is static (see [`learn_static_tls`]); 0: not known (reached
/// through `THREAD.with`, a call of the loader's `__tls_get_addr`).
static TLS_OFFSET: AtomicIsize = AtomicIsize::new(0);

/// Runs `f` on this thread's state (one thread-local access: with the library preloaded,
/// the thread pointer plus a fixed offset; else the loader's lookup).
#[inline]
pub fn with<R>(f: impl FnOnce(&ThreadState) -> R) -> R {
    let off = TLS_OFFSET.load(Ordering::Relaxed);
    if off != 0 {
        let at = thread_pointer().wrapping_add_signed(off) as *const ThreadState;
        // SAFETY: `learn_static_tls` found this library's thread-local storage static (it
        // was preloaded): every thread's `THREAD` lies at the same offset from its thread
        // pointer, set up from its initial image when the thread was made (const, no
        // destructor: valid for the thread's whole life).
        return f(unsafe { &*at });
    }
    THREAD.with(f)
}

/// The calling thread's thread pointer.
#[inline(always)]
fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: reads the thread pointer (x86-64: the TCB's self pointer at %fs:0, which
    // glibc keeps; aarch64: TPIDR_EL0); no other effect.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) tp, options(nostack, readonly, preserves_flags))
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: reads TPIDR_EL0, the thread pointer register; no memory access, no other
    // effect.
    unsafe {
        std::arch::asm!("mrs {}, tpidr_el0", out(reg) tp, options(nostack, nomem, preserves_flags))
    };
    tp
}

/// At load: where this thread's [`ThreadState`] lies from the thread pointer, if the
/// library's thread-local storage is static (a library in `LD_PRELOAD` is loaded with the
/// program, and glibc gives such libraries static thread-local storage: the same offset
/// from the thread pointer in every thread). Anything else (loaded by `dlopen`, an offset
/// too far from the thread pointer to be static storage) keeps the loader's lookup.
pub fn learn_static_tls(preloaded: bool) {
    if !preloaded {
        return;
    }
    let at = THREAD.with(|t| t as *const ThreadState as usize);
    if let Some(off) = static_offset(at, thread_pointer()) {
        TLS_OFFSET.store(off, Ordering::Relaxed);
    }
}

/// Whether this library was loaded through `LD_PRELOAD`: an entry of it is exactly the path
/// the loader knows this object by. (The loader loads one path once: a `dlopen` of that path
/// returns this same, preloaded object. Another copy of the library, under another path, is
/// not taken for it; nor is an entry without a slash, which the loader searched for.)
pub fn preloaded() -> bool {
    // SAFETY: an all-zero Dl_info is valid (null pointers); it is an out-parameter.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables and writes `info`.
    let found = unsafe { libc::dladdr(preloaded as *const () as *const libc::c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return false;
    }
    // SAFETY: the loader's NUL-terminated name of this object.
    let own = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }.to_bytes();
    // SAFETY: getenv with a constant name; the value is only read here.
    let list = unsafe { libc::getenv(c"LD_PRELOAD".as_ptr()) };
    if list.is_null() {
        return false;
    }
    // SAFETY: a NUL-terminated string of the environment.
    let list = unsafe { std::ffi::CStr::from_ptr(list) }.to_bytes();
    names_path(list, own)
}

/// Whether `LD_PRELOAD`'s value `list` (entries separated by spaces or colons) has an entry
/// that is exactly the path `own`, which has a slash.
fn names_path(list: &[u8], own: &[u8]) -> bool {
    own.contains(&b'/')
        && list
            .split(|b| *b == b' ' || *b == b':')
            .any(|e| !e.is_empty() && e == own)
}

/// The offset of a thread-local at `at` from the thread pointer `tp`, if it is close
/// enough to lie in the static thread-local block next to the thread's control block
/// (within 1 MiB) and is not 0 (which means "unknown").
fn static_offset(at: usize, tp: usize) -> Option<isize> {
    let off = (at as isize).wrapping_sub(tp as isize);
    (off != 0 && off.unsigned_abs() < 1 << 20).then_some(off)
}

/// Whether pinwise's own code is running on this thread.
#[inline]
pub fn inside() -> bool {
    with(|t| t.depth.get() > 0)
}

/// Marks pinwise's own code as running on this thread until dropped.
pub struct Inside(());

impl Inside {
    /// Enters.
    #[inline]
    pub fn enter() -> Inside {
        with(|t| t.depth.set(t.depth.get() + 1));
        Inside(())
    }
}

impl Drop for Inside {
    #[inline]
    fn drop(&mut self) {
        with(|t| t.depth.set(t.depth.get().saturating_sub(1)));
    }
}

/// What a runtime hook saves and restores around the call it forwards (runtime calls may
/// nest: cudart calling itself through an exported name).
#[derive(Debug, Clone, Copy)]
pub struct RuntimeFrame {
    active: bool,
    site: usize,
    seen: bool,
    copy: bool,
    kind: i32,
}

/// Starts a runtime call made from `site` (0: unknown): driver hooks below attribute to it.
/// `copy`: a copy, of `cudaMemcpyKind` `kind` when known (-1: not known).
#[inline]
pub fn enter_runtime(site: usize, copy: bool, kind: i32) -> RuntimeFrame {
    with(|t| RuntimeFrame {
        active: t.runtime_active.replace(true),
        site: t.runtime_site.replace(site),
        seen: t.runtime_seen.replace(false),
        copy: t.runtime_copy.replace(copy),
        kind: t.runtime_kind.replace(kind),
    })
}

/// Ends the runtime call; returns whether a driver hook observed it.
#[inline]
pub fn leave_runtime(saved: RuntimeFrame) -> bool {
    with(|t| {
        t.runtime_active.set(saved.active);
        t.runtime_site.set(saved.site);
        t.runtime_copy.set(saved.copy);
        t.runtime_kind.set(saved.kind);
        t.runtime_seen.replace(saved.seen)
    })
}

/// For a driver hook: the call site to attribute to (the runtime caller's when inside a
/// runtime call, else `own`), marking the runtime call as observed.
#[inline]
pub fn driver_site(own: usize) -> usize {
    with(|t| driver_site_in(t, own))
}

#[inline]
fn driver_site_in(t: &ThreadState, own: usize) -> usize {
    if !t.runtime_active.get() {
        return own;
    }
    t.runtime_seen.set(true);
    match t.runtime_site.get() {
        0 => own,
        rt => rt,
    }
}

/// Whether and how a copy hook times itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timing {
    /// Not timed.
    No,
    /// The whole bookkeeping, two counter reads around each part of it.
    Total,
    /// Each stage on its own (more counter reads, so not part of the total's samples).
    Stages,
}

/// A thread's first this many calls are sampled one in [`EARLY_EVERY`] instead: a program
/// that copies a few dozen times (JAX's `device_put` and fetch: 32) still gets a median of
/// several samples, not one copy's time.
pub const EARLY_CALLS: u32 = 64;
/// See [`EARLY_CALLS`].
pub const EARLY_EVERY: u32 = 2;

/// Which calls are timed: of every `2 * every` calls on a thread, one is timed as a whole
/// and one by stages (`2 * EARLY_EVERY` during its first [`EARLY_CALLS`]).
pub fn timing_of(tick: u32, every: u32) -> Timing {
    let every = if tick <= EARLY_CALLS {
        EARLY_EVERY
    } else {
        every
    };
    if !tick.is_multiple_of(every) {
        Timing::No
    } else if (tick / every).is_multiple_of(2) {
        Timing::Total
    } else {
        Timing::Stages
    }
}

/// The calls a timed call at `tick` stands for (its sampling interval): its weight in the
/// medians, so that the more often sampled first calls do not outweigh the rest.
pub fn weight_of(tick: u32, every: u32) -> u64 {
    u64::from(if tick <= EARLY_CALLS {
        EARLY_EVERY
    } else {
        every
    })
}

/// For a copy hook, in one thread-local access: `None` when pinwise's own code runs on
/// this thread (forward at once); else the call site to attribute to, whether to time
/// this call ([`timing_of`]) and the weight of its sample ([`weight_of`]).
#[inline]
pub fn copy_prologue(own: usize, every: u32) -> Option<(usize, Timing, u64)> {
    with(|t| {
        if t.depth.get() > 0 {
            return None;
        }
        let n = t.sample_tick.get().wrapping_add(1);
        t.sample_tick.set(n);
        Some((
            driver_site_in(t, own),
            timing_of(n, every),
            weight_of(n, every),
        ))
    })
}

/// The `cudaMemcpyKind` of the runtime copy in progress, if known.
#[inline]
pub fn runtime_copy_kind() -> Option<i32> {
    with(|t| Some(t.runtime_kind.get()).filter(|k| *k >= 0))
}

/// Whether a runtime copy is in progress on this thread.
#[inline]
pub fn in_runtime_copy() -> bool {
    with(|t| t.runtime_copy.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_preload_list_is_matched_by_the_exact_path() {
        let own = b"/opt/pinwise/lib/libpinwise_preload.so";
        assert!(names_path(b"/opt/pinwise/lib/libpinwise_preload.so", own));
        assert!(names_path(
            b"liba.so:/opt/pinwise/lib/libpinwise_preload.so libb.so",
            own
        ));
        // Another copy of the library under the same file name is not this object.
        assert!(!names_path(b"/x/libpinwise_preload.so", own));
        assert!(!names_path(b"libpinwise_preload.so", own));
        assert!(!names_path(
            b"/opt/pinwise/lib/libpinwise_preload.so.bak",
            own
        ));
        assert!(!names_path(b"", own));
        assert!(!names_path(b"::", b""));
        assert!(!names_path(
            b"libpinwise_preload.so",
            b"libpinwise_preload.so"
        ));
    }

    #[test]
    fn only_an_offset_near_the_thread_pointer_counts_as_static() {
        let tp = 0x7f00_0000_0000usize;
        assert_eq!(static_offset(tp - 0x740, tp), Some(-0x740));
        assert_eq!(static_offset(tp + 0x10, tp), Some(0x10));
        assert_eq!(static_offset(tp, tp), None);
        assert_eq!(static_offset(0x5555_0000_0000, tp), None, "a heap block");
    }

    #[test]
    fn the_fixed_offset_reaches_each_threads_own_state() {
        // A test binary links this crate statically: its thread-locals are static
        // thread-local storage, as the preloaded library's are.
        learn_static_tls(true);
        assert_ne!(TLS_OFFSET.load(Ordering::Relaxed), 0);
        let here = |t: &ThreadState| t as *const ThreadState as usize;
        assert_eq!(with(here), THREAD.with(here));
        with(|t| t.sample_tick.set(41));
        let other = std::thread::spawn(move || {
            assert_eq!(with(here), THREAD.with(here));
            with(|t| t.sample_tick.get())
        })
        .join()
        .unwrap();
        assert_eq!(other, 0, "another thread's own, initialized state");
        assert_eq!(THREAD.with(|t| t.sample_tick.get()), 41);
        // Back to the loader's lookup: the other tests of this binary see what they saw.
        TLS_OFFSET.store(0, Ordering::Relaxed);
    }

    #[test]
    fn a_threads_first_calls_are_sampled_more_often() {
        let timed: Vec<(u32, Timing)> = (1..=8)
            .map(|n| (n, timing_of(n, 8)))
            .filter(|(_, k)| *k != Timing::No)
            .collect();
        assert_eq!(
            timed,
            vec![
                (2, Timing::Stages),
                (4, Timing::Total),
                (6, Timing::Stages),
                (8, Timing::Total)
            ]
        );
        let whole = (1..=EARLY_CALLS)
            .filter(|n| timing_of(*n, 8) == Timing::Total)
            .count();
        assert_eq!(whole, 16, "16 whole samples in a thread's first 64 calls");
        // Each stands for the calls of its interval.
        assert_eq!(weight_of(4, 8), 2);
        assert_eq!(weight_of(EARLY_CALLS + 16, 8), 8);
    }

    #[test]
    fn one_call_in_every_is_timed_alternately_whole_and_by_stages() {
        let timed: Vec<(u32, Timing)> = (EARLY_CALLS + 1..=EARLY_CALLS + 32)
            .map(|n| (n, timing_of(n, 8)))
            .filter(|(_, k)| *k != Timing::No)
            .collect();
        assert_eq!(
            timed,
            vec![
                (72, Timing::Stages),
                (80, Timing::Total),
                (88, Timing::Stages),
                (96, Timing::Total)
            ]
        );
    }
}
