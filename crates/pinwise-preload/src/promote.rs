//! Lock-free tables behind in-place promotion.
//!
//! - [`PromotedTable`]: the ranges pinwise has registered (`cuMemHostRegister`) inside
//!   memory it does not own: the program's hot pageable buffers, and pinwise-served
//!   pageable allocations promoted because the program asked a pointer query about them.
//!   The `free`/`realloc`/`munmap` hooks read it without locks or thread-local storage;
//!   while it is empty they cost one atomic load ([`PromotedTable::any_active`]).
//!   A range a copy captured into a CUDA graph used is *held* ([`PromotedTable::hold`]):
//!   replaying the graph reads it later, so only the program giving the memory back (or
//!   registering those pages itself) unregisters it.
//! - [`PageableCopyCounters`]: per host pointer of the program's pageable copies, the saving
//!   pinning would have brought so far, so that a buffer is registered once its copies
//!   have paid for it (the ski-rental rule the allocator uses for its own mappings).
//!
//! - [`CopyGate`]: keeps pinwise from giving back a registration it made for the program
//!   (to make room, to release or merge it for another copy) while a copy may be using it.
//!
//! All are fixed-size atomics (usable in `static`s, reset in a forked child).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

/// Entries of the promoted table.
pub const PROMOTED_CAP: usize = 512;

const FREE: u8 = 0;
const CLAIMED: u8 = 1;
const ACTIVE: u8 = 2;
const DEMOTING: u8 = 3;

/// What a promoted range lies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Owner {
    /// A pageable buffer of the program (it frees it with `free`/`munmap`).
    Program = 0,
    /// A pageable allocation pinwise served for a pinned request (freed with
    /// `cuMemFreeHost`).
    Pinwise = 1,
}

/// One promoted range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Promoted {
    /// Who owns the memory.
    pub owner: Owner,
    /// The buffer's bytes as pinwise saw them used (copies' host range).
    pub user_start: usize,
    /// One past the last.
    pub user_end: usize,
    /// The registered, page-aligned range (what `cuMemHostUnregister` takes back).
    pub reg_start: usize,
    /// Its length.
    pub reg_len: usize,
    /// The CUDA context current when it was registered (made current again to unregister
    /// it from a thread without one).
    pub context: usize,
    /// Index + 1 of its [`PageableCopyCounters`] slot (0: none).
    pub counter: usize,
    /// Whether its bytes are reserved in the pinned budget (a registration the program's
    /// semantics required may have had to go over it).
    pub budgeted: bool,
}

#[derive(Default)]
struct Entry {
    state: AtomicU8,
    owner: AtomicU8,
    user_start: AtomicUsize,
    user_end: AtomicUsize,
    reg_start: AtomicUsize,
    reg_len: AtomicUsize,
    context: AtomicUsize,
    counter: AtomicUsize,
    budgeted: AtomicBool,
    /// Used by a captured copy (see [`PromotedTable::hold`]).
    held: AtomicBool,
    /// Copies that used the registration after the one that made it.
    uses: AtomicU32,
}

impl Entry {
    const fn new() -> Self {
        Entry {
            state: AtomicU8::new(FREE),
            owner: AtomicU8::new(0),
            user_start: AtomicUsize::new(0),
            user_end: AtomicUsize::new(0),
            reg_start: AtomicUsize::new(0),
            reg_len: AtomicUsize::new(0),
            context: AtomicUsize::new(0),
            counter: AtomicUsize::new(0),
            budgeted: AtomicBool::new(false),
            held: AtomicBool::new(false),
            uses: AtomicU32::new(0),
        }
    }

    fn read(&self) -> Promoted {
        Promoted {
            owner: if self.owner.load(Ordering::Relaxed) == Owner::Pinwise as u8 {
                Owner::Pinwise
            } else {
                Owner::Program
            },
            user_start: self.user_start.load(Ordering::Relaxed),
            user_end: self.user_end.load(Ordering::Relaxed),
            reg_start: self.reg_start.load(Ordering::Relaxed),
            reg_len: self.reg_len.load(Ordering::Relaxed),
            context: self.context.load(Ordering::Relaxed),
            counter: self.counter.load(Ordering::Relaxed),
            budgeted: self.budgeted.load(Ordering::Relaxed),
        }
    }
}

/// The registered ranges. See the module documentation.
pub struct PromotedTable {
    entries: [Entry; PROMOTED_CAP],
    /// Entries ever claimed: readers scan only `entries[..high_water]`.
    high_water: AtomicUsize,
    /// Entries ACTIVE now.
    active: AtomicUsize,
}

impl Default for PromotedTable {
    fn default() -> Self {
        Self::new()
    }
}

impl PromotedTable {
    /// An empty table (usable in a `static`).
    pub const fn new() -> Self {
        PromotedTable {
            entries: [const { Entry::new() }; PROMOTED_CAP],
            high_water: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
        }
    }

    /// Whether any range is registered now: the only cost of the `free` hook otherwise.
    #[inline]
    pub fn any_active(&self) -> bool {
        self.active.load(Ordering::Acquire) != 0
    }

    /// Ranges registered now.
    pub fn active_count(&self) -> usize {
        self.active.load(Ordering::Acquire)
    }

    fn scan(&self) -> impl Iterator<Item = (usize, &Entry)> {
        let n = self.high_water.load(Ordering::Acquire).min(PROMOTED_CAP);
        self.entries[..n].iter().enumerate()
    }

