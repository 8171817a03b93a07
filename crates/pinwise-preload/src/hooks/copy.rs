//! Copies: describe (what the arguments say, [`crate::decode`]), decide (what pinwise
//! learns and promotes before the copy is issued, [`crate::pinning`]), forward, and record
//! the copy the driver accepted ([`crate::recorder`]). One way through: nothing below calls
//! back up.

use std::ffi::{c_uint, c_void};

use pinwise_alloc::StreamHandle;
use pinwise_core::{Direction, EventKind, HostState};
use pinwise_cuda::sys::{
    CUresult, CUDA_MEMCPY2D, CUDA_MEMCPY3D, CUDA_SUCCESS, CU_MEMORYTYPE_HOST,
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_STREAM_PER_THREAD,
};

use super::{driver_hooks_on, guarded};
use crate::backend::StreamCapture;
use crate::cycles;
use crate::decode::{self, HostCopy};
use crate::guard::{self, Timing};
use crate::pinning::{Pinning, PROMOTED_RANGES};
use crate::promote::COPY_GATE;
use crate::state::{self, State};
use crate::stats::HookStats;

/// Time the bookkeeping of one copy in this many after a thread's first
/// [`guard::EARLY_CALLS`] (alternately whole and by stages: see [`guard::timing_of`]).
const SAMPLE_EVERY: u32 = 8;

/// A copy entry point from `caller`; `describe` says what it copies (`None`: nothing that
/// involves host memory, or not decodable).
///
/// One copy in [`SAMPLE_EVERY`] times its bookkeeping with the CPU's counter
/// ([`crate::cycles`], read once on entry by every copy): from entry to the call forwarded
/// (thread state, describe, decide, the copy gate) plus from its return to the end of the
/// record; what the driver takes and the wait after an asynchronous copy on a registered
/// pageable buffer (the copy itself) are left out.
pub fn copy(
    caller: usize,
    describe: impl FnOnce(&State) -> Option<HostCopy>,
    forward: impl FnOnce() -> CUresult,
) -> CUresult {
    if !state::enabled() || !driver_hooks_on() {
        return forward();
    }
    let entry = cycles::now();
    let Some((site_addr, timing, weight)) = guard::copy_prologue(caller, SAMPLE_EVERY) else {
        return forward();
    };
    if crate::flush::ending() {
        crate::flush::pause_while_ending();
    }
    let Some(st) = state::get() else {
        return forward();
    };
    let mut described_at = 0;
    let mut pooled = None;
    let counter = cycles::CounterReadable::here();
    let noted = guarded(|| {
        describe(st).and_then(|c| {
            if st.config.fingerprint != pinwise_core::fingerprint::FingerprintMode::Off {
                // Pending asynchronous downloads this copy touches: hashed now if their
                // stream reached them, before this copy can change their bytes.
                crate::async_fp::settle(st, &c);
            }
            if crate::pool::touches(c.host, c.span) {
                pooled = Some(c);
                return None;
            }
            if timing == Timing::Stages {
                described_at = cycles::now();
            }
            Some((c, note(st, &c, true)))
        })
    })
    .flatten();
    // The program's mode back for its own copy.
    drop(counter);
    if let Some(c) = pooled {
        return pooled_copy(st, &c, site_addr, forward);
    }
    // A registration pinwise made for the program stays while the driver may use it: the
    // ceiling does not give it back until this returns (after the wait below).
    let _in_flight = noted
        .as_ref()
        .filter(|(_, n)| n.on_program_registration)
        .map(|(c, _)| COPY_GATE.enter(c.host, c.host.saturating_add(c.span.max(1))));
    let before = if timing != Timing::No && noted.is_some() {
        let t = cycles::now();
        if described_at != 0 {
            st.stats
                .stage_describe
                .add(described_at.saturating_sub(entry), weight);
            st.stats
                .stage_decide
                .add(t.saturating_sub(described_at), weight);
        }
        t.saturating_sub(entry)
    } else {
        0
    };
    let rc = forward();
    let Some((c, noted)) = noted else {
        return rc;
    };
    if rc != CUDA_SUCCESS {
        // The driver refused the copy: nothing moved, so nothing is recorded; the program
        // gets the driver's error.
        HookStats::bump(&st.stats.failed_copies);
        return rc;
    }
    let t1 = if timing != Timing::No {
        cycles::now()
    } else {
        0
    };
    {
        let _counter = cycles::CounterReadable::here();
        guarded(|| record_transfer(st, &c, &noted, site_addr, true));
    }
    match timing {
        Timing::No => {}
        Timing::Stages => st
            .stats
            .stage_record
            .add(cycles::now().saturating_sub(t1), weight),
        Timing::Total => {
            let record = cycles::now().saturating_sub(t1);
            st.stats.hook_sample(before.saturating_add(record), weight);
        }
    }
    if let Some(stream) = noted.finish_on {
        // The program's own pageable memory, registered by pinwise: as on pageable memory,
        // the copy is done when the call returns (the program may reuse the buffer at once).
        // Asked of the driver first (a capture the hooks did not count must not be
        // invalidated by a wait): a captured copy's registration is held instead.
        if let Some(p) = st.pinning() {
            match p.driver.capture_of(stream) {
                StreamCapture::None => {
                    let _ = p.driver.synchronize(stream);
                }
                _ => {
                    if let Some(i) = PROMOTED_RANGES.covering(c.host, c.span) {
                        PROMOTED_RANGES.hold(i);
                    }
                }
            }
        }
    }
    rc
}

