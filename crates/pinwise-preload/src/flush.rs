//! Nothing lost when the program ends abruptly: the outputs (history, profile, statistics)
//! are written before a signal whose default action ends the process takes effect, and
//! before `_exit`/`_Exit` (which skip `atexit`).
//!
//! **Signals** (`SIGINT` except in a Python process (see `python_present`), `SIGTERM`, `SIGHUP`, `SIGQUIT`, `SIGABRT`, `SIGSEGV`, `SIGBUS`,
//! `SIGFPE`, `SIGILL`): when the state is created, pinwise installs a handler for each of
//! these whose action is still the default one (never for a signal the program ignores or
//! handles, nor for the dump signal). The handler is async-signal-safe: it sets a flag and
//! sleeps (`nanosleep`) until the drain thread, which blocks every signal, has written the
//! outputs, at most [`FLUSH_WAIT`]; then it restores the default action and raises the
//! signal again, so the process ends exactly as it would have (same signal, same core
//! dump). A handler the program installs later replaces pinwise's, as it would replace the
//! default; the program's own handlers are never wrapped, so a runtime that uses `SIGSEGV`
//! for itself (a JVM) pays nothing. If the thread that got the signal holds a lock the
//! drain thread needs, the wait times out and the process ends without the last write.
//!
//! **`_exit`/`_Exit`** are interposed: in the process that owns the state they have the
//! drain thread write the outputs (the same bounded wait: `_exit` is often called from a
//! signal handler), then call the real function. A `vfork` child calling `_exit` is another
//! pid and does nothing; so does a process that never made the state (no CUDA host-memory
//! call: `pinwise run` then says no statistics were written).
//!
//! **While the outputs are written** before the process ends (a handler's or `_exit`'s
//! wait), a hook entered on another thread of the program waits at its entry, before it
//! does anything, until they are written (at most [`FLUSH_WAIT`]; see
//! [`pause_while_ending`]). The process is ending: those threads would be stopped by the
//! signal or `_exit` a moment later, and a program whose threads keep copying would
//! otherwise take the CPU from the drain thread and make it miss the wait. pinwise's own
//! threads never wait (they are inside pinwise), nor do the malloc-family hooks. The
//! outputs are then not synced to the disk ([`durability`]): a sync can take seconds on a
//! busy disk, and the kernel keeps the bytes once the process is gone.
//!
//! What nothing in the process can catch (`SIGKILL`, the OOM killer) is covered by the
//! history appended while the program runs (`persist`): such a run keeps everything up to
//! the last append.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// The longest a signal handler waits for the drain thread to write the outputs.
pub const FLUSH_WAIT: Duration = Duration::from_secs(3);

/// The signals whose default action ends the process, and that pinwise flushes before.
pub const FATAL_SIGNALS: [libc::c_int; 9] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGABRT,
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
];

/// Set by a handler: the drain thread writes the outputs.
static REQUESTED: AtomicBool = AtomicBool::new(false);
/// Counts the flushes the drain thread finished (a handler waits for it to move).
static DONE: AtomicU64 = AtomicU64::new(0);
/// Whether the handlers are installed (once per process image).
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// The pid the handlers flush for (a forked child without state does nothing).
static OWNER_PID: AtomicUsize = AtomicUsize::new(0);
/// How many threads are waiting for the outputs before the process ends (a handler's or
/// `_exit`'s wait): hooks on the other threads wait too (see [`pause_while_ending`]).
static ENDING: AtomicUsize = AtomicUsize::new(0);

