//! The per-allocation and per-buffer rules: serve a request pinned or pageable, keep a
//! program's pinned request pinned, promote (register in place) a pageable buffer that
//! turned hot. The allocator engine (pinwise-alloc) and the preload library
//! (pinwise-preload) gather the facts (flags, the profile's advice, the call site's
//! history, the pool's free blocks, the copies seen) and ask here; nothing else decides.
//!
//! | decision | function | asked by |
//! |---|---|---|
//! | a program's pinned request: must it be pinned whatever the evidence? | [`pinned_request`] | preload (`cuMemHostAlloc` hooks) |
//! | serve an allocation pinned or pageable | [`serve`] | engine (every allocation) |
//! | does pinning a new allocation pay now? | [`pays_now`] | engine (via [`serve`]) |
//! | is an allocation hot (worth holding pinned)? | [`worth_pinning`] | engine (outcomes), plan |
//! | promote a pageable buffer now | [`promote`] / [`pays_to_promote`] | engine (its mappings), preload (the program's buffers) |
//! | serve a program's pinned request from the node's pinned pool (`pinwise run --pool`)? | [`from_node_pool`] | preload (`cuMemHostAlloc` hooks) |
//! | is an idle pinned block spare (no allocation pinned for its own sake will want it back)? | [`is_spare`] | engine (via [`serve`]) |
//! | does serving a request otherwise left pageable from a spare block pay? | [`spare_block_pays`] | engine (via [`serve`]) |

use crate::cost::PinMethod;
use crate::decide::policy::{Decision, Policy, PredictedTransfers};
use crate::decide::pricing::{self, Obtain};
use crate::event::Direction;

pub use crate::decide::pricing::worth_pinning;

/// What a request itself asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ask {
    /// It must be pinned (the caller needs pinned semantics); failing that, it fails.
    pub require_pinned: bool,
    /// It must never be pinned.
    pub never_pin: bool,
    /// The program asked for pinned memory (a `cuMemHostAlloc` without special flags):
    /// pinned unless the evidence says otherwise.
    pub prefer_pinned: bool,
    /// With `prefer_pinned`: without evidence either way (no site history), serve it
    /// pageable and let its copies earn it a registration ([`crate::decide::earn`]); the
    /// caller registers it (not the allocator's own promotion).
    pub earn_pinned: bool,
}

/// The default smallest request served from the node's pinned pool (see [`from_node_pool`]).
pub const NODE_POOL_MIN_BYTES: u64 = 8 << 20;

/// Whether a program's pinned request (CUDA `flags`, `size` bytes) goes to the node's
/// pinned pool (`pinwise run --pool`, requests of at least `min_bytes`; default
/// [`NODE_POOL_MIN_BYTES`]): large requests that ask for nothing but `PORTABLE` (1).
///
/// Why large only: each pool buffer costs a round trip to the service, a memfd and a
/// mapping, the service holds at most 256 buffers per client, and every copy on a pool
/// buffer goes through the service, about 18 us more than in-process (measured on an H100,
/// `bench/results/gpu-shared-pool.md`: 12 % of an 8 MiB copy at the 55 GB/s measured there,
/// a multiple of a small one), while a small buffer's GPU page tables are next to nothing (8 bytes per 4 KiB page);
/// small requests stay with the in-process allocator, whose pooled blocks cost nothing.
/// Why not `DEVICEMAP` (2) or `WRITECOMBINED` (4): kernels read mapped memory through a
/// device pointer of the program's own context, and write-combining is a property of the
/// program's mapping; the pool's buffers are mapped on the GPU in the service's context.
pub fn from_node_pool(cuda_flags: u32, size: usize, min_bytes: u64) -> bool {
    const PORTABLE: u32 = 1;
    size as u64 >= min_bytes && cuda_flags & !PORTABLE == 0
}

/// How a program's pinned request (CUDA `flags`, `size` bytes) is asked of the engine:
/// required pinned when its flags need pinned semantics (mapped, portable,
/// write-combined), when it is smaller than `pooled_below` (a block of an existing pinned
/// segment costs nothing), or when the user keeps every pinned request pinned
/// (`keep_pinned`); otherwise preferred pinned, and served pageable first where
/// `pageable_first` (no graph capture is open: [`crate::decide::earn`]).
pub fn pinned_request(
    cuda_flags: u32,
    size: usize,
    pooled_below: usize,
    keep_pinned: bool,
    pageable_first: bool,
) -> Ask {
    let required = cuda_flags != 0 || size < pooled_below || keep_pinned;
    Ask {
        require_pinned: required,
        never_pin: false,
        prefer_pinned: !required,
        earn_pinned: !required && pageable_first,
    }
}

/// A profile's advice for one allocation (use mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advised {
    /// Pin it.
    Pin,
    /// Leave it pageable.
    Pageable,
    /// The profile knows nothing that matches (other tag, other size): decide adaptively.
    Unknown,
}

