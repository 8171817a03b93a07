//! A program's pinned request without evidence: served pageable first, registered in place
//! once its own copies show it hot (issue 10: "cold pinned requests ... are served
//! pageable"; "peak pinned bytes ≤ 1.1× the hot working set where the program pins cold
//! buffers").
//!
//! **Why pageable first.** A framework asks for pinned memory for every buffer it means to
//! copy asynchronously, hot or cold, and often from one call site (PyTorch's caching host
//! allocator makes every `pin_memory()` block at one place, and never frees them, so no
//! site history ever tells them apart). Only a buffer's own copies do. Priced with the
//! built-in H200 table (`h200-transfer-and-pin-costs.csv`):
//!
//! | per buffer | 4 MiB | 64 MiB |
//! |---|---|---|
//! | one copy's saving when pinned (pageable 16.4–16.7 GB/s, registered 49.9–54.8) | 172 µs | 2,784 µs |
//! | register + unregister in place | 438 µs | 2,717 µs |
//! | `cuMemHostAlloc` + `cuMemFreeHost` (what plain CUDA pays) | 1,238 µs | 21,165 µs |
//!
//! - *Pinned first, demoted when cold*: every request is locked when it is made, before any
//!   copy can tell hot from cold, so the peak is the program's own whatever happens later
//!   (torch_mixed: 8 × 4 + 4 × 64 = 288 MiB); demotion lowers only what is held later.
//!   It cannot meet "≤ 1.1× the hot working set" when the cold buffers are allocated
//!   before the loop, as they are.
//! - *Pageable first, registered on evidence* (this module): only what turned hot is ever
//!   locked (torch_mixed: the 8 hot pinned buffers, 32 MiB, beside the promoted pageable
//!   ones). A hot buffer pays its first copies pageable and one registration (4 MiB: two
//!   copies × 172 + 438 ≈ 0.8 ms, once), and never pays `cuMemHostAlloc` (1.2 ms). A cold
//!   buffer kept pageable pays every copy's saving (64 MiB: 2.8 ms a copy) and never pays
//!   `cuMemHostAlloc` (21 ms).
//!
//! **What is hot.** Copies that recur close together: a buffer whose copy follows its
//! previous one by at most [`NEAR_COPIES`] copies of the program's served pinned requests
//! (a near reuse) extends its run; a longer gap starts a new run. It is registered once
//! [`RUN`] near reuses in a row have saved more than registering it costs (the ski-rental
//! rule, [`crate::decide::rules::pays_to_promote`], over the run only). A buffer copied in
//! bursts (offloaded optimizer state: up and down every 100 steps) never builds a run across
//! its bursts, however much one burst moves. Within one run the rule is never worse than
//! twice the best choice in hindsight.
//!
//! **Bounded, as the cost model estimates it, by [`SLOWDOWN_BOUND`]** (an estimate from the
//! cost model, not a measured bound: on the H100 torch_mixed's cold copies ran 3.7× slower
//! than pinned, `bench/results/gpu-frameworks.md`, sixth session). Keeping buffers pageable
//! costs time; the savings they forgo are summed for the process (`spent`). While `spent`
//! exceeds [`SLOWDOWN_BOUND`] of the time since the first such buffer was served, plus what
//! pinwise's own promotions saved meanwhile (`credit`), the buffer being copied is
//! registered if its copies so far paid for it ([`register_now`]). So cold buffers stay
//! pageable only as far as the program can afford them. torch_mixed on an H100 (3.2 ms a
//! step) shows the limit: its four 64 MiB buffers forgo 4 × 2 × 2.8 = 22 ms every 100 steps
//! (320 ms), 7 %; the 8 promoted pageable buffers save about 17 ms in those steps; so
//! roughly one or two of the four may stay pageable, and the rest are registered when the
//! budget runs out (each once). Buffers moved more rarely, or steps longer, keep more of
//! them pageable.
//!
//! **Semantics, and why this is opt-in** (`PINWISE_PAGEABLE_FIRST`). A buffer served pageable
//! for a pinned request behaves as pinned memory wherever pinwise can see the program use
//! it: it is registered before a pointer query about it is
//! answered, before a CUDA graph capture begins (a copy captured into a graph must be from
//! page-locked memory, and registering during a capture may invalidate it), and requests
//! made while a capture is open are served pinned. An asynchronous copy from pageable
//! memory is done, or staged, when the call returns: a stronger promise than pinned
//! memory's. What pinwise cannot see is a kernel reading the buffer through its host
//! pointer: under unified addressing all pinned memory is device-accessible that way, and
//! such a kernel faults on a buffer served pageable. A registration is made once and held
//! until the program frees the buffer.

