//! The pinned budget: a hard cap on page-locked bytes, reserved atomically before pinning.
//!
//! Every path that page-locks memory first calls [`PinBudget::try_reserve`] for the bytes it
//! is about to lock, and calls [`PinBudget::release`] only after they are unlocked. So the
//! bytes actually locked never exceed the reserved bytes, and the reserved bytes never exceed
//! the cap: `try_reserve` is a compare-and-swap loop that only ever stores a value `<= cap`.
//! Lock-free and allocation-free, so it may be used from any hook.

use std::sync::atomic::{AtomicU64, Ordering};

/// Fraction of the machine's memory the default budget allows to be pinned.
pub const DEFAULT_BUDGET_FRACTION: f64 = 0.25;

/// Budget used when the machine's memory cannot be read (`/proc/meminfo` missing).
pub const FALLBACK_BUDGET_BYTES: u64 = 4 << 30;

/// A hard cap on pinned bytes, with the bytes reserved now and at most.
#[derive(Debug)]
pub struct PinBudget {
    cap: AtomicU64,
    reserved: AtomicU64,
    peak: AtomicU64,
    refusals: AtomicU64,
}

impl PinBudget {
    /// A budget of `cap` bytes, nothing reserved.
    pub fn new(cap: u64) -> Self {
        PinBudget {
            cap: AtomicU64::new(cap),
            reserved: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            refusals: AtomicU64::new(0),
        }
    }

    /// Reserves `bytes` if that keeps the reserved total within the cap. Returns whether it
    /// did; a refusal is counted.
    pub fn try_reserve(&self, bytes: u64) -> bool {
        let cap = self.cap.load(Ordering::Acquire);
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
    fn lowering_the_cap_refuses_until_released() {
        let b = PinBudget::new(100);
        assert!(b.try_reserve(80));
        b.set_cap(50);
        assert!(!b.try_reserve(1));
        b.release(80);
        assert!(b.try_reserve(50));
    }
}