/// What the call site's history predicts for the allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SiteGuess {
    /// Pinning is predicted to pay (the site's recent allocations were hot).
    pub hot: bool,
    /// The site has any history at all.
    pub has_history: bool,
}

/// Why an allocation is served as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// The caller requires pinned memory.
    Required,
    /// The caller forbids pinning.
    NeverPin,
    /// The profile's plan pins it.
    AdvisedPin,
    /// The profile's plan leaves it pageable, but the program asked for pinned memory for
    /// an allocation that was pinned and copied again and again in the profiled run (the
    /// promotion rule would pin it on its first copies anyway).
    PinnedAndReused,
    /// The profile's plan leaves it pageable, but its site proved hot in this run and the
    /// pool holds a free block (pinned anyway, costs nothing): the warm block is used.
    HotSiteFreeBlock,
    /// The profile's plan, or the site's history, leaves it pageable, but the pool holds a
    /// spare idle block that fits ([`is_spare`]) and its predicted copies are faster pinned
    /// ([`spare_block_pays`]): served from that block, pinning nothing more.
    SpareBlock,
    /// The profile's plan leaves it pageable.
    AdvisedPageable,
    /// The program asked for pinned memory and the site's history does not say cold (no
    /// history, or hot): as plain CUDA.
    ProgramAskedPinned,
    /// The program asked for pinned memory, its site has no history, and its own copies
    /// are to earn it a registration ([`crate::decide::earn`]).
    EarnsPinning,
    /// The program asked for pinned memory, but the site's allocations turned out cold.
    ProgramAskedButCold,
    /// No history at this site yet: pageable until copies prove it hot (promotion).
    NoHistory,
    /// The site's history predicts cold.
    PredictedCold,
    /// Predicted hot, and pinning pays at what it costs now.
    PaysNow,
    /// Predicted hot, but pinning does not pay at what it costs now (or the budget is full).
    DoesNotPayNow,
}

/// A serving decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Serve {
    /// Serve it pinned.
    pub pinned: bool,
    /// Why.
    pub basis: Basis,
}

impl Serve {
    fn new(pinned: bool, basis: Basis) -> Serve {
        Serve { pinned, basis }
    }
}

/// Serve one allocation pinned or pageable. In order: the request's own demands; the
/// profile's `advice` (use mode, where it matched and has not been proved wrong: `None`
/// otherwise); a program's pinned request against its site's `guess`; else the site's
/// `guess` weighed by `pays_now` (pinning priced at what the engine would do now). The
/// closures are asked only where the answer matters: `pinned_and_reused` (the profiled
/// allocation was pinned and reused), `hot_site_free_block` (the site proved hot in this
/// run and the pool has a free block of its size), `pays_now`, and `spare_block` (the pool
/// holds a spare idle block that fits, [`is_spare`], and serving from it pays,
/// [`spare_block_pays`]): asked last, for a request that would otherwise be pageable
/// although its site has a history (advised pageable, predicted cold, a program's pinned
/// request that turned out cold), so that memory already pinned and idle serves it rather
/// than pageable memory and a staged copy.
pub fn serve(
    ask: Ask,
    advice: Option<Advised>,
    pinned_and_reused: impl FnOnce() -> bool,
    hot_site_free_block: impl FnOnce() -> bool,
    guess: SiteGuess,
    pays_now: impl FnOnce() -> bool,
    spare_block: impl FnOnce() -> bool,
) -> Serve {
    if ask.require_pinned {
        return Serve::new(true, Basis::Required);
    }
    if ask.never_pin {
        return Serve::new(false, Basis::NeverPin);
    }
    match advice {
        Some(Advised::Pin) => return Serve::new(true, Basis::AdvisedPin),
        Some(Advised::Pageable) => {
            if ask.prefer_pinned && pinned_and_reused() {
                return Serve::new(true, Basis::PinnedAndReused);
            }
            if hot_site_free_block() {
                return Serve::new(true, Basis::HotSiteFreeBlock);
            }
            return or_spare(spare_block, Basis::AdvisedPageable);
        }
        Some(Advised::Unknown) | None => {}
    }
    if ask.prefer_pinned {
        return if guess.hot {
            Serve::new(true, Basis::ProgramAskedPinned)
        } else if guess.has_history {
            or_spare(spare_block, Basis::ProgramAskedButCold)
        } else if ask.earn_pinned {
            Serve::new(false, Basis::EarnsPinning)
        } else {
            Serve::new(true, Basis::ProgramAskedPinned)
        };
    }
    if !guess.has_history {
        return Serve::new(false, Basis::NoHistory);
    }
    if !guess.hot {
        return or_spare(spare_block, Basis::PredictedCold);
    }
    if pays_now() {
        Serve::new(true, Basis::PaysNow)
    } else {
        Serve::new(false, Basis::DoesNotPayNow)
    }
}

