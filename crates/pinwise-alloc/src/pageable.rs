//! The pageable path: memory that is not pinned.
//!
//! Small requests come from the Rust global allocator (whose free lists keep them warm).
//! Large ones (at least [`MMAP_FROM`]) are anonymous mappings of whole pages, so that they
//! can later be registered in place ("promoted") without touching anyone else's pages, and
//! a freed one is kept in a bounded cache of *warm* (already faulted) mappings,
//! [`PageableCache`]: a cold request of the same size class ([`graded_size`]; a cached
//! mapping at most 1/8 larger also serves) reuses it and costs no page faults, as a pinned
//! pool's reused block would not; and the pinned pool can register it instead of calling
//! `cuMemHostAlloc` (registering touched memory is about 8x cheaper on the H200). The cache
//! keeps at most its cap of bytes (`EngineConfig::pageable_cache_bytes`, or
//! `PINWISE_PAGEABLE_CACHE`; an eighth of RAM by default), unmapping the largest mappings
//! first when a new one would exceed it, and gives everything back to the OS (`munmap`)
//! when the machine runs short of memory ([`crate::pressure`]: `MemAvailable` below a
//! threshold, read at most once a second). Mappings of 2 MiB and more are advised to use
//! transparent huge pages and are populated at once (`MADV_POPULATE_WRITE`): the program is
//! about to write them, and populating a range in the kernel, in huge pages where it can, is
//! faster than faulting it in page by page (on the H200 machine, `pinwise calibrate` mapped
//! and wrote 1 GiB this way in 195 ms, where the built-in table, measured with 4 KiB pages,
//! has 404 ms: bench/results/gpu-alloc.md). Such mappings are aligned to 2 MiB, so that
//! all of them can be huge pages, not only their aligned middle.
//!
//! Mappings from [`CARVE_FROM`] up to [`HUGE_FROM`] are too small for a huge page of their
//! own, and a program writes 4 KiB pages more slowly than huge ones (every 4 KiB costs a
//! TLB miss: on the dev VM nine 1 MiB buffers are written about 18 % faster in huge pages,
//! and the H100's matrix wrote smart's 1 MiB cold buffers 16 % more slowly than the pool's
//! pinned blocks; bench/results/alloc-engine-overhead.md). So when the cache has none of
//! the size, the engine maps a huge, populated chunk of one to four 2 MiB pages
//! ([`chunk_len`], [`map_huge_chunk`]) and carves it ([`carve`]): one piece serves the
//! request, the others (and what is left) go to the cache, warm, for the next requests. Each piece is a mapping of its own from then on
//! (unmapping one splits the huge page; the others stay valid). Only where transparent huge
//! pages are available ([`thp_available`]), the cache can hold a chunk, and memory is not
//! low. The pieces the program has not used yet are resident (the rest of the last chunk of
//! each size, and at most an eighth of each chunk left over) and bounded like any cached
//! mapping: within the cap, given back under pressure.

use std::collections::BTreeSet;

use crate::grade::{graded_size, PAGE};

/// Environment variable that sets the cache's cap when the engine's configuration does not
/// (the size grammar of `PINWISE_BUDGET`: `2G`, `512MiB`, `10%`).
pub const CACHE_ENV: &str = "PINWISE_PAGEABLE_CACHE";

/// The cap of the cache when neither the configuration nor [`CACHE_ENV`] sets one: an
/// eighth of `MemTotal` (half the default pinned budget).
pub fn default_cache_bytes() -> usize {
    (crate::budget::default_budget_bytes() / 2).min(usize::MAX as u64) as usize
}

/// The cap from [`CACHE_ENV`] if it is set and valid (an invalid value is logged and the
/// default used), else the default.
pub fn cache_bytes_from_env() -> usize {
    match std::env::var(CACHE_ENV) {
        Ok(v) => match pinwise_core::units::parse_size_or_ram_percent(&v) {
            Ok(b) => b.min(usize::MAX as u64) as usize,
            Err(e) => {
                tracing::warn!(value = %v, error = %e, "{CACHE_ENV} not understood; default cap");
                default_cache_bytes()
            }
        },
        Err(_) => default_cache_bytes(),
    }
}

