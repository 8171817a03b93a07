//! Event stamps: what a hook reads to order its event, and how the drain turns stamps into
//! `CLOCK_MONOTONIC` nanoseconds for the history.
//!
//! **The source, decided once ([`choose`]).** A hook stamps its event with the CPU's
//! time-stamp counter, read in order (`rdtscp`: after every earlier instruction, so after
//! the ring's announcement; ~10 ns, no memory touched) where that counter is the clock's
//! own: x86-64, invariant (CPUID `0x8000_0007` EDX bit 8), `rdtscp` present, the kernel's
//! clocksource `tsc` (the kernel checked the counters of all CPUs agree, and
//! `CLOCK_MONOTONIC` is computed from this counter), readable in this process
//! ([`crate::cycles`]) and below 2^62. Anywhere else it reads `CLOCK_MONOTONIC` as before
//! (the vDSO's `clock_gettime`: ~30-40 ns plus its data page, which a sparse copy finds
//! cold). `PINWISE_TIMESTAMPS=clock` asks for the clock anyway (to compare, or for stamps
//! that are the clock's own reads). The statistics say which, and why (`timestamps`).
//!
//! **One order for both.** A counter stamp is the counter's value; a clock stamp is the
//! clock's nanoseconds with [`CLOCK_TAG`] (bit 63) set. Stamps are compared as numbers: every
//! clock stamp orders after every counter stamp. The only switch is from the counter to the
//! clock, when the program makes the counter fault (`prctl(PR_SET_TSC)`, [`stop`]): a
//! stamp whose flag load came before the switch (a counter stamp) is ordered before one
//! whose load came after it (a clock stamp), which agrees with every order the program can
//! observe (nothing synchronizes between a hook's flag load and its read). The rings'
//! watermark ([`crate::ring`]) is a stamp too ([`collection_start`]): the argument that a
//! push announced after the collector looked at a ring gets a stamp at or above the
//! watermark holds for the ordered counter read as for the clock (the counters of all CPUs
//! agree, and the read waits for the announcement).
//!
//! **Conversion ([`Converter`]).** Each collection takes an anchor: the counter read on
//! both sides of a clock read (the narrowest of three tries), the counter's value taken as
//! the middle. The drain converts a counter stamp when the history ingests its event: by
//! interpolating between the anchors on either side of it (every ingested stamp lies below
//! the watermark, so below the collection's anchor), and beyond the last anchor (only at
//! exit) by extrapolating at the rate of the last millisecond or more. Nanoseconds handed to
//! the history never decrease (a conversion below the last one is raised to it), so every
//! thread's events keep their order, and the events of different threads keep the stamps'
//! order. The error is that of a straight line between two true (counter, clock) pairs a
//! drain apart (10 ms; the kernel's clock is itself a line through the counter, steered
//! by NTP in parts per million): measured in `bench/results/preload-hook-cost.md`, and in
//! every process (`timestamps.check_max_ns` in the statistics: how far each anchor fell from
//! the line extrapolated to it, an upper bound on the interpolation's error).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

use pinwise_core::preload_stats::TimestampStats;
use pinwise_core::units::monotonic_ns;

use crate::cycles::Anchor;

/// Set in a stamp read from the clock (see the module documentation).
pub const CLOCK_TAG: u64 = 1 << 63;

/// Whether hooks stamp with the counter (else the clock).
static COUNTER: AtomicBool = AtomicBool::new(false);
/// Why not ([`Fallback`] as a number; 0: the counter is used, or nothing decided yet).
static FALLBACK: AtomicU8 = AtomicU8::new(0);
/// The anchor [`stop`] took just before the counter was given up (`STOP_NS` 0: none).
static STOP_TICKS: AtomicU64 = AtomicU64::new(0);
static STOP_NS: AtomicU64 = AtomicU64::new(0);

/// Why events are stamped with the clock instead of the counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Fallback {
    /// Not an x86-64 process.
    NotX86 = 1,
    /// The CPU does not say its counter is invariant (CPUID `0x8000_0007` EDX bit 8).
    NotInvariant,
    /// The CPU has no `rdtscp`.
    NoRdtscp,
    /// The kernel's clocksource is not `tsc` (it does not trust the counter, or is a VM's).
    Clocksource,
    /// The counter faults in this process (`PR_SET_TSC` set before pinwise started).
    Unreadable,
    /// The counter's value is too large to leave room for the clock's tag.
    TooLarge,
    /// The program made the counter fault while it ran (`PR_SET_TSC`, see [`stop`]).
    Stopped,
    /// `PINWISE_TIMESTAMPS=clock` asked for the clock.
    Asked,
}

