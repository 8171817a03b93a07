//! The plan of a profile: which of its allocations to pin within a budget, so that the
//! pinned memory the allocator's pool must hold pays for itself. The one planner: the
//! report's budget curve and "budget that would capture 90 %" and the allocator's use mode
//! (`pinwise run --mode use`, pinwise-alloc's `ProfileAdvice`) both read a [`PinPlan`].
//!
//! The block model: a pinned block (of the allocation's graded size,
//! [`crate::decide::grade`]) is obtained once and reused by later allocations whose
//! lifetimes do not overlap it, so what pinning an allocation really costs is the pinned
//! memory it *adds* at the busiest moment of its life: the plan keeps a timeline of planned
//! pinned bytes (a segment tree over the profile's allocation and free times, with range add
//! and range max) and charges each candidate the cost of growing the pool's peak by its
//! increase.
//!
//! 1. Each profile entry gets its predicted saving: its transfers per direction times what
//!    one such transfer saves when pinned (cost model). Only entries worth pinning at all are
//!    candidates: copied more than once, faster pinned ([`rules::worth_pinning`]; the same
//!    notion of hot the adaptive mode learns). A buffer copied once stays pageable even where
//!    the pool could amortize a block over many such buffers: that would hold pinned memory
//!    for one faster copy per buffer.
//! 2. Call sites, most saving per byte first, are tried *as a group* (all their entries with
//!    a saving): a site whose allocations recur one after another needs one block for all
//!    of them, and its summed saving is weighed against that one block. A group that does
//!    not pay, or does not fit the budget, is then tried entry by entry.
//! 3. Whether an entry (or group) is pinned is the policy's decision
//!    ([`Policy::decide_priced`]) on its predicted transfers, for the pinned memory it
//!    *adds*: the increase of the planned peak, priced as the engine will obtain it (fresh
//!    memory the cheaper way, plus holding it: [`pricing::price`]), within what the budget
//!    has left. An entry that fits in memory the pool already holds for other, earlier
//!    lifetimes costs nothing and is pinned whenever it saves anything. Entries that save
//!    nothing (small buffers, buffers never transferred) are never pinned.
//!
//! Each accepted group is a [`PlanStep`]: the peak after it and the net saving so far, in
//! the plan's order; with an unlimited budget those steps are the report's budget curve.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::decide::grade::graded_size;
use crate::decide::policy::{Decision, PinRequest, Policy, PredictedTransfers, Reason};
use crate::decide::pricing::{self, Obtain};
use crate::decide::rules;
use crate::history::AllocKind;
use crate::profile::{Profile, ProfileEntry};

/// The largest allocation size the plan grades and prices (larger ones are planned as
/// this size): 64 PiB, far beyond any host's memory.
pub const MAX_PLANNED_SIZE: u64 = 1 << 56;

/// A summary of a plan, for logs and reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PlanSummary {
    /// Profile entries considered.
    pub entries: usize,
    /// Entries planned pinned.
    pub pinned: usize,
    /// The planned peak of pinned bytes (what the pool will hold at most; graded sizes).
    pub peak_bytes: u64,
    /// Predicted saving of the pinned entries, ns.
    pub saving_ns: f64,
    /// Predicted cost of obtaining, giving back and holding the pool's memory, ns.
    pub pin_cost_ns: f64,
}

/// One profile entry's decision in a plan.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PlannedEntry {
    /// Module index (into the profile's modules).
    pub module: u32,
    /// Call-site offset.
    pub offset: u64,
    /// Call number.
    pub call_no: u32,
    /// Size asked for.
    pub size: u64,
    /// The pool block's size ([`graded_size`]).
    pub graded: u64,
    /// The decision. For an entry pinned with its call site's group, the group's saving and
    /// cost shared out in proportion to each entry's own saving.
    pub decision: Decision,
    /// Pinned in the profiled run and copied more than once (a buffer in use; see
    /// [`rules::Basis::PinnedAndReused`]).
    pub pinned_and_reused: bool,
}

/// The plan after one more group (or entry) was taken.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PlanStep {
    /// Most bytes pinned at once so far.
    pub peak_bytes: u64,
    /// Net saving so far (saving minus pinning costs), ns.
    pub net_saving_ns: f64,
}

/// Which allocations of a profile to pin within a budget. See the module documentation.
#[derive(Debug, Clone)]
pub struct PinPlan {
    /// The budget planned for, bytes.
    pub budget: u64,
    /// Every entry of the profile with its decision, in profile order.
    pub entries: Vec<PlannedEntry>,
    steps: Vec<PlanStep>,
    summary: PlanSummary,
    module_keys: Vec<String>,
    index: HashMap<(u32, u64, u32), usize>,
}

