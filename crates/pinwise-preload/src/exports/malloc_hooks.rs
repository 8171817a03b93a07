//! The allocation side of the malloc family: `malloc`, `calloc`, `posix_memalign`,
//! `aligned_alloc`, `memalign`, `valloc` (the release side, `free`, `realloc` and
//! `reallocarray`, is in `libc_hooks`). Each forwards to the next definition and, for
//! blocks of at least the tracking threshold, records the allocation
//! ([`crate::malloc::record_alloc`]). While the next definition is being looked up, blocks
//! come from [`crate::malloc::boot`].

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::export_with_caller;
use super::libc_hooks::{next, LOOKING_UP};
use crate::malloc::{boot, is_tracked_size, record_alloc, remember_tracked, HOT};

// The hottest functions' slots are on the hot line (`HOT`); these less used ones are not.
static REAL_MEMALIGN: AtomicUsize = AtomicUsize::new(0);
static REAL_VALLOC: AtomicUsize = AtomicUsize::new(0);
static REAL_MALLOC_USABLE_SIZE: AtomicUsize = AtomicUsize::new(0);

/// Looks the real functions up now (when the library is loaded, before tracking starts).
pub fn resolve_now() {
    next(&HOT.real_malloc, c"malloc");
    next(&HOT.real_calloc, c"calloc");
    next(&HOT.real_posix_memalign, c"posix_memalign");
    next(&HOT.real_aligned_alloc, c"aligned_alloc");
    next(&REAL_MEMALIGN, c"memalign");
    next(&REAL_VALLOC, c"valloc");
    next(&REAL_MALLOC_USABLE_SIZE, c"malloc_usable_size");
}

/// Reads `PINWISE_MIN_TRACKED`, `PINWISE_MALLOC_HOOKS` and `PINWISE_STACKS` (when the
/// library is loaded: allocations made meanwhile are not tracked).
pub fn configure_from_env() {
    let var = |name: &std::ffi::CStr| {
        // SAFETY: getenv with a constant name; the value is only read here, before `main`.
        let v = unsafe { libc::getenv(name.as_ptr()) };
        if v.is_null() {
            return None;
        }
        // SAFETY: a NUL-terminated string of the environment.
        unsafe { std::ffi::CStr::from_ptr(v) }
            .to_str()
            .ok()
            .filter(|s| !s.trim().is_empty())
    };
    let flag = |name| var(name).and_then(crate::config::parse_bool);
    crate::malloc::configure(
        var(c"PINWISE_MIN_TRACKED"),
        flag(c"PINWISE_MALLOC_HOOKS"),
        flag(c"PINWISE_STACKS"),
    );
}

/// The allocator's `malloc_usable_size(p)` (0 while it is being looked up).
pub fn usable_size(p: *mut c_void) -> usize {
    match next(&REAL_MALLOC_USABLE_SIZE, c"malloc_usable_size") {
        0 => 0,
        // SAFETY: the next `malloc_usable_size`, with a block of the same allocator (the
        // caller is freeing it, so it is live).
        f => unsafe {
            std::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void) -> usize>(f)(p)
        },
    }
}

#[inline]
fn tracked(caller: usize, p: *mut c_void, size: usize) -> *mut c_void {
    if is_tracked_size(size) && record_alloc(caller, p, size) {
        remember_tracked(p);
    }
    p
}

/// The next definition in `slot` when a call of `size` bytes only forwards to it: found,
/// and `size` below the threshold (two loads of the hot line). Each export tail-calls it
/// then, and calls its out-of-line `_slow` function (the lookup, the arena, recording)
/// otherwise: two separate calls in tail position, so that the compiler cannot merge them
/// into one call followed by the size test, which would make the untracked path save
/// registers, call and return.
#[inline(always)]
fn forward_only(slot: &AtomicUsize, size: usize) -> Option<usize> {
    let f = slot.load(Ordering::Acquire);
    (f > LOOKING_UP && !is_tracked_size(size)).then_some(f)
}

/// `malloc`.
///
/// # Safety
/// As `malloc(3)`.
unsafe extern "C" fn malloc_imp(size: usize, caller: usize) -> *mut c_void {
    if let Some(f) = forward_only(&HOT.real_malloc, size) {
        // SAFETY: the next `malloc`, with the caller's argument.
        return unsafe { std::mem::transmute::<usize, MallocFn>(f)(size) };
    }
    // SAFETY: the caller's arguments.
    unsafe { malloc_slow(size, caller) }
}
export_with_caller!(malloc => malloc_imp, 1);

