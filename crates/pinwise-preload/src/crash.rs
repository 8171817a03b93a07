//! An opt-in crash report (`PINWISE_CRASH_REPORT=1`): when the program dies of a fatal
//! signal that pinwise's handler sees (see [`crate::flush`]), the signal, the faulting
//! address and the crashing thread's native frames are written to stderr first, so that
//! a crash under `pinwise run` says whether pinwise's code was on the stack. Off by
//! default: the program's stderr stays its own.
//!
//! The frames come from glibc's `backtrace` (libgcc's unwinder, which steps through the
//! signal frame) and `backtrace_symbols_fd` (no allocation: it writes `module(symbol+off)
//! [address]` lines straight to the descriptor). `backtrace` loads libgcc on its first
//! call, so [`prepare`] calls it once outside any handler.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

/// The environment variable that turns the report on (`1`).
pub const CRASH_REPORT_ENV: &str = "PINWISE_CRASH_REPORT";

static ENABLED: AtomicBool = AtomicBool::new(false);

extern "C" {
    fn backtrace(buffer: *mut *mut c_void, size: libc::c_int) -> libc::c_int;
    fn backtrace_symbols_fd(buffer: *const *mut c_void, size: libc::c_int, fd: libc::c_int);
}

/// Reads [`CRASH_REPORT_ENV`] and, if it is `1`, readies the unwinder. Called when the
/// fatal-signal handlers are installed (not from a handler).
pub fn prepare() {
    if std::env::var_os(CRASH_REPORT_ENV).is_some_and(|v| v == "1") {
        let mut frames = [std::ptr::null_mut::<c_void>(); 4];
        // SAFETY: a valid buffer of 4 entries.
        unsafe { backtrace(frames.as_mut_ptr(), 4) };
        ENABLED.store(true, Ordering::Release);
    }
}

/// Whether `sig` is one whose report helps (a crash, not a request to stop).
fn is_crash(sig: libc::c_int) -> bool {
    matches!(
        sig,
        libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE | libc::SIGABRT
    )
}

/// Writes the report for `sig` (from the handler; async-signal-safe enough for a
/// process that is dying: `write`, `backtrace` once libgcc is loaded,
/// `backtrace_symbols_fd`).
pub fn report(sig: libc::c_int, info: *const libc::siginfo_t) {
    if !ENABLED.load(Ordering::Acquire) || !is_crash(sig) {
        return;
    }
    let addr = if info.is_null() {
        0
    } else {
        // SAFETY: the kernel's siginfo for this signal, valid during the handler.
        unsafe { (*info).si_addr() as usize }
    };
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let mut line = [0u8; 128];
    let n = format_header(&mut line, sig, addr, tid as u32);
    write_stderr(&line[..n]);
    let mut frames = [std::ptr::null_mut::<c_void>(); 48];
    // SAFETY: a valid buffer of 48 entries; libgcc was loaded by `prepare`.
    let depth = unsafe { backtrace(frames.as_mut_ptr(), frames.len() as libc::c_int) };
    // SAFETY: the first `depth` entries were filled; fd 2 is stderr.
    unsafe { backtrace_symbols_fd(frames.as_ptr(), depth, 2) };
    write_stderr(b"pinwise crash report: end\n");
}

fn write_stderr(bytes: &[u8]) {
    // SAFETY: a valid buffer; a failed write is ignored (nothing else can be done).
    unsafe { libc::write(2, bytes.as_ptr() as *const c_void, bytes.len()) };
}

/// `pinwise crash report: signal S at 0x.. in thread T\n` into `out` without allocating;
/// returns its length.
fn format_header(out: &mut [u8; 128], sig: libc::c_int, addr: usize, tid: u32) -> usize {
    let mut n = 0;
    let mut put = |b: &[u8]| {
        for &c in b {
            if n < out.len() {
                out[n] = c;
                n += 1;
            }
        }
    };
    let mut digits = [0u8; 20];
    put(b"pinwise crash report: signal ");
    put(decimal(sig as u64, &mut digits));
    put(b" at 0x");
    put(hex(addr as u64, &mut digits));
    put(b" in thread ");
    put(decimal(tid as u64, &mut digits));
    put(b"\n");
    n
}

fn decimal(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return &buf[i..];
        }
    }
}

fn hex(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b"0123456789abcdef"[(v & 15) as usize];
        v >>= 4;
        if v == 0 {
            return &buf[i..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_names_signal_address_and_thread() {
        let mut out = [0u8; 128];
        let n = format_header(&mut out, libc::SIGSEGV, 0x7f00_dead_beef, 4242);
        assert_eq!(
            std::str::from_utf8(&out[..n]).unwrap(),
            "pinwise crash report: signal 11 at 0x7f00deadbeef in thread 4242\n"
        );
        let n = format_header(&mut out, libc::SIGBUS, 0, 0);
        assert_eq!(
            std::str::from_utf8(&out[..n]).unwrap(),
            "pinwise crash report: signal 7 at 0x0 in thread 0\n"
        );
    }

    #[test]
    fn only_crashes_are_reported() {
        assert!(is_crash(libc::SIGSEGV) && is_crash(libc::SIGABRT));
        assert!(!is_crash(libc::SIGTERM) && !is_crash(libc::SIGINT));
    }
}
