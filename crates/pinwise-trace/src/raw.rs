//! Ring-buffer records, decoded into owned values.
//!
//! The layouts are those of `src/bpf/pinwise_events.h`; the Rust structs are generated from
//! the BPF object's BTF (see [`crate::skel`]), never written by hand. Decoding checks the
//! record's length against the struct it claims to be and copies it out.

use crate::skel::main::types as c;

pub use c::{
    pw_copy_event as CopyRecord, pw_copy_fp_event as CopyFpRecord,
    pw_copy_stack_event as CopyStackRecord, pw_fault_event as FaultRecord, pw_fp as FpRecord,
    pw_header as Header, pw_late_fp_event as LateFpRecord, pw_pin_event as PinRecord,
    pw_proc_event as ProcRecord, pw_py_stack as PyStackRecord, pw_range_event as RangeRecord,
    pw_release_event as ReleaseRecord, pw_unwind_event as UnwindRecord,
};

/// One decoded ring-buffer record.
#[derive(Debug, Clone)]
pub enum RawEvent {
    /// A copy (any copy entry point).
    Copy(CopyRecord),
    /// A copy sampled for its call chain.
    CopyStack(Box<CopyStackRecord>),
    /// A host-to-device copy with the fingerprint lines of its source.
    CopyFp(Box<CopyFpRecord>),
    /// The fingerprint of an asynchronous download, once a call guaranteed it completed.
    LateFp(Box<LateFpRecord>),
    /// A host allocation, registration, device allocation or mmap (with a stack window).
    Range(Box<RangeRecord>),
    /// A host free, unregistration, device free or munmap.
    Release(ReleaseRecord),
    /// Pages locked or unlocked by the nvidia module.
    Pin(PinRecord),
    /// A user page fault.
    Fault(FaultRecord),
    /// Fork, exit, exec, or an executable file mapping of a traced process.
    Proc(ProcRecord),
    /// Registers and user stack for the allocation record that follows (`--dwarf-stacks`).
    Unwind(Box<UnwindRecord>),
}

impl RawEvent {
    /// The record's common header.
    pub fn header(&self) -> &Header {
        match self {
            RawEvent::Copy(r) => &r.h,
            RawEvent::CopyStack(r) => &r.copy.h,
            RawEvent::CopyFp(r) => &r.copy.h,
            RawEvent::LateFp(r) => &r.h,
            RawEvent::Range(r) => &r.h,
            RawEvent::Release(r) => &r.h,
            RawEvent::Pin(r) => &r.h,
            RawEvent::Fault(r) => &r.h,
            RawEvent::Proc(r) => &r.h,
            RawEvent::Unwind(r) => &r.h,
        }
    }
}

/// Why a record could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Shorter than the struct its kind names.
    #[error("ring-buffer record of kind {kind} is {len} bytes, expected at least {expected}")]
    Truncated {
        /// The record's kind.
        kind: u16,
        /// Its length.
        len: usize,
        /// The struct's size.
        expected: usize,
    },
    /// A kind this build does not know.
    #[error("ring-buffer record of unknown kind {0}")]
    UnknownKind(u16),
}

/// Types that may be copied out of arbitrary bytes: `#[repr(C)]` structs made only of
/// integers and integer arrays, for which every bit pattern is a valid value.
///
/// # Safety
/// Implement only for such types.
unsafe trait Plain: Copy {}

// SAFETY: generated from BTF as #[repr(C)] structs of u8/u16/u32/u64/i32 fields and arrays
// of them (see pinwise_events.h); every bit pattern is valid.
unsafe impl Plain for Header {}
// SAFETY: as above.
unsafe impl Plain for CopyRecord {}
// SAFETY: as above.
unsafe impl Plain for CopyStackRecord {}
// SAFETY: as above.
unsafe impl Plain for CopyFpRecord {}
// SAFETY: as above.
unsafe impl Plain for LateFpRecord {}
// SAFETY: as above.
unsafe impl Plain for RangeRecord {}
// SAFETY: as above.
unsafe impl Plain for ReleaseRecord {}
// SAFETY: as above.
unsafe impl Plain for PinRecord {}
// SAFETY: as above.
unsafe impl Plain for FaultRecord {}
// SAFETY: as above.
unsafe impl Plain for ProcRecord {}
// SAFETY: as above.
unsafe impl Plain for UnwindRecord {}

