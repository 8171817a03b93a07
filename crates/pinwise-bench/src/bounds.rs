//! Where the two bounds cannot both hold: the least time any allocator can reach in
//! a matrix cell (at its iterations) while its peak pinned bytes stay within
//! [`crate::matrix::PINNED_TARGET`] of the hot working set, against the best other
//! strategy's, both predicted from the run's calibration ([`BoundFloor`]).
//!
//! The model (the matrix's workload): every buffer is written by the program every
//! iteration; each hot buffer makes `round_trips` host-to-device and device-to-host copies,
//! the first cold buffer ("cold0") one host-to-device copy, the other cold buffers none. An
//! allocator chooses which buffers to serve pinned: their copies take the calibration's
//! pinned time, and their memory is obtained once (the cheaper of `cuMemHostAlloc` and
//! mapping, touching and registering; giving it back after the run is not timed, as in the
//! matrix); the others' copies take its pageable time. Pinned bytes are counted
//! with buffers sharing pages (the fewest whole pages that hold them), so the floor is the
//! least of *any* allocator, not only of pinwise's page-aligned blocks. Within the bound,
//! the floor ([`BoundFloor::floor_ns`]) is the least time over every choice of buffers
//! whose pinned pages fit; a pinned staging buffer for a cold copy within the few pages
//! left does not beat the driver's own staging (`bench/results/alloc-adaptive-analysis.md`,
//! section 3), so buffers are pinned whole or not at all.
//!
//! The other strategies, predicted the same way: pageable (nothing pinned), pin-each (every
//! buffer pinned, `cuMemHostAlloc` + `cuMemFreeHost` for every allocation) and the caching
//! pool (every buffer pinned, blocks of the next power of two obtained once by
//! `cuMemHostAlloc`). Memory pinned once weighs less the more iterations a cell runs: over
//! few iterations the pool's blocks (9 of them in h1 c8 r1) cost more than the copies they
//! speed up, over many the per-iteration copies decide. (The calibration's one-off
//! `cuMemHostAlloc` time is the first allocation's; the sixth session's H100 pin-each paid
//! 153 us per 4 KiB allocation and free with 9 an iteration, 1,300 us with one, against the
//! calibration's 1,208 us: where the pool's one-off cost decides a cell, the prediction is
//! rough.)
//!
//! The program's writes are the same for every allocator: the run measures them (the
//! matrix's `fill_ms`, the median per iteration over the cell's runs), and where it did not
//! (runs recorded before it did) they are counted at the planner's generous
//! [`crate::timing::FILL_BYTES_PER_NS`] ([`generous_writes_ns`]): time every strategy
//! shares brings every ratio nearer 1, so with that figure a listed cell is listed on the
//! safe side.

use pinwise_core::{CostModel, Direction, PinMethod};

use crate::matrix::PINNED_TARGET;
use crate::timing::{Shape, FILL_BYTES_PER_NS};
use crate::StrategyKind;

/// The page size pinning locks memory in.
const PAGE: u64 = pinwise_core::decide::grade::PAGE as u64;

/// Candidate buffers beyond this many are never pinned in the floor's search (the matrix's
/// shapes have at most 5: 4 hot buffers and cold0).
const MAX_SEARCHED: usize = 16;

/// One buffer of an iteration that is copied: its role, bytes and copy time per iteration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Copied {
    /// Role (0-based; roles `0..hot` are hot, then cold).
    pub role: usize,
    /// Hot (copied `round_trips` times each way) or cold0 (copied once to the device).
    pub hot: bool,
    /// Bytes.
    pub bytes: u64,
    /// Copy time per iteration from pageable memory, ns.
    pub pageable_ns: f64,
    /// Copy time per iteration from pinned memory, ns.
    pub pinned_ns: f64,
    /// Obtaining pinned memory for it once, the cheaper way, ns.
    pub obtain_ns: f64,
}

impl Copied {
    /// `h0`, `h1`, ... for hot buffers, `cold0` for the cold buffer copied once.
    pub fn name(&self) -> String {
        if self.hot {
            format!("h{}", self.role)
        } else {
            "cold0".into()
        }
    }
}