/// Installs the handler for each of [`FATAL_SIGNALS`] whose action is the default (except
/// `skip`, the dump signal). Called when the state is created.
///
/// Plain `sigaction`, not signal-hook: this runs inside someone else's program, and must
/// leave alone every signal the program handles itself (installing only over `SIG_DFL`),
/// then on the signal put the default back and re-raise it. signal-hook's registry installs
/// its own handler unconditionally, keeps it (and chains to what was there) for the life
/// of the process, and allocates and takes its registry lock when registering: none of
/// that makes this simpler, and its "default" cannot be "stay out of the way".
pub fn install(skip: Option<libc::c_int>) {
    // SAFETY: getpid has no preconditions.
    OWNER_PID.store(unsafe { libc::getpid() } as usize, Ordering::Relaxed);
    if INSTALLED.swap(true, Ordering::AcqRel) {
        return;
    }
    crate::crash::prepare();
    let python = python_present();
    for sig in FATAL_SIGNALS {
        if Some(sig) == skip || (sig == libc::SIGINT && python) {
            continue;
        }
        // SAFETY: sigaction with valid in/out structures; the handler is async-signal-safe.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0
                || old.sa_sigaction != libc::SIG_DFL
            {
                continue; // the program ignores or handles it: left alone
            }
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_fatal_signal as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

/// Whether a CPython interpreter is in the process. CPython installs its SIGINT handler
/// (the one that raises `KeyboardInterrupt`) only over the default action: a handler of
/// pinwise's installed first would take Ctrl-C away from the program's `try`/`finally`
/// and `except KeyboardInterrupt`. In a Python process SIGINT is left alone. A Ctrl-C the
/// program catches ends it normally (every output written at exit); one it does not catch
/// ends it the way CPython does (it restores the default action and raises SIGINT again,
/// skipping `atexit`): the history then keeps what the periodic appends wrote, and the
/// statistics and a profile are not written.
fn python_present() -> bool {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only looks the symbol up.
    !unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"Py_IsInitialized".as_ptr()) }.is_null()
}

/// Called by the drain thread on every wake-up: runs `write` (drain everything, write the
/// outputs) if a handler asked for it, then lets the handler go on.
pub fn service(write: impl FnOnce()) {
    if REQUESTED.swap(false, Ordering::AcqRel) {
        // Counted done even if `write` panics (the caller catches it): the handler must
        // not wait for nothing.
        struct Done;
        impl Drop for Done {
            fn drop(&mut self) {
                DONE.fetch_add(1, Ordering::AcqRel);
            }
        }
        let _done = Done;
        write();
    }
}

extern "C" fn on_fatal_signal(
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    _ctx: *mut libc::c_void,
) {
    // Async-signal-safe only: atomics, getpid, nanosleep, sigaction, raise.
    // SAFETY: __errno_location gives this thread's errno; saved and restored around the
    // calls below.
    let errno = unsafe { *libc::__errno_location() };
    crate::crash::report(sig, info);
    flush_and_wait();
    // SAFETY: restoring the default action and raising the signal again: it is blocked
    // while this handler runs and takes effect (the default action) when it returns.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
        *libc::__errno_location() = errno;
    }
}

/// In the process that owns the state: asks the drain thread to write the outputs and waits
/// for it, at most [`FLUSH_WAIT`]. Async-signal-safe (atomics, getpid, nanosleep): the
/// writing happens on the drain thread, never in the caller, which may be a signal handler
/// interrupting a thread that holds a lock the writing needs.
fn flush_and_wait() {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as usize;
    if pid != OWNER_PID.load(Ordering::Relaxed) {
        return;
    }
    let before = DONE.load(Ordering::Acquire);
    ENDING.fetch_add(1, Ordering::AcqRel);
    REQUESTED.store(true, Ordering::Release);
    wait_bounded(|| DONE.load(Ordering::Acquire) != before);
    ENDING.fetch_sub(1, Ordering::AcqRel);
}

/// Sleeps in 1 ms steps until `done()`, at most [`FLUSH_WAIT`] by the clock (a loaded
/// machine oversleeps each step), and never more steps than `FLUSH_WAIT` holds (should the
/// clock fail). Async-signal-safe when `done` is.
fn wait_bounded(done: impl Fn() -> bool) {
    let step = libc::timespec {
        tv_sec: 0,
        tv_nsec: 1_000_000,
    };
    let deadline = monotonic_ns_syscall().saturating_add(FLUSH_WAIT.as_nanos() as u64);
    for _ in 0..FLUSH_WAIT.as_millis() as u64 {
        if done() || monotonic_ns_syscall() >= deadline {
            return;
        }
        // SAFETY: nanosleep with a valid request and no remainder.
        unsafe { libc::nanosleep(&step, std::ptr::null_mut()) };
    }
}

