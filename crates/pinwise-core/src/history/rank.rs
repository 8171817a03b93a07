//! Index of records by transfer count, for hotspot and coldspot queries.
//!
//! A two-level tournament tree over the records' transfer counts (the leaves, which live in
//! the records themselves): a level-1 node summarizes 64 records, a level-2 node 64
//! level-1 nodes. Each node keeps the largest and the smallest count below it, and how many
//! children share that smallest count. Counts only grow and records are only appended, so
//! an update is O(1), except when the last child at a node's minimum moves up: then the
//! node rescans its 64 children. That happens at most once per 64 increments below the
//! node, so it is O(1) amortized.
//!
//! `top(n)` and `bottom(n)` walk the tree best-first: one pass over the level-2 nodes (one
//! per 4096 records) plus O(n) nodes of 64 children, microseconds for a million records.
//! Ties are broken by record id, oldest first. The index costs 24 bytes per 64 records.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

const FAN: usize = 64;

#[derive(Debug, Clone, Copy)]
struct Node {
    max: u32,
    min: u32,
    /// Children whose value (leaf count, or child node's `min`) equals `min`.
    min_count: u32,
}

impl Node {
    const FRESH: Node = Node {
        max: 0,
        min: 0,
        min_count: 1,
    };
}

fn min_and_count(values: impl Iterator<Item = u32>) -> (u32, u32) {
    let mut min = u32::MAX;
    let mut count = 0;
    for v in values {
        if v < min {
            min = v;
            count = 1;
        } else if v == min {
            count += 1;
        }
    }
    (min, count)
}

/// The index. Leaf values are read through `leaf(i)`: record `i`'s transfer count.
#[derive(Debug, Clone, Default)]
pub(crate) struct TransferRank {
    leaves: usize,
    l1: Vec<Node>,
    l2: Vec<Node>,
}

/// A child of `p` went from value `old` to a larger value `new`; `p` is fixed up, rescanning
/// its children through `rescan` when needed. Returns `Some(old min)` if `p.min` changed.
fn child_rose(
    p: &mut Node,
    old: u32,
    new: u32,
    rescan: impl FnOnce() -> (u32, u32),
) -> Option<u32> {
    p.max = p.max.max(new);
    if old != p.min {
        return None;
    }
    p.min_count -= 1;
    if p.min_count > 0 {
        return None;
    }
    let before = p.min;
    (p.min, p.min_count) = rescan();
    Some(before)
}

/// A new child with value 0 joined `p`. Returns whether `p.min` dropped.
fn zero_joined(p: &mut Node) -> bool {
    if p.min > 0 {
        p.min = 0;
        p.min_count = 1;
        true
    } else {
        p.min_count += 1;
        false
    }
}

impl TransferRank {
    /// Registers the next leaf, with count 0.
    pub fn push(&mut self) {
        let index = self.leaves;
        self.leaves += 1;
        let n1 = index / FAN;
        let n2 = n1 / FAN;
        if n1 == self.l1.len() {
            self.l1.push(Node::FRESH);
            if n2 == self.l2.len() {
                self.l2.push(Node::FRESH);
            } else {
                zero_joined(&mut self.l2[n2]);
            }
        } else if zero_joined(&mut self.l1[n1]) {
            // The level-1 node's minimum fell from a positive value to 0: for its parent,
            // a child whose value fell to 0. If the parent's minimum was positive, 0 is the
            // new minimum with this one child at it (the old value no longer counts);
            // otherwise one more child sits at the parent's minimum, 0.
            zero_joined(&mut self.l2[n2]);
        }
    }

    /// Leaf `index` went from `old` to `new` transfers (`new > old`).
    pub fn increment(&mut self, index: usize, old: u32, new: u32, leaf: impl Fn(usize) -> u32) {
        debug_assert!(new > old && index < self.leaves);
        let n1 = index / FAN;
        let n2 = n1 / FAN;
        let leaves = self.leaves;
        let first = n1 * FAN;
        let rescan_leaves = || min_and_count((first..(first + FAN).min(leaves)).map(&leaf));
        let Some(old_min) = child_rose(&mut self.l1[n1], old, new, rescan_leaves) else {
            let p = &mut self.l2[n2];
            p.max = p.max.max(new);
            return;
        };
        let new_min = self.l1[n1].min;
        let children = &self.l1[n2 * FAN..(n2 * FAN + FAN).min(self.l1.len())];
        let rescan_nodes = || min_and_count(children.iter().map(|c| c.min));
        // `children` borrows l1 while l2 is changed: separate vectors, so this is fine.
        child_rose(&mut self.l2[n2], old_min, new_min, rescan_nodes);
        let p = &mut self.l2[n2];
        p.max = p.max.max(new);
    }

