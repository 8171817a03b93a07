//! The strategies `bench alloc` compares. Each serves the workload's allocations its own
//! way; the engine-based ones (smart, adaptive) also hear about every copy.

use crate::BenchError;
use std::collections::HashMap;
use std::sync::Arc;

use pinwise_core::{Direction, Site};

use pinwise_alloc::backend::PinBackend;
use pinwise_alloc::engine::{AllocFlags, Engine};

/// Which strategy a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StrategyKind {
    /// `malloc`/`free`: what a program does without pinning.
    Pageable,
    /// `cuMemHostAlloc`/`cuMemFreeHost` for every allocation: pin everything.
    PinEach,
    /// Pin everything through a caching pool, as PyTorch's `CachingHostAllocator` does:
    /// sizes rounded up to a power of two, freed blocks kept and reused, nothing unpinned.
    CachingPool,
    /// pinwise's profile run (adaptive behaviour while recording a profile).
    SmartProfile,
    /// pinwise's use run, following the profile of a profile run of the same workload.
    Smart,
    /// pinwise without a profile, learning within the run.
    Adaptive,
    /// pinwise's use run given a profile of *another* run (a quarter of the size): must
    /// degrade to adaptive behaviour.
    SmartMisaligned,
    /// pinwise's use run with its budget set to 1.1x the hot working set.
    SmartTightBudget,
}

impl StrategyKind {
    /// Every strategy, in report order.
    pub const ALL: [StrategyKind; 8] = [
        StrategyKind::Pageable,
        StrategyKind::PinEach,
        StrategyKind::CachingPool,
        StrategyKind::SmartProfile,
        StrategyKind::Smart,
        StrategyKind::Adaptive,
        StrategyKind::SmartMisaligned,
        StrategyKind::SmartTightBudget,
    ];

    /// The name used in tables and CSV.
    pub const fn name(self) -> &'static str {
        match self {
            StrategyKind::Pageable => "pageable",
            StrategyKind::PinEach => "pin-each",
            StrategyKind::CachingPool => "caching-pool",
            StrategyKind::SmartProfile => "smart-profile-run",
            StrategyKind::Smart => "smart",
            StrategyKind::Adaptive => "adaptive",
            StrategyKind::SmartMisaligned => "smart-misaligned",
            StrategyKind::SmartTightBudget => "smart-budget-1.1x",
        }
    }

    /// Parses a [`StrategyKind::name`].
    pub fn from_name(s: &str) -> Option<StrategyKind> {
        StrategyKind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Whether it is one of the baselines pinwise is measured against.
    pub const fn is_baseline(self) -> bool {
        matches!(
            self,
            StrategyKind::Pageable | StrategyKind::PinEach | StrategyKind::CachingPool
        )
    }
}

/// One strategy's allocator for one run.
pub(crate) trait Strategy {
    /// Allocates `size` bytes for workload role `role` (its call site).
    fn alloc(&mut self, size: usize, role: usize) -> Result<*mut u8, BenchError>;
    /// Hears about a copy about to be made from/to `ptr`.
    fn note(&mut self, _ptr: *mut u8, _bytes: usize, _dir: Direction) {}
    /// Frees an allocation.
    fn free(&mut self, ptr: *mut u8) -> Result<(), BenchError>;
    /// The most bytes page-locked at once so far.
    fn peak_pinned(&self) -> u64;
    /// Allocations served page-locked so far.
    fn pinned_allocations(&self) -> u64;
    /// Releases everything (not timed as part of the run).
    fn teardown(&mut self) -> Result<(), BenchError>;
}

/// `malloc`/`free`.
pub(crate) struct Pageable;

impl Strategy for Pageable {
    fn alloc(&mut self, size: usize, _role: usize) -> Result<*mut u8, BenchError> {
        // SAFETY: malloc has no preconditions; NULL is handled.
        let p = unsafe { libc::malloc(size) } as *mut u8;
        if p.is_null() {
            Err(BenchError::OutOfMemory(format!("malloc({size}) failed")))
        } else {
            Ok(p)
        }
    }
    fn free(&mut self, ptr: *mut u8) -> Result<(), BenchError> {
        // SAFETY: `ptr` came from malloc above and is freed once.
        unsafe { libc::free(ptr as *mut libc::c_void) };
        Ok(())
    }
    fn peak_pinned(&self) -> u64 {
        0
    }
    fn pinned_allocations(&self) -> u64 {
        0
    }
    fn teardown(&mut self) -> Result<(), BenchError> {
        Ok(())
    }
}

/// `cuMemHostAlloc` per allocation.
pub(crate) struct PinEach {
    pub backend: Arc<dyn PinBackend>,
    pub live: HashMap<usize, usize>,
    pub live_bytes: u64,
    pub peak: u64,
    pub allocations: u64,
}

