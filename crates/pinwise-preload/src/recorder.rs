//! In-process tracing: hooks stamp and push events into their thread's ring; a background
//! thread drains the rings into the same `MemHistory` the eBPF tracer builds, in stamp
//! order (see [`crate::ring`]), resolving call sites (return addresses) and converting
//! stamps to `CLOCK_MONOTONIC` nanoseconds (see [`crate::stamp`]) on the way.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use pinwise_alloc::callsite::InProcessSiteResolver;
use pinwise_core::{
    Event, EventKind, Frame, HistoryConfig, HostState, MemHistory, ModuleTable, ProbeKind, Site,
    StackId, StackTable,
};

use crate::guard;
use crate::ring::{release_below, GlobalQueue, Registry, Ring, Stamped, RING_CAP};
use crate::stamp::Converter;
use crate::stats::Tally;

/// An event as a hook leaves it: its call site still a raw return address, its `ts_ns`
/// still a stamp ([`crate::stamp`]; converted when the history ingests it).
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

/// Releases the thread's ring when the thread ends.
struct ReleaseOnExit(Cell<*const Ring<Raw>>);

impl Drop for ReleaseOnExit {
    fn drop(&mut self) {
        let ring = self.0.get();
        if !ring.is_null() {
            // Hooks that run later on this thread (other thread-local destructors may call
            // CUDA or free) use the global queue: once released, the ring may be claimed by
            // a new thread, and a ring has one producer.
            guard::with(|t| t.ring.set(std::ptr::null()));
            // SAFETY: registered rings are leaked, valid for the process's life.
            unsafe { &*ring }.release();
        }
    }
}

thread_local! {
    static RELEASE_ON_EXIT: ReleaseOnExit = const { ReleaseOnExit(Cell::new(std::ptr::null())) };
}

/// This thread's ring (claimed on first use in this generation) and thread id.
#[inline]
fn thread_ring() -> (Option<&'static Ring<Raw>>, u32) {
    let generation = GENERATION.load(Ordering::Acquire);
    let (ring, ring_generation, tid) =
        guard::with(|t| (t.ring.get(), t.ring_generation.get(), t.tid.get()));
    if ring_generation == generation {
        // SAFETY: registered rings are leaked, valid for the process's life.
        return (unsafe { (ring as *const Ring<Raw>).as_ref() }, tid);
    }
    claim_thread_ring(generation)
}

