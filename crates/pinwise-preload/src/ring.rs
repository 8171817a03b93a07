//! Per-thread event rings, drained in timestamp order.
//!
//! A hook writes its event into its thread's fixed-size [`Ring`] (single producer, single
//! consumer: no lock, no allocation); the drain thread collects all rings in batches.
//! Paths that must not touch thread-local storage (the `free` hook) use the
//! [`GlobalQueue`] (bounded, multi-producer, lock-free).
//!
//! Events reach the history in timestamp order although threads push them at different
//! moments: a producer announces a push before it takes its timestamp ([`Ring::begin`]),
//! and [`Registry::collect`] returns a *watermark* below which every event has arrived:
//! the time the collection started, lowered to the timestamp of any push in flight, or 0
//! when a push is between its announcement and its timestamp. Events at or above the
//! watermark wait for the next collection.
//!
//! A timestamp is whatever the `clock` given to [`Ring::begin`] and [`Registry::collect`]
//! returns: for this argument, a later read (in the order the announcement and the
//! collector's look at `busy` set) must not return less, on any thread
//! (`crate::stamp::now`, the ordered counter read or the clock).

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

/// Something with a timestamp.
pub trait Stamped: Copy {
    /// Its timestamp (see the module documentation).
    fn ts(&self) -> u64;
}

/// Slots per ring.
pub const RING_CAP: usize = 4096;

/// `busy` while a push is announced but has no timestamp yet.
const STARTING: u64 = 1;

/// What the producer writes, on a cache line of its own (the consumer writing `tail` on
/// the same line would make every push a cache miss).
#[repr(C, align(64))]
struct ProducerSide {
    /// Events pushed.
    head: AtomicUsize,
    /// The consumer's `tail` as the producer last read it (re-read only when the ring
    /// looks full or half full).
    seen_tail: AtomicUsize,
    /// 0: idle; [`STARTING`]; else the timestamp of the push in flight.
    busy: AtomicU64,
}

/// What the consumer writes, on a cache line of its own.
#[repr(C, align(64))]
struct ConsumerSide {
    /// Events taken.
    tail: AtomicUsize,
    /// Whether a live thread owns the ring.
    owned: AtomicBool,
}

/// One thread's ring. See the module documentation.
pub struct Ring<T: Stamped> {
    producer: ProducerSide,
    consumer: ConsumerSide,
    slots: [UnsafeCell<MaybeUninit<T>>; RING_CAP],
}

// SAFETY: slots are written only by the owning producer before it publishes them with a
// release store of `head`, and read only by the consumer (under the collector's lock) after
// an acquire load of `head` and before it releases them with a store of `tail`.
unsafe impl<T: Stamped + Send> Sync for Ring<T> {}

impl<T: Stamped> Ring<T> {
    /// A new empty ring, owned, on the heap (built in place: it is too large for a stack).
    pub fn new_boxed() -> Box<Ring<T>> {
        let layout = std::alloc::Layout::new::<Ring<T>>();
        // SAFETY: the layout is not zero-sized.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) } as *mut Ring<T>;
        if raw.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // SAFETY: allocated above with the global allocator and `Ring`'s layout; all-zero
        // bytes are a valid `Ring` (atomics at 0 / false, `MaybeUninit` slots need nothing).
        let ring = unsafe { Box::from_raw(raw) };
        ring.consumer.owned.store(true, Ordering::Relaxed);
        ring
    }

    /// Announces a push and returns its timestamp, taken from `clock` after the
    /// announcement (see the module documentation).
    #[inline]
    pub fn begin(&self, clock: impl FnOnce() -> u64) -> u64 {
        // The announcement must be visible before the clock is read (one full fence); the
        // timestamp itself only narrows it, and may be seen late.
        self.producer.busy.store(STARTING, Ordering::SeqCst);
        let ts = clock().max(STARTING + 1);
        self.producer.busy.store(ts, Ordering::Release);
        ts
    }

