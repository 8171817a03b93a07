//! What the pinned pool's blocks are wanted for: the bytes in use by allocations pinned for
//! their own sake (hot ones, required ones, a program's pinned requests) and their recent
//! peak, and the bytes lent to allocations served from spare idle blocks. pinwise-core's
//! [`pinwise_core::decide::rules::is_spare`] decides on these whether an idle block may
//! serve a request that would otherwise be pageable.
//!
//! The peak is the highest use within the current window and the one before it, a window
//! being [`WINDOW`] allocations: a block is spare only when the pool holds more than what
//! was used at once lately, so blocks of hot buffers that are between their free and their
//! next allocation are not lent; blocks whose users stopped (a phase of the program ended)
//! become spare after at most two windows. Nothing is spare before a first window ended.
//! Should an allocation pinned for its own sake
//! then find no free block while blocks are lent (its users came back: a *lending miss*),
//! the pool grows for it once, and the demand keeps, for good, a floor of what was held and
//! lent at that moment plus that request ([`PoolDemand::missed`]): no more lending on that
//! memory, so the pool never grows again for blocks that were lent. Relaxed atomics: the figures are estimates that
//! another thread may change at any moment, and a spare block is taken without growing the
//! pool whatever they say (the engine's pool take).

use std::sync::atomic::{AtomicU64, Ordering};

/// Allocations per window of the demand's peak.
pub const WINDOW: u64 = 1024;

/// The pool's demand. See the module documentation.
#[derive(Debug, Default)]
pub struct PoolDemand {
    /// Pool bytes in use by allocations pinned for their own sake.
    held: AtomicU64,
    /// The highest `held` in the current window.
    peak_now: AtomicU64,
    /// The highest `held` in the window before.
    peak_before: AtomicU64,
    /// Allocations counted, for the windows.
    allocations: AtomicU64,
    /// Pool bytes in use by allocations served from spare blocks.
    lent: AtomicU64,
    /// The demand at the last lending miss (held + lent + the request): the peak never
    /// falls below it.
    floor: AtomicU64,
}

impl PoolDemand {
    /// A new, empty demand.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one allocation (of any kind); every [`WINDOW`] allocations a new window
    /// starts.
    pub fn tick(&self) {
        let n = self.allocations.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_multiple_of(WINDOW) {
            let now = self.peak_now.load(Ordering::Relaxed);
            self.peak_before.store(now, Ordering::Relaxed);
            self.peak_now
                .store(self.held.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    /// A block of `bytes` taken by an allocation pinned for its own sake.
    pub fn hold(&self, bytes: u64) {
        let held = self.held.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak_now.fetch_max(held, Ordering::Relaxed);
    }

    /// Such a block given back.
    pub fn release(&self, bytes: u64) {
        sub(&self.held, bytes);
    }

    /// A spare block of `bytes` lent to an allocation.
    pub fn lend(&self, bytes: u64) {
        self.lent.fetch_add(bytes, Ordering::Relaxed);
    }

    /// A lent block given back.
    pub fn give_back(&self, bytes: u64) {
        sub(&self.lent, bytes);
    }

    /// An allocation pinned for its own sake of `bytes` found no free block (the pool
    /// grows for it). When blocks are lent, that is a lending miss: the demand's floor
    /// becomes what is held and lent now plus `bytes`. Returns whether it was one.
    pub fn missed(&self, bytes: u64) -> bool {
        let lent = self.lent();
        if lent == 0 {
            return false;
        }
        let floor = self.held().saturating_add(lent).saturating_add(bytes);
        self.floor.fetch_max(floor, Ordering::Relaxed);
        true
    }

    /// The recent peak of the held bytes (this window and the one before, and now), and
    /// never below the floor of the last lending miss; `u64::MAX` (nothing is spare) until
    /// a first window has ended: in the first allocations, blocks the pool adopted or got
    /// for a site's first pinned buffer are wanted by buffers not seen yet.
    pub fn peak(&self) -> u64 {
        if self.allocations.load(Ordering::Relaxed) < WINDOW {
            return u64::MAX;
        }
        self.peak_now
            .load(Ordering::Relaxed)
            .max(self.peak_before.load(Ordering::Relaxed))
            .max(self.held.load(Ordering::Relaxed))
            .max(self.floor.load(Ordering::Relaxed))
    }

    /// Bytes lent now.
    pub fn lent(&self) -> u64 {
        self.lent.load(Ordering::Relaxed)
    }

    /// Bytes held now.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }
}

/// `a -= bytes`, never below zero.
fn sub(a: &AtomicU64, bytes: u64) {
    let _ = a.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        Some(v.saturating_sub(bytes))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_lasts_two_windows_then_follows_the_use() {
        let d = PoolDemand::new();
        d.hold(8192);
        d.release(8192);
        d.hold(4096);
        assert_eq!(d.peak(), u64::MAX, "unknown before a first window ended");
        for _ in 0..WINDOW {
            d.tick();
        }
        assert_eq!(d.peak(), 8192, "the peak of the first window");
        d.hold(4096);
        d.release(4096);
        for _ in 0..WINDOW {
            d.tick();
        }
        assert_eq!(d.peak(), 8192, "and of the window before");
        for _ in 0..WINDOW {
            d.tick();
        }
        assert_eq!(d.peak(), 4096, "two windows on: what is held");
        d.release(4096);
        assert_eq!(d.held(), 0);
        d.release(1);
        assert_eq!(d.held(), 0, "never below zero");
        d.lend(4096);
        assert_eq!(d.lent(), 4096);
        d.give_back(4096);
        assert_eq!(d.lent(), 0);
    }

    #[test]
    fn a_lending_miss_sets_a_floor_for_good() {
        let d = PoolDemand::new();
        for _ in 0..WINDOW {
            d.tick();
        }
        d.hold(4096);
        assert!(!d.missed(4096), "nothing lent: an ordinary miss");
        assert_eq!(d.peak(), 4096);
        d.lend(4096);
        assert!(d.missed(4096));
        d.release(4096);
        d.give_back(4096);
        for _ in 0..3 * WINDOW {
            d.tick();
        }
        assert_eq!(d.peak(), 3 * 4096, "held + lent + the request, kept");
    }
}
