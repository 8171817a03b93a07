//! What both C ABIs share: the thread's last error, and turning a Rust error or a panic into
//! a C return value (no panic ever crosses into C).
use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `message` as this thread's last error.
pub(crate) fn set_error(message: &str) {
    let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// This thread's last error ("" if none), valid until the thread's next failing call.
pub(crate) fn last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Runs `f`, turning an error or a panic into `on_error` and the thread's last error.
pub(crate) fn guarded<T>(on_error: T, f: impl FnOnce() -> Result<T, String>) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(msg)) => {
            set_error(&msg);
            on_error
        }
        Err(_) => {
            set_error("internal error in pinwise (a bug): the call was abandoned");
            on_error
        }
    }
}

/// A path from C: NULL is none.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
pub(crate) unsafe fn opt_path(p: *const c_char, what: &str) -> Result<Option<PathBuf>, String> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract.
    let s = unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| format!("{what} is not valid UTF-8"))?;
    Ok(Some(PathBuf::from(s)))
}
