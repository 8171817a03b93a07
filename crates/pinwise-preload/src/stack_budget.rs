//! A bound on the time the malloc hooks spend capturing call stacks.
//!
//! Capturing a stack (unwinding, reading the Python frames, naming them) costs
//! microseconds, about ten times what recording the allocation costs. A program that
//! allocates large blocks in a tight loop (a Python loop making 100 KB `bytearray`s ran 7×
//! slower with a stack for each) would pay that on every allocation. So each thread has a
//! token bucket of capture time: its first [`FREE_CAPTURES`] captures cost nothing (the
//! first ones are slow, naming modules and code objects for the first time); after them it
//! starts with [`BURST_NS`] and earns [`SHARE_PER_MILLE`] ‰ of the time that passes, up to
//! [`BURST_NS`]; a capture is made while the bucket is not empty and costs what it took. In
//! the long run a thread spends at most that share of its time on stacks.
//!
//! The bounds are small because the whole of pinwise's cost in a program must stay within a
//! few percent: a JAX program making about 1,000 large allocations in 5 s spent 2–3 % of its
//! time capturing a stack for each with the earlier bounds (1,000 free captures, 2 %, 20 ms;
//! `bench/results/gpu-frameworks.md`, fifth session). A site that allocates often still gets
//! stacks, from a sample of its allocations. Allocations made while the bucket is empty are still recorded, exactly, with
//! their call site; only the stack is left out, and counted
//! (`preload.stack_captures_skipped`).
//!
//! In a Python process most repeated allocations need no capture at all: a stack walked
//! before from the same call site under the same Python stack is taken from the
//! recorder's memo (`preload.stack_memo_hits`): no walk, only the lookup (reading the
//! Python frames), charged to the bucket like a walk
//! ([`crate::recorder::Recorder::remembered_stack`]). A training loop's allocations, the
//! same lines every step, are walked once, and the bucket then pays for many more stacks.

use std::cell::Cell;

/// The share of a thread's time its stack captures may take in the long run, per mille.
pub const SHARE_PER_MILLE: u64 = 5;
/// What the bucket holds at most (and at first), ns of capture time.
pub const BURST_NS: u64 = 10_000_000;
/// A thread's captures that are not charged to its bucket.
pub const FREE_CAPTURES: u32 = 32;

/// One thread's bucket: capture time left (ns; negative after a capture that overdrew it)
/// at `last_ns`.
#[derive(Debug, Clone, Copy)]
pub struct Bucket {
    tokens_ns: i64,
    last_ns: u64,
    free_left: u32,
}

impl Bucket {
    /// A full bucket at time 0.
    pub const FULL: Bucket = Bucket {
        tokens_ns: BURST_NS as i64,
        last_ns: 0,
        free_left: FREE_CAPTURES,
    };

    /// Earns what `now_ns` adds and says whether a capture may start.
    pub fn may_capture(&mut self, now_ns: u64) -> bool {
        let earned = now_ns.saturating_sub(self.last_ns) / (1000 / SHARE_PER_MILLE);
        self.tokens_ns =
            (self.tokens_ns.saturating_add(earned.min(BURST_NS) as i64)).min(BURST_NS as i64);
        self.last_ns = self.last_ns.max(now_ns);
        self.tokens_ns > 0
    }

    /// Pays for a capture (a walk) that took `took_ns`: one of the free ones while any is
    /// left.
    pub fn spend(&mut self, took_ns: u64) {
        if self.free_left > 0 {
            self.free_left -= 1;
            return;
        }
        self.charge(took_ns);
    }

    /// Pays for a memo lookup that took `took_ns` (no walk): always from the time left,
    /// never one of the free walks, which stay for call sites not seen yet.
    pub fn charge(&mut self, took_ns: u64) {
        self.tokens_ns = self
            .tokens_ns
            .saturating_sub(took_ns.min(i64::MAX as u64) as i64);
    }
}

thread_local! {
    static BUCKET: Cell<Bucket> = const { Cell::new(Bucket::FULL) };
}

/// Whether this thread may capture a stack at `now_ns`.
#[inline]
pub fn may_capture(now_ns: u64) -> bool {
    BUCKET
        .try_with(|b| {
            let mut x = b.get();
            let ok = x.may_capture(now_ns);
            b.set(x);
            ok
        })
        .unwrap_or(false)
}

/// Notes a capture (a walk, `walked`) or a memo lookup that took `took_ns`.
pub fn spent(took_ns: u64, walked: bool) {
    let _ = BUCKET.try_with(|b| {
        let mut x = b.get();
        if walked {
            x.spend(took_ns);
        } else {
            x.charge(took_ns);
        }
        b.set(x);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memo_lookups_leave_the_free_walks_for_new_call_sites() {
        let mut b = Bucket::FULL;
        assert!(b.may_capture(1));
        for _ in 0..100 {
            b.charge(1_000);
        }
        assert_eq!(b.free_left, FREE_CAPTURES, "lookups took no free walk");
        assert_eq!(b.tokens_ns, BURST_NS as i64 - 100_000, "they paid in time");
        b.spend(5_000_000);
        assert_eq!(b.free_left, FREE_CAPTURES - 1, "a walk takes a free one");
        assert_eq!(b.tokens_ns, BURST_NS as i64 - 100_000);
    }

    /// Captures of `took` ns attempted every `every` ns for `for_ns`: the share of the
    /// time they took, percent, and how many were made.
    fn run(took: u64, every: u64, for_ns: u64) -> (f64, u64) {
        let mut b = Bucket::FULL;
        let (mut now, mut spent_ns, mut n) = (1u64, 0u64, 0u64);
        while now < for_ns {
            if b.may_capture(now) {
                b.spend(took);
                spent_ns += took;
                now += took;
                n += 1;
            }
            now += every;
        }
        (spent_ns as f64 / now as f64 * 100.0, n)
    }

    #[test]
    fn a_few_captures_are_never_held_back() {
        // 700 allocations of a short program, 14 µs a capture (the free ones, then the
        // burst's 10 ms), or 5 ms for each of the slow first ones: all get their stack.
        let (_, n) = run(14_000, 1_000, 700 * 15_000);
        assert_eq!(n, 700);
        let (_, n) = run(5_000_000, 1_000, FREE_CAPTURES as u64 * 5_001_000);
        assert_eq!(n, FREE_CAPTURES as u64);
    }

    #[test]
    fn in_the_long_run_captures_take_at_most_the_share() {
        // A tight loop for 20 s: one allocation a microsecond, 14 µs a capture.
        let (share, n) = run(14_000, 1_000, 20_000_000_000);
        let goal = SHARE_PER_MILLE as f64 / 10.0;
        assert!(share <= goal + 0.1, "{share} %");
        assert!(share >= goal * 0.9, "{share} %: the budget is used");
        assert!(n > 1_000);
    }

    #[test]
    fn each_thread_has_its_own_bucket() {
        std::thread::spawn(|| {
            for _ in 0..FREE_CAPTURES {
                assert!(may_capture(5));
                spent(u64::MAX, true);
            }
            assert!(may_capture(5));
            spent(BURST_NS + 1_000, true);
            assert!(!may_capture(6), "overdrawn");
            // It takes 200 µs of time to earn each µs of capture.
            assert!(!may_capture(6 + 1_001 * 199));
            assert!(may_capture(6 + 1_001 * 200 + 1_001 * 200));
        })
        .join()
        .unwrap();
        std::thread::spawn(|| assert!(may_capture(1), "a new thread starts full"))
            .join()
            .unwrap();
    }
}