#[cold]
fn claim_thread_ring(generation: u64) -> (Option<&'static Ring<Raw>>, u32) {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    // Claiming may allocate a ring: pinwise's own allocation, not the program's.
    let ring = {
        let _inside = guard::Inside::enter();
        RINGS.claim()
    };
    let ptr = ring.map_or(std::ptr::null(), |r| r as *const Ring<Raw>);
    guard::with(|t| {
        t.ring.set(ptr as *const ());
        t.ring_generation.set(generation);
        t.tid.set(tid);
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
    /// The stamp ([`crate::stamp`]: the order of events; nanoseconds once the drain
    /// converted it).
    pub ts: u64,
}

struct Collector {
    pending: Vec<Raw>,
    ready: Vec<Raw>,
    tally: Tally,
    /// Stamps to nanoseconds.
    converter: Converter,
    /// The last stamp the history ingested.
    last_stamp: u64,
    /// Recently resolved call sites (direct-mapped by return address): the same few sites
    /// make most calls.
    sites: Box<[(usize, Site); SITE_CACHE]>,
}

/// Entries of the call-site cache.
const SITE_CACHE: usize = 256;

/// Remembered stacks at most; when full, the least recently used one makes room (a
/// program with more distinct allocating lines than this pays walks again for its cold
/// ones, within the capture budget, while its hot lines stay remembered).
const STACK_MEMO_CAP: usize = 4096;

/// Stacks remembered by key (see [`Recorder::remembered_stack`]): at most `cap`, the least
/// recently used one evicted for a new one. A hit moves its key to the front without
/// allocating; the memo allocates as it grows, not up front.
pub struct StackMemo {
    map: lru::LruCache<Box<[usize]>, StackId>,
    cap: usize,
}

impl StackMemo {
    /// An empty memo of at most `cap` stacks (at least one).
    pub fn new(cap: usize) -> StackMemo {
        StackMemo {
            map: lru::LruCache::unbounded(),
            cap: cap.max(1),
        }
    }

    /// The stack remembered under `key`, now the most recently used.
    pub fn get(&mut self, key: &[usize]) -> Option<StackId> {
        self.map.get(key).copied()
    }

    /// Remembers `id` under `key`, evicting the least recently used stack when full.
    pub fn insert(&mut self, key: Box<[usize]>, id: StackId) {
        if self.map.len() >= self.cap && !self.map.contains(&key) {
            self.map.pop_lru();
        }
        self.map.put(key, id);
    }

    /// Stacks remembered now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }
}

/// What [`Recorder::remembered_stack`] found.
pub enum Remembered {
    /// Stacks are off (or there is no call site).
    Off,
    /// The stack, captured before from the same call site under the same Python stack.
    Hit(StackId),
    /// Not known: [`Recorder::capture_stack`] walks it (and remembers it under the key,
    /// when there is one).
    Miss(Option<Box<StackKey>>),
}

/// A call site and this thread's Python stack, read by [`Recorder::remembered_stack`].
pub struct StackKey {
    key: Box<[usize]>,
    raw: pinwise_pyframes::RawStack,
}

/// The history and the machinery that feeds it. See the module documentation.
pub struct Recorder {
    pid: u32,
    resolver: InProcessSiteResolver,
    stacks: Arc<StackTable>,
    /// Names Python frames (caching each code object's strings, and each frame already
    /// named, validated by its code object's header at every use).
    python: Mutex<(
        pinwise_pyframes::Resolver,
        pinwise_pyframes::FrameMemo<pinwise_core::PyFrame>,
    )>,
    /// The module of the Python interpreter, once found in the module table; and how
    /// many times it was looked for (a few at most: it needs file-system calls).
    interpreter_module: std::sync::OnceLock<pinwise_core::ModuleId>,
    interpreter_lookups: std::sync::atomic::AtomicU32,
    /// Stacks already captured in a Python process (see [`Recorder::remembered_stack`]).
    stack_memo: Mutex<StackMemo>,
    history: Mutex<MemHistory>,
    collector: Mutex<Collector>,
    finished: AtomicBool,
    /// The thread that drains the rings, woken when one fills up.
    drain_thread: std::sync::OnceLock<std::thread::Thread>,
    inline_drains: AtomicU64,
    lost_after_finish: AtomicU64,
}

impl Recorder {
    /// A recorder for process `pid` whose sites intern into `modules`.
    pub fn new(pid: u32, modules: Arc<ModuleTable>) -> Recorder {
        let stacks = StackTable::shared();
        Recorder {
            pid,
            resolver: InProcessSiteResolver::new(modules.clone()),
            stacks: stacks.clone(),
            python: Mutex::new((
                pinwise_pyframes::Resolver::new(),
                pinwise_pyframes::FrameMemo::new(),
            )),
            interpreter_module: std::sync::OnceLock::new(),
            interpreter_lookups: std::sync::atomic::AtomicU32::new(0),
            stack_memo: Mutex::new(StackMemo::new(STACK_MEMO_CAP)),
            history: Mutex::new(MemHistory::with_tables(
                HistoryConfig::default(),
                modules,
                stacks,
            )),
            collector: Mutex::new(Collector {
                pending: Vec::with_capacity(RING_CAP),
                ready: Vec::with_capacity(RING_CAP),
                tally: Tally::default(),
                converter: Converter::starting(),
                last_stamp: 0,
                sites: Box::new([(0, Site::UNKNOWN); SITE_CACHE]),
            }),
            finished: AtomicBool::new(false),
            drain_thread: std::sync::OnceLock::new(),
            inline_drains: AtomicU64::new(0),
            lost_after_finish: AtomicU64::new(0),
        }
    }

    /// The site of return address `caller`.
    pub fn resolve(&self, caller: usize) -> Site {
        self.resolver.resolve(caller)
    }

    /// The call stack of this thread from the application's call site `from` (a return
    /// address) outward, interned; `None` when stacks are off or nothing was found.
    /// Allocates (under [`guard::Inside`], so pinwise's own allocations are not recorded).
    /// A stack remembered for the same call site and Python stack is used without a walk
    /// (see [`Recorder::remembered_stack`]).
    pub fn stack_from(&self, from: usize) -> Option<StackId> {
        match self.remembered_stack(from) {
            Remembered::Hit(id) => Some(id),
            Remembered::Miss(key) => self.capture_stack(from, key),
            Remembered::Off => None,
        }
    }

    /// Whether this thread's stack from `from` is already known: in a Python process, a
    /// stack captured before from the same call site under the same Python stack (the same
    /// code objects at the same instructions). A loop that allocates on the same line finds
    /// its stack here for the cost of reading the Python frames, instead of an unwind
    /// (tens to hundreds of microseconds in large libraries). The native frames between the
    /// call site and the interpreter are the first capture's: two native paths from one
    /// Python line to one allocating call site share a stack (the user frame, the Python
    /// line, is the same). Code objects are checked by their fingerprints, as the frame
    /// memo checks them. Outside Python nothing is remembered: there the native frames are
    /// all there is to tell call paths apart.
    pub fn remembered_stack(&self, from: usize) -> Remembered {
        if !crate::unwind::stacks_enabled() || from == 0 {
            return Remembered::Off;
        }
        if pinwise_pyframes::detected().is_none() {
            return Remembered::Miss(None);
        }
        let _inside = guard::Inside::enter();
        let mut raw = pinwise_pyframes::RawStack::new();
        if !pinwise_pyframes::capture(&mut raw) || raw.frames().is_empty() {
            return Remembered::Miss(None);
        }
        // Each frame's code object with its fingerprint: a function defined later at a
        // freed one's address (same code address, same offset) is another key.
        let fingerprints = pinwise_pyframes::code_fingerprints(&raw);
        if fingerprints.len() != raw.frames().len() || fingerprints.iter().any(Option::is_none) {
            return Remembered::Miss(None);
        }
        let mut key = Vec::with_capacity(1 + raw.frames().len() * 7);
        key.push(from);
        for (f, fp) in raw.frames().iter().zip(fingerprints.iter().flatten()) {
            key.extend([f.code, f.instr_offset as u32 as usize]);
            key.extend(fp.iter().map(|&w| w as usize));
        }
        let key = key.into_boxed_slice();
        match self.stack_memo.lock().get(&key) {
            Some(id) => Remembered::Hit(id),
            None => Remembered::Miss(Some(Box::new(StackKey { key, raw }))),
        }
    }

    /// Walks this thread's stack from `from` (see [`Recorder::stack_from`]); with the key
    /// of a [`Remembered::Miss`], its Python frames are the ones read then, and the stack is
    /// remembered under it.
    pub fn capture_stack(&self, from: usize, key: Option<Box<StackKey>>) -> Option<StackId> {
        if !crate::unwind::stacks_enabled() || from == 0 {
            return None;
        }
        let _inside = guard::Inside::enter();
        // The Python frames first: where there are some, they replace the interpreter's
        // native frames, so the native walk ends at the first frame in the interpreter
        // (what the merge would keep of a longer walk).
        let python = match &key {
            Some(k) => self.resolve_python(&k.raw),
            None => self.python_frames(),
        };
        let interpreter = if python.is_empty() {
            None
        } else {
            self.interpreter_module()
        };
        let ips = match interpreter {
            Some(interp) => {
                crate::unwind::capture_until(from, &|ip| self.resolver.resolve(ip).module == interp)
            }
            None => crate::unwind::capture_from(from),
        };
        let native: Vec<Site> = ips
            .as_slice()
            .iter()
            .map(|&ip| self.resolver.resolve(ip))
            .collect();
        let frames = merge_frames(native, python, |m| interpreter.map(|i| i == m));
        let id = self.stacks.intern(&frames)?;
        if let Some(k) = key {
            self.stack_memo.lock().insert(k.key, id);
        }
        Some(id)
    }

    /// The module table's id of the file that holds the Python interpreter.
    fn interpreter_module(&self) -> Option<pinwise_core::ModuleId> {
        if let Some(m) = self.interpreter_module.get() {
            return Some(*m);
        }
        if self.interpreter_lookups.fetch_add(1, Ordering::Relaxed) >= 4 {
            return None;
        }
        let object = pinwise_pyframes::detected()?.object().to_owned();
        let modules = self.resolver.modules().snapshot();
        let i = modules.iter().position(|m| same_file(&m.path, &object))?;
        let id = pinwise_core::ModuleId(i as u32);
        Some(*self.interpreter_module.get_or_init(|| id))
    }

    /// This thread's Python frames, innermost first (none when the process runs no
    /// CPython 3.10-3.13 the library detected when it was loaded, or this thread runs no
    /// Python). Read from the interpreter's memory, resolved at once (a captured code
    /// object could be freed later).
    fn python_frames(&self) -> Vec<pinwise_core::PyFrame> {
        if pinwise_pyframes::detected().is_none() {
            return Vec::new();
        }
        let mut raw = pinwise_pyframes::RawStack::new();
        if !pinwise_pyframes::capture(&mut raw) {
            return Vec::new();
        }
        self.resolve_python(&raw)
    }

    /// Python frames read from the interpreter, named (file, line, function).
    fn resolve_python(&self, raw: &pinwise_pyframes::RawStack) -> Vec<pinwise_core::PyFrame> {
        let (resolver, memo) = &mut *self.python.lock();
        resolver.resolve_stack_memo(raw, memo, |f| {
            pinwise_core::PyFrame::new(&f.file, f.line, &f.function)
        })
    }

    /// Announces an event of this thread and takes its timestamp. Until the matching
    /// [`Recorder::record`] (or [`Recorder::cancel`]), no event stamped later is written to
    /// the history before it.
    #[inline]
    pub fn stamp(&self) -> Stamp {
        let (ring, tid) = thread_ring();
        let ts = match ring {
            Some(r) => r.begin(crate::stamp::now),
            None => GLOBAL.begin(crate::stamp::now),
        };
        Stamp { ring, tid, ts }
    }

    /// Records `kind` at the stamp's time, from call site `site` (already resolved) or
    /// return address `caller` (resolved later; 0: none).
    #[inline]
    pub fn record(&self, stamp: Stamp, kind: EventKind, site: Option<Site>, caller: usize) {
        self.record_with_stack(stamp, kind, site, caller, None)
    }

    /// [`Recorder::record`], with the event's call stack (see [`Recorder::stack_from`]).
    #[inline]
    pub fn record_with_stack(
        &self,
        stamp: Stamp,
        kind: EventKind,
        site: Option<Site>,
        caller: usize,
        stack: Option<StackId>,
    ) {
        let mut event = Event::new(
            stamp.ts,
            self.pid,
            stamp.tid,
            ProbeKind::InProcessHook,
            kind,
        );
        event.site = site;
        event.stack = stack;
        self.push(stamp, Raw { event, caller });
    }

    #[inline]
    fn push(&self, stamp: Stamp, raw: Raw) {
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
                if ring.half_full() {
                    if let Some(t) = self.drain_thread.get() {
                        t.unpark();
                    }
                }
            }
        }
    }

    /// [`Recorder::record`] of a transfer, with the fingerprint of the bytes it moved.
    #[inline]
    pub fn record_fingerprinted(
        &self,
        stamp: Stamp,
        kind: EventKind,
        fingerprint: Option<pinwise_core::fingerprint::Fingerprint>,
        caller: usize,
    ) {
        let mut event = Event::new(
            stamp.ts,
            self.pid,
            stamp.tid,
            ProbeKind::InProcessHook,
            kind,
        );
        event.fingerprint = fingerprint;
        self.push(stamp, Raw { event, caller });
    }

    /// Records an event from a path that must not touch thread-local storage.
    pub fn record_global(&self, kind: EventKind, site: Option<Site>) {
        let ts = GLOBAL.begin(crate::stamp::now);
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
        let Collector {
            pending,
            ready,
            tally,
            converter,
            last_stamp,
            sites,
        } = &mut *c;
        // Every stamp released below is under this collection's start, so under its anchor.
        let (start, anchor) = crate::stamp::collection_start();
        if let Some(a) = anchor {
            converter.add(a);
        } else if !converter.stop_anchor_added {
            if let Some(a) = crate::stamp::stop_anchor() {
                converter.add(a);
                converter.stop_anchor_added = true;
            }
        }
        // SAFETY: the collector lock makes this the only consumer.
        let wm_rings = unsafe { RINGS.collect(pending, own, || start) };
        // SAFETY: as above.
        let wm_global = unsafe { GLOBAL.collect(pending) };
        let watermark = if last {
            u64::MAX
        } else {
            wm_rings.min(wm_global)
        };
        // Events left in `ready` by an inline drain that found the history busy come first
        // (older than any released now), already resolved and counted.
        let fresh = ready.len();
        release_below(pending, watermark, ready);
        if ready.is_empty() {
            return;
        }
        for raw in ready[fresh..].iter_mut() {
            if raw.caller != 0 && raw.event.site.is_none() {
                let slot = &mut sites[(raw.caller >> 2) % SITE_CACHE];
                if slot.0 != raw.caller {
                    *slot = (raw.caller, self.resolver.resolve(raw.caller));
                }
                raw.event.site = Some(slot.1);
            }
            if let EventKind::Transfer {
                direction,
                bytes,
                host_state,
                ..
            } = raw.event.kind
            {
                tally.transfers[direction.index()] += 1;
                tally.bytes[direction.index()] += bytes;
                match host_state {
                    HostState::Pinned => tally.pinned += 1,
                    HostState::Pageable => tally.pageable += 1,
                    HostState::Unknown => tally.unknown += 1,
                }
            }
        }
        // A hook draining its own full ring never waits for the history (the drain thread
        // may hold it while it encodes an append, see `persist`): its ring is empty now, and
        // the events wait in `ready` for the next drain.
        let mut h = if own.is_some() {
            match self.history.try_lock() {
                Some(h) => h,
                None => return,
            }
        } else {
            self.history.lock()
        };
        for raw in ready.drain(..) {
            let stamp = raw.event.ts_ns;
            // An asynchronous download hashed before this event's copy was issued is
            // compared before it (see `async_fp::settle`).
            crate::async_fp::apply_before(&mut h, stamp);
            let mut event = raw.event;
            event.ts_ns = converter.convert(stamp);
            h.ingest(&event);
            if let EventKind::Transfer {
                direction: pinwise_core::Direction::DtoH,
                is_async: true,
                host,
                device,
                bytes,
                ..
            } = event.kind
            {
                crate::async_fp::ingested(stamp, event.ts_ns, host, device, bytes);
            }
            *last_stamp = stamp;
        }
        converter.forget_below(*last_stamp);
        crate::async_fp::note_ingested(*last_stamp);
    }

    /// What the statistics say about the events' stamps.
    pub fn timestamp_stats(&self) -> pinwise_core::preload_stats::TimestampStats {
        self.collector.lock().converter.stats()
    }

    /// Runs `f` on the history (drain first for an up-to-date view).
    pub fn with_history<R>(&self, f: impl FnOnce(&mut MemHistory) -> R) -> R {
        f(&mut self.history.lock())
    }

    /// The thread that drains the rings (woken when a ring is half full).
    pub fn set_drain_thread(&self, t: std::thread::Thread) {
        let _ = self.drain_thread.set(t);
    }

    /// From now on events are counted, not recorded (the outputs were written at exit).
    pub fn finish(&self) {
        self.finished.store(true, Ordering::Relaxed);
    }

    /// The copies recorded so far.
    pub fn tally(&self) -> Tally {
        self.collector.lock().tally
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

/// Whether two paths name the same file (the loader's path of a module and the path the
/// Python detection found may differ by symbolic links).
fn same_file(a: &str, b: &str) -> bool {
    a == b
        || match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
            (Ok(x), Ok(y)) => x == y,
            _ => false,
        }
}

/// One stack from the native frames and the Python frames of the same moment, innermost
/// first, as every source builds it ([`pinwise_core::stack::merge_python_frames`]: the
/// tracer's stacks have the same shape).
pub(crate) fn merge_frames(
    native: Vec<Site>,
    python: Vec<pinwise_core::PyFrame>,
    in_interpreter: impl Fn(pinwise_core::ModuleId) -> Option<bool>,
) -> Vec<Frame> {
    pinwise_core::stack::merge_python_frames(native, python, in_interpreter)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU8;

    #[test]
    fn a_hot_stack_survives_heavy_churn_of_cold_ones_and_the_memo_stays_bounded() {
        let id = |i: usize| StackId::from_index(i).unwrap();
        let key = |i: usize| -> Box<[usize]> { vec![0x4000 + i, i, 7].into_boxed_slice() };
        let mut memo = StackMemo::new(64);
        memo.insert(key(0), id(0));
        // 100 memos' worth of cold keys, each seen once; the hot key is looked up after
        // every 16 of them (a loop allocating on one line among many one-off lines).
        for i in 1..=6_400 {
            memo.insert(key(i), id(i));
            assert!(
                memo.len() <= 64,
                "the memo grew past its bound: {}",
                memo.len()
            );
            if i % 16 == 0 {
                assert_eq!(
                    memo.get(&key(0)),
                    Some(id(0)),
                    "the hot key was evicted at {i}"
                );
            }
        }
        assert_eq!(memo.len(), 64, "full, not cleared");
        // The most recent cold keys are there; the oldest were evicted, one at a time.
        assert_eq!(memo.get(&key(6_400)), Some(id(6_400)));
        assert_eq!(memo.get(&key(1)), None);
        // Without lookups a key ages out like any other.
        for i in 10_000..10_064 {
            memo.insert(key(i), id(i));
        }
        assert_eq!(memo.get(&key(0)), None);
        assert_eq!(memo.len(), 64);
    }

    #[test]
    fn python_frames_replace_the_interpreters_native_frames_and_keep_room() {
        use pinwise_core::{ModuleId, PyFrame};
        let site = |m: u32, o: u64| Site {
            module: ModuleId(m),
            offset: o,
        };
        // Module 2 is the interpreter.
        let interp = |m: ModuleId| Some(m.0 == 2);
        let py = |n: usize| -> Vec<PyFrame> {
            (0..n)
                .map(|i| PyFrame::new("t.py", i as u32 + 1, "f"))
                .collect()
        };
        let native = vec![site(1, 1), site(1, 2), site(2, 3), site(2, 4), site(1, 5)];
        let m = merge_frames(native.clone(), py(2), interp);
        assert_eq!(
            m,
            vec![
                Frame::Native(site(1, 1)),
                Frame::Native(site(1, 2)),
                Frame::Python(PyFrame::new("t.py", 1, "f")),
                Frame::Python(PyFrame::new("t.py", 2, "f")),
            ]
        );
        // No Python frames: the native stack as it is.
        assert_eq!(merge_frames(native, Vec::new(), interp).len(), 5);
        // A deep native stack leaves room for up to 16 Python frames.
        let deep: Vec<Site> = (0..40).map(|i| site(1, i)).collect();
        let m = merge_frames(deep, py(20), interp);
        assert_eq!(m.len(), pinwise_core::stack::MAX_FRAMES);
        assert_eq!(
            m.iter().filter(|f| matches!(f, Frame::Python(_))).count(),
            16
        );
        assert_eq!(m[0], Frame::Native(site(1, 0)));
    }

    /// What `thread_ring` answered in a thread-local destructor that ran after the ring
    /// was released: 1 a ring, 2 none.
    static LATE_ANSWER: AtomicU8 = AtomicU8::new(0);

    struct LateHook;

    impl Drop for LateHook {
        fn drop(&mut self) {
            let answer = if thread_ring().0.is_some() { 1 } else { 2 };
            LATE_ANSWER.store(answer, Ordering::SeqCst);
        }
    }

    thread_local! {
        static LATE_HOOK: LateHook = const { LateHook };
    }

    /// A hook whose ring is full drains it itself; while the history is held (the drain
    /// thread encoding an append), it does not wait: the events wait in the collector, and
    /// reach the history, in order, at the next drain.
    #[test]
    fn a_full_ring_does_not_wait_for_a_busy_history() {
        use pinwise_core::{Direction, HostMemKind};
        let rec: &'static Recorder =
            Box::leak(Box::new(Recorder::new(4242, ModuleTable::shared())));
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            rec.with_history(|_| {
                held_tx.send(()).unwrap();
                // Held until the recording thread is done (or 20 s: it blocked).
                let _ = done_rx.recv_timeout(std::time::Duration::from_secs(20));
            })
        });
        held_rx.recv().unwrap();
        let copies = 3 * RING_CAP as u64;
        let started = std::time::Instant::now();
        let recorder = std::thread::spawn(move || {
            let kind = EventKind::Alloc {
                start: 0x10_0000,
                size: 1 << 20,
                kind: HostMemKind::Pageable,
                flags: 0,
            };
            rec.record(rec.stamp(), kind, Some(Site::UNKNOWN), 0);
            for _ in 0..copies {
                let kind = EventKind::Transfer {
                    direction: Direction::HtoD,
                    host: 0x10_0000,
                    device: 0xd000,
                    bytes: 64,
                    is_async: false,
                    stream: 0,
                    host_state: HostState::Pageable,
                };
                rec.record(rec.stamp(), kind, Some(Site::UNKNOWN), 0);
            }
        });
        recorder.join().unwrap();
        let waited = started.elapsed();
        let _ = done_tx.send(());
        holder.join().unwrap();
        assert!(
            waited < std::time::Duration::from_secs(15),
            "the recording thread waited for the history ({waited:?})"
        );
        assert!(rec.inline_drains() >= 2, "{}", rec.inline_drains());
        rec.drain(true, None);
        rec.with_history(|h| {
            assert_eq!(
                h.stats().transfers[Direction::HtoD.index()].transfers,
                copies
            );
            assert_eq!(h.len(), 1);
        });
    }

    #[test]
    fn a_hook_after_the_threads_ring_was_released_does_not_use_it() {
        std::thread::spawn(|| {
            // Registered first, so destroyed after the ring's releaser (destructors run in
            // reverse order of registration).
            LATE_HOOK.with(|_| {});
            assert!(thread_ring().0.is_some(), "the thread has a ring");
        })
        .join()
        .unwrap();
        assert_eq!(
            LATE_ANSWER.load(Ordering::SeqCst),
            2,
            "a released ring may belong to another thread already"
        );
    }
}
