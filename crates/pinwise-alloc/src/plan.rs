//! Use mode's advice: pinwise-core's plan of a profile ([`PinPlan`], the same plan the
//! report's budget figures come from), keyed by this process's module identities so that
//! the engine can ask per allocation.
//!
//! Advice is given only for a tag the profile has, with the same graded size; anything else
//! is [`Advised::Unknown`] and the engine decides adaptively.

use rustc_hash::FxHashMap;

use pinwise_core::decide::plan::PinPlan;
use pinwise_core::profile::Profile;
use pinwise_core::{ModuleId, ModuleIdentity, ModuleTable, Policy, Tag};

use crate::engine::{Advice, Advised};
use crate::grade::graded_size;

/// A summary of the advice, for logs and reports.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct AdviceSummary {
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

/// The advice per tag: a profile's [`PinPlan`] for this process's modules.
#[derive(Debug, Clone)]
pub struct ProfileAdvice {
    /// (module, offset, call number) → (graded size, pin, pinned and reused).
    advice: FxHashMap<(ModuleId, u64, u32), (usize, bool, bool)>,
    summary: AdviceSummary,
}

impl ProfileAdvice {
    /// Plans `profile` with `policy` within `budget_bytes` ([`PinPlan::new`]); module
    /// identities are interned in `modules` (the engine's table) so that advice matches the
    /// engine's sites.
    pub fn new(
        profile: &Profile,
        policy: &Policy,
        budget_bytes: u64,
        modules: &ModuleTable,
    ) -> ProfileAdvice {
        Self::from_plan(
            profile,
            &PinPlan::new(profile, policy, budget_bytes),
            modules,
        )
    }

    /// The advice of `plan`, a plan of `profile`.
    pub fn from_plan(profile: &Profile, plan: &PinPlan, modules: &ModuleTable) -> ProfileAdvice {
        let module_ids: Vec<ModuleId> = profile
            .modules
            .iter()
            .map(|m| modules.intern(&identity_from_key(&m.key, &m.path)))
            .collect();
        let mut advice =
            FxHashMap::with_capacity_and_hasher(plan.entries.len(), Default::default());
        for e in &plan.entries {
            let Some(&module) = module_ids.get(e.module as usize) else {
                continue;
            };
            advice.insert(
                (module, e.offset, e.call_no),
                (e.graded as usize, e.decision.pin, e.pinned_and_reused),
            );
        }
        let s = plan.summary();
        let summary = AdviceSummary {
            entries: s.entries,
            pinned: s.pinned,
            peak_bytes: s.peak_bytes,
            saving_ns: s.saving_ns,
            pin_cost_ns: s.pin_cost_ns,
            unknown_modules: profile
                .modules
                .iter()
                .filter(|m| m.key != "path:?" && modules.find_key(&m.key).is_none())
                .count(),
        };
        ProfileAdvice { advice, summary }
    }

    /// The summary.
    pub fn summary(&self) -> AdviceSummary {
        self.summary
    }

    /// Whether the plan pins the tag (module, offset, call number), if it knows it.
    pub fn pins(&self, module: ModuleId, offset: u64, call_no: u32) -> Option<bool> {
        self.advice.get(&(module, offset, call_no)).map(|a| a.1)
    }
}

impl Advice for ProfileAdvice {
    fn advise(&self, tag: &Tag, size: usize) -> Advised {
        match self
            .advice
            .get(&(tag.site.module, tag.site.offset, tag.call_no))
        {
            Some(&(graded, pin, _)) if graded == graded_size(size) => {
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
        self.advice
            .get(&(tag.site.module, tag.site.offset, tag.call_no))
            .is_some_and(|&(graded, _, reused)| reused && graded == graded_size(size))
    }
}

/// The identity a profile module key stands for (`buildid:<hex>` or `path:<path>`).
pub fn identity_from_key(key: &str, path: &str) -> ModuleIdentity {
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

#[cfg(test)]
mod tests {
    use super::*;
    use pinwise_core::history::AllocKind;

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
        let plan = ProfileAdvice::new(
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
