//! The node's pinned pool in a history (`pinwise run --pool`): the pinned RAM its buffers
//! served, the copies the service did, the fallbacks, and the GPU page-table memory
//! estimated at core's measured figure ([`pinwise_core::pagetable`]).

use pinwise_core::pool_use::PoolUseStats;
use pinwise_core::MemHistory;
use serde::Serialize;

/// What the pool served in the run the history records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PoolSection {
    /// The preload's figures (added up over the history's processes).
    pub stats: PoolUseStats,
    /// Pinned RAM served through the pool at its peak (bytes).
    pub pinned_bytes_via_pool_peak: u64,
    /// Estimated GPU page-table memory the program's processes did not make for the pool's
    /// buffers (the service made it once instead).
    pub gpu_pagetable_bytes_moved_estimate: u64,
    /// Estimated GPU page-table memory saved on the node (buffers shared by several
    /// clients).
    pub gpu_pagetable_bytes_saved_estimate: u64,
    /// For people (the run summary's wording: [`PoolUseStats::prose`]).
    pub note: String,
}

/// The pool's section, if the run used `--pool`.
pub fn analyse(history: &MemHistory) -> Option<PoolSection> {
    let stats = PoolUseStats::from_source_stats(history.source_stats())?;
    let moved = stats.pagetable_bytes_moved();
    let saved = stats.pagetable_bytes_saved();
    let note = stats.prose();
    Some(PoolSection {
        pinned_bytes_via_pool_peak: stats.bytes_peak,
        gpu_pagetable_bytes_moved_estimate: moved,
        gpu_pagetable_bytes_saved_estimate: saved,
        stats,
        note,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_without_the_pool_has_no_section_and_one_with_it_says_what_it_served() {
        let mut h = MemHistory::default();
        assert_eq!(analyse(&h), None);
        let s = PoolUseStats {
            configured: true,
            buffers: 2,
            bytes: 2 << 30,
            bytes_peak: 2 << 30,
            copies: 8,
            copy_bytes: 1 << 30,
            alloc_fallbacks: 1,
            ..PoolUseStats::default()
        };
        h.set_source_stats(s.source_stats());
        let p = analyse(&h).expect("a pool section");
        assert_eq!(p.pinned_bytes_via_pool_peak, 2 << 30);
        assert_eq!(p.gpu_pagetable_bytes_moved_estimate, 4 << 20);
        assert_eq!(p.gpu_pagetable_bytes_saved_estimate, 0);
        assert!(
            p.note.starts_with("2 requests served from the node's pool"),
            "{}",
            p.note
        );
        assert!(
            p.note.contains("fallbacks: 1 requests pinned in-process"),
            "{}",
            p.note
        );
    }
}
