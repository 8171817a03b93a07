//! How one retained event is written as bytes, and read back.
//!
//! An event is written relative to its allocation record and to the event before it in the
//! same record, so that a typical transfer takes 5 to 8 bytes:
//!
//! ```text
//! head      1 byte   kind (bits 0-3, never 0), probe (bits 4-6), has call site (bit 7)
//! ts        varint   zigzag(ts - previous ts of this record); the first event: its ts
//! ...       fields of the kind (below)
//! site      varint   index of the call site in the history's site table, if bit 7
//! ```
//!
//! | kind | fields |
//! |---|---|
//! | ALLOC | CUDA flags |
//! | FREE | none |
//! | PIN_PAGES | zigzag(start - record start), bytes, pages + 1 (0: unknown) |
//! | UNPIN_PAGES | zigzag(start - record start), pages + 1 (0: unknown) |
//! | DEVICE_TRANSFER | flags byte (direction bits 0-1, async 2, pinned 3, reported host state 4-5, has offset 6, has stream 7); bytes (0: the record's size, else bytes + 1); offset from record start if bit 6; stream index if bit 7 |
//! | MMAP, MUNMAP | zigzag(start - record start), length |
//! | PAGE_FAULT | zigzag(address - record start) |
//!
//! A zero head byte ends a record's events (the arena's unused bytes are zero).
//! The same bytes are what the binary dump stores, so this layout is part of that format.

use serde::{Deserialize, Serialize};

use crate::event::{Direction, HostState, ProbeKind};
use crate::tag::Site;
use crate::varint::{self, ByteSource, VarintError};

/// The most bytes one encoded event takes.
pub(crate) const MAX_EVENT_LEN: usize = 1 + 1 + 5 * varint::MAX_LEN;

/// An event as the history retains it: what a report needs, relative data made absolute
/// again. (Not retained: the thread id and the device pointer of a transfer.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedEvent {
    /// When it happened (ns, `CLOCK_MONOTONIC`).
    pub ts_ns: u64,
    /// Which probe saw it.
    pub probe: ProbeKind,
    /// The call site, when the source knew it.
    pub site: Option<Site>,
    /// What happened.
    pub what: Recorded,
}

/// What a retained event says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Recorded {
    /// The allocation was made (with these CUDA flags, 0 when none).
    Alloc {
        /// `CU_MEMHOSTALLOC_*` flags.
        flags: u32,
    },
    /// The allocation was freed.
    Free,
    /// Pages were locked.
    PinPages {
        /// First byte locked.
        start: u64,
        /// Bytes locked (0 when only pages were known).
        bytes: u64,
        /// Pages locked, when known.
        pages: Option<u64>,
    },
    /// Pages were unlocked.
    UnpinPages {
        /// First byte unlocked.
        start: u64,
        /// Pages unlocked, when known.
        pages: Option<u64>,
    },
    /// A copy touched the allocation.
    Transfer {
        /// Which way.
        direction: Direction,
        /// Bytes copied.
        bytes: u64,
        /// The host pointer of the copy (inside the allocation).
        host: u64,
        /// An `*Async` copy.
        is_async: bool,
        /// The CUDA stream (0: the default stream).
        stream: u64,
        /// Whether the host side was pinned (as the source said, or as the history knew).
        pinned: bool,
        /// What the source itself reported about the host side.
        reported: HostState,
    },
    /// A mapping appeared over the allocation's addresses.
    Mmap {
        /// First byte.
        start: u64,
        /// Length.
        len: u64,
    },
    /// A mapping over the allocation's addresses went away.
    Munmap {
        /// First byte.
        start: u64,
        /// Length.
        len: u64,
    },
    /// A page fault inside the allocation.
    PageFault {
        /// Faulting address.
        addr: u64,
    },
}

