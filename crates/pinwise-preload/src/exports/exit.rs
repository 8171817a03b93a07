//! `_exit` and `_Exit`: the outputs are written first (they skip `atexit`), then the real
//! function runs (see `flush`).

use std::sync::atomic::AtomicUsize;

static REAL_EXIT: AtomicUsize = AtomicUsize::new(0);
static REAL_UNDERSCORE_EXIT: AtomicUsize = AtomicUsize::new(0);

/// `_exit`: the outputs, then glibc's `_exit`.
#[no_mangle]
pub extern "C" fn _exit(status: libc::c_int) -> ! {
    crate::flush::before_exit();
    crate::flush::real_exit(&REAL_EXIT, c"_exit", status)
}

/// `_Exit`: the outputs, then glibc's `_Exit`.
#[no_mangle]
pub extern "C" fn _Exit(status: libc::c_int) -> ! {
    crate::flush::before_exit();
    crate::flush::real_exit(&REAL_UNDERSCORE_EXIT, c"_Exit", status)
}
