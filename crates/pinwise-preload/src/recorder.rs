//! In-process tracing: hooks stamp and push events into their thread's ring; a background
//! thread drains the rings into the same `MemHistory` the eBPF tracer builds, in timestamp
//! order (see [`crate::ring`]), resolving call sites (return addresses) on the way.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use pinwise_alloc::callsite::SiteResolver;
use pinwise_core::{Event, EventKind, HistoryConfig, MemHistory, ModuleTable, ProbeKind, Site};

use crate::clock::now_ns;
use crate::ring::{release_below, GlobalQueue, Registry, Ring, Stamped, RING_CAP};

/// An event as a hook leaves it: its call site still a raw return address.
#[derive(Debug, Clone, Copy)]
pub struct Raw {
    /// The event (`site` set when the hook already resolved it).
    pub event: Event,
    /// Return address to resolve into `event.site` (0: none).
    pub caller: usize,
}

impl Stamped for Raw {
    fn ts(&self) -> u64 {
        self.event.ts_ns
    }
}

/// Every thread's ring.
pub static RINGS: Registry<Raw> = Registry::new();
/// Events of paths that must not touch thread-local storage.
pub static GLOBAL: GlobalQueue<Raw> = GlobalQueue::new();

/// Bumped in a forked child: thread-local ring handles of older generations are stale.
pub static GENERATION: AtomicU64 = AtomicU64::new(1);

#[derive(Clone, Copy)]
struct ThreadRing {
    ring: *const Ring<Raw>,
    generation: u64,
    tid: u32,
}

/// Releases the thread's ring when the thread ends.
struct ReleaseOnExit(Cell<*const Ring<Raw>>);

impl Drop for ReleaseOnExit {
    fn drop(&mut self) {
        let ring = self.0.get();
        if !ring.is_null() {
            // SAFETY: registered rings are leaked, valid for the process's life.
            unsafe { &*ring }.release();
        }
    }
}

thread_local! {
    static THREAD_RING: Cell<ThreadRing> = const {
        Cell::new(ThreadRing { ring: std::ptr::null(), generation: 0, tid: 0 })
    };
    static RELEASE_ON_EXIT: ReleaseOnExit = const { ReleaseOnExit(Cell::new(std::ptr::null())) };
}

/// This thread's ring (claimed on first use in this generation) and thread id.
fn thread_ring() -> (Option<&'static Ring<Raw>>, u32) {
    let generation = GENERATION.load(Ordering::Acquire);
    let current = THREAD_RING.with(|c| c.get());
    if current.generation == generation {
        // SAFETY: registered rings are leaked, valid for the process's life.
        return (unsafe { current.ring.as_ref() }, current.tid);
    }
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    let ring = RINGS.claim();
    let ptr = ring.map_or(std::ptr::null(), |r| r as *const Ring<Raw>);
    THREAD_RING.with(|c| {
        c.set(ThreadRing {
            ring: ptr,
            generation,
            tid,
        })
    });
    if !ptr.is_null() {
        let _ = RELEASE_ON_EXIT.try_with(|r| r.0.set(ptr));
    }
    (ring, tid)
}

/// A timestamp taken for an event still to be recorded (see [`Recorder::stamp`]).
#[must_use]
pub struct Stamp {
    ring: Option<&'static Ring<Raw>>,
    tid: u32,
    /// The timestamp, `CLOCK_MONOTONIC` ns.
    pub ts: u64,
}

struct Collector {
    pending: Vec<Raw>,
    ready: Vec<Raw>,
}

/// The history and the machinery that feeds it. See the module documentation.
pub struct Recorder {
    pid: u32,
    resolver: SiteResolver,
    history: Mutex<MemHistory>,
    collector: Mutex<Collector>,
    finished: AtomicBool,
    inline_drains: AtomicU64,
    lost_after_finish: AtomicU64,
}

impl Recorder {
    /// A recorder for process `pid` whose sites intern into `modules`.
    pub fn new(pid: u32, modules: Arc<ModuleTable>) -> Recorder {
        Recorder {
            pid,
            resolver: SiteResolver::new(modules.clone()),
            history: Mutex::new(MemHistory::with_modules(HistoryConfig::default(), modules)),
            collector: Mutex::new(Collector {
                pending: Vec::with_capacity(RING_CAP),
                ready: Vec::with_capacity(RING_CAP),
            }),
            finished: AtomicBool::new(false),
            inline_drains: AtomicU64::new(0),
            lost_after_finish: AtomicU64::new(0),
        }
    }

