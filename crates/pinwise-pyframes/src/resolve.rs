//! Resolution: a captured (code object, offset) pair to file, line and function name.
//!
//! This allocates (strings, the line table), so it runs outside allocation hooks. Every
//! object is type-checked (its `ob_type` must be the interpreter's `PyCode_Type`,
//! `PyUnicode_Type`, `PyBytes_Type`) and every length bounded before it is read.

use crate::layout::{common, Layout};
use crate::linetable::line_for;
use crate::mem::Memory;
use crate::walk::RawFrame;
use crate::PyFrame;

/// The longest file or function name read (characters); longer ones are cut.
pub const MAX_NAME_CHARS: usize = 4096;
/// The longest line table read (bytes); a code object with a longer one gets its first
/// line.
pub const MAX_LINETABLE: usize = 1 << 20;

/// Addresses of the interpreter's type objects, for type checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Types {
    /// `PyCode_Type`.
    pub code: usize,
    /// `PyUnicode_Type`.
    pub str: usize,
    /// `PyBytes_Type`.
    pub bytes: usize,
}

/// What a code object says about itself, read once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeInfo {
    /// `co_filename`.
    pub file: String,
    /// `co_name`.
    pub function: String,
    /// `co_firstlineno`.
    pub firstlineno: i32,
    /// `co_linetable`.
    pub linetable: Vec<u8>,
    /// The header fields the strings came from (type, filename, name, line table,
    /// first line), to tell on a later look whether the same object is still there.
    pub fingerprint: [u64; 5],
}

impl CodeInfo {
    /// The frame at byte offset `instr_offset` of this code (the first line when the
    /// offset has no line).
    pub fn frame(&self, layout: &Layout, instr_offset: i32) -> PyFrame {
        let line = line_for(
            layout.linetable,
            &self.linetable,
            self.firstlineno,
            instr_offset,
        )
        .or_else(|| u32::try_from(self.firstlineno).ok())
        .unwrap_or(0);
        PyFrame {
            file: self.file.clone(),
            line,
            function: self.function.clone(),
        }
    }
}

/// Whether an object header's reference count is that of a live object: at least 1 and
/// at most `u32::MAX` (3.12+'s immortal objects). A freed object's first word holds the
/// allocator's free-list link (a pointer, or 0), which fails this; glibc's free also
/// overwrites `ob_type`, which fails the type check.
fn alive(hdr: &[u8]) -> bool {
    (1..=u64::from(u32::MAX)).contains(&u64_at(hdr, 0))
}

fn u64_at(buf: &[u8], off: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[off..off + 8]);
    u64::from_ne_bytes(b)
}

/// Bytes of a code object's header that [`fingerprint_of`] needs.
pub fn header_len(layout: &Layout) -> usize {
    layout.code_linetable + 8
}

/// The fingerprint in a code object's header bytes, if it is a code object.
pub fn fingerprint_of(hdr: &[u8], layout: &Layout, types: &Types) -> Option<[u64; 5]> {
    let ty = u64_at(hdr, common::OB_TYPE);
    if ty != types.code as u64 || !alive(hdr) {
        return None;
    }
    let f = layout.code_firstlineno;
    let first = i32::from_ne_bytes(hdr[f..f + 4].try_into().ok()?);
    Some([
        ty,
        u64_at(hdr, layout.code_filename),
        u64_at(hdr, layout.code_name),
        u64_at(hdr, layout.code_linetable),
        first as u32 as u64,
    ])
}

/// Reads the header of code object `code`: its fingerprint, if it is a code object.
pub fn fingerprint<M: Memory>(
    mem: &M,
    layout: &Layout,
    types: &Types,
    code: usize,
) -> Option<[u64; 5]> {
    let mut hdr = [0u8; 160];
    let len = header_len(layout);
    if !code.is_multiple_of(8) || !mem.read(code, &mut hdr[..len]) {
        return None;
    }
    fingerprint_of(&hdr, layout, types)
}

