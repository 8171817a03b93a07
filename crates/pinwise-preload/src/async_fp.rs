//! Fingerprints of asynchronous downloads (`cuMemcpyDtoHAsync`, `cudaMemcpyAsync` device to
//! host): their bytes reach the host buffer only when the stream gets to the copy, after
//! the call returned. The program is never made to wait:
//!
//! 1. the copy hook records a CUDA event on the copy's stream right after the copy
//!    ([`start`]; `cuEventCreate` + `cuEventRecord`, no wait), and keeps the copy pending;
//! 2. the drain thread asks each pending event whether the stream has reached it
//!    (`cuEventQuery`, which does not block: [`poll`], every 10 ms) and, once it has, hashes
//!    the host range as a synchronous download's is hashed (sampled lines, and every byte in
//!    full mode or for the check share);
//! 3. the next drain gives the fingerprint to the history ([`apply`], once the copy's own
//!    transfer event is in it), which compares it as if the copy had carried it.
//!
//! **The race, and how it is kept conservative.** Between the copy's completion and the
//! hash (up to about 10 ms, the drain thread's period) the program may write the host
//! buffer (it usually synchronizes, then reads or reuses it): the hash is then of what the
//! program wrote, not of what was downloaded. And the history must compare the copies that
//! touch the same ranges in their order. So a pending (or hashed but not yet applied)
//! download whose host range or device range is touched by a later copy, of any direction,
//! before it is applied gets no fingerprint: it is counted as skipped (unknown), never
//! compared. A CPU write to the buffer without a copy is not seen: that is the remaining,
//! documented, race (a download could then be called a repeat of the previous one wrongly
//! only if the program wrote exactly the bytes the previous download brought).
//!
//! Also skipped (counted): a stream being captured into a graph (an event recorded there
//! would become part of the graph), an event that cannot be created or recorded, more than
//! [`MAX_PENDING`] downloads in flight, copies whose stream had not reached them when the
//! outputs were written at exit or when their context ended (released, reset or destroyed:
//! their events are destroyed first, never queried dead), and ones whose host memory was
//! freed before the hash.
//! One event is created per download and destroyed once it completed.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;
use pinwise_alloc::backend::{EventHandle, PinBackend, StreamHandle};
use pinwise_core::fingerprint::Fingerprint;
use pinwise_core::{Direction, MemHistory};

use crate::backend::PreloadBackend;
use crate::decode::HostCopy;
use crate::pinning::Pinning;
use crate::state::State;

/// Most asynchronous downloads waiting for their stream at once (more are skipped).
pub const MAX_PENDING: usize = 1024;

/// One asynchronous download waiting for its stream, or hashed and waiting for the history.
#[derive(Debug)]
struct Pending {
    /// Tells it apart while the drain thread hashes it without the lock.
    id: u64,
    event: Option<EventHandle>,
    host: u64,
    device: u64,
    bytes: u64,
    /// Its transfer event's timestamp.
    ts: u64,
    pid: u32,
    /// The fingerprint, once the stream reached the copy and the bytes were hashed.
    fingerprint: Option<Fingerprint>,
}

impl Pending {
    fn overlaps(&self, host: u64, host_len: u64, device: u64, device_len: u64) -> bool {
        let meet = |a: u64, al: u64, b: u64, bl: u64| {
            a != 0 && b != 0 && a < b.saturating_add(bl.max(1)) && b < a.saturating_add(al.max(1))
        };
        meet(self.host, self.bytes, host, host_len)
            || meet(self.device, self.bytes, device, device_len)
    }
}

static PENDING: Mutex<Vec<Pending>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// `PENDING`'s lock was held by another thread when this process was forked from its
/// parent: asynchronous downloads are not fingerprinted here (counted unknown).
static STUCK: AtomicBool = AtomicBool::new(false);
/// The timestamp of the last event the history ingested (see [`note_ingested`]).
static INGESTED: AtomicU64 = AtomicU64::new(0);
/// How many entries `PENDING` holds (read without the lock on every copy).
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// Asynchronous downloads fingerprinted (given to the history).
static FINGERPRINTED: AtomicU64 = AtomicU64::new(0);
/// Asynchronous downloads that got no fingerprint (see the module documentation).
static UNKNOWN: AtomicU64 = AtomicU64::new(0);

