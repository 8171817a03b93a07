//! Adaptive mode (no profile) learning a hot call site, counted on the mock backend (a test
//! fixture: what is pinned, registered and promoted, per iteration; no timing).
//!
//! The workload is `pinwise bench alloc`'s loop: per iteration, hot buffers (each at its own
//! call site, `round_trips` host-to-device and device-to-host copies) and cold ones
//! (interleaved; the first copied to the device once), all freed at the end of the
//! iteration. Priced with the H100's own calibration (`tests/data/h100-calibration.csv`, a
//! copy of `bench/results/gpu-alloc-matrix/s6/own-calibration.csv`) and the built-in H200
//! table.

use std::sync::Arc;

use pinwise_alloc::testing::MockBackend;
use pinwise_alloc::{AllocFlags, AllocStats, Engine, EngineConfig};
use pinwise_core::decide::grade::graded_size;
use pinwise_core::decide::rules::{pays_now, PinNow};
use pinwise_core::policy::PredictedTransfers;
use pinwise_core::{CostModel, Direction, ModuleId, Policy, Site};

const KIB: usize = 1 << 10;

fn h100() -> CostModel {
    CostModel::from_csv_str(
        include_str!("data/h100-calibration.csv"),
        "H100 calibration (bench/results/gpu-alloc-matrix/s6)",
    )
    .unwrap()
}

#[derive(Debug, Clone, Copy)]
struct Shape {
    hot: usize,
    cold: usize,
    round_trips: usize,
    /// Role `r` gets `MIXED_QUARTERS[r % 4]` quarters of the size (as `bench alloc --matrix`).
    mixed: bool,
}

const MIXED_QUARTERS: [usize; 4] = [4, 2, 1, 3];

/// The matrix's shapes (`pinwise_bench::matrix`).
const SHAPES: [Shape; 7] = [
    Shape {
        hot: 1,
        cold: 0,
        round_trips: 1,
        mixed: false,
    },
    Shape {
        hot: 1,
        cold: 8,
        round_trips: 1,
        mixed: false,
    },
    Shape {
        hot: 2,
        cold: 2,
        round_trips: 8,
        mixed: false,
    },
    Shape {
        hot: 3,
        cold: 5,
        round_trips: 4,
        mixed: false,
    },
    Shape {
        hot: 4,
        cold: 0,
        round_trips: 16,
        mixed: false,
    },
    Shape {
        hot: 2,
        cold: 4,
        round_trips: 2,
        mixed: true,
    },
    Shape {
        hot: 4,
        cold: 8,
        round_trips: 16,
        mixed: true,
    },
];

impl Shape {
    fn role_size(&self, size: usize, role: usize) -> usize {
        if self.mixed {
            (size * MIXED_QUARTERS[role % 4] / 4).max(1)
        } else {
            size
        }
    }
}

fn site(role: usize) -> Site {
    Site {
        module: ModuleId(1),
        offset: 0x1000 + role as u64,
    }
}

/// What one iteration did: which hot buffers were handed out pinned, and the engine's
/// statistics after it.
struct Iteration {
    hot_pinned: Vec<bool>,
    stats: AllocStats,
}

fn run(model: &CostModel, size: usize, shape: &Shape, iterations: usize) -> Vec<Iteration> {
    let mut c = EngineConfig::new(Policy::new(model.clone()));
    c.budget_bytes = Some(1 << 30);
    let e = Engine::new(Arc::new(MockBackend::new()), c).unwrap();
    let mut order = Vec::new();
    for i in 0..shape.hot.max(shape.cold) {
        if i < shape.hot {
            order.push((i, true));
        }
        if i < shape.cold {
            order.push((shape.hot + i, false));
        }
    }
    let mut out = Vec::new();
    for _ in 0..iterations {
        let allocs: Vec<_> = order
            .iter()
            .map(|&(role, hot)| {
                let len = shape.role_size(size, role);
                (e.alloc(len, site(role), AllocFlags::NONE).unwrap(), hot)
            })
            .collect();
        for (a, hot) in &allocs {
            if *hot {
                for _ in 0..shape.round_trips {
                    e.note_transfer(a.ptr, a.size, Direction::HtoD, None)
                        .unwrap();
                    e.note_transfer(a.ptr, a.size, Direction::DtoH, None)
                        .unwrap();
                }
            }
        }
        if let Some((a, _)) = allocs.iter().find(|(_, hot)| !hot) {
            e.note_transfer(a.ptr, a.size, Direction::HtoD, None)
                .unwrap();
        }
        let hot_pinned = allocs
            .iter()
            .filter(|(_, hot)| *hot)
            .map(|(a, _)| a.pinned)
            .collect();
        for (a, _) in &allocs {
            // SAFETY: allocated above in this iteration, freed once.
            unsafe { e.free(a.ptr).unwrap() };
        }
        out.push(Iteration {
            hot_pinned,
            stats: e.stats(),
        });
    }
    out
}