impl Fallback {
    fn from_u8(v: u8) -> Option<Fallback> {
        use Fallback::*;
        [
            NotX86,
            NotInvariant,
            NoRdtscp,
            Clocksource,
            Unreadable,
            TooLarge,
            Stopped,
            Asked,
        ]
        .into_iter()
        .find(|f| *f as u8 == v)
    }

    /// What the statistics say.
    pub fn describe(self) -> &'static str {
        match self {
            Fallback::NotX86 => "not x86-64",
            Fallback::NotInvariant => "the CPU does not report an invariant time-stamp counter",
            Fallback::NoRdtscp => "the CPU has no rdtscp",
            Fallback::Clocksource => "the kernel's clocksource is not tsc",
            Fallback::Unreadable => "the time-stamp counter faults in this process (PR_SET_TSC)",
            Fallback::TooLarge => "the time-stamp counter is too large to tag",
            Fallback::Stopped => {
                "the program made the time-stamp counter fault while it ran (PR_SET_TSC)"
            }
            Fallback::Asked => "PINWISE_TIMESTAMPS=clock asked for the clock",
        }
    }
}

/// What [`decide`] is told about this machine and process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// An x86-64 process.
    pub x86: bool,
    /// CPUID says the counter is invariant.
    pub invariant: bool,
    /// CPUID says `rdtscp` exists.
    pub rdtscp: bool,
    /// The kernel's current clocksource is `tsc`.
    pub clocksource_tsc: bool,
    /// The counter does not fault in this process ([`crate::cycles`]).
    pub readable: bool,
    /// The program made it fault while it ran ([`crate::cycles::counter_stopped`]).
    pub stopped: bool,
    /// The counter's value now (read only when the rest allows it; 0 otherwise).
    pub counter: u64,
    /// The configuration asked for the clock (`PINWISE_TIMESTAMPS=clock`).
    pub asked_clock: bool,
}

/// The stamps' source from `facts`: `Ok(())` the counter, else why the clock.
pub fn decide(facts: &Facts) -> Result<(), Fallback> {
    if facts.stopped {
        return Err(Fallback::Stopped);
    }
    if facts.asked_clock {
        return Err(Fallback::Asked);
    }
    if !facts.x86 {
        return Err(Fallback::NotX86);
    }
    if !facts.readable {
        return Err(Fallback::Unreadable);
    }
    if !facts.invariant {
        return Err(Fallback::NotInvariant);
    }
    if !facts.rdtscp {
        return Err(Fallback::NoRdtscp);
    }
    if !facts.clocksource_tsc {
        return Err(Fallback::Clocksource);
    }
    if facts.counter >= 1 << 62 {
        return Err(Fallback::TooLarge);
    }
    Ok(())
}

/// This machine's and process's [`Facts`]. Reads a sysfs file (allocates): called where
/// the state is created.
fn facts(asked_clock: bool) -> Facts {
    let stopped = crate::cycles::counter_stopped();
    let readable = crate::cycles::counter_readable();
    let clocksource_tsc =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .is_ok_and(|s| s.trim() == "tsc");
    #[cfg(target_arch = "x86_64")]
    {
        // Leaf 0x8000_0000 gives the highest extended leaf; only leaves up to it are asked.
        use core::arch::x86_64::__cpuid;
        let max = __cpuid(0x8000_0000).eax;
        let rdtscp = max >= 0x8000_0001 && __cpuid(0x8000_0001).edx & (1 << 27) != 0;
        let invariant = max >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0;
        let mut f = Facts {
            x86: true,
            invariant,
            rdtscp,
            clocksource_tsc,
            readable,
            stopped,
            counter: 0,
            asked_clock,
        };
        if decide(&f).is_ok() {
            f.counter = read_counter();
        }
        f
    }
    #[cfg(not(target_arch = "x86_64"))]
    Facts {
        x86: false,
        invariant: false,
        rdtscp: false,
        clocksource_tsc,
        readable,
        stopped,
        counter: 0,
        asked_clock,
    }
}