    /// Reserves an entry for `p` before registering it. `None` when the table is full or an
    /// entry being registered or registered overlaps `p`'s registered range (registering
    /// the same pages twice fails; the caller stays pageable).
    pub fn claim(&self, p: Promoted) -> Option<usize> {
        let (start, end) = (p.reg_start, p.reg_start + p.reg_len);
        let overlaps = self.scan().any(|(_, e)| {
            let s = e.state.load(Ordering::Acquire);
            (s == CLAIMED || s == ACTIVE || s == DEMOTING) && {
                let rs = e.reg_start.load(Ordering::Relaxed);
                rs < end && start < rs + e.reg_len.load(Ordering::Relaxed)
            }
        });
        if overlaps {
            return None;
        }
        for (i, e) in self.entries.iter().enumerate() {
            if e.state.load(Ordering::Acquire) != FREE {
                continue;
            }
            // Raised before the entry is taken, so that every entry not free lies below it
            // (a forked child frees only those: see `forget_all`).
            self.high_water.fetch_max(i + 1, Ordering::AcqRel);
            if e.state
                .compare_exchange(FREE, CLAIMED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                e.owner.store(p.owner as u8, Ordering::Relaxed);
                e.user_start.store(p.user_start, Ordering::Relaxed);
                e.user_end.store(p.user_end, Ordering::Relaxed);
                e.reg_start.store(p.reg_start, Ordering::Relaxed);
                e.reg_len.store(p.reg_len, Ordering::Relaxed);
                e.context.store(p.context, Ordering::Relaxed);
                e.counter.store(p.counter, Ordering::Relaxed);
                e.budgeted.store(p.budgeted, Ordering::Relaxed);
                e.held.store(false, Ordering::Relaxed);
                e.uses.store(0, Ordering::Relaxed);
                return Some(i);
            }
        }
        None
    }

    /// The claimed entry `i` is registered: readers see it from now on.
    pub fn activate(&self, i: usize) {
        self.entries[i].state.store(ACTIVE, Ordering::Release);
        self.active.fetch_add(1, Ordering::AcqRel);
    }

    /// The claimed entry `i` could not be registered: frees it.
    pub fn abandon(&self, i: usize) {
        self.entries[i].state.store(FREE, Ordering::Release);
    }

    /// Takes entry `i` for unregistering; `None` if another thread took it first or it is
    /// not registered. Readers no longer see it.
    pub fn begin_demote(&self, i: usize) -> Option<Promoted> {
        let e = &self.entries[i];
        e.state
            .compare_exchange(ACTIVE, DEMOTING, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        self.active.fetch_sub(1, Ordering::AcqRel);
        Some(e.read())
    }

    /// The demoted entry `i` is unregistered: frees it.
    pub fn finish_demote(&self, i: usize) {
        self.entries[i].state.store(FREE, Ordering::Release);
    }

    fn first_active(&self, mut pred: impl FnMut(&Entry) -> bool) -> Option<usize> {
        if !self.any_active() {
            return None;
        }
        self.scan()
            .find(|(_, e)| e.state.load(Ordering::Acquire) == ACTIVE && pred(e))
            .map(|(i, _)| i)
    }

    /// Whether an entry being registered, registered, or being unregistered overlaps
    /// `[addr, addr + len)` with its registered pages: a copy of that memory may reach the
    /// driver while it is registered. Nothing to scan while nothing was ever claimed.
    pub fn busy_overlapping(&self, addr: usize, len: usize) -> bool {
        let end = addr.saturating_add(len);
        self.scan().any(|(_, e)| {
            e.state.load(Ordering::Acquire) != FREE && {
                let rs = e.reg_start.load(Ordering::Relaxed);
                rs < end && addr < rs + e.reg_len.load(Ordering::Relaxed)
            }
        })
    }

    /// A registered entry whose registered range holds all of `[addr, addr + len)`.
    pub fn covering(&self, addr: usize, len: usize) -> Option<usize> {
        let end = addr.saturating_add(len.max(1));
        self.first_active(|e| {
            let rs = e.reg_start.load(Ordering::Relaxed);
            rs <= addr && end <= rs + e.reg_len.load(Ordering::Relaxed)
        })
    }

    /// A registered entry of `owner` whose used range overlaps `[start, end)`.
    pub fn overlapping_used(&self, owner: Owner, start: usize, end: usize) -> Option<usize> {
        self.first_active(|e| {
            e.owner.load(Ordering::Relaxed) == owner as u8
                && e.user_start.load(Ordering::Relaxed) < end
                && start < e.user_end.load(Ordering::Relaxed)
        })
    }

    /// A registered entry whose registered pages overlap `[start, end)`.
    pub fn overlapping_registered(&self, start: usize, end: usize) -> Option<usize> {
        self.first_active(|e| {
            let rs = e.reg_start.load(Ordering::Relaxed);
            rs < end && start < rs + e.reg_len.load(Ordering::Relaxed)
        })
    }

    /// [`Self::overlapping_registered`], leaving out held entries: what pinwise may give
    /// back on its own account (not because the program released the memory).
    pub fn overlapping_releasable(&self, start: usize, end: usize) -> Option<usize> {
        self.first_active(|e| {
            let rs = e.reg_start.load(Ordering::Relaxed);
            !e.held.load(Ordering::Acquire)
                && rs < end
                && start < rs + e.reg_len.load(Ordering::Relaxed)
        })
    }

    /// A registered entry of `owner` that is not held: what pinwise may give back on its own
    /// account to make room (see `Pinning::make_room`).
    pub fn releasable_of(&self, owner: Owner) -> Option<usize> {
        self.first_active(|e| {
            !e.held.load(Ordering::Acquire) && e.owner.load(Ordering::Relaxed) == owner as u8
        })
    }

    /// The sum of `f(range, copies that used it)` over the ranges registered now.
    pub fn sum_active(&self, mut f: impl FnMut(&Promoted, u32) -> u64) -> u64 {
        if !self.any_active() {
            return 0;
        }
        self.scan()
            .filter(|(_, e)| e.state.load(Ordering::Acquire) == ACTIVE)
            .map(|(_, e)| f(&e.read(), e.uses.load(Ordering::Relaxed)))
            .fold(0u64, u64::saturating_add)
    }

    /// Entry `i` was read or written by a copy captured into a CUDA graph: a replay of the
    /// graph uses the memory as it was registered then, so the registration stays until
    /// the program frees, reallocates, unmaps or registers that memory itself.
    pub fn hold(&self, i: usize) {
        self.entries[i].held.store(true, Ordering::Release);
    }

    /// Counts a copy that used entry `i`'s registration.
    #[inline]
    pub fn note_use(&self, i: usize) {
        self.entries[i].uses.fetch_add(1, Ordering::Relaxed);
    }

    /// Copies that used entry `i`'s registration after the one that made it.
    pub fn uses(&self, i: usize) -> u32 {
        self.entries[i].uses.load(Ordering::Relaxed)
    }

    /// Whether entry `i` is held ([`Self::hold`]).
    pub fn is_held(&self, i: usize) -> bool {
        self.entries[i].held.load(Ordering::Acquire)
    }

    /// The entry `i` as it is now.
    pub fn get(&self, i: usize) -> Promoted {
        self.entries[i].read()
    }

    /// Forgets everything (a forked child: the registrations belong to the parent). Only
    /// entries below `high_water` can be taken (`claim` raises it first), and only those
    /// not free are written: each page written is a page fault in every forked child.
    pub fn forget_all(&self) {
        let n = self.high_water.load(Ordering::Acquire).min(PROMOTED_CAP);
        for e in &self.entries[..n] {
            if e.state.load(Ordering::Relaxed) != FREE {
                e.state.store(FREE, Ordering::Relaxed);
            }
        }
        self.active.store(0, Ordering::Release);
        self.high_water.store(0, Ordering::Release);
    }
}

/// How long a copy waits for an overlapping demotion, and a demotion for the overlapping
/// copies in flight, before it goes on anyway (counted in [`CopyGate::overruns`]): a
/// demotion is one `cuMemHostUnregister`.
const GATE_WAIT_NS: u64 = 1_000_000_000;

/// Copies in flight the gate tells apart by range; more at once count as spanning the
/// whole address space (conservative: every demotion waits for them).
const COPY_SLOTS: usize = 128;
/// Demotions under way the gate tells apart by range; more at once count as spanning the
/// whole address space (every copy that may use a registration waits for them).
const DEMOTION_SLOTS: usize = 16;

/// One published range `[start, end)`; `end == 0`: none.
struct RangeSlot {
    claimed: AtomicBool,
    start: AtomicUsize,
    end: AtomicUsize,
}

impl RangeSlot {
    const fn new() -> Self {
        RangeSlot {
            claimed: AtomicBool::new(false),
            start: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
        }
    }
}

/// Where a published range lies: its slot, or the overflow count (all slots taken).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Published {
    Slot(usize),
    Everything,
}

