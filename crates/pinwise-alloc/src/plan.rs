//! Use mode's plan: which allocations of a profile to pin, so that the pinned memory the
//! pool must hold pays for itself, within the budget.
//!
//! A pinned block is obtained once and reused by later allocations whose lifetimes do not
//! overlap it, so what pinning an allocation really costs is the pinned memory it *adds* at
//! the busiest moment of its life: the plan keeps a timeline of planned pinned bytes (a
//! segment tree over the profile's allocation and free times, with range add and range
//! max) and charges each candidate the cost of growing the pool's peak by its increase.
//!
//! 1. Each profile entry gets its predicted saving: its transfers per direction times what
//!    one such transfer saves when pinned (cost model). Only entries worth pinning at all are
//!    candidates: copied more than once, faster pinned ([`costs::worth_pinning`]; the same
//!    notion of hot the adaptive mode learns). A buffer copied once stays pageable even where
//!    the pool could amortize a block over many such buffers: that would hold pinned memory
//!    for one faster copy per buffer.
//! 2. Call sites, most saving per byte first, are tried *as a group* (all their entries with
//!    a saving): a site whose allocations recur one after another needs one block for all
//!    of them, and its summed saving is weighed against that one block. A group that does
//!    not pay, or does not fit the budget, is then tried entry by entry.
//! 3. Whether an entry (or group) is pinned is pinwise-core's policy's decision
//!    ([`Policy::decide_priced`]) on its predicted transfers, for the pinned memory it
//!    *adds*: the increase of the planned peak, priced as the engine will obtain it (fresh
//!    memory the cheaper way, plus holding it: [`costs::price`]), within what the budget
//!    has left. An
//!    entry that fits in memory the pool already holds for other, earlier lifetimes costs
//!    nothing and is pinned whenever it saves anything. Entries that save nothing (small
//!    buffers, buffers never transferred) are never pinned.
//!
//! (Core's own `Policy::plan` charges every tag a fresh pin; with a pool, a block is pinned
//! once and reused, which is what makes pinning a hot 64 KiB buffer that recurs every
//! iteration pay.)
//!
//! Advice is given only for a tag the profile has, with the same graded size; anything else
//! is [`Advised::Unknown`] and the engine decides adaptively.

use std::collections::HashMap;

use pinwise_core::history::AllocKind;
use pinwise_core::policy::PredictedTransfers;
use pinwise_core::profile::Profile;
use pinwise_core::{ModuleId, ModuleIdentity, ModuleTable, Policy, Tag};

use crate::costs;
use crate::engine::{Advice, Advised};
use crate::grade::graded_size;

/// A summary of a plan, for logs and reports.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PlanSummary {
    /// Profile entries considered.
    pub entries: usize,
    /// Entries planned pinned.
    pub pinned: usize,
    /// The planned peak of pinned bytes (what the pool will hold at most).
    pub peak_bytes: u64,
    /// Predicted saving of the pinned entries, ns.
    pub saving_ns: f64,
    /// Predicted cost of obtaining and giving back the pool's memory, ns.
    pub pin_cost_ns: f64,
    /// Profile modules that matched nothing loaded (another build, another program).
    pub unknown_modules: usize,
}

/// The plan: advice per tag. See the module documentation.
#[derive(Debug, Clone)]
pub struct Plan {
    advice: HashMap<(ModuleId, u64, u32), (usize, bool)>,
    /// Tags that were pinned in the profiled run and copied more than once (see
    /// [`Advice::pinned_and_reused`]), with their graded size.
    pinned_and_reused: HashMap<(ModuleId, u64, u32), usize>,
    summary: PlanSummary,
}

struct Candidate {
    key: (ModuleId, u64, u32),
    graded: usize,
    transfers: PredictedTransfers,
    saving: f64,
    range: (usize, usize),
}