impl Recorded {
    /// The event type as the JSON dump spells it: `ALLOC`, `FREE`, `PIN_PAGES`,
    /// `UNPIN_PAGES`, `DEVICE_TRANSFER`, `MMAP`, `MUNMAP`, `PAGE_FAULT`.
    pub const fn type_name(&self) -> &'static str {
        match self {
            Recorded::Alloc { .. } => "ALLOC",
            Recorded::Free => "FREE",
            Recorded::PinPages { .. } => "PIN_PAGES",
            Recorded::UnpinPages { .. } => "UNPIN_PAGES",
            Recorded::Transfer { .. } => "DEVICE_TRANSFER",
            Recorded::Mmap { .. } => "MMAP",
            Recorded::Munmap { .. } => "MUNMAP",
            Recorded::PageFault { .. } => "PAGE_FAULT",
        }
    }

    const fn code(&self) -> u8 {
        match self {
            Recorded::Alloc { .. } => 1,
            Recorded::Free => 2,
            Recorded::PinPages { .. } => 3,
            Recorded::UnpinPages { .. } => 4,
            Recorded::Transfer { .. } => 5,
            Recorded::Mmap { .. } => 6,
            Recorded::Munmap { .. } => 7,
            Recorded::PageFault { .. } => 8,
        }
    }
}

pub(crate) const fn probe_code(p: ProbeKind) -> u8 {
    match p {
        ProbeKind::Uprobe => 0,
        ProbeKind::KernelHook => 1,
        ProbeKind::Tracepoint => 2,
        ProbeKind::InProcessHook => 3,
        ProbeKind::AllocatorCallback => 4,
    }
}

fn probe_from_code(c: u8) -> Option<ProbeKind> {
    Some(match c {
        0 => ProbeKind::Uprobe,
        1 => ProbeKind::KernelHook,
        2 => ProbeKind::Tracepoint,
        3 => ProbeKind::InProcessHook,
        4 => ProbeKind::AllocatorCallback,
        _ => return None,
    })
}

/// Parses [`ProbeKind::as_str`]'s spelling.
pub fn parse_probe(s: &str) -> Option<ProbeKind> {
    Some(match s {
        "uprobe" => ProbeKind::Uprobe,
        "kernel_hook" => ProbeKind::KernelHook,
        "tracepoint" => ProbeKind::Tracepoint,
        "hook" => ProbeKind::InProcessHook,
        "callback" => ProbeKind::AllocatorCallback,
        _ => return None,
    })
}

/// Parses [`Direction::as_str`]'s spelling.
pub fn parse_direction(s: &str) -> Option<Direction> {
    Direction::ALL.into_iter().find(|d| d.as_str() == s)
}

/// The dump spelling of a reported host state: `UNKNOWN`, `PAGEABLE`, `PINNED`.
pub const fn host_state_name(s: HostState) -> &'static str {
    match s {
        HostState::Unknown => "UNKNOWN",
        HostState::Pageable => "PAGEABLE",
        HostState::Pinned => "PINNED",
    }
}

/// Parses [`host_state_name`]'s spelling.
pub fn parse_host_state(s: &str) -> Option<HostState> {
    Some(match s {
        "UNKNOWN" => HostState::Unknown,
        "PAGEABLE" => HostState::Pageable,
        "PINNED" => HostState::Pinned,
        _ => return None,
    })
}

/// What the codec needs to know about the record an event belongs to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecordContext {
    pub start: u64,
    pub size: u64,
    /// Whether a transfer of exactly `size` bytes may be written as 0 (not for untracked
    /// records, whose size grows as transfers reach further).
    pub size_shortcut: bool,
}

/// Interning of call sites and streams while encoding.
pub(crate) trait Intern {
    fn site_index(&mut self, site: Site) -> u32;
    fn stream_index(&mut self, stream: u64) -> u32;
}

/// Look-up of call sites and streams while decoding.
pub(crate) trait Resolve {
    fn site(&self, index: u32) -> Option<Site>;
    fn stream(&self, index: u32) -> Option<u64>;
}

