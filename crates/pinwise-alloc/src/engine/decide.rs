//! Deciding, per allocation, pinned or pageable: the caller's flags, a profile's advice
//! (use mode, where it matches and has not been proved wrong), else the call site's
//! pattern-history predictor weighed by pinwise-core's policy against what pinning would
//! cost now. A request that prefers pinned memory (a program's own pinned request) is
//! pinned unless the site's history predicts cold.

use std::sync::atomic::Ordering;

use pinwise_core::policy::PredictedTransfers;
use pinwise_core::{Reason, Site, Tag};

use super::{Advised, AllocFlags, Engine, Live, Mode, Planned};
use crate::costs;
use crate::predict::{PredictionSource, SitePredictor};

/// Per call site state.
#[derive(Debug)]
pub(super) struct SiteState {
    calls: u32,
    predictor: SitePredictor,
    /// Consecutive hot outcomes most recently.
    hot_streak: u32,
    /// Transfers (by direction, with bytes) of the last allocation that had any.
    last_mix: PredictedTransfers,
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
    /// Tag, pin or not, and whether advice was followed.
    pub(super) fn decide(
        &self,
        size: usize,
        graded: usize,
        site: Site,
        flags: AllocFlags,
    ) -> (Tag, bool, Planned) {
        let mut sites = self.sites.lock();
        let state = sites.entry(site).or_insert_with(|| SiteState {
            calls: 0,
            predictor: SitePredictor::new(self.history_bits),
            hot_streak: 0,
            last_mix: PredictedTransfers::none(),
            advice_right: 0,
            advice_wrong: 0,
        });
        state.calls = state.calls.saturating_add(1);
        let tag = Tag {
            site,
            call_no: state.calls,
        };
        if flags.contains(AllocFlags::REQUIRE_PINNED) {
            return (tag, true, Planned::No);
        }
        if flags.contains(AllocFlags::NEVER_PIN) {
            return (tag, false, Planned::No);
        }
        if self.mode == Mode::Use && state.advice_trusted() {
            if let Some(advice) = &self.advice {
                match advice.advise(&tag, size) {
                    Advised::Pin => return (tag, true, Planned::Pin),
                    Advised::Pageable
                        if flags.contains(AllocFlags::PREFER_PINNED)
                            && advice.pinned_and_reused(&tag, size) =>
                    {
                        // The program's own pinned request for a buffer it copied again
                        // and again: as plain CUDA (the promotion rule would pin it on its
                        // first copies anyway, inside the program's work).
                        return (tag, true, Planned::No);
                    }
                    Advised::Pageable => {
                        // A free block the pool already holds costs nothing (its memory is
                        // pinned anyway): a site that has proved hot in this run uses it,
                        // instead of a new mapping that its copies would promote again
                        // (pinned memory beyond the hot working set).
                        let hot = state.hot_streak > 0;
                        drop(sites);
                        if hot && self.pool.lock().has_free(graded) {
                            return (tag, true, Planned::No);
                        }
                        return (tag, false, Planned::Pageable);
                    }
                    Advised::Unknown => {
                        self.counters
                            .advice_unmatched
                            .fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        let guess = state.predictor.predict();
        // The site's last observed mix of directions and sizes, scaled to the guess.
        let expected = costs::scaled(&state.last_mix, guess.expected_transfers as f64);
        let reuse = state.hot_streak.clamp(1, self.max_reuse_credit) as f64;
        drop(sites);
        if flags.contains(AllocFlags::PREFER_PINNED) {
            // The program asked for pinned memory: it gets it unless its site's past says
            // otherwise (no history, or a hot run: as plain CUDA; a cold run: pageable).
            return (
                tag,
                guess.hot || guess.source == PredictionSource::NoHistory,
                Planned::No,
            );
        }
        if !guess.hot || guess.source == PredictionSource::NoHistory {
            return (tag, false, Planned::No);
        }
        (
            tag,
            self.pin_pays_now(graded, &expected, reuse),
            Planned::No,
        )
    }

    /// Whether pinning a `graded`-byte block for `expected` transfers pays *now*, priced at
    /// what the engine would do ([`costs::price`]): a free pooled block costs nothing;
    /// otherwise a new segment (registering a warm cached mapping where the pageable cache
    /// has one, else fresh memory the cheaper way), plus holding it, credited with `reuse`
    /// allocations like this one (the site's recent run of hot outcomes), since the pool
    /// keeps it for them.
    pub(super) fn pin_pays_now(
        &self,
        graded: usize,
        expected: &PredictedTransfers,
        reuse: f64,
    ) -> bool {
        if self.pool.lock().has_free(graded) {
            let hit = costs::price(&self.policy, graded as u64, costs::Obtain::PoolHit, 0, 1);
            return costs::decide_priced(&self.policy, graded as u64, *expected, u64::MAX, &hit)
                .pin;
        }
        let seg = graded.max(self.min_segment);
        let obtain = if self.pageable.lock().has_fit(seg) {
            costs::Obtain::RegisterCached
        } else {
            costs::Obtain::Fresh
        };
        let cap = self.budget.cap();
        let reserved = self.budget.reserved();
        let remaining = cap.saturating_sub(reserved);
        let price = costs::price(
            &self.policy,
            seg as u64,
            obtain,
            reserved.saturating_add(seg as u64),
            cap,
        );
        let d = costs::decide_priced(
            &self.policy,
            seg as u64,
            costs::scaled(expected, expected.total() * reuse),
            remaining,
            &price,
        );
        if matches!(d.reason, Reason::BudgetFull { .. }) {
            self.counters
                .budget_refusals
                .fetch_add(1, Ordering::Relaxed);
        }
        d.pin
    }

    /// The outcome of a freed allocation (hot: it was worth pinning, see
    /// [`costs::worth_pinning`]), recorded in its site's predictor and in the trust of the
    /// profile's advice there. Returns whether it was hot.
    pub(super) fn learn_outcome(&self, live: &Live) -> bool {
        let seen = live.seen();
        let hot = costs::worth_pinning(&self.policy, &seen);
        let mut sites = self.sites.lock();
        if let Some(state) = sites.get_mut(&live.tag.site) {
            state.predictor.record(hot, seen.total() as u32);
            if seen.total() > 0.0 {
                state.last_mix = seen;
            }
            state.hot_streak = if hot { state.hot_streak + 1 } else { 0 };
            match live.planned {
                Planned::Pin if hot => state.advice_right += 1,
                Planned::Pin => state.advice_wrong += 1,
                Planned::Pageable | Planned::No => {}
            }
        }
        hot
    }
}