    /// Pushes `item` (its timestamp is the one [`Ring::begin`] returned) and ends the
    /// announcement. `Err(item)` when the ring is full; the announcement stays until
    /// [`Ring::end`].
    #[inline]
    pub fn push(&self, item: T) -> Result<(), T> {
        let p = &self.producer;
        let head = p.head.load(Ordering::Relaxed);
        if head.wrapping_sub(p.seen_tail.load(Ordering::Relaxed)) >= RING_CAP {
            let tail = self.consumer.tail.load(Ordering::Acquire);
            p.seen_tail.store(tail, Ordering::Relaxed);
            if head.wrapping_sub(tail) >= RING_CAP {
                return Err(item);
            }
        }
        // SAFETY: slot `head` is free (head - tail < CAP) and only this producer writes it.
        unsafe { (*self.slots[head % RING_CAP].get()).write(item) };
        p.head.store(head.wrapping_add(1), Ordering::Release);
        self.end();
        Ok(())
    }

    /// Ends an announcement without a push.
    #[inline]
    pub fn end(&self) {
        self.producer.busy.store(0, Ordering::Release);
    }

    /// For the producer: whether the ring is more than half full (reads the consumer's
    /// position only when its last known one says so).
    #[inline]
    pub fn half_full(&self) -> bool {
        let p = &self.producer;
        let head = p.head.load(Ordering::Relaxed);
        if head.wrapping_sub(p.seen_tail.load(Ordering::Relaxed)) <= RING_CAP / 2 {
            return false;
        }
        let tail = self.consumer.tail.load(Ordering::Acquire);
        p.seen_tail.store(tail, Ordering::Relaxed);
        head.wrapping_sub(tail) > RING_CAP / 2
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.producer
            .head
            .load(Ordering::Acquire)
            .wrapping_sub(self.consumer.tail.load(Ordering::Acquire))
    }

    /// Whether no event waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Marks the ring as no longer owned (its thread ended); it is reused once drained.
    pub fn release(&self) {
        self.consumer.owned.store(false, Ordering::Release);
    }

    /// Takes every waiting event into `out`.
    ///
    /// # Safety
    /// Only one consumer at a time (the caller holds the collector's lock).
    unsafe fn drain_into(&self, out: &mut Vec<T>) {
        let tail = self.consumer.tail.load(Ordering::Relaxed);
        let head = self.producer.head.load(Ordering::Acquire);
        let mut i = tail;
        while i != head {
            // SAFETY: slots tail..head were published by the producer's release store.
            out.push(unsafe { (*self.slots[i % RING_CAP].get()).assume_init() });
            i = i.wrapping_add(1);
        }
        self.consumer.tail.store(head, Ordering::Release);
    }
}

/// Most rings (threads that ever recorded at once); further threads use the global queue.
pub const MAX_RINGS: usize = 4096;

/// All rings of the process.
pub struct Registry<T: Stamped> {
    rings: [AtomicPtr<Ring<T>>; MAX_RINGS],
    count: AtomicUsize,
}

impl<T: Stamped + Send> Registry<T> {
    /// An empty registry (usable in a `static`).
    pub const fn new() -> Self {
        Registry {
            rings: [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_RINGS],
            count: AtomicUsize::new(0),
        }
    }