    /// The `n` leaves with the most transfers, most first (ties: lower index first).
    pub fn top(&self, n: usize, leaf: impl Fn(usize) -> u32) -> Vec<usize> {
        // Key: (value, Reverse(first leaf index)) is an upper bound of every leaf's key
        // below a node, so popping in key order yields leaves in key order.
        let mut heap: BinaryHeap<(u32, Reverse<usize>, u8)> = self
            .l2
            .iter()
            .enumerate()
            .map(|(i, node)| (node.max, Reverse(i * FAN * FAN), 2))
            .collect();
        self.best_first(n, &mut heap, |first, level| match level {
            2 => self
                .l1_children(first)
                .map(|(i, c)| (c.max, Reverse(i * FAN), 1))
                .collect(),
            _ => (first..(first + FAN).min(self.leaves))
                .map(|i| (leaf(i), Reverse(i), 0))
                .collect(),
        })
    }

    /// The `n` leaves with the fewest transfers, fewest first (ties: lower index first).
    pub fn bottom(&self, n: usize, leaf: impl Fn(usize) -> u32) -> Vec<usize> {
        let mut heap: BinaryHeap<(Reverse<u32>, Reverse<usize>, u8)> = self
            .l2
            .iter()
            .enumerate()
            .map(|(i, node)| (Reverse(node.min), Reverse(i * FAN * FAN), 2))
            .collect();
        self.best_first(n, &mut heap, |first, level| match level {
            2 => self
                .l1_children(first)
                .map(|(i, c)| (Reverse(c.min), Reverse(i * FAN), 1))
                .collect(),
            _ => (first..(first + FAN).min(self.leaves))
                .map(|i| (Reverse(leaf(i)), Reverse(i), 0))
                .collect(),
        })
    }

    /// Level-1 nodes under the level-2 node whose first leaf is `first_leaf`, with the
    /// index of each node.
    fn l1_children(&self, first_leaf: usize) -> impl Iterator<Item = (usize, &Node)> {
        let first = first_leaf / FAN;
        let end = (first + FAN).min(self.l1.len());
        (first..end).map(move |i| (i, &self.l1[i]))
    }

    fn best_first<K: Ord>(
        &self,
        n: usize,
        heap: &mut BinaryHeap<(K, Reverse<usize>, u8)>,
        expand: impl Fn(usize, u8) -> Vec<(K, Reverse<usize>, u8)>,
    ) -> Vec<usize> {
        let mut out = Vec::with_capacity(n.min(self.leaves));
        while out.len() < n {
            let Some((_, Reverse(first), level)) = heap.pop() else {
                break;
            };
            if level == 0 {
                out.push(first);
            } else {
                heap.extend(expand(first, level));
            }
        }
        out
    }

    /// Leaves with at least `min` transfers (unordered).
    pub fn at_least(&self, min: u32, leaf: impl Fn(usize) -> u32) -> Vec<usize> {
        let mut out = Vec::new();
        for (k, node) in self.l2.iter().enumerate() {
            if node.max < min {
                continue;
            }
            for (i, c) in self.l1_children(k * FAN * FAN) {
                if c.max < min {
                    continue;
                }
                let first = i * FAN;
                out.extend((first..(first + FAN).min(self.leaves)).filter(|&j| leaf(j) >= min));
            }
        }
        out
    }

    /// Leaves with at most `max` transfers (unordered).
    pub fn at_most(&self, max: u32, leaf: impl Fn(usize) -> u32) -> Vec<usize> {
        let mut out = Vec::new();
        for (k, node) in self.l2.iter().enumerate() {
            if node.min > max {
                continue;
            }
            for (i, c) in self.l1_children(k * FAN * FAN) {
                if c.min > max {
                    continue;
                }
                let first = i * FAN;
                out.extend((first..(first + FAN).min(self.leaves)).filter(|&j| leaf(j) <= max));
            }
        }
        out
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        (self.l1.capacity() + self.l2.capacity()) * std::mem::size_of::<Node>()
    }