/// `CLOCK_MONOTONIC` in ns through the system call (async-signal-safe, and never through the
/// vDSO, which reads the CPU's counter: that faults after `PR_SET_TSC`). 0 if it fails (a
/// seccomp filter): the wait is then bounded by its count of steps alone.
fn monotonic_ns_syscall() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime with a valid clock id and a valid out-parameter.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clock_gettime,
            libc::CLOCK_MONOTONIC,
            &mut ts as *mut libc::timespec,
        )
    };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// In a forked child (`pthread_atfork`; async-signal-safe: atomics only): the parent's
/// flush is not this process's, so nothing is ending here and nothing was requested (a
/// child forked while another thread of the parent waited in `_exit` or a handler would
/// otherwise pause in every hook).
pub fn forget_in_child() {
    ENDING.store(0, Ordering::Release);
    REQUESTED.store(false, Ordering::Release);
}

/// Whether the outputs are being written before the process ends (a handler's or
/// `_exit`'s wait is under way). One relaxed load: checked at every hook's entry.
#[inline]
pub fn ending() -> bool {
    ENDING.load(Ordering::Relaxed) != 0
}

/// How the outputs are written now: not synced to the disk while the process is ending
/// (the wait is bounded, and a sync can take seconds on a busy disk; the kernel keeps the
/// bytes once the process is gone), synced otherwise.
pub fn durability() -> pinwise_core::safe_file::Durability {
    if ending() {
        pinwise_core::safe_file::Durability::Unsynced
    } else {
        pinwise_core::safe_file::Durability::Synced
    }
}

/// For a hook entered on a thread of the program while [`ending`]: waits until the
/// outputs are written (at most [`FLUSH_WAIT`]), so that the drain thread gets the CPU.
/// Called before the hook does anything: it holds none of pinwise's locks (it may hold the
/// program's, or libc's if CUDA was called from a `dlopen` constructor; if the drain needs
/// such a lock, the wait runs out as it would have). Nothing in a forked child (the count is
/// reset there, [`forget_in_child`], and the pid is checked).
#[cold]
pub fn pause_while_ending() {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as usize;
    if pid != OWNER_PID.load(Ordering::Relaxed) {
        return;
    }
    wait_bounded(|| !ending());
}

/// Before the real `_exit`: the outputs, written by the drain thread (`_exit` is often
/// called from a signal handler, where writing files could deadlock).
pub fn before_exit() {
    flush_and_wait();
}

/// Calls the next definition of `name` (`_exit` or `_Exit`), or the exit system call if
/// there is none.
pub fn real_exit(slot: &AtomicUsize, name: &std::ffi::CStr, status: libc::c_int) -> ! {
    let mut f = slot.load(Ordering::Acquire);
    if f == 0 {
        f = crate::real::dlsym(crate::real::Handle::NEXT, name);
        slot.store(f, Ordering::Release);
    }
    if f != 0 {
        // SAFETY: the next definition of `_exit`/`_Exit`, whose signature this is.
        let f: extern "C" fn(libc::c_int) -> ! = unsafe { std::mem::transmute(f) };
        f(status);
    }
    // SAFETY: ends every thread of the process; no preconditions.
    unsafe { libc::syscall(libc::SYS_exit_group, status as libc::c_long) };
    std::process::abort()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinwise_core::safe_file::Durability;

    #[test]
    fn a_forked_child_forgets_an_ending_it_inherited() {
        ENDING.store(2, Ordering::SeqCst);
        REQUESTED.store(true, Ordering::SeqCst);
        assert!(ending());
        assert_eq!(durability(), Durability::Unsynced);
        forget_in_child();
        assert!(!ending());
        assert!(!REQUESTED.load(Ordering::SeqCst));
        assert_eq!(durability(), Durability::Synced);
    }

    #[test]
    fn the_wait_returns_once_done_and_the_clock_goes_on() {
        let calls = std::cell::Cell::new(0);
        wait_bounded(|| {
            calls.set(calls.get() + 1);
            calls.get() >= 5
        });
        assert_eq!(calls.get(), 5);
        let (a, b) = (monotonic_ns_syscall(), monotonic_ns_syscall());
        assert!(a > 0 && b >= a, "{a} {b}");
    }
}