/// Decides the stamps' source (where the state is created, before any event is stamped in
/// this process or forked child).
/// `clock_asked`: the configuration asked for the clock (`PINWISE_TIMESTAMPS=clock`).
pub fn choose(clock_asked: bool) {
    let verdict = decide(&facts(clock_asked));
    FALLBACK.store(verdict.err().map_or(0, |f| f as u8), Ordering::SeqCst);
    COUNTER.store(verdict.is_ok(), Ordering::SeqCst);
    // A thread may have made the counter fault since the facts were read
    // (`cycles::stop_counter` says so before its `stop`): the counter must not stay chosen.
    if crate::cycles::counter_stopped_now() {
        FALLBACK.store(Fallback::Stopped as u8, Ordering::SeqCst);
        COUNTER.store(false, Ordering::SeqCst);
    }
}

/// The program is about to make the counter fault (called by
/// [`crate::cycles::stop_counter`] while the counter still reads): stamps read the clock
/// from now on, and the drain gets one last anchor taken here.
pub fn stop() {
    if COUNTER.load(Ordering::SeqCst) {
        if let (Some(a), _) = take_anchor() {
            STOP_TICKS.store(a.ticks, Ordering::SeqCst);
            STOP_NS.store(a.ns.max(1), Ordering::SeqCst);
        }
    }
    FALLBACK.store(Fallback::Stopped as u8, Ordering::SeqCst);
    COUNTER.store(false, Ordering::SeqCst);
}

/// The anchor [`stop`] took, if it took one.
pub fn stop_anchor() -> Option<Anchor> {
    let ns = STOP_NS.load(Ordering::SeqCst);
    (ns != 0).then(|| Anchor {
        ticks: STOP_TICKS.load(Ordering::SeqCst),
        ns,
    })
}

/// Whether events are stamped with the counter now; else why not.
pub fn source() -> Result<(), Fallback> {
    if COUNTER.load(Ordering::Relaxed) {
        return Ok(());
    }
    Err(Fallback::from_u8(FALLBACK.load(Ordering::Relaxed)).unwrap_or(Fallback::NotX86))
}

/// A stamp now (see the module documentation). For [`crate::ring`]'s `begin`, which
/// announces the push first.
#[inline(always)]
pub fn now() -> u64 {
    // SeqCst (a plain load on x86-64): ordered after the announcement, for the switch's
    // argument in the module documentation.
    if COUNTER.load(Ordering::SeqCst) {
        return read_counter_ordered();
    }
    CLOCK_TAG | monotonic_ns()
}

/// For the collector: the stamp a collection starts at (its watermark before the rings
/// lower it) and, while stamps are counter values, an anchor taken with it (none when
/// every try was interrupted). Every read of the rings comes after it.
pub fn collection_start() -> (u64, Option<Anchor>) {
    if COUNTER.load(Ordering::SeqCst) {
        let (a, last) = take_anchor();
        fence_after_read();
        // The anchor's own counter value when there is one (at or below `last`: a lower
        // watermark only holds more back), so that every stamp ingested lies below the
        // collection's anchor and is interpolated.
        return (a.map_or(last, |a| a.ticks), a);
    }
    (CLOCK_TAG | monotonic_ns(), None)
}

/// The widest an anchor's two counter reads may lie apart, ticks (1.3 to 5 µs on counters
/// of 2 to 4 GHz; a clock read between them takes 20 to 50 ns): a wider one was
/// interrupted, and its clock read may lie anywhere between them.
pub const MAX_ANCHOR_WIDTH: u64 = 10_000;

