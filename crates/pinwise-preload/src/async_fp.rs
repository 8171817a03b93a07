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
//! touch the same ranges in their order. So when a later copy, of any direction, touches a
//! pending download's host or device range, its hook first settles the download, before the
//! copy is issued ([`settle`]): one whose bytes are hashed already keeps its fingerprint;
//! one whose event says it completed (`cuEventQuery`, which does not block) is hashed there
//! and then, on the copying thread (a fast loop that downloads into the same buffer again
//! right after each synchronization gets every download fingerprinted); one still in
//! flight gets no fingerprint: it is counted as skipped (unknown), never compared. After the
//! copy ([`touch`]), a download touched by it whose fingerprint was not settled before it
//! was issued is unknown as well (its hash may have read the copy's bytes). The history
//! takes a settled fingerprint before any later event ([`apply_before`]), so it compares
//! the copies in their order. A CPU write to the buffer without a copy is not seen: that is
//! the remaining, documented, race (a download could then be called a repeat of the
//! previous one wrongly only if the program wrote exactly the bytes the previous download
//! brought).
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
    /// Its transfer event's stamp (the order of events: [`crate::stamp`]).
    ts: u64,
    /// Its transfer event's time in the history, ns, once the history ingested it
    /// ([`ingested`]).
    ts_ns: Option<u64>,
    pid: u32,
    /// The fingerprint, once the stream reached the copy and the bytes were hashed.
    fingerprint: Option<Fingerprint>,
    /// The fingerprint was taken before a copy touching this download was issued (by
    /// [`settle`], or found there): such a copy leaves it alone.
    settled: bool,
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
/// The stamp of the last event the history ingested (see [`note_ingested`]).
static INGESTED: AtomicU64 = AtomicU64::new(0);
/// How many entries `PENDING` holds (read without the lock on every copy).
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// At most the smallest stamp of a hashed entry (`u64::MAX`: none), read without the
/// lock for every event the history ingests ([`apply_before`]).
static MIN_HASHED_TS: AtomicU64 = AtomicU64::new(u64::MAX);
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

/// Called by a copy hook (with fingerprints on) before it issues copy `c`: every pending
/// download whose host or device range `c` touches is settled now. One hashed already is
/// kept; one whose event says the stream reached it is hashed here; one still in flight (or
/// whose event cannot be asked) becomes unknown, since `c` may change its bytes before they
/// are read. Never waits for a stream.
pub fn settle(st: &State, c: &HostCopy) {
    if COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    let touches = |p: &Pending| p.overlaps(c.host as u64, c.span as u64, c.device, c.bytes as u64);
    // (id, host, device, bytes) of the downloads to hash here.
    let mut to_hash = Vec::new();
    {
        let backend = st.pinning().map(|pin| PreloadBackend::new(pin.driver));
        let mut v = PENDING.lock();
        let mut i = 0;
        while i < v.len() {
            if !touches(&v[i]) {
                i += 1;
                continue;
            }
            let reached = match (v[i].fingerprint.is_some(), v[i].event, backend.as_ref()) {
                (true, ..) => {
                    v[i].settled = true;
                    i += 1;
                    continue;
                }
                // The drain thread saw it complete and is hashing it now.
                (false, None, _) => true,
                (false, Some(event), Some(b)) => match b.event_completed(event) {
                    Ok(true) => {
                        b.destroy_event(event);
                        v[i].event = None;
                        true
                    }
                    _ => false,
                },
                (false, Some(_), None) => false,
            };
            if reached {
                let p = &v[i];
                to_hash.push((p.id, p.host, p.device, p.bytes));
                i += 1;
            } else {
                let p = v.swap_remove(i);
                unknown(backend.as_ref(), p);
            }
        }
        COUNT.store(v.len(), Ordering::Release);
    }
    for (id, host, device, bytes) in to_hash {
        let fp = crate::fingerprint::of_host(st, host as usize, device, bytes as usize);
        store_hash(id, fp, true);
    }
}

