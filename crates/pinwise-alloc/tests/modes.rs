//! Profile, use and adaptive modes on the mock backend (a test fixture), including advice
//! that does not match the run: a profile from a different run, other sizes, another build,
//! a corrupt file. Misaligned advice must degrade to adaptive behaviour, never crash, and
//! never pin more than a couple of allocations it was wrong about.

use std::sync::Arc;

use pinwise_alloc::testing::MockBackend;
use pinwise_alloc::{AllocError, AllocFlags, Engine, EngineConfig};
use pinwise_core::profile::Profile;
use pinwise_core::{CostModel, Direction, ModuleIdentity, ModuleTable, Policy, Site};

const MIB: usize = 1 << 20;

/// The seed's loop: per iteration, hot buffers (16 transfers each, both directions) and
/// cold ones (the first transferred once, the second never), all live at once.
#[derive(Clone, Copy)]
struct Workload {
    size: usize,
    iterations: usize,
    /// Transfers of each role: hot0, cold0, hot1, cold1.
    transfers: [u32; 4],
}

const SEED: Workload = Workload {
    size: 2 * MIB,
    iterations: 6,
    transfers: [16, 1, 16, 0],
};

struct Run {
    mock: Arc<MockBackend>,
    engine: Engine,
    sites: [Site; 4],
}

/// A fresh "process": its own mock, module table and engine; the app module has the same
/// build ID in every run unless `build` differs.
fn run(build: u8, config: impl FnOnce(EngineConfig) -> EngineConfig) -> Run {
    let modules = ModuleTable::shared();
    let app = modules.intern(&ModuleIdentity::with_build_id(
        "/opt/app",
        vec![0xa0, build],
    ));
    let mut c = EngineConfig::new(Policy::new(CostModel::builtin()));
    c.budget_bytes = Some(1 << 30);
    c.modules = modules;
    let c = config(c);
    let mock = Arc::new(MockBackend::new());
    let engine = Engine::new(mock.clone(), c).unwrap();
    let sites = [0x100, 0x200, 0x300, 0x400].map(|offset| Site {
        module: app,
        offset,
    });
    Run {
        mock,
        engine,
        sites,
    }
}

/// Runs `w`; returns, per iteration and role, whether the allocation was pinned when
/// handed out.
fn drive(r: &Run, w: Workload) -> Vec<[bool; 4]> {
    let mut out = Vec::new();
    for _ in 0..w.iterations {
        let mut pinned = [false; 4];
        let mut ptrs = Vec::new();
        for (role, site) in r.sites.iter().enumerate() {
            let a = r.engine.alloc(w.size, *site, AllocFlags::NONE).unwrap();
            pinned[role] = a.pinned;
            ptrs.push(a.ptr);
        }
        for (role, &ptr) in ptrs.iter().enumerate() {
            for t in 0..w.transfers[role] {
                let d = if t % 2 == 0 {
                    Direction::HtoD
                } else {
                    Direction::DtoH
                };
                r.engine.note_transfer(ptr, w.size, d, None).unwrap();
            }
        }
        for p in ptrs {
            // SAFETY: allocated above, not used afterwards.
            unsafe { r.engine.free(p).unwrap() };
        }
        out.push(pinned);
    }
    out
}

fn profile_of(w: Workload, build: u8) -> Profile {
    let mut recorder = None;
    let r = run(build, |c| {
        let (c, rec) = c.recording(None);
        recorder = Some(rec);
        c
    });
    drive(&r, w);
    drop(r);
    recorder
        .unwrap()
        .last_profile()
        .expect("written at shutdown")
}

