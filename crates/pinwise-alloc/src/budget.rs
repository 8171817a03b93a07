//! The pinned budget: a hard cap on page-locked bytes, reserved atomically before pinning.
//!
//! Every path that page-locks memory first calls [`PinBudget::try_reserve`] for the bytes it
//! is about to lock, and calls [`PinBudget::release`] only after they are unlocked. So the
//! bytes actually locked never exceed the reserved bytes, and the reserved bytes never exceed
//! the cap: `try_reserve` is a compare-and-swap loop that only ever stores a value `<= cap`.
//! Lock-free and allocation-free, so it may be used from any hook.

use std::sync::atomic::{AtomicU64, Ordering};

/// Fraction of the machine's memory the default budget allows to be pinned.
pub const DEFAULT_BUDGET_FRACTION: f64 = 0.25;

/// Budget used when the machine's memory cannot be read (`/proc/meminfo` missing).
pub const FALLBACK_BUDGET_BYTES: u64 = 4 << 30;

/// A hard cap on pinned bytes, with the bytes reserved now and at most.
#[derive(Debug)]
pub struct PinBudget {
    cap: AtomicU64,
    reserved: AtomicU64,
    peak: AtomicU64,
    refusals: AtomicU64,
}

impl PinBudget {
    /// A budget of `cap` bytes, nothing reserved.
    pub fn new(cap: u64) -> Self {
        PinBudget {
            cap: AtomicU64::new(cap),
            reserved: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            refusals: AtomicU64::new(0),
        }
    }

    /// Reserves `bytes` if that keeps the reserved total within the cap. Returns whether it
    /// did; a refusal is counted.
    pub fn try_reserve(&self, bytes: u64) -> bool {
        let cap = self.cap.load(Ordering::Acquire);
        let mut cur = self.reserved.load(Ordering::Relaxed);
        loop {
            let Some(next) = cur.checked_add(bytes).filter(|&n| n <= cap) else {
                self.refusals.fetch_add(1, Ordering::Relaxed);
                return false;
            };
            match self.reserved.compare_exchange_weak(
                cur,
                next,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.peak.fetch_max(next, Ordering::Relaxed);
                    return true;
                }
                Err(seen) => cur = seen,
            }
        }
    }

    /// Gives back `bytes` reserved earlier (after they were unpinned).
    pub fn release(&self, bytes: u64) {
        let prev = self.reserved.fetch_sub(bytes, Ordering::AcqRel);
        debug_assert!(prev >= bytes, "released more pinned budget than reserved");
    }

    /// The cap in bytes.
    pub fn cap(&self) -> u64 {
        self.cap.load(Ordering::Acquire)
    }

    /// Changes the cap. Lowering it below what is reserved refuses new reservations until
    /// enough is released; nothing already pinned is taken away.
    pub fn set_cap(&self, cap: u64) {
        self.cap.store(cap, Ordering::Release);
    }

    /// Bytes reserved now.
    pub fn reserved(&self) -> u64 {
        self.reserved.load(Ordering::Acquire)
    }

    /// The most bytes that were reserved at once.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Acquire)
    }

    /// How many reservations were refused.
    pub fn refusals(&self) -> u64 {
        self.refusals.load(Ordering::Relaxed)
    }
}

/// The default cap: [`DEFAULT_BUDGET_FRACTION`] of `MemTotal` from `/proc/meminfo`, or
/// [`FALLBACK_BUDGET_BYTES`] when it cannot be read.
pub fn default_budget_bytes() -> u64 {
    match std::fs::read_to_string("/proc/meminfo")
        .ok()
        .as_deref()
        .and_then(mem_total_bytes)
    {
        Some(total) => (total as f64 * DEFAULT_BUDGET_FRACTION) as u64,
        None => FALLBACK_BUDGET_BYTES,
    }
}

/// `MemTotal` in bytes from the text of `/proc/meminfo`.
pub fn mem_total_bytes(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut parts = line["MemTotal:".len()..].split_whitespace();
    let value: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") | None => value.checked_mul(1024),
        Some(_) => None,
    }
}