/// Pageable for `basis`, unless a spare block serves it.
fn or_spare(spare_block: impl FnOnce() -> bool, basis: Basis) -> Serve {
    if spare_block() {
        Serve::new(true, Basis::SpareBlock)
    } else {
        Serve::new(false, basis)
    }
}

/// The pinned pool's state when a request that would be served pageable could take an idle
/// block instead (all in bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleBlock {
    /// The pool has a free block that fits the request without carving it from a much
    /// larger one.
    pub fits: bool,
    /// Page-locked bytes the pool holds (every segment, blocks in use or not).
    pub pool_bytes: u64,
    /// The recent peak of the pool's bytes in use by allocations pinned for their own sake
    /// (not served from spare blocks): what those allocations are expected to want again.
    pub demand_peak: u64,
    /// The pool's bytes in use now by allocations served from spare blocks.
    pub lent: u64,
}

/// Whether a request of `graded` bytes may take an idle pinned block as a spare: one fits,
/// and the pool holds at least the recent peak of what allocations pinned for their own
/// sake use, plus what is lent already, plus this block. Taking it then pins nothing more,
/// and leaves the allocations that are pinned for their own sake (whose blocks are busy, or
/// idle between their frees and their next allocation) the room their recent peak needs:
/// a spare block never makes the pool grow.
pub fn is_spare(idle: &IdleBlock, graded: u64) -> bool {
    idle.fits
        && idle.pool_bytes
            >= idle
                .demand_peak
                .saturating_add(idle.lent)
                .saturating_add(graded)
}

/// Whether serving a `graded`-byte request predicted to see `expected` transfers from a
/// spare idle block pays: priced as a pool hit ([`Obtain::PoolHit`]: nothing to pin or give
/// back, and nothing more held, the block being pinned and counted already), with copies at
/// pinned memory's speed. It pays when those copies are faster pinned at all.
pub fn spare_block_pays(policy: &Policy, graded: u64, expected: &PredictedTransfers) -> Decision {
    let hit = pricing::price(policy, graded, Obtain::PoolHit, 0, 1);
    pricing::decide_priced(policy, graded, *expected, u64::MAX, &hit)
}

/// The allocator's state when it weighs pinning a new allocation now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PinNow {
    /// The allocation's pool block size.
    pub graded: u64,
    /// The segment a new block would need (the graded size, at least the pool's smallest).
    pub segment: u64,
    /// The pool has a free block of that size.
    pub pool_has_free: bool,
    /// The pageable cache has a warm mapping that fits the segment.
    pub cache_has_fit: bool,
    /// Pinned bytes reserved now.
    pub reserved: u64,
    /// The pinned budget.
    pub cap: u64,
}

/// Whether pinning an allocation predicted to see `expected` transfers pays *now*, priced
/// at what the engine would do ([`pricing::price`]): a free pooled block costs nothing;
/// otherwise a new segment (registering a warm cached mapping where the pageable cache has
/// one, else fresh memory the cheaper way), plus holding it. A new segment pays when either
///
/// - **the prediction** pays for it: `expected` transfers credited with `reuse` allocations
///   like this one (the site's recent run of hot outcomes, capped by the caller), since the
///   pool keeps the block for them; or
/// - **what the site has already lost** pays for it: `forgone`, the copies its hot
///   allocations made on pageable memory since it last had a pinned block (ski rental at
///   the call site: keep renting until the rent paid would have bought the block, then buy
///   it). This bounds learning where one allocation's copies save far less than a block
///   costs (a 64 KiB buffer copied once each way per iteration saves about 23 us on an
///   H100, against about 212 us for registering, unregistering and holding a block): the
///   site is pinned after about price / saving-per-allocation allocations, never worse
///   than twice the best choice in hindsight, where the prediction alone (capped credit)
///   would never pin it.
///
/// A refusal for the budget says [`crate::Reason::BudgetFull`].
pub fn pays_now(
    policy: &Policy,
    expected: &PredictedTransfers,
    reuse: f64,
    forgone: &PredictedTransfers,
    now: &PinNow,
) -> Decision {
    if now.pool_has_free {
        let hit = pricing::price(policy, now.graded, Obtain::PoolHit, 0, 1);
        return pricing::decide_priced(policy, now.graded, *expected, u64::MAX, &hit);
    }
    let obtain = if now.cache_has_fit {
        Obtain::RegisterCached
    } else {
        Obtain::Fresh
    };
    let price = pricing::price(
        policy,
        now.segment,
        obtain,
        now.reserved.saturating_add(now.segment),
        now.cap,
    );
    let remaining = now.cap.saturating_sub(now.reserved);
    let predicted = pricing::decide_priced(
        policy,
        now.segment,
        pricing::scaled(expected, expected.total() * reuse),
        remaining,
        &price,
    );
    if predicted.pin || forgone.total() <= 0.0 {
        return predicted;
    }
    let lost = pricing::decide_priced(policy, now.segment, *forgone, remaining, &price);
    if lost.pin || matches!(lost.reason, crate::Reason::BudgetFull { .. }) {
        lost
    } else {
        predicted
    }
}