use crate::decide::rules::pays_to_promote;

/// The smallest pinned request served pageable first: 1 MiB ([`crate::decide::ceiling::OF_NOTE`],
/// where copies start to run at bandwidth rather than latency). Smaller ones would save
/// little memory, and are served as plain CUDA serves them.
pub const PAGEABLE_FIRST_FROM: u64 = crate::decide::ceiling::OF_NOTE;

/// Copies of served pinned requests between two copies of a buffer for the second to be a
/// near reuse: a loop's working set recurs within a few dozen copies (torch_mixed: every
/// 16), a burst every hundred steps does not (torch_mixed: over 200).
pub const NEAR_COPIES: u64 = 64;

/// Near reuses in a row that make a buffer hot (with the saving of the run paying for the
/// registration).
pub const RUN: u32 = 2;

/// The share of the program's time that buffers kept pageable may cost, beyond what
/// pinwise's promotions saved (half of issue 10's 2 % bound: registrations cost too).
pub const SLOWDOWN_BOUND: f64 = 0.01;

/// What the copies of one buffer served pageable first have shown so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Earning {
    /// The copy clock at its last copy (0: none yet).
    last: u64,
    /// Near reuses in a row, and the copies and saving of that run (its first copy
    /// included).
    run: u32,
    run_copies: u32,
    run_saved_ns: f64,
    /// All its copies and their saving.
    copies: u32,
    saved_ns: f64,
}

/// Why a buffer served pageable first is registered now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Register {
    /// Its copies recur close together and paid for it.
    Hot,
    /// Buffers kept pageable cost more than [`SLOWDOWN_BOUND`] allows, and its copies paid
    /// for it.
    SlowdownBound,
}

/// Whether a copy `distance` copies after the buffer's previous one is a near reuse.
pub fn near(distance: u64) -> bool {
    distance <= NEAR_COPIES
}

impl Earning {
    /// Notes a copy at `clock` (the count of copies of served pinned requests, this one
    /// included; rising) that would have saved `saving_ns` on pinned memory.
    pub fn note(&mut self, clock: u64, saving_ns: f64) {
        let near_reuse = self.last != 0 && near(clock.saturating_sub(self.last + 1));
        if near_reuse {
            self.run += 1;
            self.run_copies += 1;
            self.run_saved_ns += saving_ns;
        } else {
            self.run = 0;
            self.run_copies = 1;
            self.run_saved_ns = saving_ns;
        }
        self.last = clock;
        self.copies = self.copies.saturating_add(1);
        self.saved_ns += saving_ns;
    }

    /// Whether its copies recur close together and their saving paid for a registration
    /// costing `threshold_ns` ([`crate::decide::rules::promotion_threshold_ns`]).
    pub fn hot(&self, threshold_ns: f64) -> bool {
        self.run >= RUN && pays_to_promote(self.run_saved_ns, self.run_copies.into(), threshold_ns)
    }

    /// Whether all its copies so far paid for a registration costing `threshold_ns`.
    pub fn paid(&self, threshold_ns: f64) -> bool {
        pays_to_promote(self.saved_ns, self.copies.into(), threshold_ns)
    }
}

/// Whether buffers kept pageable have cost more than the program can afford: `spent_ns`
/// forgone by their copies, over `elapsed_ns` since the first was served, with `credit_ns`
/// saved meanwhile by pinwise's promotions.
pub fn over_budget(spent_ns: f64, elapsed_ns: f64, credit_ns: f64) -> bool {
    spent_ns > SLOWDOWN_BOUND * elapsed_ns + credit_ns
}