    /// A ring for the calling thread: a released and drained one, or a new one. `None`
    /// when [`MAX_RINGS`] are in use. Rings are never freed (a forked child forgets them).
    pub fn claim(&self) -> Option<&'static Ring<T>> {
        let n = self.count.load(Ordering::Acquire).min(MAX_RINGS);
        for slot in &self.rings[..n] {
            let p = slot.load(Ordering::Acquire);
            if p.is_null() {
                continue;
            }
            // SAFETY: registered rings are leaked boxes, valid for the process's life.
            let ring: &'static Ring<T> = unsafe { &*p };
            if !ring.consumer.owned.load(Ordering::Acquire)
                && ring.is_empty()
                && ring
                    .consumer
                    .owned
                    .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                return Some(ring);
            }
        }
        let index = self.count.fetch_add(1, Ordering::AcqRel);
        if index >= MAX_RINGS {
            self.count.store(MAX_RINGS, Ordering::Release);
            return None;
        }
        let ring: &'static Ring<T> = Box::leak(Ring::new_boxed());
        self.rings[index].store(ring as *const Ring<T> as *mut Ring<T>, Ordering::Release);
        Some(ring)
    }

    /// Collects every waiting event into `out` and returns the watermark: every event with a
    /// timestamp below it is now in `out` or was collected before. `own` is a ring whose
    /// announcement is to be ignored (the caller's own, when a full ring drains itself).
    ///
    /// # Safety
    /// One collector at a time (the caller holds the collector's lock).
    pub unsafe fn collect(
        &self,
        out: &mut Vec<T>,
        own: Option<&Ring<T>>,
        clock: impl FnOnce() -> u64,
    ) -> u64 {
        let mut watermark = clock();
        let n = self.count.load(Ordering::Acquire).min(MAX_RINGS);
        for slot in &self.rings[..n] {
            let p = slot.load(Ordering::Acquire);
            if p.is_null() {
                continue;
            }
            // SAFETY: registered rings are leaked boxes, valid for the process's life.
            let ring: &Ring<T> = unsafe { &*p };
            let is_own = own.is_some_and(|o| std::ptr::eq(o, ring));
            match ring.producer.busy.load(Ordering::SeqCst) {
                0 => {}
                _ if is_own => {}
                STARTING => watermark = 0,
                ts => watermark = watermark.min(ts),
            }
            // SAFETY: one collector at a time (the caller's contract).
            unsafe { ring.drain_into(out) };
        }
        watermark
    }

    /// Forgets every ring (in a forked child: the parent's threads are gone). The rings
    /// themselves are leaked. Only the slots ever registered are written (`claim` counts a
    /// slot before it stores into it; the others are null): each page written here is a
    /// page fault in every forked child.
    pub fn forget_all(&self) {
        let n = self.count.load(Ordering::Acquire).min(MAX_RINGS);
        for slot in &self.rings[..n] {
            slot.store(std::ptr::null_mut(), Ordering::Relaxed);
        }
        self.count.store(0, Ordering::Release);
    }

    /// Rings registered.
    pub fn len(&self) -> usize {
        self.count.load(Ordering::Acquire).min(MAX_RINGS)
    }

    /// Whether no ring is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: Stamped + Send> Default for Registry<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// Slots of the global queue.
pub const GLOBAL_CAP: usize = 1024;

/// A bounded lock-free multi-producer queue for events of paths that must not use
/// thread-local storage (Vyukov's bounded queue; one consumer, the collector).
pub struct GlobalQueue<T: Stamped> {
    slots: [GlobalSlot<T>; GLOBAL_CAP],
    enqueue: AtomicUsize,
    dequeue: AtomicUsize,
    /// Pushes announced and not finished.
    pending: AtomicUsize,
    /// Events refused because the queue was full.
    dropped: AtomicU64,
}

struct GlobalSlot<T> {
    seq: AtomicUsize,
    value: UnsafeCell<MaybeUninit<T>>,
}

// SAFETY: a slot's value is written by the one producer that won its position (CAS on
// `enqueue`) before it publishes it with a release store of `seq`, and read by the single
// consumer after an acquire load of `seq`.
unsafe impl<T: Stamped + Send> Sync for GlobalQueue<T> {}

impl<T: Stamped + Send> GlobalQueue<T> {
    /// An empty queue (usable in a `static`).
    pub const fn new() -> Self {
        let mut slots = [const {
            GlobalSlot {
                seq: AtomicUsize::new(0),
                value: UnsafeCell::new(MaybeUninit::uninit()),
            }
        }; GLOBAL_CAP];
        let mut i = 0;
        while i < GLOBAL_CAP {
            slots[i].seq = AtomicUsize::new(i);
            i += 1;
        }
        GlobalQueue {
            slots,
            enqueue: AtomicUsize::new(0),
            dequeue: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    /// Announces a push; returns its timestamp from `clock` (taken after the announcement).
    pub fn begin(&self, clock: impl FnOnce() -> u64) -> u64 {
        self.pending.fetch_add(1, Ordering::SeqCst);
        clock()
    }

    /// Pushes `item` and ends the announcement. A full queue drops it (counted).
    pub fn push(&self, item: T) {
        let mut pos = self.enqueue.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[pos % GLOBAL_CAP];
            let seq = slot.seq.load(Ordering::Acquire);
            let diff = seq as isize - pos as isize;
            if diff == 0 {
                match self.enqueue.compare_exchange_weak(
                    pos,
                    pos + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: this producer won position `pos`; nobody else touches the
                        // slot until `seq` is published.
                        unsafe { (*slot.value.get()).write(item) };
                        slot.seq.store(pos + 1, Ordering::Release);
                        break;
                    }
                    Err(p) => pos = p,
                }
            } else if diff < 0 {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                break;
            } else {
                pos = self.enqueue.load(Ordering::Relaxed);
            }
        }
        self.pending.fetch_sub(1, Ordering::SeqCst);
    }