/// The saving one copy of `bytes` in `direction` makes once its pageable buffer is
/// registered in place (registered memory's bandwidth), ns, never negative: what a
/// promotion's evidence is counted in.
pub fn promotion_saving_ns(policy: &Policy, direction: Direction, bytes: u64) -> f64 {
    policy
        .cost_model()
        .transfer_saving_ns_by(direction, bytes, PinMethod::RegisterTouched)
        .max(0.0)
}

/// The saving a pageable buffer's copies must exceed before it is registered in place,
/// ns: registering and unregistering its `bytes` plus holding them pinned with
/// `pinned_after` of `budget` bytes pinned ([`pricing::price`], [`Obtain::RegisterCached`]),
/// times the policy's payback factor.
pub fn promotion_threshold_ns(policy: &Policy, bytes: u64, pinned_after: u64, budget: u64) -> f64 {
    pricing::price(policy, bytes, Obtain::RegisterCached, pinned_after, budget).cost_ns
        * policy.config().payback_factor
}

/// The promotion rule on running totals: a buffer copied at least twice whose copies saved
/// more than `required_ns` (at least [`promotion_threshold_ns`]; the preload raises it
/// where promotions at the same address did not pay). Ski rental: never worse than twice
/// the best choice in hindsight.
pub fn pays_to_promote(saved_ns: f64, copies: u64, required_ns: f64) -> bool {
    copies >= 2 && saved_ns > required_ns
}

/// The promotion rule on the copies `seen` of a `bytes`-byte pageable buffer, with
/// `pinned_after` of `budget` bytes pinned once it is registered.
pub fn promote(
    policy: &Policy,
    seen: &PredictedTransfers,
    bytes: u64,
    pinned_after: u64,
    budget: u64,
) -> bool {
    let copies = seen.total();
    if copies < 2.0 {
        return false;
    }
    let saved: f64 = Direction::ALL
        .iter()
        .map(|&d| {
            let n = seen.count[d.index()];
            if n <= 0.0 {
                return 0.0;
            }
            let each = (seen.bytes[d.index()] / n).round() as u64;
            n * promotion_saving_ns(policy, d, each)
        })
        .sum();
    pays_to_promote(
        saved,
        copies as u64,
        promotion_threshold_ns(policy, bytes, pinned_after, budget),
    )
}