    #[cfg(test)]
    fn check(&self, leaf: impl Fn(usize) -> u32) {
        for (i, node) in self.l1.iter().enumerate() {
            let first = i * FAN;
            let vals: Vec<u32> = (first..(first + FAN).min(self.leaves)).map(&leaf).collect();
            let (m, c) = min_and_count(vals.iter().copied());
            assert_eq!((node.min, node.min_count), (m, c), "l1 node {i} min");
            assert_eq!(
                node.max,
                vals.iter().copied().max().unwrap(),
                "l1 node {i} max"
            );
        }
        for (k, node) in self.l2.iter().enumerate() {
            let kids: Vec<&Node> = self.l1_children(k * FAN * FAN).map(|(_, c)| c).collect();
            let (m, c) = min_and_count(kids.iter().map(|c| c.min));
            assert_eq!((node.min, node.min_count), (m, c), "l2 node {k} min");
            assert_eq!(
                node.max,
                kids.iter().map(|c| c.max).max().unwrap(),
                "l2 node {k} max"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Applies `ops` (Some(i): increment leaf i mod len; None: push a leaf) and compares
    /// every query with a brute-force answer.
    fn run(ops: &[Option<usize>], n: usize, threshold: u32) {
        let mut counts: Vec<u32> = Vec::new();
        let mut rank = TransferRank::default();
        for op in ops {
            match op {
                None => {
                    counts.push(0);
                    rank.push();
                }
                Some(i) if !counts.is_empty() => {
                    let i = i % counts.len();
                    let old = counts[i];
                    counts[i] += 1;
                    rank.increment(i, old, old + 1, |j| counts[j]);
                }
                Some(_) => {}
            }
        }
        if counts.is_empty() {
            assert!(rank.top(n, |_| 0).is_empty());
            return;
        }
        rank.check(|j| counts[j]);
        let mut by_hot: Vec<usize> = (0..counts.len()).collect();
        by_hot.sort_by_key(|&i| (Reverse(counts[i]), i));
        assert_eq!(rank.top(n, |j| counts[j]), by_hot[..n.min(counts.len())]);
        let mut by_cold: Vec<usize> = (0..counts.len()).collect();
        by_cold.sort_by_key(|&i| (counts[i], i));
        assert_eq!(
            rank.bottom(n, |j| counts[j]),
            by_cold[..n.min(counts.len())]
        );
        let mut hot = rank.at_least(threshold, |j| counts[j]);
        hot.sort();
        let want: Vec<usize> = (0..counts.len())
            .filter(|&i| counts[i] >= threshold)
            .collect();
        assert_eq!(hot, want);
        let mut cold = rank.at_most(threshold, |j| counts[j]);
        cold.sort();
        let want: Vec<usize> = (0..counts.len())
            .filter(|&i| counts[i] <= threshold)
            .collect();
        assert_eq!(cold, want);
    }

    #[test]
    fn many_leaves_across_level_two_nodes() {
        // 10_000 leaves span three level-2 nodes; hot leaves scattered, cold ones in bulk.
        let mut ops: Vec<Option<usize>> = vec![None; 10_000];
        for i in 0..10_000usize {
            for _ in 0..(i * 7919 % 13) {
                ops.push(Some(i));
            }
        }
        ops.extend(std::iter::repeat_n(None, 100)); // fresh zeros after everything rose
        run(&ops, 25, 6);
    }

    #[test]
    fn every_leaf_at_the_minimum_rising_keeps_minimum_exact() {
        // All 64 leaves of a node at 0 rise one by one: the last one moves the minimum.
        let mut ops: Vec<Option<usize>> = vec![None; 64];
        ops.extend((0..64).map(Some));
        ops.extend((0..64).map(Some));
        ops.push(None); // a new zero in a new node
        run(&ops, 70, 2);
    }

    proptest! {
        #[test]
        fn matches_brute_force(
            ops in prop::collection::vec(prop::option::weighted(0.7, 0usize..300), 0..3000),
            n in 0usize..50,
            threshold in 0u32..10,
        ) {
            run(&ops, n, threshold);
        }
    }
}
