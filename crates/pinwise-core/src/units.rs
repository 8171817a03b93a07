//! pinwise's one clock and its one grammar for sizes and durations.
//!
//! - The clock: [`monotonic_ns`], `CLOCK_MONOTONIC` in nanoseconds, the clock of the kernel's
//!   `bpf_ktime_get_ns()`. Every event timestamp pinwise writes (tracer, preload library,
//!   allocator) is on it, so that events from the kernel and from in-process hooks line up.
//! - Sizes: [`parse_size`] reads `4096`, `64KiB`, `1.5M`, `8G`, `1 GB` (the `parse-size`
//!   crate; binary units: K, M, G, T, P, with or without `iB`/`B`, are powers of 1024);
//!   [`parse_size_or_ram_percent`] also reads `25%` of the machine's memory. [`format_size`]
//!   writes three significant figures (`1.50 GiB`), [`format_size_exact`] a whole number of
//!   the largest unit that divides the size (`64 KiB`, `1536 B`); both read back with
//!   [`parse_size`].
//! - Durations: [`parse_duration`] reads `30s`, `2m`, `500ms`, `1h 30m` (the `humantime`
//!   crate) or a bare number of seconds; [`format_duration_ns`] writes `850 ns`, `12.3 us`,
//!   `4.56 ms`, `1.23 s`, `2.0 min`.

use std::time::Duration;

/// A size or a duration that does not parse: the message names the text and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    /// Not a size at all.
    #[error("`{0}` is not a size (examples: 4096, 64KiB, 1.5M, 8G, 25%)")]
    NotASize(String),
    /// A number with a unit that is not one.
    #[error(
        "`{0}`: unknown size unit (use B, K, M, G, T, P, with or without iB/B; all powers of \
         1024; examples: 4096, 64KiB, 1.5M, 8G, 25%)"
    )]
    UnknownSizeUnit(String),
    /// More than `u64::MAX` bytes.
    #[error("`{0}` is out of range: a size is from 0 to {max} bytes (16 EiB)", max = u64::MAX)]
    SizeOutOfRange(String),
    /// A percentage whose number does not parse.
    #[error("`{text}` is not a size: `{number}` is not a number")]
    PercentNotANumber {
        /// The text given.
        text: String,
        /// Its number part.
        number: String,
    },
    /// A percentage outside 0 to 100.
    #[error("`{0}`: a percentage must be between 0 and 100")]
    PercentOutOfRange(String),
    /// A percentage where only a size is taken.
    #[error("`{0}`: a percentage of RAM is not accepted here")]
    PercentNotAccepted(String),
    /// A percentage of RAM, and `/proc/meminfo` cannot be read.
    #[error("`{0}`: cannot read MemTotal from /proc/meminfo")]
    NoMemTotal(String),
    /// Not a duration.
    #[error("`{text}` is not a duration ({why}; examples: 30s, 2m, 500ms, 1h 30m)")]
    NotADuration {
        /// The text given.
        text: String,
        /// What the duration grammar said.
        why: String,
    },
    /// Zero or negative, or too long.
    #[error("`{0}`: the duration must be positive")]
    DurationNotPositive(String),
}

/// Whether [`monotonic_ns`] makes the system call instead of the vDSO read
/// ([`use_system_call_clock`]).
static SYSTEM_CALL_CLOCK: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// From now on [`monotonic_ns`] asks the kernel (`syscall(SYS_clock_gettime)`, a few hundred
/// ns) instead of reading the vDSO: for a process that makes the CPU's time-stamp counter
/// fault (`prctl(PR_SET_TSC, PR_TSC_SIGSEGV)`), where the vDSO's read, which uses that
/// counter, faults too.
pub fn use_system_call_clock() {
    SYSTEM_CALL_CLOCK.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// `CLOCK_MONOTONIC` now, in nanoseconds: pinwise's one clock (that of the kernel's
/// `bpf_ktime_get_ns()`, which stamps the tracer's events). glibc's `clock_gettime`, a vDSO
/// read: no system call, no allocation and no panic path, so hooks may call it (rustix's
/// own backend sets its vDSO up on first use, which may allocate and panics where the
/// system call is refused). The system call after [`use_system_call_clock`].
#[inline]
#[allow(unsafe_code)]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let rc = if SYSTEM_CALL_CLOCK.load(std::sync::atomic::Ordering::Relaxed) {
        // SAFETY: as below, through the system call (no vDSO).
        unsafe {
            libc::syscall(
                libc::SYS_clock_gettime,
                libc::CLOCK_MONOTONIC,
                &mut ts as *mut libc::timespec,
            ) as libc::c_int
        }
    } else {
        // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) }
    };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// Parses a size: `4096`, `64KiB`, `1.5M`, `8G`, `1 GB` (binary units; fractions round to
/// the nearest byte). A percentage is refused ([`UnitError::PercentNotAccepted`]); see
/// [`parse_size_or_ram_percent`].
pub fn parse_size(text: &str) -> Result<u64, UnitError> {
    if text.trim().ends_with('%') {
        return Err(UnitError::PercentNotAccepted(text.to_string()));
    }
    parse_bytes(text)
}