/// Requests of at least this many bytes get their own page-aligned mapping.
pub const MMAP_FROM: usize = 64 * 1024;

/// Mappings of at least this many bytes are advised to use transparent huge pages.
pub const HUGE_FROM: usize = 2 << 20;

/// Maps `len` bytes (whole pages) of anonymous read-write memory. With `huge`, mappings of
/// [`HUGE_FROM`] bytes or more are aligned to [`HUGE_FROM`], advised to use transparent huge
/// pages and populated at once (where the kernel supports it; otherwise they fault in as
/// usual).
pub fn map_anonymous(len: usize, huge: bool) -> Option<*mut u8> {
    debug_assert!(len.is_multiple_of(PAGE) && len > 0);
    if huge && len >= HUGE_FROM && thp_available() {
        let p = map_aligned(len, HUGE_FROM)?;
        advise_huge(p, len);
        return Some(p);
    }
    map_plain(len)
}

fn map_plain(len: usize) -> Option<*mut u8> {
    // SAFETY: an anonymous private mapping at an address of the kernel's choosing touches
    // no existing memory.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p as *mut u8)
}

/// Maps `len` bytes starting at a multiple of `align` (a power of two, a multiple of the
/// page): maps `align - PAGE` bytes more and unmaps what lies before and after.
fn map_aligned(len: usize, align: usize) -> Option<*mut u8> {
    debug_assert!(align.is_power_of_two() && align.is_multiple_of(PAGE));
    let extra = align - PAGE;
    let raw = map_plain(len + extra)? as usize;
    let start = raw.next_multiple_of(align);
    let head = start - raw;
    let tail = extra - head;
    // SAFETY: both ranges lie inside the mapping just made, outside the part kept.
    unsafe {
        if head > 0 {
            unmap(raw as *mut u8, head);
        }
        if tail > 0 {
            unmap((start + len) as *mut u8, tail);
        }
    }
    Some(start as *mut u8)
}

/// Advises transparent huge pages for a mapping and populates it.
fn advise_huge(p: *mut u8, len: usize) {
    // SAFETY: advice on a mapping we just made; failure (THP disabled, a kernel older than
    // 5.14 without MADV_POPULATE_WRITE) is harmless: pages then fault in on use.
    unsafe {
        libc::madvise(p as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
        libc::madvise(p as *mut libc::c_void, len, libc::MADV_POPULATE_WRITE);
    }
}

/// Whether transparent huge pages can back an advised mapping: the kernel has them and they
/// are not switched off (`never` in `/sys/kernel/mm/transparent_hugepage/enabled`). Read
/// once.
pub fn thp_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .is_ok_and(|s| thp_setting_allows(&s))
    })
}

/// Whether the THP setting `enabled` (the file's text, the chosen value in brackets) lets an
/// advised mapping have huge pages.
fn thp_setting_allows(enabled: &str) -> bool {
    enabled.contains("[always]") || enabled.contains("[madvise]")
}

/// Mappings from this many bytes up to [`HUGE_FROM`] are carved from chunks of huge pages
/// (see the module documentation). The H100's matrix wrote smart's 256 KiB cold buffers
/// 28 % more slowly than the pool's blocks, its 64 KiB ones as fast; below this a chunk
/// would also be many pieces populated for one request.
pub const CARVE_FROM: usize = 256 * 1024;

/// Whether a mapping of `len` bytes is carved from a huge chunk (in a cache of `cache_cap`
/// bytes, which must be able to keep the rest of the chunk).
pub fn carves(len: usize, cache_cap: usize) -> bool {
    (CARVE_FROM..HUGE_FROM).contains(&len) && cache_cap >= chunk_len(len) && thp_available()
}

/// Most huge pages in one chunk.
const MAX_CHUNK_PAGES: usize = 4;

