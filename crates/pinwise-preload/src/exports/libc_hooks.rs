//! `free`, `realloc`, `reallocarray` and `munmap`: only so that a range pinwise registered
//! inside the program's memory is unregistered before the memory goes away. While nothing
//! is registered they cost one atomic load; they never allocate, lock or touch
//! thread-local storage themselves.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::pinning::{before_free, before_munmap, PROMOTED_RANGES};

/// The real functions, found on first use.
static REAL_FREE: AtomicUsize = AtomicUsize::new(0);
static REAL_REALLOC: AtomicUsize = AtomicUsize::new(0);
static REAL_REALLOCARRAY: AtomicUsize = AtomicUsize::new(0);
static REAL_MUNMAP: AtomicUsize = AtomicUsize::new(0);

extern "C" {
    /// glibc's own allocator entry points: used only while the real `free`/`realloc` are
    /// being looked up (a `dlsym` that frees memory of its own re-enters here).
    fn __libc_free(p: *mut c_void);
    fn __libc_realloc(p: *mut c_void, n: usize) -> *mut c_void;
}

/// The next definition of `name` after this library, cached in `slot`; 0 while it is being
/// looked up on this path (the caller then uses glibc's own function).
#[inline]
fn next(slot: &AtomicUsize, name: &std::ffi::CStr) -> usize {
    const LOOKING_UP: usize = 1;
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

/// Looks the real functions up now (when the library is loaded), so that later calls never
/// take the lookup path.
pub fn resolve_now() {
    next(&REAL_FREE, c"free");
    next(&REAL_REALLOC, c"realloc");
    next(&REAL_REALLOCARRAY, c"reallocarray");
    next(&REAL_MUNMAP, c"munmap");
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
#[no_mangle]
pub unsafe extern "C" fn free(p: *mut c_void) {
    if !p.is_null() && PROMOTED_RANGES.any_active() {
        before_free(p as usize);
    }
    match next(&REAL_FREE, c"free") {
        // SAFETY: glibc's free, with the caller's pointer (free's contract).
        0 => unsafe { __libc_free(p) },
        // SAFETY: the next `free`, with the caller's pointer.
        f => unsafe { std::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void)>(f)(p) },
    }
}

/// `realloc`.
///
/// # Safety
/// As `realloc(3)`.
#[no_mangle]
pub unsafe extern "C" fn realloc(p: *mut c_void, n: usize) -> *mut c_void {
    if !p.is_null() && PROMOTED_RANGES.any_active() {
        before_free(p as usize);
    }
    match next(&REAL_REALLOC, c"realloc") {
        // SAFETY: glibc's realloc, with the caller's arguments.
        0 => unsafe { __libc_realloc(p, n) },
        // SAFETY: the next `realloc`, with the caller's arguments.
        f => unsafe {
            std::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void>(f)(
                p, n,
            )
        },
    }
}

/// `reallocarray`.
///
/// # Safety
/// As `reallocarray(3)`.
#[no_mangle]
pub unsafe extern "C" fn reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void {
    if !p.is_null() && PROMOTED_RANGES.any_active() {
        before_free(p as usize);
    }
    match next(&REAL_REALLOCARRAY, c"reallocarray") {
        0 => match n.checked_mul(size) {
            // SAFETY: glibc's realloc, with the caller's pointer and the product checked.
            Some(bytes) => unsafe { __libc_realloc(p, bytes) },
            None => {
                // SAFETY: errno is thread-local storage of libc, writable.
                unsafe { *libc::__errno_location() = libc::ENOMEM };
                std::ptr::null_mut()
            }
        },
        // SAFETY: the next `reallocarray`, with the caller's arguments.
        f => unsafe {
            std::mem::transmute::<
                usize,
                unsafe extern "C" fn(*mut c_void, usize, usize) -> *mut c_void,
            >(f)(p, n, size)
        },
    }
}

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