/// [`parse_size`], or a percentage of the machine's memory (`25%` of `MemTotal` in
/// `/proc/meminfo`), for budgets.
pub fn parse_size_or_ram_percent(text: &str) -> Result<u64, UnitError> {
    let t = text.trim();
    let Some(pct) = t.strip_suffix('%') else {
        return parse_bytes(text);
    };
    let p: f64 = pct
        .trim()
        .parse()
        .map_err(|_| UnitError::PercentNotANumber {
            text: text.to_string(),
            number: pct.to_string(),
        })?;
    if !(0.0..=100.0).contains(&p) {
        return Err(UnitError::PercentOutOfRange(text.to_string()));
    }
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .as_deref()
        .and_then(mem_total_bytes)
        .ok_or_else(|| UnitError::NoMemTotal(text.to_string()))?;
    Ok((total as f64 * p / 100.0) as u64)
}

fn parse_bytes(text: &str) -> Result<u64, UnitError> {
    let t = text.trim();
    const GRAMMAR: parse_size::Config = parse_size::Config::new().with_binary();
    match GRAMMAR.parse_size(t) {
        Ok(v) => Ok(v),
        Err(parse_size::Error::PosOverflow) => Err(UnitError::SizeOutOfRange(text.to_string())),
        Err(_) if t.starts_with(|c: char| c.is_ascii_digit() || c == '.') => {
            Err(UnitError::UnknownSizeUnit(text.to_string()))
        }
        Err(_) => Err(UnitError::NotASize(text.to_string())),
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

const SIZE_UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];

/// A size in binary units, 3 significant figures: `512 B`, `4.00 KiB`, `1.50 GiB`.
pub fn format_size(n: u64) -> String {
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < SIZE_UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{} {}", three_figures(v), SIZE_UNITS[unit])
}

/// A size as a whole number of the largest binary unit (up to GiB) that divides it:
/// `4 KiB`, `16 MiB`, `1 GiB`, `1536 B` (labels of benchmark sizes).
pub fn format_size_exact(n: u64) -> String {
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        let u = 1u64 << shift;
        if n >= u && n.is_multiple_of(u) {
            return format!("{} {unit}", n / u);
        }
    }
    format!("{n} B")
}

/// Parses a duration: `30s`, `2m`, `500ms`, `1h 30m`, `2min` (the `humantime` grammar), or
/// a bare number of seconds (`1.5`). Zero and negative durations are refused.
pub fn parse_duration(text: &str) -> Result<Duration, UnitError> {
    let t = text.trim();
    let d = match t.parse::<f64>() {
        Ok(secs) if (0.0..1e12).contains(&secs) => Duration::from_secs_f64(secs),
        Ok(_) => return Err(UnitError::DurationNotPositive(text.to_string())),
        Err(_) => humantime::parse_duration(t).map_err(|e| UnitError::NotADuration {
            text: text.to_string(),
            why: e.to_string(),
        })?,
    };
    if d.is_zero() {
        return Err(UnitError::DurationNotPositive(text.to_string()));
    }
    Ok(d)
}

/// A duration given in nanoseconds: `850 ns`, `12.3 us`, `4.56 ms`, `1.23 s`, `2.0 min`
/// (`-` when not finite).
pub fn format_duration_ns(ns: f64) -> String {
    if !ns.is_finite() {
        return "-".into();
    }
    let sign = if ns < 0.0 { "-" } else { "" };
    let a = ns.abs();
    let body = if a < 1e3 {
        format!("{a:.0} ns")
    } else if a < 1e6 {
        format!("{} us", three_figures(a / 1e3))
    } else if a < 1e9 {
        format!("{} ms", three_figures(a / 1e6))
    } else if a < 120e9 {
        format!("{} s", three_figures(a / 1e9))
    } else {
        format!("{:.1} min", a / 60e9)
    };
    format!("{sign}{body}")
}

