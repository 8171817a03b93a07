//! [`Timeline`]: pinned bytes over time, for budgets over allocation lifetimes.

/// Bytes pinned over time: a segment tree over the elementary intervals between lifetime
/// boundaries, with range add and range max. A lifetime covers the intervals from the one
/// holding its start to the one before its end (at least one), to the last when it never
/// ended. Core's budget plan and the report's saving-versus-budget curve both count pinned
/// bytes with it, so their peaks agree.
pub struct Timeline {
    points: Vec<u64>,
    max: Vec<u64>,
    add: Vec<u64>,
}

impl Timeline {
    /// A timeline over the lifetime boundaries `points` (any order, duplicates allowed).
    pub fn new(points: impl Iterator<Item = u64>) -> Self {
        let mut points: Vec<u64> = points.collect();
        points.sort_unstable();
        points.dedup();
        if points.is_empty() {
            points.push(0);
        }
        let n = points.len();
        Timeline {
            points,
            max: vec![0; 4 * n],
            add: vec![0; 4 * n],
        }
    }

    /// Number of elementary intervals (the last one runs to infinity).
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// Intervals `[from, to)` covering a lifetime from `start` to `end` (`None`: forever);
    /// an instantaneous lifetime still occupies its interval.
    pub fn span(&self, start: u64, end: Option<u64>) -> (usize, usize) {
        let from = self
            .points
            .partition_point(|&p| p <= start)
            .saturating_sub(1);
        let to = match end {
            Some(e) => self.points.partition_point(|&p| p < e).max(from + 1),
            None => self.len(),
        };
        (from, to)
    }

    /// The most bytes at once over intervals `[from, to)`.
    pub fn max(&self, from: usize, to: usize) -> u64 {
        self.query(1, 0, self.len(), from, to)
    }

    /// Adds `v` bytes to intervals `[from, to)`.
    pub fn add(&mut self, from: usize, to: usize, v: u64) {
        let n = self.len();
        self.update(1, 0, n, from, to, v);
    }

    /// The most bytes at once over the whole timeline.
    pub fn peak(&self) -> u64 {
        self.max(0, self.len())
    }

    /// Never true: a timeline has at least one interval.
    pub fn is_empty(&self) -> bool {
        false
    }

    fn query(&self, node: usize, lo: usize, hi: usize, from: usize, to: usize) -> u64 {
        if to <= lo || hi <= from {
            return 0;
        }
        if from <= lo && hi <= to {
            return self.max[node];
        }
        let mid = (lo + hi) / 2;
        self.add[node]
            + self.query(2 * node, lo, mid, from, to).max(self.query(
                2 * node + 1,
                mid,
                hi,
                from,
                to,
            ))
    }

    fn update(&mut self, node: usize, lo: usize, hi: usize, from: usize, to: usize, v: u64) {
        if to <= lo || hi <= from {
            return;
        }
        if from <= lo && hi <= to {
            self.max[node] += v;
            self.add[node] += v;
            return;
        }
        let mid = (lo + hi) / 2;
        self.update(2 * node, lo, mid, from, to, v);
        self.update(2 * node + 1, mid, hi, from, to, v);
        self.max[node] = self.add[node] + self.max[2 * node].max(self.max[2 * node + 1]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeline_tracks_the_most_bytes_at_once() {
        let mut t = Timeline::new([0u64, 10, 20, 30].into_iter());
        let a = t.span(0, Some(10));
        let b = t.span(10, Some(20));
        let c = t.span(5, None);
        t.add(a.0, a.1, 100);
        t.add(b.0, b.1, 100);
        assert_eq!(t.max(0, t.len()), 100, "a and b never overlap");
        t.add(c.0, c.1, 50);
        assert_eq!(t.max(0, t.len()), 150);
        assert_eq!(t.max(t.span(20, Some(30)).0, t.len()), 50);
    }

    #[test]
    fn the_timeline_peaks_where_lifetimes_overlap() {
        let mut t = Timeline::new([0u64, 10, 20, 30].into_iter());
        let (a0, a1) = t.span(0, Some(10));
        t.add(a0, a1, 100);
        let (b0, b1) = t.span(10, Some(20));
        t.add(b0, b1, 100);
        assert_eq!(t.peak(), 100, "back to back lifetimes share the budget");
        let (c0, c1) = t.span(5, None);
        t.add(c0, c1, 50);
        assert_eq!(t.peak(), 150);
    }

    #[test]
    fn the_timeline_agrees_with_a_brute_force_count() {
        // Deterministic pseudo-random lifetimes over 37 boundaries.
        let mut x = 12345u64;
        let mut next = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x >> 33
        };
        let points: Vec<u64> = (0..37).map(|i| i * 10).collect();
        let mut t = Timeline::new(points.iter().copied());
        let mut brute = vec![0u64; t.len()];
        for _ in 0..200 {
            let a = next() % 370;
            let end = (next() % 4 != 0).then(|| a + next() % 100);
            let v = next() % 1000;
            let (from, to) = t.span(a, end);
            t.add(from, to, v);
            for b in &mut brute[from..to] {
                *b += v;
            }
            assert_eq!(t.peak(), *brute.iter().max().unwrap());
        }
    }
}
