//! Gathering the facts of each allocation for pinwise-core's rules
//! ([`pinwise_core::decide::rules::serve`]): the caller's flags, a profile's advice (use
//! mode, where it matches and has not been proved wrong), the call site's pattern-history
//! predictor, the pool's free blocks, and what pinning would cost now
//! ([`Engine::pin_pays_now`], priced by [`pinwise_core::decide::pricing`]), with what the
//! site's hot allocations lost on pageable memory so far (`SiteState::forgone`, the ski
//! rental of [`rules::pays_now`]). Outcomes train the predictor and that account
//! ([`Engine::learn_outcome`]).

use std::sync::atomic::Ordering;

use pinwise_core::decide::pricing;
use pinwise_core::decide::rules::{self, Basis, SiteGuess};
use pinwise_core::policy::PredictedTransfers;
use pinwise_core::{Reason, Site, Tag};

use super::{Advised, AllocFlags, Engine, Live, Mode, Planned};
use crate::predict::{PredictionSource, SitePredictor};

/// No history (for requests whose flags decide alone).
const NO_GUESS: SiteGuess = SiteGuess {
    hot: false,
    has_history: false,
};

/// Per call site state.
#[derive(Debug)]
pub(super) struct SiteState {
    calls: u32,
    predictor: SitePredictor,
    /// Consecutive hot outcomes most recently.
    hot_streak: u32,
    /// Transfers (by direction, with bytes) of the last allocation that had any.
    last_mix: PredictedTransfers,
    /// The copies the site's hot allocations made on pageable memory since it last had a
    /// pinned block (reset by a cold outcome, a hot pinned one, or a new block bought with
    /// it): what not pinning has already cost it ([`rules::pays_now`]'s ski rental).
    forgone: PredictedTransfers,
    /// Use mode: advised-pin allocations that turned out hot / cold.
    advice_right: u32,
    advice_wrong: u32,
}

impl SiteState {
    pub(super) fn advice_trusted(&self) -> bool {
        !(self.advice_wrong >= 2 && self.advice_wrong > self.advice_right)
    }
}

impl Engine {
    /// Tag, how to serve it, and whether advice was followed. The facts are gathered here;
    /// the decision is pinwise-core's ([`rules::serve`]).
    pub(super) fn decide(
        &self,
        size: usize,
        graded: usize,
        site: Site,
        flags: AllocFlags,
    ) -> (Tag, rules::Serve, Planned) {
        let mut sites = self.sites.lock();
        let state = sites.entry(site).or_insert_with(|| SiteState {
            calls: 0,
            predictor: SitePredictor::new(self.history_bits),
            hot_streak: 0,
            last_mix: PredictedTransfers::none(),
            forgone: PredictedTransfers::none(),
            advice_right: 0,
            advice_wrong: 0,
        });
        state.calls = state.calls.saturating_add(1);
        let tag = Tag {
            site,
            call_no: state.calls,
        };
        let ask = flags.ask();
        if ask.require_pinned || ask.never_pin {
            drop(sites);
            let s = rules::serve(ask, None, || false, || false, NO_GUESS, || false, || false);
            return (tag, s, Planned::No);
        }
        let advice = match &self.advice {
            Some(a) if self.mode == Mode::Use && state.advice_trusted() => {
                Some((a, a.advise(&tag, size)))
            }
            _ => None,
        };
        let hot_in_this_run = state.hot_streak > 0;
        let guess = state.predictor.predict();
        // The site's last observed mix of directions and sizes, scaled to the guess.
        let expected = pricing::scaled(&state.last_mix, guess.expected_transfers as f64);
        let reuse = state.hot_streak.clamp(1, self.max_reuse_credit) as f64;
        let forgone = state.forgone;
        drop(sites);
        if matches!(advice, Some((_, Advised::Unknown))) {
            self.counters
                .advice_unmatched
                .fetch_add(1, Ordering::Relaxed);
        }
        let s = rules::serve(
            ask,
            advice.as_ref().map(|(_, a)| *a),
            || {
                advice
                    .as_ref()
                    .is_some_and(|(a, _)| a.pinned_and_reused(&tag, size))
            },
            || {
                hot_in_this_run && {
                    let pool = self.pool.lock();
                    pool.has_fit(
                        graded,
                        self.carve_limit(&pool, graded, super::is_request(flags)),
                    )
                }
            },
            SiteGuess {
                hot: guess.hot,
                has_history: guess.source != PredictionSource::NoHistory,
            },
            || self.pin_pays_now(graded, &expected, reuse, &forgone),
            || self.spare_block_for(graded, &expected),
        );
        if s.basis == Basis::PaysNow && forgone.total() > 0.0 {
            // The site has (or has just bought) a pinned block: its loss is settled, and
            // does not buy a second block.
            if let Some(state) = self.sites.lock().get_mut(&site) {
                state.forgone = PredictedTransfers::none();
            }
        }
        let planned = match s.basis {
            Basis::AdvisedPin => Planned::Pin,
            Basis::AdvisedPageable | Basis::SpareBlock
                if matches!(advice, Some((_, Advised::Pageable))) =>
            {
                Planned::Pageable
            }
            _ => Planned::No,
        };
        (tag, s, planned)
    }

