//! The pinned pool's bookkeeping: segments of page-locked memory carved into blocks.
//!
//! A *segment* is one page-locked region (one `cuMemHostAlloc`, or one registered mapping).
//! A segment is registered in one call, never in chunks: the driver refuses a copy that
//! spans two adjacent registrations (`CUDA_ERROR_INVALID_VALUE` on the H200,
//! bench/results/gpu-cuda-smoke.md), so a block spanning two chunks would be unusable.
//! It is carved into *blocks*: best fit by size, the rest split off; a freed block is merged
//! with free neighbours of the same segment, so the pool does not fragment and does not
//! waste a power of two per block (see [`crate::grade`]).
//!
//! A block freed while asynchronous copies on it may still be running is *pending*: it
//! carries the events recorded on the streams it was used on, and is reused only after
//! all of them completed.
//!
//! This type does no driver calls and no pinning: the [`crate::engine::Engine`] pins
//! outside its lock and hands the result to [`PinnedPool::add_segment`], so a slow
//! `cuMemHostAlloc` never blocks other threads' pool hits.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::backend::{EventHandle, PinMethod};
use crate::grade::PAGE;

/// How a segment's memory was obtained, so it can be given back the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentOrigin {
    /// `cuMemHostAlloc`: give back with `cuMemFreeHost`.
    AllocPinned,
    /// An anonymous mapping pinwise made and registered: unregister, then unmap (or keep as
    /// touched pageable memory).
    RegisteredMapping,
}

impl SegmentOrigin {
    /// The pinning method this origin stands for.
    pub fn method(self) -> PinMethod {
        match self {
            SegmentOrigin::AllocPinned => PinMethod::MallocHost,
            SegmentOrigin::RegisteredMapping => PinMethod::RegisterTouched,
        }
    }
}

/// A page-locked region owned by the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// First byte (page-aligned).
    pub base: usize,
    /// Length in bytes (whole pages).
    pub len: usize,
    /// How it was obtained.
    pub origin: SegmentOrigin,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockState {
    Free,
    InUse,
    /// Freed, but waiting for the events of its copies.
    Pending,
}

#[derive(Debug, Clone, Copy)]
struct Block {
    len: usize,
    segment: usize,
    state: BlockState,
}

/// The pool's books. See the module documentation.
#[derive(Debug, Default)]
pub struct PinnedPool {
    /// Segments by base address.
    segments: BTreeMap<usize, Segment>,
    /// Number of blocks of each segment that are not free (in use or pending).
    busy_blocks: HashMap<usize, usize>,
    /// All blocks by address.
    blocks: BTreeMap<usize, Block>,
    /// Free blocks as (len, address), for best fit.
    free: BTreeSet<(usize, usize)>,
    /// Pending blocks: address and the events that must complete first.
    pending: Vec<(usize, Vec<EventHandle>)>,
    segment_bytes: usize,
    in_use_bytes: usize,
    /// Segments never to hand out again (their context may have ended, and the driver then
    /// unmaps the memory): their blocks are not indexed as free when given back, and they
    /// are never released (see [`PinnedPool::retire_all`]).
    retired: std::collections::HashSet<usize>,
}

impl PinnedPool {
    /// An empty pool.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes of page-locked memory the pool holds (all segments).
    pub fn segment_bytes(&self) -> usize {
        self.segment_bytes
    }

    /// Bytes of blocks handed out and not yet freed.
    pub fn in_use_bytes(&self) -> usize {
        self.in_use_bytes
    }