struct Candidate {
    entry: usize,
    graded: u64,
    transfers: PredictedTransfers,
    saving: f64,
    range: (usize, usize),
}

impl PinPlan {
    /// Plans `profile` with `policy` within `budget` bytes pinned at any moment.
    pub fn new(profile: &Profile, policy: &Policy, budget: u64) -> PinPlan {
        // Time coordinates: every start and end, compressed.
        let end_of = |e: &ProfileEntry| e.end_ns.unwrap_or(u64::MAX);
        let mut times: Vec<u64> = profile
            .entries
            .iter()
            .flat_map(|e| [e.start_ns, end_of(e)])
            .collect();
        times.sort_unstable();
        times.dedup();
        let coord = |t: u64| times.partition_point(|&x| x < t);

        let mut entries: Vec<PlannedEntry> = Vec::with_capacity(profile.entries.len());
        let mut candidates: Vec<Candidate> = Vec::new();
        for (i, e) in profile.entries.iter().enumerate() {
            // Sizes from a profile are untrusted: clamped to 2^56 bytes (64 PiB) so grading
            // cannot overflow and the byte arithmetic below stays in range.
            let graded = graded_size(e.size.clamp(1, MAX_PLANNED_SIZE) as usize) as u64;
            let transfers = PredictedTransfers::from_profile_entry(e);
            let worth = rules::worth_pinning(policy, &transfers);
            let decision = if worth {
                // Placeholder until the candidate is tried.
                Decision {
                    pin: false,
                    reason: Reason::BudgetFull { remaining: budget },
                    saving_ns: 0.0,
                    cost_ns: 0.0,
                }
            } else {
                not_worth_pinning(policy, e.size, graded, &transfers, budget)
            };
            entries.push(PlannedEntry {
                module: e.module,
                offset: e.offset,
                call_no: e.call_no,
                size: e.size,
                graded,
                decision,
                pinned_and_reused: e.kind == AllocKind::PinnedAlloc && worth,
            });
            if worth {
                let (s, t) = (coord(e.start_ns), coord(end_of(e)));
                candidates.push(Candidate {
                    entry: i,
                    graded,
                    transfers,
                    saving: policy.saving_ns(&transfers),
                    range: (s, t.max(s + 1)),
                });
            }
        }

        // Group by site; order sites by saving per byte (ties: profile order).
        let mut by_site: HashMap<(u32, u64), Vec<usize>> = HashMap::new();
        for (i, c) in candidates.iter().enumerate() {
            let e = &entries[c.entry];
            by_site.entry((e.module, e.offset)).or_default().push(i);
        }
        let per_byte = |idx: &[usize]| -> f64 {
            let saving: f64 = idx.iter().map(|&i| candidates[i].saving).sum();
            let bytes: f64 = idx.iter().map(|&i| candidates[i].graded as f64).sum();
            saving / bytes.max(1.0)
        };
        let mut groups: Vec<Vec<usize>> = by_site.into_values().collect();
        groups.sort_by(|a, b| per_byte(b).total_cmp(&per_byte(a)).then(a[0].cmp(&b[0])));

        let mut tree = MaxTree::new(times.len().max(1));
        let mut peak: u64 = 0;
        let mut summary = PlanSummary {
            entries: profile.entries.len(),
            ..PlanSummary::default()
        };
        let mut steps = Vec::new();
        // Adds the candidates `idx` to the timeline if together they pay for the growth of
        // the peak they cause and fit the budget: Ok(the decision, and each one's saving at
        // that bandwidth); else Err(the decision refusing them).
        let accept = |idx: &[usize],
                      tree: &mut MaxTree,
                      peak: &mut u64|
         -> Result<(Decision, Vec<f64>), Decision> {
            for &i in idx {
                let c = &candidates[i];
                tree.add(c.range.0, c.range.1, c.graded as i64);
            }
            let new_peak = tree.max_all().max(0) as u64;
            let grow = new_peak.saturating_sub(*peak);
            let mut transfers = PredictedTransfers::none();
            for &i in idx {
                let t = &candidates[i].transfers;
                for d in 0..4 {
                    transfers.count[d] += t.count[d];
                    transfers.bytes[d] += t.bytes[d];
                }
            }
            // Priced at what the engine will do ([`pricing::price`]): memory the pool holds
            // anyway is a pool hit and costs nothing; growing the peak obtains fresh memory
            // the cheaper way and holds it.
            let (obtain, bytes) = if grow == 0 {
                (Obtain::PoolHit, new_peak.max(1))
            } else {
                (Obtain::Fresh, grow)
            };
            let price = pricing::price(policy, bytes, obtain, new_peak, budget);
            let remaining = if grow == 0 {
                u64::MAX
            } else {
                budget.saturating_sub(*peak)
            };
            let mut d = policy.decide_priced(
                &PinRequest {
                    size: bytes,
                    transfers,
                    remaining_budget: remaining,
                    method: price.bandwidth_of,
                },
                &price,
            );
            if d.pin && new_peak > budget {
                d.pin = false;
                d.reason = Reason::BudgetFull {
                    remaining: budget.saturating_sub(*peak),
                };
            }
            if d.pin {
                *peak = new_peak.max(*peak);
                let shares = idx
                    .iter()
                    .map(|&i| policy.saving_ns_by(&candidates[i].transfers, price.bandwidth_of))
                    .collect();
                Ok((d, shares))
            } else {
                for &i in idx {
                    let c = &candidates[i];
                    tree.add(c.range.0, c.range.1, -(c.graded as i64));
                }
                Err(d)
            }
        };
        for group in &groups {
            match accept(group, &mut tree, &mut peak) {
                Ok((d, shares)) => {
                    let mut acc = Accepted {
                        entries: &mut entries,
                        candidates: &candidates,
                        summary: &mut summary,
                        steps: &mut steps,
                    };
                    acc.take(group, d, shares, peak);
                }
                Err(refused) if group.len() == 1 => {
                    entries[candidates[group[0]].entry].decision = refused;
                }
                Err(_) => {
                    let mut single = group.clone();
                    single.sort_by(|&a, &b| {
                        let (ca, cb) = (&candidates[a], &candidates[b]);
                        (cb.saving / cb.graded as f64).total_cmp(&(ca.saving / ca.graded as f64))
                    });
                    for i in single {
                        match accept(&[i], &mut tree, &mut peak) {
                            Ok((d, shares)) => {
                                let mut acc = Accepted {
                                    entries: &mut entries,
                                    candidates: &candidates,
                                    summary: &mut summary,
                                    steps: &mut steps,
                                };
                                acc.take(&[i], d, shares, peak);
                            }
                            Err(refused) => {
                                entries[candidates[i].entry].decision = refused;
                            }
                        }
                    }
                }
            }
        }
        summary.peak_bytes = peak;
        let index = entries
            .iter()
            .enumerate()
            .map(|(i, e)| ((e.module, e.offset, e.call_no), i))
            .collect();
        PinPlan {
            budget,
            entries,
            steps,
            summary,
            module_keys: profile.modules.iter().map(|m| m.key.clone()).collect(),
            index,
        }
    }

