//! Allocators linked into the executable: Rust programs whose global allocator is jemalloc
//! (tikv-jemallocator: `_rjem_malloc`, `_rjem_mallocx`, `_rjem_sdallocx`, ...) or mimalloc
//! (`mi_malloc_aligned`, `mi_free`, ...), and executables that define `malloc` themselves
//! (jemalloc unprefixed, mimalloc's override). Their calls are bound inside the
//! executable, so the exported malloc family (`exports::malloc_hooks`) never sees them.
//! The entry points the executable's symbol table names are patched in place when the
//! library is loaded (an inline hook: `exports::allocator_hooks`), and record as the
//! malloc family does ([`crate::malloc`]).
//!
//! This module holds the logic: which entry points, with which signature, and the set of
//! tracked blocks, by which a `free` of these allocators knows whether its block was
//! recorded (glibc's path asks `malloc_usable_size`; these allocators' own may be
//! missing from a program that never calls it).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The signature of an entry point, as the hook reads its arguments `(a0, a1, a2)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `malloc(size, ...)`: `malloc`, `mallocx(size, flags)`, `mi_malloc_aligned(size,
    /// align)`, `mi_zalloc`, `valloc`.
    Malloc,
    /// `aligned_alloc(align, size)`, `memalign`.
    Aligned,
    /// `calloc(n, size)`.
    Calloc,
    /// `realloc(ptr, size, ...)`: `rallocx(ptr, size, flags)`, `mi_realloc_aligned`.
    Realloc,
    /// `free(ptr, ...)`: `dallocx(ptr, flags)`, `sdallocx(ptr, size, flags)`.
    Free,
    /// `posix_memalign(out, align, size)`.
    PosixMemalign,
}

/// Every entry point hooked when the executable defines it, in the order of the hooks'
/// table (`exports::allocator_hooks`). Two names at one address (mimalloc's `malloc` is
/// an alias of `mi_malloc`) are hooked once.
pub const ENTRY_POINTS: &[(&str, Kind)] = &[
    // jemalloc as tikv-jemallocator builds it.
    ("_rjem_malloc", Kind::Malloc),
    ("_rjem_mallocx", Kind::Malloc),
    ("_rjem_calloc", Kind::Calloc),
    ("_rjem_realloc", Kind::Realloc),
    ("_rjem_rallocx", Kind::Realloc),
    ("_rjem_free", Kind::Free),
    ("_rjem_dallocx", Kind::Free),
    ("_rjem_sdallocx", Kind::Free),
    ("_rjem_posix_memalign", Kind::PosixMemalign),
    ("_rjem_aligned_alloc", Kind::Aligned),
    // jemalloc's own API, unprefixed.
    ("mallocx", Kind::Malloc),
    ("rallocx", Kind::Realloc),
    ("dallocx", Kind::Free),
    ("sdallocx", Kind::Free),
    // mimalloc.
    ("mi_malloc", Kind::Malloc),
    ("mi_zalloc", Kind::Malloc),
    ("mi_calloc", Kind::Calloc),
    ("mi_realloc", Kind::Realloc),
    ("mi_free", Kind::Free),
    ("mi_malloc_aligned", Kind::Malloc),
    ("mi_zalloc_aligned", Kind::Malloc),
    ("mi_realloc_aligned", Kind::Realloc),
    ("mi_posix_memalign", Kind::PosixMemalign),
    ("mi_aligned_alloc", Kind::Aligned),
    // The C names, when the executable defines them itself.
    ("malloc", Kind::Malloc),
    ("calloc", Kind::Calloc),
    ("realloc", Kind::Realloc),
    ("free", Kind::Free),
    ("posix_memalign", Kind::PosixMemalign),
    ("aligned_alloc", Kind::Aligned),
    ("memalign", Kind::Aligned),
    ("valloc", Kind::Malloc),
];

/// Entry points patched, and entry points found that could not be (counted, logged).
pub static HOOKED: AtomicU64 = AtomicU64::new(0);
/// See [`HOOKED`].
pub static HOOK_FAILURES: AtomicU64 = AtomicU64::new(0);
/// Tracked blocks the set had no room for (their frees are not recorded).
pub static SET_FULL: AtomicU64 = AtomicU64::new(0);

/// The `(start, n)` an entry point of `kind` allocates from its arguments (for
/// [`Kind::Realloc`], `start` is the block given); `None` for a free.
pub fn requested(kind: Kind, a0: usize, a1: usize, a2: usize) -> Option<usize> {
    match kind {
        Kind::Malloc => Some(a0),
        Kind::Aligned | Kind::Realloc => Some(a1),
        // An overflowing calloc fails: nothing to record.
        Kind::Calloc => Some(a0.checked_mul(a1).unwrap_or(0)),
        Kind::PosixMemalign => Some(a2),
        Kind::Free => None,
    }
}

