//! How long a benchmark will take, estimated from the calibration, and how many iterations
//! fit a time budget.
//!
//! Each (size, shape) is an [`Item`] whose estimated time is `fixed + per_iteration x
//! iterations` (summed over its strategies and repeats), plus the runs of strategies whose
//! iterations are capped ([`Item::capped_per_iteration_ns`] up to [`Item::cap`]). [`plan`]
//! starts from the iterations each item wants and, while the total exceeds the budget,
//! halves the iterations of the item that costs most (large sizes first, never below the
//! item's [`Item::floor`]); if the floors of everything are still too much, it leaves out
//! the dearest items (0 iterations), keeping at least one item of every group (size).
//!
//! **The floor** ([`Item::with_min_run`], the matrix): every run of a cell is to be timed
//! over at least a given duration, estimated from the calibration for the cell's *fastest*
//! strategy, so that a cell is not decided by runs of a few milliseconds on a noisy host;
//! the plan lowers iterations down to that floor and no further (it leaves cells out
//! instead). Pin-each, which pays `cuMemHostAlloc` and `cuMemFreeHost` for every
//! allocation (the same cost every iteration; 1.2 ms per 4 KiB allocation and free in the
//! H100's calibration, up to a hundred times the other strategies' iteration), runs only the
//! iterations that reach the same floor for itself (at least [`MIN_CAPPED_ITERATIONS`]);
//! the matrix compares its time per iteration.
//!
//! The estimate is rough (copies and pinning from the cost model, filling buffers at
//! [`FILL_BYTES_PER_NS`]): [`plan`] aims at [`BUDGET_SHARE`] of the budget to leave room.

use pinwise_core::{CostModel, Direction, PinMethod};

use super::StrategyKind;

/// Bytes per nanosecond assumed for the program writing its buffers (4 GB/s: a memset of
/// memory that may still fault in).
pub const FILL_BYTES_PER_NS: f64 = 4.0;

/// The part of the budget the plan fills with its estimate.
pub const BUDGET_SHARE: f64 = 0.75;

/// A workload's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    /// Hot buffers per iteration.
    pub hot: usize,
    /// Cold buffers per iteration.
    pub cold: usize,
    /// Round trips of each hot buffer per iteration.
    pub round_trips: usize,
    /// Buffers of different sizes (see [`super::BenchConfig::mixed_sizes`]).
    pub mixed: bool,
}

impl Shape {
    /// `h3 c5 r4` (with ` mixed`).
    pub fn name(&self) -> String {
        format!(
            "h{} c{} r{}{}",
            self.hot,
            self.cold,
            self.round_trips,
            if self.mixed { " mixed" } else { "" }
        )
    }

    fn role_size(&self, size: usize, role: usize) -> usize {
        if self.mixed {
            (size * super::MIXED_QUARTERS[role % 4] / 4).max(1)
        } else {
            size
        }
    }
}

/// The fewest iterations of a strategy whose iterations are capped ([`Item::cap`]).
pub const MIN_CAPPED_ITERATIONS: usize = 3;

/// The most iterations the floor asks of a run (a bound for calibrations that estimate a
/// size's iteration at next to nothing).
pub const MAX_FLOOR_ITERATIONS: usize = 1 << 16;

/// One (size, shape) of a benchmark: its estimated cost and the iterations it wants.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Item {
    /// Estimated ns that do not depend on the iterations (pools filled once, teardown).
    pub fixed_ns: f64,
    /// Estimated ns per iteration.
    pub per_iteration_ns: f64,
    /// Iterations wanted.
    pub wanted: usize,
    /// Its group (the size): the plan leaves out no group entirely.
    pub group: usize,
    /// The fewest iterations the plan may lower it to (it leaves the item out rather than
    /// go below): 1, or the iterations that make its fastest strategy's run last the
    /// minimum run time ([`Item::with_min_run`]).
    pub floor: usize,
    /// Estimated ns per iteration of the strategies whose iterations are capped (pin-each
    /// with a minimum run time), over `min(iterations, cap)` iterations.
    pub capped_per_iteration_ns: f64,
    /// The iterations of the capped strategies (`usize::MAX`: none are capped).
    pub cap: usize,
}

