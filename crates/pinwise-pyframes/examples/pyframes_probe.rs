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

/// Counts heap allocations made through Rust's allocator in this library, so the test can
/// tell that [`capture`] allocates nothing.
struct Counting;

static ALLOCATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: same contract as ours, passed through.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: same contract as ours, passed through.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: same contract as ours, passed through.
        unsafe { std::alloc::System.realloc(ptr, layout, size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Captures 100 times (after detection) and returns the heap allocations those captures
/// made (expected 0), or -1 when a capture found no frames.
#[no_mangle]
pub extern "C" fn pyframes_capture_allocations() -> i64 {
    if pinwise_pyframes::interpreter().is_none() {
        return -1;
    }
    let mut raw = pinwise_pyframes::RawStack::new();
    let before = ALLOCATIONS.load(std::sync::atomic::Ordering::Relaxed);
    for _ in 0..100 {
        if !pinwise_pyframes::capture(&mut raw) || raw.frames().is_empty() {
            return -1;
        }
    }
    (ALLOCATIONS.load(std::sync::atomic::Ordering::Relaxed) - before) as i64
}

/// The calling thread's CPU time in nanoseconds.
fn thread_cpu_ns() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64
}

/// Times the capture for the benchmark (benches/capture.py): `samples` samples of `iters`
/// captures each; writes each sample's mean wall-clock nanoseconds per capture into
/// `out[s]` and its mean thread CPU nanoseconds into `out[samples + s]`, and returns the
/// number of frames captured, or -1.
///
/// # Safety
/// `out` must be valid for writes of `2 * samples` doubles.
#[no_mangle]
pub unsafe extern "C" fn pyframes_bench(
    mode: i32,
    samples: usize,
    iters: usize,
    out: *mut f64,
) -> i64 {
    if pinwise_pyframes::interpreter().is_none() || iters == 0 {
        return -1;
    }
    let mut raw = pinwise_pyframes::RawStack::new();
    if !pinwise_pyframes::capture(&mut raw) {
        return -1;
    }
    let frames = raw.frames().len() as i64;
    let mut resolver = pinwise_pyframes::Resolver::new();
    for s in 0..samples {
        let t = std::time::Instant::now();
        let cpu = thread_cpu_ns();
        for _ in 0..iters {
            match mode {
                // The hook's part: capture into fixed storage.
                0 => {
                    pinwise_pyframes::capture(std::hint::black_box(&mut raw));
                }
                // Capture and resolve with a warm cache (the strings of every code object
                // already read): the cost of resolving a stack later.
                1 => {
                    pinwise_pyframes::capture(&mut raw);
                    std::hint::black_box(resolver.resolve_stack(&raw));
                }
                // Everything from scratch (no cache).
                _ => {
                    std::hint::black_box(pinwise_pyframes::current_python_frames(32));
                }
            }
        }
        let ns = t.elapsed().as_nanos() as f64 / iters as f64;
        let cpu_ns = (thread_cpu_ns() - cpu) / iters as f64;
        // SAFETY: the caller gives `2 * samples` doubles at `out`; s < samples.
        unsafe {
            *out.add(s) = ns;
            *out.add(samples + s) = cpu_ns;
        }
    }
    frames
}