/// The counters, as history source statistics.
pub fn source_stats() -> [(&'static str, u64); 3] {
    [
        (
            "preload.linked_allocator_hooks",
            HOOKED.load(Ordering::Relaxed),
        ),
        (
            "preload.linked_allocator_hook_failures",
            HOOK_FAILURES.load(Ordering::Relaxed),
        ),
        (
            "preload.linked_allocator_set_full",
            SET_FULL.load(Ordering::Relaxed),
        ),
    ]
}

/// The tracked blocks of the linked allocators: a fixed open-addressing set of addresses,
/// lock-free (compare-and-swap per slot), that never allocates. While it is empty a
/// `free` costs one load; otherwise a probe of a few slots from the address's hash.
pub struct LiveSet<const N: usize> {
    slots: [AtomicUsize; N],
    live: AtomicUsize,
}

const EMPTY: usize = 0;
/// A slot whose block was freed: probes go on past it, inserts reuse it.
const GONE: usize = 1;
/// Slots probed at most from an address's hash.
const MAX_PROBE: usize = 64;

impl<const N: usize> LiveSet<N> {
    /// An empty set (`N` a power of two).
    #[allow(clippy::declare_interior_mutable_const)]
    pub const fn new() -> Self {
        const E: AtomicUsize = AtomicUsize::new(EMPTY);
        assert!(N.is_power_of_two() && N >= MAX_PROBE);
        LiveSet {
            slots: [E; N],
            live: AtomicUsize::new(0),
        }
    }

    #[inline]
    fn home(p: usize) -> usize {
        ((p >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) & (N - 1)
    }

    /// Whether no block is in the set (one load).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.live.load(Ordering::Relaxed) == 0
    }

    /// The address of the count of blocks in the set (zero: empty), for code that reads it
    /// directly (the relays' [`crate::inline_patch::Bypass::Zero`]).
    pub fn count_word(&self) -> u64 {
        self.live.as_ptr() as u64
    }

    /// Adds block `p` (not 0 or 1); false when its probe range is full (not added).
    pub fn insert(&self, p: usize) -> bool {
        debug_assert!(p > GONE);
        let h = Self::home(p);
        for i in 0..MAX_PROBE {
            let slot = &self.slots[(h + i) & (N - 1)];
            let v = slot.load(Ordering::Relaxed);
            if (v == EMPTY || v == GONE)
                && slot
                    .compare_exchange(v, p, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                self.live.fetch_add(1, Ordering::Relaxed);
                return true;
            }
        }
        false
    }

    /// Removes block `p`; whether it was in the set.
    pub fn remove(&self, p: usize) -> bool {
        if self.is_empty() || p <= GONE {
            return false;
        }
        let h = Self::home(p);
        for i in 0..MAX_PROBE {
            let slot = &self.slots[(h + i) & (N - 1)];
            match slot.load(Ordering::Acquire) {
                EMPTY => return false,
                v if v == p => {
                    if slot
                        .compare_exchange(p, GONE, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                    {
                        self.live.fetch_sub(1, Ordering::Relaxed);
                        return true;
                    }
                    return false;
                }
                _ => {}
            }
        }
        false
    }

    /// Whether block `p` is in the set.
    #[inline]
    pub fn contains(&self, p: usize) -> bool {
        if self.is_empty() || p <= GONE {
            return false;
        }
        let h = Self::home(p);
        for i in 0..MAX_PROBE {
            match self.slots[(h + i) & (N - 1)].load(Ordering::Acquire) {
                EMPTY => return false,
                v if v == p => return true,
                _ => {}
            }
        }
        false
    }
}

impl<const N: usize> Default for LiveSet<N> {
    fn default() -> Self {
        Self::new()
    }
}

/// The process's set: 64 Ki slots (512 KiB of zero pages until used).
pub static LIVE: LiveSet<{ 1 << 16 }> = LiveSet::new();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_set_finds_what_it_holds_and_reuses_freed_slots() {
        let set: Box<LiveSet<128>> = Box::default();
        assert!(set.is_empty());
        assert!(!set.remove(0x1000) && !set.contains(0x1000));
        for i in 1..=20usize {
            assert!(set.insert(i << 16));
        }
        assert!(!set.is_empty());
        for i in 1..=20usize {
            assert!(set.contains(i << 16), "{i}");
        }
        assert!(!set.contains(21 << 16));
        assert!(set.remove(5 << 16));
        assert!(!set.remove(5 << 16), "removed once");
        assert!(!set.contains(5 << 16));
        // A block at a reused address is found again, the others are still there.
        assert!(set.insert(5 << 16));
        assert!(set.contains(5 << 16));
        for i in 1..=20usize {
            assert!(set.remove(i << 16), "{i}");
        }
        assert!(set.is_empty());
        // Many more inserts and removes than slots: freed slots are reused.
        for round in 0..1000usize {
            let p = (round + 1) << 12;
            assert!(set.insert(p), "round {round}");
            assert!(set.remove(p));
        }
        assert!(set.is_empty());
    }

    #[test]
    fn a_full_probe_range_refuses_instead_of_growing() {
        let set: Box<LiveSet<64>> = Box::default();
        let added = (1..=100usize).filter(|i| set.insert(i << 12)).count();
        assert_eq!(added, 64);
        assert!(!set.insert(101 << 12));
    }

    #[test]
    fn the_size_asked_for_follows_each_signature() {
        assert_eq!(requested(Kind::Malloc, 100, 7, 9), Some(100));
        assert_eq!(requested(Kind::Aligned, 64, 100, 9), Some(100));
        assert_eq!(requested(Kind::Realloc, 0x1000, 100, 9), Some(100));
        assert_eq!(requested(Kind::Calloc, 10, 100, 9), Some(1000));
        assert_eq!(requested(Kind::Calloc, usize::MAX, 2, 9), Some(0));
        assert_eq!(requested(Kind::PosixMemalign, 0x1000, 64, 100), Some(100));
        assert_eq!(requested(Kind::Free, 0x1000, 0, 0), None);
        // Each name once.
        for (i, (a, _)) in ENTRY_POINTS.iter().enumerate() {
            assert!(!ENTRY_POINTS[i + 1..].iter().any(|(b, _)| a == b), "{a}");
        }
    }
}