impl Item {
    /// The item for `strategies` run `repeats` times at `size` in `shape`, wanting
    /// `wanted` iterations.
    pub fn of(
        cost: &CostModel,
        shape: &Shape,
        size: usize,
        strategies: &[StrategyKind],
        repeats: usize,
        wanted: usize,
        group: usize,
    ) -> Item {
        let (mut fixed, mut per) = (0.0, 0.0);
        for &k in strategies {
            let one = estimate_run_ns(cost, shape, size, 1, k);
            let two = estimate_run_ns(cost, shape, size, 2, k);
            per += two - one;
            fixed += 2.0 * one - two;
        }
        Item {
            fixed_ns: fixed * repeats as f64,
            per_iteration_ns: per * repeats as f64,
            wanted: wanted.max(1),
            group,
            floor: 1,
            capped_per_iteration_ns: 0.0,
            cap: usize::MAX,
        }
    }

    /// As [`Item::of`], with every run timed over at least `min_run_ns` (estimated): the
    /// floor is the iterations that make the fastest strategy's run (pin-each aside) last
    /// that long (at most [`MAX_FLOOR_ITERATIONS`]), and the item wants at least its floor;
    /// pin-each runs `ceil(min_run_ns / its iteration)` iterations (at least
    /// [`MIN_CAPPED_ITERATIONS`], at most the cell's). With `min_run_ns` 0, [`Item::of`].
    #[allow(clippy::too_many_arguments)]
    pub fn with_min_run(
        cost: &CostModel,
        shape: &Shape,
        size: usize,
        strategies: &[StrategyKind],
        repeats: usize,
        wanted: usize,
        group: usize,
        min_run_ns: f64,
    ) -> Item {
        if min_run_ns <= 0.0 {
            return Item::of(cost, shape, size, strategies, repeats, wanted, group);
        }
        let per_iteration = |k: StrategyKind| {
            estimate_run_ns(cost, shape, size, 2, k) - estimate_run_ns(cost, shape, size, 1, k)
        };
        let iterations_for = |per: f64| -> usize {
            if per <= 0.0 {
                return MAX_FLOOR_ITERATIONS;
            }
            ((min_run_ns / per).ceil() as usize).clamp(1, MAX_FLOOR_ITERATIONS)
        };
        let (capped, others): (Vec<StrategyKind>, Vec<StrategyKind>) = strategies
            .iter()
            .partition(|&&k| k == StrategyKind::PinEach);
        let fastest = others
            .iter()
            .map(|&k| per_iteration(k))
            .fold(f64::INFINITY, f64::min);
        let floor = if fastest.is_finite() {
            iterations_for(fastest)
        } else {
            1
        };
        let mut item = Item::of(
            cost,
            shape,
            size,
            &others,
            repeats,
            wanted.max(floor),
            group,
        );
        item.floor = floor;
        if let Some(&k) = capped.first() {
            let per = per_iteration(k);
            let one = estimate_run_ns(cost, shape, size, 1, k);
            item.fixed_ns += (one - per) * repeats as f64;
            item.capped_per_iteration_ns = per * repeats as f64;
            item.cap = iterations_for(per).max(MIN_CAPPED_ITERATIONS);
        }
        item
    }

    /// The iterations of a capped strategy (pin-each) when the item runs `iterations`.
    pub fn capped_iterations(&self, iterations: usize) -> usize {
        iterations.min(self.cap)
    }

    fn ns(&self, iterations: usize) -> f64 {
        if iterations == 0 {
            return 0.0;
        }
        self.fixed_ns
            + self.per_iteration_ns * iterations as f64
            + self.capped_per_iteration_ns * self.capped_iterations(iterations) as f64
    }
}