/// Reads code object `code` whole: its header, then the headers of its filename, name
/// and line table in one batched read, then their contents in another.
pub fn read_code<M: Memory>(
    mem: &M,
    layout: &Layout,
    types: &Types,
    code: usize,
) -> Option<CodeInfo> {
    let fp = fingerprint(mem, layout, types, code)?;
    let (file_at, name_at, table_at) = (fp[1] as usize, fp[2] as usize, fp[3] as usize);
    let mut hdrs = [[0u8; STR_HEADER]; 3];
    let mut ok = [false; 3];
    {
        let [a, b, c] = &mut hdrs;
        let mut bufs: [&mut [u8]; 3] = [a, b, &mut c[..common::BYTES_DATA]];
        mem.read_many(&[file_at, name_at, table_at], &mut bufs, &mut ok);
    }
    let file = str_contents(&hdrs[0], layout, types, file_at).filter(|_| ok[0])?;
    let name = str_contents(&hdrs[1], layout, types, name_at).filter(|_| ok[1])?;
    let table = bytes_contents(&hdrs[2], types, table_at).filter(|_| ok[2]);
    let mut file_raw = vec![0u8; file.len];
    let mut name_raw = vec![0u8; name.len];
    let mut table_raw = vec![0u8; table.map_or(0, |t| t.1)];
    let mut ok = [false; 3];
    {
        let mut bufs: [&mut [u8]; 3] = [&mut file_raw, &mut name_raw, &mut table_raw];
        let addrs = [file.data, name.data, table.map_or(0, |t| t.0)];
        let n = if table.is_some() { 3 } else { 2 };
        mem.read_many(&addrs[..n], &mut bufs[..n], &mut ok[..n]);
    }
    if !ok[0] || !ok[1] {
        return None;
    }
    Some(CodeInfo {
        file: file.decode(&file_raw),
        function: name.decode(&name_raw),
        firstlineno: fp[4] as u32 as i32,
        linetable: if ok[2] { table_raw } else { Vec::new() },
        fingerprint: fp,
    })
}

/// Bytes of a `str` header read (`PyASCIIObject` up to and including `state`).
const STR_HEADER: usize = 40;

/// Where a compact `str`'s characters are, from its header.
#[derive(Debug, Clone, Copy)]
struct StrContents {
    data: usize,
    len: usize,
    kind: usize,
}

