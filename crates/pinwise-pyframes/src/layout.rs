//! Per-version offsets into CPython's structures (x86-64 and other LP64 Linux targets).
//!
//! Every number here was printed by `tools/offsets.c` (beside this crate), compiled with
//! `offsetof` against the headers of CPython 3.10.13, 3.11.7, 3.12.1 and 3.13.0
//! (`-DPy_BUILD_CORE`, internal headers included); `tools/offsets.txt` holds its output.
//! The structures read are those py-spy and the eBPF profilers read; CPython keeps them
//! stable within a minor version, but `_PyRuntimeState` is internal, so the thread-state
//! lookup is validated at run time (the thread state must point back at the main
//! interpreter; see [`crate::tss`]) and a mismatch gives no frames rather than wrong ones.
//! 3.13 states its offsets itself ([`debug313`]); detection checks them against [`V313`].

/// A CPython minor version this crate can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    /// 3.10: `PyFrameObject` chain, line table of (offset delta, line delta) pairs.
    V310,
    /// 3.11: `_PyInterpreterFrame` chain through `tstate->cframe`, location table.
    V311,
    /// 3.12: as 3.11 with shim frames owned by the C stack.
    V312,
    /// 3.13: `tstate->current_frame`, `f_executable`, `instr_ptr`.
    V313,
}

impl Version {
    /// The version for a `(major, minor)` pair, if supported.
    pub fn from_minor(major: u32, minor: u32) -> Option<Version> {
        match (major, minor) {
            (3, 10) => Some(Version::V310),
            (3, 11) => Some(Version::V311),
            (3, 12) => Some(Version::V312),
            (3, 13) => Some(Version::V313),
            _ => None,
        }
    }

    /// The version of a `Py_Version`/`PY_VERSION_HEX` value (`0xMMmmppRS`).
    pub fn from_hex(hex: u64) -> Option<Version> {
        Version::from_minor(((hex >> 24) & 0xff) as u32, ((hex >> 16) & 0xff) as u32)
    }

    /// "3.10" … "3.13".
    pub fn name(self) -> &'static str {
        match self {
            Version::V310 => "3.10",
            Version::V311 => "3.11",
            Version::V312 => "3.12",
            Version::V313 => "3.13",
        }
    }

    /// The offsets of this version.
    pub fn layout(self) -> &'static Layout {
        match self {
            Version::V310 => &V310,
            Version::V311 => &V311,
            Version::V312 => &V312,
            Version::V313 => &V313,
        }
    }
}

/// How a frame names its current instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstrKind {
    /// 3.10 `f_lasti`: an `int` index in code units (2 bytes each).
    LastiIndex,
    /// 3.11+ `prev_instr`/`instr_ptr`: a pointer into the code object's
    /// `co_code_adaptive`.
    Pointer,
}

/// How the line table is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineTableKind {
    /// 3.10: (unsigned offset delta, signed line delta) byte pairs.
    Pairs310,
    /// 3.11+: the location table (`Objects/locations.md`).
    Locations311,
}

/// Offsets (bytes) into the structures read for one CPython version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// `_PyRuntimeState` → the `Py_tss_t` whose key maps a thread to its thread state
    /// (`gilstate.autoTSSkey` before 3.12, `autoTSSkey` from 3.12).
    pub runtime_tss: usize,
    /// `_PyRuntimeState.interpreters.main`.
    pub runtime_main_interp: usize,
    /// `PyThreadState.interp`.
    pub tstate_interp: usize,
    /// `PyThreadState` → the current frame: `frame` (3.10), `cframe` (3.11, 3.12),
    /// `current_frame` (3.13).
    pub tstate_frame: usize,
    /// `_PyCFrame.current_frame` when [`Layout::tstate_frame`] points at a `_PyCFrame`.
    pub cframe_current: Option<usize>,
    /// Frame → code object (`f_code`, `f_executable`).
    pub frame_code: usize,
    /// Frame → the calling frame (`f_back`, `previous`).
    pub frame_back: usize,
    /// Frame → the current instruction (`f_lasti`, `prev_instr`, `instr_ptr`).
    pub frame_instr: usize,
    /// How [`Layout::frame_instr`] is to be read.
    pub instr_kind: InstrKind,
    /// Frame → `owner` (a `char`), where frames owned by the C stack are shims to skip.
    pub frame_owner: Option<usize>,
    /// The `owner` value of shim frames (`FRAME_OWNED_BY_CSTACK`).
    pub owner_cstack: u8,
    /// Bytes to read of one frame (covers every field above).
    pub frame_size: usize,
    /// `PyCodeObject.co_firstlineno` (`int`).
    pub code_firstlineno: usize,
    /// `PyCodeObject.co_filename`.
    pub code_filename: usize,
    /// `PyCodeObject.co_name`.
    pub code_name: usize,
    /// `PyCodeObject.co_linetable` (a `bytes`).
    pub code_linetable: usize,
    /// `PyCodeObject.co_code_adaptive`: where the instructions start (3.11+).
    pub code_adaptive: Option<usize>,
    /// Line table encoding.
    pub linetable: LineTableKind,
    /// `sizeof(PyASCIIObject)`: the data of a compact ASCII string follows it.
    pub ascii_size: usize,
    /// `sizeof(PyCompactUnicodeObject)`: the data of a compact non-ASCII string follows it.
    pub compact_size: usize,
}

