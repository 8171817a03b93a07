//! Profiles (from a history, across ASLR, save/load, bad input) and the pinning policy
//! (decisions at the edges, budget-constrained plans).

mod common;

use common::*;
use pinwise_core::cost::{CostModel, PinMethod};
use pinwise_core::decide::plan::PinPlan;
use pinwise_core::event::{Direction, Event, HostMemKind};
use pinwise_core::format::FormatErrorKind;
use pinwise_core::history::{HistoryConfig, MemHistory};
use pinwise_core::policy::{PinRequest, Policy, PolicyConfig, PredictedTransfers, Reason};
use pinwise_core::profile::{DirectionTotals, PerDirection, Profile, ProfileEntry, ProfileModule};
use pinwise_core::tag::{ModuleIdentity, ModuleTable, Site, Tag};
use proptest::prelude::*;

const A: u64 = 0x7000_0000;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// One run of a small program: a hot buffer, a cold one, a per-iteration scratch buffer
/// freed each time. `pre` modules are interned first, so module ids differ between runs.
fn run(pre: usize, base: u64) -> MemHistory {
    let modules = ModuleTable::shared();
    for i in 0..pre {
        modules.intern(&ModuleIdentity::from_path(format!("/lib/other{i}.so")));
    }
    let app = modules.intern(&ModuleIdentity::with_build_id("/bin/app", vec![1, 2, 3]));
    let mut h = MemHistory::with_modules(HistoryConfig::default(), modules);
    let at = |o| Site {
        module: app,
        offset: o,
    };
    let mut ts = 5_000;
    let mut t = || {
        ts += 1000;
        ts
    };
    h.ingest(&alloc(
        t(),
        PID,
        base,
        64 * MIB,
        HostMemKind::Pageable,
        at(0x100),
    ));
    h.ingest(&alloc(
        t(),
        PID,
        base + GIB,
        4096,
        HostMemKind::Pageable,
        at(0x200),
    ));
    for i in 0..3u64 {
        let s = base + 2 * GIB + i * 128 * MIB;
        h.ingest(&alloc(
            t(),
            PID,
            s,
            16 * MIB,
            HostMemKind::Pageable,
            at(0x300),
        ));
        for _ in 0..=i {
            h.ingest(&copy(t(), PID, Direction::DtoH, s, 16 * MIB));
        }
        h.ingest(&free(t(), PID, s));
    }
    for _ in 0..40 {
        h.ingest(&copy(t(), PID, Direction::HtoD, base, 64 * MIB));
    }
    h.ingest(&copy(t(), PID, Direction::HtoD, base + GIB, 4096));
    // A transfer into untracked memory: not in the profile (no allocation to predict).
    h.ingest(&copy(t(), PID, Direction::HtoD, base + 8 * GIB, 100));
    h
}

#[test]
fn a_profile_predicts_by_tag_whatever_aslr_does() {
    let first = run(0, 0x7f00_0000_0000);
    let profile = Profile::from_history(&first);
    assert_eq!(
        profile.entries.len(),
        5,
        "5 allocations with tags, no untracked"
    );
    assert_eq!(profile.modules.len(), 1);
    // The second run: other addresses, other module ids, same build.
    let second = run(3, 0x5500_0000_0000);
    let modules = second.modules();
    for v in second.allocations().filter(|v| v.tag().call_no > 0) {
        let e = profile
            .lookup_tag(&v.tag(), &modules)
            .expect("tag found across runs");
        assert_eq!(e.size, v.size());
        for d in Direction::ALL {
            assert_eq!(
                e.predicted_transfers(d),
                v.counters().direction(d).transfers() as f64
            );
        }
    }
    let key = "buildid:010203";
    let hot = profile.lookup(key, 0x100, 1).unwrap();
    assert_eq!(
        hot.transfers.htod,
        DirectionTotals {
            transfers: 40,
            bytes: 40 * 64 * MIB
        }
    );
    assert_eq!(hot.end_ns, None, "still live");
    let scratch3 = profile.lookup(key, 0x300, 3).unwrap();
    assert_eq!(scratch3.transfers.dtoh.transfers, 3);
    assert_eq!(
        scratch3.lifetime_ns(),
        Some(4000),
        "allocated, 3 copies, freed: 1 us apart"
    );
    assert!(profile.lookup(key, 0x300, 4).is_none());
    assert!(
        profile.lookup("path:/bin/app", 0x100, 1).is_none(),
        "identity is the build id"
    );
    let site = profile.lookup_site(key, 0x300).unwrap();
    assert_eq!(
        (site.allocations, site.transferred, site.max_call_no),
        (3, 3, 3)
    );
    assert_eq!(site.mean_transfers(Direction::DtoH), 2.0);
    assert_eq!(site.mean_size, 16 * MIB);
}

