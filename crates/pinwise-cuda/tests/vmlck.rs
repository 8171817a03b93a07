//! Pinning on the CPU stand-in (TEST FIXTURE) is real: registered and CUDA-allocated host
//! memory is locked with mlock, visible in `VmLck` of /proc/self/status.
//!
//! One test in its own binary (its own process), so no other test changes `VmLck` while it
//! measures.

mod common;

use common::standin;
use pinwise_cuda::{HostRegistration, PinnedHostRegion};
use pinwise_testkit::locked_memory_bytes;

const MIB: usize = 1 << 20;

/// Page-aligned memory from the allocator (so the registered range is exactly whole pages).
fn page_aligned(len: usize) -> (Vec<u8>, usize) {
    let v = vec![1u8; len + 4096];
    let offset = v.as_ptr().align_offset(4096);
    (v, offset)
}

#[test]
fn registration_and_pinned_allocation_lock_pages_and_give_them_back() {
    if !pinwise_testkit::require_locked_memory(
        "registration_and_pinned_allocation_lock_pages_and_give_them_back",
        12 << 20,
    ) {
        return;
    }
    let s = standin();
    let base = locked_memory_bytes();

    let len = 8 * MIB;
    let (mut memory, offset) = page_aligned(len);
    let reg = HostRegistration::new(&s.ctx, &mut memory[offset..offset + len], 0).unwrap();
    assert_eq!(
        locked_memory_bytes(),
        base + len as u64,
        "VmLck grows by the registered size"
    );
    reg.unregister().unwrap();
    assert_eq!(
        locked_memory_bytes(),
        base,
        "VmLck returns after unregistering"
    );

    let pinned = PinnedHostRegion::alloc_host(&s.ctx, 4 * MIB).unwrap();
    assert_eq!(locked_memory_bytes(), base + 4 * MIB as u64);
    drop(pinned);
    assert_eq!(
        locked_memory_bytes(),
        base,
        "VmLck returns after cuMemFreeHost"
    );

    // Two registrations sharing a page: unregistering one keeps the shared page locked.
    let (mut memory, offset) = page_aligned(2 * 4096);
    let (left, right) = memory[offset..offset + 2 * 4096].split_at_mut(4096 + 100);
    let a = HostRegistration::new(&s.ctx, left, 0).unwrap();
    let b = HostRegistration::new(&s.ctx, right, 0).unwrap();
    assert_eq!(locked_memory_bytes(), base + 2 * 4096);
    drop(a);
    assert_eq!(
        locked_memory_bytes(),
        base + 4096,
        "the shared page stays locked for b"
    );
    drop(b);
    assert_eq!(locked_memory_bytes(), base);
}
