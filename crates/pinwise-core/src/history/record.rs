//! The per-allocation record: 32 bytes, whatever the allocation's history.
//!
//! Everything else about an allocation is found through it: its process and call site
//! through its slot (see [`super::tables`]), its events through the chain whose first chunk
//! sits at the record's own index in the event arena (see [`super::arena`]), its exact
//! counters through the events (or a side table once its events were capped).

use serde::{Deserialize, Serialize};

use crate::event::HostMemKind;
use crate::stack::StackId;

/// Index of a record in its history: records are numbered in the order they were created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RecordId(pub u32);

/// What kind of host memory a record describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AllocKind {
    /// Ordinary pageable memory whose allocation was seen.
    Pageable,
    /// Page-locked memory allocated by CUDA.
    PinnedAlloc,
    /// Memory that was registered (page-locked) when it became known: either an allocation
    /// reported as registered, or a registration of memory whose allocation was not seen.
    Registered,
    /// Memory whose allocation was never seen: the history made the record when a transfer
    /// touched an address in no known allocation, and it covers the addresses transfers used.
    Untracked,
}

impl AllocKind {
    /// The spelling in dumps: `PAGEABLE`, `PINNED_ALLOC`, `REGISTERED`, `UNTRACKED`.
    pub const fn as_str(self) -> &'static str {
        match self {
            AllocKind::Pageable => "PAGEABLE",
            AllocKind::PinnedAlloc => "PINNED_ALLOC",
            AllocKind::Registered => "REGISTERED",
            AllocKind::Untracked => "UNTRACKED",
        }
    }

    /// Parses [`AllocKind::as_str`]'s spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "PAGEABLE" => AllocKind::Pageable,
            "PINNED_ALLOC" => AllocKind::PinnedAlloc,
            "REGISTERED" => AllocKind::Registered,
            "UNTRACKED" => AllocKind::Untracked,
            _ => return None,
        })
    }

    /// Whether memory of this kind is page-locked from the start.
    pub const fn pinned_from_start(self) -> bool {
        matches!(self, AllocKind::PinnedAlloc | AllocKind::Registered)
    }

    const fn bits(self) -> u8 {
        match self {
            AllocKind::Pageable => 0,
            AllocKind::PinnedAlloc => 1,
            AllocKind::Registered => 2,
            AllocKind::Untracked => 3,
        }
    }

    const fn from_bits(bits: u8) -> Self {
        match bits & 3 {
            0 => AllocKind::Pageable,
            1 => AllocKind::PinnedAlloc,
            2 => AllocKind::Registered,
            _ => AllocKind::Untracked,
        }
    }
}

impl From<HostMemKind> for AllocKind {
    fn from(kind: HostMemKind) -> Self {
        match kind {
            HostMemKind::Pageable => AllocKind::Pageable,
            HostMemKind::PinnedAlloc => AllocKind::PinnedAlloc,
            HostMemKind::Registered => AllocKind::Registered,
        }
    }
}

/// Where an allocation's life stands (its final state once the trace is over).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AllocState {
    /// Still allocated.
    Live,
    /// Freed (a free of its start address was seen).
    Freed,
    /// A new allocation was made over its addresses before any free of it was seen (the
    /// free was missed, or untracked memory turned out to belong to a new allocation).
    Replaced,
    /// Its addresses were unmapped (`munmap`) while it was live.
    Unmapped,
    /// Its process exited while it was live.
    Exited,
}

impl AllocState {
    /// The spelling in dumps: `LIVE`, `FREED`, `REPLACED`, `UNMAPPED`, `EXITED`.
    pub const fn as_str(self) -> &'static str {
        match self {
            AllocState::Live => "LIVE",
            AllocState::Freed => "FREED",
            AllocState::Replaced => "REPLACED",
            AllocState::Unmapped => "UNMAPPED",
            AllocState::Exited => "EXITED",
        }
    }

    /// Parses [`AllocState::as_str`]'s spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "LIVE" => AllocState::Live,
            "FREED" => AllocState::Freed,
            "REPLACED" => AllocState::Replaced,
            "UNMAPPED" => AllocState::Unmapped,
            "EXITED" => AllocState::Exited,
            _ => return None,
        })
    }

    const fn bits(self) -> u8 {
        match self {
            AllocState::Live => 0,
            AllocState::Freed => 1,
            AllocState::Replaced => 2,
            AllocState::Unmapped => 3,
            AllocState::Exited => 4,
        }
    }

    const fn from_bits(bits: u8) -> Self {
        match bits & 7 {
            0 => AllocState::Live,
            1 => AllocState::Freed,
            2 => AllocState::Replaced,
            3 => AllocState::Unmapped,
            _ => AllocState::Exited,
        }
    }
}

/// Largest size a record can hold (56 bits, 64 PiB); larger sizes are clamped.
pub const MAX_SIZE: u64 = (1 << 56) - 1;

const KIND_SHIFT: u32 = 56;
const STATE_SHIFT: u32 = 58;
const PINNED_SEEN_BIT: u64 = 1 << 61;
const CAPPED_BIT: u64 = 1 << 62;