impl Strategy for PinEach {
    fn alloc(&mut self, size: usize, _role: usize) -> Result<*mut u8, BenchError> {
        let p = self.backend.alloc_pinned(size, 0)?;
        self.live.insert(p as usize, size);
        self.live_bytes += size as u64;
        self.peak = self.peak.max(self.live_bytes);
        self.allocations += 1;
        Ok(p)
    }
    fn free(&mut self, ptr: *mut u8) -> Result<(), BenchError> {
        let size = self
            .live
            .remove(&(ptr as usize))
            .ok_or_else(|| BenchError::invalid("freeing an unknown pointer"))?;
        self.live_bytes -= size as u64;
        // SAFETY: allocated by alloc_pinned above, freed once.
        unsafe { self.backend.free_pinned(ptr) }.map_err(BenchError::from)
    }
    fn peak_pinned(&self) -> u64 {
        self.peak
    }
    fn pinned_allocations(&self) -> u64 {
        self.allocations
    }
    fn teardown(&mut self) -> Result<(), BenchError> {
        let left: Vec<usize> = self.live.keys().copied().collect();
        for p in left {
            self.free(p as *mut u8)?;
        }
        Ok(())
    }
}

/// A caching pinned pool like PyTorch's `CachingHostAllocator`: requests rounded up to a
/// power of two, freed blocks cached by size and reused, nothing unpinned until teardown.
/// (PyTorch records events only for non-blocking copies; this workload's copies are
/// synchronous, so none are needed.)
pub(crate) struct CachingPool {
    pub backend: Arc<dyn PinBackend>,
    pub free: HashMap<usize, Vec<usize>>,
    pub live: HashMap<usize, usize>,
    pub cached_bytes: u64,
    pub allocations: u64,
}

impl Strategy for CachingPool {
    fn alloc(&mut self, size: usize, _role: usize) -> Result<*mut u8, BenchError> {
        let rounded = size.next_power_of_two();
        self.allocations += 1;
        let p = match self.free.get_mut(&rounded).and_then(Vec::pop) {
            Some(p) => p,
            None => {
                let p = self.backend.alloc_pinned(rounded, 0)? as usize;
                self.cached_bytes += rounded as u64;
                p
            }
        };
        self.live.insert(p, rounded);
        Ok(p as *mut u8)
    }
    fn free(&mut self, ptr: *mut u8) -> Result<(), BenchError> {
        let rounded = self
            .live
            .remove(&(ptr as usize))
            .ok_or_else(|| BenchError::invalid("freeing an unknown pointer"))?;
        self.free.entry(rounded).or_default().push(ptr as usize);
        Ok(())
    }
    fn peak_pinned(&self) -> u64 {
        self.cached_bytes
    }
    fn pinned_allocations(&self) -> u64 {
        self.allocations
    }
    fn teardown(&mut self) -> Result<(), BenchError> {
        let blocks: Vec<usize> = self
            .free
            .drain()
            .flat_map(|(_, v)| v)
            .chain(self.live.drain().map(|(p, _)| p))
            .collect();
        for p in blocks {
            // SAFETY: every cached block came from alloc_pinned and is freed once here.
            unsafe { self.backend.free_pinned(p as *mut u8) }?;
        }
        Ok(())
    }
}

/// pinwise's engine, in whichever mode it was built.
pub(crate) struct EngineStrategy {
    pub engine: Option<Engine>,
    pub sites: Vec<Site>,
}

impl EngineStrategy {
    fn engine(&self) -> &Engine {
        self.engine.as_ref().expect("engine lives until teardown")
    }
}

impl Strategy for EngineStrategy {
    fn alloc(&mut self, size: usize, role: usize) -> Result<*mut u8, BenchError> {
        let site = self.sites[role % self.sites.len()];
        self.engine()
            .alloc(size, site, AllocFlags::NONE)
            .map(|a| a.ptr)
            .map_err(BenchError::from)
    }
    fn note(&mut self, ptr: *mut u8, bytes: usize, dir: Direction) {
        let _ = self.engine().note_transfer(ptr, bytes, dir, None);
    }
    fn free(&mut self, ptr: *mut u8) -> Result<(), BenchError> {
        // SAFETY: `ptr` came from this engine and the workload does not use it afterwards.
        unsafe { self.engine().free(ptr) }.map_err(BenchError::from)
    }
    fn peak_pinned(&self) -> u64 {
        self.engine().stats().pinned_bytes_peak
    }
    fn pinned_allocations(&self) -> u64 {
        self.engine().stats().pinned_allocations
    }
    fn teardown(&mut self) -> Result<(), BenchError> {
        if let Some(e) = self.engine.take() {
            e.shutdown()?;
        }
        Ok(())
    }
}
