//! How long a benchmark will take, estimated from the calibration, and how many iterations
//! fit a time budget.
//!
//! Each (size, shape) is an [`Item`] whose estimated time is `fixed + per_iteration x
//! iterations` (summed over its strategies and repeats). [`plan`] starts from the
//! iterations each item wants and, while the total exceeds the budget, halves the
//! iterations of the item that costs most (large sizes first, never below one); if one
//! iteration of everything is still too much, it leaves out the dearest items (0
//! iterations), keeping at least one item of every group (size). The
//! estimate is rough (copies and pinning from the cost model, filling buffers at
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
        }
    }

    fn ns(&self, iterations: usize) -> f64 {
        if iterations == 0 {
            return 0.0;
        }
        self.fixed_ns + self.per_iteration_ns * iterations as f64
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
            // Halving the iterations of the item that spends most on them...
            let halve = (0..items.len()).filter(|&i| its[i] > 1).max_by(|&a, &b| {
                let ca = items[a].per_iteration_ns * its[a] as f64;
                let cb = items[b].per_iteration_ns * its[b] as f64;
                ca.total_cmp(&cb)
            });
            let saves = |i: usize| items[i].per_iteration_ns * (its[i] - its[i] / 2) as f64 / 1e9;
            // ...unless that saves under 1 % of the budget: then leaving out the dearest
            // item (not the last of its group) does more.
            let drop = (0..items.len())
                .filter(|&i| its[i] > 0 && kept_in(items[i].group, &its) > 1)
                .max_by(|&a, &b| items[a].ns(its[a]).total_cmp(&items[b].ns(its[b])));
            match (halve, drop) {
                (Some(h), Some(d)) if saves(h) < 0.01 * target => its[d] = 0,
                (Some(h), _) => its[h] = (its[h] / 2).max(1),
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