#[test]
fn tags_of_several_processes_merge_into_instances() {
    let mut h = MemHistory::default();
    for pid in [1u32, 2] {
        h.ingest(&alloc(10, pid, A, MIB, HostMemKind::Pageable, site(0x10)));
        for _ in 0..pid {
            h.ingest(&copy(20, pid, Direction::HtoD, A, MIB));
        }
    }
    h.ingest(&free(30, 1, A));
    let p = Profile::from_history(&h);
    assert_eq!(p.processes, 2);
    let e = p.lookup("path:?", 0x10, 1).unwrap();
    assert_eq!(e.instances, 2);
    assert_eq!(e.predicted_transfers(Direction::HtoD), 1.5);
    assert_eq!(e.end_ns, None, "one instance lived to the end");
}

#[test]
fn profiles_save_and_load_and_reject_bad_input_with_a_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.profile.json");
    let p = Profile::from_history(&run(0, 0x7f00_0000_0000));
    p.save(&path).unwrap();
    let back = Profile::load(&path).unwrap();
    assert_eq!(back, p);
    assert!(back.lookup("buildid:010203", 0x300, 2).is_some());
    let text = std::fs::read_to_string(&path).unwrap();
    let bad = |t: String| Profile::from_json_bytes(t.as_bytes()).unwrap_err();
    let e = bad(text.replacen("\"module\":0", "\"module\":7", 1));
    assert!(
        matches!(&e.kind, FormatErrorKind::Json { path, .. } if path == "entries[0].module"),
        "{e}"
    );
    // Version 1 profiles (without names) still read.
    let v1 = text.replace("\"version\":2", "\"version\":1");
    assert!(v1.contains("\"version\":1"));
    assert!(Profile::from_json_bytes(v1.as_bytes()).is_ok());
    let e = bad(text.replace("\"version\":2", "\"version\":3"));
    assert!(
        e.to_string().contains("profile version 3 is not supported"),
        "{e}"
    );
    let e = bad(text[..text.len() / 2].to_owned());
    assert!(
        matches!(e.kind, FormatErrorKind::Json { line: 1, .. }),
        "{e}"
    );
    let e = bad(text.replacen("\"instances\":1", "\"instances\":\"one\"", 1));
    assert!(e.to_string().contains("entries[0].instances"), "{e}");
    let e = bad(pinwise_core::format::json::to_string(&MemHistory::default()));
    assert!(e.to_string().contains("history dump, not a profile"), "{e}");
    let e = Profile::load(dir.path().join("nope.json")).unwrap_err();
    assert!(e.to_string().contains("nope.json"), "{e}");
}

fn policy() -> Policy {
    Policy::new(CostModel::builtin())
}

fn req(size: u64, transfers: PredictedTransfers) -> PinRequest {
    PinRequest {
        size,
        transfers,
        remaining_budget: u64::MAX,
        method: PinMethod::RegisterTouched,
    }
}

#[test]
fn tiny_copies_never_pay_back_however_many() {
    let p = policy();
    let t = PredictedTransfers::none().with(Direction::HtoD, 1e9, 4096);
    let d = p.decide(&req(4096, t));
    assert!(!d.pin);
    assert_eq!(d.reason, Reason::NeverPaysBackAtThisSize);
    assert!(
        d.saving_ns < 0.0,
        "pinned 4 KiB host-to-device copies are slower on the H200"
    );
    assert_eq!(
        p.break_even_transfers(Direction::HtoD, 4096, PinMethod::RegisterTouched),
        None
    );
    assert!(d.reason.to_string().contains("never pays back"));
}