/// Estimated ns of one run of `kind` with `iterations` iterations at `size` in `shape`.
pub fn estimate_run_ns(
    cost: &CostModel,
    shape: &Shape,
    size: usize,
    iterations: usize,
    kind: StrategyKind,
) -> f64 {
    let it = iterations as f64;
    let hot: Vec<u64> = (0..shape.hot)
        .map(|r| shape.role_size(size, r) as u64)
        .collect();
    let cold: Vec<u64> = (shape.hot..shape.hot + shape.cold)
        .map(|r| shape.role_size(size, r) as u64)
        .collect();
    let all = || hot.iter().chain(cold.iter()).copied();
    let fill: f64 = all().map(|b| b as f64 / FILL_BYTES_PER_NS).sum();
    let copies = |pinned: bool| -> f64 {
        hot.iter()
            .map(|&b| {
                shape.round_trips as f64
                    * (cost.transfer_ns(Direction::HtoD, b, pinned)
                        + cost.transfer_ns(Direction::DtoH, b, pinned))
            })
            .sum::<f64>()
            + cold
                .first()
                .map_or(0.0, |&b| cost.transfer_ns(Direction::HtoD, b, pinned))
    };
    let pin = |b: u64| {
        cost.pin_cost_ns(b, PinMethod::MallocHost) + cost.unpin_cost_ns(b, PinMethod::MallocHost)
    };
    let fresh: f64 = all().map(|b| cost.malloc_touch_ns(b)).sum();
    let pin_all: f64 = all().map(pin).sum();
    let pin_hot: f64 = hot.iter().map(|&b| pin(b)).sum();
    match kind {
        StrategyKind::Pageable => it * (fill + copies(false) + fresh),
        StrategyKind::PinEach => it * (fill + copies(true) + pin_all),
        StrategyKind::CachingPool => pin_all + it * (fill + copies(true)),
        // Use mode: an untimed profile run (notes only) comes first when none is kept.
        StrategyKind::Smart | StrategyKind::SmartMisaligned | StrategyKind::SmartTightBudget => {
            pin_hot + fresh + it * (2.0 * fill + copies(true))
        }
        // Learning: the first iteration at pageable rates, then pinned.
        StrategyKind::Adaptive | StrategyKind::SmartProfile => {
            pin_hot + fresh + copies(false) + it * (fill + copies(true))
        }
    }
}

