//! A Rust program that uses the CUDA runtime through FFI (as crates such as cudarc do),
//! for pinwise-preload's tests. Built at test time with `rustc` against the cudart
//! stand-in (a TEST FIXTURE). Its host buffers are Rust `Vec`s (the Rust allocator: malloc
//! and free underneath) and pinned allocations from `cudaMallocHost`/`cudaHostAlloc`.
//!
//! stdout: checksums a run under pinwise must reproduce byte for byte; stderr: the calls.
use std::ffi::{c_int, c_uint, c_void};

#[link(name = "cudart")]
extern "C" {
    fn cudaMallocHost(p: *mut *mut c_void, n: usize) -> c_int;
    fn cudaHostAlloc(p: *mut *mut c_void, n: usize, flags: c_uint) -> c_int;
    fn cudaFreeHost(p: *mut c_void) -> c_int;
    fn cudaMalloc(p: *mut *mut c_void, n: usize) -> c_int;
    fn cudaFree(p: *mut c_void) -> c_int;
    fn cudaMemcpy(dst: *mut c_void, src: *const c_void, n: usize, kind: c_int) -> c_int;
    fn cudaMemcpyAsync(dst: *mut c_void, src: *const c_void, n: usize, kind: c_int, s: *mut c_void) -> c_int;
    fn cudaStreamCreate(s: *mut *mut c_void) -> c_int;
    fn cudaStreamSynchronize(s: *mut c_void) -> c_int;
    fn cudaStreamDestroy(s: *mut c_void) -> c_int;
}

fn check(rc: c_int, what: &str) {
    if rc != 0 {
        eprintln!("{what} failed: {rc}");
        std::process::exit(2);
    }
}

struct Counts {
    alloc: u64,
    free: u64,
    htod: u64,
    dtoh: u64,
}

fn fnv(bytes: &[u8], mut h: u64) -> u64 {
    for &b in bytes {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
    }
    h
}

/// Sends `buf` to the device and back `rounds` times, changing it in between.
fn rounds(buf: &mut [u8], dev: *mut c_void, rounds: u32, stream: Option<*mut c_void>, n: &mut Counts) -> u64 {
    let mut h = 0xcbf29ce484222325;
    for r in 0..rounds {
        for i in (0..buf.len()).step_by(4096) {
            buf[i] = buf[i].wrapping_add(r as u8 + 1);
        }
        // SAFETY: `buf` and `dev` are valid for `buf.len()` bytes.
        unsafe {
            match stream {
                Some(s) => {
                    check(cudaMemcpyAsync(dev, buf.as_ptr().cast(), buf.len(), 1, s), "HtoD async");
                    check(cudaStreamSynchronize(s), "sync");
                }
                None => check(cudaMemcpy(dev, buf.as_ptr().cast(), buf.len(), 1), "HtoD"),
            }
        }
        n.htod += 1;
        buf.fill(0);
        // SAFETY: as above.
        unsafe {
            match stream {
                Some(s) => {
                    check(cudaMemcpyAsync(buf.as_mut_ptr().cast(), dev, buf.len(), 2, s), "DtoH async");
                    check(cudaStreamSynchronize(s), "sync");
                }
                None => check(cudaMemcpy(buf.as_mut_ptr().cast(), dev, buf.len(), 2), "DtoH"),
            }
        }
        n.dtoh += 1;
        h = fnv(buf, h);
    }
    h
}

#[inline(never)]
fn pinned_hot(len: usize, n: &mut Counts) -> &'static mut [u8] {
    let mut p = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    check(unsafe { cudaMallocHost(&mut p, len) }, "cudaMallocHost");
    n.alloc += 1;
    // SAFETY: `len` bytes of host memory just allocated, freed before the program ends.
    unsafe { std::slice::from_raw_parts_mut(p.cast(), len) }
}

#[inline(never)]
fn pinned_cold(len: usize, n: &mut Counts) -> &'static mut [u8] {
    let mut p = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    check(unsafe { cudaHostAlloc(&mut p, len, 0) }, "cudaHostAlloc");
    n.alloc += 1;
    // SAFETY: as above.
    unsafe { std::slice::from_raw_parts_mut(p.cast(), len) }
}

fn main() {
    let mut n = Counts { alloc: 0, free: 0, htod: 0, dtoh: 0 };
    let mut dev = std::ptr::null_mut();
    let mut stream = std::ptr::null_mut();
    // SAFETY: valid out-pointers.
    unsafe {
        check(cudaMalloc(&mut dev, 8 << 20), "cudaMalloc");
        check(cudaStreamCreate(&mut stream), "cudaStreamCreate");
    }
    for i in 0..3u8 {
        let buf = pinned_hot(2 << 20, &mut n);
        for (j, b) in buf.iter_mut().enumerate() {
            *b = (j as u8).wrapping_mul(7).wrapping_add(i);
        }
        let s = if i == 2 { Some(stream) } else { None };
        println!("pinned-hot[{i}] {:016x}", rounds(buf, dev, 10, s, &mut n));
        // SAFETY: allocated by cudaMallocHost, not used afterwards.
        check(unsafe { cudaFreeHost(buf.as_mut_ptr().cast()) }, "cudaFreeHost");
        n.free += 1;
    }
    for i in 0..2u8 {
        let buf = pinned_cold(2 << 20, &mut n);
        buf.fill(i + 40);
        println!("pinned-cold[{i}] {:016x}", rounds(buf, dev, 1, None, &mut n));
        // SAFETY: allocated by cudaHostAlloc, not used afterwards.
        check(unsafe { cudaFreeHost(buf.as_mut_ptr().cast()) }, "cudaFreeHost");
        n.free += 1;
    }
    for i in 0..2u8 {
        let mut v: Vec<u8> = (0..(8usize << 20)).map(|j| (j >> 5) as u8 ^ i).collect();
        println!("vec-hot[{i}] {:016x}", rounds(&mut v, dev, 8, None, &mut n));
    }
    let mut small = vec![3u8; 1000];
    println!("vec-small {:016x}", rounds(&mut small, dev, 4, Some(stream), &mut n));
    // SAFETY: handles created above, no longer used.
    unsafe {
        check(cudaStreamDestroy(stream), "cudaStreamDestroy");
        check(cudaFree(dev), "cudaFree");
    }
    eprintln!("calls: alloc={} free={} htod={} dtoh={}", n.alloc, n.free, n.htod, n.dtoh);
}