#[test]
fn decisions_at_the_edges() {
    let p = policy();
    let none = p.decide(&req(MIB, PredictedTransfers::none()));
    assert_eq!(
        (none.pin, none.reason),
        (false, Reason::NoTransfersPredicted)
    );
    assert!(none.cost_ns > 0.0);
    let empty = p.decide(&req(
        0,
        PredictedTransfers::none().with(Direction::HtoD, 5.0, 0),
    ));
    assert_eq!(empty.reason, Reason::EmptyAllocation);
    // Break-even for 64 MiB host-to-device copies, registering touched memory.
    let size = 64 * MIB;
    let be = p
        .break_even_transfers(Direction::HtoD, size, PinMethod::RegisterTouched)
        .unwrap();
    assert!(
        be > 0.5 && be < 2.0,
        "64 MiB pays back within a copy or two: {be}"
    );
    let few = p.decide(&req(
        size,
        PredictedTransfers::none().with(Direction::HtoD, be * 0.9, size),
    ));
    match few.reason {
        Reason::TooFewTransfers {
            break_even,
            predicted,
        } => {
            assert!((break_even - be).abs() < 1e-6 * be);
            assert!((predicted - be * 0.9).abs() < 1e-9);
        }
        r => panic!("{r:?}"),
    }
    assert!(!few.pin);
    let enough = p.decide(&req(
        size,
        PredictedTransfers::none().with(Direction::HtoD, be * 1.1, size),
    ));
    assert_eq!((enough.pin, enough.reason), (true, Reason::PaysBack));
    assert!(enough.net_ns() > 0.0);
    // cudaMallocHost costs more than registering touched memory: more copies to pay back.
    let be_mh = p
        .break_even_transfers(Direction::HtoD, size, PinMethod::MallocHost)
        .unwrap();
    assert!(be_mh > be);
    // A full budget says so, with what is left.
    let full = p.decide(&PinRequest {
        remaining_budget: size - 1,
        ..req(
            size,
            PredictedTransfers::none().with(Direction::HtoD, 100.0, size),
        )
    });
    assert_eq!(
        (full.pin, full.reason),
        (
            false,
            Reason::BudgetFull {
                remaining: size - 1
            }
        )
    );
    assert!(full.saving_ns > full.cost_ns, "it would have paid back");
    // A payback factor asks for a margin.
    let careful = Policy::with_config(
        CostModel::builtin(),
        PolicyConfig {
            payback_factor: 2.0,
        },
    );
    let d = careful.decide(&req(
        size,
        PredictedTransfers::none().with(Direction::HtoD, be * 1.5, size),
    ));
    assert!(matches!(d.reason, Reason::TooFewTransfers { .. }));
    // Directions add up: device-to-host copies save too.
    let mixed = PredictedTransfers::none()
        .with(Direction::HtoD, be * 0.6, size)
        .with(Direction::DtoH, be * 0.6, size);
    assert!(p.decide(&req(size, mixed)).pin);
}

fn entry(
    module: u32,
    offset: u64,
    size: u64,
    htod: u64,
    start_ns: u64,
    end_ns: Option<u64>,
) -> ProfileEntry {
    ProfileEntry {
        module,
        offset,
        call_no: 1,
        size,
        kind: pinwise_core::history::AllocKind::Pageable,
        instances: 1,
        transfers: PerDirection {
            htod: DirectionTotals {
                transfers: htod,
                bytes: htod * size,
            },
            ..PerDirection::default()
        },
        start_ns,
        end_ns,
    }
}

fn profile(entries: Vec<ProfileEntry>) -> Profile {
    Profile::from_parts(
        1,
        vec![ProfileModule {
            key: "path:/bin/x".into(),
            path: "/bin/x".into(),
        }],
        entries,
        vec![],
    )
    .unwrap()
}