/// Writes `ev` into `out` (at least [`MAX_EVENT_LEN`] long); returns the length.
pub(crate) fn encode(
    ev: &RecordedEvent,
    ctx: RecordContext,
    prev_ts: u64,
    tables: &mut impl Intern,
    out: &mut [u8],
) -> usize {
    let mut len = 1;
    let site = ev.site.map(|s| tables.site_index(s));
    out[0] = ev.what.code() | (probe_code(ev.probe) << 4) | if site.is_some() { 0x80 } else { 0 };
    varint::put(
        out,
        &mut len,
        varint::zigzag(ev.ts_ns.wrapping_sub(prev_ts) as i64),
    );
    let rel = |addr: u64| varint::zigzag(addr.wrapping_sub(ctx.start) as i64);
    match ev.what {
        Recorded::Alloc { flags } => varint::put(out, &mut len, u64::from(flags)),
        Recorded::Free => {}
        Recorded::PinPages {
            start,
            bytes,
            pages,
        } => {
            varint::put(out, &mut len, rel(start));
            varint::put(out, &mut len, bytes);
            varint::put(out, &mut len, pages.map_or(0, |p| p.saturating_add(1)));
        }
        Recorded::UnpinPages { start, pages } => {
            varint::put(out, &mut len, rel(start));
            varint::put(out, &mut len, pages.map_or(0, |p| p.saturating_add(1)));
        }
        Recorded::Transfer {
            direction,
            bytes,
            host,
            is_async,
            stream,
            pinned,
            reported,
        } => {
            let offset = host.wrapping_sub(ctx.start);
            let stream_index = if stream != 0 {
                Some(tables.stream_index(stream))
            } else {
                None
            };
            let reported_bits = match reported {
                HostState::Unknown => 0,
                HostState::Pageable => 1,
                HostState::Pinned => 2,
            };
            out[len] = direction.index() as u8
                | (u8::from(is_async) << 2)
                | (u8::from(pinned) << 3)
                | (reported_bits << 4)
                | (u8::from(offset != 0) << 6)
                | (u8::from(stream_index.is_some()) << 7);
            len += 1;
            let bytes_field = if ctx.size_shortcut && bytes == ctx.size {
                0
            } else {
                bytes.min(u64::MAX - 1) + 1
            };
            varint::put(out, &mut len, bytes_field);
            if offset != 0 {
                varint::put(out, &mut len, offset);
            }
            if let Some(i) = stream_index {
                varint::put(out, &mut len, u64::from(i));
            }
        }
        Recorded::Mmap { start, len: l } | Recorded::Munmap { start, len: l } => {
            varint::put(out, &mut len, rel(start));
            varint::put(out, &mut len, l);
        }
        Recorded::PageFault { addr } => varint::put(out, &mut len, rel(addr)),
    }
    if let Some(i) = site {
        varint::put(out, &mut len, u64::from(i));
    }
    len
}

/// Why encoded events could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DecodeError {
    /// The bytes ended inside an event.
    Truncated,
    /// A number did not fit in 64 bits.
    Overflow,
    /// A head byte with an unknown kind.
    BadKind(u8),
    /// A head byte with an unknown probe.
    BadProbe(u8),
    /// A transfer with an invalid reported host state.
    BadHostState,
    /// A call-site index not in the site table.
    BadSite(u64),
    /// A stream index not in the stream table.
    BadStream(u64),
    /// A field too large for its type.
    OutOfRange,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Truncated => write!(f, "event data ends inside an event"),
            DecodeError::Overflow => write!(f, "a number in the event data overflows 64 bits"),
            DecodeError::BadKind(k) => write!(f, "unknown event kind {k}"),
            DecodeError::BadProbe(p) => write!(f, "unknown probe kind {p}"),
            DecodeError::BadHostState => write!(f, "invalid reported host state"),
            DecodeError::BadSite(i) => write!(f, "call-site index {i} not in the site table"),
            DecodeError::BadStream(i) => write!(f, "stream index {i} not in the stream table"),
            DecodeError::OutOfRange => write!(f, "a field is out of range for its type"),
        }
    }
}

impl From<VarintError> for DecodeError {
    fn from(e: VarintError) -> Self {
        match e {
            VarintError::Truncated => DecodeError::Truncated,
            VarintError::Overflow => DecodeError::Overflow,
        }
    }
}