/// The ski-rental bound on learning a hot site: the fewest allocations `k` whose copies
/// (`round_trips` round trips of `len` bytes each), lost on pageable memory, pay for a new
/// pinned block of that size, however the engine would obtain it (fresh memory, or a warm
/// cached mapping registered); `None` when no number up to `limit` does (pinned copies no
/// faster, or hardly). The site is pinned from its allocation number `k` on (0-based: the
/// first `k` allocations pay for learning).
fn learning_bound(model: &CostModel, len: usize, round_trips: usize, limit: u32) -> Option<u32> {
    let p = Policy::new(model.clone());
    let graded = graded_size(len) as u64;
    let trip = PredictedTransfers::none()
        .with(Direction::HtoD, round_trips as f64, len as u64)
        .with(Direction::DtoH, round_trips as f64, len as u64);
    let none = PredictedTransfers::none();
    [false, true]
        .into_iter()
        .map(|cache_has_fit| {
            let now = PinNow {
                graded,
                segment: graded,
                pool_has_free: false,
                cache_has_fit,
                reserved: 0,
                cap: 1 << 30,
            };
            (1..=limit).find(|&k| {
                let lost = pinwise_core::decide::pricing::scaled(&trip, trip.total() * k as f64);
                pays_now(&p, &none, 1.0, &lost, &now).pin
            })
        })
        .try_fold(0, |worst, k| k.map(|k| worst.max(k)))
}

/// The case (bench/results/gpu-alloc-matrix.md, sixth session): on the H100, one
/// 64 KiB buffer copied once each way per iteration (h1 c0 r1) was never pinned without a
/// profile (2.0x the caching pool, which pins it once). Each allocation's copies save about
/// 23 us on registered memory; a block costs about 212 us to register, unregister and
/// hold; the prediction credits a block with at most 8 reuses (8 x 23 < 212), so it never
/// paid (bench/results/alloc-adaptive-analysis.md). Now
/// the site's lost copies buy its block: pinned from its 11th allocation (10 pay for
/// learning), once, and never given back or registered again.
#[test]
fn a_64k_buffer_copied_once_each_way_is_pinned_after_ten_iterations_and_never_churned() {
    let shape = SHAPES[0];
    let its = run(&h100(), 64 * KIB, &shape, 200);
    let first = its
        .iter()
        .position(|i| i.hot_pinned[0])
        .expect("pinned at last");
    assert_eq!(first, 10, "learning takes ten allocations");
    assert_eq!(learning_bound(&h100(), 64 * KIB, 1, 10_000), Some(10));
    assert!(
        its[first..].iter().all(|i| i.hot_pinned[0]),
        "never churned"
    );
    let s = its.last().unwrap().stats;
    assert_eq!(
        (s.pins_alloc, s.pins_register),
        (0, 1),
        "one block, registered once"
    );
    assert_eq!(s.promotions, 0);
    assert_eq!(s.pool_misses, 1);
    assert_eq!(s.pool_hits, 200 - 11);
    assert_eq!(s.pinned_allocations, 200 - 10);
    assert_eq!(s.pinned_bytes_peak, 64 * KIB as u64, "exactly the hot set");
    assert_eq!(s.pool_bytes, 64 * KIB as u64);
}

/// Over the matrix's shapes and sizes (4 KiB to 1 MiB), priced with the H100's calibration
/// and with the built-in H200 table: every hot buffer whose copies pinned pay for a block
/// within the ski-rental bound is pinned from at most that allocation on, in every later
/// iteration (never churned: no more `cuMemHostAlloc`s and registrations than pinned hot
/// sites, so none is obtained twice or promoted and given back); cold buffers are never
/// pinned beyond the hot set's blocks; and a site whose copies pinned would not pay within
/// the run is never pinned.
#[test]
fn every_hot_site_is_pinned_once_within_the_ski_rental_bound() {
    const ITERATIONS: usize = 160;
    for (table, model) in [("H100", h100()), ("H200 built-in", CostModel::builtin())] {
        for size in [4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, 1024 * KIB] {
            for shape in &SHAPES {
                let its = run(&model, size, shape, ITERATIONS);
                let at = format!("{table} {size} B {shape:?}");
                let mut pinned_hot = 0;
                let mut hot_blocks = 0u64;
                for h in 0..shape.hot {
                    let len = shape.role_size(size, h);
                    let bound = learning_bound(&model, len, shape.round_trips, 100_000);
                    let first = its.iter().position(|i| i.hot_pinned[h]);
                    match (bound, first) {
                        (Some(k), Some(f)) => {
                            assert!(f <= k as usize, "{at}: hot {h} pinned at {f}, bound {k}");
                            assert!(
                                its[f..].iter().all(|i| i.hot_pinned[h]),
                                "{at}: hot {h} churned"
                            );
                            pinned_hot += 1;
                            hot_blocks += graded_size(len) as u64;
                        }
                        (Some(k), None) => assert!(
                            k as usize >= ITERATIONS,
                            "{at}: hot {h} never pinned, bound {k}"
                        ),
                        // Pinned although its lost copies never pay: a round trip pinned is
                        // then no faster, and only the prediction (or promotion) could pin it;
                        // neither may at these sizes.
                        (None, Some(f)) => panic!("{at}: hot {h} pinned at {f} without paying"),
                        (None, None) => {}
                    }
                }
                let s = its.last().unwrap().stats;
                // A block may be carved from another site's larger free segment (mixed sizes),
                // so there are at most as many segments as pinned sites, never more.
                assert!(
                    s.pins_alloc + s.pins_register <= pinned_hot,
                    "{at}: at most one block per pinned hot site, obtained once ({s:?})"
                );
                assert_eq!(pinned_hot == 0, s.pins_alloc + s.pins_register == 0, "{at}");
                assert!(
                    s.pinned_bytes_peak <= hot_blocks,
                    "{at}: pinned {} over the hot blocks {hot_blocks}",
                    s.pinned_bytes_peak
                );
            }
        }
    }
}
