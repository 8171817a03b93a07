//! What `pinwise run --pool` did in one process: the program's pinned requests served from
//! the node's pinned pool (`pinwise pool serve`, crate pinwise-pool), the copies the service
//! did for them, and every fallback to in-process pinning.
//!
//! The preload writes [`PoolUseStats`] into its statistics file and the same figures as
//! source statistics into the history ([`PoolUseStats::source_stats`]), where `pinwise
//! report` finds them ([`PoolUseStats::from_source_stats`]). Each allocation served from the
//! pool carries [`ALLOC_FLAG_POOL`] in its recorded flags.
//!
//! GPU page tables: the pool's buffers are pinned (and mapped on the GPU) by the service,
//! once, not by the program's process, so this process's GPU page-table entries for them
//! ([`crate::pagetable`]: 8 bytes per 4 KiB page) are not made here
//! ([`PoolUseStats::pagetable_bytes_moved`]). They are *saved* on the node only where
//! several processes hold the same buffer (the service's `deduplicated_bytes`); a private
//! buffer moves its entries to the service, it does not remove them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Set in an `Alloc` event's flags (beside CUDA's `CU_MEMHOSTALLOC_*` bits, which use the
/// low bits) when the allocation was served from the node's pinned pool. Never passed to
/// CUDA.
pub const ALLOC_FLAG_POOL: u32 = 1 << 30;

/// The prefix of the pool's source statistics in a history.
pub const SOURCE_PREFIX: &str = "pool.";

/// Why a pool threshold (`--pool-min`, `PINWISE_POOL_MIN`) was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolMinError {
    /// Not a size.
    #[error("the pool threshold: {0}")]
    Size(#[from] crate::units::UnitError),
    /// Zero bytes.
    #[error("the pool threshold `{0}` is 0 bytes: give at least 1 (8M is the default)")]
    Zero(String),
}

/// The smallest pinned request `pinwise run --pool` serves from the pool, from `--pool-min`
/// or `PINWISE_POOL_MIN` (one grammar for both): a size in [`crate::units::parse_size`]'s
/// grammar (`8MiB`, `8M`, `8388608`), at least 1 byte. A percentage is refused (a
/// threshold is not a share of RAM).
pub fn parse_min_bytes(text: &str) -> Result<u64, PoolMinError> {
    match crate::units::parse_size(text)? {
        0 => Err(PoolMinError::Zero(text.to_string())),
        n => Ok(n),
    }
}

/// What one process got from the pool (all zero without `--pool`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PoolUseStats {
    /// Whether `--pool` was given (a socket configured).
    pub configured: bool,
    /// Whether the process connected to the service.
    pub connected: bool,
    /// Why it did not, or why the connection was given up (first reason).
    pub unavailable_reason: Option<String>,
    /// Pinned requests served from pool buffers.
    pub buffers: u64,
    /// Their bytes (as the pool rounded them).
    pub bytes: u64,
    /// The most bytes held in pool buffers at once.
    pub bytes_peak: u64,
    /// Pinned requests the pool would have taken but that were served in-process: the
    /// service absent, refusing (budget, capacity) or gone.
    pub alloc_fallbacks: u64,
    /// Copies the service did (host<->device through CUDA IPC).
    pub copies: u64,
    /// Their bytes.
    pub copy_bytes: u64,
    /// Of those, asynchronous copies made synchronous (the stream was synchronized first
    /// and the copy was done when the call returned).
    pub async_made_sync: u64,
    /// Pool buffers pinwise registered in this process instead (fallback: a copy the
    /// service could not do, a pointer query, a stream being captured, a lost service).
    pub buffers_registered_here: u64,
    /// Pool buffers whose registration here failed too: their copies ran as pageable
    /// copies (correct, slower).
    pub buffers_left_pageable: u64,
    /// Copies on pool buffers done by this process's CUDA (after a fallback).
    pub copies_here: u64,
    /// Device allocations whose CUDA IPC handle could not be had (`cuIpcGetMemHandle`
    /// fails for VMM and stream-ordered memory).
    pub ipc_failures: u64,
    /// Requests the service refused (budget, capacity, a CUDA failure in the service).
    pub refusals: u64,
    /// Copies the service did not start by their deadline (it never will: made here
    /// instead; the connection was given up).
    pub copies_not_started: u64,
    /// Copies the service started and did not finish within the limit (made here
    /// instead; the connection was given up).
    pub copies_stuck: u64,
    /// Whether the connection broke while the program ran (the service exited or hung).
    pub connection_lost: bool,
    /// The most clients the service said it had (asked at connection and when the
    /// statistics were written).
    pub service_clients_max: u64,
    /// The service's deduplicated bytes (named buffers held by more than one client), when
    /// last asked.
    pub service_deduplicated_bytes: u64,
}

/// One counter kept in a history as the source statistic `pool.<name>`.
struct Field {
    name: &'static str,
    get: fn(&PoolUseStats) -> u64,
    set: fn(&mut PoolUseStats, u64),
}