/// Reads the next event, or `None` at the end (end of input or a zero head byte).
pub(crate) fn decode(
    src: &mut impl ByteSource,
    ctx: RecordContext,
    prev_ts: u64,
    tables: &impl Resolve,
) -> Result<Option<RecordedEvent>, DecodeError> {
    let Some(head) = src.next_byte() else {
        return Ok(None);
    };
    if head == 0 {
        return Ok(None);
    }
    let probe_bits = (head >> 4) & 7;
    let probe = probe_from_code(probe_bits).ok_or(DecodeError::BadProbe(probe_bits))?;
    let ts_ns = prev_ts.wrapping_add(varint::unzigzag(varint::get(src)?) as u64);
    let abs = |v: u64| ctx.start.wrapping_add(varint::unzigzag(v) as u64);
    let pages = |v: u64| if v == 0 { None } else { Some(v - 1) };
    let what = match head & 0x0f {
        1 => Recorded::Alloc {
            flags: u32::try_from(varint::get(src)?).map_err(|_| DecodeError::OutOfRange)?,
        },
        2 => Recorded::Free,
        3 => {
            let start = abs(varint::get(src)?);
            let bytes = varint::get(src)?;
            Recorded::PinPages {
                start,
                bytes,
                pages: pages(varint::get(src)?),
            }
        }
        4 => {
            let start = abs(varint::get(src)?);
            Recorded::UnpinPages {
                start,
                pages: pages(varint::get(src)?),
            }
        }
        5 => {
            let flags = src.next_byte().ok_or(DecodeError::Truncated)?;
            let direction = Direction::ALL[usize::from(flags & 3)];
            let reported = match (flags >> 4) & 3 {
                0 => HostState::Unknown,
                1 => HostState::Pageable,
                2 => HostState::Pinned,
                _ => return Err(DecodeError::BadHostState),
            };
            let bytes = match varint::get(src)? {
                0 => ctx.size,
                b => b - 1,
            };
            let offset = if flags & 0x40 != 0 {
                varint::get(src)?
            } else {
                0
            };
            let stream = if flags & 0x80 != 0 {
                let i = varint::get(src)?;
                let i32_ = u32::try_from(i).map_err(|_| DecodeError::BadStream(i))?;
                tables.stream(i32_).ok_or(DecodeError::BadStream(i))?
            } else {
                0
            };
            Recorded::Transfer {
                direction,
                bytes,
                host: ctx.start.wrapping_add(offset),
                is_async: flags & 4 != 0,
                stream,
                pinned: flags & 8 != 0,
                reported,
            }
        }
        6 => {
            let start = abs(varint::get(src)?);
            Recorded::Mmap {
                start,
                len: varint::get(src)?,
            }
        }
        7 => {
            let start = abs(varint::get(src)?);
            Recorded::Munmap {
                start,
                len: varint::get(src)?,
            }
        }
        8 => Recorded::PageFault {
            addr: abs(varint::get(src)?),
        },
        k => return Err(DecodeError::BadKind(k)),
    };
    let site = if head & 0x80 != 0 {
        let i = varint::get(src)?;
        let i32_ = u32::try_from(i).map_err(|_| DecodeError::BadSite(i))?;
        Some(tables.site(i32_).ok_or(DecodeError::BadSite(i))?)
    } else {
        None
    };
    Ok(Some(RecordedEvent {
        ts_ns,
        probe,
        site,
        what,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tag::ModuleId;
    use crate::varint::SliceSource;
    use proptest::prelude::*;

    #[derive(Default)]
    struct Tables {
        sites: Vec<Site>,
        streams: Vec<u64>,
    }

    impl Intern for Tables {
        fn site_index(&mut self, site: Site) -> u32 {
            if let Some(i) = self.sites.iter().position(|s| *s == site) {
                return i as u32;
            }
            self.sites.push(site);
            (self.sites.len() - 1) as u32
        }
        fn stream_index(&mut self, stream: u64) -> u32 {
            if let Some(i) = self.streams.iter().position(|s| *s == stream) {
                return i as u32;
            }
            self.streams.push(stream);
            (self.streams.len() - 1) as u32
        }
    }

    impl Resolve for Tables {
        fn site(&self, index: u32) -> Option<Site> {
            self.sites.get(index as usize).copied()
        }
        fn stream(&self, index: u32) -> Option<u64> {
            self.streams.get(index as usize).copied()
        }
    }

    const CTX: RecordContext = RecordContext {
        start: 0x7f00_0000_0000,
        size: 1 << 20,
        size_shortcut: true,
    };

    fn round_trip(ev: RecordedEvent, prev_ts: u64) -> (RecordedEvent, usize) {
        let mut tables = Tables::default();
        let mut buf = [0u8; MAX_EVENT_LEN];
        let len = encode(&ev, CTX, prev_ts, &mut tables, &mut buf);
        let mut src = SliceSource::new(&buf[..len]);
        let back = decode(&mut src, CTX, prev_ts, &tables).unwrap().unwrap();
        assert_eq!(src.remaining(), 0, "decoder read exactly what was written");
        (back, len)
    }

    #[test]
    fn a_typical_transfer_takes_few_bytes() {
        let ev = RecordedEvent {
            ts_ns: 1_000_000_250_000,
            probe: ProbeKind::Uprobe,
            site: Some(Site {
                module: ModuleId(1),
                offset: 0x1234,
            }),
            what: Recorded::Transfer {
                direction: Direction::HtoD,
                bytes: 1 << 20,
                host: CTX.start,
                is_async: false,
                stream: 0,
                pinned: false,
                reported: HostState::Unknown,
            },
        };
        let (back, len) = round_trip(ev, 1_000_000_000_000);
        assert_eq!(back, ev);
        // head + 3-byte delta (250 us) + flags + size shortcut + site index
        assert_eq!(len, 7);
    }

    fn arb_event() -> impl Strategy<Value = RecordedEvent> {
        let dir = prop::sample::select(Direction::ALL.to_vec());
        let probe = prop::sample::select(vec![
            ProbeKind::Uprobe,
            ProbeKind::KernelHook,
            ProbeKind::Tracepoint,
            ProbeKind::InProcessHook,
            ProbeKind::AllocatorCallback,
        ]);
        let state = prop::sample::select(vec![
            HostState::Unknown,
            HostState::Pageable,
            HostState::Pinned,
        ]);
        let what = prop_oneof![
            any::<u32>().prop_map(|flags| Recorded::Alloc { flags }),
            Just(Recorded::Free),
            (any::<u64>(), any::<u64>(), any::<Option<u64>>()).prop_map(|(start, bytes, pages)| {
                Recorded::PinPages {
                    start,
                    bytes,
                    pages: pages.map(|p| p.min(u64::MAX - 1)),
                }
            }),
            (any::<u64>(), any::<Option<u64>>()).prop_map(|(start, pages)| Recorded::UnpinPages {
                start,
                pages: pages.map(|p| p.min(u64::MAX - 1))
            }),
            (
                dir,
                0..u64::MAX - 1,
                any::<u64>(),
                any::<bool>(),
                any::<u64>(),
                any::<bool>(),
                state
            )
                .prop_map(
                    |(direction, bytes, host, is_async, stream, pinned, reported)| {
                        Recorded::Transfer {
                            direction,
                            bytes,
                            host,
                            is_async,
                            stream,
                            pinned,
                            reported,
                        }
                    }
                ),
            (any::<u64>(), any::<u64>()).prop_map(|(start, len)| Recorded::Mmap { start, len }),
            (any::<u64>(), any::<u64>()).prop_map(|(start, len)| Recorded::Munmap { start, len }),
            any::<u64>().prop_map(|addr| Recorded::PageFault { addr }),
        ];
        let site = any::<Option<(u32, u64)>>().prop_map(|s| {
            s.map(|(m, offset)| Site {
                module: ModuleId(m),
                offset,
            })
        });
        (any::<u64>(), probe, site, what).prop_map(|(ts_ns, probe, site, what)| RecordedEvent {
            ts_ns,
            probe,
            site,
            what,
        })
    }

    proptest! {
        #[test]
        fn every_event_round_trips(ev in arb_event(), prev in any::<u64>()) {
            let (back, len) = round_trip(ev, prev);
            prop_assert_eq!(back, ev);
            prop_assert!(len <= MAX_EVENT_LEN);
        }

        #[test]
        fn decoding_garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            let tables = Tables::default();
            let mut src = SliceSource::new(&bytes);
            let mut prev = 0;
            while let Ok(Some(ev)) = decode(&mut src, CTX, prev, &tables) {
                prev = ev.ts_ns;
            }
        }
    }
}