/// Ranges published by the threads of one side of the gate (copies, or demotions), in a
/// fixed array of slots; one published when all are taken counts as the whole address
/// space. Every access to what the other side reads is `SeqCst` (see [`CopyGate`]).
struct RangeSet<const N: usize> {
    slots: [RangeSlot; N],
    /// Ranges published now, slots or not: a reader with none to see skips the scan.
    published: AtomicUsize,
    /// Ranges published without a slot (each spans everything).
    everything: AtomicUsize,
}

impl<const N: usize> RangeSet<N> {
    const fn new() -> Self {
        RangeSet {
            slots: [const { RangeSlot::new() }; N],
            published: AtomicUsize::new(0),
            everything: AtomicUsize::new(0),
        }
    }

    /// Publishes `[start, end)` (`end > start`), probing from slot `hint`.
    fn publish(&self, start: usize, end: usize, hint: usize) -> Published {
        self.published.fetch_add(1, Ordering::SeqCst);
        for k in 0..N {
            let i = (hint + k) % N;
            let slot = &self.slots[i];
            if slot
                .claimed
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                // `start` before `end`: a reader that sees this `end` sees this `start`.
                slot.start.store(start, Ordering::SeqCst);
                slot.end
                    .store(end.max(start.saturating_add(1)), Ordering::SeqCst);
                return Published::Slot(i);
            }
        }
        self.everything.fetch_add(1, Ordering::SeqCst);
        Published::Everything
    }

    fn withdraw(&self, p: Published) {
        match p {
            Published::Slot(i) => {
                let slot = &self.slots[i];
                slot.end.store(0, Ordering::SeqCst);
                slot.claimed.store(false, Ordering::Release);
            }
            Published::Everything => {
                self.everything.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.published.fetch_sub(1, Ordering::SeqCst);
    }

    /// Whether a published range overlaps `[start, end)`. A slot withdrawn and published
    /// again while it is read may be seen with the new start and the old end: the range it
    /// stood for is no longer published, and the new one's publisher reads the other side
    /// itself after publishing.
    fn overlaps(&self, start: usize, end: usize) -> bool {
        if self.published.load(Ordering::SeqCst) == 0 {
            return false;
        }
        if self.everything.load(Ordering::SeqCst) > 0 {
            return true;
        }
        let end = end.max(start.saturating_add(1));
        self.slots.iter().any(|slot| {
            let e = slot.end.load(Ordering::SeqCst);
            e != 0 && start < e && slot.start.load(Ordering::SeqCst) < end
        })
    }

    fn reset(&self) {
        // Only slots in use are written (a forked child: each page written is a fault).
        for slot in &self.slots {
            if slot.end.load(Ordering::SeqCst) != 0 {
                slot.end.store(0, Ordering::SeqCst);
            }
            if slot.claimed.load(Ordering::SeqCst) {
                slot.claimed.store(false, Ordering::SeqCst);
            }
        }
        self.everything.store(0, Ordering::SeqCst);
        self.published.store(0, Ordering::SeqCst);
    }
}

/// Keeps pinwise from unregistering, on its own account (every path through
/// [`crate::pinning::Pinning::give_back`]: making room, releasing a registration another
/// copy runs past, merging neighbours), a buffer of the program's that a copy in flight may
/// be reading or writing through its registration: `cuMemHostUnregister` is not documented
/// to wait for the DMA. The program's own release of the memory (free, unmap, its own
/// registration of those pages) does not pass the gate: using memory it releases is the
/// program's own race.
///
/// Per range: a copy publishes its host range, a demotion the registered pages it gives
/// back, and each meets only the other side's ranges that overlap its own; a copy of other
/// memory neither waits for a demotion nor holds one up. A Dekker handshake, every access
/// `SeqCst`: a copier publishes its range and then reads the demotions'; a demoter
/// publishes its range and then reads the copies'. So of a copy and a demotion that
/// overlap, either the demoter sees the copy and gives up (the ceiling is exceeded for now,
/// counted) or waits for it to finish ([`CopyGate::begin_demotion_waiting`]), or the
/// copier sees the demotion, withdraws its range and waits for the demotion to finish
/// (then the driver sees the buffer pageable, which plain CUDA copies correctly). A
/// waiting demotion stays published, so copies of its pages that arrive meanwhile wait
/// behind it instead of starving it. Neither blocks for long: each waits at most
/// [`GATE_WAIT_NS`], and every wait is counted ([`CopyGate::waits`]).
pub struct CopyGate {
    copies: RangeSet<COPY_SLOTS>,
    demotions: RangeSet<DEMOTION_SLOTS>,
    copy_waits: AtomicU64,
    demotion_waits: AtomicU64,
    overruns: AtomicU64,
}

/// The one gate of the process.
pub static COPY_GATE: CopyGate = CopyGate::new();

/// A copy in flight ([`CopyGate::enter`]); dropping it ends the copy.
#[must_use = "the copy is in flight only while the guard lives"]
pub struct InFlight<'a>(&'a CopyGate, Published);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.copies.withdraw(self.1);
    }
}