type MallocFn = unsafe extern "C" fn(usize) -> *mut c_void;
type CallocFn = unsafe extern "C" fn(usize, usize) -> *mut c_void;
type AlignedFn = unsafe extern "C" fn(usize, usize) -> *mut c_void;
type PosixMemalignFn = unsafe extern "C" fn(*mut *mut c_void, usize, usize) -> c_int;

/// `malloc` off the untracked path.
///
/// # Safety
/// As `malloc(3)`.
#[cold]
#[inline(never)]
unsafe extern "C" fn malloc_slow(size: usize, caller: usize) -> *mut c_void {
    match next(&HOT.real_malloc, c"malloc") {
        0 => boot::alloc(size, 16) as *mut c_void,
        f => {
            // SAFETY: the next `malloc`, with the caller's argument.
            let p = unsafe { std::mem::transmute::<usize, MallocFn>(f)(size) };
            tracked(caller, p, size)
        }
    }
}

/// `malloc` for a `realloc` that moves a block out of the bootstrap arena.
///
/// # Safety
/// As `malloc(3)`.
pub(super) unsafe fn malloc_for_realloc(size: usize, caller: usize) -> *mut c_void {
    // SAFETY: as `malloc`.
    unsafe { malloc_slow(size, caller) }
}

/// `calloc`.
///
/// # Safety
/// As `calloc(3)`.
unsafe extern "C" fn calloc_imp(n: usize, size: usize, caller: usize) -> *mut c_void {
    // An overflowing product fails the call: nothing to record either.
    if let Some(f) = forward_only(&HOT.real_calloc, n.checked_mul(size).unwrap_or(0)) {
        // SAFETY: the next `calloc`, with the caller's arguments.
        return unsafe { std::mem::transmute::<usize, CallocFn>(f)(n, size) };
    }
    // SAFETY: the caller's arguments.
    unsafe { calloc_slow(n, size, caller) }
}
export_with_caller!(calloc => calloc_imp, 2);

/// `calloc` off the untracked path.
///
/// # Safety
/// As `calloc(3)`.
#[cold]
#[inline(never)]
unsafe extern "C" fn calloc_slow(n: usize, size: usize, caller: usize) -> *mut c_void {
    match next(&HOT.real_calloc, c"calloc") {
        // The arena is never reused: its blocks are zero.
        0 => n
            .checked_mul(size)
            .map_or(std::ptr::null_mut(), |b| boot::alloc(b, 16)) as *mut c_void,
        f => {
            // SAFETY: the next `calloc`, with the caller's arguments.
            let p = unsafe { std::mem::transmute::<usize, CallocFn>(f)(n, size) };
            match n.checked_mul(size) {
                Some(bytes) => tracked(caller, p, bytes),
                None => p,
            }
        }
    }
}

/// `posix_memalign`.
///
/// # Safety
/// As `posix_memalign(3)`: `out` is writable.
unsafe extern "C" fn posix_memalign_imp(
    out: *mut *mut c_void,
    align: usize,
    size: usize,
    caller: usize,
) -> c_int {
    if let Some(f) = forward_only(&HOT.real_posix_memalign, size) {
        // SAFETY: the next `posix_memalign`, with the caller's arguments.
        return unsafe { std::mem::transmute::<usize, PosixMemalignFn>(f)(out, align, size) };
    }
    // SAFETY: the caller's arguments.
    unsafe { posix_memalign_slow(out, align, size, caller) }
}
export_with_caller!(posix_memalign => posix_memalign_imp, 3);

/// `posix_memalign` off the untracked path.
///
/// # Safety
/// As `posix_memalign(3)`: `out` is writable.
#[cold]
#[inline(never)]
unsafe extern "C" fn posix_memalign_slow(
    out: *mut *mut c_void,
    align: usize,
    size: usize,
    caller: usize,
) -> c_int {
    match next(&HOT.real_posix_memalign, c"posix_memalign") {
        0 => {
            if !align.is_power_of_two() || !align.is_multiple_of(std::mem::size_of::<usize>()) {
                return libc::EINVAL;
            }
            let p = boot::alloc(size, align);
            if p.is_null() {
                return libc::ENOMEM;
            }
            // SAFETY: `out` is writable (the caller's contract).
            unsafe { *out = p as *mut c_void };
            0
        }
        f => {
            // SAFETY: the next `posix_memalign`, with the caller's arguments.
            let rc = unsafe { std::mem::transmute::<usize, PosixMemalignFn>(f)(out, align, size) };
            if rc == 0 && is_tracked_size(size) {
                // SAFETY: on success the allocator wrote the block to `out`.
                let p = unsafe { *out };
                if record_alloc(caller, p, size) {
                    remember_tracked(p);
                }
            }
            rc
        }
    }
}