    /// The site of return address `caller`.
    pub fn resolve(&self, caller: usize) -> Site {
        self.resolver.resolve(caller)
    }

    /// Announces an event of this thread and takes its timestamp. Until the matching
    /// [`Recorder::record`] (or [`Recorder::cancel`]), no event stamped later is written to
    /// the history before it.
    #[inline]
    pub fn stamp(&self) -> Stamp {
        let (ring, tid) = thread_ring();
        let ts = match ring {
            Some(r) => r.begin(now_ns),
            None => GLOBAL.begin(now_ns),
        };
        Stamp { ring, tid, ts }
    }

    /// Records `kind` at the stamp's time, from call site `site` (already resolved) or
    /// return address `caller` (resolved later; 0: none).
    #[inline]
    pub fn record(&self, stamp: Stamp, kind: EventKind, site: Option<Site>, caller: usize) {
        let mut event = Event::new(
            stamp.ts,
            self.pid,
            stamp.tid,
            ProbeKind::InProcessHook,
            kind,
        );
        event.site = site;
        let raw = Raw { event, caller };
        if self.finished.load(Ordering::Relaxed) {
            self.lost_after_finish.fetch_add(1, Ordering::Relaxed);
            self.cancel(stamp);
            return;
        }
        match stamp.ring {
            None => GLOBAL.push(raw),
            Some(ring) => {
                let mut item = raw;
                loop {
                    match ring.push(item) {
                        Ok(()) => break,
                        Err(back) => {
                            // The drain thread is behind: drain here (the exact history
                            // matters more than this call's latency).
                            item = back;
                            self.inline_drains.fetch_add(1, Ordering::Relaxed);
                            self.drain(false, Some(ring));
                        }
                    }
                }
                if ring.len() > RING_CAP / 2 {
                    crate::state::wake_drain_thread();
                }
            }
        }
    }

    /// Records an event from a path that must not touch thread-local storage.
    pub fn record_global(&self, kind: EventKind, site: Option<Site>) {
        let ts = GLOBAL.begin(now_ns);
        let mut event = Event::new(ts, self.pid, 0, ProbeKind::InProcessHook, kind);
        event.site = site;
        GLOBAL.push(Raw { event, caller: 0 });
    }

    /// Withdraws an announcement without recording.
    pub fn cancel(&self, stamp: Stamp) {
        match stamp.ring {
            Some(r) => r.end(),
            None => GLOBAL.push_nothing(),
        }
    }

    /// Moves every event that can be ordered now into the history. `last`: everything,
    /// whatever is in flight (at exit). `own`: the calling thread's ring, whose
    /// announcement must not hold its own drain back.
    pub fn drain(&self, last: bool, own: Option<&Ring<Raw>>) {
        let mut c = self.collector.lock();
        let Collector { pending, ready } = &mut *c;
        // SAFETY: the collector lock makes this the only consumer.
        let wm_rings = unsafe { RINGS.collect(pending, own, now_ns) };
        // SAFETY: as above.
        let wm_global = unsafe { GLOBAL.collect(pending) };
        let watermark = if last {
            u64::MAX
        } else {
            wm_rings.min(wm_global)
        };
        release_below(pending, watermark, ready);
        if ready.is_empty() {
            return;
        }
        for raw in ready.iter_mut() {
            if raw.caller != 0 && raw.event.site.is_none() {
                raw.event.site = Some(self.resolver.resolve(raw.caller));
            }
        }
        let mut h = self.history.lock();
        for raw in ready.drain(..) {
            h.ingest(&raw.event);
        }
    }

    /// Runs `f` on the history (drain first for an up-to-date view).
    pub fn with_history<R>(&self, f: impl FnOnce(&mut MemHistory) -> R) -> R {
        f(&mut self.history.lock())
    }

    /// From now on events are counted, not recorded (the outputs were written at exit).
    pub fn finish(&self) {
        self.finished.store(true, Ordering::Relaxed);
    }

    /// Times a full ring was drained by its own thread.
    pub fn inline_drains(&self) -> u64 {
        self.inline_drains.load(Ordering::Relaxed)
    }

    /// Events that came after the outputs were written, or were dropped by a full
    /// global queue.
    pub fn lost(&self) -> u64 {
        self.lost_after_finish.load(Ordering::Relaxed) + GLOBAL.dropped()
    }
}