/// One allocation, in 32 bytes.
///
/// The two 64-bit fields are stored as pairs of `u32` so that the record is 4-byte aligned
/// and packs without padding. `size_flags` packs the size (low 56 bits) with the kind
/// (2 bits), the state (3 bits), whether pages of it were ever pinned by a registration
/// (1 bit) and whether its events were capped (1 bit).
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub(crate) struct AllocRecord {
    /// First byte (low, high halves).
    start: [u32; 2],
    /// Size and flags (low, high halves).
    size_flags_halves: [u32; 2],
    /// The (process, call site) slot the allocation came from.
    pub slot: u32,
    /// Call number at that site in that process (0: no allocation was seen).
    pub call_no: u32,
    /// Transfers attributed to it, saturating at `u32::MAX` (exact counts: see counters).
    pub transfers: u32,
    /// The stack of the event that made it, when the source captured one.
    pub stack: Option<StackId>,
}

const _: () = assert!(std::mem::size_of::<AllocRecord>() == 32);

const fn halves(v: u64) -> [u32; 2] {
    [v as u32, (v >> 32) as u32]
}

const fn whole(h: [u32; 2]) -> u64 {
    h[0] as u64 | ((h[1] as u64) << 32)
}

impl AllocRecord {
    pub fn new(start: u64, size: u64, kind: AllocKind, slot: u32, call_no: u32) -> Self {
        AllocRecord {
            start: halves(start),
            size_flags_halves: halves(size.min(MAX_SIZE) | (u64::from(kind.bits()) << KIND_SHIFT)),
            slot,
            call_no,
            transfers: 0,
            stack: None,
        }
    }

    /// Size and flags, packed (what [`Self::size`], [`Self::kind`], [`Self::state`] and the
    /// flag accessors read).
    #[inline]
    pub fn size_flags(&self) -> u64 {
        whole(self.size_flags_halves)
    }

    #[inline]
    fn set_size_flags(&mut self, v: u64) {
        self.size_flags_halves = halves(v);
    }

    /// First byte.
    #[inline]
    pub fn start(&self) -> u64 {
        whole(self.start)
    }

    #[inline]
    pub fn size(&self) -> u64 {
        self.size_flags() & MAX_SIZE
    }

    #[inline]
    pub fn end(&self) -> u64 {
        self.start().saturating_add(self.size())
    }

    pub fn set_size(&mut self, size: u64) {
        self.set_size_flags((self.size_flags() & !MAX_SIZE) | size.min(MAX_SIZE));
    }

    #[inline]
    pub fn kind(&self) -> AllocKind {
        AllocKind::from_bits((self.size_flags() >> KIND_SHIFT) as u8)
    }

    #[inline]
    pub fn state(&self) -> AllocState {
        AllocState::from_bits((self.size_flags() >> STATE_SHIFT) as u8)
    }

    pub fn set_state(&mut self, state: AllocState) {
        self.set_size_flags(
            (self.size_flags() & !(7 << STATE_SHIFT)) | (u64::from(state.bits()) << STATE_SHIFT),
        );
    }

    #[inline]
    pub fn pinned_seen(&self) -> bool {
        self.size_flags() & PINNED_SEEN_BIT != 0
    }

    pub fn set_pinned_seen(&mut self) {
        self.set_size_flags(self.size_flags() | PINNED_SEEN_BIT);
    }

    #[inline]
    pub fn capped(&self) -> bool {
        self.size_flags() & CAPPED_BIT != 0
    }

    pub fn set_capped(&mut self) {
        self.set_size_flags(self.size_flags() | CAPPED_BIT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_do_not_disturb_the_size() {
        let mut r = AllocRecord::new(0x7fff_1234_5000, 12345, AllocKind::Untracked, 7, 3);
        assert_eq!(r.start(), 0x7fff_1234_5000);
        r.set_state(AllocState::Exited);
        r.set_pinned_seen();
        r.set_capped();
        assert_eq!(r.size(), 12345);
        assert_eq!(r.kind(), AllocKind::Untracked);
        assert_eq!(r.state(), AllocState::Exited);
        assert!(r.pinned_seen() && r.capped());
        r.set_size(99);
        r.set_state(AllocState::Freed);
        assert_eq!(r.size(), 99);
        assert_eq!(r.state(), AllocState::Freed);
        assert_eq!(r.kind(), AllocKind::Untracked);
        assert_eq!(r.end(), 0x7fff_1234_5000 + 99);
        assert_eq!(
            AllocRecord::new(0, u64::MAX, AllocKind::Pageable, 0, 0).size(),
            MAX_SIZE
        );
    }

    #[test]
    fn spellings_round_trip() {
        for k in [
            AllocKind::Pageable,
            AllocKind::PinnedAlloc,
            AllocKind::Registered,
            AllocKind::Untracked,
        ] {
            assert_eq!(AllocKind::parse(k.as_str()), Some(k));
        }
        for s in [
            AllocState::Live,
            AllocState::Freed,
            AllocState::Replaced,
            AllocState::Unmapped,
            AllocState::Exited,
        ] {
            assert_eq!(AllocState::parse(s.as_str()), Some(s));
        }
        assert_eq!(AllocState::parse("live"), None);
    }
}