/// An anchor: the counter read on both sides of a clock read, its middle taken (the
/// narrowest of three tries; none if even that one is wider than [`MAX_ANCHOR_WIDTH`]),
/// and the last counter value read.
fn take_anchor() -> (Option<Anchor>, u64) {
    let mut best: Option<(u64, Anchor)> = None;
    let mut last = 0;
    for _ in 0..3 {
        let t0 = read_counter_ordered();
        let ns = monotonic_ns();
        let t1 = read_counter_ordered();
        last = t1;
        let width = t1.saturating_sub(t0);
        if best.is_none_or(|(w, _)| width < w) {
            best = Some((
                width,
                Anchor {
                    ticks: t0 + width / 2,
                    ns,
                },
            ));
        }
    }
    let anchor = best.filter(|(w, _)| *w <= MAX_ANCHOR_WIDTH).map(|(_, a)| a);
    (anchor, last)
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn read_counter() -> u64 {
    // SAFETY: `rdtsc` has no preconditions; only called where `decide` found it readable.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// The counter, read after every earlier instruction executed and every earlier load is
/// visible (`rdtscp`; the announcement before it is a locked instruction, so visible too).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn read_counter_ordered() -> u64 {
    let mut aux = 0u32;
    // SAFETY: `rdtscp` exists (`decide` checked CPUID) and is readable here (`decide`, and
    // `stop` switches stamps away from it before the program makes it fault).
    unsafe { core::arch::x86_64::__rdtscp(&mut aux) }
}

/// Keeps later instructions (the collector's reads of the rings) from starting before the
/// counter read before it.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn fence_after_read() {
    // SAFETY: `lfence` has no preconditions (SSE2, part of x86-64).
    unsafe { core::arch::x86_64::_mm_lfence() }
}

#[cfg(not(target_arch = "x86_64"))]
fn read_counter_ordered() -> u64 {
    unreachable!("the counter is used for stamps on x86-64 only")
}

#[cfg(not(target_arch = "x86_64"))]
fn fence_after_read() {}

/// Anchors kept at most; when full, every other one between the first and the last goes.
pub const MAX_ANCHORS: usize = 64;
/// A new anchor closer than this to the one before the last replaces the last (inline
/// drains come often): the line between two anchors spans at least this much.
pub const MIN_SPACING_NS: u64 = 1_000_000;

/// Counter stamps to nanoseconds, from anchors (see the module documentation). Pure: it
/// reads no counter or clock itself.
#[derive(Debug, Default)]
pub struct Converter {
    /// Counter values increasing, nanoseconds not decreasing.
    anchors: VecDeque<Anchor>,
    /// The last nanoseconds handed out (none lower is handed out after it).
    last_ns: u64,
    /// Whether [`stop_anchor`]'s anchor was added.
    pub stop_anchor_added: bool,
    /// Counter stamps converted.
    counter_stamps: u64,
    /// Clock stamps passed through.
    clock_stamps: u64,
    /// Conversions raised to the last one handed out.
    raised: u64,
    /// Anchors added.
    added: u64,
    /// The largest distance of an anchor from the line extrapolated to it from the anchors
    /// before it (spanning at least [`MIN_SPACING_NS`]), ns.
    check_max_ns: u64,
}

impl Converter {
    /// A converter without anchors.
    pub fn new() -> Converter {
        Converter::default()
    }

    /// A converter with an anchor taken now, if events are stamped with the counter (the
    /// first line runs from it to the first collection's).
    pub fn starting() -> Converter {
        let mut c = Converter::new();
        if let (_, Some(a)) = collection_start() {
            c.add(a);
        }
        c
    }

    /// Adds an anchor taken after every one added before (one whose counter value did not
    /// advance is ignored; its nanoseconds are raised to the last one's if below).
    pub fn add(&mut self, a: Anchor) {
        let Some(&last) = self.anchors.back() else {
            self.anchors.push_back(a);
            self.added += 1;
            return;
        };
        if a.ticks <= last.ticks {
            return;
        }
        let a = Anchor {
            ticks: a.ticks,
            ns: a.ns.max(last.ns),
        };
        // Checked against a line of at least the spacing (a shorter one is mostly the
        // anchors' own jitter).
        if last.ns - self.anchors[0].ns >= MIN_SPACING_NS {
            if let Some(predicted) = self.extrapolate(a.ticks) {
                self.check_max_ns = self.check_max_ns.max(predicted.abs_diff(a.ns));
            }
        }
        let n = self.anchors.len();
        if n >= 2 && last.ns - self.anchors[n - 2].ns < MIN_SPACING_NS {
            self.anchors[n - 1] = a;
        } else {
            self.anchors.push_back(a);
        }
        self.added += 1;
        if self.anchors.len() > MAX_ANCHORS {
            let n = self.anchors.len();
            let mut i = 0;
            self.anchors.retain(|_| {
                i += 1;
                i == 1 || i == n || i % 2 == 1
            });
        }
    }