/// A demotion the gate let in ([`CopyGate::try_begin_demotion`]); dropping it ends it.
#[must_use = "the demotion is let in only while the guard lives"]
pub struct Demotion<'a>(&'a CopyGate, Published);

impl Drop for Demotion<'_> {
    fn drop(&mut self) {
        self.0.demotions.withdraw(self.1);
    }
}

impl CopyGate {
    /// No copy in flight, no demotion under way.
    pub const fn new() -> Self {
        Self {
            copies: RangeSet::new(),
            demotions: RangeSet::new(),
            copy_waits: AtomicU64::new(0),
            demotion_waits: AtomicU64::new(0),
            overruns: AtomicU64::new(0),
        }
    }

    /// A copy of host memory `[start, end)` that may use a registration pinwise made for
    /// the program is about to be issued: waits (up to [`GATE_WAIT_NS`]) for a demotion of
    /// pages it overlaps, and keeps new ones off those pages until the guard is dropped.
    /// While it waits its range is withdrawn, so that a demotion waiting for the copies in
    /// flight is not held up by copies that arrive after it.
    pub fn enter(&self, start: usize, end: usize) -> InFlight<'_> {
        let mut published = self.copies.publish(start, end, start >> 12);
        if !self.demotions.overlaps(start, end) {
            return InFlight(self, published);
        }
        self.copy_waits.fetch_add(1, Ordering::Relaxed);
        let since = pinwise_core::units::monotonic_ns();
        loop {
            self.copies.withdraw(published);
            while self.demotions.overlaps(start, end) {
                if pinwise_core::units::monotonic_ns().saturating_sub(since) > GATE_WAIT_NS {
                    self.overruns.fetch_add(1, Ordering::Relaxed);
                    return InFlight(self, self.copies.publish(start, end, start >> 12));
                }
                std::thread::yield_now();
            }
            published = self.copies.publish(start, end, start >> 12);
            if !self.demotions.overlaps(start, end) {
                return InFlight(self, published);
            }
        }
    }

    /// Claims the right to unregister pages `[start, end)`: `None` (and nothing claimed)
    /// while a copy that overlaps them is in flight.
    pub fn try_begin_demotion(&self, start: usize, end: usize) -> Option<Demotion<'_>> {
        let published = self.demotions.publish(start, end, start >> 12);
        if !self.copies.overlaps(start, end) {
            return Some(Demotion(self, published));
        }
        self.demotions.withdraw(published);
        None
    }

    /// Claims the right to unregister pages `[start, end)`, waiting (up to
    /// [`GATE_WAIT_NS`]) for the copies in flight that overlap them to finish: for a
    /// demotion that cannot be put off (a copy that runs past a registration is refused by
    /// the driver unless it is given back first). Copies of other memory neither hold it
    /// up nor are held up; copies of those pages that arrive meanwhile wait for it (so a
    /// stream of them cannot starve it). `None` when the copies in flight kept those pages
    /// busy for the whole wait (counted in [`Self::overruns`]; the caller demotes anyway,
    /// as before the gate).
    pub fn begin_demotion_waiting(&self, start: usize, end: usize) -> Option<Demotion<'_>> {
        let published = self.demotions.publish(start, end, start >> 12);
        if !self.copies.overlaps(start, end) {
            return Some(Demotion(self, published));
        }
        self.demotion_waits.fetch_add(1, Ordering::Relaxed);
        let since = pinwise_core::units::monotonic_ns();
        loop {
            std::thread::yield_now();
            if !self.copies.overlaps(start, end) {
                return Some(Demotion(self, published));
            }
            if pinwise_core::units::monotonic_ns().saturating_sub(since) > GATE_WAIT_NS {
                self.overruns.fetch_add(1, Ordering::Relaxed);
                self.demotions.withdraw(published);
                return None;
            }
        }
    }

    /// Copies that waited for an overlapping demotion, and demotions that waited for
    /// overlapping copies (however briefly).
    pub fn waits(&self) -> u64 {
        self.copy_waits.load(Ordering::Relaxed) + self.demotion_waits.load(Ordering::Relaxed)
    }

    /// Copies that stopped waiting for a demotion, and demotions that stopped waiting for
    /// copies, after [`GATE_WAIT_NS`], and went on.
    pub fn overruns(&self) -> u64 {
        self.overruns.load(Ordering::Relaxed)
    }

    /// Forgets copies and demotions under way (a forked child: only the forking thread
    /// lives on, and it is in none).
    pub fn reset(&self) {
        self.copies.reset();
        self.demotions.reset();
    }
}

impl Default for CopyGate {
    fn default() -> Self {
        Self::new()
    }
}

/// Slots of the transfer counters (a power of two).
pub const COUNTERS_CAP: usize = 4096;
/// Slots probed before giving up on a key.
const PROBES: usize = 32;

/// Still learning.
pub const TRACKING: u8 = 0;
/// Registered (the promoted table has it).
pub const PROMOTED: u8 = 1;
/// Never to be registered (registration failed, or was refused).
pub const NEVER: u8 = 2;

/// What pinwise learned about the copies from one host pointer of the program.
#[derive(Default)]
pub struct Counter {
    key: AtomicUsize,
    state: AtomicU8,
    /// Predicted saving of the copies seen (ns).
    saved_ns: AtomicU64,
    /// Copies seen that save anything.
    copies: AtomicU32,
    /// (bytes << 2 | direction) of the last saving computed, and that saving (ns).
    cached_key: AtomicU64,
    cached_saving: AtomicU64,
    /// The span the cached threshold is for, and the threshold (ns).
    threshold_span: AtomicUsize,
    threshold_ns: AtomicU64,
    /// Doublings of the evidence a promotion at this address needs (see
    /// [`Counter::judge_promotion`]).
    penalty: AtomicU8,
}