/// The length of the chunk mappings of `len` bytes are carved from: the fewest huge pages
/// (at most [`MAX_CHUNK_PAGES`]) whose piece left over after the whole ones of `len` is at
/// most an eighth of the chunk (so that little of it sits unused: 768 KiB pieces come
/// five from 4 MiB, 256 KiB left, not two from 2 MiB with 512 KiB left); where none is,
/// the one with the least part left over.
pub fn chunk_len(len: usize) -> usize {
    debug_assert!(len > 0);
    let chunks = (1..=MAX_CHUNK_PAGES).map(|k| k * HUGE_FROM);
    chunks
        .clone()
        .find(|&c| c % len <= c / 8)
        .or_else(|| chunks.min_by(|&a, &b| ((a % len) * b).cmp(&((b % len) * a))))
        .unwrap_or(HUGE_FROM)
}

/// Maps a chunk of `len` bytes (a multiple of [`HUGE_FROM`]), aligned to a huge page,
/// advised to use huge pages and populated.
pub fn map_huge_chunk(len: usize) -> Option<*mut u8> {
    debug_assert!(len.is_multiple_of(HUGE_FROM));
    let p = map_aligned(len, HUGE_FROM)?;
    advise_huge(p, len);
    Some(p)
}

/// The pieces a chunk at `base` of `chunk` bytes is carved into for mappings of `len` bytes,
/// as (address, length): as many of `len` as fit, the first at `base`, then what is left
/// (if anything) as one piece. They are disjoint and cover the chunk exactly.
pub fn carve(base: usize, chunk: usize, len: usize) -> Vec<(usize, usize)> {
    debug_assert!(len > 0 && len <= chunk && len.is_multiple_of(PAGE));
    let whole = chunk / len;
    let mut out: Vec<(usize, usize)> = (0..whole).map(|i| (base + i * len, len)).collect();
    let rest = chunk - whole * len;
    if rest > 0 {
        out.push((base + whole * len, rest));
    }
    out
}

/// Touches one byte per page so that the pages are populated (how the engine makes fresh
/// memory ready to register, and what `pinwise calibrate` times as "map and touch").
///
/// # Safety
/// `p..p+len` is writable memory nobody else uses.
pub unsafe fn touch_pages(p: *mut u8, len: usize) {
    let mut off = 0;
    while off < len {
        // SAFETY: inside the caller's writable range.
        unsafe { p.add(off).write_volatile(0) };
        off += PAGE;
    }
}

/// Unmaps a mapping made by [`map_anonymous`].
///
/// # Safety
/// `ptr..ptr+len` is exactly one such mapping, not registered, and not used afterwards.
pub unsafe fn unmap(ptr: *mut u8, len: usize) {
    // SAFETY: the caller guarantees the range is our own mapping and unused from now on.
    let rc = unsafe { libc::munmap(ptr as *mut libc::c_void, len) };
    debug_assert_eq!(rc, 0, "munmap of our own mapping failed");
}

/// The books of the cache of freed, touched mappings. No system calls: the caller maps and
/// unmaps outside its lock.
#[derive(Debug)]
pub struct PageableCache {
    /// Cached mappings as (len, address).
    free: BTreeSet<(usize, usize)>,
    cached_bytes: usize,
    cap: usize,
}

impl PageableCache {
    /// A cache that keeps at most `cap` bytes of freed mappings.
    pub fn new(cap: usize) -> Self {
        PageableCache {
            free: BTreeSet::new(),
            cached_bytes: 0,
            cap,
        }
    }

    /// Bytes of mappings kept now.
    pub fn cached_bytes(&self) -> usize {
        self.cached_bytes
    }

    /// A cached mapping for a request of `len` graded bytes: the smallest of at least `len`
    /// bytes and at most 1/8 more. Returns (address, mapping length).
    pub fn take(&mut self, len: usize) -> Option<(usize, usize)> {
        let max = len + len / 8;
        let &(l, a) = self.free.range((len, 0)..).next()?;
        if l > max {
            return None;
        }
        self.free.remove(&(l, a));
        self.cached_bytes -= l;
        Some((a, l))
    }

    /// Whether [`PageableCache::take`] would find a mapping for `len` bytes.
    pub fn has_fit(&self, len: usize) -> bool {
        self.free
            .range((len, 0)..)
            .next()
            .is_some_and(|&(l, _)| l <= len + len / 8)
    }