/// A copy on a pool buffer (`pinwise run --pool`): done by the service, or forwarded to
/// this process's CUDA after a fallback ([`crate::pool::route`]); recorded either way when
/// it succeeded. Nothing is learned or promoted from it (the buffer is pinned already).
fn pooled_copy(
    st: &State,
    c: &HostCopy,
    site_addr: usize,
    forward: impl FnOnce() -> CUresult,
) -> CUresult {
    let route =
        guarded(|| crate::pool::route(st, c)).unwrap_or(crate::pool::Route::Here { pinned: false });
    let (rc, pinned) = match route {
        crate::pool::Route::Done => (CUDA_SUCCESS, true),
        crate::pool::Route::Here { pinned } => (forward(), pinned),
        // Freed meanwhile by another thread: the program's copy, as it stands.
        crate::pool::Route::NotPool => (forward(), false),
    };
    if rc != CUDA_SUCCESS {
        HookStats::bump(&st.stats.failed_copies);
        return rc;
    }
    let noted = Noted {
        host_state: if pinned {
            HostState::Pinned
        } else {
            HostState::Pageable
        },
        stream: c.stream.map(|s| {
            StreamHandle(if c.per_thread && s == 0 {
                CU_STREAM_PER_THREAD as u64
            } else {
                s as u64
            })
        }),
        finish_on: None,
        on_program_registration: false,
    };
    guarded(|| record_transfer(st, c, &noted, site_addr, true));
    rc
}

/// What the hooks learned about a copy before it was issued.
pub(super) struct Noted {
    /// The host side, pinned or pageable, as pinwise knows it.
    host_state: HostState,
    /// The copy's stream, the per-thread default stream made explicit.
    stream: Option<StreamHandle>,
    /// The stream to wait on after issuing the copy: an asynchronous copy on the program's
    /// own pageable memory that pinwise registered.
    finish_on: Option<usize>,
    /// The host side lies in memory pinwise registered for the program, or overlaps a
    /// registration of pinwise's being made or given back (the driver may still see it
    /// registered when the copy reaches it): the copy holds [`COPY_GATE`] from before it is
    /// issued until it is done, so no registration is given back under it (and one being
    /// given back now is finished first). Left open: a registration both made and given
    /// back by other threads while this copy runs.
    on_program_registration: bool,
}

/// Learns from a copy before it is issued (promoting what turned hot). `learn: false`
/// only describes it (a copy that already happened: it must not register anything, since
/// no hook would wait for a later asynchronous copy on it).
pub(super) fn note(st: &State, c: &HostCopy, learn: bool) -> Noted {
    let stream = c.stream.map(|s| {
        StreamHandle(if c.per_thread && s == 0 {
            CU_STREAM_PER_THREAD as u64
        } else {
            s as u64
        })
    });
    let (host_state, program_registered) = match (c.host, c.direction) {
        (0, _) | (_, Direction::DtoD) => (HostState::Unknown, false),
        _ if !learn => (HostState::Unknown, false),
        _ => match st.pinning_or_start() {
            // On a stream being captured into a graph, the copy runs on every replay, not
            // now: waiting for the stream (or recording a pool event on it) would
            // invalidate the capture, and what it moves says nothing about this moment.
            Some(p) if stream.is_some_and(|s| !not_captured(st, p, s)) => (
                p.note_captured_copy(c.host, c.span, &st.stats, &st.recorder),
                false,
            ),
            Some(p) => p.note_copy(
                c.host,
                c.bytes,
                c.span,
                c.direction,
                stream,
                &st.stats,
                &st.recorder,
            ),
            None => (HostState::Unknown, false),
        },
    };
    let finish_on = match stream {
        Some(s) if program_registered => Some(s.0 as usize),
        _ => None,
    };
    let gate = program_registered
        || (c.host != 0 && PROMOTED_RANGES.busy_overlapping(c.host, c.span.max(1)));
    Noted {
        host_state,
        stream,
        finish_on,
        on_program_registration: gate,
    }
}