/// The smallest copy in `direction` that registering its pageable buffer in place makes
/// faster ([`promotion_saving_ns`], registered memory's bandwidth: the same saving a
/// promotion's evidence is counted in; from there on the saving grows with the size);
/// `u64::MAX` when none up to 64 GiB does. Smaller copies never count towards a promotion.
pub fn smallest_saving_copy(policy: &Policy, direction: Direction) -> u64 {
    let saves = |b: u64| promotion_saving_ns(policy, direction, b) > 0.0;
    let mut hi = 4096u64;
    while !saves(hi) {
        if hi >= 64 << 30 {
            return u64::MAX;
        }
        hi *= 2;
    }
    // saves(hi); find the smallest size that saves in (lo, hi] (`lo` does not, or is 0).
    let mut lo = if hi == 4096 { 0 } else { hi / 2 };
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if saves(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_large_requests_without_mapped_or_write_combined_flags_go_to_the_node_pool() {
        let min = NODE_POOL_MIN_BYTES;
        assert!(from_node_pool(0, 8 << 20, min));
        assert!(from_node_pool(1, 1 << 30, min));
        assert!(!from_node_pool(0, (8 << 20) - 1, min));
        assert!(!from_node_pool(2, 1 << 30, min));
        assert!(!from_node_pool(4, 1 << 30, min));
        assert!(!from_node_pool(1 | 2, 1 << 30, min));
        assert!(from_node_pool(0, 1, 1));
    }
    use crate::CostModel;

    fn policy() -> Policy {
        Policy::new(CostModel::builtin())
    }

    const GUESS_NONE: SiteGuess = SiteGuess {
        hot: false,
        has_history: false,
    };
    const GUESS_HOT: SiteGuess = SiteGuess {
        hot: true,
        has_history: true,
    };
    const GUESS_COLD: SiteGuess = SiteGuess {
        hot: false,
        has_history: true,
    };

    fn never() -> bool {
        panic!("not to be asked")
    }

    #[test]
    fn the_request_comes_first_then_the_advice_then_the_history() {
        let required = Ask {
            require_pinned: true,
            ..Ask::default()
        };
        let s = serve(
            required,
            Some(Advised::Pageable),
            never,
            never,
            GUESS_COLD,
            never,
            never,
        );
        assert_eq!(s, Serve::new(true, Basis::Required));
        let never_pin = Ask {
            never_pin: true,
            ..Ask::default()
        };
        let s = serve(
            never_pin,
            Some(Advised::Pin),
            never,
            never,
            GUESS_HOT,
            never,
            never,
        );
        assert_eq!(s, Serve::new(false, Basis::NeverPin));
        let plain = Ask::default();
        let s = serve(
            plain,
            Some(Advised::Pin),
            never,
            never,
            GUESS_COLD,
            never,
            never,
        );
        assert_eq!(s, Serve::new(true, Basis::AdvisedPin));
        let s = serve(
            plain,
            Some(Advised::Pageable),
            never,
            || false,
            GUESS_HOT,
            never,
            || false,
        );
        assert_eq!(s, Serve::new(false, Basis::AdvisedPageable));
        // ... unless a spare idle block serves it.
        let s = serve(
            plain,
            Some(Advised::Pageable),
            never,
            || false,
            GUESS_HOT,
            never,
            || true,
        );
        assert_eq!(s, Serve::new(true, Basis::SpareBlock));
        // The warm cache's hot-site rule: a free block for a site hot in this run.
        let s = serve(
            plain,
            Some(Advised::Pageable),
            never,
            || true,
            GUESS_COLD,
            never,
            never,
        );
        assert_eq!(s, Serve::new(true, Basis::HotSiteFreeBlock));
        // Unknown advice: the history decides, priced now.
        let s = serve(
            plain,
            Some(Advised::Unknown),
            never,
            never,
            GUESS_HOT,
            || true,
            never,
        );
        assert_eq!(s, Serve::new(true, Basis::PaysNow));
        let s = serve(plain, None, never, never, GUESS_HOT, || false, never);
        assert_eq!(s, Serve::new(false, Basis::DoesNotPayNow));
        let s = serve(plain, None, never, never, GUESS_COLD, never, || false);
        assert_eq!(s, Serve::new(false, Basis::PredictedCold));
        let s = serve(plain, None, never, never, GUESS_COLD, never, || true);
        assert_eq!(s, Serve::new(true, Basis::SpareBlock));
        // No history: nothing predicts copies a spare block would make faster.
        let s = serve(plain, None, never, never, GUESS_NONE, never, never);
        assert_eq!(s, Serve::new(false, Basis::NoHistory));
    }

    #[test]
    fn a_programs_pinned_request_stays_pinned_unless_proved_cold() {
        let ask = pinned_request(0, 64 << 20, 1 << 20, false, false);
        assert!(ask.prefer_pinned && !ask.require_pinned);
        assert_eq!(
            serve(ask, None, never, never, GUESS_NONE, never, never),
            Serve::new(true, Basis::ProgramAskedPinned)
        );
        assert_eq!(
            serve(ask, None, never, never, GUESS_HOT, never, never),
            Serve::new(true, Basis::ProgramAskedPinned)
        );
        assert_eq!(
            serve(ask, None, never, never, GUESS_COLD, never, || false),
            Serve::new(false, Basis::ProgramAskedButCold)
        );
        assert_eq!(
            serve(ask, None, never, never, GUESS_COLD, never, || true),
            Serve::new(true, Basis::SpareBlock)
        );
        // Advised pageable, but pinned and reused in the profiled run: kept pinned.
        assert_eq!(
            serve(
                ask,
                Some(Advised::Pageable),
                || true,
                never,
                GUESS_COLD,
                never,
                never
            ),
            Serve::new(true, Basis::PinnedAndReused)
        );
        // Flags, small sizes and keep-pinned require pinned memory, pageable first or not.
        for first in [false, true] {
            assert!(pinned_request(2, 64 << 20, 1 << 20, false, first).require_pinned);
            assert!(pinned_request(0, 4096, 1 << 20, false, first).require_pinned);
            let kept = pinned_request(0, 64 << 20, 1 << 20, true, first);
            assert!(kept.require_pinned && !kept.earn_pinned);
        }
    }

    #[test]
    fn pageable_first_serves_a_request_without_evidence_pageable_and_follows_the_history() {
        let ask = pinned_request(0, 64 << 20, 1 << 20, false, true);
        assert!(ask.prefer_pinned && ask.earn_pinned && !ask.require_pinned);
        assert_eq!(
            serve(ask, None, never, never, GUESS_NONE, never, never),
            Serve::new(false, Basis::EarnsPinning)
        );
        assert_eq!(
            serve(ask, None, never, never, GUESS_HOT, never, never),
            Serve::new(true, Basis::ProgramAskedPinned),
            "a site whose buffers proved hot gets pinned memory at once"
        );
        assert_eq!(
            serve(ask, None, never, never, GUESS_COLD, never, || false),
            Serve::new(false, Basis::ProgramAskedButCold),
            "a site proved cold: pageable (from a spare pool block when there is one)"
        );
        assert_eq!(
            serve(
                ask,
                Some(Advised::Pin),
                never,
                never,
                GUESS_NONE,
                never,
                never
            ),
            Serve::new(true, Basis::AdvisedPin),
            "a profile's advice comes first"
        );
    }

    #[test]
    fn promotion_needs_two_copies_that_paid_for_registering_and_holding() {
        let p = policy();
        let size = 64u64 << 20;
        let budget = 1u64 << 34;
        let threshold = promotion_threshold_ns(&p, size, size, budget);
        let per_copy = promotion_saving_ns(&p, Direction::HtoD, size);
        assert!(per_copy > 0.0 && threshold > 0.0);
        // Enough copies to pay: promoted; one fewer: not.
        let n = (threshold / per_copy).floor() + 1.0;
        let n = n.max(2.0);
        let seen = PredictedTransfers::none().with(Direction::HtoD, n, size);
        assert!(promote(&p, &seen, size, size, budget));
        assert!(pays_to_promote(n * per_copy, n as u64, threshold));
        if n > 2.0 {
            let fewer = PredictedTransfers::none().with(Direction::HtoD, n - 1.0, size);
            assert!(!promote(&p, &fewer, size, size, budget));
        }
        // One copy never promotes, however much it saved.
        let one = PredictedTransfers::none().with(Direction::HtoD, 1.0, 1 << 30);
        assert!(!promote(&p, &one, 1 << 30, 1 << 30, budget));
        assert!(!pays_to_promote(f64::MAX, 1, 0.0));
        // A fuller budget asks for more.
        assert!(promotion_threshold_ns(&p, size, budget, budget) > threshold);
    }

    #[test]
    fn pinning_now_is_free_from_the_pool_and_refused_past_the_budget() {
        let p = policy();
        let size = 64u64 << 10;
        let now = PinNow {
            graded: size,
            segment: size,
            pool_has_free: true,
            cache_has_fit: false,
            reserved: 0,
            cap: 1 << 34,
        };
        let one = PredictedTransfers::none().with(Direction::HtoD, 1.0, size);
        let none = PredictedTransfers::none();
        // A free pool block: any saving pays.
        assert!(pays_now(&p, &one, 1.0, &none, &now).pin);
        // A new block: one copy of 64 KiB does not pay for fresh memory, many do.
        let fresh = PinNow {
            pool_has_free: false,
            ..now
        };
        assert!(!pays_now(&p, &one, 1.0, &none, &fresh).pin);
        let many = PredictedTransfers::none().with(Direction::HtoD, 1000.0, size);
        assert!(pays_now(&p, &many, 1.0, &none, &fresh).pin);
        // Reuse credit: the same expected transfers times the block's reuses.
        let few = PredictedTransfers::none().with(Direction::HtoD, 2.0, size);
        let alone = pays_now(&p, &few, 1.0, &none, &fresh);
        let reused = pays_now(&p, &few, 8.0, &none, &fresh);
        assert!(reused.saving_ns > 7.9 * alone.saving_ns);
        // No room: refused for the budget.
        let full = PinNow {
            reserved: 1 << 34,
            ..fresh
        };
        assert!(matches!(
            pays_now(&p, &many, 1.0, &none, &full).reason,
            crate::Reason::BudgetFull { .. }
        ));
    }

    /// Ski rental at the call site: copies already made on pageable memory by the site's hot
    /// allocations buy a new block once their saving covers its price, whatever the capped
    /// prediction says; never past the budget.
    #[test]
    fn what_a_site_has_lost_buys_its_block_once_it_covers_the_price() {
        let p = policy();
        let size = 64u64 << 10;
        let fresh = PinNow {
            graded: size,
            segment: size,
            pool_has_free: false,
            cache_has_fit: false,
            reserved: 0,
            cap: 1 << 34,
        };
        // One allocation's copies (one round trip) with the largest credit the engine gives
        // by default (8): does not pay for a new block at 64 KiB on the H200 table.
        let trip = PredictedTransfers::none()
            .with(Direction::HtoD, 1.0, size)
            .with(Direction::DtoH, 1.0, size);
        let none = PredictedTransfers::none();
        assert!(!pays_now(&p, &trip, 8.0, &none, &fresh).pin);
        // The smallest number of lost round trips that pays: k; k - 1 do not.
        let lost = |k: f64| pricing::scaled(&trip, 2.0 * k);
        let k = (1..10_000)
            .map(f64::from)
            .find(|&k| pays_now(&p, &trip, 8.0, &lost(k), &fresh).pin)
            .expect("enough lost copies pay for a block");
        assert!(k > 8.0, "past the prediction's credit: {k}");
        let d = pays_now(&p, &trip, 8.0, &lost(k), &fresh);
        assert!(d.saving_ns > d.cost_ns, "{d:?}");
        let short = pays_now(&p, &trip, 8.0, &lost(k - 1.0), &fresh);
        assert!(!short.pin && short.saving_ns <= short.cost_ns, "{short:?}");
        // Ski rental's bound: what was lost before buying is at most the price plus one
        // allocation's saving.
        assert!(short.saving_ns <= d.cost_ns);
        // No room: the loss does not buy past the budget, and says why (the hold price at a
        // full budget is higher: more loss is needed to get that far).
        let full = PinNow {
            reserved: 1 << 34,
            ..fresh
        };
        assert!(matches!(
            pays_now(&p, &trip, 8.0, &lost(100.0 * k), &full).reason,
            crate::Reason::BudgetFull { .. }
        ));
        // Where pinned copies are no faster (4 KiB host-to-device on the H200 table), no
        // loss pays.
        let small = PinNow {
            graded: 4096,
            segment: 4096,
            ..fresh
        };
        let tiny = PredictedTransfers::none().with(Direction::HtoD, 1e6, 4096);
        assert!(!pays_now(&p, &tiny, 8.0, &tiny, &small).pin);
    }

    /// A spare block: one fits, and the pool keeps the recent peak of what allocations
    /// pinned for their own sake use, plus what is lent, plus this block.
    #[test]
    fn an_idle_block_is_spare_only_beyond_the_recent_demand() {
        let page = 4096u64;
        let idle = IdleBlock {
            fits: true,
            pool_bytes: 4 * page,
            demand_peak: 2 * page,
            lent: page,
        };
        assert!(is_spare(&idle, page));
        assert!(!is_spare(&idle, 2 * page), "it would eat into the demand");
        assert!(!is_spare(
            &IdleBlock {
                fits: false,
                ..idle
            },
            page
        ));
        // The matrix's steady state: the pool holds exactly the hot blocks, whose peak is
        // all of it; the hot blocks not yet taken this iteration are not spare.
        let steady = IdleBlock {
            fits: true,
            pool_bytes: 2 * page,
            demand_peak: 2 * page,
            lent: 0,
        };
        assert!(!is_spare(&steady, page));
        // Saturating: a huge demand never wraps around into "spare".
        let huge = IdleBlock {
            demand_peak: u64::MAX,
            ..idle
        };
        assert!(!is_spare(&huge, page));
    }

    /// From a spare block, a request pays when its predicted copies are faster pinned:
    /// priced as a pool hit, nothing to pin, give back or hold.
    #[test]
    fn a_spare_block_pays_for_one_copy_where_pinned_copies_are_faster() {
        let p = policy();
        let mib = 1u64 << 20;
        let once = PredictedTransfers::none().with(Direction::HtoD, 1.0, mib);
        let d = spare_block_pays(&p, mib, &once);
        assert!(d.pin && d.cost_ns == 0.0 && d.saving_ns > 0.0, "{d:?}");
        // Fresh pinned memory for the same one copy does not pay (the reason the request
        // was left pageable).
        let fresh = pricing::price(&p, mib, Obtain::Fresh, mib, 1 << 34);
        assert!(!pricing::decide_priced(&p, mib, once, u64::MAX, &fresh).pin);
        // No copies predicted, or none faster pinned (4 KiB host-to-device on the H200
        // table): pageable.
        assert!(!spare_block_pays(&p, mib, &PredictedTransfers::none()).pin);
        let small = PredictedTransfers::none().with(Direction::HtoD, 8.0, 4096);
        assert!(!spare_block_pays(&p, 4096, &small).pin);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn transfers() -> impl Strategy<Value = PredictedTransfers> {
            (0u32..4, 0u32..20, 1u64..(256 << 20)).prop_map(|(d, n, b)| {
                PredictedTransfers::none().with(Direction::ALL[d as usize], n as f64, b)
            })
        }

        proptest! {
            /// Taking a spare block never leaves the pool short of the demand's peak plus
            /// what is lent: pool_bytes >= peak + lent + graded whenever it is spare, and
            /// more pool bytes (or less demand, or less lent) never turn spare into not.
            #[test]
            fn spare_blocks_never_eat_into_the_demand(
                fits: bool,
                pool in 0u64..(1 << 40),
                peak in 0u64..(1 << 40),
                lent in 0u64..(1 << 40),
                graded in 1u64..(1 << 32),
                more in 0u64..(1 << 30),
            ) {
                let idle = IdleBlock { fits, pool_bytes: pool, demand_peak: peak, lent };
                let spare = is_spare(&idle, graded);
                if spare {
                    prop_assert!(fits && pool >= peak + lent + graded);
                    let bigger = IdleBlock { pool_bytes: pool + more, ..idle };
                    prop_assert!(is_spare(&bigger, graded));
                    let less = IdleBlock {
                        demand_peak: peak.saturating_sub(more),
                        lent: lent.saturating_sub(more),
                        ..idle
                    };
                    prop_assert!(is_spare(&less, graded));
                } else {
                    prop_assert!(!fits || pool < peak + lent + graded);
                }
            }

            /// A spare block's price is a pool hit's: it pays exactly when the predicted
            /// copies save anything pinned, costs nothing, and pays whenever pinning fresh
            /// memory for the same copies would (never less willing than fresh memory).
            #[test]
            fn a_spare_block_is_priced_as_a_pool_hit(t in transfers(), graded in 1u64..(256 << 20)) {
                let p = policy();
                let d = spare_block_pays(&p, graded, &t);
                prop_assert_eq!(d.cost_ns, 0.0);
                let saving = p.saving_ns_by(&t, PinMethod::MallocHost);
                prop_assert_eq!(d.pin, t.total() > 0.0 && saving > 0.0);
                let fresh = pricing::price(&p, graded, Obtain::Fresh, graded, 1 << 34);
                if pricing::decide_priced(&p, graded, t, u64::MAX, &fresh).pin {
                    prop_assert!(d.pin);
                }
            }

            /// Ski rental at the call site: a new block bought with what the site lost
            /// costs no more than that loss's saving (it pays back), never exceeds the
            /// budget, and more loss never turns a purchase into a refusal; without a loss,
            /// the decision is the prediction's alone.
            #[test]
            fn what_a_site_lost_buys_a_block_only_when_it_paid_for_it(
                expected in transfers(),
                lost in transfers(),
                more in 0.0f64..64.0,
                reuse in 1.0f64..8.0,
                graded in 1u64..(64 << 20),
                cache_has_fit: bool,
                reserved in 0u64..(1 << 31),
            ) {
                let p = policy();
                let graded = graded.next_multiple_of(4096);
                let now = PinNow {
                    graded,
                    segment: graded,
                    pool_has_free: false,
                    cache_has_fit,
                    reserved,
                    cap: 1 << 31,
                };
                let none = PredictedTransfers::none();
                let predicted = pays_now(&p, &expected, reuse, &none, &now);
                let d = pays_now(&p, &expected, reuse, &lost, &now);
                if d.pin {
                    prop_assert!(reserved + graded <= 1 << 31);
                    prop_assert!(d.saving_ns > d.cost_ns, "{:?}", d);
                }
                if predicted.pin {
                    prop_assert!(d.pin, "a loss never takes a purchase away");
                }
                let bigger = lost.plus(&pricing::scaled(&lost, lost.total() * more));
                if d.pin {
                    prop_assert!(pays_now(&p, &expected, reuse, &bigger, &now).pin);
                }
            }

            /// `serve` only says SpareBlock where a spare block was offered, and only for
            /// requests that would otherwise be pageable with a history behind them.
            #[test]
            fn serve_takes_spare_blocks_only_for_requests_left_pageable(
                prefer: bool,
                advice in 0u8..4,
                hot: bool,
                has_history: bool,
                pays: bool,
                spare: bool,
            ) {
                let ask = Ask { prefer_pinned: prefer, ..Ask::default() };
                let advice = match advice {
                    0 => None,
                    1 => Some(Advised::Pin),
                    2 => Some(Advised::Pageable),
                    _ => Some(Advised::Unknown),
                };
                let guess = SiteGuess { hot, has_history };
                let with = serve(ask, advice, || false, || false, guess, || pays, || spare);
                let without = serve(ask, advice, || false, || false, guess, || pays, || false);
                if with.basis == Basis::SpareBlock {
                    prop_assert!(spare && with.pinned);
                    prop_assert!(!without.pinned);
                    prop_assert!(matches!(
                        without.basis,
                        Basis::AdvisedPageable | Basis::PredictedCold | Basis::ProgramAskedButCold
                    ));
                } else {
                    prop_assert_eq!(with, without);
                }
            }
        }
    }

    #[test]
    fn the_smallest_saving_copy_is_found_per_direction() {
        let policy = policy();
        for d in [Direction::HtoD, Direction::DtoH] {
            let cut = smallest_saving_copy(&policy, d);
            assert!((1..64 << 20).contains(&cut), "{d:?}: {cut}");
            // The cut is where the promotion's own saving (registered bandwidth) starts.
            assert!(promotion_saving_ns(&policy, d, cut) > 0.0);
            assert!(cut == 1 || promotion_saving_ns(&policy, d, cut - 1) <= 0.0);
            assert!(promotion_saving_ns(&policy, d, 64 << 20) > 0.0);
        }
        // On the H200 table, a 4 KiB host-to-device copy is slower pinned: small ones never
        // pay there.
        assert!(smallest_saving_copy(&policy, Direction::HtoD) > 4096);
    }
}