    /// Forgets the anchors no stamp from `stamp` on needs (the drain ingests stamps in
    /// order: `stamp` is the last one ingested).
    pub fn forget_below(&mut self, stamp: u64) {
        while self.anchors.len() > 2 && self.anchors[1].ticks <= stamp {
            self.anchors.pop_front();
        }
    }

    /// The nanoseconds of `stamp`, never below the last ones handed out.
    pub fn convert(&mut self, stamp: u64) -> u64 {
        let ns = if stamp & CLOCK_TAG != 0 {
            self.clock_stamps += 1;
            stamp & !CLOCK_TAG
        } else {
            self.counter_stamps += 1;
            self.counter_ns(stamp)
        };
        if ns < self.last_ns {
            self.raised += 1;
        }
        self.last_ns = self.last_ns.max(ns);
        self.last_ns
    }

    /// Counter value `ticks` on the anchors' lines.
    fn counter_ns(&self, ticks: u64) -> u64 {
        let n = self.anchors.len();
        if n < 2 {
            // No line: nanoseconds of the anchor, if any (not reached: the drain anchors
            // before it converts).
            return self.anchors.front().map_or(ticks, |a| a.ns);
        }
        let i = self.anchors.partition_point(|a| a.ticks <= ticks);
        if i == n {
            return self.extrapolate(ticks).unwrap_or(self.anchors[n - 1].ns);
        }
        // Between anchors i-1 and i, or below the first on the first line.
        let (a, b) = if i == 0 {
            (self.anchors[0], self.anchors[1])
        } else {
            (self.anchors[i - 1], self.anchors[i])
        };
        let (dt, dn) = ((b.ticks - a.ticks) as u128, (b.ns - a.ns) as u128);
        if ticks >= a.ticks {
            a.ns + ((ticks - a.ticks) as u128 * dn / dt) as u64
        } else {
            a.ns.saturating_sub(((a.ticks - ticks) as u128 * dn / dt) as u64)
        }
    }

    /// `ticks` at or past the last anchor, on the line through the last anchor and the
    /// latest one at least [`MIN_SPACING_NS`] before it (else the first); `None` with fewer
    /// than two anchors.
    fn extrapolate(&self, ticks: u64) -> Option<u64> {
        let last = *self.anchors.back()?;
        let base = self
            .anchors
            .iter()
            .rev()
            .skip(1)
            .find(|a| last.ns - a.ns >= MIN_SPACING_NS)
            .or(self.anchors.front())
            .copied()
            .filter(|a| a.ticks < last.ticks)?;
        let (dt, dn) = (
            (last.ticks - base.ticks) as u128,
            (last.ns - base.ns) as u128,
        );
        let ahead = (ticks.saturating_sub(last.ticks) as u128 * dn / dt) as u64;
        Some(last.ns + ahead)
    }