#[test]
fn profile_then_use_pins_exactly_the_hot_buffers_from_the_start() {
    let profile = profile_of(SEED, 1);
    assert_eq!(profile.entries.len(), 4 * SEED.iterations);
    let r = run(1, |c| c.with_profile(&profile));
    let pinned = drive(&r, SEED);
    for (i, p) in pinned.iter().enumerate() {
        assert_eq!(
            *p,
            [true, false, true, false],
            "iteration {i}: hot pinned, cold pageable"
        );
    }
    let hot_working_set = 2 * SEED.size as u64;
    assert_eq!(r.mock.peak_pinned_bytes(), hot_working_set);
    let st = r.engine.stats();
    assert_eq!(st.advice_unmatched, 0);
    assert_eq!(
        st.pool_misses, 2,
        "one block per hot buffer, reused afterwards"
    );
    assert_eq!(st.pool_hits, 2 * (SEED.iterations as u64 - 1));
}

#[test]
fn adaptive_learns_the_same_within_the_run() {
    let r = run(1, |c| c);
    let pinned = drive(&r, SEED);
    assert_eq!(pinned[0], [false; 4], "nothing known at first");
    for p in &pinned[1..] {
        assert_eq!(*p, [true, false, true, false]);
    }
}

#[test]
fn profile_of_other_sizes_is_ignored_and_the_run_is_adaptive() {
    let profile = profile_of(SEED, 1);
    let other = Workload {
        size: 3 * MIB,
        ..SEED
    };
    let r = run(1, |c| c.with_profile(&profile));
    let pinned = drive(&r, other);
    let st = r.engine.stats();
    assert_eq!(st.advice_unmatched, st.allocations, "no advice matched");
    assert_eq!(pinned[0], [false; 4]);
    assert_eq!(pinned[2], [true, false, true, false], "adaptive behaviour");
}

#[test]
fn profile_of_another_build_is_ignored() {
    let profile = profile_of(SEED, 1);
    let r = run(2, |c| c.with_profile(&profile));
    let pinned = drive(&r, SEED);
    assert_eq!(pinned[0], [false; 4]);
    assert_eq!(pinned[2], [true, false, true, false], "adaptive behaviour");
    assert_eq!(
        r.engine.stats().advice_unmatched,
        r.engine.stats().allocations
    );
}

#[test]
fn wrong_advice_is_distrusted_after_two_mistakes() {
    // The profile says site 0 is hot; in this run it is never transferred.
    let profile = profile_of(SEED, 1);
    let cold_now = Workload {
        transfers: [0, 1, 16, 0],
        iterations: 10,
        ..SEED
    };
    let r = run(1, |c| c.with_profile(&profile));
    let pinned = drive(&r, cold_now);
    let site0_pinned = pinned.iter().filter(|p| p[0]).count();
    assert_eq!(site0_pinned, 2, "followed twice, then distrusted");
    assert!(pinned[2..].iter().all(|p| !p[0]));
    // Iterations beyond the profile are decided adaptively: site 2 stays pinned.
    assert!(pinned.iter().all(|p| p[2]));
    // The mistakes cost one pinned block (the second came from the pool).
    let (allocs, registers) = r.mock.pin_calls();
    assert!(allocs + registers <= 3, "{allocs} + {registers} pin calls");
}

#[test]
fn a_longer_run_than_the_profile_continues_adaptively() {
    let profile = profile_of(SEED, 1);
    let longer = Workload {
        iterations: 12,
        ..SEED
    };
    let r = run(1, |c| c.with_profile(&profile));
    let pinned = drive(&r, longer);
    assert!(pinned.iter().all(|p| *p == [true, false, true, false]));
    assert_eq!(r.engine.stats().advice_unmatched, 4 * 6);
}

#[test]
fn corrupt_or_missing_profile_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        b"{\"format\": \"pinwise-profile\", \"version\": 1, \"entr",
    )
    .unwrap();
    let c = EngineConfig::new(Policy::new(CostModel::builtin()));
    let err = c.clone().with_profile_file(&bad).unwrap_err();
    assert!(matches!(err, AllocError::Profile { .. }));
    assert!(err.to_string().contains("bad.json"), "{err}");
    let missing = dir.path().join("nope.json");
    let err = c.with_profile_file(&missing).unwrap_err();
    assert!(err.to_string().contains("nope.json"), "{err}");
}

