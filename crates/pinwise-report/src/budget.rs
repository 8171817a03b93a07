//! How much pinned memory the smart allocator would need: the saving-versus-budget curve,
//! and the smallest budget that captures a given share of the attainable saving.
//!
//! Every figure here is pinwise-core's plan ([`PinPlan`], block model: graded sizes, pool
//! reuse, the peak priced at what the allocator does), the plan `pinwise run --mode use`
//! executes on the same profile ([`plan_at`]). The curve is the plan's own order with an
//! unlimited budget: after each group of allocations it takes, the most bytes they hold
//! pinned at once, and the net saving so far. The headline budget is read off the curve and
//! checked by planning again at that budget: holding pinned memory costs more as the budget
//! fills ([`pinwise_core::decide::pricing::hold_ns`]), so the plan at a tight budget may
//! take less than the curve says; the budget then grows (by half at a time, at most
//! [`MAX_CHECKS`] plans) until the plan captures the share, and that plan's figures are
//! reported.

use serde::Serialize;

use pinwise_core::decide::plan::PinPlan;
use pinwise_core::profile::Profile;
use pinwise_core::{PinMethod, Policy};

/// One point of the curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BudgetPoint {
    /// Pinned bytes needed at once.
    pub budget_bytes: u64,
    /// Net saving (transfer time saved minus pinning costs) with that budget, ns.
    pub net_saving_ns: f64,
}

/// The budget analysis of one profile.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetAnalysis {
    /// How the allocation rows price pinning (the plan prices at what the allocator does:
    /// pool hits, fresh memory the cheaper way, holding it).
    #[serde(serialize_with = "crate::json::snake")]
    pub method: PinMethod,
    /// Tags in the profile.
    pub tags: u64,
    /// Tags the plan pins without a budget.
    pub tags_worth_pinning: u64,
    /// Net saving of the plan without a budget, ns, against pageable memory: it counts the
    /// tags the traced run had pinned already as well.
    pub attainable_ns: f64,
    /// Of the tags that pay back, those whose every transfer in the traced run was from
    /// or into pinned memory (the program, or the allocator running it, pinned them).
    pub tags_pinned_in_run: u64,
    /// Their share of `attainable_ns`, ns: saving the run already had.
    pub pinned_in_run_ns: f64,
    /// Pinned bytes at once that the plan without a budget needs.
    pub attainable_peak_bytes: u64,
    /// Share of the attainable saving asked for (e.g. 0.9).
    pub share_asked: f64,
    /// The smallest budget found whose plan reaches that share.
    pub budget_bytes: u64,
    /// Net saving of the plan at that budget, ns.
    pub plan_saving_ns: f64,
    /// Tags that plan pins.
    pub plan_pinned_tags: u64,
    /// Most bytes that plan holds pinned at once.
    pub plan_peak_bytes: u64,
    /// The curve, budget increasing (thinned to at most a few hundred points).
    pub curve: Vec<BudgetPoint>,
}

impl BudgetAnalysis {
    /// `plan_saving_ns` as a share of `attainable_ns` (1 when nothing is attainable).
    pub fn plan_share(&self) -> f64 {
        if self.attainable_ns > 0.0 {
            self.plan_saving_ns / self.attainable_ns
        } else {
            1.0
        }
    }
}

/// Most points kept on the curve.
pub const MAX_CURVE_POINTS: usize = 400;

/// Most plans made to find the headline budget.
pub const MAX_CHECKS: usize = 12;

/// The plan of `profile` at `budget_bytes`: what `pinwise run --mode use` executes with
/// this profile and budget (pinwise-alloc's `ProfileAdvice` follows the same [`PinPlan`]).
pub fn plan_at(profile: &Profile, policy: &Policy, budget_bytes: u64) -> PinPlan {
    PinPlan::new(profile, policy, budget_bytes)
}