/// Offsets common to every supported version.
pub mod common {
    /// `PyObject.ob_type`.
    pub const OB_TYPE: usize = 8;
    /// `PyVarObject.ob_size` (a `bytes` object's length).
    pub const OB_SIZE: usize = 16;
    /// `PyBytesObject.ob_sval`.
    pub const BYTES_DATA: usize = 32;
    /// `PyASCIIObject.length`.
    pub const STR_LENGTH: usize = 16;
    /// `PyASCIIObject.state` (bit fields: interned:2, kind:3, compact:1, ascii:1).
    pub const STR_STATE: usize = 32;
    /// `Py_tss_t._key` (a `pthread_key_t`), after `int _is_initialized`.
    pub const TSS_KEY: usize = 4;
}

/// CPython 3.10 (checked against 3.10.13).
pub const V310: Layout = Layout {
    runtime_tss: 584,
    runtime_main_interp: 40,
    tstate_interp: 16,
    tstate_frame: 24,
    cframe_current: None,
    frame_code: 32,
    frame_back: 24,
    frame_instr: 96,
    instr_kind: InstrKind::LastiIndex,
    frame_owner: None,
    owner_cstack: 0,
    frame_size: 104,
    code_firstlineno: 40,
    code_filename: 104,
    code_name: 112,
    code_linetable: 120,
    code_adaptive: None,
    linetable: LineTableKind::Pairs310,
    ascii_size: 48,
    compact_size: 72,
};

/// CPython 3.11 (checked against 3.11.7).
pub const V311: Layout = Layout {
    runtime_tss: 592,
    runtime_main_interp: 48,
    tstate_interp: 16,
    tstate_frame: 56,
    cframe_current: Some(8),
    frame_code: 32,
    frame_back: 48,
    frame_instr: 56,
    instr_kind: InstrKind::Pointer,
    frame_owner: None,
    owner_cstack: 0,
    frame_size: 72,
    code_firstlineno: 72,
    code_filename: 112,
    code_name: 120,
    code_linetable: 136,
    code_adaptive: Some(184),
    linetable: LineTableKind::Locations311,
    ascii_size: 48,
    compact_size: 72,
};

/// CPython 3.12 (checked against 3.12.1).
pub const V312: Layout = Layout {
    runtime_tss: 1544,
    runtime_main_interp: 48,
    tstate_interp: 16,
    tstate_frame: 56,
    cframe_current: Some(0),
    frame_code: 0,
    frame_back: 8,
    frame_instr: 56,
    instr_kind: InstrKind::Pointer,
    frame_owner: Some(70),
    owner_cstack: 3,
    frame_size: 72,
    code_firstlineno: 68,
    code_filename: 112,
    code_name: 120,
    code_linetable: 136,
    code_adaptive: Some(192),
    linetable: LineTableKind::Locations311,
    ascii_size: 40,
    compact_size: 56,
};