/// A cell's floor within the pinned bound and the other strategies' predicted times.
#[derive(Debug, Clone, PartialEq)]
pub struct BoundFloor {
    /// Iterations of the cell.
    pub iterations: usize,
    /// Bytes of the hot buffers.
    pub hot_set: u64,
    /// The most bytes the bound allows pinned: `PINNED_TARGET x hot_set`.
    pub allowed: u64,
    /// The program's writes per iteration (every buffer), ns.
    pub fill_ns: f64,
    /// Whether `fill_ns` was measured (else [`generous_writes_ns`]).
    pub fill_measured: bool,
    /// The buffers copied in an iteration.
    pub copied: Vec<Copied>,
    /// The floor's choice: `pinned[i]` for `copied[i]`.
    pub pinned: Vec<bool>,
    /// Pages the floor's choice locks (buffers sharing pages), bytes.
    pub pinned_bytes: u64,
    /// The floor: the least predicted time of the cell within the bound, ns.
    pub floor_ns: f64,
    /// Predicted time of the cell with pageable, pin-each and the caching pool, ns.
    pub others: [(StrategyKind, f64); 3],
    /// The caching pool's one-off pinning (blocks obtained once), ns.
    pub pool_obtain_ns: f64,
}

/// The cheapest way to obtain `bytes` pinned once (giving it back is not timed):
/// `cuMemHostAlloc`, or mapping, touching and registering fresh memory.
fn obtain_ns(cost: &CostModel, bytes: u64) -> f64 {
    let alloc = cost.pin_cost_ns(bytes, PinMethod::MallocHost);
    let register =
        cost.malloc_touch_ns(bytes) + cost.pin_cost_ns(bytes, PinMethod::RegisterTouched);
    alloc.min(register)
}

/// The program's writes of `bytes` at the planner's generous [`FILL_BYTES_PER_NS`], ns.
pub fn generous_writes_ns(bytes: u64) -> f64 {
    bytes as f64 / FILL_BYTES_PER_NS
}

/// Copy time of one buffer per iteration (`hot`: `round_trips` each way; cold0: one
/// host-to-device copy).
fn copies_ns(cost: &CostModel, bytes: u64, hot: bool, round_trips: usize, pinned: bool) -> f64 {
    if hot {
        round_trips as f64
            * (cost.transfer_ns(Direction::HtoD, bytes, pinned)
                + cost.transfer_ns(Direction::DtoH, bytes, pinned))
    } else {
        cost.transfer_ns(Direction::HtoD, bytes, pinned)
    }
}

