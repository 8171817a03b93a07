//! A registration in place covers the bytes the live buffer's copies touch, never the span
//! an earlier, larger buffer at the same address had: that memory is no longer the
//! program's buffer, and the allocator may return it to the system without a `free` or
//! `munmap` pinwise would see (glibc trimming the heap, jemalloc/tcmalloc purging with
//! `madvise`), leaving a registration over pages that are no longer there.

mod common;

use common::*;
use pinwise_core::history::Recorded;

#[test]
fn a_registration_covers_the_live_buffer_not_an_earlier_one_at_its_address() {
    let s = Setup::new();
    let exe = s.build_cudart("reused_address.c", &[]);
    let plain = s.run_plain(&exe, &[]);
    assert_ok(&plain, "plain run");
    assert!(
        String::from_utf8_lossy(&plain.stdout).starts_with("same address 1 "),
        "the small buffer reuses the large one's address: {}",
        String::from_utf8_lossy(&plain.stdout)
    );
    let small = calls(&plain)["small"];
    let run = s.run_recorded(&exe, &[], "reused.bin");
    assert_same_stdout(&run.out, &plain, "adaptive");
    let pinned: Vec<u64> = run
        .history
        .allocations()
        .flat_map(|a| a.events().collect::<Vec<_>>())
        .filter_map(|e| match e.what {
            Recorded::PinPages { bytes, .. } => Some(bytes),
            _ => None,
        })
        .collect();
    assert!(!pinned.is_empty(), "the hot small buffer was registered");
    assert!(
        pinned.iter().all(|&b| b <= small),
        "registered {pinned:?} bytes for a live buffer of {small}"
    );
}