/// A [`Field`] for the counter `PoolUseStats::$f`, named after it.
macro_rules! field {
    ($f:ident) => {
        Field {
            name: stringify!($f),
            get: |s| s.$f,
            set: |s, v| s.$f = v,
        }
    };
}

/// The counters a history keeps (the first, `buffers`, marks a run with `--pool`).
const FIELDS: [Field; 14] = [
    field!(buffers),
    field!(bytes),
    field!(bytes_peak),
    field!(alloc_fallbacks),
    field!(copies),
    field!(copy_bytes),
    field!(async_made_sync),
    field!(buffers_registered_here),
    field!(copies_here),
    field!(ipc_failures),
    field!(copies_not_started),
    field!(copies_stuck),
    field!(service_clients_max),
    field!(service_deduplicated_bytes),
];

impl PoolUseStats {
    /// The counters as `(name, value)` source statistics for a history.
    pub fn source_stats(&self) -> Vec<(String, u64)> {
        FIELDS
            .iter()
            .map(|f| (format!("{SOURCE_PREFIX}{}", f.name), (f.get)(self)))
            .collect()
    }

    /// The counters a history's source statistics hold (`None`: no pool in that run).
    /// Histories merged from several processes add up (peaks too: an upper bound).
    pub fn from_source_stats(stats: &BTreeMap<String, u64>) -> Option<PoolUseStats> {
        let get = |n: &str| stats.get(&format!("{SOURCE_PREFIX}{n}")).copied();
        get(FIELDS[0].name)?;
        let mut s = PoolUseStats {
            configured: true,
            ..PoolUseStats::default()
        };
        for f in &FIELDS {
            (f.set)(&mut s, get(f.name).unwrap_or(0));
        }
        s.connected = s.buffers > 0 || s.service_clients_max > 0;
        Some(s)
    }