/// `v` with three significant figures (`1.23`, `12.3`, `123`).
fn three_figures(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.2}")
    } else if v < 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_call_clock_reads_the_same_clock() {
        let a = monotonic_ns();
        use_system_call_clock();
        let b = monotonic_ns();
        SYSTEM_CALL_CLOCK.store(false, std::sync::atomic::Ordering::SeqCst);
        let c = monotonic_ns();
        assert!(a > 0 && a <= b && b <= c, "{a} {b} {c}");
    }

    #[test]
    fn the_clock_is_clock_monotonic_and_moves_forward() {
        let a = monotonic_ns();
        std::thread::sleep(Duration::from_millis(2));
        let b = monotonic_ns();
        assert!(b >= a + 2_000_000, "{a} then {b}");
        let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        let direct = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
        assert!(direct >= b && direct - b < 1_000_000_000);
    }

    #[test]
    fn sizes_past_u64_are_refused_with_the_range() {
        for t in ["18446744073709551616", "16384PiB", "1e30", "99999999999T"] {
            let e = parse_size(t).unwrap_err().to_string();
            assert!(
                e.contains("out of range") || e.contains("unit") || e.contains("not a size"),
                "{t}: {e}"
            );
        }
        let e = parse_size("18446744073709551616").unwrap_err().to_string();
        assert!(e.contains("out of range") && e.contains("16 EiB"), "{e}");
        assert_eq!(parse_size("16T").unwrap(), 16 << 40);
    }

    #[test]
    fn meminfo_parsing() {
        let text = "MemTotal:       131072000 kB\nMemFree:         1000 kB\n";
        assert_eq!(mem_total_bytes(text), Some(131_072_000 * 1024));
        assert_eq!(mem_total_bytes("nothing"), None);
        assert_eq!(mem_total_bytes("MemTotal: x kB"), None);
    }

    #[test]
    fn size_parsing() {
        let p = parse_size_or_ram_percent;
        assert_eq!(p("4096").unwrap(), 4096);
        assert_eq!(p("64MiB").unwrap(), 64 << 20);
        assert_eq!(p("8G").unwrap(), 8 << 30);
        assert_eq!(p("1.5k").unwrap(), 1536);
        assert!(p("ten").unwrap_err().to_string().contains("not a size"));
        assert!(p("5 parsecs")
            .unwrap_err()
            .to_string()
            .contains("unknown size unit"));
        assert!(p("150%").is_err());
        assert_eq!(p("1.5M").unwrap(), 3 << 19);
        assert_eq!(p("64KiB").unwrap(), 64 << 10);
        assert_eq!(p("2g").unwrap(), 2 << 30);
        assert_eq!(p("1 GB").unwrap(), 1 << 30);
        assert_eq!(p("512").unwrap(), 512);
        assert!(p("").unwrap_err().to_string().contains("not a size"));
        assert!(p("-1M").unwrap_err().to_string().contains("not a size"));
        let ram = p("50%").unwrap();
        let quarter = p("25%").unwrap();
        assert!(ram > 0 && ram.abs_diff(quarter * 2) <= 1, "{ram} {quarter}");
        assert_eq!(
            p("x%").unwrap_err(),
            UnitError::PercentNotANumber {
                text: "x%".into(),
                number: "x".into()
            }
        );
    }

    #[test]
    fn plain_sizes_refuse_a_percentage() {
        assert_eq!(parse_size("4M"), Ok(4 << 20));
        assert_eq!(parse_size("256KiB"), Ok(256 << 10));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert!(parse_size("4Q").is_err());
        assert!(parse_size("99999999999G").is_err());
        assert_eq!(parse_size("1.5M"), Ok(3 << 19));
        let e = parse_size("10%").unwrap_err();
        assert_eq!(e, UnitError::PercentNotAccepted("10%".into()));
        assert!(e.to_string().contains("percentage of RAM is not accepted"));
    }

    #[test]
    fn formatted_sizes_read_back() {
        assert_eq!(format_size(12), "12 B");
        assert_eq!(format_size(512), "512 B");
        assert_eq!(format_size(1536), "1.50 KiB");
        assert_eq!(format_size(64 << 20), "64.0 MiB");
        assert_eq!(format_size(4096), "4.00 KiB");
        assert_eq!(format_size(3 << 29), "1.50 GiB");
        assert_eq!(format_size_exact(4096), "4 KiB");
        assert_eq!(format_size_exact(16 << 20), "16 MiB");
        assert_eq!(format_size_exact(1 << 30), "1 GiB");
        assert_eq!(format_size_exact(1536), "1536 B");
        for n in [
            0u64,
            1,
            1000,
            4096,
            1536,
            64 << 10,
            3 << 29,
            (1 << 40) + 12345,
            1 << 50,
        ] {
            assert_eq!(parse_size(&format_size_exact(n)), Ok(n), "{n}");
            let back = parse_size(&format_size(n)).unwrap();
            assert!(
                back.abs_diff(n) as f64 <= n as f64 * 0.005 + 1.0,
                "{n} -> {} -> {back}",
                format_size(n)
            );
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("soon")
            .unwrap_err()
            .to_string()
            .contains("is not a duration"));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("2min"), Ok(Duration::from_secs(120)));
        assert_eq!(
            parse_duration("-3"),
            Err(UnitError::DurationNotPositive("-3".into()))
        );
        assert_eq!(format_duration_ns(850.0), "850 ns");
        assert_eq!(format_duration_ns(12_300.0), "12.3 us");
        assert_eq!(format_duration_ns(4_560_000.0), "4.56 ms");
        assert_eq!(format_duration_ns(1.23e9), "1.23 s");
        assert_eq!(format_duration_ns(120e9), "2.0 min");
        assert_eq!(format_duration_ns(f64::NAN), "-");
        for ns in [12_300.0, 4_560_000.0, 1.23e9] {
            let back = parse_duration(&format_duration_ns(ns).replace(" us", "us")).unwrap();
            assert!((back.as_nanos() as f64 - ns).abs() <= ns * 0.005, "{ns}");
        }
    }
}