/// CPython 3.13 (checked against 3.13.0).
pub const V313: Layout = Layout {
    runtime_tss: 2160,
    runtime_main_interp: 640,
    tstate_interp: 16,
    tstate_frame: 72,
    cframe_current: None,
    frame_code: 0,
    frame_back: 8,
    frame_instr: 56,
    instr_kind: InstrKind::Pointer,
    frame_owner: Some(70),
    owner_cstack: 3,
    frame_size: 72,
    code_firstlineno: 68,
    code_filename: 112,
    code_name: 120,
    code_linetable: 136,
    code_adaptive: Some(200),
    linetable: LineTableKind::Locations311,
    ascii_size: 40,
    compact_size: 56,
};

/// 3.13's `_Py_DebugOffsets`, the first field of `_PyRuntime`: the interpreter's own
/// statement of its offsets for out-of-process debuggers. Detection compares it with
/// [`V313`] and refuses the interpreter on any difference (a patch release that moved a
/// field, a free-threaded build).
pub mod debug313 {
    use super::{common, Layout};

    /// `cookie`: the first 8 bytes of `_PyRuntime`.
    pub const COOKIE: &[u8; 8] = b"xdebugpy";
    /// `version` (`PY_VERSION_HEX`).
    pub const VERSION: usize = 8;
    /// `free_threaded` (non-zero: a free-threaded build, whose objects differ).
    pub const FREE_THREADED: usize = 16;
    /// Bytes of the structure read (covers every position below).
    pub const SIZE: usize = 368;