    /// The plan's summary.
    pub fn summary(&self) -> PlanSummary {
        self.summary
    }

    /// The groups taken, in the plan's order (peak and net saving after each).
    pub fn steps(&self) -> &[PlanStep] {
        &self.steps
    }

    /// Most bytes pinned at once under the plan (never above the budget).
    pub fn peak_pinned_bytes(&self) -> u64 {
        self.summary.peak_bytes
    }

    /// The key of the profile's module `index` (`buildid:<hex>` or `path:<path>`).
    pub fn module_key(&self, index: u32) -> Option<&str> {
        self.module_keys.get(index as usize).map(String::as_str)
    }

    /// The entry for (module key, offset, call number), if the profile had that tag.
    pub fn entry(&self, module_key: &str, offset: u64, call_no: u32) -> Option<&PlannedEntry> {
        let m = self.module_keys.iter().position(|k| k == module_key)? as u32;
        self.index
            .get(&(m, offset, call_no))
            .map(|&i| &self.entries[i])
    }

    /// The decision for (module key, offset, call number), if the profile had that tag.
    pub fn decision(&self, module_key: &str, offset: u64, call_no: u32) -> Option<&Decision> {
        self.entry(module_key, offset, call_no).map(|e| &e.decision)
    }

    /// The entries planned pinned.
    pub fn pinned(&self) -> impl Iterator<Item = &PlannedEntry> + '_ {
        self.entries.iter().filter(|e| e.decision.pin)
    }

    /// Net saving of the pinned entries, ns.
    pub fn net_saving_ns(&self) -> f64 {
        self.summary.saving_ns - self.summary.pin_cost_ns
    }
}

/// What the plan has taken so far.
struct Accepted<'a> {
    entries: &'a mut [PlannedEntry],
    candidates: &'a [Candidate],
    summary: &'a mut PlanSummary,
    steps: &'a mut Vec<PlanStep>,
}