fn read<T: Plain>(bytes: &[u8], kind: u16) -> Result<T, DecodeError> {
    let expected = std::mem::size_of::<T>();
    if bytes.len() < expected {
        return Err(DecodeError::Truncated {
            kind,
            len: bytes.len(),
            expected,
        });
    }
    // SAFETY: `bytes` holds at least size_of::<T>() bytes (checked above), the read is
    // unaligned-safe, and T: Plain accepts any bit pattern.
    Ok(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

const fn kind(k: c::pw_kind) -> u16 {
    k.0 as u16
}

/// Decodes one record.
pub fn decode(bytes: &[u8]) -> Result<RawEvent, DecodeError> {
    let header: Header = read(bytes, 0)?;
    let k = header.kind;
    Ok(match k {
        _ if k == kind(c::pw_kind::PW_EV_COPY) => RawEvent::Copy(read(bytes, k)?),
        _ if k == kind(c::pw_kind::PW_EV_COPY_STACK) => {
            RawEvent::CopyStack(Box::new(read(bytes, k)?))
        }
        _ if k == kind(c::pw_kind::PW_EV_COPY_FP) => RawEvent::CopyFp(Box::new(read(bytes, k)?)),
        _ if k == kind(c::pw_kind::PW_EV_LATE_FP) => RawEvent::LateFp(Box::new(read(bytes, k)?)),
        _ if k == kind(c::pw_kind::PW_EV_HOST_ALLOC)
            || k == kind(c::pw_kind::PW_EV_HOST_REGISTER)
            || k == kind(c::pw_kind::PW_EV_DEV_ALLOC)
            || k == kind(c::pw_kind::PW_EV_MMAP)
            || k == kind(c::pw_kind::PW_EV_MALLOC) =>
        {
            RawEvent::Range(Box::new(read(bytes, k)?))
        }
        _ if k == kind(c::pw_kind::PW_EV_HOST_FREE)
            || k == kind(c::pw_kind::PW_EV_HOST_UNREGISTER)
            || k == kind(c::pw_kind::PW_EV_DEV_FREE)
            || k == kind(c::pw_kind::PW_EV_MUNMAP)
            || k == kind(c::pw_kind::PW_EV_MALLOC_FREE) =>
        {
            RawEvent::Release(read(bytes, k)?)
        }
        _ if k == kind(c::pw_kind::PW_EV_PIN_PAGES) || k == kind(c::pw_kind::PW_EV_UNPIN_PAGES) => {
            RawEvent::Pin(read(bytes, k)?)
        }
        _ if k == kind(c::pw_kind::PW_EV_PAGE_FAULT) => RawEvent::Fault(read(bytes, k)?),
        _ if k == kind(c::pw_kind::PW_EV_PROC_FORK)
            || k == kind(c::pw_kind::PW_EV_PROC_EXIT)
            || k == kind(c::pw_kind::PW_EV_PROC_EXEC)
            || k == kind(c::pw_kind::PW_EV_EXEC_MAP)
            || k == kind(c::pw_kind::PW_EV_PROC_ENROLL) =>
        {
            RawEvent::Proc(read(bytes, k)?)
        }
        _ if k == kind(c::pw_kind::PW_EV_UNWIND) => RawEvent::Unwind(Box::new(read(bytes, k)?)),
        _ => return Err(DecodeError::UnknownKind(k)),
    })
}

/// Record kinds, as constants usable in `match` (from `enum pw_kind`).
pub mod kinds {
    use super::c::pw_kind as k;
    /// See `PW_EV_HOST_ALLOC`.
    pub const HOST_ALLOC: u16 = k::PW_EV_HOST_ALLOC.0 as u16;
    /// See `PW_EV_HOST_REGISTER`.
    pub const HOST_REGISTER: u16 = k::PW_EV_HOST_REGISTER.0 as u16;
    /// See `PW_EV_DEV_ALLOC`.
    pub const DEV_ALLOC: u16 = k::PW_EV_DEV_ALLOC.0 as u16;
    /// See `PW_EV_MMAP`.
    pub const MMAP: u16 = k::PW_EV_MMAP.0 as u16;
    /// See `PW_EV_HOST_FREE`.
    pub const HOST_FREE: u16 = k::PW_EV_HOST_FREE.0 as u16;
    /// See `PW_EV_HOST_UNREGISTER`.
    pub const HOST_UNREGISTER: u16 = k::PW_EV_HOST_UNREGISTER.0 as u16;
    /// See `PW_EV_DEV_FREE`.
    pub const DEV_FREE: u16 = k::PW_EV_DEV_FREE.0 as u16;
    /// See `PW_EV_MUNMAP`.
    pub const MUNMAP: u16 = k::PW_EV_MUNMAP.0 as u16;
    /// See `PW_EV_COPY`.
    pub const COPY: u16 = k::PW_EV_COPY.0 as u16;
    /// See `PW_EV_MALLOC`.
    pub const MALLOC: u16 = k::PW_EV_MALLOC.0 as u16;
    /// See `PW_EV_MALLOC_FREE`.
    pub const MALLOC_FREE: u16 = k::PW_EV_MALLOC_FREE.0 as u16;
    /// See `PW_EV_COPY_STACK`.
    pub const COPY_STACK: u16 = k::PW_EV_COPY_STACK.0 as u16;
    /// See `PW_EV_COPY_FP`.
    pub const COPY_FP: u16 = k::PW_EV_COPY_FP.0 as u16;
    /// See `PW_EV_LATE_FP`.
    pub const LATE_FP: u16 = k::PW_EV_LATE_FP.0 as u16;
    /// See `PW_EV_PIN_PAGES`.
    pub const PIN_PAGES: u16 = k::PW_EV_PIN_PAGES.0 as u16;
    /// See `PW_EV_UNPIN_PAGES`.
    pub const UNPIN_PAGES: u16 = k::PW_EV_UNPIN_PAGES.0 as u16;
    /// See `PW_EV_PAGE_FAULT`.
    pub const PAGE_FAULT: u16 = k::PW_EV_PAGE_FAULT.0 as u16;
    /// See `PW_EV_PROC_FORK`.
    pub const PROC_FORK: u16 = k::PW_EV_PROC_FORK.0 as u16;
    /// See `PW_EV_PROC_EXIT`.
    pub const PROC_EXIT: u16 = k::PW_EV_PROC_EXIT.0 as u16;
    /// See `PW_EV_PROC_EXEC`.
    pub const PROC_EXEC: u16 = k::PW_EV_PROC_EXEC.0 as u16;
    /// See `PW_EV_EXEC_MAP`.
    pub const EXEC_MAP: u16 = k::PW_EV_EXEC_MAP.0 as u16;
    /// See `PW_EV_PROC_ENROLL`.
    pub const PROC_ENROLL: u16 = k::PW_EV_PROC_ENROLL.0 as u16;
}

/// CUDA memory types of copy sides (from `enum pw_memtype`).
pub mod memtypes {
    use super::c::pw_memtype as m;
    /// The copy form does not say.
    pub const UNSPECIFIED: u8 = m::PW_MEM_UNSPECIFIED.0 as u8;
    /// `CU_MEMORYTYPE_HOST`.
    pub const HOST: u8 = m::PW_MEM_HOST.0 as u8;
    /// `CU_MEMORYTYPE_DEVICE`.
    pub const DEVICE: u8 = m::PW_MEM_DEVICE.0 as u8;
    /// `CU_MEMORYTYPE_ARRAY`.
    pub const ARRAY: u8 = m::PW_MEM_ARRAY.0 as u8;
    /// `CU_MEMORYTYPE_UNIFIED`.
    pub const UNIFIED: u8 = m::PW_MEM_UNIFIED.0 as u8;
}

/// Where a range record's call site came from (from `enum pw_site_source`).
pub mod site_sources {
    use super::c::pw_site_source as s;
    /// None: look in the stack window.
    pub const NONE: u8 = s::PW_SITE_NONE.0 as u8;
    /// The caller of a runtime allocation function.
    pub const RUNTIME: u8 = s::PW_SITE_RUNTIME.0 as u8;
    /// The caller of the driver function.
    pub const DRIVER: u8 = s::PW_SITE_DRIVER.0 as u8;
}

/// What came of reading an event's Python frames (`pw_py_stack.status`, from `enum
/// pw_py_status`).
pub mod py_status {
    use super::c::pw_py_status as s;
    /// Not a Python process: nothing tried.
    pub const NONE: u32 = s::PW_PY_NONE.0;
    /// Read.
    pub const OK: u32 = s::PW_PY_OK.0;
    /// The thread has no Python thread state.
    pub const NO_THREAD: u32 = s::PW_PY_NO_THREAD.0;
    /// Unreadable, or not the main interpreter's thread state.
    pub const FAILED: u32 = s::PW_PY_FAILED.0;
    /// Read, but cut short.
    pub const TRUNCATED: u32 = s::PW_PY_TRUNCATED.0;
}

/// Indexes of the BPF-side counters (from `enum pw_counter`).
pub mod counters {
    use super::c::pw_counter as k;
    /// Ring buffer full: event dropped.
    pub const RINGBUF_DROPS: u32 = k::PW_CNT_RINGBUF_DROPS.0;
    /// `pending` (or `mmap_calls`) map full: a call's event lost.
    pub const PENDING_FULL: u32 = k::PW_CNT_PENDING_FULL.0;
    /// A return without its entry.
    pub const RETURN_WITHOUT_ENTRY: u32 = k::PW_CNT_RETURN_WITHOUT_ENTRY.0;
    /// Reading user memory failed.
    pub const USER_READ_FAILED: u32 = k::PW_CNT_USER_READ_FAILED.0;
    /// `traced_tgids` full.
    pub const TGID_MAP_FULL: u32 = k::PW_CNT_TGID_MAP_FULL.0;
    /// Number of counters.
    pub const COUNT: u32 = k::PW_CNT_COUNT.0;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of<T: Plain>(value: &T) -> Vec<u8> {
        let size = std::mem::size_of::<T>();
        let mut out = vec![0u8; size];
        // SAFETY: T is Plain (no pointers, no invariants); copying its bytes is sound and
        // `out` has exactly size_of::<T>() bytes.
        unsafe {
            std::ptr::copy_nonoverlapping((value as *const T).cast::<u8>(), out.as_mut_ptr(), size)
        };
        out
    }

    #[test]
    fn decodes_a_copy_record() {
        let mut rec = CopyRecord::default();
        rec.h.kind = kinds::COPY;
        rec.h.pid = 42;
        rec.dst = 0x1000;
        rec.src = 0x2000;
        rec.bytes = 4096;
        rec.is_async = 1;
        match decode(&bytes_of(&rec)).unwrap() {
            RawEvent::Copy(got) => {
                assert_eq!(got.h.pid, 42);
                assert_eq!(got.dst, 0x1000);
                assert_eq!(got.src, 0x2000);
                assert_eq!(got.bytes, 4096);
                assert_eq!(got.is_async, 1);
            }
            other => panic!("decoded as {other:?}"),
        }
    }

    #[test]
    fn rejects_truncated_and_unknown_records() {
        let mut rec = RangeRecord::default();
        rec.h.kind = kinds::HOST_ALLOC;
        let bytes = bytes_of(&rec);
        assert!(matches!(
            decode(&bytes[..100]),
            Err(DecodeError::Truncated { kind, len: 100, .. }) if kind == kinds::HOST_ALLOC
        ));
        assert!(matches!(
            decode(&bytes[..8]),
            Err(DecodeError::Truncated { kind: 0, .. })
        ));
        let hdr = Header {
            kind: 999,
            ..Header::default()
        };
        assert!(matches!(
            decode(&bytes_of(&hdr)),
            Err(DecodeError::UnknownKind(999))
        ));
    }

    #[test]
    fn layout_matches_the_c_header() {
        // Sizes the C compiler gives these structs (checked by hand against
        // pinwise_events.h); a change there must show up here.
        assert_eq!(std::mem::size_of::<Header>(), 24);
        assert_eq!(std::mem::size_of::<CopyRecord>(), 24 + 5 * 8 + 8);
        // A Python stack: nframes, status, 32 (code, instr) pairs.
        let py = 8 + 32 * 16;
        assert_eq!(std::mem::size_of::<PyStackRecord>(), py);
        // ..., stack_len, nframes, _pad1, frames[32], py, stack[1024].
        assert_eq!(
            std::mem::size_of::<RangeRecord>(),
            24 + 7 * 8 + 8 + 8 + 8 + 32 * 8 + py + 1024
        );
        // Fingerprint lines: state, full_state, full, 8 lines of 64 bytes.
        let fp = 16 + 8 * 64;
        assert_eq!(std::mem::size_of::<FpRecord>(), fp);
        assert_eq!(
            std::mem::size_of::<CopyStackRecord>(),
            std::mem::size_of::<CopyRecord>() + 8 + 32 * 8 + py + fp
        );
        assert_eq!(
            std::mem::size_of::<CopyFpRecord>(),
            std::mem::size_of::<CopyRecord>() + fp
        );
        // Header, copy_ts_ns, copy_tid, _pad0, fp.
        assert_eq!(std::mem::size_of::<LateFpRecord>(), 24 + 8 + 8 + fp);
        assert_eq!(std::mem::size_of::<ReleaseRecord>(), 24 + 3 * 8);
    }
}
