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

/// `s` cut to at most `width` characters, with `…` marking the cut. With `keep_end` (names:
/// a path's file and line, a function's own name are at the end) the end is kept and the
/// cut is in the middle, after the first component (`pinwise::`, `/home/`) when that takes
/// at most a third of the room, else at the front; without, the end is cut.
pub fn fit(s: &str, width: usize, keep_end: bool) -> String {
    let n = s.chars().count();
    if n <= width {
        return s.to_owned();
    }
    if width == 0 {
        return String::new();
    }
    let room = width - 1;
    if keep_end {
        let head = first_component(s).filter(|&h| h <= room / 3).unwrap_or(0);
        let head_text: String = s.chars().take(head).collect();
        let tail: String = s.chars().skip(n - (room - head)).collect();
        format!("{head_text}…{tail}")
    } else {
        let head: String = s.chars().take(room).collect();
        format!("{head}…")
    }
}

/// Length in characters of `s`'s first component with its separator (`/home/`,
/// `pinwise::`, `torch.`), if it has one.
fn first_component(s: &str) -> Option<usize> {
    let chars: Vec<char> = s.chars().collect();
    let sep = |c: char| matches!(c, '/' | ':' | '.' | '\\');
    // Separators at the very start (`/` of an absolute path) belong to the first component.
    let start = chars.iter().take_while(|c| sep(**c)).count();
    let end = start + chars[start..].iter().position(|c| sep(*c))?;
    let with_sep = end + chars[end..].iter().take_while(|c| sep(**c)).count();
    (end > start && with_sep < chars.len()).then_some(with_sep)
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
        // Names keep their end, and their first component when it is short.
        assert_eq!(
            fit("pinwise::examples::buffers::DeviceBuffer::resize", 30, true),
            "pinwise::…DeviceBuffer::resize"
        );
        assert_eq!(
            fit("/home/someone/project/src/data/loader.py:88", 24, true),
            "/home/…data/loader.py:88"
        );
        // A first component too long for a third of the room: cut at the front.
        assert_eq!(fit("a_very_long_namespace::f::g", 12, true), "…space::f::g");
        for width in 1..40 {
            let cut = fit("/home/someone/project/src/loader.py:88", width, true);
            assert_eq!(cut.chars().count(), width.min(38), "{cut}");
            assert!(cut.ends_with(":88") || width < 4, "{cut}");
        }
        assert_eq!(percent(0.8421), "84.2 %");
    }
}
