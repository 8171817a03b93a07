//! The pinned budget: a hard cap on page-locked bytes, reserved atomically before pinning.
//!
//! Every path that page-locks memory first calls [`PinBudget::try_reserve`] for the bytes it
//! is about to lock, and calls [`PinBudget::release`] only after they are unlocked. So the
//! bytes actually locked never exceed the reserved bytes, and the reserved bytes never exceed
//! the cap: `try_reserve` is a compare-and-swap loop that only ever stores a value `<= cap`.
//! Lock-free and allocation-free, so it may be used from any hook.
//!
//! Beside the cap, a *limit* ([`PinBudget::set_limit`]): the ceiling pinwise-core's
//! [`pinwise_core::decide::ceiling`] sets (no more than the program itself would lock). What
//! pinwise pins on its own account ([`PinBudget::try_reserve`]: promotions, pooled blocks of
//! its own allocations) stays within both; a program's own pinned request
//! ([`PinBudget::try_reserve_request`]) within the cap only. Memory page-locked without
//! pinwise's say (the program's own registrations, requests passed on to CUDA) is
//! [`PinBudget::charge`]d, so that the reserved bytes are every byte locked in the process.

use std::sync::atomic::{AtomicU64, Ordering};

/// Fraction of the machine's memory the default budget allows to be pinned.
pub const DEFAULT_BUDGET_FRACTION: f64 = 0.25;

/// Budget used when the machine's memory cannot be read (`/proc/meminfo` missing).
pub const FALLBACK_BUDGET_BYTES: u64 = 4 << 30;

/// A hard cap on pinned bytes, with the bytes reserved now and at most.
#[derive(Debug)]
pub struct PinBudget {
    cap: AtomicU64,
    limit: AtomicU64,
    reserved: AtomicU64,
    peak: AtomicU64,
    refusals: AtomicU64,
}

impl PinBudget {
    /// A budget of `cap` bytes, nothing reserved.
    pub fn new(cap: u64) -> Self {
        PinBudget {
            cap: AtomicU64::new(cap),
            limit: AtomicU64::new(u64::MAX),
            reserved: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            refusals: AtomicU64::new(0),
        }
    }

    /// Reserves `bytes` for pinwise's own account if that keeps the reserved total within
    /// the cap and the limit. Returns whether it did; a refusal is counted.
    pub fn try_reserve(&self, bytes: u64) -> bool {
        self.reserve_within(bytes, self.cap().min(self.limit()))
    }

    /// Reserves `bytes` for a program's own pinned request if that keeps the reserved total
    /// within the cap (the limit, made of the program's own peak, is the caller's to make
    /// room for). Returns whether it did; a refusal is counted.
    pub fn try_reserve_request(&self, bytes: u64) -> bool {
        self.reserve_within(bytes, self.cap())
    }

    /// Counts `bytes` page-locked whatever the cap (memory the program locked itself, or
    /// that its semantics need locked); given back with [`PinBudget::release`].
    pub fn charge(&self, bytes: u64) {
        let next = self.reserved.fetch_add(bytes, Ordering::AcqRel) + bytes;
        self.peak.fetch_max(next, Ordering::Relaxed);
    }

    fn reserve_within(&self, bytes: u64, cap: u64) -> bool {
        let mut cur = self.reserved.load(Ordering::Relaxed);
        loop {
            let Some(next) = cur.checked_add(bytes).filter(|&n| n <= cap) else {
                self.refusals.fetch_add(1, Ordering::Relaxed);
                return false;
            };
            match self.reserved.compare_exchange_weak(
                cur,
                next,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.peak.fetch_max(next, Ordering::Relaxed);
                    return true;
                }
                Err(seen) => cur = seen,
            }
        }
    }

    /// Gives back `bytes` reserved earlier (after they were unpinned).
    pub fn release(&self, bytes: u64) {
        let prev = self.reserved.fetch_sub(bytes, Ordering::AcqRel);
        debug_assert!(prev >= bytes, "released more pinned budget than reserved");
    }

    /// The cap in bytes.
    pub fn cap(&self) -> u64 {
        self.cap.load(Ordering::Acquire)
    }

    /// Changes the cap. Lowering it below what is reserved refuses new reservations until
    /// enough is released; nothing already pinned is taken away.
    pub fn set_cap(&self, cap: u64) {
        self.cap.store(cap, Ordering::Release);
    }

    /// The limit below the cap on what pinwise pins on its own account (`u64::MAX`: none).
    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Acquire)
    }

    /// Sets the limit (see the module documentation). Nothing already pinned is taken away.
    pub fn set_limit(&self, limit: u64) {
        self.limit.store(limit, Ordering::Release);
    }

    /// Bytes reserved now.
    pub fn reserved(&self) -> u64 {
        self.reserved.load(Ordering::Acquire)
    }

    /// The most bytes that were reserved at once.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Acquire)
    }

    /// How many reservations were refused.
    pub fn refusals(&self) -> u64 {
        self.refusals.load(Ordering::Relaxed)
    }
}

/// The default cap: [`DEFAULT_BUDGET_FRACTION`] of `MemTotal` from `/proc/meminfo`, or
/// [`FALLBACK_BUDGET_BYTES`] when it cannot be read.
pub fn default_budget_bytes() -> u64 {
    match std::fs::read_to_string("/proc/meminfo")
        .ok()
        .as_deref()
        .and_then(mem_total_bytes)
    {
        Some(total) => (total as f64 * DEFAULT_BUDGET_FRACTION) as u64,
        None => FALLBACK_BUDGET_BYTES,
    }
}

pub use pinwise_core::units::mem_total_bytes;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_within_cap_and_refuse_beyond() {
        let b = PinBudget::new(100);
        assert!(b.try_reserve(60));
        assert!(!b.try_reserve(41));
        assert!(b.try_reserve(40));
        assert_eq!(b.reserved(), 100);
        assert_eq!(b.refusals(), 1);
        b.release(60);
        assert_eq!(b.reserved(), 40);
        assert_eq!(b.peak(), 100);
        assert!(
            !b.try_reserve(u64::MAX),
            "overflow must be a refusal, not a wrap"
        );
    }

    #[test]
    fn the_limit_bounds_pinwise_own_account_not_requests() {
        let b = PinBudget::new(100);
        b.set_limit(40);
        assert!(b.try_reserve(30));
        assert!(!b.try_reserve(11), "over the limit");
        assert!(b.try_reserve_request(60), "a program request: the cap only");
        assert!(!b.try_reserve_request(11));
        b.charge(50);
        assert_eq!(b.reserved(), 140, "charges go over the cap");
        assert_eq!(b.peak(), 140);
        b.release(140);
        assert_eq!(b.reserved(), 0);
    }

    #[test]
    fn lowering_the_cap_refuses_until_released() {
        let b = PinBudget::new(100);
        assert!(b.try_reserve(80));
        b.set_cap(50);
        assert!(!b.try_reserve(1));
        b.release(80);
        assert!(b.try_reserve(50));
    }
}
