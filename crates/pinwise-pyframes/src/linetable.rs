//! Line numbers from a code object's `co_linetable`, as `PyCode_Addr2Line` computes them.
//!
//! Both decoders walk the table from the start to the range holding the byte offset asked
//! for (a few hundred bytes for a typical function) and never read past its end: a
//! truncated or garbage table gives `None`, never a panic.

use crate::layout::LineTableKind;

/// The line of the instruction at byte offset `addr` (a negative offset is the function's
/// first line, as in CPython). `None` when the table gives no line for it ("no location"
/// entries, offsets past the end, malformed tables).
pub fn line_for(kind: LineTableKind, table: &[u8], firstlineno: i32, addr: i32) -> Option<u32> {
    if addr < 0 {
        return u32::try_from(firstlineno).ok();
    }
    let line = match kind {
        LineTableKind::Pairs310 => Ranges310::new(table, firstlineno).line_at(addr)?,
        LineTableKind::Locations311 => Ranges311::new(table, firstlineno).line_at(addr)?,
    };
    u32::try_from(line).ok()
}

/// The address ranges of a table: `(start, end, line)` with `line == -1` for none.
trait Ranges {
    /// The next raw entry, or `None` at the end (or on a malformed entry).
    fn advance(&mut self) -> Option<()>;
    fn state(&self) -> (i64, i64, i64);

    /// `PyLineTable_NextAddressRange`: skips empty ranges.
    fn next_range(&mut self) -> Option<()> {
        self.advance()?;
        loop {
            let (start, end, _) = self.state();
            if start != end {
                return Some(());
            }
            self.advance()?;
        }
    }

    /// `_PyCode_CheckLineNumber` from a freshly initialised range.
    fn line_at(&mut self, addr: i32) -> Option<i64> {
        let addr = i64::from(addr);
        loop {
            let (_, end, _) = self.state();
            if end > addr {
                break;
            }
            self.next_range()?;
        }
        let line = self.state().2;
        (line >= 0).then_some(line)
    }
}

/// The 3.10 table: pairs of (unsigned byte-offset delta, signed line delta); a line delta
/// of -128 means "no line".
struct Ranges310<'a> {
    table: &'a [u8],
    next: usize,
    start: i64,
    end: i64,
    computed: i64,
    line: i64,
}

impl<'a> Ranges310<'a> {
    fn new(table: &'a [u8], firstlineno: i32) -> Self {
        Ranges310 {
            table,
            next: 0,
            start: -1,
            end: 0,
            computed: i64::from(firstlineno),
            line: -1,
        }
    }
}

impl Ranges for Ranges310<'_> {
    fn advance(&mut self) -> Option<()> {
        let pair = self.table.get(self.next..self.next + 2)?;
        self.start = self.end;
        self.end += i64::from(pair[0]);
        let ldelta = pair[1] as i8;
        self.next += 2;
        if ldelta == -128 {
            self.line = -1;
        } else {
            self.computed += i64::from(ldelta);
            self.line = self.computed;
        }
        Some(())
    }

    fn state(&self) -> (i64, i64, i64) {
        (self.start, self.end, self.line)
    }
}

/// The 3.11+ location table: entries that start with a byte whose top bit is set; bits
/// 3-6 are the entry's code, bits 0-2 its length in code units less one.
struct Ranges311<'a> {
    table: &'a [u8],
    next: usize,
    start: i64,
    end: i64,
    computed: i64,
    line: i64,
}

/// Entry codes (`_PyCodeLocationInfoKind`).
const INFO_NONE: u8 = 15;
const INFO_LONG: u8 = 14;
const INFO_NO_COLUMNS: u8 = 13;
const INFO_ONE_LINE1: u8 = 11;
const INFO_ONE_LINE2: u8 = 12;

impl<'a> Ranges311<'a> {
    fn new(table: &'a [u8], firstlineno: i32) -> Self {
        Ranges311 {
            table,
            next: 0,
            start: -1,
            end: 0,
            computed: i64::from(firstlineno),
            line: -1,
        }
    }

    fn varint(&self, mut at: usize) -> Option<u64> {
        let mut byte = *self.table.get(at)?;
        let mut val = u64::from(byte & 63);
        let mut shift = 0u32;
        while byte & 64 != 0 {
            at += 1;
            byte = *self.table.get(at)?;
            shift += 6;
            if shift > 60 {
                return None;
            }
            val |= u64::from(byte & 63) << shift;
        }
        Some(val)
    }

