//! Memory pressure, checked cheaply and rarely: whether the machine is short of memory, so
//! that the cache of warm pageable mappings ([`crate::pageable::PageableCache`]) gives its
//! pages back to the OS instead of holding them.
//!
//! "Short" means `MemAvailable` in `/proc/meminfo` is below a threshold. Reading the file
//! costs a few microseconds, so [`MemoryGauge::is_low`] reads it at most once per
//! interval (one second by default) and answers from the last reading in between: an
//! atomic load on the fast path.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// How often `/proc/meminfo` is read at most, ns.
pub const DEFAULT_CHECK_INTERVAL_NS: u64 = 1_000_000_000;

/// The default threshold: memory is low when less than this fraction of `MemTotal` is
/// available.
pub const DEFAULT_LOW_FRACTION: f64 = 1.0 / 16.0;

/// The threshold when `MemTotal` cannot be read: 1 GiB.
pub const FALLBACK_LOW_BYTES: u64 = 1 << 30;

/// Where readings of available memory come from (`/proc/meminfo`, or a test's numbers).
pub type AvailableFn = fn() -> Option<u64>;

/// Answers "is memory low?", reading the machine's available memory at most once per
/// interval.
#[derive(Debug)]
pub struct MemoryGauge {
    low_bytes: u64,
    interval_ns: u64,
    next_check_ns: AtomicU64,
    low: AtomicBool,
    read: AvailableFn,
}

impl MemoryGauge {
    /// A gauge that calls memory low below `low_bytes` available, reading `read` at most
    /// once per `interval_ns`.
    pub fn new(low_bytes: u64, interval_ns: u64, read: AvailableFn) -> Self {
        MemoryGauge {
            low_bytes,
            interval_ns,
            next_check_ns: AtomicU64::new(0),
            low: AtomicBool::new(false),
            read,
        }
    }

    /// A gauge on `/proc/meminfo`: low below `low_bytes` available (`None`: the default,
    /// [`DEFAULT_LOW_FRACTION`] of `MemTotal`), read at most once a second.
    pub fn system(low_bytes: Option<u64>) -> Self {
        let low = low_bytes.unwrap_or_else(default_low_bytes);
        MemoryGauge::new(low, DEFAULT_CHECK_INTERVAL_NS, read_mem_available)
    }

    /// The threshold, bytes.
    pub fn low_bytes(&self) -> u64 {
        self.low_bytes
    }

    /// Whether memory is low at time `now_ns` (any monotonic clock): a fresh reading if the
    /// last one is older than the interval, else the last answer. A reading that fails
    /// counts as "not low" (the cache stays bounded by its cap anyway).
    pub fn is_low(&self, now_ns: u64) -> bool {
        let next = self.next_check_ns.load(Ordering::Relaxed);
        if now_ns < next {
            return self.low.load(Ordering::Relaxed);
        }
        // One thread reads; the others keep the last answer meanwhile.
        if self
            .next_check_ns
            .compare_exchange(
                next,
                now_ns.saturating_add(self.interval_ns),
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_err()
        {
            return self.low.load(Ordering::Relaxed);
        }
        let low = (self.read)().is_some_and(|avail| avail < self.low_bytes);
        self.low.store(low, Ordering::Relaxed);
        low
    }
}

/// The default threshold on this machine: [`DEFAULT_LOW_FRACTION`] of `MemTotal`.
pub fn default_low_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .as_deref()
        .and_then(crate::budget::mem_total_bytes)
        .map_or(FALLBACK_LOW_BYTES, |t| {
            (t as f64 * DEFAULT_LOW_FRACTION) as u64
        })
}

/// `MemAvailable` of this machine, bytes.
pub fn read_mem_available() -> Option<u64> {
    mem_available_bytes(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

/// `MemAvailable` in bytes from the text of `/proc/meminfo`.
pub fn mem_available_bytes(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let mut parts = line["MemAvailable:".len()..].split_whitespace();
    let value: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") | None => value.checked_mul(1024),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn meminfo_available() {
        let text = "MemTotal:       131072000 kB\nMemFree:  1000 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(mem_available_bytes(text), Some(2048 * 1024));
        assert_eq!(mem_available_bytes("MemTotal: 5 kB\n"), None);
        assert_eq!(mem_available_bytes("MemAvailable: x kB\n"), None);
        assert_eq!(mem_available_bytes("MemAvailable: 5 MB\n"), None);
        assert!(
            read_mem_available().is_some(),
            "this Linux has MemAvailable"
        );
    }

    static READS: AtomicUsize = AtomicUsize::new(0);
    static AVAILABLE: AtomicU64 = AtomicU64::new(0);

    fn fake() -> Option<u64> {
        READS.fetch_add(1, Ordering::SeqCst);
        Some(AVAILABLE.load(Ordering::SeqCst))
    }

    #[test]
    fn reads_at_most_once_per_interval() {
        let g = MemoryGauge::new(100, 1_000, fake);
        AVAILABLE.store(50, Ordering::SeqCst);
        let before = READS.load(Ordering::SeqCst);
        assert!(g.is_low(10));
        AVAILABLE.store(500, Ordering::SeqCst);
        // Within the interval: the last answer, no new reading.
        assert!(g.is_low(500));
        assert!(g.is_low(1_009));
        assert_eq!(READS.load(Ordering::SeqCst), before + 1);
        // After it: read again.
        assert!(!g.is_low(1_010));
        assert_eq!(READS.load(Ordering::SeqCst), before + 2);
    }

    #[test]
    fn failed_readings_are_not_low() {
        let g = MemoryGauge::new(u64::MAX, 1, || None);
        assert!(!g.is_low(5));
        let g = MemoryGauge::new(u64::MAX, 1, || Some(u64::MAX - 1));
        assert!(g.is_low(5));
    }
}