impl Plan {
    /// Plans `profile` with `costs` within `budget_bytes`; module identities are interned in
    /// `modules` (the engine's table) so that advice matches the engine's sites.
    pub fn new(
        profile: &Profile,
        policy: &Policy,
        budget_bytes: u64,
        modules: &ModuleTable,
    ) -> Plan {
        let module_ids: Vec<ModuleId> = profile
            .modules
            .iter()
            .map(|m| modules.intern(&identity_from_key(&m.key, &m.path)))
            .collect();

        // Time coordinates: every start and end, compressed.
        let end_of = |e: &pinwise_core::profile::ProfileEntry| e.end_ns.unwrap_or(u64::MAX);
        let mut times: Vec<u64> = profile
            .entries
            .iter()
            .flat_map(|e| [e.start_ns, end_of(e)])
            .collect();
        times.sort_unstable();
        times.dedup();
        let coord = |t: u64| times.partition_point(|&x| x < t);

        let mut candidates: Vec<Candidate> = Vec::new();
        let mut advice = HashMap::new();
        let mut pinned_and_reused = HashMap::new();
        for e in &profile.entries {
            let Some(&module) = module_ids.get(e.module as usize) else {
                continue;
            };
            let key = (module, e.offset, e.call_no);
            let graded = graded_size(e.size.max(1).min(usize::MAX as u64) as usize);
            let transfers = PredictedTransfers::from_profile_entry(e);
            let saving = policy.saving_ns(&transfers);
            advice.insert(key, (graded, false));
            if e.kind == AllocKind::PinnedAlloc && costs::worth_pinning(policy, &transfers) {
                pinned_and_reused.insert(key, graded);
            }
            let (s, t) = (coord(e.start_ns), coord(end_of(e)));
            if costs::worth_pinning(policy, &transfers) {
                candidates.push(Candidate {
                    key,
                    graded,
                    transfers,
                    saving,
                    range: (s, t.max(s + 1)),
                });
            }
        }

        // Group by site; order sites by saving per byte, entries likewise.
        let mut by_site: HashMap<(ModuleId, u64), Vec<usize>> = HashMap::new();
        for (i, c) in candidates.iter().enumerate() {
            by_site.entry((c.key.0, c.key.1)).or_default().push(i);
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
        // Adds the entries `idx` to the timeline if together they pay for the growth of the
        // peak they cause and fit the budget; returns (saving, cost) when they were added.
        let accept = |idx: &[usize], tree: &mut MaxTree, peak: &mut u64| -> Option<(f64, f64)> {
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
            // Priced at what the engine will do (`costs::price`): memory the pool holds
            // anyway is a pool hit and costs nothing; growing the peak obtains fresh memory
            // the cheaper way and holds it.
            let (obtain, bytes) = if grow == 0 {
                (costs::Obtain::PoolHit, new_peak.max(1))
            } else {
                (costs::Obtain::Fresh, grow)
            };
            let price = costs::price(policy, bytes, obtain, new_peak, budget_bytes);
            let d = costs::decide_priced(
                policy,
                bytes,
                transfers,
                if grow == 0 {
                    u64::MAX
                } else {
                    budget_bytes.saturating_sub(*peak)
                },
                &price,
            );
            let (pays, saving, cost) = (d.pin, d.saving_ns, d.cost_ns);
            if pays && new_peak <= budget_bytes {
                *peak = new_peak.max(*peak);
                Some((saving, cost))
            } else {
                for &i in idx {
                    let c = &candidates[i];
                    tree.add(c.range.0, c.range.1, -(c.graded as i64));
                }
                None
            }
        };
        for group in &groups {
            let mut chosen: Vec<usize> = Vec::new();
            if let Some((saving, cost)) = accept(group, &mut tree, &mut peak) {
                summary.saving_ns += saving;
                summary.pin_cost_ns += cost;
                chosen.extend_from_slice(group);
            } else {
                let mut single = group.clone();
                single.sort_by(|&a, &b| {
                    let (ca, cb) = (&candidates[a], &candidates[b]);
                    (cb.saving / cb.graded as f64).total_cmp(&(ca.saving / ca.graded as f64))
                });
                for i in single {
                    if let Some((saving, cost)) = accept(&[i], &mut tree, &mut peak) {
                        summary.saving_ns += saving;
                        summary.pin_cost_ns += cost;
                        chosen.push(i);
                    }
                }
            }
            for i in chosen {
                let c = &candidates[i];
                advice.insert(c.key, (c.graded, true));
                summary.pinned += 1;
            }
        }
        summary.peak_bytes = peak;
        summary.unknown_modules = profile
            .modules
            .iter()
            .filter(|m| m.key != "path:?" && modules.find_key(&m.key).is_none())
            .count();
        Plan {
            advice,
            pinned_and_reused,
            summary,
        }
    }

    /// The plan's summary.
    pub fn summary(&self) -> PlanSummary {
        self.summary
    }

    /// Whether the plan pins the tag (module, offset, call number), if it knows it.
    pub fn pins(&self, module: ModuleId, offset: u64, call_no: u32) -> Option<bool> {
        self.advice.get(&(module, offset, call_no)).map(|a| a.1)
    }
}

impl Advice for Plan {
    fn advise(&self, tag: &Tag, size: usize) -> Advised {
        match self
            .advice
            .get(&(tag.site.module, tag.site.offset, tag.call_no))
        {
            Some(&(graded, pin)) if graded == graded_size(size) => {
                if pin {
                    Advised::Pin
                } else {
                    Advised::Pageable
                }
            }
            _ => Advised::Unknown,
        }
    }