impl Counter {
    const fn new() -> Self {
        Counter {
            key: AtomicUsize::new(0),
            state: AtomicU8::new(TRACKING),
            saved_ns: AtomicU64::new(0),
            copies: AtomicU32::new(0),
            cached_key: AtomicU64::new(0),
            cached_saving: AtomicU64::new(0),
            threshold_span: AtomicUsize::new(0),
            threshold_ns: AtomicU64::new(0),
            penalty: AtomicU8::new(0),
        }
    }

    /// The saving a registration of `span` bytes must be paid by (ns), from the cache when
    /// the span is the same as last time, else from `compute` (then cached).
    pub fn threshold(&self, span: usize, compute: impl FnOnce() -> u64) -> u64 {
        if self.threshold_span.load(Ordering::Acquire) == span {
            return self.threshold_ns.load(Ordering::Relaxed);
        }
        let t = compute();
        self.threshold_ns.store(t, Ordering::Relaxed);
        self.threshold_span.store(span, Ordering::Release);
        t
    }

    /// The saving of the last copy noted (ns; 0 before any).
    pub fn last_saving(&self) -> u64 {
        if self.cached_key.load(Ordering::Acquire) == 0 {
            return 0;
        }
        self.cached_saving.load(Ordering::Relaxed)
    }

    /// `TRACKING`, `PROMOTED` or `NEVER`.
    pub fn state(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }

    /// Sets the state.
    pub fn set_state(&self, s: u8) {
        self.state.store(s, Ordering::Release);
    }

    /// Notes one copy saving `saving_ns` if pinned; returns the total saving so far.
    ///
    /// Only the saving is kept, not the spans of earlier copies: the buffer now at this
    /// address may be smaller than an earlier one was, so only the copy at hand tells which
    /// bytes are the program's buffer.
    pub fn note(&self, saving_ns: u64) -> u64 {
        if saving_ns == 0 {
            self.saved_ns.load(Ordering::Relaxed)
        } else {
            self.copies.fetch_add(1, Ordering::Relaxed);
            self.saved_ns
                .fetch_add(saving_ns, Ordering::Relaxed)
                .saturating_add(saving_ns)
        }
    }

    /// The saving of a copy of `bytes` in direction `dir`, from the cache when the last
    /// copy was the same, else from `compute` (which is then cached).
    pub fn saving(&self, bytes: u64, dir: u8, compute: impl FnOnce() -> u64) -> u64 {
        let key = (bytes << 2 | u64::from(dir & 3)) | (1 << 63);
        if self.cached_key.load(Ordering::Acquire) == key {
            return self.cached_saving.load(Ordering::Relaxed);
        }
        let s = compute();
        self.cached_saving.store(s, Ordering::Relaxed);
        self.cached_key.store(key, Ordering::Release);
        s
    }

    /// Copies noted that saved anything, since the last [`Counter::reset`].
    pub fn copies(&self) -> u32 {
        self.copies.load(Ordering::Relaxed)
    }

    /// Starts learning again (the buffer at this address was freed).
    pub fn reset(&self) {
        self.saved_ns.store(0, Ordering::Relaxed);
        self.copies.store(0, Ordering::Relaxed);
        self.set_state(TRACKING);
    }

    /// The saving a promotion at this address must exceed: `threshold` (the registration's
    /// cost times the payback factor) doubled once per promotion here that did not pay.
    pub fn required(&self, threshold: u64) -> u64 {
        threshold.saturating_mul(1 << self.penalty.load(Ordering::Relaxed))
    }

    /// Learns from a registration given back after `uses` copies used it (besides the one
    /// that made it): one that served fewer than [`PAID_USES`] did not pay for its
    /// registration and unregistration (a buffer allocated, copied once and freed, again
    /// and again at the same address), and the next promotion here needs twice the
    /// evidence (at most 2^[`MAX_PENALTY`] times); one that served more clears the penalty.
    pub fn judge_promotion(&self, uses: u32) {
        let _ = self
            .penalty
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |p| {
                Some(if uses < PAID_USES {
                    (p + 1).min(MAX_PENALTY)
                } else {
                    0
                })
            });
    }
}

/// Copies (after the promoting one) a registration must serve to count as having paid.
pub const PAID_USES: u32 = 2;
/// The most doublings of [`Counter::required`].
pub const MAX_PENALTY: u8 = 6;

/// Per host pointer counters of pageable copies. See the module documentation.
pub struct PageableCopyCounters {
    slots: [Counter; COUNTERS_CAP],
    /// Keys refused because their probe sequence was full.
    refused: AtomicU64,
    /// Bit `g` set: a key was put in a slot of group `g` (slots `g * GROUP..(g + 1) *
    /// GROUP`; set before the key is).
    keyed_groups: AtomicU64,
}

/// Slots of one bit of [`PageableCopyCounters::keyed_groups`] (a page of counters or so).
const GROUP: usize = COUNTERS_CAP / 64;

impl Default for PageableCopyCounters {
    fn default() -> Self {
        Self::new()
    }
}

impl PageableCopyCounters {
    /// An empty table (usable in a `static`).
    pub const fn new() -> Self {
        PageableCopyCounters {
            slots: [const { Counter::new() }; COUNTERS_CAP],
            refused: AtomicU64::new(0),
            keyed_groups: AtomicU64::new(0),
        }
    }