    /// Keeps a freed mapping. Returns the mappings that must be unmapped to stay within the
    /// cap (possibly the one given, if it alone is larger than the cap).
    pub fn put(&mut self, addr: usize, len: usize) -> Vec<(usize, usize)> {
        if len > self.cap {
            return vec![(addr, len)];
        }
        // The largest mappings go first: they cost the most to keep.
        let evicted = self.shrink_to(self.cap - len);
        self.free.insert((len, addr));
        self.cached_bytes += len;
        evicted
    }

    /// Its cap, bytes.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Mappings cached now.
    pub fn len(&self) -> usize {
        self.free.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.free.is_empty()
    }

    /// Gives up mappings, largest first, until at most `bytes` are cached; returns those to
    /// unmap.
    pub fn shrink_to(&mut self, bytes: usize) -> Vec<(usize, usize)> {
        let mut evicted = Vec::new();
        while self.cached_bytes > bytes {
            let Some(&(l, a)) = self.free.iter().next_back() else {
                break;
            };
            self.free.remove(&(l, a));
            self.cached_bytes -= l;
            evicted.push((a, l));
        }
        evicted
    }

    /// Empties the cache, returning the mappings to unmap.
    pub fn drain(&mut self) -> Vec<(usize, usize)> {
        self.cached_bytes = 0;
        std::mem::take(&mut self.free)
            .into_iter()
            .map(|(l, a)| (a, l))
            .collect()
    }
}