    fn signed_varint(&self, at: usize) -> Option<i64> {
        let u = self.varint(at)?;
        let mag = (u >> 1) as i64;
        Some(if u & 1 != 0 { -mag } else { mag })
    }
}

impl Ranges for Ranges311<'_> {
    fn advance(&mut self) -> Option<()> {
        let first = *self.table.get(self.next)?;
        if first & 0x80 == 0 {
            return None;
        }
        let code = (first >> 3) & 15;
        let delta = match code {
            INFO_NONE => 0,
            INFO_NO_COLUMNS | INFO_LONG => self.signed_varint(self.next + 1)?,
            INFO_ONE_LINE1 => 1,
            INFO_ONE_LINE2 => 2,
            _ => 0,
        };
        self.computed += delta;
        self.line = if code == INFO_NONE { -1 } else { self.computed };
        self.start = self.end;
        self.end += (i64::from(first & 7) + 1) * 2;
        self.next += 1;
        while self.next < self.table.len() && self.table[self.next] & 0x80 == 0 {
            self.next += 1;
        }
        Some(())
    }

    fn state(&self) -> (i64, i64, i64) {
        (self.start, self.end, self.line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One code object of the test vectors: its table, first line, and the
    /// `(start, end, line)` ranges CPython's `co_lines()` gives for it.
    struct Vector {
        table: Vec<u8>,
        firstlineno: i32,
        ranges: Vec<(i32, i32, Option<u32>)>,
    }

    /// Parses `tests/data/linetables-3.X.txt` (written by `tests/data/linetables.py`).
    fn vectors(text: &str) -> Vec<Vector> {
        let mut out = Vec::new();
        for block in text.split("code ").skip(1) {
            let mut lines = block.lines();
            let head: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
            let firstlineno = head[0].parse().unwrap();
            let hex = head.get(1).copied().unwrap_or("");
            let table = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            let ranges = lines
                .filter(|l| !l.trim().is_empty())
                .map(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    let line = if f[2] == "None" {
                        None
                    } else {
                        Some(f[2].parse().unwrap())
                    };
                    (f[0].parse().unwrap(), f[1].parse().unwrap(), line)
                })
                .collect();
            out.push(Vector {
                table,
                firstlineno,
                ranges,
            });
        }
        out
    }

    fn check(kind: LineTableKind, text: &str, version: &str) {
        let vs = vectors(text);
        assert!(vs.len() >= 5, "{version}: only {} code objects", vs.len());
        let mut addrs = 0;
        for v in &vs {
            for &(start, end, line) in &v.ranges {
                for addr in (start..end).step_by(2) {
                    assert_eq!(
                        line_for(kind, &v.table, v.firstlineno, addr),
                        line,
                        "{version}: offset {addr} of a code object at line {}",
                        v.firstlineno
                    );
                    addrs += 1;
                }
            }
            let end = v.ranges.last().map_or(0, |r| r.1);
            assert_eq!(line_for(kind, &v.table, v.firstlineno, end + 100), None);
            assert_eq!(
                line_for(kind, &v.table, v.firstlineno, -1),
                Some(v.firstlineno as u32)
            );
        }
        assert!(addrs > 100, "{version}: only {addrs} offsets checked");
    }

    #[test]
    fn lines_match_cpython_3_10() {
        check(
            LineTableKind::Pairs310,
            include_str!("../tests/data/linetables-3.10.txt"),
            "3.10",
        );
    }

    #[test]
    fn lines_match_cpython_3_11() {
        check(
            LineTableKind::Locations311,
            include_str!("../tests/data/linetables-3.11.txt"),
            "3.11",
        );
    }

    #[test]
    fn lines_match_cpython_3_12() {
        check(
            LineTableKind::Locations311,
            include_str!("../tests/data/linetables-3.12.txt"),
            "3.12",
        );
    }

    #[test]
    fn lines_match_cpython_3_13() {
        check(
            LineTableKind::Locations311,
            include_str!("../tests/data/linetables-3.13.txt"),
            "3.13",
        );
    }

    #[test]
    fn garbage_tables_give_none_or_a_line_but_never_panic() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..200 {
            let table: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            for addr in [0, 2, 10, 400, i32::MAX] {
                let _ = line_for(LineTableKind::Pairs310, &table, 1, addr);
                let _ = line_for(LineTableKind::Locations311, &table, 1, addr);
            }
        }
        // A 3.11 table that is all continuation bytes is malformed: no line.
        assert_eq!(
            line_for(LineTableKind::Locations311, &[0x40; 8], 5, 0),
            None
        );
        assert_eq!(line_for(LineTableKind::Pairs310, &[], 5, 0), None);
    }
}