    /// Several processes' figures added up (`None`: none used `--pool`). Peaks are added
    /// (an upper bound of the run's peak); the service's figures are the largest seen.
    pub fn total<'a>(all: impl IntoIterator<Item = &'a PoolUseStats>) -> Option<PoolUseStats> {
        let mut t: Option<PoolUseStats> = None;
        for p in all.into_iter().filter(|p| p.configured) {
            let t = t.get_or_insert_with(|| PoolUseStats {
                configured: true,
                ..PoolUseStats::default()
            });
            t.connected |= p.connected;
            t.connection_lost |= p.connection_lost;
            if t.unavailable_reason.is_none() {
                t.unavailable_reason.clone_from(&p.unavailable_reason);
            }
            t.buffers += p.buffers;
            t.bytes += p.bytes;
            t.bytes_peak += p.bytes_peak;
            t.alloc_fallbacks += p.alloc_fallbacks;
            t.copies += p.copies;
            t.copy_bytes += p.copy_bytes;
            t.async_made_sync += p.async_made_sync;
            t.buffers_registered_here += p.buffers_registered_here;
            t.buffers_left_pageable += p.buffers_left_pageable;
            t.copies_here += p.copies_here;
            t.ipc_failures += p.ipc_failures;
            t.refusals += p.refusals;
            t.copies_not_started += p.copies_not_started;
            t.copies_stuck += p.copies_stuck;
            t.service_clients_max = t.service_clients_max.max(p.service_clients_max);
            t.service_deduplicated_bytes = t
                .service_deduplicated_bytes
                .max(p.service_deduplicated_bytes);
        }
        t
    }

    /// One line for people, for the run's summary: `pinned pool: ` and [`Self::prose`].
    pub fn summary_line(&self) -> String {
        format!("pinned pool: {}", self.prose())
    }

    /// What the pool served, its page-table estimate and the fallbacks, for people: the
    /// one wording of the run's summary and of `pinwise report`.
    pub fn prose(&self) -> String {
        use crate::units::format_size;
        let mut s = format!(
            "{} requests served from the node's pool ({}, peak {}; GPU page tables for them \
             est. {} kept once by the service instead of here, at 8 bytes per 4 KiB page, {} \
             saved node-wide by shared buffers; service clients up to {}); {} copies done by \
             the service ({}; {} asynchronous ones made synchronous); fallbacks: {} requests \
             pinned in-process, {} pool buffers registered here ({} copies), {} left \
             pageable, {} device allocations without an IPC handle, {} refusals, {} copies \
             the service did not start in time, {} it started and did not finish in time",
            self.buffers,
            format_size(self.bytes),
            format_size(self.bytes_peak),
            format_size(self.pagetable_bytes_moved()),
            format_size(self.pagetable_bytes_saved()),
            self.service_clients_max,
            self.copies,
            format_size(self.copy_bytes),
            self.async_made_sync,
            self.alloc_fallbacks,
            self.buffers_registered_here,
            self.copies_here,
            self.buffers_left_pageable,
            self.ipc_failures,
            self.refusals,
            self.copies_not_started,
            self.copies_stuck,
        );
        if let Some(r) = &self.unavailable_reason {
            s.push_str(&format!(
                "; {} ({r})",
                if self.connection_lost {
                    "the pool was given up during the run"
                } else {
                    "the pool was not used"
                }
            ));
        }
        s
    }

    /// Fallbacks of every kind (requests and buffers served in-process instead).
    pub fn fallbacks(&self) -> u64 {
        self.alloc_fallbacks + self.buffers_registered_here + self.buffers_left_pageable
    }

    /// Estimated GPU page-table memory this process did not make for its pool buffers at
    /// their peak (kept once by the service instead: moved, not saved; see the module
    /// documentation).
    pub fn pagetable_bytes_moved(&self) -> u64 {
        crate::pagetable::estimated_gpu_bytes(self.bytes_peak, 1)
    }

    /// Estimated GPU page-table memory saved on the node: the service's deduplicated bytes
    /// at the measured figure.
    pub fn pagetable_bytes_saved(&self) -> u64 {
        crate::pagetable::estimated_gpu_bytes(self.service_deduplicated_bytes, 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_stats_round_trip_and_absence_is_none() {
        let s = PoolUseStats {
            configured: true,
            connected: true,
            buffers: 3,
            bytes: 24 << 20,
            bytes_peak: 16 << 20,
            alloc_fallbacks: 1,
            copies: 9,
            copy_bytes: 72 << 20,
            async_made_sync: 2,
            buffers_registered_here: 1,
            copies_here: 4,
            ipc_failures: 1,
            service_clients_max: 2,
            service_deduplicated_bytes: 0,
            ..PoolUseStats::default()
        };
        let map: BTreeMap<String, u64> = s.source_stats().into_iter().collect();
        assert_eq!(map["pool.bytes_peak"], 16 << 20);
        assert_eq!(PoolUseStats::from_source_stats(&map), Some(s));
        assert_eq!(PoolUseStats::from_source_stats(&BTreeMap::new()), None);
    }

    #[test]
    fn page_tables_are_moved_for_private_buffers_and_saved_only_when_shared() {
        let s = PoolUseStats {
            bytes_peak: 1 << 30,
            service_deduplicated_bytes: 0,
            ..PoolUseStats::default()
        };
        assert_eq!(s.pagetable_bytes_moved(), 2 << 20);
        assert_eq!(s.pagetable_bytes_saved(), 0);
        let shared = PoolUseStats {
            service_deduplicated_bytes: 3 << 30,
            ..s
        };
        assert_eq!(shared.pagetable_bytes_saved(), 6 << 20);
    }

    #[test]
    fn the_summary_line_reads_as_one_sentence() {
        let s = PoolUseStats {
            configured: true,
            buffers: 2,
            bytes_peak: 1 << 30,
            unavailable_reason: Some("gone".into()),
            connection_lost: true,
            ..PoolUseStats::default()
        };
        let line = s.summary_line();
        assert!(line.starts_with("pinned pool: 2 requests served"), "{line}");
        assert!(
            line.contains("est. 2.00 MiB kept once by the service"),
            "{line}"
        );
        assert!(
            line.ends_with("the pool was given up during the run (gone)"),
            "{line}"
        );
        assert!(!line.contains("  "), "{line}");
    }

    #[test]
    fn the_pool_threshold_reads_sizes_and_names_a_bad_value() {
        for (text, bytes) in [
            ("8MiB", 8 << 20),
            ("8M", 8 << 20),
            ("8388608", 8 << 20),
            ("1", 1),
        ] {
            assert_eq!(parse_min_bytes(text), Ok(bytes), "{text}");
        }
        for bad in ["8Q", "lots", "25%", "0", "-1"] {
            let e = parse_min_bytes(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("`{bad}`")), "{bad}: {e}");
        }
    }

    #[test]
    fn every_counter_a_history_keeps_round_trips_by_its_own_name() {
        // Each field's value distinct: a getter or setter naming another field shows.
        let mut s = PoolUseStats {
            configured: true,
            connected: true,
            ..PoolUseStats::default()
        };
        for (i, f) in FIELDS.iter().enumerate() {
            (f.set)(&mut s, 100 + i as u64);
        }
        let map: BTreeMap<String, u64> = s.source_stats().into_iter().collect();
        assert_eq!(map.len(), FIELDS.len());
        assert_eq!(map["pool.copies_here"], 108);
        assert_eq!(map["pool.copies_stuck"], 111);
        assert_eq!(PoolUseStats::from_source_stats(&map), Some(s));
    }

    #[test]
    fn the_pool_flag_is_clear_of_cuda_flags() {
        // CU_MEMHOSTALLOC_PORTABLE | DEVICEMAP | WRITECOMBINED.
        assert_eq!(ALLOC_FLAG_POOL & 0x7, 0);
    }
}