impl BoundFloor {
    /// The floor of `shape` (role `r`'s buffer of `role_size(r)` bytes) over `iterations`,
    /// priced with `cost`; the program's writes take `measured_fill_ns` per iteration where
    /// measured (`Some`, above 0), else [`generous_writes_ns`].
    pub fn of(
        cost: &CostModel,
        shape: &Shape,
        iterations: usize,
        role_size: impl Fn(usize) -> usize,
        measured_fill_ns: Option<f64>,
    ) -> BoundFloor {
        let it = iterations.max(1) as f64;
        let roles = shape.hot + shape.cold;
        let bytes: Vec<u64> = (0..roles).map(|r| role_size(r) as u64).collect();
        let hot_set: u64 = bytes[..shape.hot].iter().sum();
        let allowed = (PINNED_TARGET * hot_set as f64).floor() as u64;
        let fill_measured = measured_fill_ns.is_some_and(|f| f > 0.0);
        let fill_ns: f64 = match measured_fill_ns {
            Some(f) if f > 0.0 => f,
            _ => bytes.iter().map(|&b| generous_writes_ns(b)).sum(),
        };
        let copied: Vec<Copied> = (0..roles.min(shape.hot + 1))
            .map(|r| {
                let hot = r < shape.hot;
                let b = bytes[r];
                Copied {
                    role: r,
                    hot,
                    bytes: b,
                    pageable_ns: copies_ns(cost, b, hot, shape.round_trips, false),
                    pinned_ns: copies_ns(cost, b, hot, shape.round_trips, true),
                    obtain_ns: obtain_ns(cost, b),
                }
            })
            .collect();
        // The least time over every choice of pinned buffers whose pages fit the bound.
        let searched = copied.len().min(MAX_SEARCHED);
        let time_of = |mask: u32| -> (f64, u64) {
            let mut t = it * fill_ns;
            let mut pinned_bytes = 0u64;
            for (i, c) in copied.iter().enumerate() {
                if i < searched && mask & (1 << i) != 0 {
                    t += c.obtain_ns + it * c.pinned_ns;
                    pinned_bytes += c.bytes;
                } else {
                    t += it * c.pageable_ns;
                }
            }
            (t, pinned_bytes.next_multiple_of(PAGE))
        };
        let (mut best_mask, (mut floor_ns, mut pinned_bytes)) = (0u32, time_of(0));
        for mask in 1..(1u32 << searched) {
            let (t, p) = time_of(mask);
            if p <= allowed && t < floor_ns {
                (best_mask, floor_ns, pinned_bytes) = (mask, t, p);
            }
        }
        let pinned = (0..copied.len())
            .map(|i| i < searched && best_mask & (1 << i) != 0)
            .collect();
        let copies = |pinned: bool| -> f64 {
            copied
                .iter()
                .map(|c| if pinned { c.pinned_ns } else { c.pageable_ns })
                .sum()
        };
        let pin_each: f64 = bytes
            .iter()
            .map(|&b| {
                cost.pin_cost_ns(b, PinMethod::MallocHost)
                    + cost.unpin_cost_ns(b, PinMethod::MallocHost)
            })
            .sum();
        let pool_obtain_ns: f64 = bytes
            .iter()
            .map(|&b| cost.pin_cost_ns(b.next_power_of_two(), PinMethod::MallocHost))
            .sum();
        let others = [
            (StrategyKind::Pageable, it * (fill_ns + copies(false))),
            (
                StrategyKind::PinEach,
                it * (fill_ns + copies(true) + pin_each),
            ),
            (
                StrategyKind::CachingPool,
                pool_obtain_ns + it * (fill_ns + copies(true)),
            ),
        ];
        BoundFloor {
            iterations: iterations.max(1),
            hot_set,
            allowed,
            fill_ns,
            fill_measured,
            copied,
            pinned,
            pinned_bytes,
            floor_ns,
            others,
            pool_obtain_ns,
        }
    }

    /// The best other strategy, predicted, and its time over the cell, ns.
    pub fn best(&self) -> (StrategyKind, f64) {
        self.others
            .iter()
            .copied()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .expect("three strategies")
    }

    /// The floor over the best other strategy's predicted time.
    pub fn ratio(&self) -> f64 {
        self.floor_ns / self.best().1.max(1e-9)
    }

    /// Whether no allocator within the pinned bound can come within `target` of the best
    /// other strategy (as predicted): the two bounds cannot both hold.
    pub fn conflicts(&self, target: f64) -> bool {
        self.ratio() > target
    }