/// An aligned allocation through `slot` (`aligned_alloc`, `memalign`) off the untracked
/// path.
///
/// # Safety
/// As `aligned_alloc(3)`.
#[inline(always)]
unsafe fn aligned_slow(
    slot: &AtomicUsize,
    name: &std::ffi::CStr,
    align: usize,
    size: usize,
    caller: usize,
) -> *mut c_void {
    match next(slot, name) {
        0 if align.is_power_of_two() => boot::alloc(size, align) as *mut c_void,
        0 => std::ptr::null_mut(),
        f => {
            // SAFETY: the next definition of `name`, with the caller's arguments.
            let p = unsafe { std::mem::transmute::<usize, AlignedFn>(f)(align, size) };
            tracked(caller, p, size)
        }
    }
}

/// `aligned_alloc`.
///
/// # Safety
/// As `aligned_alloc(3)`.
unsafe extern "C" fn aligned_alloc_imp(align: usize, size: usize, caller: usize) -> *mut c_void {
    if let Some(f) = forward_only(&HOT.real_aligned_alloc, size) {
        // SAFETY: the next `aligned_alloc`, with the caller's arguments.
        return unsafe { std::mem::transmute::<usize, AlignedFn>(f)(align, size) };
    }
    // SAFETY: the caller's arguments.
    unsafe { aligned_alloc_slow(align, size, caller) }
}

/// `aligned_alloc` off the untracked path.
///
/// # Safety
/// As `aligned_alloc(3)`.
#[cold]
#[inline(never)]
unsafe extern "C" fn aligned_alloc_slow(align: usize, size: usize, caller: usize) -> *mut c_void {
    // SAFETY: the caller's arguments, passed on.
    unsafe {
        aligned_slow(
            &HOT.real_aligned_alloc,
            c"aligned_alloc",
            align,
            size,
            caller,
        )
    }
}
export_with_caller!(aligned_alloc => aligned_alloc_imp, 2);

/// `memalign`.
///
/// # Safety
/// As `memalign(3)`.
unsafe extern "C" fn memalign_imp(align: usize, size: usize, caller: usize) -> *mut c_void {
    if let Some(f) = forward_only(&REAL_MEMALIGN, size) {
        // SAFETY: the next `memalign`, with the caller's arguments.
        return unsafe { std::mem::transmute::<usize, AlignedFn>(f)(align, size) };
    }
    // SAFETY: the caller's arguments.
    unsafe { memalign_slow(align, size, caller) }
}

/// `memalign` off the untracked path.
///
/// # Safety
/// As `memalign(3)`.
#[cold]
#[inline(never)]
unsafe extern "C" fn memalign_slow(align: usize, size: usize, caller: usize) -> *mut c_void {
    // SAFETY: the caller's arguments, passed on.
    unsafe { aligned_slow(&REAL_MEMALIGN, c"memalign", align, size, caller) }
}
export_with_caller!(memalign => memalign_imp, 2);

/// `valloc`.
///
/// # Safety
/// As `valloc(3)`.
unsafe extern "C" fn valloc_imp(size: usize, caller: usize) -> *mut c_void {
    if let Some(f) = forward_only(&REAL_VALLOC, size) {
        // SAFETY: the next `valloc`, with the caller's argument.
        return unsafe { std::mem::transmute::<usize, MallocFn>(f)(size) };
    }
    // SAFETY: the caller's arguments.
    unsafe { valloc_slow(size, caller) }
}

/// `valloc` off the untracked path.
///
/// # Safety
/// As `valloc(3)`.
#[cold]
#[inline(never)]
unsafe extern "C" fn valloc_slow(size: usize, caller: usize) -> *mut c_void {
    match next(&REAL_VALLOC, c"valloc") {
        0 => boot::alloc(size, 4096) as *mut c_void,
        f => {
            // SAFETY: the next `valloc`, with the caller's argument.
            let p = unsafe { std::mem::transmute::<usize, MallocFn>(f)(size) };
            tracked(caller, p, size)
        }
    }
}
export_with_caller!(valloc => valloc_imp, 1);
