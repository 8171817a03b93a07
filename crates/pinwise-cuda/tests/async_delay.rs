//! Async copies on the CPU stand-in (TEST FIXTURE) really are asynchronous: with an
//! artificial delay per queued copy, the stream and event report "not ready", a pinned
//! source reused before the copy completed shows up in the copied bytes, as on a GPU, and a
//! stream waiting for another's event really waits.
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

    // A stream that waits for an event recorded on another runs its copy only after the
    // other stream's delayed copy: without the wait, its own (undelayed) copy would read the
    // old device bytes. (The delay is taken when a copy is queued.)
    let other = Stream::new(&s.ctx).unwrap();
    src.as_mut_slice().fill(3);
    let out = PinnedHostRegion::alloc_host(&s.ctx, n).unwrap();
    // SAFETY: both pinned regions stay alive and untouched until `other` is synchronized.
    unsafe {
        s.ctx
            .copy_htod_async(dev.ptr(), src.as_ptr(), n, &stream)
            .unwrap();
        done.record(&stream).unwrap();
        set_delay(0);
        other.wait_event(&done).unwrap();
        s.ctx
            .copy_dtoh_async(out.as_mut_ptr(), dev.ptr(), n, &other)
            .unwrap();
    }
    other.synchronize().unwrap();
    assert!(
        out.as_slice().iter().all(|&b| b == 3),
        "the waiting stream saw the other stream's copy"
    );
}
