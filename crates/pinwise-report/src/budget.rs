//! How much pinned memory the smart allocator would need: the saving-versus-budget curve,
//! and the smallest budget that captures a given share of the attainable saving.
//!
//! Core's [`Policy::plan`] decides which tags of a profile to pin within one budget: among
//! the tags that pay back ([`Policy::decide`] without a budget), best net saving per pinned
//! byte first, each taken if it fits the budget at every moment of its lifetime. Planning
//! again for every point of a curve would cost a full plan per point, so the curve here
//! follows the same order once: after taking
//! the best `k` tags, the budget they need is the most bytes they hold pinned at once (a
//! segment tree over their lifetimes, as in core) and the saving is the sum of their net
//! savings. At a budget `B` the plan takes at least every tag of the longest prefix that
//! needs no more than `B` (they fit, whatever else it takes), so the curve is a lower
//! bound of what the plan achieves at each budget. The headline budget is read off the
//! curve and then checked with one real [`Policy::plan`] at that budget, whose saving is
//! the figure reported.

use serde::Serialize;

use pinwise_core::policy::{PinRequest, Plan, PredictedTransfers};
use pinwise_core::profile::{Profile, ProfileEntry};
use pinwise_core::timeline::Timeline;
use pinwise_core::{Decision, PinMethod, Policy};

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
    /// How pinning was costed.
    #[serde(serialize_with = "crate::json::snake")]
    pub method: PinMethod,
    /// Tags in the profile.
    pub tags: u64,
    /// Tags whose pinning pays back (without a budget).
    pub tags_worth_pinning: u64,
    /// Net saving if every tag that pays back were pinned, ns, against pageable memory:
    /// it counts the tags the traced run had pinned already as well.
    pub attainable_ns: f64,
    /// Of the tags that pay back, those whose every transfer in the traced run was from
    /// or into pinned memory (the program, or the allocator running it, pinned them).
    pub tags_pinned_in_run: u64,
    /// Their share of `attainable_ns`, ns: saving the run already had.
    pub pinned_in_run_ns: f64,
    /// Pinned bytes at once that pinning all of them needs.
    pub attainable_peak_bytes: u64,
    /// Share of the attainable saving asked for (e.g. 0.9).
    pub share_asked: f64,
    /// The smallest budget on the curve that reaches that share.
    pub budget_bytes: u64,
    /// Net saving of core's plan at that budget, ns.
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

/// Analyses `profile` under `policy`: the curve, and the budget for `share` of the saving.
/// `pinned_in_run` says, per entry of the profile, whether the traced run had it pinned
/// (every transfer pinned); those tags count in the saving like the others (the smart
/// allocator would pin them too), and are reported apart.
pub fn analyse(
    profile: &Profile,
    pinned_in_run: &[bool],
    policy: &Policy,
    method: PinMethod,
    share: f64,
) -> BudgetAnalysis {
    let share = share.clamp(0.0, 1.0);
    // Without a budget, core's plan pins exactly the tags its policy says pay back: the
    // same decisions, without the plan's index and timeline.
    let decisions = decide_all(profile, policy, method);
    let (mut tags_pinned_in_run, mut pinned_in_run_ns) = (0, 0.0);
    for (d, _) in decisions
        .iter()
        .zip(pinned_in_run)
        .filter(|(d, &pinned)| d.pin && pinned)
    {
        tags_pinned_in_run += 1;
        pinned_in_run_ns += d.net_ns();
    }
    let curve = prefix_curve(profile, &decisions);
    let attainable = curve.last().copied().unwrap_or(BudgetPoint {
        budget_bytes: 0,
        net_saving_ns: 0.0,
    });
    let target = share * attainable.net_saving_ns;
    let budget_bytes = curve
        .iter()
        .find(|p| p.net_saving_ns >= target)
        .map_or(attainable.budget_bytes, |p| p.budget_bytes);
    let started = std::time::Instant::now();
    let at_budget: Plan = policy.plan(profile, budget_bytes, method);
    tracing::debug!(
        "core's plan at {budget_bytes} bytes: {:.3} s",
        started.elapsed().as_secs_f64()
    );
    BudgetAnalysis {
        method,
        tags: profile.entries.len() as u64,
        tags_worth_pinning: decisions.iter().filter(|d| d.pin).count() as u64,
        attainable_ns: attainable.net_saving_ns,
        tags_pinned_in_run,
        pinned_in_run_ns,
        attainable_peak_bytes: attainable.budget_bytes,
        share_asked: share,
        budget_bytes,
        plan_saving_ns: at_budget.net_saving_ns(),
        plan_pinned_tags: at_budget.pinned().count() as u64,
        plan_peak_bytes: at_budget.peak_pinned_bytes,
        curve: thin(curve, MAX_CURVE_POINTS),
    }
}

/// Entries per thread below which deciding stays on one thread.
const MIN_DECISIONS_PER_THREAD: usize = 100_000;

/// The policy's decision for every entry, without a budget (on several threads for large
/// profiles: each decision is independent).
fn decide_all(profile: &Profile, policy: &Policy, method: PinMethod) -> Vec<Decision> {
    let decide = |e: &ProfileEntry| {
        policy.decide(&PinRequest {
            size: e.size,
            transfers: PredictedTransfers::from_profile_entry(e),
            remaining_budget: u64::MAX,
            method,
        })
    };
    let entries = &profile.entries;
    let threads = std::thread::available_parallelism()
        .map_or(1, |t| t.get())
        .clamp(1, 8)
        .min(entries.len().div_ceil(MIN_DECISIONS_PER_THREAD).max(1));
    if threads == 1 {
        return entries.iter().map(decide).collect();
    }
    let chunk = entries.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let parts: Vec<_> = entries
            .chunks(chunk)
            .map(|part| scope.spawn(move || part.iter().map(decide).collect::<Vec<_>>()))
            .collect();
        parts
            .into_iter()
            .flat_map(|p| p.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

/// The curve of the plan's order: one point per tag taken (budget never decreasing); its
/// last point is every tag that pays back.
fn prefix_curve(profile: &Profile, decisions: &[Decision]) -> Vec<BudgetPoint> {
    let entries = &profile.entries;
    // The plan's order: best net saving per byte first, ties in profile order.
    let mut keyed: Vec<(f64, usize)> = (0..entries.len())
        .filter(|&i| decisions[i].pin)
        .map(|i| (decisions[i].net_ns() / entries[i].size.max(1) as f64, i))
        .collect();
    keyed.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let order = keyed.into_iter().map(|(_, i)| i);
    // The lifetime boundaries of every entry, as core's plan takes them: its peaks for a
    // set of tags are then exactly the plan's.
    let mut timeline = Timeline::new(
        entries
            .iter()
            .flat_map(|e| [Some(e.start_ns), e.end_ns])
            .flatten(),
    );
    let mut curve = Vec::with_capacity(order.len() + 1);
    curve.push(BudgetPoint {
        budget_bytes: 0,
        net_saving_ns: 0.0,
    });
    let mut saving = 0.0;
    for i in order {
        let e = &entries[i];
        let (from, to) = timeline.span(e.start_ns, e.end_ns);
        timeline.add(from, to, e.size);
        saving += decisions[i].net_ns();
        curve.push(BudgetPoint {
            budget_bytes: timeline.peak(),
            net_saving_ns: saving,
        });
    }
    curve
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