/// Iterations per item within `budget_s` (see the module documentation), and the
/// estimated total, seconds. Without a budget, every item gets what it wants.
pub fn plan(items: &[Item], budget_s: Option<f64>) -> (Vec<usize>, f64) {
    let mut its: Vec<usize> = items.iter().map(|i| i.wanted).collect();
    let total = |its: &[usize]| -> f64 {
        items
            .iter()
            .zip(its)
            .map(|(item, &n)| item.ns(n))
            .sum::<f64>()
            / 1e9
    };
    if let Some(budget) = budget_s {
        let target = budget * BUDGET_SHARE;
        let kept_in = |g: usize, its: &[usize]| {
            items
                .iter()
                .zip(its)
                .filter(|(it, &n)| it.group == g && n > 0)
                .count()
        };
        while total(&its) > target {
            // Halving the iterations of the item that spends most on them (not below its
            // floor)...
            let lower = |i: usize, n: usize| (n / 2).max(items[i].floor.max(1));
            let halve = (0..items.len())
                .filter(|&i| its[i] > items[i].floor.max(1))
                .max_by(|&a, &b| {
                    let ca = items[a].ns(its[a]) - items[a].ns(lower(a, its[a]));
                    let cb = items[b].ns(its[b]) - items[b].ns(lower(b, its[b]));
                    ca.total_cmp(&cb)
                });
            let saves = |i: usize| (items[i].ns(its[i]) - items[i].ns(lower(i, its[i]))) / 1e9;
            // ...unless that saves under 1 % of the budget: then leaving out the dearest
            // item (not the last of its group) does more.
            let drop = (0..items.len())
                .filter(|&i| its[i] > 0 && kept_in(items[i].group, &its) > 1)
                .max_by(|&a, &b| items[a].ns(its[a]).total_cmp(&items[b].ns(its[b])));
            match (halve, drop) {
                (Some(h), Some(d)) if saves(h) < 0.01 * target => its[d] = 0,
                (Some(h), _) => its[h] = lower(h, its[h]),
                (None, Some(d)) => its[d] = 0,
                (None, None) => break,
            }
        }
    }
    let t = total(&its);
    (its, t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(fixed: f64, per: f64, wanted: usize) -> Item {
        Item {
            fixed_ns: fixed * 1e9,
            per_iteration_ns: per * 1e9,
            wanted,
            group: 0,
            floor: 1,
            capped_per_iteration_ns: 0.0,
            cap: usize::MAX,
        }
    }

    #[test]
    fn no_budget_keeps_what_is_wanted() {
        let items = [item(1.0, 1.0, 8), item(0.0, 0.5, 4)];
        let (its, t) = plan(&items, None);
        assert_eq!(its, vec![8, 4]);
        assert!((t - 11.0).abs() < 1e-9);
    }

    #[test]
    fn the_dearest_item_gives_way_first_down_to_one() {
        // 64 iterations of a cheap item, 8 of a dear one; 20 s budget (15 s aimed at).
        let items = [item(0.0, 0.01, 64), item(1.0, 2.0, 8)];
        let (its, t) = plan(&items, Some(20.0));
        assert_eq!(its[0], 64, "the cheap item keeps its iterations");
        assert!(its[1] < 8 && its[1] >= 1, "{its:?}");
        assert!(t <= 15.0, "{t}");
        // An impossible budget: one iteration each, then the dearest left out, but never
        // the last item of a group; the estimate says what remains.
        let (its, t) = plan(&items, Some(1.0));
        assert_eq!(its, vec![1, 0]);
        assert!((t - 0.01).abs() < 1e-9, "{t}");
        let apart = [
            items[0],
            Item {
                group: 1,
                ..items[1]
            },
        ];
        let (its, t) = plan(&apart, Some(1.0));
        assert_eq!(its, vec![1, 1], "each is the last of its group");
        assert!((t - 3.01).abs() < 1e-9, "{t}");
    }

    /// The plan lowers an item down to its floor and no further: past the floors it
    /// leaves items out (never the last of a group) instead of running them shorter.
    #[test]
    fn the_plan_never_goes_below_a_floor() {
        let floored = |fixed: f64, per: f64, wanted: usize, floor: usize, group: usize| Item {
            floor,
            group,
            ..item(fixed, per, wanted)
        };
        // 1000 iterations of 10 ms wanted (10 s), floor 100; budget 4 s (3 s aimed at).
        let items = [floored(0.0, 0.01, 1000, 100, 0)];
        let (its, t) = plan(&items, Some(4.0));
        assert_eq!(its, vec![250], "halved twice: 1000 -> 500 -> 250 (2.5 s)");
        assert!(t <= 3.0);
        // 1 s budget: the floor (100 iterations, 1 s) is the least it runs, the last of its
        // group stays in even over the budget.
        let (its, _) = plan(&items, Some(1.0));
        assert_eq!(its, vec![100]);
        // Two items of one group: the one at its floor that still does not fit is left out
        // rather than lowered below it.
        let two = [
            floored(0.0, 0.01, 1000, 100, 0),
            floored(0.0, 0.001, 1000, 1, 0),
        ];
        let (its, t) = plan(&two, Some(1.0));
        assert!(its[0] == 0 || its[0] >= 100, "{its:?}");
        assert!(its[1] >= 1, "{its:?}");
        assert!(t <= 0.75 + 1e-9, "{t} {its:?}");
        // Without a floor (1), as before: down to one iteration.
        let (its, _) = plan(&[floored(0.0, 0.01, 1000, 1, 0)], Some(0.1));
        assert_eq!(its, vec![7], "1000 -> ... -> 7 (70 ms within 75 ms)");
    }

    /// The floor follows the calibration: the fastest strategy's run (pin-each aside)
    /// lasts the minimum run time at the floor and not one iteration below; pin-each runs
    /// the iterations that reach it for itself, counted in the estimate.
    #[test]
    fn the_floor_is_the_fastest_strategys_minimum_run() {
        let cost = CostModel::builtin();
        let shape = Shape {
            hot: 1,
            cold: 8,
            round_trips: 1,
            mixed: false,
        };
        let kinds = [
            StrategyKind::Pageable,
            StrategyKind::PinEach,
            StrategyKind::CachingPool,
            StrategyKind::Smart,
            StrategyKind::Adaptive,
        ];
        let min_run = 0.1e9;
        let size = 4096;
        let item = Item::with_min_run(&cost, &shape, size, &kinds, 3, 64, 0, min_run);
        let run = |k: StrategyKind, n: usize| {
            estimate_run_ns(&cost, &shape, size, n, k) - estimate_run_ns(&cost, &shape, size, 0, k)
        };
        let fastest = |n: usize| {
            kinds
                .iter()
                .filter(|&&k| k != StrategyKind::PinEach)
                .map(|&k| run(k, n))
                .fold(f64::INFINITY, f64::min)
        };
        assert!(
            item.floor > 64,
            "a 4 KiB iteration is short: {}",
            item.floor
        );
        assert!(fastest(item.floor) >= min_run * (1.0 - 1e-9));
        assert!(fastest(item.floor - 1) < min_run);
        assert_eq!(item.wanted, item.floor, "wants at least its floor");
        // Pin-each: ~1.2 ms per allocation, 9 allocations an iteration on the H200 table:
        // a few iterations reach 100 ms; never more than the cell's.
        let pe = run(StrategyKind::PinEach, 1);
        assert_eq!(
            item.cap,
            ((min_run / pe).ceil() as usize).max(MIN_CAPPED_ITERATIONS)
        );
        assert!(item.cap < item.floor, "{} {}", item.cap, item.floor);
        assert_eq!(item.capped_iterations(2), 2);
        assert_eq!(item.capped_iterations(item.floor), item.cap);
        // The estimate: every strategy but pin-each at n, pin-each at min(n, cap).
        let n = item.floor;
        let want: f64 = kinds
            .iter()
            .map(|&k| {
                let m = if k == StrategyKind::PinEach {
                    item.cap
                } else {
                    n
                };
                3.0 * estimate_run_ns(&cost, &shape, size, m, k)
            })
            .sum();
        assert!(
            (item.ns(n) - want).abs() <= 1e-6 * want,
            "{} {want}",
            item.ns(n)
        );
        // No minimum run time: the plain item.
        assert_eq!(
            Item::with_min_run(&cost, &shape, size, &kinds, 3, 64, 0, 0.0),
            Item::of(&cost, &shape, size, &kinds, 3, 64, 0)
        );
    }

    #[test]
    fn estimates_grow_with_size_and_round_trips() {
        let cost = CostModel::builtin();
        let small = Shape {
            hot: 2,
            cold: 2,
            round_trips: 8,
            mixed: false,
        };
        let more = Shape {
            round_trips: 16,
            ..small
        };
        for k in StrategyKind::ALL {
            let a = estimate_run_ns(&cost, &small, 1 << 20, 4, k);
            let b = estimate_run_ns(&cost, &small, 1 << 30, 4, k);
            let c = estimate_run_ns(&cost, &more, 1 << 30, 4, k);
            assert!(a > 0.0 && b > a && c > b, "{k:?}: {a} {b} {c}");
        }
        // Pageable copies at 1 GiB: ~100 ms host to device on the built-in H200 table.
        let one = estimate_run_ns(&cost, &small, 1 << 30, 1, StrategyKind::Pageable);
        assert!(one > 2.0 * 8.0 * 0.1e9, "{one}");
        assert_eq!(small.name(), "h2 c2 r8");
        assert_eq!(
            Shape {
                mixed: true,
                ..small
            }
            .name(),
            "h2 c2 r8 mixed"
        );
    }
}