    fn pinned_and_reused(&self, tag: &Tag, size: usize) -> bool {
        self.pinned_and_reused
            .get(&(tag.site.module, tag.site.offset, tag.call_no))
            .is_some_and(|&graded| graded == graded_size(size))
    }
}

/// The identity a profile module key stands for (`buildid:<hex>` or `path:<path>`).
fn identity_from_key(key: &str, path: &str) -> ModuleIdentity {
    if let Some(hex) = key.strip_prefix("buildid:") {
        if let Some(bytes) = decode_hex(hex) {
            return ModuleIdentity::with_build_id(path, bytes);
        }
    }
    match key.strip_prefix("path:") {
        Some(p) => ModuleIdentity::from_path(p),
        None => ModuleIdentity::from_path(key),
    }
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if s.is_empty() || !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
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
        use pinwise_core::profile::{PerDirection, ProfileEntry, ProfileModule};
        use pinwise_core::{CostModel, Direction, Site};
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
        let modules = ModuleTable::shared();
        let plan = Plan::new(
            &profile,
            &Policy::new(CostModel::builtin()),
            1 << 40,
            &modules,
        );
        let module = modules.intern(&identity_from_key("path:/opt/app", "/opt/app"));
        let tag = |offset| Tag {
            site: Site { module, offset },
            call_no: 1,
        };
        assert!(
            plan.pinned_and_reused(&tag(0x10), 64 << 20),
            "pinned, 4 copies"
        );
        assert!(
            !plan.pinned_and_reused(&tag(0x20), 64 << 20),
            "pinned, never copied"
        );
        assert!(
            !plan.pinned_and_reused(&tag(0x30), 64 << 20),
            "pageable in the profile"
        );
        assert!(
            !plan.pinned_and_reused(&tag(0x10), 4 << 20),
            "another size is another allocation"
        );
    }

    #[test]
    fn hex_keys_round_trip() {
        let id = identity_from_key("buildid:abcd01", "/bin/x");
        assert_eq!(id.key(), "buildid:abcd01");
        assert_eq!(identity_from_key("path:/a/b", "/a/b").key(), "path:/a/b");
        assert_eq!(decode_hex("abc"), None);
    }
}