#[test]
fn plans_share_the_budget_between_allocations_never_live_together() {
    let p = policy();
    // Two 1 GiB buffers one after the other, a 1 GiB budget: both fit.
    let apart = profile(vec![
        entry(0, 1, GIB, 10, 0, Some(100)),
        entry(0, 2, GIB, 10, 100, Some(200)),
    ]);
    let plan = PinPlan::new(&apart, &p, GIB);
    assert_eq!(plan.pinned().count(), 2);
    assert_eq!(plan.peak_pinned_bytes(), GIB);
    // Overlapping: only one, the one saving more per byte.
    let together = profile(vec![
        entry(0, 1, GIB, 10, 0, Some(150)),
        entry(0, 2, GIB, 30, 100, None),
    ]);
    let plan = PinPlan::new(&together, &p, GIB);
    let pinned: Vec<u64> = plan.pinned().map(|e| e.offset).collect();
    assert_eq!(pinned, vec![2]);
    let d = plan.decision("path:/bin/x", 1, 1).unwrap();
    assert_eq!(
        (d.pin, d.reason),
        (false, Reason::BudgetFull { remaining: 0 })
    );
    assert!(plan.decision("path:/bin/x", 1, 2).is_none());
    assert!(plan.net_saving_ns() > 0.0);
    // Many small ones fill what a big one leaves.
    let mixed = profile(vec![
        entry(0, 1, 512 * MIB, 50, 0, None),
        entry(0, 2, 256 * MIB, 50, 0, None),
        entry(0, 3, 512 * MIB, 50, 0, None),
        entry(0, 4, 4096, 1000, 0, None),
    ]);
    let plan = PinPlan::new(&mixed, &p, 800 * MIB);
    assert_eq!(plan.pinned().map(|e| e.size).sum::<u64>(), 768 * MIB);
    assert_eq!(
        plan.decision("path:/bin/x", 4, 1).unwrap().reason,
        Reason::NeverPaysBackAtThisSize
    );
}

proptest! {
    #[test]
    fn plans_never_exceed_the_budget_at_any_moment(
        specs in prop::collection::vec((1u64..2048, 0u64..60, 0u64..1000, prop::option::of(1u64..1000)), 1..40),
        budget_mib in 0u64..4096,
    ) {
        let entries: Vec<ProfileEntry> = specs
            .iter()
            .enumerate()
            .map(|(i, &(mib, n, start, len))| entry(0, i as u64, mib * MIB, n, start, len.map(|l| start + l)))
            .collect();
        let prof = profile(entries.clone());
        let budget = budget_mib * MIB;
        let plan = PinPlan::new(&prof, &policy(), budget);
        prop_assert!(plan.peak_pinned_bytes() <= budget);
        // Check by brute force at every boundary.
        let mut moments: Vec<u64> = entries.iter().flat_map(|e| [Some(e.start_ns), e.end_ns]).flatten().collect();
        moments.sort();
        for t in moments {
            let live: u64 = plan
                .entries
                .iter()
                .zip(&entries)
                .filter(|(pe, e)| pe.decision.pin && e.start_ns <= t && e.end_ns.is_none_or(|end| t < end.max(e.start_ns + 1)))
                .map(|(_, e)| e.size)
                .sum();
            prop_assert!(live <= budget, "{live} > {budget} at {t}");
        }
        // Block model: an allocation not worth pinning at all (copied fewer than twice, or
        // not faster pinned) is never pinned; one the plan refuses although it pays on its
        // own says why (the budget, or too few transfers for what its block would add).
        for (pe, e) in plan.entries.iter().zip(&entries) {
            let t = PredictedTransfers::from_profile_entry(e);
            if !pinwise_core::decide::rules::worth_pinning(&policy(), &t) {
                prop_assert!(!pe.decision.pin);
            }
            // One worth pinning on its own but refused: the budget, or too few transfers for
            // what its block would add (pool reuse); never "pays back".
            if !pe.decision.pin && pinwise_core::decide::rules::worth_pinning(&policy(), &t) {
                prop_assert!(
                    matches!(
                        pe.decision.reason,
                        Reason::BudgetFull { .. } | Reason::TooFewTransfers { .. }
                    ),
                    "{:?}",
                    pe.decision.reason
                );
            }
        }
        // The plan's steps: the peak and the net saving never go down.
        prop_assert!(plan.steps().windows(2).all(|w| w[0].peak_bytes <= w[1].peak_bytes && w[0].net_saving_ns < w[1].net_saving_ns));
    }

    #[test]
    fn mutated_profiles_never_panic(flips in prop::collection::vec((any::<prop::sample::Index>(), prop::sample::select(b"0123456789{}[]\",:-ex ".to_vec())), 1..6)) {
        let mut bytes = Profile::from_history(&run(0, 0x7f00_0000_0000)).to_json().into_bytes();
        for (i, v) in flips {
            let i = i.index(bytes.len());
            bytes[i] = v;
        }
        let _ = Profile::from_json_bytes(&bytes);
    }
}