    /// `(position in _Py_DebugOffsets, the offset our layout uses)` for every field we read.
    pub fn expected(l: &Layout) -> [(usize, u64); 12] {
        [
            (176, l.tstate_interp as u64),              // thread_state.interp
            (184, l.tstate_frame as u64),               // thread_state.current_frame
            (232, l.frame_back as u64),                 // interpreter_frame.previous
            (240, l.frame_code as u64),                 // interpreter_frame.executable
            (248, l.frame_instr as u64),                // interpreter_frame.instr_ptr
            (264, l.frame_owner.unwrap_or(0) as u64),   // interpreter_frame.owner
            (280, l.code_filename as u64),              // code_object.filename
            (288, l.code_name as u64),                  // code_object.name
            (304, l.code_linetable as u64),             // code_object.linetable
            (312, l.code_firstlineno as u64),           // code_object.firstlineno
            (344, l.code_adaptive.unwrap_or(0) as u64), // code_object.co_code_adaptive
            (360, common::OB_TYPE as u64),              // pyobject.ob_type
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Version; 4] = [Version::V310, Version::V311, Version::V312, Version::V313];

    /// The tables agree with `tools/offsets.txt`, the output of `tools/offsets.c`
    /// compiled against each version's headers.
    #[test]
    fn tables_match_the_offsets_printed_from_the_headers() {
        let text = include_str!("../tools/offsets.txt");
        let mut checked = 0;
        for v in ALL {
            let l = v.layout();
            let section = text
                .split("== ")
                .find(|s| s.starts_with(v.name()))
                .unwrap_or_else(|| panic!("no section for {} in offsets.txt", v.name()));
            let get = |key: &str| -> usize {
                section
                    .lines()
                    .find_map(|line| {
                        let mut it = line.split_whitespace();
                        (it.next() == Some(key)).then(|| it.next().unwrap().parse().unwrap())
                    })
                    .unwrap_or_else(|| panic!("{}: no {key}", v.name()))
            };
            let mut eq = |key: &str, ours: usize| {
                assert_eq!(get(key), ours, "{} {key}", v.name());
                checked += 1;
            };
            eq("runtime.autoTSSkey", l.runtime_tss);
            eq("runtime.interpreters.main", l.runtime_main_interp);
            eq("tstate.interp", l.tstate_interp);
            eq("tss._key", common::TSS_KEY);
            eq("code.co_firstlineno", l.code_firstlineno);
            eq("code.co_filename", l.code_filename);
            eq("code.co_name", l.code_name);
            eq("code.co_linetable", l.code_linetable);
            eq("bytes.ob_size", common::OB_SIZE);
            eq("bytes.ob_sval", common::BYTES_DATA);
            eq("str.length", common::STR_LENGTH);
            eq("str.state", common::STR_STATE);
            eq("sizeof.PyASCIIObject", l.ascii_size);
            eq("sizeof.PyCompactUnicodeObject", l.compact_size);
            match v {
                Version::V310 => {
                    eq("tstate.frame", l.tstate_frame);
                    eq("frame.f_back", l.frame_back);
                    eq("frame.f_code", l.frame_code);
                    eq("frame.f_lasti", l.frame_instr);
                }
                Version::V311 | Version::V312 => {
                    eq("tstate.cframe", l.tstate_frame);
                    eq("cframe.current_frame", l.cframe_current.unwrap());
                    eq("iframe.f_code", l.frame_code);
                    eq("iframe.previous", l.frame_back);
                    eq("iframe.prev_instr", l.frame_instr);
                    eq("code.co_code_adaptive", l.code_adaptive.unwrap());
                }
                Version::V313 => {
                    eq("tstate.current_frame", l.tstate_frame);
                    eq("iframe.f_executable", l.frame_code);
                    eq("iframe.previous", l.frame_back);
                    eq("iframe.instr_ptr", l.frame_instr);
                    eq("code.co_code_adaptive", l.code_adaptive.unwrap());
                }
            }
            if v == Version::V313 {
                let names = [
                    "debug.thread_state.interp",
                    "debug.thread_state.current_frame",
                    "debug.interpreter_frame.previous",
                    "debug.interpreter_frame.executable",
                    "debug.interpreter_frame.instr_ptr",
                    "debug.interpreter_frame.owner",
                    "debug.code_object.filename",
                    "debug.code_object.name",
                    "debug.code_object.linetable",
                    "debug.code_object.firstlineno",
                    "debug.code_object.co_code_adaptive",
                    "debug.pyobject.ob_type",
                ];
                for ((pos, _), name) in debug313::expected(l).iter().zip(names) {
                    eq(name, *pos);
                    assert!(pos + 8 <= debug313::SIZE);
                }
                eq("debug.version", debug313::VERSION);
                eq("debug.free_threaded", debug313::FREE_THREADED);
            }
            if let Some(owner) = l.frame_owner {
                eq("iframe.owner", owner);
                eq("FRAME_OWNED_BY_CSTACK", l.owner_cstack as usize);
            }
        }
        assert!(checked >= 4 * 20, "only {checked} offsets checked");
    }

    /// Structural checks: pointers aligned, every field inside the bytes read.
    #[test]
    fn frame_fields_lie_inside_the_bytes_read_and_pointers_are_aligned() {
        for v in ALL {
            let l = v.layout();
            for (what, off) in [
                ("frame_code", l.frame_code),
                ("frame_back", l.frame_back),
                ("frame_instr", l.frame_instr),
                ("tstate_frame", l.tstate_frame),
                ("tstate_interp", l.tstate_interp),
                ("runtime_main_interp", l.runtime_main_interp),
                ("code_filename", l.code_filename),
                ("code_name", l.code_name),
                ("code_linetable", l.code_linetable),
            ] {
                assert_eq!(off % 8, 0, "{} {what} misaligned", v.name());
            }
            let instr_len = if l.instr_kind == InstrKind::LastiIndex {
                4
            } else {
                8
            };
            assert!(l.frame_code + 8 <= l.frame_size, "{}", v.name());
            assert!(l.frame_back + 8 <= l.frame_size, "{}", v.name());
            assert!(l.frame_instr + instr_len <= l.frame_size, "{}", v.name());
            if let Some(o) = l.frame_owner {
                assert!(o < l.frame_size, "{}", v.name());
            }
            assert_eq!(l.code_firstlineno % 4, 0);
            assert_eq!(l.code_adaptive.is_some(), v != Version::V310);
            assert_eq!(l.runtime_tss % 4, 0);
        }
    }

    #[test]
    fn versions_from_hex_and_minor() {
        assert_eq!(Version::from_hex(0x030C03F0), Some(Version::V312));
        assert_eq!(Version::from_hex(0x030B07F0), Some(Version::V311));
        assert_eq!(Version::from_hex(0x030A0DF0), Some(Version::V310));
        assert_eq!(Version::from_hex(0x030D00F0), Some(Version::V313));
        assert_eq!(Version::from_hex(0x030E00F0), None);
        assert_eq!(Version::from_hex(0x03090000), None);
        assert_eq!(Version::from_minor(2, 7), None);
    }
}
