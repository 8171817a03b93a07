//! Pageable buffers of a Rust program (the system allocator: malloc, calloc,
//! posix_memalign, realloc and free underneath) from several functions, each dropped and
//! made again in turn, copied through the cudart stand-in (a TEST FIXTURE). Built at test
//! time with `rustc`. stdout: a checksum; stderr: the calls.
use std::alloc::{alloc, dealloc, Layout};
use std::ffi::{c_int, c_void};

#[link(name = "cudart")]
extern "C" {
    fn cudaMalloc(p: *mut *mut c_void, n: usize) -> c_int;
    fn cudaFree(p: *mut c_void) -> c_int;
    fn cudaMemcpy(dst: *mut c_void, src: *const c_void, n: usize, kind: c_int) -> c_int;
}

fn check(rc: c_int, what: &str) {
    if rc != 0 {
        eprintln!("{what} failed: {rc}");
        std::process::exit(2);
    }
}

struct Device {
    ptr: *mut c_void,
    htod: u64,
    dtoh: u64,
    sum: u64,
}

impl Device {
    fn upload(&mut self, buf: &[u8]) {
        // SAFETY: a device buffer of 4 MiB, a host buffer of buf.len() <= 4 MiB bytes.
        check(unsafe { cudaMemcpy(self.ptr, buf.as_ptr().cast(), buf.len(), 1) }, "HtoD");
        self.htod += 1;
    }
    fn download(&mut self, buf: &mut [u8]) {
        // SAFETY: as above.
        check(unsafe { cudaMemcpy(buf.as_mut_ptr().cast(), self.ptr, buf.len(), 2) }, "DtoH");
        self.dtoh += 1;
        self.sum = self.sum.wrapping_mul(31).wrapping_add(buf[buf.len() / 2] as u64);
    }
}

/// `vec![0; n]`: the allocator's zeroed allocation (calloc).
#[inline(never)]
fn make_input(n: usize, seed: u8) -> Vec<u8> {
    let mut v = vec![0u8; n];
    for i in (0..n).step_by(4096) {
        v[i] = seed.wrapping_add((i / 4096) as u8);
    }
    v
}

/// `Vec::with_capacity`: malloc.
#[inline(never)]
fn make_output(n: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(n);
    v.resize(n, 1u8);
    v
}

/// An over-aligned block: posix_memalign.
#[inline(never)]
fn make_aligned(n: usize) -> (*mut u8, Layout) {
    let layout = Layout::from_size_align(n, 4096).unwrap();
    // SAFETY: a non-zero size.
    let p = unsafe { alloc(layout) };
    assert!(!p.is_null());
    (p, layout)
}

fn main() {
    let mut dev = Device { ptr: std::ptr::null_mut(), htod: 0, dtoh: 0, sum: 0 };
    // SAFETY: an out-pointer.
    check(unsafe { cudaMalloc(&mut dev.ptr, 4 << 20) }, "cudaMalloc");
    let (mut inputs, mut outputs, mut aligned) = (0u64, 0u64, 0u64);
    for round in 0..4u8 {
        let input = make_input(2 << 20, round);
        inputs += 1;
        dev.upload(&input);
        dev.upload(&input[..1 << 20]);
        drop(input);
        let mut output = make_output(256 << 10);
        outputs += 1;
        dev.download(&mut output);
        drop(output);
    }
    for _ in 0..2 {
        let (p, layout) = make_aligned(1 << 20);
        aligned += 1;
        // SAFETY: `p` holds `layout.size()` bytes.
        let buf = unsafe { std::slice::from_raw_parts_mut(p, layout.size()) };
        buf.fill(3);
        dev.upload(buf);
        dev.download(buf);
        // SAFETY: allocated above with this layout.
        unsafe { dealloc(p, layout) };
    }
    // SAFETY: allocated by cudaMalloc.
    check(unsafe { cudaFree(dev.ptr) }, "cudaFree");
    println!("sum {}", dev.sum);
    eprintln!(
        "calls: inputs={inputs} outputs={outputs} aligned={aligned} htod={} dtoh={}",
        dev.htod, dev.dtoh
    );
}
