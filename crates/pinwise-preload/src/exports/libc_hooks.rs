//! `free`, `realloc`, `reallocarray` and `munmap`: so that a range pinwise registered
//! inside the program's memory is unregistered before the memory goes away, and so that
//! frees (and moves) of tracked blocks are recorded ([`crate::malloc`]). A call that has
//! nothing to do (no range registered, the block not tracked: [`free_may_be_tracked`], and
//! for `realloc` a new size below the threshold) reads two words of the hot line and
//! pinning's count, and tail-calls the real function; the rest is out of line. They never
//! allocate, lock or touch thread-local storage themselves on that path. Blocks of the
//! bootstrap arena ([`crate::malloc::boot`]) never reach the real functions.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::export_with_caller;
use super::malloc_hooks::usable_size;
use crate::hooks::alloc::{before_free, before_munmap};
use crate::malloc::{
    after_release, before_release, boot, free_may_be_tracked, glibc_heap, is_tracked_size,
    record_alloc, remember_tracked, HOT,
};
use crate::pinning::PROMOTED_RANGES;

/// The real functions, found on first use (`free`'s and `realloc`'s are on the hot line,
/// [`HOT`]).
static REAL_REALLOCARRAY: AtomicUsize = AtomicUsize::new(0);
static REAL_MUNMAP: AtomicUsize = AtomicUsize::new(0);

extern "C" {
    /// glibc's own allocator entry points: used only while the real `free`/`realloc` are
    /// being looked up (a `dlsym` that frees memory of its own re-enters here).
    fn __libc_free(p: *mut c_void);
    fn __libc_realloc(p: *mut c_void, n: usize) -> *mut c_void;
}

/// A slot's value while its function is being looked up (0: not looked up yet, or not
/// found; above: the function).
pub(super) const LOOKING_UP: usize = 1;

/// The next definition of `name` after this library, cached in `slot`; 0 while it is being
/// looked up on this path (the caller then uses glibc's own function).
#[inline]
pub(super) fn next(slot: &AtomicUsize, name: &std::ffi::CStr) -> usize {
    let a = slot.load(Ordering::Acquire);
    if a > LOOKING_UP {
        return a;
    }
    if a == LOOKING_UP
        || slot
            .compare_exchange(0, LOOKING_UP, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
    {
        return 0;
    }
    let found = crate::real::dlsym(crate::real::Handle::NEXT, name);
    let found = if found > LOOKING_UP { found } else { 0 };
    slot.store(found, Ordering::Release);
    found
}

/// The usable size of a block being freed, or 0 when it is certainly below `min` (read from
/// glibc's chunk header when the heap is glibc's: a chunk's size bounds the usable size
/// from above; for blocks that may be tracked, the allocator's `malloc_usable_size`). On
/// another heap: `usize::MAX` for a tracked block, 0 for another
/// ([`crate::malloc::foreign_release_size`]).
#[inline]
fn usable_size_for_free(p: *mut c_void, min: usize) -> usize {
    if !glibc_heap() {
        return crate::malloc::foreign_release_size(p, usable_size);
    }
    // SAFETY: `p` is a live block of glibc's heap being freed (free's contract): the word
    // before it is its chunk's size (with flags in the low 3 bits), which glibc's free
    // reads first too.
    let chunk = unsafe { (p as *const usize).sub(1).read() } & !7;
    if chunk < min {
        return 0;
    }
    usable_size(p)
}

/// Looks the real functions up now (when the library is loaded), so that later calls never
/// take the lookup path.
pub fn resolve_now() {
    let f = next(&HOT.real_free, c"free");
    crate::malloc::set_glibc_heap(f != 0 && f == __libc_free as *const () as usize);
    next(&HOT.real_realloc, c"realloc");
    next(&REAL_REALLOCARRAY, c"reallocarray");
    next(&REAL_MUNMAP, c"munmap");
    super::prctl::resolve_now();
    super::malloc_hooks::resolve_now();
}

/// Whether the program's `free`, `realloc` and `munmap` are these (a program that defines
/// its own, in the executable, bypasses them: pinwise must then not register its memory).
pub fn hooks_effective() -> bool {
    let ours = [
        free as *const () as usize,
        realloc as *const () as usize,
        munmap as *const () as usize,
    ];
    [c"free", c"realloc", c"munmap"]
        .iter()
        .zip(ours)
        .all(|(name, mine)| crate::real::dlsym(crate::real::Handle::DEFAULT, name) == mine)
}

/// `free`.
///
/// # Safety
/// As `free(3)`.
unsafe extern "C" fn free_imp(p: *mut c_void, caller: usize) {
    let f = HOT.real_free.load(Ordering::Acquire);
    // SAFETY (of `free_may_be_tracked`): `p` is null or a live block being freed, not one
    // of the arena (tested before it).
    if f <= LOOKING_UP
        || boot::contains(p as usize)
        || (!p.is_null() && PROMOTED_RANGES.any_active())
        || unsafe { free_may_be_tracked(p) }
    {
        // SAFETY: the caller's pointer.
        return unsafe { free_slow(p, caller) };
    }
    // SAFETY: the next `free`, with the caller's pointer (a tail call).
    unsafe { std::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void)>(f)(p) }
}