/// Parses a size such as `8GiB`, `512M`, `4096`, `1.5G`, `64KiB` or `25%` (of `MemTotal`):
/// the one size grammar of pinwise (the `parse-size` crate, binary units: K, M, G, T, P with
/// or without `iB`/`B` are powers of 1024; fractions round to the nearest byte).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if let Some(pct) = t.strip_suffix('%') {
        let p: f64 = pct
            .trim()
            .parse()
            .map_err(|_| format!("`{text}` is not a size: `{pct}` is not a number"))?;
        if !(0.0..=100.0).contains(&p) {
            return Err(format!("`{text}`: a percentage must be between 0 and 100"));
        }
        let total = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .as_deref()
            .and_then(mem_total_bytes)
            .ok_or_else(|| format!("`{text}`: cannot read MemTotal from /proc/meminfo"))?;
        return Ok((total as f64 * p / 100.0) as u64);
    }
    // One grammar for every size pinwise takes (parse-size, binary units).
    const GRAMMAR: parse_size::Config = parse_size::Config::new().with_binary();
    match GRAMMAR.parse_size(t) {
        Ok(v) => Ok(v),
        Err(parse_size::Error::PosOverflow) => Err(format!(
            "`{text}` is out of range: a size is from 0 to {} bytes (16 EiB)",
            u64::MAX
        )),
        Err(_) if t.starts_with(|c: char| c.is_ascii_digit() || c == '.') => Err(format!(
            "`{text}`: unknown size unit (use B, K, M, G, T, P, with or without iB/B; all \
             powers of 1024; examples: 4096, 64KiB, 1.5M, 8G, 25%)"
        )),
        Err(_) => Err(format!(
            "`{text}` is not a size (examples: 4096, 64KiB, 1.5M, 8G, 25%)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_past_u64_are_refused_with_the_range() {
        for t in ["18446744073709551616", "16384PiB", "1e30", "99999999999T"] {
            let e = parse_size(t).unwrap_err();
            assert!(
                e.contains("out of range") || e.contains("unit") || e.contains("not a size"),
                "{t}: {e}"
            );
        }
        let e = parse_size("18446744073709551616").unwrap_err();
        assert!(e.contains("18446744073709551615 bytes"), "{e}");
        assert_eq!(parse_size("16T").unwrap(), 16 << 40);
    }

    #[test]
    fn reserve_within_cap_and_refuse_beyond() {
        let b = PinBudget::new(100);
        assert!(b.try_reserve(60));
        assert!(!b.try_reserve(41));
        assert!(b.try_reserve(40));
        assert_eq!(b.reserved(), 100);
        assert_eq!(b.refusals(), 1);
        b.release(60);
        assert_eq!(b.reserved(), 40);
        assert_eq!(b.peak(), 100);
        assert!(
            !b.try_reserve(u64::MAX),
            "overflow must be a refusal, not a wrap"
        );
    }

    #[test]
    fn lowering_the_cap_refuses_until_released() {
        let b = PinBudget::new(100);
        assert!(b.try_reserve(80));
        b.set_cap(50);
        assert!(!b.try_reserve(1));
        b.release(80);
        assert!(b.try_reserve(50));
    }

    #[test]
    fn meminfo_parsing() {
        let text = "MemFree: 10 kB\nMemTotal:       131072000 kB\n";
        assert_eq!(mem_total_bytes(text), Some(131_072_000 * 1024));
        assert_eq!(mem_total_bytes("nothing"), None);
        assert_eq!(mem_total_bytes("MemTotal: x kB"), None);
    }

    #[test]
    fn size_parsing() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("8G").unwrap(), 8 << 30);
        assert_eq!(parse_size("1.5k").unwrap(), 1536);
        assert!(parse_size("ten").unwrap_err().contains("not a size"));
        assert!(parse_size("5 parsecs")
            .unwrap_err()
            .contains("unknown size unit"));
        assert!(parse_size("150%").is_err());
        assert_eq!(parse_size("1.5M").unwrap(), 3 << 19);
        assert_eq!(parse_size("64KiB").unwrap(), 64 << 10);
        assert_eq!(parse_size("2g").unwrap(), 2 << 30);
        assert_eq!(parse_size("1 GB").unwrap(), 1 << 30);
        assert_eq!(parse_size("512").unwrap(), 512);
        assert!(parse_size("").unwrap_err().contains("not a size"));
        assert!(parse_size("-1M").unwrap_err().contains("not a size"));
    }
}
