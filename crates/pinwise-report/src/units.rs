//! Numbers for people: bytes, durations, counts, shares, fixed-width cells.

pub use pinwise_core::units::{format_duration_ns, format_size};

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
        assert_eq!(format_size(0), "0 B");
        assert_eq!(format_size(1023), "1023 B");
        assert_eq!(format_size(4096), "4.00 KiB");
        assert_eq!(format_size(1536 * 1024), "1.50 MiB");
        assert_eq!(format_size(300 << 30), "300 GiB");
    }

    #[test]
    fn durations_pick_a_unit() {
        assert_eq!(format_duration_ns(850.0), "850 ns");
        assert_eq!(format_duration_ns(12_345.0), "12.3 us");
        assert_eq!(format_duration_ns(4_560_000.0), "4.56 ms");
        assert_eq!(format_duration_ns(-1.5e9), "-1.50 s");
        assert_eq!(format_duration_ns(600e9), "10.0 min");
        assert_eq!(format_duration_ns(f64::NAN), "-");
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
