//! Streams and contexts ending: pinwise lets go of the handles it holds first.

use std::sync::atomic::{AtomicUsize, Ordering};

use pinwise_alloc::StreamHandle;
use pinwise_cuda::sys::{CUresult, CU_STREAM_PER_THREAD};

use super::guarded;
use crate::guard;
use crate::pinning::Pinning;
use crate::state;
use crate::stats::HookStats;

/// The pinwise state whose allocator may hold stream or event handles, when pinwise's own
/// code is not the caller. Never creates the state (nothing to forget then).
fn holding_handles() -> Option<&'static Pinning> {
    if !state::enabled() || guard::inside() {
        return None;
    }
    state::current()?.pinning()
}

/// `cuStreamDestroy(_v2)`: the handle dangles once the driver destroyed the stream, and the
/// real driver may crash when it is passed again. pinwise remembers the streams allocations
/// were copied on asynchronously (to make a freed block wait for those copies), so it lets go
/// of this one first: waits for its work if an allocation still holds it, and forgets it.
pub fn stream_destroy(stream: usize, forward: impl FnOnce() -> CUresult) -> CUresult {
    if let Some(p) = holding_handles() {
        let stream = StreamHandle(stream as u64);
        if guarded(|| p.engine.forget_stream(stream)) == Some(true) {
            if let Some(st) = state::current() {
                HookStats::bump(&st.stats.streams_forgotten);
            }
        }
    }
    forward()
}

/// `cuDevicePrimaryCtxRelease(_v2)`, `cuDevicePrimaryCtxReset(_v2)`, `cuCtxDestroy(_v2)`
/// (`destroyed`: that context, when the call names one): the context may end, and every
/// stream and event made in it with it. pinwise waits for the copies it tracks and drops its
/// stream and event handles first (a later free must not pass a dead handle to the driver),
/// and forgets a destroyed context it would otherwise make current for its own calls.
pub fn context_ending(destroyed: usize, forward: impl FnOnce() -> CUresult) -> CUresult {
    /// Lowers the count again, even if the work below unwinds.
    struct Ending;
    impl Drop for Ending {
        fn drop(&mut self) {
            CONTEXTS_ENDING.fetch_sub(1, Ordering::AcqRel);
        }
    }
    CONTEXTS_ENDING.fetch_add(1, Ordering::AcqRel);
    let _ending = Ending;
    end_context(destroyed, forward)
}

/// Context releases and destructions in progress (see [`super::host_alloc`]).
static CONTEXTS_ENDING: AtomicUsize = AtomicUsize::new(0);

fn end_context(destroyed: usize, forward: impl FnOnce() -> CUresult) -> CUresult {
    if let Some(p) = holding_handles() {
        guarded(|| {
            // Asynchronous downloads waiting to be fingerprinted hold events.
            crate::async_fp::forget_pending_events(p);
            p.engine
                .forget_context_objects(|s| s.0 <= CU_STREAM_PER_THREAD as u64);
            // The pool's pinned memory ends with the context: hand none of it out again.
            // (Suspected cause of the SIGSEGVs exit_race's teardown variant had on an H100
            // under pinwise: pool blocks served after the primary context's release.)
            p.engine.retire_pool();
            if destroyed != 0 {
                p.driver.forget_context(destroyed);
            }
        });
        if let Some(st) = state::current() {
            HookStats::bump(&st.stats.contexts_ended);
        }
    }
    forward()
}

/// Whether a context release or destruction is in progress (pinned requests then go to
/// CUDA, see [`super::host_alloc`]).
pub(super) fn contexts_ending() -> bool {
    CONTEXTS_ENDING.load(Ordering::Acquire) > 0
}