/// After a copy noted in `e`: register the buffer now, and why; `None` to keep it pageable.
/// `threshold_ns` is what registering it costs; the rest as in [`over_budget`].
pub fn register_now(
    e: &Earning,
    threshold_ns: f64,
    spent_ns: f64,
    elapsed_ns: f64,
    credit_ns: f64,
) -> Option<Register> {
    if e.hot(threshold_ns) {
        Some(Register::Hot)
    } else if e.paid(threshold_ns) && over_budget(spent_ns, elapsed_ns, credit_ns) {
        Some(Register::SlowdownBound)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Priced as in the module documentation (H200 table): 4 MiB and 64 MiB.
    const SAVE_4M: f64 = 172_000.0;
    const REG_4M: f64 = 438_000.0;
    const SAVE_64M: f64 = 2_784_000.0;
    const REG_64M: f64 = 2_717_000.0;

    #[test]
    fn a_buffer_copied_round_robin_turns_hot_on_its_third_copy() {
        // torch_mixed: 8 pinned buffers, one uploaded a step, beside 8 pageable ones and
        // the odd scalar: 16 other served copies between two copies of one buffer at most.
        let mut e = Earning::default();
        let mut clock = 0;
        let mut registered_at = None;
        for copy in 1..=25 {
            clock += 16;
            e.note(clock, SAVE_4M);
            if registered_at.is_none() && register_now(&e, REG_4M, 0.0, 1e9, 0.0).is_some() {
                registered_at = Some(copy);
            }
        }
        assert_eq!(registered_at, Some(3), "{e:?}");
        assert_eq!(register_now(&e, REG_4M, 0.0, 1e9, 0.0), Some(Register::Hot));
    }

    #[test]
    fn a_buffer_moved_in_bursts_never_builds_a_run_across_them() {
        // torch_mixed's offloaded state: up and down every 100 steps, 64 MiB: one burst
        // saves more than a registration costs, but the bursts are far apart.
        let mut e = Earning::default();
        let mut clock = 0;
        for _burst in 0..10 {
            clock += 400;
            e.note(clock, SAVE_64M);
            clock += 2;
            e.note(clock, SAVE_64M);
            assert!(!e.hot(REG_64M), "{e:?}");
            assert_eq!(register_now(&e, REG_64M, 0.0, 1e12, 0.0), None);
        }
        assert!(e.paid(REG_64M), "its copies did pay over the run");
        // A burst of three round trips is a run of its own: hot.
        let mut b = Earning::default();
        for i in 1..=3 {
            b.note(1000 + i, SAVE_64M);
        }
        assert_eq!(
            register_now(&b, REG_64M, 0.0, 1e12, 0.0),
            Some(Register::Hot)
        );
    }

    #[test]
    fn the_slowdown_bound_registers_a_buffer_the_program_cannot_afford_pageable() {
        let mut e = Earning::default();
        e.note(500, SAVE_64M);
        e.note(502, SAVE_64M);
        assert!(!e.hot(REG_64M));
        // 5.6 ms forgone in 320 ms of steps: 1.7 %, over the bound.
        let spent = 2.0 * SAVE_64M;
        assert!(over_budget(spent, 320e6, 0.0));
        assert_eq!(
            register_now(&e, REG_64M, spent, 320e6, 0.0),
            Some(Register::SlowdownBound)
        );
        // Within the bound over a longer time, or paid for by promotions' savings: kept.
        assert!(!over_budget(spent, 600e6, 0.0));
        assert_eq!(register_now(&e, REG_64M, spent, 320e6, 3e6), None);
        // One copy never pays for a registration, whatever the budget says.
        let mut once = Earning::default();
        once.note(1, SAVE_64M);
        assert_eq!(register_now(&once, REG_64M, 1e12, 1.0, 0.0), None);
    }

    #[test]
    fn near_is_at_most_near_copies_between() {
        assert!(near(0));
        assert!(near(NEAR_COPIES));
        assert!(!near(NEAR_COPIES + 1));
        let mut e = Earning::default();
        e.note(1, 1.0);
        e.note(2 + NEAR_COPIES, 1.0);
        assert_eq!(e.run, 1, "{} copies between: near", NEAR_COPIES);
        e.note(4 + 2 * NEAR_COPIES, 1.0);
        assert_eq!(e.run, 0, "{} copies between: a new run", NEAR_COPIES + 1);
        assert_eq!((e.run_copies, e.copies), (1, 3));
    }
}
