//! Spare idle pool blocks for requests that would otherwise be pageable (pinwise-core's
//! `rules::is_spare` and `rules::spare_block_pays`, the engine's `demand`), on the mock
//! backend (a test fixture: exact accounting of what is pinned, no timing).

use std::sync::Arc;

use pinwise_alloc::demand::WINDOW;
use pinwise_alloc::testing::MockBackend;
use pinwise_alloc::{AllocFlags, Engine, EngineConfig};
use pinwise_core::{CostModel, Direction, ModuleId, Policy, Site};
use proptest::prelude::*;

const MIB: usize = 1 << 20;

fn engine() -> Engine {
    let mut c = EngineConfig::new(Policy::new(CostModel::builtin()));
    c.budget_bytes = Some(1 << 30);
    Engine::new(Arc::new(MockBackend::new()), c).unwrap()
}

fn site(n: u64) -> Site {
    Site {
        module: ModuleId(1),
        offset: n,
    }
}

/// One iteration: allocates `hot` buffers at site 1 and `cold` at sites 10.. (interleaved,
/// as `bench alloc` does), copies each hot one 16 times and the first cold one once, frees
/// them all. Returns whether each buffer was pinned (hot ones first).
fn iteration(e: &Engine, hot: usize, cold: usize, size: usize) -> Vec<bool> {
    let mut order = Vec::new();
    for i in 0..hot.max(cold) {
        if i < hot {
            order.push((true, i));
        }
        if i < cold {
            order.push((false, i));
        }
    }
    let mut hot_bufs = Vec::new();
    let mut cold_bufs = Vec::new();
    for &(is_hot, i) in &order {
        let s = if is_hot { site(1) } else { site(10 + i as u64) };
        let a = e.alloc(size, s, AllocFlags::NONE).unwrap();
        if is_hot {
            hot_bufs.push(a);
        } else {
            cold_bufs.push(a);
        }
    }
    for a in &hot_bufs {
        for k in 0..16 {
            let d = if k % 2 == 0 {
                Direction::HtoD
            } else {
                Direction::DtoH
            };
            e.note_transfer(a.ptr, size, d, None).unwrap();
        }
    }
    if let Some(a) = cold_bufs.first() {
        e.note_transfer(a.ptr, size, Direction::HtoD, None).unwrap();
    }
    let pinned = hot_bufs
        .iter()
        .chain(&cold_bufs)
        .map(|a| a.pinned)
        .collect();
    for a in hot_bufs.iter().chain(&cold_bufs) {
        // SAFETY: allocated above in this iteration, freed once.
        unsafe { e.free(a.ptr).unwrap() };
    }
    pinned
}

/// The bench's cold-heavy shapes: the pool holds exactly the hot buffers' blocks, and the
/// hot blocks not yet taken in an iteration are not spare. Cold buffers stay pageable and
/// the pool does not grow.
#[test]
fn in_a_steady_loop_the_hot_blocks_are_never_lent() {
    for (hot, cold) in [(1, 8), (2, 2), (3, 5)] {
        let e = engine();
        for _ in 0..(3 * WINDOW as usize / (hot + cold) + 8) {
            iteration(&e, hot, cold, MIB);
        }
        let pinned = iteration(&e, hot, cold, MIB);
        assert!(
            pinned[..hot].iter().all(|&p| p),
            "h{hot} c{cold}: {pinned:?}"
        );
        assert!(
            pinned[hot..].iter().all(|&p| !p),
            "h{hot} c{cold}: {pinned:?}"
        );
        let s = e.stats();
        assert_eq!(s.spare_block_hits, 0, "h{hot} c{cold}");
        assert_eq!(s.pool_bytes, (hot * MIB) as u64, "h{hot} c{cold}");
        assert_eq!(s.pinned_bytes_peak, (hot * MIB) as u64, "h{hot} c{cold}");
    }
}

/// After a phase with two hot buffers, one: the second block idles. Once the demand's
/// peak has followed (two windows), the cold buffer copied once per iteration is served
/// from it, pinned, without the pool growing; when the second hot buffer comes back, the
/// pool grows once for it and lends no more.
#[test]
fn an_idle_block_left_by_a_phase_serves_a_cold_buffer_without_growing_the_pool() {
    let e = engine();
    for _ in 0..16 {
        iteration(&e, 2, 1, MIB);
    }
    let before = e.stats();
    assert_eq!(before.pool_bytes, 2 * MIB as u64);
    assert_eq!(before.spare_block_hits, 0);
    // One hot buffer per iteration from now on: two allocations per iteration.
    let mut last = Vec::new();
    for _ in 0..(WINDOW as usize + 8) {
        last = iteration(&e, 1, 1, MIB);
    }
    assert_eq!(last, vec![true, true], "the cold buffer on the spare block");
    let lent = e.stats();
    assert!(lent.spare_block_hits > 0);
    assert_eq!(lent.pool_bytes, before.pool_bytes, "no growth");
    assert_eq!(lent.pool_misses, before.pool_misses);
    assert_eq!(lent.pinned_bytes_peak, before.pinned_bytes_peak);
    // The second hot buffer comes back: its block is lent, the pool grows once for it,
    // then lends no more (the cold buffer goes back to pageable) and grows no further.
    for _ in 0..64 {
        last = iteration(&e, 2, 1, MIB);
    }
    assert_eq!(last, vec![true, true, false]);
    let back = e.stats();
    assert_eq!(back.pool_bytes, 3 * MIB as u64, "grew once");
    let hits = back.spare_block_hits;
    for _ in 0..(3 * WINDOW as usize) {
        iteration(&e, 2, 1, MIB);
    }
    let later = e.stats();
    assert_eq!(later.pool_bytes, back.pool_bytes);
    assert_eq!(later.spare_block_hits, hits);
}