impl Accepted<'_> {
    /// Takes the candidates `idx`, pinned on decision `d` (their savings at its bandwidth
    /// `shares`), the peak now `peak`.
    fn take(&mut self, idx: &[usize], d: Decision, shares: Vec<f64>, peak: u64) {
        self.summary.saving_ns += d.saving_ns;
        self.summary.pin_cost_ns += d.cost_ns;
        self.summary.pinned += idx.len();
        let total: f64 = shares.iter().sum();
        for (&i, share) in idx.iter().zip(shares) {
            let part = if total > 0.0 {
                share / total
            } else {
                1.0 / idx.len() as f64
            };
            self.entries[self.candidates[i].entry].decision = Decision {
                pin: true,
                reason: Reason::PaysBack,
                saving_ns: d.saving_ns * part,
                cost_ns: d.cost_ns * part,
            };
        }
        self.steps.push(PlanStep {
            peak_bytes: peak,
            net_saving_ns: self.summary.saving_ns - self.summary.pin_cost_ns,
        });
    }
}

/// The decision for an entry that is not worth pinning at all (no transfers, no faster
/// pinned, or copied once): why, priced as fresh memory on its own.
fn not_worth_pinning(
    policy: &Policy,
    size: u64,
    graded: u64,
    transfers: &PredictedTransfers,
    budget: u64,
) -> Decision {
    let price = pricing::price(policy, graded, Obtain::Fresh, graded, budget);
    let mut d = policy.decide_priced(
        &PinRequest {
            size,
            transfers: *transfers,
            remaining_budget: u64::MAX,
            method: price.bandwidth_of,
        },
        &price,
    );
    if d.pin {
        // It would pay, but on one copy: pinned memory is for reused buffers.
        d.pin = false;
        d.reason = Reason::TooFewTransfers {
            break_even: 2.0,
            predicted: transfers.total(),
        };
    }
    d
}

/// A segment tree over `n` slots with range add and max of all slots.
struct MaxTree {
    n: usize,
    max: Vec<i64>,
    add: Vec<i64>,
}

impl MaxTree {
    fn new(n: usize) -> Self {
        MaxTree {
            n,
            max: vec![0; 4 * n],
            add: vec![0; 4 * n],
        }
    }

    /// Adds `v` to slots `lo..hi`.
    fn add(&mut self, lo: usize, hi: usize, v: i64) {
        let hi = hi.min(self.n);
        if lo < hi {
            self.add_at(1, 0, self.n, lo, hi, v);
        }
    }

    fn add_at(&mut self, node: usize, l: usize, r: usize, lo: usize, hi: usize, v: i64) {
        if hi <= l || r <= lo {
            return;
        }
        if lo <= l && r <= hi {
            self.max[node] += v;
            self.add[node] += v;
            return;
        }
        let m = (l + r) / 2;
        self.add_at(2 * node, l, m, lo, hi, v);
        self.add_at(2 * node + 1, m, r, lo, hi, v);
        self.max[node] = self.add[node] + self.max[2 * node].max(self.max[2 * node + 1]);
    }

    fn max_all(&self) -> i64 {
        self.max[1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_tree_tracks_overlaps() {
        let mut t = MaxTree::new(10);
        t.add(0, 5, 3);
        t.add(5, 10, 4);
        assert_eq!(t.max_all(), 4);
        t.add(3, 7, 2);
        assert_eq!(t.max_all(), 6);
        t.add(5, 10, -4);
        assert_eq!(t.max_all(), 5);
    }

    #[test]
    fn a_pinned_allocation_copied_again_and_again_is_pinned_and_reused() {
        use crate::profile::{PerDirection, ProfileModule};
        use crate::{CostModel, Direction};
        let entry = |offset: u64, kind: AllocKind, round_trips: u64| {
            let mut transfers = PerDirection::default();
            for d in [Direction::HtoD, Direction::DtoH] {
                let t = transfers.get_mut(d);
                t.transfers = round_trips;
                t.bytes = round_trips * (64 << 20);
            }
            ProfileEntry {
                module: 0,
                offset,
                call_no: 1,
                size: 64 << 20,
                kind,
                instances: 1,
                transfers,
                start_ns: 0,
                end_ns: None,
            }
        };
        let profile = Profile::from_parts(
            1,
            vec![ProfileModule {
                key: "path:/opt/app".into(),
                path: "/opt/app".into(),
            }],
            vec![
                entry(0x10, AllocKind::PinnedAlloc, 2),
                entry(0x20, AllocKind::PinnedAlloc, 0),
                entry(0x30, AllocKind::Pageable, 2),
            ],
            Vec::new(),
        )
        .unwrap();
        let plan = PinPlan::new(&profile, &Policy::new(CostModel::builtin()), 1 << 40);
        let reused = |offset| {
            plan.entry("path:/opt/app", offset, 1)
                .unwrap()
                .pinned_and_reused
        };
        assert!(reused(0x10), "pinned, 4 copies");
        assert!(!reused(0x20), "pinned, never copied");
        assert!(!reused(0x30), "pageable in the profile");
    }
}