#[test]
fn profile_written_to_a_file_round_trips_into_use_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.profile.json");
    {
        let r = run(1, |c| c.recording(Some(path.clone())).0);
        drive(&r, SEED);
    }
    let r = run(1, |c| c.with_profile_file(&path).unwrap());
    let pinned = drive(&r, SEED);
    assert_eq!(pinned[0], [true, false, true, false]);
}

#[test]
fn a_tight_budget_keeps_the_plan_within_it() {
    let profile = profile_of(SEED, 1);
    let r = run(1, |mut c| {
        c.budget_bytes = Some(3 * MIB as u64);
        c.with_profile(&profile)
    });
    let pinned = drive(&r, SEED);
    // One hot buffer fits; the other is pageable (and cannot be promoted either).
    assert!(pinned.iter().all(|p| p.iter().filter(|&&x| x).count() <= 1));
    assert!(r.mock.peak_pinned_bytes() <= 3 * MIB as u64);
}

#[test]
fn small_hot_buffers_are_pinned_through_the_pool() {
    // At 64 KiB, 16 copies do not pay for registering one buffer (~150 us on the H200), but
    // one pooled block serves the site's allocation in every iteration: the plan pins it.
    let w = Workload {
        size: 64 << 10,
        iterations: 10,
        ..SEED
    };
    let profile = profile_of(w, 1);
    let r = run(1, |c| c.with_profile(&profile));
    let pinned = drive(&r, w);
    assert!(
        pinned.iter().all(|p| *p == [true, false, true, false]),
        "{pinned:?}"
    );
    assert_eq!(r.mock.peak_pinned_bytes(), 2 * (64 << 10));
}

#[test]
fn a_buffer_copied_once_is_never_pinned_even_where_one_copy_pays() {
    // At 64 MiB one host-to-device copy saves about what registering the buffer costs on the
    // H200; still, a buffer copied once is not worth holding pinned, in any mode.
    let w = Workload {
        size: 64 * MIB,
        iterations: 3,
        transfers: [16, 1, 16, 0],
    };
    let profile = profile_of(w, 1);
    let used = run(1, |c| c.with_profile(&profile));
    assert!(drive(&used, w)
        .iter()
        .all(|p| *p == [true, false, true, false]));
    assert_eq!(used.mock.peak_pinned_bytes(), 2 * 64 * MIB as u64);
    let adaptive = run(1, |c| c);
    let pinned = drive(&adaptive, w);
    assert!(
        pinned.iter().all(|p| !p[1]),
        "the once-copied buffer: {pinned:?}"
    );
    assert_eq!(
        adaptive.engine.stats().promotions,
        2,
        "only the two hot buffers"
    );
}

/// A 64 MiB buffer allocated once and moved 4 times (a PyTorch offload tensor, as the lead
/// saw on an H200): use mode pins it from its allocation. Pricing fresh pinned memory at
/// cuMemHostAlloc alone (21 ms on the built-in table, against an 11 ms saving) advised
/// pageable, and the buffer was then registered in place during its first copies; priced at
/// what pinning adds (a fresh pageable mapping takes the same page faults), it pays.
#[test]
fn a_large_buffer_moved_a_few_times_is_pinned_from_its_allocation() {
    let w = Workload {
        size: 64 * MIB,
        iterations: 1,
        transfers: [4, 0, 0, 0],
    };
    let p = profile_of(w, 1);
    let r = run(1, |c| c.with_profile(&p));
    let pinned = drive(&r, w);
    assert!(pinned[0][0], "pinned when allocated: {pinned:?}");
    assert_eq!(
        &pinned[0][1..],
        &[false; 3],
        "the buffers never copied stay pageable"
    );
    assert_eq!(
        r.engine.stats().promotions,
        0,
        "no registration during its copies"
    );
    assert!(r.mock.pin_calls() != (0, 0));
}