    /// Number of segments.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Number of blocks waiting for their copies to complete.
    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }

    /// Takes a free block of at least `len` bytes (`len` a multiple of the page size): the
    /// smallest that fits, split if larger. Returns its address.
    pub fn take(&mut self, len: usize) -> Option<usize> {
        self.take_fit(len, usize::MAX)
    }

    /// As [`PinnedPool::take`], from a free block of at most `longest` bytes: a block is not
    /// carved out of a much larger one, whose segment would then stay pinned, unusable as a
    /// whole and never released, while the block lives.
    pub fn take_fit(&mut self, len: usize, longest: usize) -> Option<usize> {
        debug_assert!(len > 0 && len.is_multiple_of(PAGE));
        let &(found_len, addr) = self.free.range((len, 0)..).next()?;
        if found_len > longest {
            return None;
        }
        self.free.remove(&(found_len, addr));
        let block = self
            .blocks
            .get_mut(&addr)
            .expect("free index and block map agree");
        debug_assert_eq!(block.state, BlockState::Free);
        let segment = block.segment;
        block.state = BlockState::InUse;
        if found_len > len {
            block.len = len;
            let rest = Block {
                len: found_len - len,
                segment,
                state: BlockState::Free,
            };
            self.blocks.insert(addr + len, rest);
            self.free.insert((rest.len, addr + len));
        }
        *self.busy_blocks.entry(segment).or_default() += 1;
        self.in_use_bytes += len;
        Some(addr)
    }

    /// Whether a free block of at least `len` bytes is there now.
    pub fn has_free(&self, len: usize) -> bool {
        self.has_fit(len, usize::MAX)
    }

    /// Whether [`PinnedPool::take_fit`] would find a block now.
    pub fn has_fit(&self, len: usize, longest: usize) -> bool {
        self.free
            .range((len, 0)..)
            .next()
            .is_some_and(|&(l, _)| l <= longest)
    }

    /// Adds a freshly page-locked segment and takes `take` bytes of it at once (0: none).
    /// Returns the address of the taken block (the segment's base) when `take > 0`.
    pub fn add_segment(&mut self, segment: Segment, take: usize) -> Option<usize> {
        debug_assert!(segment.base.is_multiple_of(PAGE) && segment.len.is_multiple_of(PAGE));
        debug_assert!(take <= segment.len);
        self.segments.insert(segment.base, segment);
        self.busy_blocks.insert(segment.base, 0);
        self.segment_bytes += segment.len;
        self.blocks.insert(
            segment.base,
            Block {
                len: segment.len,
                segment: segment.base,
                state: BlockState::Free,
            },
        );
        self.free.insert((segment.len, segment.base));
        if take == 0 {
            return None;
        }
        // The new segment's single block is the only block of exactly this address.
        self.free.remove(&(segment.len, segment.base));
        let b = self.blocks.get_mut(&segment.base).expect("just inserted");
        b.state = BlockState::InUse;
        if segment.len > take {
            b.len = take;
            let rest = Block {
                len: segment.len - take,
                segment: segment.base,
                state: BlockState::Free,
            };
            self.blocks.insert(segment.base + take, rest);
            self.free.insert((rest.len, segment.base + take));
        }
        *self.busy_blocks.get_mut(&segment.base).expect("inserted") += 1;
        self.in_use_bytes += take;
        Some(segment.base)
    }

    /// The length of the in-use block at `addr`, if there is one.
    pub fn block_len(&self, addr: usize) -> Option<usize> {
        self.blocks
            .get(&addr)
            .filter(|b| b.state == BlockState::InUse)
            .map(|b| b.len)
    }

    /// Gives back the in-use block at `addr`. With no `events` it is free at once (and merged
    /// with free neighbours); otherwise it waits until they all completed (see
    /// [`PinnedPool::reclaim`]). Returns false when `addr` is not an in-use block.
    pub fn give_back(&mut self, addr: usize, events: Vec<EventHandle>) -> bool {
        let Some(block) = self.blocks.get_mut(&addr) else {
            return false;
        };
        if block.state != BlockState::InUse {
            return false;
        }
        self.in_use_bytes -= block.len;
        if events.is_empty() {
            self.make_free(addr);
        } else {
            block.state = BlockState::Pending;
            self.pending.push((addr, events));
        }
        true
    }

    /// The events pending blocks wait for.
    pub fn pending_events(&self) -> Vec<EventHandle> {
        self.pending
            .iter()
            .flat_map(|(_, e)| e.iter().copied())
            .collect()
    }

    /// Frees the pending blocks whose events all completed (`completed(event)` says, for each
    /// event). Returns the events of the freed blocks, for reuse.
    pub fn reclaim(&mut self, mut completed: impl FnMut(EventHandle) -> bool) -> Vec<EventHandle> {
        let mut done_events = Vec::new();
        let mut i = 0;
        while i < self.pending.len() {
            let all_done = self.pending[i].1.iter().all(|&e| completed(e));
            if all_done {
                let (addr, events) = self.pending.swap_remove(i);
                done_events.extend(events);
                self.make_free(addr);
            } else {
                i += 1;
            }
        }
        done_events
    }

    /// Retires every segment: none of their blocks is handed out again (a context that may
    /// have ended took the memory with it; handing it out would make the program write to
    /// unmapped memory). Blocks in use stay the program's until it frees them.
    pub fn retire_all(&mut self) {
        for &base in self.segments.keys() {
            self.retired.insert(base);
        }
        let retired = &self.retired;
        let blocks = &self.blocks;
        self.free.retain(|&(_, addr)| {
            blocks
                .get(&addr)
                .is_none_or(|b| !retired.contains(&b.segment))
        });
    }

    /// Removes up to `want` bytes of segments that are entirely free (largest first) from the
    /// pool and returns them, for the caller to unpin and release from the budget.
    pub fn take_free_segments(&mut self, want: usize) -> Vec<Segment> {
        let mut idle: Vec<Segment> = self
            .segments
            .values()
            .filter(|s| {
                self.busy_blocks.get(&s.base).copied().unwrap_or(0) == 0
                    && !self.retired.contains(&s.base)
            })
            .copied()
            .collect();
        idle.sort_by_key(|s| std::cmp::Reverse(s.len));
        let mut out = Vec::new();
        let mut got = 0;
        for seg in idle {
            if got >= want {
                break;
            }
            // An idle segment is a single free block (free neighbours are always merged).
            let removed = self.blocks.remove(&seg.base);
            debug_assert!(
                matches!(removed, Some(b) if b.len == seg.len && b.state == BlockState::Free)
            );
            self.free.remove(&(seg.len, seg.base));
            self.segments.remove(&seg.base);
            self.busy_blocks.remove(&seg.base);
            self.segment_bytes -= seg.len;
            got += seg.len;
            out.push(seg);
        }
        out
    }

    /// Removes every segment from the pool (at teardown) with the events of pending blocks.
    /// Blocks still in use are the caller's to worry about; their segments are returned too.
    pub fn drain(&mut self) -> (Vec<Segment>, Vec<EventHandle>) {
        let segs = self.segments.values().copied().collect();
        let events = self.pending.drain(..).flat_map(|(_, e)| e).collect();
        *self = PinnedPool::default();
        (segs, events)
    }

    fn make_free(&mut self, addr: usize) {
        let mut block = *self.blocks.get(&addr).expect("block exists");
        let segment = block.segment;
        let mut start = addr;
        // Merge with the next block if it is free and in the same segment.
        let next_addr = addr + block.len;
        if let Some(next) = self.blocks.get(&next_addr).copied() {
            if next.segment == segment && next.state == BlockState::Free {
                self.free.remove(&(next.len, next_addr));
                self.blocks.remove(&next_addr);
                block.len += next.len;
            }
        }
        // Merge with the previous block if it is free and in the same segment.
        if let Some((&prev_addr, &prev)) = self.blocks.range(..addr).next_back() {
            if prev.segment == segment
                && prev.state == BlockState::Free
                && prev_addr + prev.len == addr
            {
                self.free.remove(&(prev.len, prev_addr));
                self.blocks.remove(&addr);
                block.len += prev.len;
                start = prev_addr;
            }
        }
        block.state = BlockState::Free;
        self.blocks.insert(start, block);
        if !self.retired.contains(&segment) {
            self.free.insert((block.len, start));
        }
        let busy = self.busy_blocks.get_mut(&segment).expect("segment exists");
        *busy -= 1;
    }

    /// Checks the books (for tests): blocks tile each segment exactly, free index matches,
    /// no two free neighbours left unmerged, byte counters right.
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        let mut in_use = 0;
        let mut total = 0;
        for seg in self.segments.values() {
            total += seg.len;
            let mut at = seg.base;
            let mut busy = 0;
            let mut prev_free = false;
            for (&addr, b) in self.blocks.range(seg.base..seg.base + seg.len) {
                assert_eq!(addr, at, "blocks tile the segment");
                assert_eq!(b.segment, seg.base);
                let is_free = b.state == BlockState::Free;
                assert!(!(is_free && prev_free), "free neighbours are merged");
                assert_eq!(is_free, self.free.contains(&(b.len, addr)));
                if b.state == BlockState::InUse {
                    in_use += b.len;
                }
                if !is_free {
                    busy += 1;
                }
                prev_free = is_free;
                at += b.len;
            }
            assert_eq!(at, seg.base + seg.len, "blocks cover the segment");
            assert_eq!(self.busy_blocks[&seg.base], busy);
        }
        assert_eq!(total, self.segment_bytes);
        assert_eq!(in_use, self.in_use_bytes);
        assert_eq!(
            self.free.len(),
            self.blocks
                .values()
                .filter(|b| b.state == BlockState::Free)
                .count()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn seg(base: usize, len: usize) -> Segment {
        Segment {
            base,
            len,
            origin: SegmentOrigin::AllocPinned,
        }
    }

    #[test]
    fn split_and_coalesce() {
        let mut p = PinnedPool::new();
        let base = 1 << 30;
        assert_eq!(p.add_segment(seg(base, 16 * PAGE), 4 * PAGE), Some(base));
        let b = p.take(4 * PAGE).unwrap();
        let c = p.take(8 * PAGE).unwrap();
        assert_eq!((b, c), (base + 4 * PAGE, base + 8 * PAGE));
        assert!(p.take(PAGE).is_none(), "segment used up");
        p.check_invariants();
        assert!(p.give_back(b, vec![]));
        assert!(p.give_back(base, vec![]));
        p.check_invariants();
        // The first two blocks merged into one of 8 pages.
        assert_eq!(p.take(8 * PAGE), Some(base));
        assert!(p.give_back(base, vec![]));
        assert!(p.give_back(c, vec![]));
        p.check_invariants();
        assert_eq!(p.take_free_segments(usize::MAX), vec![seg(base, 16 * PAGE)]);
        assert_eq!(p.segment_bytes(), 0);
    }

    #[test]
    fn best_fit_takes_the_smallest_block_that_fits() {
        let mut p = PinnedPool::new();
        p.add_segment(seg(0x100000, 8 * PAGE), 0);
        p.add_segment(seg(0x200000, 2 * PAGE), 0);
        p.add_segment(seg(0x300000, 4 * PAGE), 0);
        assert_eq!(p.take(3 * PAGE), Some(0x300000));
        assert_eq!(p.take(2 * PAGE), Some(0x200000));
        p.check_invariants();
    }

    #[test]
    fn fits_are_not_carved_out_of_much_larger_blocks() {
        let mut p = PinnedPool::new();
        p.add_segment(seg(0x100000, 64 * PAGE), 0);
        assert!(!p.has_fit(4 * PAGE, 5 * PAGE));
        assert_eq!(p.take_fit(4 * PAGE, 5 * PAGE), None);
        assert!(p.has_fit(60 * PAGE, 64 * PAGE));
        assert_eq!(p.take_fit(60 * PAGE, 64 * PAGE), Some(0x100000));
        p.check_invariants();
    }

    #[test]
    fn pending_blocks_wait_for_their_events() {
        let mut p = PinnedPool::new();
        p.add_segment(seg(0x100000, 2 * PAGE), 2 * PAGE);
        assert!(p.give_back(0x100000, vec![EventHandle(7)]));
        assert_eq!(
            p.take(2 * PAGE),
            None,
            "not reusable before its copy completed"
        );
        assert!(p.reclaim(|_| false).is_empty());
        assert_eq!(p.take(2 * PAGE), None);
        assert_eq!(p.reclaim(|e| e == EventHandle(7)), vec![EventHandle(7)]);
        assert_eq!(p.take(2 * PAGE), Some(0x100000));
        p.check_invariants();
    }

    #[test]
    fn giving_back_what_is_not_in_use_is_refused() {
        let mut p = PinnedPool::new();
        p.add_segment(seg(0x100000, 2 * PAGE), PAGE);
        assert!(!p.give_back(0x100000 + PAGE, vec![]), "a free block");
        assert!(!p.give_back(0x900000, vec![]), "not a block");
        assert!(p.give_back(0x100000, vec![]));
        assert!(!p.give_back(0x100000, vec![]), "double free");
        p.check_invariants();
    }

    #[test]
    fn retired_segments_hand_nothing_out_again() {
        let mut p = PinnedPool::new();
        let base = 0x10_0000;
        let a = p.add_segment(seg(base, 16 * PAGE), 4 * PAGE).unwrap();
        let b = p.take(4 * PAGE).unwrap();
        assert!(p.has_free(PAGE));
        p.retire_all();
        assert!(
            !p.has_free(PAGE),
            "no free block of a retired segment is offered"
        );
        assert_eq!(p.take(PAGE), None);
        assert!(p.give_back(a, vec![]));
        assert!(p.give_back(b, vec![]));
        assert_eq!(
            p.take(PAGE),
            None,
            "blocks given back later are not offered either"
        );
        assert!(
            p.take_free_segments(usize::MAX).is_empty(),
            "a retired segment is never released (its memory may be gone with its context)"
        );
        // A new segment is used as usual.
        let fresh = p.add_segment(seg(0x100_0000, 4 * PAGE), 0);
        assert_eq!(fresh, None);
        assert_eq!(p.take(PAGE), Some(0x100_0000));
    }

    #[test]
    fn busy_segments_are_not_released() {
        let mut p = PinnedPool::new();
        p.add_segment(seg(0x100000, 4 * PAGE), PAGE);
        p.add_segment(seg(0x200000, 4 * PAGE), 0);
        assert_eq!(
            p.take_free_segments(usize::MAX),
            vec![seg(0x200000, 4 * PAGE)]
        );
        assert_eq!(p.segment_count(), 1);
        p.check_invariants();
    }

    proptest! {
        /// Random takes, gives back (some pending) and reclaims keep the books consistent
        /// and never hand out overlapping blocks.
        #[test]
        fn books_stay_consistent(ops in proptest::collection::vec((0u8..4, 1usize..12), 1..200)) {
            let mut p = PinnedPool::new();
            let mut live: Vec<(usize, usize)> = Vec::new();
            let mut next_base = 1usize << 32;
            let mut ev = 0u64;
            for (op, n) in ops {
                match op {
                    0 => {
                        let len = n * PAGE;
                        let addr = match p.take(len) {
                            Some(a) => a,
                            None => {
                                let s = seg(next_base, 16 * PAGE);
                                next_base += 1 << 20;
                                if len <= s.len { p.add_segment(s, len).unwrap() } else { continue }
                            }
                        };
                        for &(a, l) in &live {
                            prop_assert!(addr + len <= a || a + l <= addr, "overlap");
                        }
                        live.push((addr, len));
                    }
                    1 | 2 if !live.is_empty() => {
                        let (addr, _) = live.swap_remove(n % live.len());
                        let events = if op == 2 { ev += 1; vec![EventHandle(ev)] } else { vec![] };
                        prop_assert!(p.give_back(addr, events));
                    }
                    3 => {
                        let cutoff = ev.saturating_sub(n as u64);
                        p.reclaim(|e| e.0 <= cutoff);
                    }
                    _ => {}
                }
                p.check_invariants();
            }
        }
    }
}