/// `free` with something to do: a block of the arena, a range to unregister, a free to
/// record, or the real function still being looked up.
///
/// # Safety
/// As `free(3)`.
#[cold]
#[inline(never)]
unsafe extern "C" fn free_slow(p: *mut c_void, caller: usize) {
    if boot::contains(p as usize) {
        return;
    }
    if !p.is_null() && PROMOTED_RANGES.any_active() {
        before_free(p as usize);
    }
    let release = before_release(caller, p, usable_size_for_free);
    match next(&HOT.real_free, c"free") {
        // SAFETY: glibc's free, with the caller's pointer (free's contract).
        0 => unsafe { __libc_free(p) },
        // SAFETY: the next `free`, with the caller's pointer.
        f => unsafe { std::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void)>(f)(p) },
    }
    if let Some(r) = release {
        after_release(r, p, true);
    }
}
export_with_caller!(free => free_imp, 1);

/// A block of the bootstrap arena moved to the real allocator (`realloc` of it).
///
/// # Safety
/// `p` is a block of the arena.
unsafe fn realloc_boot_block(p: *mut c_void, n: usize, caller: usize) -> *mut c_void {
    // SAFETY: the caller's contract.
    let old = unsafe { boot::size_of(p as usize) };
    // SAFETY: a plain allocation through our own `malloc`.
    let q = unsafe { super::malloc_hooks::malloc_for_realloc(n, caller) };
    if !q.is_null() {
        // SAFETY: both blocks hold at least `min(old, n)` bytes and do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(p as *const u8, q as *mut u8, old.min(n)) };
    }
    q
}

/// `realloc`.
///
/// # Safety
/// As `realloc(3)`.
unsafe extern "C" fn realloc_imp(p: *mut c_void, n: usize, caller: usize) -> *mut c_void {
    let f = HOT.real_realloc.load(Ordering::Acquire);
    // SAFETY (of `free_may_be_tracked`): `p` is null or a live block being reallocated,
    // not one of the arena (tested before it).
    if f <= LOOKING_UP
        || is_tracked_size(n)
        || boot::contains(p as usize)
        || (!p.is_null() && PROMOTED_RANGES.any_active())
        || unsafe { free_may_be_tracked(p) }
    {
        // SAFETY: the caller's arguments.
        return unsafe { realloc_slow(p, n, caller) };
    }
    // SAFETY: the next `realloc`, with the caller's arguments (a tail call).
    unsafe {
        std::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void>(f)(
            p, n,
        )
    }
}