/// Records a copy the driver accepted, timestamped when it returned. `settled`: its hook
/// called [`crate::async_fp::settle`] before issuing it.
pub(super) fn record_transfer(
    st: &State,
    c: &HostCopy,
    noted: &Noted,
    site_addr: usize,
    settled: bool,
) {
    let fingerprint = crate::fingerprint::of_copy(st, c);
    if st.config.fingerprint != pinwise_core::fingerprint::FingerprintMode::Off {
        // An asynchronous download whose ranges this copy touches gets no fingerprint,
        // unless it was settled before the copy was issued.
        crate::async_fp::touch(st, c, settled);
    }
    let stamp = st.recorder.stamp();
    if crate::fingerprint::is_async_download(st, c) {
        crate::async_fp::start(st, c, noted.stream, stamp.ts);
    }
    st.recorder.record_fingerprinted(
        stamp,
        EventKind::Transfer {
            direction: c.direction,
            host: c.host as u64,
            device: c.device,
            bytes: c.bytes as u64,
            is_async: c.stream.is_some(),
            stream: noted.stream.map_or(0, |s| s.0),
            host_state: noted.host_state,
        },
        fingerprint,
        site_addr,
    );
}

/// Whether an asynchronous copy's stream is certainly not being captured into a CUDA graph
/// (one `cuStreamIsCapturing`). A capturing stream is counted in the statistics; one the
/// driver would not answer about (the legacy stream while a blocking stream captures) is
/// left alone as well, uncounted.
fn not_captured(st: &State, p: &Pinning, stream: StreamHandle) -> bool {
    if crate::capture::none_open() {
        return true;
    }
    match p.driver.capture_of(stream.0 as usize) {
        StreamCapture::None => true,
        StreamCapture::Capturing => {
            HookStats::bump(&st.stats.captured_copies);
            false
        }
        StreamCapture::Unknown => false,
    }
}

/// Host or device, as the driver says (pageable memory the driver does not know is host).
pub(super) fn is_host(st: &State, ptr: u64) -> Option<bool> {
    let p = st.pinning_or_start()?;
    let mut t: c_uint = 0;
    let _inside = guard::Inside::enter();
    // SAFETY: a valid out-parameter of the attribute's type (CUmemorytype).
    let rc = unsafe {
        (p.driver.pointer_get_attribute)(
            &mut t as *mut c_uint as *mut c_void,
            CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            ptr,
        )
    };
    Some(rc != CUDA_SUCCESS || t == CU_MEMORYTYPE_HOST)
}

/// A unified copy (`cuMemcpy`, `cudaMemcpyDefault`): the runtime copy in progress, or
/// else the driver, tells each side.
pub fn unified(
    st: &State,
    dst: u64,
    src: u64,
    bytes: usize,
    stream: Option<usize>,
    per_thread: bool,
) -> Option<HostCopy> {
    let kind = guard::runtime_copy_kind();
    decode::unified(dst, src, bytes, stream, per_thread, kind, |p| {
        is_host(st, p)
    })
}

/// A 2D copy from its descriptor.
///
/// # Safety
/// `p` is NULL or points to a valid descriptor (CUDA's contract).
pub unsafe fn copy_2d(
    st: &State,
    p: *const CUDA_MEMCPY2D,
    stream: Option<usize>,
    per_thread: bool,
) -> Option<HostCopy> {
    // SAFETY: the caller's contract.
    let d = unsafe { p.as_ref()? };
    decode::copy_2d(d, stream, per_thread, |p| is_host(st, p))
}

/// A 3D copy from its descriptor.
///
/// # Safety
/// `p` is NULL or points to a valid descriptor (CUDA's contract).
pub unsafe fn copy_3d(
    st: &State,
    p: *const CUDA_MEMCPY3D,
    stream: Option<usize>,
    per_thread: bool,
) -> Option<HostCopy> {
    // SAFETY: the caller's contract.
    let d = unsafe { p.as_ref()? };
    decode::copy_3d(d, stream, per_thread, |p| is_host(st, p))
}
