//! The allocation side of the malloc family: `malloc`, `calloc`, `posix_memalign`,
//! `aligned_alloc`, `memalign`, `valloc` (the release side, `free`, `realloc` and
//! `reallocarray`, is in `libc_hooks`). Each forwards to the next definition and, for
//! blocks of at least the tracking threshold, records the allocation
//! ([`crate::malloc::record_alloc`]). While the next definition is being looked up, blocks
//! come from [`crate::malloc::boot`].

use std::ffi::{c_int, c_void};
use std::sync::atomic::AtomicUsize;

use super::export_with_caller;
use super::libc_hooks::next;
use crate::malloc::{boot, is_tracked_size, record_alloc, HOT};

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
    if is_tracked_size(size) {
        let _ = record_alloc(caller, p, size);
    }
    p
}

/// `malloc`.
///
/// # Safety
/// As `malloc(3)`.
unsafe extern "C" fn malloc_imp(size: usize, caller: usize) -> *mut c_void {
    match next(&HOT.real_malloc, c"malloc") {
        0 => boot::alloc(size, 16) as *mut c_void,
        f => {
            // SAFETY: the next `malloc`.
            let real = unsafe {
                std::mem::transmute::<usize, unsafe extern "C" fn(usize) -> *mut c_void>(f)
            };
            // The size first: below the threshold the real function is tail-called.
            if !is_tracked_size(size) {
                // SAFETY: the next `malloc`, with the caller's argument.
                return unsafe { real(size) };
            }
            // SAFETY: as above.
            let p = unsafe { real(size) };
            tracked(caller, p, size)
        }
    }
}
export_with_caller!(malloc => malloc_imp, 1);

/// `malloc` for a `realloc` that moves a block out of the bootstrap arena.
///
/// # Safety
/// As `malloc(3)`.
pub(super) unsafe fn malloc_for_realloc(size: usize, caller: usize) -> *mut c_void {
    // SAFETY: as `malloc`.
    unsafe { malloc_imp(size, caller) }
}

/// `calloc`.
///
/// # Safety
/// As `calloc(3)`.
unsafe extern "C" fn calloc_imp(n: usize, size: usize, caller: usize) -> *mut c_void {
    match next(&HOT.real_calloc, c"calloc") {
        // The arena is never reused: its blocks are zero.
        0 => n
            .checked_mul(size)
            .map_or(std::ptr::null_mut(), |b| boot::alloc(b, 16)) as *mut c_void,
        f => {
            // SAFETY: the next `calloc`.
            let real = unsafe {
                std::mem::transmute::<usize, unsafe extern "C" fn(usize, usize) -> *mut c_void>(f)
            };
            match n.checked_mul(size) {
                Some(bytes) if is_tracked_size(bytes) => {
                    // SAFETY: the next `calloc`, with the caller's arguments.
                    let p = unsafe { real(n, size) };
                    tracked(caller, p, bytes)
                }
                // SAFETY: as above (below the threshold, or an overflow calloc refuses).
                _ => unsafe { real(n, size) },
            }
        }
    }
}
export_with_caller!(calloc => calloc_imp, 2);

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
            // SAFETY: the next `posix_memalign`.
            let real = unsafe {
                std::mem::transmute::<
                    usize,
                    unsafe extern "C" fn(*mut *mut c_void, usize, usize) -> c_int,
                >(f)
            };
            if !is_tracked_size(size) {
                // SAFETY: the next `posix_memalign`, with the caller's arguments.
                return unsafe { real(out, align, size) };
            }
            // SAFETY: as above.
            let rc = unsafe { real(out, align, size) };
            if rc == 0 {
                // SAFETY: on success the allocator wrote the block to `out`.
                let _ = record_alloc(caller, unsafe { *out }, size);
            }
            rc
        }
    }
}
export_with_caller!(posix_memalign => posix_memalign_imp, 3);

/// An aligned allocation through `slot` (`aligned_alloc`, `memalign`).
///
/// # Safety
/// As `aligned_alloc(3)`.
unsafe fn aligned(
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
            // SAFETY: the next definition of `name`.
            let real = unsafe {
                std::mem::transmute::<usize, unsafe extern "C" fn(usize, usize) -> *mut c_void>(f)
            };
            if !is_tracked_size(size) {
                // SAFETY: the next definition of `name`, with the caller's arguments.
                return unsafe { real(align, size) };
            }
            // SAFETY: as above.
            let p = unsafe { real(align, size) };
            tracked(caller, p, size)
        }
    }
}

/// `aligned_alloc`.
///
/// # Safety
/// As `aligned_alloc(3)`.
unsafe extern "C" fn aligned_alloc_imp(align: usize, size: usize, caller: usize) -> *mut c_void {
    // SAFETY: the caller's arguments, passed on.
    unsafe {
        aligned(
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
    // SAFETY: the caller's arguments, passed on.
    unsafe { aligned(&REAL_MEMALIGN, c"memalign", align, size, caller) }
}
export_with_caller!(memalign => memalign_imp, 2);

/// `valloc`.
///
/// # Safety
/// As `valloc(3)`.
unsafe extern "C" fn valloc_imp(size: usize, caller: usize) -> *mut c_void {
    match next(&REAL_VALLOC, c"valloc") {
        0 => boot::alloc(size, 4096) as *mut c_void,
        f => {
            // SAFETY: the next `valloc`.
            let real = unsafe {
                std::mem::transmute::<usize, unsafe extern "C" fn(usize) -> *mut c_void>(f)
            };
            if !is_tracked_size(size) {
                // SAFETY: the next `valloc`, with the caller's argument.
                return unsafe { real(size) };
            }
            // SAFETY: as above.
            let p = unsafe { real(size) };
            tracked(caller, p, size)
        }
    }
}
export_with_caller!(valloc => valloc_imp, 1);