/// Gives entry `id` (if still pending) the fingerprint `fp` just taken, unless it has one
/// already (taken earlier, so before whatever the later one may have read). `settled`: taken
/// before a touching copy is issued ([`settle`]). `None` (not hashed: `of_host` counted it
/// as skipped already, and counting it as unknown too would count it twice): dropped.
fn store_hash(id: u64, fp: Option<Fingerprint>, settled: bool) {
    let mut v = PENDING.lock();
    // Gone: a copy touched it meanwhile (counted there).
    let Some(i) = v.iter().position(|p| p.id == id) else {
        return;
    };
    match (fp, v[i].fingerprint.is_some()) {
        (_, true) => v[i].settled |= settled,
        (Some(fp), false) => {
            v[i].fingerprint = Some(fp);
            v[i].settled = settled;
            MIN_HASHED_TS.fetch_min(v[i].ts, Ordering::AcqRel);
        }
        (None, false) => {
            v.swap_remove(i);
        }
    }
    COUNT.store(v.len(), Ordering::Release);
}

/// Called by the copy hook for every copy it records (with fingerprints on), after the copy
/// was issued and before it is itself started as pending: a pending download whose host or
/// device range the copy touches becomes unknown, unless its fingerprint was settled before
/// the copy was issued (`settled`: this copy's hook called [`settle`] first; a copy the
/// runtime made without a hook seeing it was not, and leaves no download known).
pub fn touch(st: &State, c: &HostCopy, settled: bool) {
    if COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    let mut v = PENDING.lock();
    let mut i = 0;
    while i < v.len() {
        if v[i].overlaps(c.host as u64, c.span as u64, c.device, c.bytes as u64)
            && !(settled && v[i].settled)
        {
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
/// stamped `ts`, see [`crate::stamp`]): records an event after it. `false` when it could
/// not (counted unknown).
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
            ts_ns: None,
            pid: std::process::id(),
            fingerprint: None,
            settled: false,
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
        store_hash(id, fp, false);
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
    MIN_HASHED_TS.store(u64::MAX, Ordering::Release);
}

/// The drain tells that the history ingested the transfer event of an asynchronous
/// download stamped `stamp` (of `host`, `device`, `bytes`) at `ns`: the time its
/// fingerprint is compared at.
pub fn ingested(stamp: u64, ns: u64, host: u64, device: u64, bytes: u64) {
    if COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    let mut v = PENDING.lock();
    if let Some(p) = v.iter_mut().find(|p| {
        p.ts == stamp && p.ts_ns.is_none() && (p.host, p.device, p.bytes) == (host, device, bytes)
    }) {
        p.ts_ns = Some(ns);
    }
}

/// The drain tells that the history ingested every event up to stamp `ts`.
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
    apply_up_to(h, INGESTED.load(Ordering::Acquire));
}

/// Called by the history's ingestion before each event, of stamp `ts`: the hashed downloads
/// stamped before it are compared first (their own transfer events came before it), so
/// that a download settled by a later copy's hook ([`settle`]) is compared before that
/// copy. One atomic load when nothing hashed waits.
pub fn apply_before(h: &mut MemHistory, ts: u64) {
    if COUNT.load(Ordering::Acquire) != 0 && ts > MIN_HASHED_TS.load(Ordering::Acquire) {
        apply_up_to(h, ts - 1);
    }
}

fn apply_up_to(h: &mut MemHistory, ingested: u64) {
    let mut v = PENDING.lock();
    let mut i = 0;
    let mut min_left = u64::MAX;
    while i < v.len() {
        if v[i].fingerprint.is_none() {
            i += 1;
            continue;
        }
        if v[i].ts > ingested {
            min_left = min_left.min(v[i].ts);
            i += 1;
            continue;
        }
        let p = v.swap_remove(i);
        let fp = p.fingerprint.expect("checked above");
        // The event's time in the history; `None` (its event was not seen ingested): not
        // compared.
        let compared = p.ts_ns.is_some_and(|ns| {
            h.observe_late_fingerprint(p.pid, p.host, p.device, p.bytes, Direction::DtoH, ns, fp)
        });
        if compared {
            FINGERPRINTED.fetch_add(1, Ordering::Relaxed);
        } else {
            UNKNOWN.fetch_add(1, Ordering::Relaxed);
        }
    }
    // Under the lock, which every writer of a fingerprint holds: none is missed.
    MIN_HASHED_TS.store(min_left, Ordering::Release);
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
            ts_ns: None,
            pid: 1,
            fingerprint: None,
            settled: false,
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