    /// Whether the pool holds a spare idle block for a `graded`-byte request that would
    /// otherwise be pageable, and serving its `expected` transfers from it pays
    /// ([`rules::is_spare`] on the pool's state and [`crate::demand`], then
    /// [`rules::spare_block_pays`]).
    fn spare_block_for(&self, graded: usize, expected: &PredictedTransfers) -> bool {
        if expected.total() <= 0.0 {
            return false;
        }
        let idle = {
            let pool = self.pool.lock();
            rules::IdleBlock {
                fits: pool.has_fit(graded, super::serve::fit_limit(graded, true)),
                pool_bytes: pool.segment_bytes() as u64,
                demand_peak: self.demand.peak(),
                lent: self.demand.lent(),
            }
        };
        rules::is_spare(&idle, graded as u64)
            && rules::spare_block_pays(&self.policy, graded as u64, expected).pin
    }

    /// Whether a program's request with `flags` from `site` will be served pageable for want
    /// of evidence (a site without history for a request that earns pinning, or a site
    /// proved cold), as far as can be told before serving it: its caller need not make room
    /// for it under a pinned ceiling. `false` when unsure (the request is not a program's
    /// preferring pinned memory, or use mode, where a profile's advice may pin it).
    pub fn serves_pageable(&self, site: Site, flags: AllocFlags) -> bool {
        let ask = flags.ask();
        if ask.require_pinned || ask.never_pin || !ask.prefer_pinned {
            return false;
        }
        if self.mode == Mode::Use && self.advice.is_some() {
            return false;
        }
        let sites = self.sites.lock();
        let Some(state) = sites.get(&site) else {
            return ask.earn_pinned;
        };
        let guess = state.predictor.predict();
        if guess.hot {
            false
        } else if guess.source != PredictionSource::NoHistory {
            true
        } else {
            ask.earn_pinned
        }
    }

    /// Whether pinning a `graded`-byte block for `expected` transfers pays *now*
    /// ([`rules::pays_now`], on the pool's, the cache's and the budget's state now),
    /// credited with `reuse` allocations like this one, or bought with what the site has
    /// `forgone` already.
    pub(super) fn pin_pays_now(
        &self,
        graded: usize,
        expected: &PredictedTransfers,
        reuse: f64,
        forgone: &PredictedTransfers,
    ) -> bool {
        let pool_has_free = {
            let pool = self.pool.lock();
            pool.has_fit(graded, self.carve_limit(&pool, graded, false))
        };
        let segment = graded.max(self.min_segment);
        let cache_has_fit = !pool_has_free && self.pageable.lock().has_fit(segment);
        let d = rules::pays_now(
            &self.policy,
            expected,
            reuse,
            forgone,
            &rules::PinNow {
                graded: graded as u64,
                segment: segment as u64,
                pool_has_free,
                cache_has_fit,
                reserved: self.budget.reserved(),
                cap: self.budget.cap(),
            },
        );
        if matches!(d.reason, Reason::BudgetFull { .. }) {
            self.counters
                .budget_refusals
                .fetch_add(1, Ordering::Relaxed);
        }
        d.pin
    }

    /// The outcome of a freed allocation (hot: it was worth pinning, see
    /// [`rules::worth_pinning`]), recorded in its site's predictor and in the trust of the
    /// profile's advice there. Returns whether it was hot.
    pub(super) fn learn_outcome(&self, live: &Live) -> bool {
        let seen = live.seen();
        let hot = rules::worth_pinning(&self.policy, &seen);
        let mut sites = self.sites.lock();
        if let Some(state) = sites.get_mut(&live.tag.site) {
            state.predictor.record(hot, seen.total() as u32);
            if seen.total() > 0.0 {
                state.last_mix = seen;
            }
            state.hot_streak = if hot { state.hot_streak + 1 } else { 0 };
            state.forgone = if hot && !live.is_pinned() {
                state.forgone.plus(&seen)
            } else {
                PredictedTransfers::none()
            };
            match live.planned {
                Planned::Pin if hot => state.advice_right += 1,
                Planned::Pin => state.advice_wrong += 1,
                Planned::Pageable | Planned::No => {}
            }
        }
        hot
    }
}