/// `realloc` with something to do (see [`free_slow`]; or a new block to record).
///
/// # Safety
/// As `realloc(3)`.
#[cold]
#[inline(never)]
unsafe extern "C" fn realloc_slow(p: *mut c_void, n: usize, caller: usize) -> *mut c_void {
    if boot::contains(p as usize) {
        // SAFETY: a block of the arena.
        return unsafe { realloc_boot_block(p, n, caller) };
    }
    if !p.is_null() && PROMOTED_RANGES.any_active() {
        before_free(p as usize);
    }
    let release = before_release(caller, p, usable_size_for_free);
    let q = match next(&HOT.real_realloc, c"realloc") {
        // SAFETY: glibc's realloc, with the caller's arguments.
        0 => unsafe { __libc_realloc(p, n) },
        // SAFETY: the next `realloc`, with the caller's arguments.
        f => unsafe {
            std::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void>(f)(
                p, n,
            )
        },
    };
    after_realloc(release, p, q, n, caller)
}
export_with_caller!(realloc => realloc_imp, 2);

/// Records what a `realloc` did: the old block went back unless the call failed (null
/// with a size), and the new one is an allocation of its own.
#[inline]
fn after_realloc(
    release: Option<crate::malloc::Release>,
    p: *mut c_void,
    q: *mut c_void,
    n: usize,
    caller: usize,
) -> *mut c_void {
    if let Some(r) = release {
        let moved = !(q.is_null() && n != 0);
        after_release(r, p, moved);
        if !moved {
            // A failed realloc keeps the tracked block (another heap's set gets it back).
            remember_tracked(p);
        }
    }
    if !q.is_null() && is_tracked_size(n) && record_alloc(caller, q, n) {
        remember_tracked(q);
    }
    q
}

/// `reallocarray`.
///
/// # Safety
/// As `reallocarray(3)`.
unsafe extern "C" fn reallocarray_imp(
    p: *mut c_void,
    n: usize,
    size: usize,
    caller: usize,
) -> *mut c_void {
    if boot::contains(p as usize) {
        return match n.checked_mul(size) {
            // SAFETY: a block of the arena.
            Some(bytes) => unsafe { realloc_boot_block(p, bytes, caller) },
            None => {
                // SAFETY: errno is thread-local storage of libc, writable.
                unsafe { *libc::__errno_location() = libc::ENOMEM };
                std::ptr::null_mut()
            }
        };
    }
    if !p.is_null() && PROMOTED_RANGES.any_active() {
        before_free(p as usize);
    }
    let Some(bytes) = n.checked_mul(size) else {
        // SAFETY: errno is thread-local storage of libc, writable.
        unsafe { *libc::__errno_location() = libc::ENOMEM };
        return std::ptr::null_mut();
    };
    let release = before_release(caller, p, usable_size_for_free);
    let q = match next(&REAL_REALLOCARRAY, c"reallocarray") {
        // SAFETY: glibc's realloc, with the caller's pointer and the product checked.
        0 => unsafe { __libc_realloc(p, bytes) },
        // SAFETY: the next `reallocarray`, with the caller's arguments.
        f => unsafe {
            std::mem::transmute::<
                usize,
                unsafe extern "C" fn(*mut c_void, usize, usize) -> *mut c_void,
            >(f)(p, n, size)
        },
    };
    after_realloc(release, p, q, bytes, caller)
}
export_with_caller!(reallocarray => reallocarray_imp, 3);

/// `munmap`.
///
/// # Safety
/// As `munmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: usize) -> libc::c_int {
    if PROMOTED_RANGES.any_active() {
        before_munmap(addr as usize, len);
    }
    match next(&REAL_MUNMAP, c"munmap") {
        // SAFETY: the system call itself, with the caller's arguments.
        0 => unsafe { libc::syscall(libc::SYS_munmap, addr, len) as libc::c_int },
        // SAFETY: the next `munmap`, with the caller's arguments.
        f => unsafe {
            std::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void, usize) -> libc::c_int>(f)(
                addr, len,
            )
        },
    }
}
