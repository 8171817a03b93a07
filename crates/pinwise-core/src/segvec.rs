//! A vector that grows by fixed-size segments.
//!
//! `Vec` doubles its buffer when it grows, so right after a growth up to half of it is
//! unused, and the copy briefly needs three times the data. The history holds millions of
//! small records; growing them a segment at a time keeps the slack under one segment and
//! never moves what is already stored.

/// A growable sequence of `T` stored in segments of `1 << SHIFT` elements.
#[derive(Debug, Clone)]
pub struct SegVec<T, const SHIFT: u32> {
    segments: Vec<Vec<T>>,
    len: usize,
}

impl<T, const SHIFT: u32> Default for SegVec<T, SHIFT> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T, const SHIFT: u32> SegVec<T, SHIFT> {
    const SEGMENT: usize = 1 << SHIFT;
    const MASK: usize = Self::SEGMENT - 1;

    /// An empty sequence (allocates nothing).
    pub const fn new() -> Self {
        SegVec {
            segments: Vec::new(),
            len: 0,
        }
    }

    /// Number of elements.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no elements.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `value`, returning its index.
    #[inline]
    pub fn push(&mut self, value: T) -> usize {
        let index = self.len;
        if index & Self::MASK == 0 {
            self.segments.push(Vec::with_capacity(Self::SEGMENT));
        }
        // The last segment has room: a new one was just added when the previous filled up.
        let last = self.segments.len() - 1;
        self.segments[last].push(value);
        self.len += 1;
        index
    }

    /// The element at `index`, if any.
    #[inline]
    pub fn get(&self, index: usize) -> Option<&T> {
        self.segments.get(index >> SHIFT)?.get(index & Self::MASK)
    }

    /// All elements in order.
    #[cfg(test)]
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + '_ {
        self.segments.iter().flat_map(|s| s.iter())
    }

    /// Bytes of heap this holds (capacity, not length), for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        self.segments.capacity() * std::mem::size_of::<Vec<T>>()
            + self
                .segments
                .iter()
                .map(|s| s.capacity() * std::mem::size_of::<T>())
                .sum::<usize>()
    }
}

impl<T, const SHIFT: u32> std::ops::Index<usize> for SegVec<T, SHIFT> {
    type Output = T;
    #[inline]
    fn index(&self, index: usize) -> &T {
        &self.segments[index >> SHIFT][index & Self::MASK]
    }
}

impl<T, const SHIFT: u32> std::ops::IndexMut<usize> for SegVec<T, SHIFT> {
    #[inline]
    fn index_mut(&mut self, index: usize) -> &mut T {
        &mut self.segments[index >> SHIFT][index & Self::MASK]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_across_segments_without_moving_elements() {
        let mut v: SegVec<u32, 2> = SegVec::new();
        assert!(v.is_empty());
        for i in 0..10 {
            assert_eq!(v.push(i * 3), i as usize);
        }
        assert_eq!(v.len(), 10);
        assert_eq!(v[9], 27);
        assert_eq!(v.get(10), None);
        v[4] = 100;
        assert_eq!(v.get(4), Some(&100));
        assert_eq!(v.iter().count(), 10);
        // 3 segments of 4 elements: the last one is the only one with slack.
        assert!(v.heap_bytes() >= 12 * 4);
    }
}