    /// The slot of `key` (a host pointer, not 0), inserting it if new. `None` when the
    /// table has no room near the key's hash (counted).
    pub fn slot(&self, key: usize) -> Option<usize> {
        debug_assert_ne!(key, 0);
        let h = (key as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52;
        for probe in 0..PROBES {
            let i = (h as usize + probe) & (COUNTERS_CAP - 1);
            let k = self.slots[i].key.load(Ordering::Acquire);
            if k == key {
                return Some(i);
            }
            if k == 0 {
                let bit = 1u64 << (i / GROUP);
                if self.keyed_groups.load(Ordering::Relaxed) & bit == 0 {
                    self.keyed_groups.fetch_or(bit, Ordering::AcqRel);
                }
                match self.slots[i].key.compare_exchange(
                    0,
                    key,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return Some(i),
                    Err(other) if other == key => return Some(i),
                    Err(_) => continue,
                }
            }
        }
        self.refused.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// Slot `i`.
    pub fn get(&self, i: usize) -> &Counter {
        &self.slots[i]
    }

    /// Keys refused for lack of room.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Forgets everything (a forked child). A slot is written to only through a key
    /// [`PageableCopyCounters::slot`] put in it, so the slots without a key are as new: they
    /// are not written (each page written is a page fault in every forked child), nor looked
    /// at in groups no key was ever put in.
    pub fn forget_all(&self) {
        let groups = self.keyed_groups.load(Ordering::Acquire);
        for (i, c) in self.slots.iter().enumerate() {
            if groups & (1u64 << (i / GROUP)) == 0 || c.key.load(Ordering::Relaxed) == 0 {
                continue;
            }
            c.key.store(0, Ordering::Relaxed);
            c.reset();
            c.penalty.store(0, Ordering::Relaxed);
            c.cached_key.store(0, Ordering::Relaxed);
            c.threshold_span.store(0, Ordering::Relaxed);
        }
        self.keyed_groups.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(user: (usize, usize), reg: (usize, usize)) -> Promoted {
        Promoted {
            owner: Owner::Program,
            user_start: user.0,
            user_end: user.1,
            reg_start: reg.0,
            reg_len: reg.1 - reg.0,
            context: 0,
            counter: 0,
            budgeted: true,
        }
    }

    #[test]
    fn promotions_that_did_not_pay_raise_the_evidence_needed_and_one_that_paid_clears_it() {
        let c = Counter::new();
        assert_eq!(c.required(1000), 1000);
        // Allocated, copied once (the promoting copy), freed: did not pay.
        c.judge_promotion(0);
        assert_eq!(c.required(1000), 2000);
        c.judge_promotion(PAID_USES - 1);
        assert_eq!(c.required(1000), 4000);
        for _ in 0..20 {
            c.judge_promotion(0);
        }
        assert_eq!(c.required(1000), 1000 << MAX_PENALTY, "bounded");
        c.reset();
        assert_eq!(
            c.required(1000),
            1000 << MAX_PENALTY,
            "reset keeps what was learned"
        );
        c.judge_promotion(PAID_USES);
        assert_eq!(c.required(1000), 1000);
    }

    #[test]
    fn uses_of_a_registration_are_counted_from_its_claim() {
        let t = PromotedTable::new();
        let i = t
            .claim(range((0x10000, 0x12000), (0x10000, 0x12000)))
            .unwrap();
        t.activate(i);
        t.note_use(i);
        t.note_use(i);
        assert_eq!(t.uses(i), 2);
        assert!(t.begin_demote(i).is_some());
        assert_eq!(t.uses(i), 2, "readable while being demoted");
        t.finish_demote(i);
        let j = t
            .claim(range((0x10000, 0x12000), (0x10000, 0x12000)))
            .unwrap();
        assert_eq!(t.uses(j), 0, "a new registration starts at 0");
    }

    #[test]
    fn promoted_ranges_are_found_only_while_active() {
        let t = PromotedTable::new();
        assert!(!t.any_active());
        let i = t.claim(range((0x1010, 0x3010), (0x1000, 0x4000))).unwrap();
        assert!(!t.any_active(), "claimed is not yet registered");
        assert_eq!(t.covering(0x1010, 16), None);
        assert_eq!(
            t.claim(range((0x3800, 0x3900), (0x3000, 0x4000))),
            None,
            "overlapping pages are refused while one is being registered"
        );
        t.activate(i);
        assert!(t.any_active());
        assert_eq!(t.covering(0x1010, 0x2000), Some(i));
        assert_eq!(
            t.covering(0x3f00, 0x200),
            None,
            "runs past the registered pages"
        );
        assert_eq!(t.overlapping_used(Owner::Program, 0x3000, 0x3008), Some(i));
        assert_eq!(t.overlapping_used(Owner::Program, 0x3010, 0x3020), None);
        assert_eq!(t.overlapping_used(Owner::Pinwise, 0x1000, 0x2000), None);
        assert_eq!(t.overlapping_registered(0x3fff, 0x5000), Some(i));
        assert_eq!(t.covering(0x1000, 1), Some(i));
        assert_eq!(t.covering(0x3fff, 1), Some(i));
        assert_eq!(t.covering(0x4000, 1), None);
        assert_eq!(t.overlapping_releasable(0x3fff, 0x5000), Some(i));
        assert!(!t.is_held(i));
        t.hold(i);
        assert!(t.is_held(i));
        assert_eq!(
            t.overlapping_releasable(0x3fff, 0x5000),
            None,
            "a held range is not pinwise's to give back"
        );
        assert_eq!(t.overlapping_registered(0x3fff, 0x5000), Some(i));
        assert!(t.busy_overlapping(0x3fff, 1));
        assert!(!t.busy_overlapping(0x4000, 0x1000));
        let p = t.begin_demote(i).unwrap();
        assert!(
            t.busy_overlapping(0x1000, 1),
            "being unregistered: still busy for a copy"
        );
        assert_eq!(t.covering(0x1000, 1), None, "but covers no copy");
        assert_eq!(p.reg_start, 0x1000);
        assert!(t.begin_demote(i).is_none(), "one demoter only");
        assert!(!t.any_active());
        t.finish_demote(i);
        let j = t.claim(range((0x3800, 0x3900), (0x3000, 0x4000))).unwrap();
        assert!(!t.is_held(j), "a new claim is not held");
        t.abandon(j);
        t.forget_all();
        assert_eq!(t.active_count(), 0);
    }

    #[test]
    fn counters_accumulate_and_cache() {
        let c = PageableCopyCounters::new();
        let i = c.slot(0x7000_1000).unwrap();
        assert_eq!(c.slot(0x7000_1000), Some(i));
        let k = c.get(i);
        let mut computed = 0;
        for _ in 0..3 {
            let s = k.saving(1 << 20, 0, || {
                computed += 1;
                500
            });
            k.note(s);
        }
        assert_eq!(computed, 1, "the same copy's saving is computed once");
        assert_eq!(k.note(0), 1500);
        assert_eq!(k.copies(), 3, "a copy that saves nothing is not counted");
        k.set_state(PROMOTED);
        k.reset();
        assert_eq!(k.state(), TRACKING);
        assert_eq!(k.note(1), 1);
        assert_eq!(k.copies(), 1);
        let mut computed = 0;
        for _ in 0..2 {
            assert_eq!(
                k.threshold(8192, || {
                    computed += 1;
                    77
                }),
                77
            );
        }
        assert_eq!(computed, 1);
        assert_eq!(k.threshold(4096, || 5), 5);
    }

    #[test]
    fn counters_refuse_when_crowded_instead_of_looping() {
        let c = PageableCopyCounters::new();
        let mut refused = 0;
        for key in 1..=(COUNTERS_CAP + 100) {
            if c.slot(key * 4096).is_none() {
                refused += 1;
            }
        }
        assert!(refused >= 100);
        assert_eq!(c.refused(), refused as u64);
    }

    /// Pages `[A, A + 1 MiB)` and, far from them, `[B, B + 1 MiB)`.
    const A: usize = 0x7f00_0000_0000;
    const B: usize = 0x7f40_0000_0000;
    const MB: usize = 1 << 20;

    #[test]
    fn the_gate_refuses_a_demotion_while_an_overlapping_copy_is_in_flight_and_allows_one_after() {
        let g = CopyGate::new();
        drop(g.try_begin_demotion(A, A + MB).expect("no copy in flight"));
        let copy = g.enter(A + 4096, A + 8192);
        assert!(
            g.try_begin_demotion(A, A + MB).is_none(),
            "a copy is in flight"
        );
        assert!(
            !g.demotions.overlaps(0, usize::MAX),
            "a refused demotion claims nothing"
        );
        let other = g.enter(A + MB - 1, A + 2 * MB);
        drop(copy);
        assert!(
            g.try_begin_demotion(A, A + MB).is_none(),
            "another copy of those pages is still in flight"
        );
        drop(g.try_begin_demotion(B, B + MB).expect("not of these pages"));
        drop(other);
        assert!(!g.copies.overlaps(0, usize::MAX), "every copy let go");
        drop(g.try_begin_demotion(A, A + MB).expect("no copy left"));
        assert_eq!((g.overruns(), g.waits()), (0, 0));
    }

    #[test]
    fn a_copy_waits_for_an_overlapping_demotion_under_way_but_not_forever() {
        let g = CopyGate::new();
        let demotion = g.try_begin_demotion(A, A + MB).unwrap();
        let t0 = pinwise_core::units::monotonic_ns();
        let copy = g.enter(A, A + 64);
        assert!(
            pinwise_core::units::monotonic_ns() - t0 >= GATE_WAIT_NS,
            "it waited for the demotion"
        );
        assert_eq!(g.overruns(), 1, "and counted that it gave up");
        assert_eq!(g.waits(), 1);
        drop(copy);
        drop(demotion);
        g.reset();
        drop(g.try_begin_demotion(A, A + MB).unwrap());
    }

    #[test]
    fn a_copy_of_other_memory_neither_waits_for_a_demotion_nor_holds_one_up() {
        use std::sync::Arc;
        let g = Arc::new(CopyGate::new());
        // A demotion of A's pages under way on another thread...
        let (began_tx, began_rx) = std::sync::mpsc::channel();
        let (end_tx, end_rx) = std::sync::mpsc::channel::<()>();
        let demoter = {
            let g = g.clone();
            std::thread::spawn(move || {
                let demotion = g.try_begin_demotion(A, A + MB);
                let began = demotion.is_some();
                began_tx.send(began).unwrap();
                end_rx.recv().unwrap();
                drop(demotion);
            })
        };
        assert!(began_rx.recv().unwrap(), "no copy was in flight");
        assert!(g.demotions.overlaps(A, A + 1), "the demotion is under way");
        // ...and a copy of B's pages on this one: it does not wait.
        let copy = g.enter(B, B + MB);
        assert_eq!(g.waits(), 0, "the copy of other memory waited");
        assert_eq!(g.overruns(), 0);
        end_tx.send(()).unwrap();
        demoter.join().unwrap();
        // While it is in flight, the next demotion of A's pages goes at once.
        let next = g
            .begin_demotion_waiting(A, A + MB)
            .expect("a copy of other memory does not hold a demotion up");
        assert_eq!(
            g.waits(),
            0,
            "the demotion waited for a copy of other memory"
        );
        drop(next);
        // An overlapping copy does hold it up: the demoter on another thread waits (counted)
        // and goes once the copy is done.
        let overlapping = g.enter(A + MB - 64, A + MB + 64);
        let demoter = {
            let g = g.clone();
            std::thread::spawn(move || g.begin_demotion_waiting(A, A + MB).is_some())
        };
        while g.waits() == 0 {
            std::thread::yield_now();
        }
        drop(overlapping);
        assert!(demoter.join().unwrap(), "it began once the copy was done");
        assert_eq!(g.waits(), 1);
        assert_eq!(g.overruns(), 0);
        drop(copy);
        assert!(!g.copies.overlaps(0, usize::MAX));
        assert!(!g.demotions.overlaps(0, usize::MAX));
    }

    #[test]
    fn more_copies_than_slots_count_as_everything() {
        let g = CopyGate::new();
        let copies: Vec<_> = (0..COPY_SLOTS + 1)
            .map(|k| g.enter(B + k * MB, B + k * MB + 64))
            .collect();
        assert!(
            g.try_begin_demotion(A, A + MB).is_none(),
            "a copy without a slot may be anywhere"
        );
        drop(copies);
        drop(g.try_begin_demotion(A, A + MB).unwrap());
        let demotions: Vec<_> = (0..DEMOTION_SLOTS + 1)
            .map(|k| g.try_begin_demotion(B + k * MB, B + k * MB + 64).unwrap())
            .collect();
        assert!(g.demotions.overlaps(A, A + 1), "nor may a demotion");
        drop(demotions);
        assert!(!g.demotions.overlaps(0, usize::MAX));
    }

    #[test]
    fn a_waiting_demotion_begins_only_after_the_copy_in_flight_is_done_and_new_copies_queue_behind_it(
    ) {
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        let g = Arc::new(CopyGate::new());
        let copy = g.enter(A, A + MB);
        let copy_done = Arc::new(AtomicBool::new(false));
        let demotion_done = Arc::new(AtomicBool::new(false));
        let demoter = {
            let (g, copy_done, demotion_done) =
                (g.clone(), copy_done.clone(), demotion_done.clone());
            std::thread::spawn(move || {
                let began = g.begin_demotion_waiting(A, A + MB);
                // What the demotion saw when it was let in.
                let saw = (began.is_some(), copy_done.load(Ordering::SeqCst));
                // Until it ends, no copy of its pages is let in.
                while g.waits() < 2 {
                    std::thread::yield_now();
                }
                demotion_done.store(true, Ordering::SeqCst);
                drop(began);
                saw
            })
        };
        while g.waits() == 0 {
            std::thread::yield_now();
        }
        // A copy of those pages issued while the demotion waits queues behind it.
        let late = {
            let (g, demotion_done) = (g.clone(), demotion_done.clone());
            std::thread::spawn(move || {
                let c = g.enter(A + 64, A + 128);
                let after = demotion_done.load(Ordering::SeqCst);
                drop(c);
                after
            })
        };
        while g.waits() < 2 {
            std::thread::yield_now();
        }
        copy_done.store(true, Ordering::SeqCst);
        drop(copy);
        let (began, saw_copy_done) = demoter.join().unwrap();
        assert!(began, "the demotion began once the copy was done");
        assert!(saw_copy_done, "and not before");
        assert!(
            late.join().unwrap(),
            "the late copy went after the demotion"
        );
        assert_eq!(g.waits(), 2);
        assert_eq!(g.overruns(), 0);
        assert!(!g.demotions.overlaps(0, usize::MAX));
        assert!(!g.copies.overlaps(0, usize::MAX));
    }

    #[test]
    fn no_demotion_runs_while_an_overlapping_guard_is_alive() {
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        let g = Arc::new(CopyGate::new());
        // Set while a copy's guard is alive / while a demotion runs.
        let copying = Arc::new(AtomicBool::new(false));
        let demoting = Arc::new(AtomicBool::new(false));
        let overlaps = Arc::new(AtomicU64::new(0));
        let copier = {
            let (g, copying, demoting, overlaps) = (
                g.clone(),
                copying.clone(),
                demoting.clone(),
                overlaps.clone(),
            );
            std::thread::spawn(move || {
                for k in 0..20_000 {
                    // Alternately the demoted pages and memory next to them.
                    let at = if k % 2 == 0 { A + MB - 8 } else { A + MB };
                    let guard = g.enter(at, at + 64);
                    let shared = k % 2 == 0;
                    if shared {
                        copying.store(true, Ordering::SeqCst);
                        if demoting.load(Ordering::SeqCst) {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    std::hint::spin_loop();
                    if shared {
                        copying.store(false, Ordering::SeqCst);
                    }
                    drop(guard);
                }
            })
        };
        for _ in 0..20_000 {
            if let Some(d) = g.try_begin_demotion(A, A + MB) {
                demoting.store(true, Ordering::SeqCst);
                if copying.load(Ordering::SeqCst) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                std::hint::spin_loop();
                demoting.store(false, Ordering::SeqCst);
                drop(d);
            }
        }
        copier.join().unwrap();
        assert_eq!(
            overlaps.load(Ordering::SeqCst),
            0,
            "a demotion overlapped a copy of its pages"
        );
        assert!(!g.copies.overlaps(0, usize::MAX), "every guard let go");
        assert!(!g.demotions.overlaps(0, usize::MAX));
        assert!(
            g.try_begin_demotion(A, A + MB).is_some(),
            "with no copy left, a demotion may run"
        );
    }

    #[test]
    fn a_forked_child_frees_every_entry_taken_and_writes_no_other() {
        let t: Box<PromotedTable> = Box::default();
        let a = t.claim(range((0x1000, 0x2000), (0x1000, 0x2000))).unwrap();
        let b = t.claim(range((0x5000, 0x6000), (0x5000, 0x6000))).unwrap();
        t.activate(a);
        // Every entry taken lies below the high water, which the child's walk stops at.
        assert!(t.high_water.load(Ordering::Relaxed) > a.max(b));
        t.forget_all();
        assert_eq!(t.active_count(), 0);
        assert!(t
            .entries
            .iter()
            .all(|e| e.state.load(Ordering::Relaxed) == FREE));
        assert_eq!(t.covering(0x1000, 1), None);
        // The same pages can be claimed again.
        let c = t.claim(range((0x1000, 0x2000), (0x1000, 0x2000))).unwrap();
        t.activate(c);
        assert_eq!(t.covering(0x1000, 1), Some(c));
    }

    #[test]
    fn a_forked_child_forgets_the_counters_keyed_and_only_looks_at_their_groups() {
        let c: Box<PageableCopyCounters> = Box::default();
        c.forget_all();
        assert_eq!(c.keyed_groups.load(Ordering::Relaxed), 0, "nothing keyed");
        let keys = [0x7000_1000usize, 0x7f00_2000_0000];
        let slots: Vec<usize> = keys.iter().map(|&k| c.slot(k).unwrap()).collect();
        let groups = c.keyed_groups.load(Ordering::Relaxed);
        for &i in &slots {
            assert_ne!(groups & (1 << (i / GROUP)), 0, "slot {i}'s group is marked");
            let k = c.get(i);
            k.set_state(NEVER);
            k.judge_promotion(0);
            k.threshold(4096, || 77);
        }
        c.forget_all();
        assert_eq!(c.keyed_groups.load(Ordering::Relaxed), 0);
        for (&key, &i) in keys.iter().zip(&slots) {
            let k = c.get(i);
            assert_eq!(k.key.load(Ordering::Relaxed), 0);
            assert_eq!(k.state(), TRACKING);
            assert_eq!(k.copies(), 0);
            assert_eq!(k.required(10), 10, "no penalty left");
            assert_eq!(k.threshold(4096, || 5), 5, "no threshold cached");
            // The key gets a slot again (maybe another one).
            assert!(c.slot(key).is_some());
        }
    }
}
