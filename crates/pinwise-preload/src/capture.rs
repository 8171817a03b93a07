//! Stream captures open now, counted at the capture hooks (`cuStreamBeginCapture*`,
//! `cuStreamEndCapture`, every variant, however the program found them). An asynchronous
//! copy's hook must know whether its stream is being captured into a CUDA graph (then it
//! learns nothing, registers nothing, waits for nothing). Asking the driver
//! (`cuStreamIsCapturing`) costs about 2 µs per copy on an H100 (measured in the hook's
//! `decide` stage, 2026-11-24); while no capture is open anywhere in the process, the
//! answer is known without asking.
//!
//! The count errs on the side of asking: it goes up before a begin is forwarded (a copy on
//! that stream from another thread, issued while the begin runs, then asks the driver) and
//! down only after an end returned (with success, or with the capture invalidated: either
//! way the stream no longer captures). A begin the hooks never saw would make the count
//! wrong; the hook that waits for a stream checks with the driver before waiting, so even
//! then no capture is invalidated by pinwise.

use std::sync::atomic::{AtomicUsize, Ordering};

use pinwise_cuda::sys::{CUresult, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, CUDA_SUCCESS};

/// Captures begun and not yet ended.
static OPEN: AtomicUsize = AtomicUsize::new(0);

/// Whether no stream of the process is being captured now (as the hooks counted).
#[inline]
pub fn none_open() -> bool {
    OPEN.load(Ordering::Acquire) == 0
}

/// A capture begin: counted before it is forwarded, uncounted if the driver refused it.
pub fn begin(forward: impl FnOnce() -> CUresult) -> CUresult {
    OPEN.fetch_add(1, Ordering::AcqRel);
    let rc = forward();
    if rc != CUDA_SUCCESS {
        close_one();
    }
    rc
}

/// A capture end: uncounted once the stream stopped capturing.
pub fn end(forward: impl FnOnce() -> CUresult) -> CUresult {
    let rc = forward();
    if ended(rc) {
        close_one();
    }
    rc
}

/// Whether an end call that returned `rc` ended a capture.
fn ended(rc: CUresult) -> bool {
    rc == CUDA_SUCCESS || rc == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
}

fn close_one() {
    let _ = OPEN.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
}

/// Forgets every capture (a forked child: the parent's captures are not its own).
pub fn forget_all() {
    OPEN.store(0, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinwise_cuda::sys::CUDA_ERROR_INVALID_VALUE;

    // One test: the count is process-wide.
    #[test]
    fn the_count_follows_begins_and_ends_and_errs_on_the_side_of_asking() {
        forget_all();
        assert!(none_open());
        // A copy issued while a begin runs sees the capture as open.
        let rc = begin(|| {
            assert!(!none_open(), "open while the begin is forwarded");
            CUDA_SUCCESS
        });
        assert_eq!(rc, CUDA_SUCCESS);
        assert!(!none_open());
        // A refused begin is not counted.
        assert_eq!(begin(|| CUDA_ERROR_INVALID_VALUE), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(OPEN.load(Ordering::Acquire), 1);
        // An end refused (the stream was not capturing) leaves the count.
        assert_eq!(end(|| CUDA_ERROR_INVALID_VALUE), CUDA_ERROR_INVALID_VALUE);
        assert!(!none_open());
        // Open while the end runs; closed after an invalidated capture's end.
        end(|| {
            assert!(!none_open(), "open while the end is forwarded");
            CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
        });
        assert!(none_open());
        // Never below zero.
        end(|| CUDA_SUCCESS);
        assert!(none_open());
        begin(|| CUDA_SUCCESS);
        assert!(!none_open());
        forget_all();
        assert!(none_open());
    }
}