/// A cold buffer never copied gains nothing from a spare block: left pageable.
#[test]
fn a_spare_block_serves_only_buffers_whose_copies_it_makes_faster() {
    let e = engine();
    for _ in 0..16 {
        iteration(&e, 2, 2, MIB);
    }
    for _ in 0..(2 * WINDOW as usize / 3 + 8) {
        let pinned = iteration(&e, 1, 2, MIB);
        assert!(!pinned[2], "the cold buffer never copied: {pinned:?}");
    }
    assert!(e.stats().spare_block_hits > 0, "the one copied once was");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Whatever the mix of hot and cold buffers from one iteration to the next, a request
    /// served from a spare block never makes the pool grow, nor the pinned peak.
    #[test]
    fn a_spare_block_never_grows_the_pool(
        shapes in proptest::collection::vec((1usize..4, 0usize..4, 1usize..4), 1..12),
        reps in 1usize..200,
    ) {
        let e = engine();
        for (hot, cold, mib) in shapes {
            for _ in 0..reps {
                let before = e.stats();
                let spare_before = before.spare_block_hits;
                // One allocation at a time, to see what each one did.
                let s = if spare_before.is_multiple_of(2) {
                    site(10)
                } else {
                    site(11)
                };
                let a = e.alloc(mib * MIB, s, AllocFlags::NONE).unwrap();
                let after = e.stats();
                if after.spare_block_hits > spare_before {
                    prop_assert!(a.pinned);
                    prop_assert_eq!(after.pool_bytes, before.pool_bytes);
                    prop_assert_eq!(after.pool_misses, before.pool_misses);
                    prop_assert_eq!(after.pinned_bytes_peak, before.pinned_bytes_peak);
                }
                e.note_transfer(a.ptr, mib * MIB, Direction::HtoD, None).unwrap();
                // SAFETY: allocated just above, freed once.
                unsafe { e.free(a.ptr).unwrap() };
                iteration(&e, hot, cold, mib * MIB);
            }
        }
    }
}

/// One iteration of two hot buffers of different sizes, the smaller allocated first (each
/// at its own site, 16 copies each), then both freed. Returns whether each was pinned.
fn two_sizes(e: &Engine, small: usize, large: usize) -> (bool, bool) {
    let a = e.alloc(small, site(2), AllocFlags::NONE).unwrap();
    let b = e.alloc(large, site(3), AllocFlags::NONE).unwrap();
    for (x, len) in [(&a, small), (&b, large)] {
        for k in 0..16 {
            let d = if k % 2 == 0 {
                Direction::HtoD
            } else {
                Direction::DtoH
            };
            e.note_transfer(x.ptr, len, d, None).unwrap();
        }
    }
    // SAFETY: allocated above, freed once.
    unsafe {
        e.free(a.ptr).unwrap();
        e.free(b.ptr).unwrap();
    }
    (a.pinned, b.pinned)
}

/// A larger idle block is carved for another size only where it is spare: in a loop, the
/// large hot buffer's block, idle between its free and its next allocation, is not carved
/// for the small hot buffer allocated before it (both would then take turns missing); the
/// small one gets a block of its own, once, and both stay pinned. Once the large buffer's
/// phase has ended (two windows of the demand's peak), its idle block is spare, and a second
/// small buffer live at once is carved from it without the pool growing.
#[test]
fn a_hot_blocks_idle_neighbour_size_is_not_carved_unless_spare() {
    let e = engine();
    // Below the size of mappings (64 KiB): heap memory, never promoted in place, so a
    // block comes only from the pool.
    let (small, large) = (16 << 10, 48 << 10);
    // The large site learns first (alone), so its block is the pool's only one.
    for _ in 0..64 {
        let a = e.alloc(large, site(3), AllocFlags::NONE).unwrap();
        for _ in 0..16 {
            e.note_transfer(a.ptr, large, Direction::HtoD, None)
                .unwrap();
        }
        // SAFETY: allocated above, freed once.
        unsafe { e.free(a.ptr).unwrap() };
    }
    assert_eq!(e.stats().pool_bytes, large as u64);
    let mut last = (false, false);
    let mut churned = 0;
    for _ in 0..256 {
        let now = two_sizes(&e, small, large);
        churned += (last.1 && !now.1) as u32 + (last.0 && !now.0) as u32;
        last = now;
    }
    assert_eq!(last, (true, true));
    assert_eq!(churned, 0, "neither took the other's block");
    let s = e.stats();
    assert_eq!(s.pool_bytes, (small + large) as u64, "one block each");
    assert_eq!(s.pins_alloc + s.pins_register, 2, "each obtained once");
    // The large site stops; after two windows its idle block is spare.
    for _ in 0..(2 * WINDOW as usize + 8) {
        let a = e.alloc(small, site(2), AllocFlags::NONE).unwrap();
        for _ in 0..16 {
            e.note_transfer(a.ptr, small, Direction::HtoD, None)
                .unwrap();
        }
        // SAFETY: allocated above, freed once.
        unsafe { e.free(a.ptr).unwrap() };
    }
    // A second small buffer live at once: its block is carved from the spare large one.
    let a = e.alloc(small, site(2), AllocFlags::NONE).unwrap();
    let b = e.alloc(small, site(2), AllocFlags::NONE).unwrap();
    assert!(a.pinned && b.pinned, "the second from the spare block");
    let after = e.stats();
    assert_eq!(after.pool_bytes, s.pool_bytes, "no growth");
    assert_eq!(after.pins_alloc + after.pins_register, 2);
    // SAFETY: allocated above, freed once.
    unsafe {
        e.free(a.ptr).unwrap();
        e.free(b.ptr).unwrap();
    }
}