    /// What the statistics say about the stamps.
    pub fn stats(&self) -> TimestampStats {
        let (source, fallback) = match source() {
            Ok(()) => ("counter", None),
            Err(f) => ("clock", Some(f.describe().to_string())),
        };
        TimestampStats {
            source: source.to_string(),
            fallback,
            counter_stamps: self.counter_stamps,
            clock_stamps: self.clock_stamps,
            anchors: self.added,
            raised: self.raised,
            check_max_ns: self.check_max_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinwise_testkit::rng::Rng;

    fn facts() -> Facts {
        Facts {
            x86: true,
            invariant: true,
            rdtscp: true,
            clocksource_tsc: true,
            readable: true,
            stopped: false,
            counter: 1 << 40,
            asked_clock: false,
        }
    }

    #[test]
    fn the_counter_is_used_only_where_every_condition_holds() {
        assert_eq!(decide(&facts()), Ok(()));
        type Change = fn(&mut Facts);
        let cases: [(Change, Fallback); 8] = [
            (|f| f.x86 = false, Fallback::NotX86),
            (|f| f.invariant = false, Fallback::NotInvariant),
            (|f| f.rdtscp = false, Fallback::NoRdtscp),
            (|f| f.clocksource_tsc = false, Fallback::Clocksource),
            (|f| f.readable = false, Fallback::Unreadable),
            (|f| f.counter = 1 << 62, Fallback::TooLarge),
            (|f| f.stopped = true, Fallback::Stopped),
            (|f| f.asked_clock = true, Fallback::Asked),
        ];
        for (change, why) in cases {
            let mut f = facts();
            change(&mut f);
            assert_eq!(decide(&f), Err(why), "{f:?}");
            assert_eq!(Fallback::from_u8(why as u8), Some(why));
        }
    }

    /// A kernel-like clock: nanoseconds from counter ticks on a line whose slope changes
    /// by up to `ppm` at each of its steps (NTP steering), continuous.
    struct Clock {
        steps: Vec<(u64, u64, f64)>,
    }

    impl Clock {
        fn new(rng: &mut Rng, ns_per_tick: f64, ppm: f64, step_ticks: u64, len: u64) -> Clock {
            let mut steps = vec![(1_000_000u64, 5_000_000_000u64, ns_per_tick)];
            while steps.last().unwrap().0 < len {
                let &(t, n, r) = steps.last().unwrap();
                let wobble = (rng.below(2001) as f64 - 1000.0) / 1000.0 * ppm * 1e-6;
                let t2 = t + step_ticks;
                steps.push((
                    t2,
                    n + (step_ticks as f64 * r) as u64,
                    ns_per_tick * (1.0 + wobble),
                ));
            }
            Clock { steps }
        }
        fn ns(&self, ticks: u64) -> u64 {
            let i = self.steps.partition_point(|s| s.0 <= ticks).max(1) - 1;
            let (t, n, r) = self.steps[i];
            n + ((ticks - t) as f64 * r) as u64
        }
    }

    #[test]
    fn conversions_never_go_back_and_stay_near_the_clock() {
        let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
        for case in 0..40 {
            // 0.3 to 1 ns per tick, 0 to 50 ppm of steering, 2.5 to 25 ms between drains.
            let rate = 0.3 + rng.below(700) as f64 / 1000.0;
            let ppm = rng.below(50) as f64;
            let clock = Clock::new(&mut rng, rate, ppm, 3_000_000, 20_000_000_000);
            let mut conv = Converter::new();
            let mut t = 1_000_000 + rng.below(1_000_000);
            conv.add(Anchor {
                ticks: t,
                ns: clock.ns(t),
            });
            let mut last = 0;
            let mut worst: u64 = 0;
            let mut ingested = 0;
            for _ in 0..200 {
                // Events stamped until the next collection, ingested after it.
                let drain_every = ((2_500_000 + rng.below(22_500_000)) as f64 / rate) as u64;
                let mut stamps: Vec<u64> = (0..rng.below(50))
                    .map(|_| t + rng.below(drain_every))
                    .collect();
                t += drain_every;
                // The collection's anchor: up to 60 ns either way of the true pair.
                let jitter = rng.below(121) as i64 - 60;
                conv.add(Anchor {
                    ticks: t,
                    ns: clock.ns(t).saturating_add_signed(jitter),
                });
                stamps.sort_unstable();
                for s in stamps {
                    assert!(s >= ingested);
                    let ns = conv.convert(s);
                    assert!(ns >= last, "case {case}: {ns} after {last}");
                    last = ns;
                    worst = worst.max(ns.abs_diff(clock.ns(s)));
                    ingested = s;
                }
                conv.forget_below(ingested);
                assert!(conv.anchors.len() <= MAX_ANCHORS);
            }
            // 60 ns of anchor jitter, 50 ppm over 25 ms of line: 1.25 µs at worst.
            assert!(
                worst <= 60 + (ppm * 1e-6 * 25e6) as u64 + 2,
                "case {case}: {worst} ns off at {ppm} ppm"
            );
            // An anchor falls near the line extrapolated to it.
            assert!(conv.check_max_ns <= 2_000 + (ppm * 1e-6 * 50e6) as u64);
        }
    }

    #[test]
    fn a_line_between_exact_anchors_is_exact_and_extrapolates_at_its_rate() {
        let mut conv = Converter::new();
        // 0.4 ns per tick.
        conv.add(Anchor {
            ticks: 10_000_000,
            ns: 1_000_000_000,
        });
        conv.add(Anchor {
            ticks: 20_000_000,
            ns: 1_004_000_000,
        });
        assert_eq!(conv.convert(15_000_000), 1_002_000_000);
        assert_eq!(conv.convert(20_000_000), 1_004_000_000);
        assert_eq!(conv.convert(30_000_000), 1_008_000_000, "extrapolated");
        // Below the first anchor: on the first line (raised to the last handed out).
        let mut fresh = Converter::new();
        fresh.add(Anchor {
            ticks: 10_000_000,
            ns: 1_000_000_000,
        });
        fresh.add(Anchor {
            ticks: 20_000_000,
            ns: 1_004_000_000,
        });
        assert_eq!(fresh.convert(5_000_000), 998_000_000);
    }

    #[test]
    fn clock_stamps_pass_through_and_order_after_counter_stamps() {
        let mut conv = Converter::new();
        conv.add(Anchor {
            ticks: 1_000,
            ns: 10_000,
        });
        conv.add(Anchor {
            ticks: 3_000_000,
            ns: 1_010_000,
        });
        let counter = 2_000_000u64;
        let clock = CLOCK_TAG | 900_000;
        assert!(
            clock > counter,
            "every clock stamp orders after the counter's"
        );
        let a = conv.convert(counter);
        assert_eq!(a, 10_000 + 1_999_000 * 1_000_000 / 2_999_000);
        // The switch: a clock read just after, converted a little below the counter
        // stamp's nanoseconds, is raised (the history never goes back).
        conv.add(Anchor {
            ticks: 3_000_000,
            ns: 1_010_000,
        });
        assert_eq!(conv.convert(CLOCK_TAG | 600_000), a);
        assert_eq!(conv.convert(clock), 900_000);
        let s = conv.stats();
        assert_eq!((s.counter_stamps, s.clock_stamps, s.raised), (1, 2, 1));
    }

    #[test]
    fn close_anchors_replace_the_last_and_a_full_list_is_thinned() {
        let mut conv = Converter::new();
        for k in 0..10u64 {
            // 0.1 ms apart: closer than the spacing.
            conv.add(Anchor {
                ticks: 1_000 + k * 250_000,
                ns: 1_000_000 + k * 100_000,
            });
        }
        assert_eq!(conv.anchors.len(), 2, "{:?}", conv.anchors);
        assert_eq!(conv.anchors[1].ns, 1_900_000);
        let mut conv = Converter::new();
        for k in 0..=MAX_ANCHORS as u64 {
            conv.add(Anchor {
                ticks: 1_000 + k * 5_000_000,
                ns: 1_000_000 + k * 2_000_000,
            });
        }
        assert!(conv.anchors.len() <= MAX_ANCHORS / 2 + 1);
        assert_eq!(conv.anchors.front().unwrap().ns, 1_000_000);
        assert_eq!(
            conv.anchors.back().unwrap().ns,
            1_000_000 + MAX_ANCHORS as u64 * 2_000_000
        );
        // Still exact on the (straight) line.
        assert_eq!(conv.convert(1_000 + 5_000_000 * 7 + 2_500_000), 16_000_000);
        // A stamp at or past the second anchor lets the first go.
        let second = conv.anchors[1].ticks;
        conv.forget_below(second);
        assert_eq!(conv.anchors.front().unwrap().ticks, second);
    }

    #[test]
    fn real_counter_stamps_convert_near_the_clock() {
        choose(false);
        if source().is_err() {
            eprintln!("stamps use the clock here: {:?}", source());
            return;
        }
        let mut conv = Converter::new();
        let mut samples = Vec::new();
        let until = monotonic_ns() + 200_000_000;
        let mut next_anchor = 0;
        while monotonic_ns() < until {
            let now = monotonic_ns();
            if now >= next_anchor {
                if let (_, Some(a)) = collection_start() {
                    conv.add(a);
                }
                for (mid, span, ns) in samples.drain(..) {
                    let c: u64 = conv.convert(mid);
                    // Off by more than the sample's own uncertainty (its span in ticks: at
                    // least its span in ns, for a counter of 1 GHz or more).
                    let off = c.abs_diff(ns).saturating_sub(span);
                    assert!(off < 5_000, "{off} ns off");
                }
                next_anchor = now + 10_000_000;
            }
            let t0 = now_counter();
            let ns = monotonic_ns();
            let t1 = now_counter();
            samples.push((t0 + (t1 - t0) / 2, (t1 - t0), ns));
            std::thread::sleep(std::time::Duration::from_micros(300));
        }
    }

    fn now_counter() -> u64 {
        now()
    }
}
