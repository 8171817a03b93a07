//! `prctl`: seen so that a program that makes the CPU's time-stamp counter fault
//! (`PR_SET_TSC`, `PR_TSC_SIGSEGV`) stops the hooks reading it first
//! ([`crate::cycles::stop_counter`]); every call is then passed on unchanged.

use std::ffi::{c_int, c_ulong};
use std::sync::atomic::AtomicUsize;

use super::libc_hooks::next;

static REAL_PRCTL: AtomicUsize = AtomicUsize::new(0);

/// glibc's `prctl`, C-variadic as declared.
type PrctlFn = unsafe extern "C" fn(c_int, ...) -> c_int;

/// Looks the next `prctl` up now, at load, so that a program's first `prctl` (perhaps in
/// a signal handler or a vfork child) never runs `dlsym`.
pub(super) fn resolve_now() {
    next(&REAL_PRCTL, c"prctl");
}

/// `int prctl(int option, ...)`: glibc reads four `unsigned long` arguments after
/// `option` whatever it is, and variadic integer arguments travel in the same registers
/// as named ones (System V x86-64, AAPCS64 on Linux), so these five are what the caller
/// passed and are passed on as such.
///
/// # Safety
///
/// As `prctl(2)`: the arguments must be valid for `option`.
#[no_mangle]
pub unsafe extern "C" fn prctl(
    option: c_int,
    arg2: c_ulong,
    arg3: c_ulong,
    arg4: c_ulong,
    arg5: c_ulong,
) -> c_int {
    if crate::cycles::makes_counter_fault(option, arg2) {
        crate::cycles::stop_counter();
    }
    let real = next(&REAL_PRCTL, c"prctl");
    if real == 0 {
        // Being looked up on this path: the system call itself (what glibc's prctl makes).
        // SAFETY: the caller's arguments, as prctl(2) takes them.
        return unsafe { libc::syscall(libc::SYS_prctl, option, arg2, arg3, arg4, arg5) } as c_int;
    }
    // SAFETY: `real` is the next definition of `prctl`, C-variadic as `PrctlFn` says; the
    // four `unsigned long`s are what glibc's reads after `option`.
    let f: PrctlFn = unsafe { std::mem::transmute::<usize, PrctlFn>(real) };
    // SAFETY: the caller's arguments, as prctl(2) takes them.
    unsafe { f(option, arg2, arg3, arg4, arg5) }
}
