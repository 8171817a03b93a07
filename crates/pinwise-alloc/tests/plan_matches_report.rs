//! The report's predicted plan is the plan `--mode use` executes: on one profile, the
//! budget `pinwise report` names (and a tighter one), the tags its plan pins are exactly the
//! allocations the engine serves pinned in use mode (mock backend, a test fixture), and the
//! plan's peak of pinned bytes is the pinned memory the engine holds at its peak.

use std::collections::BTreeSet;
use std::sync::Arc;

use pinwise_alloc::testing::MockBackend;
use pinwise_alloc::{AllocFlags, Engine, EngineConfig};
use pinwise_core::profile::Profile;
use pinwise_core::{CostModel, Direction, ModuleIdentity, ModuleTable, PinMethod, Policy, Site};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

/// Roles of one iteration: (size, transfers). Hot, cold, warm, never copied, small and hot,
/// large and moved a few times.
const ROLES: [(usize, u32); 6] = [
    (2 * MIB, 16),
    (MIB, 1),
    (8 * MIB, 3),
    (4 * MIB, 0),
    (64 * KIB, 16),
    (64 * MIB, 6),
];
const ITERATIONS: usize = 5;

struct Run {
    mock: Arc<MockBackend>,
    engine: Engine,
    sites: Vec<Site>,
}

fn run(config: impl FnOnce(EngineConfig) -> EngineConfig) -> Run {
    let modules = ModuleTable::shared();
    let app = modules.intern(&ModuleIdentity::with_build_id("/opt/app", vec![0xa0, 1]));
    let mut c = EngineConfig::new(Policy::new(CostModel::builtin()));
    c.budget_bytes = Some(1 << 34);
    c.modules = modules;
    let c = config(c);
    let mock = Arc::new(MockBackend::new());
    let engine = Engine::new(mock.clone(), c).unwrap();
    let sites = (0..ROLES.len() as u64)
        .map(|i| Site {
            module: app,
            offset: 0x100 * (i + 1),
        })
        .collect();
    Run {
        mock,
        engine,
        sites,
    }
}

/// Runs the workload; returns (offset, call number) of every allocation served pinned.
fn drive(r: &Run) -> BTreeSet<(u64, u32)> {
    let mut pinned = BTreeSet::new();
    for _ in 0..ITERATIONS {
        let mut live = Vec::new();
        for (&(size, copies), site) in ROLES.iter().zip(&r.sites) {
            let a = r.engine.alloc(size, *site, AllocFlags::NONE).unwrap();
            if a.pinned {
                pinned.insert((site.offset, a.tag.call_no));
            }
            live.push((a.ptr, size, copies));
        }
        for &(ptr, size, copies) in &live {
            for t in 0..copies {
                let d = if t % 2 == 0 {
                    Direction::HtoD
                } else {
                    Direction::DtoH
                };
                r.engine.note_transfer(ptr, size, d, None).unwrap();
            }
        }
        for (ptr, _, _) in live {
            // SAFETY: allocated above, not used afterwards.
            unsafe { r.engine.free(ptr).unwrap() };
        }
    }
    pinned
}

fn profile() -> Profile {
    let mut recorder = None;
    let r = run(|c| {
        let (c, rec) = c.recording(None);
        recorder = Some(rec);
        c
    });
    drive(&r);
    drop(r);
    recorder
        .unwrap()
        .last_profile()
        .expect("written at shutdown")
}

/// Plans with the report at `budget`, executes use mode at that budget, and compares.
fn check(profile: &Profile, policy: &Policy, budget: u64) -> BTreeSet<(u64, u32)> {
    let plan = pinwise_report::budget::plan_at(profile, policy, budget);
    let predicted: BTreeSet<(u64, u32)> = plan.pinned().map(|e| (e.offset, e.call_no)).collect();
    let used = run(|mut c| {
        c.budget_bytes = Some(budget);
        c.with_profile(profile)
    });
    let executed = drive(&used);
    assert_eq!(
        predicted, executed,
        "budget {budget}: planned vs served pinned"
    );
    assert_eq!(
        plan.peak_pinned_bytes(),
        used.mock.peak_pinned_bytes(),
        "budget {budget}: planned peak vs pinned memory held"
    );
    let st = used.engine.stats();
    assert_eq!(
        st.promotions, 0,
        "nothing the plan left pageable was pinned later"
    );
    assert_eq!(st.advice_unmatched, 0);
    predicted
}

#[test]
fn the_reports_plan_is_the_plan_use_mode_executes() {
    let profile = profile();
    assert_eq!(profile.entries.len(), ROLES.len() * ITERATIONS);
    let policy = Policy::new(CostModel::builtin());
    let b = pinwise_report::budget::analyse(
        &profile,
        &vec![false; profile.entries.len()],
        &policy,
        PinMethod::RegisterTouched,
        0.9,
    );
    let at_headline = check(&profile, &policy, b.budget_bytes);
    assert_eq!(at_headline.len() as u64, b.plan_pinned_tags);
    // The plan pins the hot roles and leaves the cold and never-copied ones pageable.
    let offsets: BTreeSet<u64> = at_headline.iter().map(|&(o, _)| o).collect();
    assert!(offsets.contains(&0x100), "hot 2 MiB: {offsets:?}");
    assert!(!offsets.contains(&0x200), "copied once: {offsets:?}");
    assert!(!offsets.contains(&0x400), "never copied: {offsets:?}");
    // Without a budget, and with one too tight for everything: the same agreement.
    let unlimited = check(&profile, &policy, 1 << 40);
    assert_eq!(unlimited.len() as u64, b.tags_worth_pinning);
    let tight = check(&profile, &policy, b.attainable_peak_bytes / 2);
    assert!(tight.len() < unlimited.len(), "{tight:?} vs {unlimited:?}");
}
