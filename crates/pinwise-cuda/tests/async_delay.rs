//! Async copies on the CPU stand-in (TEST FIXTURE) really are asynchronous: with an
//! artificial delay per queued copy, the stream and event report "not ready", and a pinned
//! source reused before the copy completed shows up in the copied bytes, as on a GPU.
//!
//! Its own binary (process): the delay is process-wide.

mod common;

use common::standin;
use pinwise_cuda::{DeviceBuffer, Event, PinnedHostRegion, Stream};

#[test]
fn queued_copies_run_later_and_reuse_before_completion_is_visible() {
    let s = standin();
    let set_delay = s
        .driver
        .symbol_address("pinwise_standin_set_async_delay_us")
        .expect("the stand-in exports pinwise_standin_set_async_delay_us");
    // SAFETY: the symbol is `extern "C" fn(u64)` in the stand-in.
    let set_delay: extern "C" fn(u64) = unsafe { std::mem::transmute(set_delay) };
    set_delay(200_000);

    let n = 4096;
    let stream = Stream::new(&s.ctx).unwrap();
    let done = Event::new(&s.ctx).unwrap();
    let mut src = PinnedHostRegion::alloc_host(&s.ctx, n).unwrap();
    src.as_mut_slice().fill(1);
    let dev = DeviceBuffer::new(&s.ctx, n).unwrap();
    dev.fill(0).unwrap();
    // SAFETY: deliberately breaking the "unchanged until complete" rule below is what this
    // test shows; the memory itself stays valid throughout.
    unsafe { s.ctx.copy_htod_async(dev.ptr(), src.as_ptr(), n, &stream) }.unwrap();
    done.record(&stream).unwrap();
    assert!(!done.is_complete().unwrap(), "the copy is still queued");
    assert!(!stream.is_complete().unwrap());
    // Reuse the source before the copy ran: the device gets the new bytes.
    src.as_mut_slice().fill(2);
    done.synchronize().unwrap();
    assert!(done.is_complete().unwrap());
    let mut back = vec![0u8; n];
    dev.copy_to_host(&mut back).unwrap();
    assert!(
        back.iter().all(|&b| b == 2),
        "the copy read the reused buffer"
    );

    set_delay(0);
}