impl StrContents {
    /// The characters as UTF-8 (lone surrogates become U+FFFD).
    fn decode(&self, raw: &[u8]) -> String {
        match self.kind {
            1 => raw.iter().map(|&b| char::from(b)).collect(),
            2 => {
                let units: Vec<u16> = raw
                    .chunks_exact(2)
                    .map(|c| u16::from_ne_bytes([c[0], c[1]]))
                    .collect();
                String::from_utf16_lossy(&units)
            }
            _ => raw
                .chunks_exact(4)
                .map(|c| {
                    char::from_u32(u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                        .unwrap_or(char::REPLACEMENT_CHARACTER)
                })
                .collect(),
        }
    }
}

/// Checks a `str` header read from `addr` and says where its characters are (at most
/// [`MAX_NAME_CHARS`]).
fn str_contents(hdr: &[u8], layout: &Layout, types: &Types, addr: usize) -> Option<StrContents> {
    if !addr.is_multiple_of(8) || u64_at(hdr, common::OB_TYPE) != types.str as u64 || !alive(hdr) {
        return None;
    }
    let length = u64_at(hdr, common::STR_LENGTH) as usize;
    let state = u32::from_ne_bytes(
        hdr[common::STR_STATE..common::STR_STATE + 4]
            .try_into()
            .ok()?,
    );
    let kind = ((state >> 2) & 7) as usize;
    let compact = (state >> 5) & 1 == 1;
    let ascii = (state >> 6) & 1 == 1;
    if !compact || !matches!(kind, 1 | 2 | 4) || (ascii && kind != 1) {
        return None;
    }
    let head = if ascii {
        layout.ascii_size
    } else {
        layout.compact_size
    };
    Some(StrContents {
        data: addr + head,
        len: length.min(MAX_NAME_CHARS) * kind,
        kind,
    })
}

/// Checks a `bytes` header read from `addr`: where its contents are and how long.
fn bytes_contents(hdr: &[u8], types: &Types, addr: usize) -> Option<(usize, usize)> {
    if !addr.is_multiple_of(8) || u64_at(hdr, common::OB_TYPE) != types.bytes as u64 || !alive(hdr)
    {
        return None;
    }
    let len = u64_at(hdr, common::OB_SIZE) as usize;
    (len <= MAX_LINETABLE).then_some((addr + common::BYTES_DATA, len))
}

/// Reads a compact `str` object as UTF-8 (lone surrogates become U+FFFD).
pub fn read_str<M: Memory>(mem: &M, layout: &Layout, types: &Types, addr: usize) -> Option<String> {
    let mut hdr = [0u8; STR_HEADER];
    if !mem.read(addr, &mut hdr) {
        return None;
    }
    let c = str_contents(&hdr, layout, types, addr)?;
    let mut raw = vec![0u8; c.len];
    mem.read(c.data, &mut raw).then(|| c.decode(&raw))
}

/// Reads a `bytes` object's contents (at most [`MAX_LINETABLE`] bytes).
pub fn read_bytes<M: Memory>(mem: &M, types: &Types, addr: usize) -> Option<Vec<u8>> {
    let mut hdr = [0u8; common::BYTES_DATA];
    if !mem.read(addr, &mut hdr) {
        return None;
    }
    let (data, len) = bytes_contents(&hdr, types, addr)?;
    let mut out = vec![0u8; len];
    mem.read(data, &mut out).then_some(out)
}

/// Resolves one raw frame now (no cache).
pub fn resolve_one<M: Memory>(
    mem: &M,
    layout: &Layout,
    types: &Types,
    raw: &RawFrame,
) -> Option<PyFrame> {
    read_code(mem, layout, types, raw.code).map(|c| c.frame(layout, raw.instr_offset))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::layout::{Version, V310, V312};
    use crate::mem::FakeMemory;

    pub const TYPES: Types = Types {
        code: 0x4000_0000,
        str: 0x4000_1000,
        bytes: 0x4000_2000,
    };

    /// Writes a compact `str` object holding `s` at `addr`.
    pub fn put_str(mem: &mut FakeMemory, layout: &Layout, addr: usize, s: &str) {
        let chars: Vec<char> = s.chars().collect();
        let max = chars.iter().map(|&c| c as u32).max().unwrap_or(0);
        let (kind, ascii) = match max {
            0..=0x7f => (1, true),
            0x80..=0xff => (1, false),
            0x100..=0xffff => (2, false),
            _ => (4, false),
        };
        let head = if ascii {
            layout.ascii_size
        } else {
            layout.compact_size
        };
        let mut b = vec![0u8; head + chars.len() * kind + 8];
        b[0..8].copy_from_slice(&1u64.to_ne_bytes());
        b[8..16].copy_from_slice(&(TYPES.str as u64).to_ne_bytes());
        b[16..24].copy_from_slice(&(chars.len() as u64).to_ne_bytes());
        let state: u32 = (kind << 2) as u32 | 1 << 5 | (ascii as u32) << 6;
        b[32..36].copy_from_slice(&state.to_ne_bytes());
        for (i, &c) in chars.iter().enumerate() {
            let v = c as u32;
            let at = head + i * kind;
            b[at..at + kind].copy_from_slice(&v.to_ne_bytes()[..kind]);
        }
        mem.put(addr, b);
    }

    /// Writes a `bytes` object at `addr`.
    pub fn put_bytes(mem: &mut FakeMemory, addr: usize, data: &[u8]) {
        let mut b = vec![0u8; 32 + data.len() + 1];
        b[0..8].copy_from_slice(&1u64.to_ne_bytes());
        b[8..16].copy_from_slice(&(TYPES.bytes as u64).to_ne_bytes());
        b[16..24].copy_from_slice(&(data.len() as u64).to_ne_bytes());
        b[32..32 + data.len()].copy_from_slice(data);
        mem.put(addr, b);
    }

    /// Writes a code object at `code` (strings and table at code+0x100.. +0x300).
    pub fn put_code(
        mem: &mut FakeMemory,
        layout: &Layout,
        code: usize,
        file: &str,
        name: &str,
        first: i32,
        table: &[u8],
    ) {
        let mut b = vec![0u8; 256];
        b[0..8].copy_from_slice(&1u64.to_ne_bytes());
        b[8..16].copy_from_slice(&(TYPES.code as u64).to_ne_bytes());
        let f = layout.code_firstlineno;
        b[f..f + 4].copy_from_slice(&first.to_ne_bytes());
        for (off, addr) in [
            (layout.code_filename, code + 0x1000),
            (layout.code_name, code + 0x2000),
            (layout.code_linetable, code + 0x3000),
        ] {
            b[off..off + 8].copy_from_slice(&(addr as u64).to_ne_bytes());
        }
        mem.put(code, b);
        put_str(mem, layout, code + 0x1000, file);
        put_str(mem, layout, code + 0x2000, name);
        put_bytes(mem, code + 0x3000, table);
    }

    #[test]
    fn strings_of_every_kind_read_back() {
        for layout in [&V310, &V312] {
            let mut mem = FakeMemory::default();
            for (i, s) in ["train.py", "café.py", "ключ", "𝔣𝔬𝔬.py", ""]
                .iter()
                .enumerate()
            {
                let addr = 0x2000_0000 + i * 0x1000;
                put_str(&mut mem, layout, addr, s);
                assert_eq!(read_str(&mem, layout, &TYPES, addr).as_deref(), Some(*s));
            }
        }
    }

    #[test]
    fn wrong_types_and_huge_lengths_are_refused() {
        let layout = &V312;
        let mut mem = FakeMemory::default();
        put_str(&mut mem, layout, 0x2000_0000, "x");
        // Not a str: a bytes object.
        put_bytes(&mut mem, 0x2100_0000, b"abc");
        assert_eq!(read_str(&mem, layout, &TYPES, 0x2100_0000), None);
        assert_eq!(read_bytes(&mem, &TYPES, 0x2000_0000), None);
        assert_eq!(read_bytes(&mem, &TYPES, 0x2100_0000), Some(b"abc".to_vec()));
        // A length beyond what is mapped: the read fails, no panic, no huge allocation.
        mem.set_u64(0x2100_0000 + 16, u64::MAX);
        assert_eq!(read_bytes(&mem, &TYPES, 0x2100_0000), None);
        mem.set_u64(0x2000_0000 + 16, 1 << 40);
        assert_eq!(read_str(&mem, layout, &TYPES, 0x2000_0000), None);
        // Not a code object.
        let raw = RawFrame {
            code: 0x2000_0000,
            instr_offset: 0,
        };
        assert_eq!(resolve_one(&mem, layout, &TYPES, &raw), None);
    }

    #[test]
    fn code_objects_resolve_to_file_line_and_name() {
        // 3.10 pairs: offsets 0..6 line first+1, 6..10 line first+3.
        let layout = Version::V310.layout();
        let mut mem = FakeMemory::default();
        put_code(
            &mut mem,
            layout,
            0x3000_0000,
            "/srv/train.py",
            "load_batch",
            87,
            &[6, 1, 4, 2],
        );
        let at = |off| RawFrame {
            code: 0x3000_0000,
            instr_offset: off,
        };
        let f = resolve_one(&mem, layout, &TYPES, &at(2)).unwrap();
        assert_eq!(
            (f.file.as_str(), f.line, f.function.as_str()),
            ("/srv/train.py", 88, "load_batch")
        );
        assert_eq!(resolve_one(&mem, layout, &TYPES, &at(8)).unwrap().line, 90);
        // Freed: the first word is a free-list link (a pointer) or 0; immortal is fine.
        for (refcnt, resolves) in [
            (0x5555_5555_a000u64, false),
            (0, false),
            (u64::from(u32::MAX), true),
            (3, true),
        ] {
            mem.set_u64(0x3000_1000, 1);
            mem.set_u64(0x3000_0000, refcnt);
            assert_eq!(
                resolve_one(&mem, layout, &TYPES, &at(2)).is_some(),
                resolves,
                "refcnt {refcnt:#x}"
            );
            mem.set_u64(0x3000_0000, 1);
            mem.set_u64(0x3000_1000, refcnt);
            assert_eq!(
                resolve_one(&mem, layout, &TYPES, &at(2)).is_some(),
                resolves,
                "filename refcnt {refcnt:#x}"
            );
            assert_eq!(
                read_str(&mem, layout, &TYPES, 0x3000_1000).is_some(),
                resolves,
                "str refcnt {refcnt:#x}"
            );
        }
        mem.set_u64(0x3000_0000, 1);
        mem.set_u64(0x3000_1000, 1);
        // Unknown offset: the first line.
        assert_eq!(resolve_one(&mem, layout, &TYPES, &at(-1)).unwrap().line, 87);
        // Offset past the table: also the first line.
        assert_eq!(
            resolve_one(&mem, layout, &TYPES, &at(400)).unwrap().line,
            87
        );
    }
}