    /// The arithmetic, in one line (per iteration in us, the cell's totals in ms).
    pub fn explain(&self) -> String {
        let us = |ns: f64| format!("{:.1} us", ns / 1e3);
        let ms = |ns: f64| format!("{:.2} ms", ns / 1e6);
        let terms = |pinned_all: Option<bool>| -> String {
            let mut parts = vec![format!(
                "writes {} ({})",
                us(self.fill_ns),
                if self.fill_measured {
                    "measured"
                } else {
                    "at 4 GB/s"
                }
            )];
            for (c, &floor_pinned) in self.copied.iter().zip(&self.pinned) {
                let pinned = pinned_all.unwrap_or(floor_pinned);
                parts.push(format!(
                    "{} {} {}",
                    c.name(),
                    if pinned { "pinned" } else { "pageable" },
                    us(if pinned { c.pinned_ns } else { c.pageable_ns })
                ));
            }
            parts.join(" + ")
        };
        let obtained: f64 = self
            .copied
            .iter()
            .zip(&self.pinned)
            .filter(|(_, &p)| p)
            .map(|(c, _)| c.obtain_ns)
            .sum();
        let (best, best_ns) = self.best();
        let n = self.iterations;
        let best_how = match best {
            StrategyKind::Pageable => format!("{n} x ({})", terms(Some(false))),
            StrategyKind::CachingPool => format!(
                "{n} x ({}) + its blocks once {}",
                terms(Some(true)),
                ms(self.pool_obtain_ns)
            ),
            _ => format!(
                "{n} x ({} + cuMemHostAlloc and cuMemFreeHost of every buffer)",
                terms(Some(true))
            ),
        };
        format!(
            "hot set {} B, at most {} B pinned; floor {} = {n} x ({}){} ({} B pinned); {} {} = \
             {}; floor / best = {:.3}",
            self.hot_set,
            self.allowed,
            ms(self.floor_ns),
            terms(None),
            if obtained > 0.0 {
                format!(" + pinning once {}", ms(obtained))
            } else {
                String::new()
            },
            self.pinned_bytes,
            best.name(),
            ms(best_ns),
            best_how,
            self.ratio()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MIXED_QUARTERS;

    fn h100() -> CostModel {
        CostModel::from_csv_str(
            include_str!("../../pinwise-alloc/tests/data/h100-calibration.csv"),
            "H100 calibration (bench/results/gpu-alloc-matrix/s6)",
        )
        .unwrap()
    }

    const fn shape(hot: usize, cold: usize, round_trips: usize, mixed: bool) -> Shape {
        Shape {
            hot,
            cold,
            round_trips,
            mixed,
        }
    }

    fn floor(
        cost: &CostModel,
        sh: Shape,
        size: usize,
        its: usize,
        fill: Option<f64>,
    ) -> BoundFloor {
        BoundFloor::of(
            cost,
            &sh,
            its,
            |r| {
                if sh.mixed {
                    (size * MIXED_QUARTERS[r % 4] / 4).max(1)
                } else {
                    size
                }
            },
            fill,
        )
    }

    /// The arithmetic by hand for one cell: 256 KiB h1 c8 r1 on the H100's calibration. The
    /// hot buffer pinned, cold0 pageable (pinning it too would hold 2x the hot set); the
    /// caching pool copies cold0 pinned and obtains 9 blocks once.
    #[test]
    fn the_cold_once_cell_by_hand() {
        let cost = h100();
        let size = 256usize << 10;
        let b = size as u64;
        let sh = shape(1, 8, 1, false);
        let its = 4096;
        let n = its as f64;
        let f = floor(&cost, sh, size, its, None);
        let h2d = |p| cost.transfer_ns(Direction::HtoD, b, p);
        let d2h = |p| cost.transfer_ns(Direction::DtoH, b, p);
        let fill = 9.0 * b as f64 / FILL_BYTES_PER_NS;
        let obtain = obtain_ns(&cost, b);
        let want_floor = n * (fill + h2d(true) + d2h(true) + h2d(false)) + obtain;
        assert!((f.floor_ns - want_floor).abs() < 1.0, "{f:?}");
        assert_eq!(f.pinned, vec![true, false]);
        assert_eq!((f.hot_set, f.pinned_bytes), (b, b));
        assert_eq!(f.allowed, (1.05 * b as f64) as u64);
        let blocks = 9.0 * cost.pin_cost_ns(b, PinMethod::MallocHost);
        let pool = blocks + n * (fill + h2d(true) + d2h(true) + h2d(true));
        assert_eq!(f.others[2].0, StrategyKind::CachingPool);
        assert!((f.others[2].1 - pool).abs() < 1.0);
        let pageable = n * (fill + h2d(false) + d2h(false) + h2d(false));
        assert!((f.others[0].1 - pageable).abs() < 1.0);
        assert_eq!(f.best().0, StrategyKind::CachingPool);
        // Per iteration 46.7 us pageable against 13.9 us pinned for cold0, on 590 us of
        // writes at 4 GB/s: (589.8 + 27.0 + 46.7) / (589.8 + 27.0 + 13.9) = 1.052 in the
        // steady state; the pool's 9 blocks (9.0 ms) over 4096 iterations bring it to 1.048:
        // past smart's target, within adaptive's.
        assert!((f.ratio() - want_floor / pool).abs() < 1e-12);
        assert!((f.ratio() - 1.048).abs() < 5e-4, "{}", f.explain());
        assert!(f.conflicts(1.03) && !f.conflicts(1.05), "{}", f.explain());
        let line = f.explain();
        assert!(
            line.contains("h0 pinned") && line.contains("cold0 pageable"),
            "{line}"
        );
        assert!(
            line.contains(&format!("floor / best = {:.3}", f.ratio())),
            "{line}"
        );
        assert!(line.contains("(at 4 GB/s)") && !f.fill_measured, "{line}");
        // Measured writes (40 us an iteration, this H100's order) replace the generous
        // figure: time all strategies share brings the ratio nearer 1, so faster writes give
        // a higher one, here past both targets.
        let m = floor(&cost, sh, size, its, Some(40e3));
        assert!(m.fill_measured && m.fill_ns == 40e3);
        let want = n * (40e3 + h2d(true) + d2h(true) + h2d(false)) + obtain;
        assert!((m.floor_ns - want).abs() < 1.0);
        assert!(m.ratio() > f.ratio(), "{} {}", m.ratio(), f.ratio());
        assert!(m.conflicts(1.03) && m.conflicts(1.05), "{}", m.explain());
        assert!(m.explain().contains("writes 40.0 us (measured)"));
        // No measurement (0): the generous figure.
        assert_eq!(floor(&cost, sh, size, its, Some(0.0)), f);
        // Over 32 iterations the pool's 9 blocks weigh more than cold0's copies: no conflict.
        let short = floor(&cost, sh, size, 32, Some(40e3));
        assert!(short.ratio() < 1.0, "{}", short.explain());
    }

    /// A shape without a cold copy: the floor pins what the pool pins (every hot buffer
    /// fits the bound), the cheaper way, no conflict. Where pinned copies are slower (4 KiB
    /// host-to-device on the built-in H200 table), the floor keeps the faster choice.
    #[test]
    fn no_cold_copy_no_conflict() {
        let cost = h100();
        let f = floor(&cost, shape(4, 0, 16, false), 1 << 20, 1024, None);
        assert!(f.ratio() <= 1.0 + 1e-12, "{}", f.explain());
        assert!(!f.conflicts(1.03));
        assert!(f.pinned.iter().all(|&p| p));
        let builtin = CostModel::builtin();
        let small = floor(&builtin, shape(1, 0, 1, false), 4096, 1024, None);
        assert!(small.ratio() <= 1.0 + 1e-12, "{}", small.explain());
    }

    /// Pages: 4 KiB h4 c8 r16 mixed holds 10,240 B of hot buffers (4,096 + 2,048 + 1,024 +
    /// 3,072); 1.05x allows 10,752 B, 2 whole pages: the floor pins at most three of them,
    /// sharing 2 pages (4,096 + 2,048 + 1,024 = 7,168 B), never all four (3 pages).
    #[test]
    fn pinned_pages_stay_within_the_bound() {
        let cost = h100();
        let f = floor(&cost, shape(4, 8, 16, true), 4096, 1024, None);
        assert_eq!(f.hot_set, 10_240);
        assert_eq!(f.allowed, 10_752);
        assert!(f.pinned_bytes <= f.allowed, "{f:?}");
        assert!(f.pinned_bytes <= 2 * PAGE);
        assert!(!f.pinned[..4].iter().all(|&p| p), "{f:?}");
        // Pinned copies are faster on this calibration: it pins what fits.
        assert_eq!(f.pinned[..4], [true, true, true, false]);
        // ...and the pool, pinning all four, is faster than any choice within the bound.
        assert!(f.ratio() > 1.0, "{}", f.explain());
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// The floor is the least over the choices within the bound: never above
            /// pageable (nothing pinned is within the bound), its pinned pages fit the
            /// bound, and where everything the pool pins fits (no cold copy, whole pages)
            /// it equals the pool's.
            #[test]
            fn the_floor_is_a_least_time_within_the_bound(
                hot in 1usize..5,
                cold in 0usize..9,
                round_trips in 1usize..17,
                mixed: bool,
                exp in 12u32..31,
                fill in proptest::option::of(0.0f64..1e9),
                its in 1usize..5000,
            ) {
                let cost = h100();
                let size = 1usize << exp;
                let f = floor(&cost, shape(hot, cold, round_trips, mixed), size, its, fill);
                prop_assert!(f.pinned_bytes <= f.allowed);
                prop_assert!(f.floor_ns <= f.others[0].1 * (1.0 + 1e-12));
                prop_assert!(f.ratio() > 0.0);
                if cold == 0 && !mixed {
                    prop_assert!(f.floor_ns <= f.others[2].1 * (1.0 + 1e-12));
                }
            }
        }
    }
}
