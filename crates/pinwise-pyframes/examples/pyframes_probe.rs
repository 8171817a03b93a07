//! A shared library for tests/python.rs: Python loads it with ctypes and calls
//! [`pyframes_probe`], which captures the caller's Python frames through
//! `pinwise-pyframes` and writes them, one `file:line:function` a line, into a buffer.
#![deny(unsafe_op_in_unsafe_fn)]

use std::ffi::c_char;
use std::fmt::Write;

/// Writes the calling thread's Python frames (innermost first) into `buf` (`len` bytes, NUL
/// terminated) with `mode` 0: the two-step path (allocation-free [`capture`], then a
/// [`Resolver`]); 1: [`current_python_frames`]. Returns the number of frames, or -1 when
/// none could be captured, -2 when `buf` is too small.
///
/// # Safety
/// `buf` must be valid for writes of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn pyframes_probe(mode: i32, buf: *mut c_char, len: usize) -> i64 {
    let frames = if mode == 0 {
        if pinwise_pyframes::interpreter().is_none() {
            return -1;
        }
        let mut raw = pinwise_pyframes::RawStack::new();
        if !pinwise_pyframes::capture(&mut raw) {
            return -1;
        }
        pinwise_pyframes::Resolver::new().resolve_stack(&raw)
    } else {
        match pinwise_pyframes::current_python_frames(pinwise_pyframes::MAX_FRAMES) {
            Some(f) => f,
            None => return -1,
        }
    };
    let mut text = String::new();
    for f in &frames {
        let _ = writeln!(text, "{}:{}:{}", f.file, f.line, f.function);
    }
    if text.len() + 1 > len {
        return -2;
    }
    // SAFETY: the caller gives `len` writable bytes at `buf`; we write text.len() + 1 ≤ len.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
        *buf.add(text.len()) = 0;
    }
    frames.len() as i64
}

/// The detected interpreter's version ("3.11") into `buf`, or -1 if none.
///
/// # Safety
/// `buf` must be valid for writes of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn pyframes_version(buf: *mut c_char, len: usize) -> i64 {
    let Some(i) = pinwise_pyframes::interpreter() else {
        return -1;
    };
    let name = i.version().name();
    if name.len() + 1 > len {
        return -2;
    }
    // SAFETY: as in pyframes_probe.
    unsafe {
        std::ptr::copy_nonoverlapping(name.as_ptr(), buf.cast::<u8>(), name.len());
        *buf.add(name.len()) = 0;
    }
    0
}