    /// Ends an announcement without a push.
    pub fn push_nothing(&self) {
        self.pending.fetch_sub(1, Ordering::SeqCst);
    }

    /// Collects waiting events into `out`; returns 0 when a push is in flight (the
    /// watermark must wait), else `u64::MAX`.
    ///
    /// # Safety
    /// One consumer at a time.
    pub unsafe fn collect(&self, out: &mut Vec<T>) -> u64 {
        let watermark = if self.pending.load(Ordering::SeqCst) > 0 {
            0
        } else {
            u64::MAX
        };
        loop {
            let pos = self.dequeue.load(Ordering::Relaxed);
            let slot = &self.slots[pos % GLOBAL_CAP];
            let seq = slot.seq.load(Ordering::Acquire);
            if seq != pos + 1 {
                break;
            }
            // SAFETY: published by its producer (seq == pos + 1); single consumer.
            out.push(unsafe { (*slot.value.get()).assume_init() });
            slot.seq.store(pos + GLOBAL_CAP, Ordering::Release);
            self.dequeue.store(pos + 1, Ordering::Relaxed);
        }
        watermark
    }

    /// Empties the queue in a forked child (one thread: the parent's pushes in flight will
    /// never finish, and its events are not the child's): every position from `dequeue` to
    /// `enqueue` (events waiting, and pushes that won their position and never published)
    /// is consumed, as the collector would consume it, and nothing else is written. A
    /// drained queue is left as it is: each page written here is a page fault in every
    /// forked child, and a queue used long has written every slot.
    pub fn reset_in_child(&self) {
        let from = self.dequeue.load(Ordering::Relaxed);
        let to = self.enqueue.load(Ordering::Relaxed);
        // At most GLOBAL_CAP positions are ever between them (a push never passes a slot
        // the collector has not consumed); `min` only guards against a torn pair.
        for pos in from..to.max(from).min(from + GLOBAL_CAP) {
            let slot = &self.slots[pos % GLOBAL_CAP];
            if slot.seq.load(Ordering::Relaxed) != pos + GLOBAL_CAP {
                slot.seq.store(pos + GLOBAL_CAP, Ordering::Relaxed);
            }
        }
        self.dequeue.store(to.max(from), Ordering::Relaxed);
        self.enqueue.store(to.max(from), Ordering::Relaxed);
        self.pending.store(0, Ordering::Release);
    }