/// The length of the mapping the pageable path makes for a request of `size` bytes.
pub fn mapping_len(size: usize) -> usize {
    graded_size(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_takes_close_fits_only() {
        let mut c = PageableCache::new(1 << 30);
        assert!(c.put(0x1000_0000, 1 << 20).is_empty());
        assert!(c.put(0x2000_0000, 4 << 20).is_empty());
        assert_eq!(c.take(3 << 20), None, "4 MiB is more than 1/8 above 3 MiB");
        assert_eq!(c.take(1 << 20), Some((0x1000_0000, 1 << 20)));
        assert!(c.has_fit(4 << 20));
        assert!(!c.has_fit(2 << 20));
        assert_eq!(c.take(4 << 20), Some((0x2000_0000, 4 << 20)));
        assert_eq!(c.cached_bytes(), 0);
    }

    #[test]
    fn cache_stays_within_its_cap() {
        let mut c = PageableCache::new(8 << 20);
        assert!(c.put(0x1000_0000, 4 << 20).is_empty());
        assert!(c.put(0x2000_0000, 2 << 20).is_empty());
        let ev = c.put(0x3000_0000, 4 << 20);
        assert_eq!(ev, vec![(0x1000_0000, 4 << 20)]);
        assert_eq!(c.cached_bytes(), 6 << 20);
        assert_eq!(c.put(0x4000_0000, 16 << 20), vec![(0x4000_0000, 16 << 20)]);
        assert_eq!(c.drain().len(), 2);
    }

    #[test]
    fn shrink_gives_up_the_largest_first() {
        let mut c = PageableCache::new(64 << 20);
        c.put(0x1000_0000, 1 << 20);
        c.put(0x2000_0000, 8 << 20);
        c.put(0x3000_0000, 2 << 20);
        assert_eq!(c.shrink_to(4 << 20), vec![(0x2000_0000, 8 << 20)]);
        assert_eq!(c.cached_bytes(), 3 << 20);
        assert_eq!(c.shrink_to(0).len(), 2);
        assert!(c.is_empty());
    }

    /// One step of the property test.
    #[derive(Debug, Clone)]
    enum Op {
        Put(usize),
        Take(usize),
        Shrink(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        let pages = 1usize..512;
        prop_oneof![
            pages.clone().prop_map(|p| Op::Put(p * PAGE)),
            pages.clone().prop_map(|p| Op::Take(p * PAGE)),
            (0usize..(1 << 21)).prop_map(Op::Shrink),
        ]
    }

    use proptest::prelude::*;

    proptest! {
        /// Whatever is put, taken and shrunk: the cached bytes never exceed the cap, every
        /// mapping given to the cache comes back exactly once (taken, evicted or drained),
        /// and a take returns a mapping that fits (at least the size, at most 1/8 more).
        #[test]
        fn bound_reuse_and_release(cap_pages in 0usize..1024, ops in proptest::collection::vec(op(), 1..200)) {
            let cap = cap_pages * PAGE;
            let mut c = PageableCache::new(cap);
            let mut next_addr = 0x1000_0000usize;
            let mut outstanding: std::collections::HashMap<usize, usize> = Default::default();
            let give_back = |out: &mut std::collections::HashMap<usize, usize>, (a, l): (usize, usize)| {
                prop_assert_eq!(out.remove(&a), Some(l), "a mapping came back twice or changed size");
                Ok(())
            };
            for op in ops {
                match op {
                    Op::Put(len) => {
                        let a = next_addr;
                        next_addr += 1 << 24;
                        outstanding.insert(a, len);
                        for m in c.put(a, len) { give_back(&mut outstanding, m)?; }
                        // Reuse: a mapping that fits the cap is kept.
                        if len <= cap { prop_assert!(c.has_fit(len)); }
                    }
                    Op::Take(len) => {
                        let fit = c.has_fit(len);
                        match c.take(len) {
                            Some((a, l)) => {
                                prop_assert!(fit);
                                prop_assert!(l >= len && l <= len + len / 8);
                                give_back(&mut outstanding, (a, l))?;
                            }
                            None => prop_assert!(!fit),
                        }
                    }
                    Op::Shrink(bound) => {
                        for m in c.shrink_to(bound) { give_back(&mut outstanding, m)?; }
                        prop_assert!(c.cached_bytes() <= bound);
                    }
                }
                prop_assert!(c.cached_bytes() <= cap, "{} cached over a cap of {}", c.cached_bytes(), cap);
                prop_assert_eq!(c.cached_bytes(), outstanding.values().sum::<usize>());
            }
            for m in c.drain() { give_back(&mut outstanding, m)?; }
            prop_assert!(outstanding.is_empty());
            prop_assert_eq!(c.cached_bytes(), 0);
        }
    }

    #[test]
    fn carve_splits_a_chunk_into_pieces_and_what_is_left() {
        let base = 0x4000_0000;
        assert_eq!(
            carve(base, HUGE_FROM, 1 << 20),
            vec![(base, 1 << 20), (base + (1 << 20), 1 << 20)]
        );
        // 768 KiB: two pieces and 512 KiB left.
        assert_eq!(
            carve(base, HUGE_FROM, 768 << 10),
            vec![
                (base, 768 << 10),
                (base + (768 << 10), 768 << 10),
                (base + (1536 << 10), 512 << 10)
            ]
        );
        assert_eq!(carve(base, HUGE_FROM, HUGE_FROM), vec![(base, HUGE_FROM)]);
    }

    #[test]
    fn thp_settings() {
        assert!(thp_setting_allows("always [madvise] never\n"));
        assert!(thp_setting_allows("[always] madvise never\n"));
        assert!(!thp_setting_allows("always madvise [never]\n"));
        assert!(!thp_setting_allows(""));
    }

    #[test]
    fn only_mid_sized_mappings_are_carved_and_only_into_a_cache_that_holds_a_chunk() {
        let thp = thp_available();
        assert_eq!(carves(1 << 20, 64 << 20), thp);
        assert_eq!(carves(CARVE_FROM, HUGE_FROM), thp);
        assert!(!carves(CARVE_FROM - PAGE, 64 << 20));
        assert!(!carves(HUGE_FROM, 64 << 20));
        assert!(!carves(1 << 20, HUGE_FROM - PAGE));
    }

    #[test]
    fn chunks_leave_at_most_an_eighth_over_for_every_carved_size() {
        assert_eq!(chunk_len(1 << 20), HUGE_FROM);
        assert_eq!(chunk_len(768 << 10), 2 * HUGE_FROM);
        assert_eq!(chunk_len(1536 << 10), 3 * HUGE_FROM);
        // Every length: a chunk of one to four huge pages; the fewest that leave at most an
        // eighth over, or where none does, none leaves a smaller part of itself over.
        let mut fallbacks = 0;
        for len in (CARVE_FROM..HUGE_FROM).step_by(PAGE) {
            let c = chunk_len(len);
            assert!(c.is_multiple_of(HUGE_FROM) && c <= MAX_CHUNK_PAGES * HUGE_FROM);
            let over = |c: usize| (c % len) as f64 / c as f64;
            let fits: Vec<usize> = (1..=MAX_CHUNK_PAGES)
                .map(|k| k * HUGE_FROM)
                .filter(|&c| over(c) <= 0.125)
                .collect();
            match fits.first() {
                Some(&first) => assert_eq!(c, first, "{len}"),
                None => {
                    fallbacks += 1;
                    for k in 1..=MAX_CHUNK_PAGES {
                        assert!(over(c) <= over(k * HUGE_FROM), "{len}: {c}");
                    }
                }
            }
        }
        // Graded sizes between 1 and 2 MiB are sixteenths of the octave: all but 1664 and
        // 1728 KiB (one piece and 3/16, 5/32 of a 2 MiB chunk over) fit within an eighth.
        for len in (CARVE_FROM..HUGE_FROM).step_by(PAGE).map(mapping_len) {
            if (1 << 20..HUGE_FROM).contains(&len) {
                let c = chunk_len(len);
                if len == 1664 << 10 || len == 1728 << 10 {
                    assert_eq!(c, HUGE_FROM, "graded {len}");
                } else {
                    assert!(c % len <= c / 8, "graded {len}: {c}");
                }
            }
        }
        assert!(
            fallbacks > 0,
            "some page multiples fit no chunk within an eighth"
        );
    }

    proptest! {
        /// Any page-multiple length from a page to the chunk: the pieces are disjoint, in
        /// order, cover the chunk exactly, start with one of `len` at the base, and all but
        /// the last are `len` long (the last at most `len`).
        #[test]
        fn carve_covers_the_chunk(pages in 1usize..=(HUGE_FROM / PAGE)) {
            let len = pages * PAGE;
            let base = 0x8000_0000usize;
            let pieces = carve(base, HUGE_FROM, len);
            prop_assert_eq!(pieces[0], (base, len));
            let mut at = base;
            for (i, &(a, l)) in pieces.iter().enumerate() {
                prop_assert_eq!(a, at);
                prop_assert!(l > 0 && l.is_multiple_of(PAGE));
                if i + 1 < pieces.len() { prop_assert_eq!(l, len); } else { prop_assert!(l <= len); }
                at += l;
            }
            prop_assert_eq!(at, base + HUGE_FROM);
        }
    }

    #[test]
    fn huge_mappings_are_aligned() {
        for len in [HUGE_FROM, 3 * HUGE_FROM] {
            let p = map_anonymous(len, true).expect("mmap");
            if thp_available() {
                assert_eq!(p as usize % HUGE_FROM, 0);
            }
            // SAFETY: a fresh read-write mapping of `len` bytes, ours.
            unsafe {
                std::ptr::write_bytes(p, 1, len);
                unmap(p, len);
            }
        }
    }

    #[test]
    fn pieces_of_a_chunk_are_mappings_of_their_own() {
        let base = map_huge_chunk(HUGE_FROM).expect("mmap") as usize;
        assert_eq!(base % HUGE_FROM, 0);
        let len = 512 << 10;
        let pieces = carve(base, HUGE_FROM, len);
        assert_eq!(pieces.len(), 4);
        // SAFETY: the pieces cover the chunk just mapped; each is written, the second
        // unmapped alone, the others written again and unmapped.
        unsafe {
            for &(a, l) in &pieces {
                std::ptr::write_bytes(a as *mut u8, 0x5a, l);
            }
            unmap(pieces[1].0 as *mut u8, pieces[1].1);
            for &(a, l) in [pieces[0], pieces[2], pieces[3]].iter() {
                assert_eq!(*(a as *const u8).add(l - 1), 0x5a);
                std::ptr::write_bytes(a as *mut u8, 0xa5, l);
                unmap(a as *mut u8, l);
            }
        }
    }

    #[test]
    fn mappings_are_usable_and_unmappable() {
        let len = HUGE_FROM;
        let p = map_anonymous(len, true).expect("mmap");
        assert_eq!(p as usize % PAGE, 0);
        // SAFETY: a fresh read-write mapping of `len` bytes.
        unsafe {
            std::ptr::write_bytes(p, 0xab, len);
            assert_eq!(*p.add(len - 1), 0xab);
            unmap(p, len);
        }
    }
}