#[test]
fn a_tag_is_site_plus_call_number() {
    let t = Tag {
        site: site(5),
        call_no: 2,
    };
    let h = {
        let mut h = MemHistory::default();
        let e: Vec<Event> = vec![
            alloc(1, PID, A, 10, HostMemKind::Pageable, site(5)),
            alloc(2, PID, A + 64, 10, HostMemKind::Pageable, site(5)),
        ];
        h.ingest_batch(&e);
        h
    };
    assert_eq!(h.by_tag(t).len(), 1);
    assert_eq!(h.by_tag(t)[0].start(), A + 64);
}

/// Events of one allocation can reach the history out of order (a free seen on another
/// CPU before the allocation's return): its profile entry ends no earlier than it starts,
/// so that the profile loads back.
#[test]
fn a_free_timestamped_before_its_allocation_still_makes_a_loadable_profile() {
    let mut h = MemHistory::new(HistoryConfig::default());
    h.ingest(&alloc(
        10_000,
        PID,
        A,
        MIB,
        HostMemKind::Pageable,
        site(0x10),
    ));
    h.ingest(&copy(10_500, PID, Direction::HtoD, A, MIB));
    h.ingest(&free(9_000, PID, A));
    let p = Profile::from_history(&h);
    let e = &p.entries[0];
    assert!(e.end_ns.unwrap() >= e.start_ns, "{e:?}");
    Profile::from_json_bytes(p.to_json().as_bytes()).expect("the profile loads back");
}

/// A caller's price replaces the method's: free (a pool hit) pins whatever saves anything,
/// a higher price needs more transfers; registered memory's copies use its own column.
#[test]
fn decisions_at_a_callers_price() {
    use pinwise_core::policy::PinPrice;
    let p = policy();
    let size = 16 * MIB;
    let t = PredictedTransfers::none().with(Direction::HtoD, 2.0, size);
    let plain = p.decide(&req(size, t));
    let same = p.decide_priced(
        &req(size, t),
        &PinPrice {
            cost_ns: p.pin_cost_ns(size, PinMethod::RegisterTouched),
            bandwidth_of: PinMethod::MallocHost,
        },
    );
    assert_eq!(plain, same, "decide is decide_priced at the method's cost");
    let free = p.decide_priced(
        &req(size, t),
        &PinPrice {
            cost_ns: 0.0,
            bandwidth_of: PinMethod::MallocHost,
        },
    );
    assert_eq!((free.pin, free.cost_ns), (true, 0.0));
    let dear = p.decide_priced(
        &req(size, t),
        &PinPrice {
            cost_ns: free.saving_ns * 1.01,
            bandwidth_of: PinMethod::MallocHost,
        },
    );
    assert!(
        matches!(dear.reason, Reason::TooFewTransfers { .. }),
        "{dear:?}"
    );
    let reg = p.decide_priced(
        &req(size, t),
        &PinPrice {
            cost_ns: 0.0,
            bandwidth_of: PinMethod::RegisterTouched,
        },
    );
    let cm = p.cost_model();
    let expected =
        2.0 * cm.transfer_saving_ns_by(Direction::HtoD, size, PinMethod::RegisterTouched);
    assert!((reg.saving_ns - expected).abs() < 1e-6 * expected);
}