    /// Events dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl<T: Stamped + Send> Default for GlobalQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// Merges newly collected events into `pending` and moves those below `watermark`, in
/// timestamp order, into `ready`. Events of equal timestamps keep their collection order.
pub fn release_below<T: Stamped>(pending: &mut Vec<T>, watermark: u64, ready: &mut Vec<T>) {
    pending.sort_by_key(|e| e.ts());
    let split = pending.partition_point(|e| e.ts() < watermark);
    ready.extend(pending.drain(..split));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct Ev {
        ts: u64,
        thread: u32,
        n: u32,
    }

    impl Stamped for Ev {
        fn ts(&self) -> u64 {
            self.ts
        }
    }

    #[test]
    fn a_ring_keeps_order_and_refuses_when_full() {
        let r = Ring::<Ev>::new_boxed();
        for n in 0..RING_CAP as u32 {
            let ts = r.begin(|| 10 + n as u64);
            r.push(Ev { ts, thread: 0, n }).unwrap();
        }
        let ts = r.begin(|| 99_999);
        assert!(r
            .push(Ev {
                ts,
                thread: 0,
                n: 0
            })
            .is_err());
        r.end();
        let mut out = Vec::new();
        // SAFETY: single consumer in this test.
        unsafe { r.drain_into(&mut out) };
        assert_eq!(out.len(), RING_CAP);
        assert!(out.windows(2).all(|w| w[0].n + 1 == w[1].n));
        assert!(r.is_empty());
    }

    #[test]
    fn an_announced_push_holds_the_watermark() {
        static REG: Registry<Ev> = Registry::new();
        let a = REG.claim().unwrap();
        let b = REG.claim().unwrap();
        let ts = a.begin(|| 100);
        b.push(Ev {
            ts: b.begin(|| 150),
            thread: 1,
            n: 0,
        })
        .unwrap();
        let mut out = Vec::new();
        // SAFETY: single collector in this test.
        let wm = unsafe { REG.collect(&mut out, None, || 200) };
        assert_eq!(wm, 100, "a's push in flight at 100 holds the watermark");
        assert_eq!(out.len(), 1);
        a.push(Ev {
            ts,
            thread: 0,
            n: 0,
        })
        .unwrap();
        // SAFETY: as above.
        let wm = unsafe { REG.collect(&mut out, None, || 300) };
        assert_eq!(wm, 300);
        let mut ready = Vec::new();
        release_below(&mut out, wm, &mut ready);
        assert_eq!(
            ready.iter().map(|e| e.ts).collect::<Vec<_>>(),
            vec![100, 150]
        );
        // A thread's own announcement does not hold its own drain back.
        let _ = a.begin(|| 400);
        // SAFETY: as above.
        let wm = unsafe { REG.collect(&mut out, Some(a), || 500) };
        assert_eq!(wm, 500);
        a.end();
        a.release();
        assert!(
            std::ptr::eq(REG.claim().unwrap(), a),
            "a released, drained ring is reused"
        );
    }

    #[test]
    fn threads_pushing_concurrently_come_out_in_timestamp_order_and_complete() {
        static REG: Registry<Ev> = Registry::new();
        static CLOCK: AtomicU64 = AtomicU64::new(10);
        let tick = || CLOCK.fetch_add(1, Ordering::SeqCst);
        let threads: Vec<_> = (0..4u32)
            .map(|t| {
                std::thread::spawn(move || {
                    let ring = REG.claim().unwrap();
                    for n in 0..20_000u32 {
                        loop {
                            let ts = ring.begin(tick);
                            if ring.push(Ev { ts, thread: t, n }).is_ok() {
                                break;
                            }
                            ring.end();
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let mut pending = Vec::new();
        let mut all = Vec::new();
        loop {
            let finished = threads.iter().all(|t| t.is_finished());
            // SAFETY: this test is the only collector.
            let wm = unsafe { REG.collect(&mut pending, None, tick) };
            let mut ready = Vec::new();
            release_below(&mut pending, wm, &mut ready);
            assert!(
                all.last()
                    .is_none_or(|l: &Ev| ready.first().is_none_or(|f| l.ts < f.ts)),
                "a later batch starts after the previous one"
            );
            all.extend(ready);
            if finished
                && pending.is_empty()
                && REG.rings[..REG.len()].iter().all(|r| {
                    // SAFETY: registered rings live for the process.
                    unsafe { &*r.load(Ordering::Acquire) }.is_empty()
                })
            {
                break;
            }
        }
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(all.len(), 4 * 20_000);
        assert!(all.windows(2).all(|w| w[0].ts < w[1].ts), "timestamp order");
        for t in 0..4 {
            let ns: Vec<u32> = all.iter().filter(|e| e.thread == t).map(|e| e.n).collect();
            assert_eq!(
                ns,
                (0..20_000).collect::<Vec<_>>(),
                "each thread's events, all, in order"
            );
        }
    }

    #[test]
    fn the_global_queue_takes_many_producers() {
        static Q: GlobalQueue<Ev> = GlobalQueue::new();
        let threads: Vec<_> = (0..4u32)
            .map(|t| {
                std::thread::spawn(move || {
                    for n in 0..200u32 {
                        let ts = Q.begin(|| 1000 + n as u64);
                        Q.push(Ev { ts, thread: t, n });
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let mut out = Vec::new();
        // SAFETY: single consumer.
        let wm = unsafe { Q.collect(&mut out) };
        assert_eq!(wm, u64::MAX);
        assert_eq!(out.len(), 800);
        assert_eq!(Q.dropped(), 0);
        let ts = Q.begin(|| 5);
        // SAFETY: single consumer.
        assert_eq!(unsafe { Q.collect(&mut out) }, 0, "a push in flight");
        Q.push(Ev {
            ts,
            thread: 9,
            n: 0,
        });
        for _ in 0..GLOBAL_CAP + 10 {
            let ts = Q.begin(|| 6);
            Q.push(Ev {
                ts,
                thread: 9,
                n: 1,
            });
        }
        // One pushed above plus CAP + 10 here: CAP fit, 11 are dropped and counted.
        assert_eq!(Q.dropped(), 11);
    }

    fn ev(n: u32) -> Ev {
        Ev {
            ts: n as u64,
            thread: 0,
            n,
        }
    }

    fn seqs<T: Stamped>(q: &GlobalQueue<T>) -> Vec<usize> {
        q.slots
            .iter()
            .map(|s| s.seq.load(Ordering::Relaxed))
            .collect()
    }

    #[test]
    fn a_forked_child_empties_the_global_queue_writing_only_the_slots_still_in_use() {
        let q: Box<GlobalQueue<Ev>> = Box::default();
        let mut out = Vec::new();
        // Past one turn of the queue, every event collected: the child has nothing to
        // forget, and writes no slot.
        for n in 0..(GLOBAL_CAP + 100) as u32 {
            q.begin(|| n as u64);
            q.push(ev(n));
            if n % 7 == 0 {
                // SAFETY: single consumer.
                unsafe { q.collect(&mut out) };
            }
        }
        // SAFETY: single consumer.
        unsafe { q.collect(&mut out) };
        assert_eq!(out.len(), GLOBAL_CAP + 100);
        let drained = seqs(&q);
        q.reset_in_child();
        assert_eq!(seqs(&q), drained, "a drained queue is left as it is");

        // Three events waiting, a push announced and in flight (never finished in the
        // child), and a position won by a producer that never published it: gone after
        // the reset, and the queue works as before (CAP fit again, then drops).
        for n in 0..3 {
            q.begin(|| n);
            q.push(ev(n as u32));
        }
        q.begin(|| 99);
        q.enqueue.fetch_add(1, Ordering::Relaxed);
        let before = seqs(&q);
        q.reset_in_child();
        let written = seqs(&q).iter().zip(&before).filter(|(a, b)| a != b).count();
        assert_eq!(written, 4, "only the 4 positions in use are written");
        out.clear();
        // SAFETY: single consumer.
        assert_eq!(
            unsafe { q.collect(&mut out) },
            u64::MAX,
            "no push in flight"
        );
        assert!(out.is_empty(), "{out:?}");
        let dropped = q.dropped();
        for n in 0..(GLOBAL_CAP + 5) as u32 {
            q.begin(|| n as u64);
            q.push(ev(n));
        }
        assert_eq!(q.dropped() - dropped, 5);
        // SAFETY: single consumer.
        unsafe { q.collect(&mut out) };
        assert_eq!(out.len(), GLOBAL_CAP);
        assert!(out.iter().enumerate().all(|(i, e)| e.n == i as u32));
    }

    #[test]
    fn a_forked_child_forgets_the_rings_registered() {
        let reg: Box<Registry<Ev>> = Box::default();
        let a = reg.claim().unwrap();
        let b = reg.claim().unwrap();
        assert!(!std::ptr::eq(a, b));
        assert_eq!(reg.len(), 2);
        reg.forget_all();
        assert!(reg.is_empty());
        assert!(reg
            .rings
            .iter()
            .all(|s| s.load(Ordering::Relaxed).is_null()));
        let c = reg.claim().unwrap();
        assert!(!std::ptr::eq(c, a) && !std::ptr::eq(c, b), "a new ring");
        assert_eq!(reg.len(), 1);
    }
}
