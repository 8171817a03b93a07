//! Numbers for people: bytes, durations, counts, shares, fixed-width cells.

/// Bytes in binary units, 3 significant figures: `512 B`, `4.0 KiB`, `1.50 GiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{} {}", three_figures(v), UNITS[unit])
}

/// A duration given in nanoseconds: `850 ns`, `12.3 us`, `4.56 ms`, `1.23 s`, `2.0 min`.
pub fn duration_ns(ns: f64) -> String {
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

/// A count with thousands separators: `1,234,567`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A share (0 to 1) as a percentage with one decimal: `84.2 %`.
pub fn percent(share: f64) -> String {
    if share.is_finite() {
        format!("{:.1} %", share * 100.0)
    } else {
        "-".into()
    }
}

/// A timestamp relative to the start of the trace, in seconds: `12.345 s`.
pub fn offset_s(ns: u64) -> String {
    format!("{:.3} s", ns as f64 / 1e9)
}

fn three_figures(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// `s` cut to at most `width` characters, with `~` marking the cut. Keeps the end of
/// the text (where a file name and line are) when `keep_end` is set.
pub fn fit(s: &str, width: usize, keep_end: bool) -> String {
    let n = s.chars().count();
    if n <= width {
        return s.to_owned();
    }
    if width == 0 {
        return String::new();
    }
    if keep_end {
        let tail: String = s.chars().skip(n - (width - 1)).collect();
        format!("…{tail}")
    } else {
        let head: String = s.chars().take(width - 1).collect();
        format!("{head}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_use_binary_units_and_three_figures() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(4096), "4.00 KiB");
        assert_eq!(bytes(1536 * 1024), "1.50 MiB");
        assert_eq!(bytes(300 << 30), "300 GiB");
    }

    #[test]
    fn durations_pick_a_unit() {
        assert_eq!(duration_ns(850.0), "850 ns");
        assert_eq!(duration_ns(12_345.0), "12.3 us");
        assert_eq!(duration_ns(4_560_000.0), "4.56 ms");
        assert_eq!(duration_ns(-1.5e9), "-1.50 s");
        assert_eq!(duration_ns(600e9), "10.0 min");
        assert_eq!(duration_ns(f64::NAN), "-");
    }

    #[test]
    fn counts_have_separators() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(1_234_567), "1,234,567");
    }

    #[test]
    fn fit_cuts_and_marks() {
        assert_eq!(fit("abcdef", 6, false), "abcdef");
        assert_eq!(fit("abcdef", 4, false), "abc…");
        assert_eq!(fit("abcdef", 4, true), "…def");
        assert_eq!(percent(0.8421), "84.2 %");
    }
}