/// Asynchronous downloads given to the history with a fingerprint, and those left unknown.
pub fn counts() -> (u64, u64) {
    (
        FINGERPRINTED.load(Ordering::Relaxed),
        UNKNOWN.load(Ordering::Relaxed),
    )
}

fn unknown(backend: Option<&PreloadBackend>, p: Pending) {
    UNKNOWN.fetch_add(1, Ordering::Relaxed);
    if let (Some(b), Some(e)) = (backend, p.event) {
        b.destroy_event(e);
    }
}

/// Called by the copy hook for every copy it records (with fingerprints on), before the copy
/// itself is started as pending: a pending download whose host or device range the copy
/// touches becomes unknown.
pub fn touch(st: &State, c: &HostCopy) {
    if COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    let mut v = PENDING.lock();
    let mut i = 0;
    while i < v.len() {
        if v[i].overlaps(c.host as u64, c.span as u64, c.device, c.bytes as u64) {
            let p = v.swap_remove(i);
            let backend = st.pinning().map(|pin| PreloadBackend::new(pin.driver));
            unknown(backend.as_ref(), p);
        } else {
            i += 1;
        }
    }
    COUNT.store(v.len(), Ordering::Release);
}

/// Starts fingerprinting asynchronous download `c` (issued on `stream`; its transfer event
/// stamped `ts`): records an event after it. `false` when it could not (counted unknown).
pub fn start(st: &State, c: &HostCopy, stream: Option<StreamHandle>, ts: u64) -> bool {
    let ok = (|| {
        let stream = stream?;
        if STUCK.load(Ordering::Acquire) {
            return None;
        }
        let pin = st.pinning_or_start()?;
        if COUNT.load(Ordering::Acquire) >= MAX_PENDING {
            return None;
        }
        let backend = PreloadBackend::new(pin.driver);
        let event = backend.create_event().ok()?;
        if backend.record_event(event, stream).is_err() {
            backend.destroy_event(event);
            return None;
        }
        let mut v = PENDING.lock();
        v.push(Pending {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            event: Some(event),
            host: c.host as u64,
            device: c.device,
            bytes: c.bytes as u64,
            ts,
            pid: std::process::id(),
            fingerprint: None,
        });
        COUNT.store(v.len(), Ordering::Release);
        Some(())
    })();
    if ok.is_none() {
        UNKNOWN.fetch_add(1, Ordering::Relaxed);
    }
    ok.is_some()
}

/// On the drain thread: hashes the host bytes of every pending download whose stream has
/// reached it (never waits; the hash runs without the lock that copy hooks take).
/// `last` (at exit): those whose stream has not are given up.
pub fn poll(st: &State, last: bool) {
    if COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    let Some(pin) = st.pinning() else {
        return;
    };
    let backend = PreloadBackend::new(pin.driver);
    // (id, host, device, bytes) of the downloads whose stream reached them.
    let mut reached = Vec::new();
    {
        let mut v = PENDING.lock();
        let mut i = 0;
        while i < v.len() {
            let Some(event) = v[i].event else {
                i += 1;
                continue;
            };
            match backend.event_completed(event) {
                Ok(true) => {
                    backend.destroy_event(event);
                    let p = &mut v[i];
                    p.event = None;
                    reached.push((p.id, p.host, p.device, p.bytes));
                    i += 1;
                }
                Ok(false) if !last => i += 1,
                _ => {
                    let p = v.swap_remove(i);
                    unknown(Some(&backend), p);
                }
            }
        }
        COUNT.store(v.len(), Ordering::Release);
    }
    for (id, host, device, bytes) in reached {
        let fp = crate::fingerprint::of_host(st, host as usize, device, bytes as usize);
        let mut v = PENDING.lock();
        // Gone: a copy touched it meanwhile (counted there).
        let Some(i) = v.iter().position(|p| p.id == id) else {
            continue;
        };
        match fp {
            Some(fp) => v[i].fingerprint = Some(fp),
            None => {
                // Not hashed: `of_host` counted it as skipped already (counting it as
                // unknown too would count it twice in the fingerprint statistics).
                v.swap_remove(i);
            }
        }
        COUNT.store(v.len(), Ordering::Release);
    }
}