/// Analyses `profile` under `policy`: the curve, and the budget for `share` of the saving.
/// `pinned_in_run` says, per entry of the profile, whether the traced run had it pinned
/// (every transfer pinned); those tags count in the saving like the others (the smart
/// allocator would pin them too), and are reported apart. `method` is how the report's
/// allocation rows price pinning, carried for the text.
pub fn analyse(
    profile: &Profile,
    pinned_in_run: &[bool],
    policy: &Policy,
    method: PinMethod,
    share: f64,
) -> BudgetAnalysis {
    let share = share.clamp(0.0, 1.0);
    let unlimited = plan_at(profile, policy, u64::MAX);
    let (mut tags_pinned_in_run, mut pinned_in_run_ns) = (0, 0.0);
    for (e, _) in unlimited
        .entries
        .iter()
        .zip(pinned_in_run)
        .filter(|(e, &pinned)| e.decision.pin && pinned)
    {
        tags_pinned_in_run += 1;
        pinned_in_run_ns += e.decision.net_ns();
    }
    let mut curve = Vec::with_capacity(unlimited.steps().len() + 1);
    curve.push(BudgetPoint {
        budget_bytes: 0,
        net_saving_ns: 0.0,
    });
    curve.extend(unlimited.steps().iter().map(|s| BudgetPoint {
        budget_bytes: s.peak_bytes,
        net_saving_ns: s.net_saving_ns,
    }));
    let attainable_ns = unlimited.net_saving_ns();
    let attainable_peak = unlimited.peak_pinned_bytes();
    let target = share * attainable_ns;
    let mut budget_bytes = curve
        .iter()
        .find(|p| p.net_saving_ns >= target)
        .map_or(attainable_peak, |p| p.budget_bytes);
    let started = std::time::Instant::now();
    let mut at_budget = plan_at(profile, policy, budget_bytes);
    let mut checks = 1;
    while at_budget.net_saving_ns() < target && checks < MAX_CHECKS && budget_bytes > 0 {
        budget_bytes = budget_bytes
            .saturating_add(budget_bytes / 4)
            .max(budget_bytes + 1);
        at_budget = plan_at(profile, policy, budget_bytes);
        checks += 1;
    }
    tracing::debug!(
        "{checks} plans to find the budget ({budget_bytes} bytes): {:.3} s",
        started.elapsed().as_secs_f64()
    );
    BudgetAnalysis {
        method,
        tags: profile.entries.len() as u64,
        tags_worth_pinning: unlimited.summary().pinned as u64,
        attainable_ns,
        tags_pinned_in_run,
        pinned_in_run_ns,
        attainable_peak_bytes: attainable_peak,
        share_asked: share,
        budget_bytes,
        plan_saving_ns: at_budget.net_saving_ns(),
        plan_pinned_tags: at_budget.summary().pinned as u64,
        plan_peak_bytes: at_budget.peak_pinned_bytes(),
        curve: thin(curve, MAX_CURVE_POINTS),
    }
}

/// Keeps at most `max` points: the first, the last, and evenly spaced ones between (by
/// index), always keeping the last point of each budget (the most saving it buys).
fn thin(curve: Vec<BudgetPoint>, max: usize) -> Vec<BudgetPoint> {
    // Only the last point of each budget matters: same budget, more saving.
    let mut dedup: Vec<BudgetPoint> = Vec::with_capacity(curve.len());
    for p in curve {
        match dedup.last_mut() {
            Some(last) if last.budget_bytes == p.budget_bytes => *last = p,
            _ => dedup.push(p),
        }
    }
    if dedup.len() <= max || max < 2 {
        return dedup;
    }
    let n = dedup.len();
    (0..max).map(|k| dedup[k * (n - 1) / (max - 1)]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thinning_keeps_ends_and_the_best_point_of_each_budget() {
        let pts = |v: &[(u64, f64)]| -> Vec<BudgetPoint> {
            v.iter()
                .map(|&(budget_bytes, net_saving_ns)| BudgetPoint {
                    budget_bytes,
                    net_saving_ns,
                })
                .collect()
        };
        let c = thin(pts(&[(0, 0.0), (10, 1.0), (10, 2.0), (20, 3.0)]), 10);
        assert_eq!(c, pts(&[(0, 0.0), (10, 2.0), (20, 3.0)]));
        let long: Vec<BudgetPoint> = (0..1000u64)
            .map(|i| BudgetPoint {
                budget_bytes: i,
                net_saving_ns: i as f64,
            })
            .collect();
        let t = thin(long, 11);
        assert_eq!(t.len(), 11);
        assert_eq!(t[0].budget_bytes, 0);
        assert_eq!(t[10].budget_bytes, 999);
    }
}