/// A context is ending (released, reset or destroyed), and the events made in it with it:
/// every download still waiting for its stream is given up (unknown) and its event
/// destroyed first, so that no dead handle is ever queried. Waits for a [`poll`] in
/// progress to finish its queries (the lock), never for a stream.
pub fn forget_pending_events(pin: &Pinning) {
    if COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    let backend = PreloadBackend::new(pin.driver);
    let mut v = PENDING.lock();
    let mut i = 0;
    while i < v.len() {
        if v[i].event.is_some() {
            let p = v.swap_remove(i);
            unknown(Some(&backend), p);
        } else {
            i += 1;
        }
    }
    COUNT.store(v.len(), Ordering::Release);
}

/// In a forked child: the parent's pending downloads (and their events, which mean nothing
/// here) are forgotten without a CUDA call.
pub fn forget_in_child() {
    match PENDING.try_lock() {
        Some(mut v) => v.clear(),
        // A parent thread held the lock at the fork: it stays locked here, so it is never
        // taken again in this process.
        None => STUCK.store(true, Ordering::Release),
    }
    COUNT.store(0, Ordering::Release);
}

/// The drain tells that the history ingested every event up to timestamp `ts`.
pub fn note_ingested(ts: u64) {
    INGESTED.fetch_max(ts, Ordering::Release);
}

/// Whether [`apply`] has something to give the history.
pub fn any_ready() -> bool {
    if COUNT.load(Ordering::Acquire) == 0 {
        return false;
    }
    let ingested = INGESTED.load(Ordering::Acquire);
    PENDING
        .lock()
        .iter()
        .any(|p| p.fingerprint.is_some() && p.ts <= ingested)
}

/// Gives the history `h` the fingerprints of the hashed downloads whose own transfer event
/// it has ingested (see [`note_ingested`]).
pub fn apply(h: &mut MemHistory) {
    if COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    let ingested = INGESTED.load(Ordering::Acquire);
    let mut v = PENDING.lock();
    let mut i = 0;
    while i < v.len() {
        let ready = v[i].fingerprint.is_some() && v[i].ts <= ingested;
        if !ready {
            i += 1;
            continue;
        }
        let p = v.swap_remove(i);
        let fp = p.fingerprint.expect("checked above");
        if h.observe_late_fingerprint(p.pid, p.host, p.device, p.bytes, Direction::DtoH, p.ts, fp) {
            FINGERPRINTED.fetch_add(1, Ordering::Relaxed);
        } else {
            UNKNOWN.fetch_add(1, Ordering::Relaxed);
        }
    }
    COUNT.store(v.len(), Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(host: u64, device: u64, bytes: u64) -> Pending {
        Pending {
            id: 1,
            event: None,
            host,
            device,
            bytes,
            ts: 0,
            pid: 1,
            fingerprint: None,
        }
    }

    #[test]
    fn a_copy_touches_a_download_when_either_range_overlaps() {
        let p = pending(0x1000, 0xd000, 0x100);
        // Host overlap, at both ends.
        assert!(p.overlaps(0x10ff, 1, 0, 0));
        assert!(p.overlaps(0x0f00, 0x101, 0, 0));
        assert!(!p.overlaps(0x1100, 0x10, 0, 0));
        assert!(!p.overlaps(0x0f00, 0x100, 0, 0));
        // Device overlap (a device-to-device copy has no host side).
        assert!(p.overlaps(0, 0, 0xd080, 0x10));
        assert!(!p.overlaps(0, 0, 0xd100, 0x10));
        // Neither.
        assert!(!p.overlaps(0x5000, 0x100, 0xe000, 0x100));
    }
}
