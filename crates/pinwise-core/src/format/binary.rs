//! The compact binary dump: the history's own encoding, framed and checksummed, appendable.
//!
//! ```text
//! file   = header frame*
//! header = magic (8 bytes: 89 'P' 'W' 'H' 0d 0a 1a 0a) | version u32 LE | reserved u32 (0)
//! frame  = type u8 | 3 zero bytes | payload length u32 LE | CRC-32 of payload u32 LE | payload
//! ```
//!
//! Frame types (all numbers in payloads are LEB128 varints):
//!
//! - **1 TABLES**: config (max events per allocation, track untracked); modules, call sites
//!   and streams added since the previous TABLES frame (first index, count, entries);
//!   the full process list. Module entries: path, build id (length + 1, 0: none; bytes).
//!   Site entries: module index, offset. Process entries: pid, first ts, last ts, has exit
//!   (0/1), exit ts.
//! - **2 RECORDS**: record snapshots: id, process, site index, call number, start, size,
//!   flags (kind bits 0-1, state bits 2-4, pinned by registration bit 5, capped bit 6),
//!   if capped: events dropped and the 16 counters (per direction: pageable transfers,
//!   pageable bytes, pinned transfers, pinned bytes); events length, then the events as
//!   the history encodes them (see `history::codec`).
//! - **3 STATS**: the history's stats (fixed order) and the source stats (count; name
//!   length, name, value).
//! - **4 STACKS** (version 2): stacks added since the previous STACKS frame (first index,
//!   count, entries). A stack: frame count, then per frame a tag, 0 for a native frame
//!   (module index, offset) or 1 for a Python frame (file, line, function; strings are
//!   length and UTF-8 bytes).
//! - **5 SYMBOLS** (version 2): names of native sites (count; module index, offset,
//!   function, file (length + 1, 0: none; bytes), line + 1 (0: none)). Entries add to (or
//!   replace) those of earlier SYMBOLS frames.
//!
//! - **6 REDUNDANT** (version 3): the fingerprint statistics (mode, check fraction in ppm,
//!   uploads, downloads, skipped, full hashes, checked, sampled false same, sampled false
//!   differ, untracked for full tables), then the redundancy summaries of records that
//!   changed since the previous REDUNDANT frame (count; record id, uploads, downloads,
//!   redundant uploads, their bytes, device held, redundant downloads, their bytes, first
//!   redundant upload and first redundant download, each 0 for none or 1 then two numbers).
//!   A later entry for a record replaces the earlier one.
//!
//! Version 2 also writes, in each record snapshot, the record's stack (index + 1, 0: none)
//! after its call number. Version 1 files (no stacks, no symbols) still read.
//!
//! A dump, and each append of a periodic dump ([`BinaryAppender`]), is one TABLES frame,
//! one STACKS frame, one RECORDS frame (for an append: the records created since the last
//! append, and those that were live then and changed since, ended or not, whose new snapshot
//! replaces the earlier one), a
//! SYMBOLS frame when the symbol table changed, one REDUNDANT frame (version 3) when copies were fingerprinted, and one STATS frame, which closes it. A reader applies the frames in order, so a file is the complete
//! history as of its last append. A file cut anywhere but after a STATS frame is an error
//! that says where (the appends before are intact; a file cut exactly between two appends
//! reads as the history of the earlier one).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use super::{FormatError, FormatErrorKind};
use crate::event::Direction;
use crate::fingerprint::{FingerprintStats, Redundancy};
use crate::history::codec::{self, RecordContext, Resolve};
use crate::history::{
    AllocKind, AllocState, DirTotals, DirectionCounters, HistoryConfig, HistoryStats, LiveMark,
    MemHistory, ProcessInfo, RecordId, RecordedEvent, RestoredRecord, TransferCounters,
};
use crate::stack::{Frame, PyFrame, StackTable, Symbol, SymbolTable, MAX_FRAMES};
use crate::tag::{ModuleId, ModuleIdentity, ModuleTable, Site};
use crate::varint::{self, ByteSource, SliceSource, VarintError};

/// The first 8 bytes of a binary history.
pub const BINARY_MAGIC: [u8; 8] = [0x89, b'P', b'W', b'H', b'\r', b'\n', 0x1a, b'\n'];
/// The binary format version this build writes (it reads this one and versions 1 and 2).
pub const BINARY_VERSION: u32 = 3;
/// The oldest binary format version this build reads.
pub const BINARY_MIN_VERSION: u32 = 1;

const HEADER_LEN: usize = 16;
const FRAME_HEADER_LEN: usize = 12;
const FRAME_TABLES: u8 = 1;
const FRAME_RECORDS: u8 = 2;
const FRAME_STATS: u8 = 3;
const FRAME_STACKS: u8 = 4;
const FRAME_SYMBOLS: u8 = 5;
const FRAME_REDUNDANT: u8 = 6;
const FRAME_NATIVE: u64 = 0;
const FRAME_PYTHON: u64 = 1;

/// Writes `history` as a binary dump (header and one set of frames).
pub fn write(history: &MemHistory, w: &mut dyn Write) -> Result<(), FormatError> {
    let mut appender = BinaryAppender::new();
    w.write_all(&header()).map_err(FormatError::io)?;
    appender.append_to(history, w).map(|_| ())
}

/// The binary dump in memory.
pub fn to_bytes(history: &MemHistory) -> Vec<u8> {
    let mut buf = Vec::new();
    // Writing to memory cannot fail.
    let _ = write(history, &mut buf);
    buf
}

fn header() -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&BINARY_MAGIC);
    h[8..12].copy_from_slice(&BINARY_VERSION.to_le_bytes());
    h
}

/// Appends snapshots of a history to a binary dump, for periodic dumps: each
/// [`BinaryAppender::append`] writes only what changed since the previous one.
///
/// **What an append holds.** The format replaces a record's whole snapshot (its retained
/// events included) when a later RECORDS frame names it again; it has no frame that adds
/// events to a record. So an append writes the records created since the previous append,
/// and of the records that were live then, only those that changed since (a new event, a
/// new size or state; see `MemHistory::live_record_marks`): an unchanged live record costs
/// nothing. An append's size is thus bounded by the records touched since the previous one,
/// each at most `max_events_per_allocation` events (1024 by default, about 10 bytes each),
/// plus the tables, stacks and modules added since, and the statistics; not by the size of
/// the history.
///
/// **Failed writes.** An append is encoded first ([`BinaryAppender::encode`]), then written
/// ([`BinaryAppender::write`]); if the write fails (a full disk), the file is cut back to its
/// last whole append and the appender keeps its previous state, so the next append writes
/// everything since the last one that succeeded and the file stays readable.
#[derive(Debug)]
pub struct BinaryAppender {
    file: Option<std::fs::File>,
    /// Bytes in the file after the last successful append.
    len: u64,
    /// An earlier failed write could not be undone: the file is not extended any more.
    broken: bool,
    appends: u64,
    state: AppendState,
}

/// What the previous appends wrote.
#[derive(Debug, Clone, Default)]
struct AppendState {
    modules_written: usize,
    sites_written: usize,
    streams_written: usize,
    stacks_written: usize,
    symbols_written: usize,
    records_written: u32,
    /// Records live at the last append, with their marks, sorted by record.
    live_at_last: Vec<(u32, LiveMark)>,
    /// The redundancy tracker's generation at the last append.
    redundancy_generation: u64,
}

/// An append encoded by [`BinaryAppender::encode`], to be written by
/// [`BinaryAppender::write`].
#[derive(Debug)]
pub struct EncodedAppend {
    bytes: Vec<u8>,
    records: usize,
    next: AppendState,
}

impl EncodedAppend {
    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether it is empty (never: an append has at least its frame headers).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Record snapshots it holds.
    pub fn records(&self) -> usize {
        self.records
    }
}

impl BinaryAppender {
    fn new() -> Self {
        BinaryAppender {
            file: None,
            len: 0,
            broken: false,
            appends: 0,
            state: AppendState::default(),
        }
    }

    /// Replaces `path` with a new `0600` file (see [`crate::safe_file::create_replacing`])
    /// and writes the header.
    pub fn create(path: impl AsRef<Path>) -> Result<Self, FormatError> {
        Self::create_with(path, crate::safe_file::Durability::Synced)
    }

    /// [`BinaryAppender::create`], the new directory entry synced or not as `durability`
    /// says.
    pub fn create_with(
        path: impl AsRef<Path>,
        durability: crate::safe_file::Durability,
    ) -> Result<Self, FormatError> {
        let path = path.as_ref();
        let target =
            crate::safe_file::resolve_output(path).map_err(|e| FormatError::io(e).in_file(path))?;
        let mut file = crate::safe_file::create_replacing_with(&target, durability)
            .map_err(|e| FormatError::io(e).in_file(path))?;
        if let Err(e) = file.write_all(&header()) {
            // No header, no file (a full disk): nothing half-made is left at the path.
            let _ = std::fs::remove_file(&target);
            return Err(FormatError::io(e).in_file(path));
        }
        Ok(BinaryAppender {
            file: Some(file),
            len: HEADER_LEN as u64,
            ..Self::new()
        })
    }

    /// Appends what changed in `history` since the last append (the first append writes
    /// everything), and syncs it to the disk ([`BinaryAppender::encode`], then
    /// [`BinaryAppender::write`]).
    pub fn append(&mut self, history: &MemHistory) -> Result<(), FormatError> {
        let encoded = self.encode(history)?;
        self.write(encoded, true)
    }

    /// Encodes what changed in `history` since the last successful append, without
    /// writing it (so that the history can be let go before the file is written).
    pub fn encode(&self, history: &MemHistory) -> Result<EncodedAppend, FormatError> {
        let mut next = Self {
            file: None,
            len: 0,
            broken: false,
            appends: 0,
            state: self.state.clone(),
        };
        let mut bytes = Vec::new();
        let records = next.append_to(history, &mut bytes)?;
        Ok(EncodedAppend {
            bytes,
            records,
            next: next.state,
        })
    }

    /// Writes an append made by [`BinaryAppender::encode`] (it must be the next one: encoded
    /// after the last successful write); `sync`: and syncs the file's data to the disk (a
    /// process killed after the write keeps it either way: it is in the kernel's cache). On
    /// an error the file is cut back to its last whole append, and the appender stays as it
    /// was (the next append includes this one's changes).
    pub fn write(&mut self, encoded: EncodedAppend, sync: bool) -> Result<(), FormatError> {
        use std::io::{Seek, SeekFrom};
        if self.broken {
            return Err(FormatError::io(std::io::Error::other(
                "an earlier failed write could not be undone: no more appends",
            )));
        }
        let file = self
            .file
            .as_mut()
            .ok_or_else(|| FormatError::io(std::io::Error::other("appender has no file")))?;
        let written =
            file.write_all(&encoded.bytes).and_then(
                |()| {
                    if sync {
                        file.sync_data()
                    } else {
                        Ok(())
                    }
                },
            );
        match written {
            Ok(()) => {
                self.len += encoded.bytes.len() as u64;
                self.state = encoded.next;
                self.appends += 1;
                Ok(())
            }
            Err(e) => {
                let undone = file
                    .set_len(self.len)
                    .and_then(|()| file.seek(SeekFrom::Start(self.len)).map(|_| ()));
                if undone.is_err() {
                    self.broken = true;
                }
                Err(FormatError::io(e))
            }
        }
    }

    /// Appends written so far.
    pub fn appends(&self) -> u64 {
        self.appends
    }

    /// Bytes in the file after the last successful append (the header included).
    pub fn file_len(&self) -> u64 {
        self.len
    }

    /// Writes the next append's frames to `w`; returns the record snapshots written.
    fn append_to(&mut self, history: &MemHistory, w: &mut dyn Write) -> Result<usize, FormatError> {
        // Sources may intern stacks and modules while this runs: take the stacks first,
        // so that the modules written (taken after) cover every frame.
        let stacks = history.stacks().since(self.state.stacks_written);
        let tables = self.tables_payload(history);
        write_frame(w, FRAME_TABLES, &tables)?;
        write_frame(w, FRAME_STACKS, &self.stacks_payload(&stacks))?;
        let (records, count) = self.records_payload(history);
        write_frame(w, FRAME_RECORDS, &records)?;
        let symbols = history.symbols();
        if symbols.len() != self.state.symbols_written {
            write_frame(w, FRAME_SYMBOLS, &symbols_payload(symbols))?;
            self.state.symbols_written = symbols.len();
        }
        if let Some(payload) = self.redundant_payload(history) {
            write_frame(w, FRAME_REDUNDANT, &payload)?;
        }
        write_frame(w, FRAME_STATS, &stats_payload(history))?;
        Ok(count)
    }

    /// The REDUNDANT frame's payload; `None` when no copy was ever fingerprinted (the frame
    /// is left out).
    fn redundant_payload(&mut self, history: &MemHistory) -> Option<Vec<u8>> {
        let mut p = Payload::default();
        let t = history.redundancy();
        let s = t.stats();
        if *s == FingerprintStats::default() && t.changed_since(0).0.is_empty() {
            return None;
        }
        for v in [
            s.mode,
            s.check_ppm,
            s.uploads,
            s.downloads,
            s.skipped,
            s.full_hashes,
            s.checked,
            s.sampled_false_same,
            s.sampled_false_differ,
            s.untracked_full_tables,
        ] {
            p.uint(v);
        }
        let (changed, generation) = t.changed_since(self.state.redundancy_generation);
        p.uint(changed.len() as u64);
        for (record, r) in changed {
            p.uint(u64::from(record));
            for v in [r.uploads, r.downloads, r.redundant_uploads] {
                p.uint(u64::from(v));
            }
            p.uint(r.redundant_upload_bytes);
            p.uint(u64::from(r.device_held));
            p.uint(u64::from(r.redundant_downloads));
            p.uint(r.redundant_download_bytes);
            for pair in [r.first_upload, r.first_download] {
                match pair {
                    None => p.uint(0),
                    Some((a, b)) => {
                        p.uint(1);
                        p.uint(u64::from(a));
                        p.uint(u64::from(b));
                    }
                }
            }
        }
        self.state.redundancy_generation = generation;
        Some(p.0)
    }

    fn stacks_payload(&mut self, stacks: &[crate::stack::Stack]) -> Vec<u8> {
        let mut p = Payload::default();
        p.uint(self.state.stacks_written as u64);
        p.uint(stacks.len() as u64);
        for stack in stacks {
            p.uint(stack.len() as u64);
            for frame in stack.iter() {
                match frame {
                    Frame::Native(site) => {
                        p.uint(FRAME_NATIVE);
                        p.uint(u64::from(site.module.0));
                        p.uint(site.offset);
                    }
                    Frame::Python(py) => {
                        p.uint(FRAME_PYTHON);
                        p.bytes(py.file.as_bytes());
                        p.uint(u64::from(py.line));
                        p.bytes(py.function.as_bytes());
                    }
                }
            }
        }
        self.state.stacks_written += stacks.len();
        p.0
    }

    fn tables_payload(&mut self, history: &MemHistory) -> Vec<u8> {
        let mut p = Payload::default();
        let config = history.config();
        p.uint(u64::from(config.max_events_per_allocation));
        p.uint(u64::from(config.track_untracked));
        // Module 0 (unknown) exists in every table: start at 1.
        let modules = history.modules().snapshot();
        let first = self.state.modules_written.max(1);
        p.uint(first as u64);
        p.uint(modules.len().saturating_sub(first) as u64);
        for m in modules.iter().skip(first) {
            p.bytes(m.path.as_bytes());
            match &m.build_id {
                Some(id) => {
                    p.uint(id.len() as u64 + 1);
                    p.raw(id);
                }
                None => p.uint(0),
            }
        }
        self.state.modules_written = modules.len();
        let t = history.event_tables();
        let sites = t.sites.items();
        p.uint(self.state.sites_written as u64);
        p.uint((sites.len() - self.state.sites_written) as u64);
        for s in &sites[self.state.sites_written..] {
            p.uint(u64::from(s.module.0));
            p.uint(s.offset);
        }
        self.state.sites_written = sites.len();
        let streams = t.streams.items();
        p.uint(self.state.streams_written as u64);
        p.uint((streams.len() - self.state.streams_written) as u64);
        for &s in &streams[self.state.streams_written..] {
            p.uint(s);
        }
        self.state.streams_written = streams.len();
        let processes: Vec<&ProcessInfo> = history.processes().collect();
        p.uint(processes.len() as u64);
        for pr in processes {
            p.uint(u64::from(pr.pid));
            p.uint(pr.first_ts_ns);
            p.uint(pr.last_ts_ns);
            p.uint(u64::from(pr.exit_ts_ns.is_some()));
            p.uint(pr.exit_ts_ns.unwrap_or(0));
        }
        p.0
    }

    /// The RECORDS frame's payload and the number of snapshots in it: the records created
    /// since the last append, and those live then that ended or changed since.
    fn records_payload(&mut self, history: &MemHistory) -> (Vec<u8>, usize) {
        let total = history.len() as u32;
        let live_now = history.live_record_marks();
        let mut ids: Vec<u32> = self
            .state
            .live_at_last
            .iter()
            .filter(|&&(id, mark)| {
                id < self.state.records_written
                    && live_now
                        .binary_search_by_key(&id, |m| m.0)
                        .map_or(true, |i| live_now[i].1 != mark)
            })
            .map(|m| m.0)
            .collect();
        ids.sort_unstable();
        ids.extend(self.state.records_written..total);
        let count = ids.len();
        let mut p = Payload::default();
        p.uint(ids.len() as u64);
        for id in ids {
            let Some(v) = history.view(RecordId(id)) else {
                continue;
            };
            let site_index = history.event_tables().sites.find(&v.site()).unwrap_or(0);
            p.uint(u64::from(id));
            p.uint(u64::from(v.process_index()));
            p.uint(u64::from(site_index));
            p.uint(u64::from(v.tag().call_no));
            p.uint(v.stack_id().map_or(0, |s| s.index() as u64 + 1));
            p.uint(v.start());
            p.uint(v.size());
            let flags = kind_bits(v.kind())
                | (state_bits(v.state()) << 2)
                | (u8::from(v.pinned_by_registration()) << 5)
                | (u8::from(v.is_capped()) << 6);
            p.uint(u64::from(flags));
            if v.is_capped() {
                p.uint(v.events_dropped());
                for d in v.counters().by_direction {
                    p.uint(d.pageable_transfers);
                    p.uint(d.pageable_bytes);
                    p.uint(d.pinned_transfers);
                    p.uint(d.pinned_bytes);
                }
            }
            p.bytes(&history.record_event_bytes(RecordId(id)));
        }
        self.state.records_written = total;
        self.state.live_at_last = live_now;
        (p.0, count)
    }
}

fn symbols_payload(symbols: &crate::stack::SymbolTable) -> Vec<u8> {
    let mut p = Payload::default();
    p.uint(symbols.len() as u64);
    for (site, sym) in symbols {
        p.uint(u64::from(site.module.0));
        p.uint(site.offset);
        p.bytes(sym.function.as_bytes());
        match &sym.file {
            Some(f) => {
                p.uint(f.len() as u64 + 1);
                p.raw(f.as_bytes());
            }
            None => p.uint(0),
        }
        p.uint(sym.line.map_or(0, |l| u64::from(l) + 1));
    }
    p.0
}

fn stats_payload(history: &MemHistory) -> Vec<u8> {
    let mut p = Payload::default();
    let s = history.stats();
    for v in [
        s.events_ingested,
        s.events_retained,
        s.events_dropped_by_cap,
        s.records,
        s.implicit_records,
        s.replaced_records,
        s.unmatched_frees,
        s.unattributed_events,
    ] {
        p.uint(v);
    }
    for t in s.transfers.iter().chain(s.device_only_transfers.iter()) {
        p.uint(t.transfers);
        p.uint(t.bytes);
    }
    let src = history.source_stats();
    p.uint(src.len() as u64);
    for (k, v) in src {
        p.bytes(k.as_bytes());
        p.uint(*v);
    }
    p.0
}

fn write_frame(w: &mut dyn Write, kind: u8, payload: &[u8]) -> Result<(), FormatError> {
    let len = u32::try_from(payload.len())
        .map_err(|_| FormatError::io(std::io::Error::other("a dump frame exceeds 4 GiB")))?;
    let mut h = [0u8; FRAME_HEADER_LEN];
    h[0] = kind;
    h[4..8].copy_from_slice(&len.to_le_bytes());
    h[8..12].copy_from_slice(&crc32fast::hash(payload).to_le_bytes());
    w.write_all(&h).map_err(FormatError::io)?;
    w.write_all(payload).map_err(FormatError::io)
}

const fn kind_bits(k: AllocKind) -> u8 {
    match k {
        AllocKind::Pageable => 0,
        AllocKind::PinnedAlloc => 1,
        AllocKind::Registered => 2,
        AllocKind::Untracked => 3,
    }
}

const fn state_bits(s: AllocState) -> u8 {
    match s {
        AllocState::Live => 0,
        AllocState::Freed => 1,
        AllocState::Replaced => 2,
        AllocState::Unmapped => 3,
        AllocState::Exited => 4,
    }
}

#[derive(Default)]
struct Payload(Vec<u8>);

impl Payload {
    fn uint(&mut self, v: u64) {
        let mut buf = [0u8; varint::MAX_LEN];
        let mut len = 0;
        varint::put(&mut buf, &mut len, v);
        self.0.extend_from_slice(&buf[..len]);
    }

    fn bytes(&mut self, b: &[u8]) {
        self.uint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    fn raw(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }
}

// ------------------------------------------------------------------ reading

/// Reads a payload, turning positions into file offsets for errors.
struct Reader<'a> {
    src: SliceSource<'a>,
    base: u64,
    frame: usize,
}

impl<'a> Reader<'a> {
    fn offset(&self) -> u64 {
        self.base + self.src.position() as u64
    }

    fn uint(&mut self, what: &str) -> Result<u64, FormatError> {
        let at = self.offset();
        varint::get(&mut self.src).map_err(|e| match e {
            VarintError::Truncated => {
                FormatError::corrupt(at, format!("frame {} ends inside {what}", self.frame))
            }
            VarintError::Overflow => FormatError::corrupt(at, format!("{what} overflows 64 bits")),
        })
    }

    fn u32(&mut self, what: &str) -> Result<u32, FormatError> {
        let at = self.offset();
        let v = self.uint(what)?;
        u32::try_from(v)
            .map_err(|_| FormatError::corrupt(at, format!("{what} {v} is out of range")))
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8], FormatError> {
        let at = self.offset();
        usize::try_from(n)
            .ok()
            .and_then(|n| self.src.take(n))
            .ok_or_else(|| {
                FormatError::corrupt(
                    at,
                    format!(
                        "{what} of {n} bytes runs past the end of frame {}",
                        self.frame
                    ),
                )
            })
    }

    fn bytes(&mut self, what: &str) -> Result<&'a [u8], FormatError> {
        let n = self.uint(what)?;
        self.take(n, what)
    }

    fn string(&mut self, what: &str) -> Result<String, FormatError> {
        let at = self.offset();
        let b = self.bytes(what)?;
        String::from_utf8(b.to_vec())
            .map_err(|_| FormatError::corrupt(at, format!("{what} is not UTF-8")))
    }

    fn finish(&self) -> Result<(), FormatError> {
        if self.src.remaining() != 0 {
            return Err(FormatError::corrupt(
                self.offset(),
                format!(
                    "{} unexpected bytes at the end of frame {}",
                    self.src.remaining(),
                    self.frame
                ),
            ));
        }
        Ok(())
    }
}

/// A record snapshot as read, not yet decoded.
struct RawRecord<'a> {
    offset: u64,
    process: u32,
    site: u32,
    call_no: u32,
    /// Stack index + 1, 0 for none.
    stack: u64,
    start: u64,
    size: u64,
    kind: AllocKind,
    state: AllocState,
    pinned_seen: bool,
    capped: Option<(TransferCounters, u64)>,
    events: &'a [u8],
    events_offset: u64,
}

/// What the frames say, applied in order.
#[derive(Default)]
struct Staging<'a> {
    config: Option<HistoryConfig>,
    modules: Vec<ModuleIdentity>,
    sites: Vec<(u64, u64)>,
    streams: Vec<u64>,
    processes: Vec<ProcessInfo>,
    records: Vec<RawRecord<'a>>,
    stacks: Vec<Vec<RawFrame>>,
    symbols: Vec<(u64, u64, Symbol)>,
    stats: HistoryStats,
    source_stats: BTreeMap<String, u64>,
    fingerprints: FingerprintStats,
    redundant: BTreeMap<u32, (u64, Redundancy)>,
    saw_tables: bool,
    version: u32,
}

/// A stack frame as read (module as a file index).
enum RawFrame {
    Native(u64, u64),
    Python(PyFrame),
}

/// What was left out of a cut binary history read by [`read_salvaging`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Salvage {
    /// Whole frames read.
    pub frames_kept: usize,
    /// Bytes after the last whole frame, left out.
    pub bytes_dropped: u64,
    /// Whether the last frame kept is not a stats frame (the statistics are then those of
    /// the last complete dump, and may be behind the records).
    pub stats_behind: bool,
    /// Why the rest was left out (the truncation error's text).
    pub reason: String,
}

/// Reads a binary history dump; a file cut short (a tracer killed mid-write) is an error.
pub fn read(bytes: &[u8]) -> Result<MemHistory, FormatError> {
    read_frames(bytes, false).map(|(h, _)| h)
}

/// Reads a binary history dump, keeping every whole frame of a file cut short: the history
/// as of the last whole frame, and what was left out (`None` for a whole file). A frame
/// whose checksum fails, or any other corruption, is still an error.
pub fn read_salvaging(bytes: &[u8]) -> Result<(MemHistory, Option<Salvage>), FormatError> {
    read_frames(bytes, true)
}

fn read_frames(bytes: &[u8], salvage: bool) -> Result<(MemHistory, Option<Salvage>), FormatError> {
    if bytes.len() < HEADER_LEN {
        if !bytes.starts_with(&BINARY_MAGIC[..bytes.len().min(8)]) {
            return Err(FormatError::new(FormatErrorKind::Unrecognized(
                "no pinwise binary magic".into(),
            )));
        }
        return Err(FormatError::truncated(
            bytes.len() as u64,
            "the 16-byte file header",
        ));
    }
    if bytes[..8] != BINARY_MAGIC {
        return Err(FormatError::new(FormatErrorKind::Unrecognized(
            "no pinwise binary magic".into(),
        )));
    }
    let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if !(BINARY_MIN_VERSION..=BINARY_VERSION).contains(&version) {
        return Err(FormatError::new(FormatErrorKind::UnsupportedVersion {
            format: "binary history",
            found: u64::from(version),
            supported: u64::from(BINARY_VERSION),
        }));
    }
    if bytes[12..16] != [0, 0, 0, 0] {
        return Err(FormatError::corrupt(
            12,
            "reserved header bytes are not zero",
        ));
    }
    let mut staging = Staging {
        version,
        ..Staging::default()
    };
    let mut pos = HEADER_LEN;
    let mut frame = 0usize;
    let mut last_kind = FRAME_STATS;
    let mut last_start = pos;
    let mut cut: Option<FormatError> = None;
    while pos < bytes.len() {
        let rest = &bytes[pos..];
        if rest.len() < FRAME_HEADER_LEN {
            cut = Some(FormatError::truncated(
                pos as u64,
                format!(
                    "header of frame {frame} ({} of 12 bytes present)",
                    rest.len()
                ),
            ));
            break;
        }
        let kind = rest[0];
        if rest[1..4] != [0, 0, 0] {
            return Err(FormatError::corrupt(
                pos as u64 + 1,
                format!("frame {frame}: reserved bytes are not zero"),
            ));
        }
        let len = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]) as usize;
        let crc = u32::from_le_bytes([rest[8], rest[9], rest[10], rest[11]]);
        let body_start = pos + FRAME_HEADER_LEN;
        let Some(payload) = bytes.get(body_start..body_start.saturating_add(len)) else {
            cut = Some(FormatError::truncated(
                bytes.len() as u64,
                format!(
                    "frame {frame} starting at byte {pos} declares {len} bytes of payload, {} present",
                    bytes.len() - body_start
                ),
            ));
            break;
        };
        if crc32fast::hash(payload) != crc {
            return Err(FormatError::corrupt(
                pos as u64,
                format!("frame {frame}: checksum mismatch (payload of {len} bytes at byte {body_start})"),
            ));
        }
        let mut r = Reader {
            src: SliceSource::new(payload),
            base: body_start as u64,
            frame,
        };
        match kind {
            FRAME_TABLES => read_tables(&mut r, &mut staging)?,
            FRAME_RECORDS => read_records(&mut r, &mut staging)?,
            FRAME_STATS => read_stats(&mut r, &mut staging)?,
            FRAME_STACKS if version >= 2 => read_stacks(&mut r, &mut staging)?,
            FRAME_SYMBOLS if version >= 2 => read_symbols(&mut r, &mut staging)?,
            FRAME_REDUNDANT if version >= 3 => read_redundant(&mut r, &mut staging)?,
            k => {
                return Err(FormatError::corrupt(
                    pos as u64,
                    format!("frame {frame}: unknown frame type {k}"),
                ))
            }
        }
        r.finish()?;
        last_kind = kind;
        last_start = pos;
        pos = body_start + len;
        frame += 1;
    }
    if cut.is_none() && last_kind != FRAME_STATS {
        // Every dump or append ends with a STATS frame: without it, the last append is
        // incomplete and its records may be missing.
        cut = Some(FormatError::truncated(
            bytes.len() as u64,
            format!("the last dump is incomplete: it ends after frame {} (type {last_kind}) at byte {last_start}, before its stats frame", frame - 1),
        ));
    }
    let salvaged = match cut {
        None => None,
        Some(e) if !salvage || frame == 0 => return Err(e),
        Some(e) => Some(Salvage {
            frames_kept: frame,
            bytes_dropped: (bytes.len() - pos) as u64,
            stats_behind: last_kind != FRAME_STATS,
            reason: e.to_string(),
        }),
    };
    build(staging, bytes.len() as u64).map(|h| (h, salvaged))
}

fn read_tables(r: &mut Reader<'_>, s: &mut Staging<'_>) -> Result<(), FormatError> {
    let max_events = r.u32("max events per allocation")?;
    let track = r.uint("track untracked")?;
    s.config = Some(HistoryConfig {
        max_events_per_allocation: max_events,
        track_untracked: track != 0,
    });
    s.saw_tables = true;
    let at = r.offset();
    let first = r.uint("first module index")?;
    if first != s.modules.len() as u64 + 1 {
        return Err(FormatError::corrupt(
            at,
            format!(
                "modules continue at index {first}, expected {}",
                s.modules.len() + 1
            ),
        ));
    }
    let count = r.uint("module count")?;
    for _ in 0..count {
        let path = r.string("module path")?;
        let at = r.offset();
        let id_len = r.uint("build-id length")?;
        let identity = if id_len == 0 {
            ModuleIdentity::from_path(path)
        } else {
            let id = r.take(id_len - 1, "build id")?;
            if id.is_empty() {
                return Err(FormatError::corrupt(at, "empty build id"));
            }
            ModuleIdentity::with_build_id(path, id.to_vec())
        };
        s.modules.push(identity);
    }
    let at = r.offset();
    let first = r.uint("first site index")?;
    if first != s.sites.len() as u64 {
        return Err(FormatError::corrupt(
            at,
            format!(
                "sites continue at index {first}, expected {}",
                s.sites.len()
            ),
        ));
    }
    let count = r.uint("site count")?;
    for _ in 0..count {
        let at = r.offset();
        let module = r.uint("site module")?;
        if module > s.modules.len() as u64 {
            return Err(FormatError::corrupt(
                at,
                format!(
                    "site refers to module {module}, only {} known",
                    s.modules.len() + 1
                ),
            ));
        }
        let offset = r.uint("site offset")?;
        s.sites.push((module, offset));
    }
    let at = r.offset();
    let first = r.uint("first stream index")?;
    if first != s.streams.len() as u64 {
        return Err(FormatError::corrupt(
            at,
            format!(
                "streams continue at index {first}, expected {}",
                s.streams.len()
            ),
        ));
    }
    let count = r.uint("stream count")?;
    for _ in 0..count {
        let v = r.uint("stream")?;
        s.streams.push(v);
    }
    let count = r.uint("process count")?;
    let at = r.offset();
    if (count as usize) < s.processes.len() {
        return Err(FormatError::corrupt(at, "the process list shrank"));
    }
    let mut processes = Vec::new();
    for _ in 0..count {
        let pid = r.u32("pid")?;
        let first_ts_ns = r.uint("process first timestamp")?;
        let last_ts_ns = r.uint("process last timestamp")?;
        let has_exit = r.uint("process exit flag")?;
        let exit = r.uint("process exit timestamp")?;
        processes.push(ProcessInfo {
            pid,
            first_ts_ns,
            last_ts_ns,
            exit_ts_ns: (has_exit != 0).then_some(exit),
        });
    }
    s.processes = processes;
    Ok(())
}

fn read_records<'a>(r: &mut Reader<'a>, s: &mut Staging<'a>) -> Result<(), FormatError> {
    if !s.saw_tables {
        return Err(FormatError::corrupt(
            r.offset(),
            "records before any tables frame",
        ));
    }
    let count = r.uint("record count")?;
    for _ in 0..count {
        let offset = r.offset();
        let id = r.u32("record id")?;
        let process = r.u32("record process")?;
        if process as usize >= s.processes.len() {
            return Err(FormatError::corrupt(
                offset,
                format!(
                    "record {id} refers to process {process}, only {} known",
                    s.processes.len()
                ),
            ));
        }
        let site = r.u32("record site")?;
        if site as usize >= s.sites.len() {
            return Err(FormatError::corrupt(
                offset,
                format!(
                    "record {id} refers to site {site}, only {} known",
                    s.sites.len()
                ),
            ));
        }
        let call_no = r.u32("call number")?;
        let stack = if s.version >= 2 {
            let at = r.offset();
            let stack = r.uint("record stack")?;
            if stack > s.stacks.len() as u64 {
                return Err(FormatError::corrupt(
                    at,
                    format!(
                        "record {id} refers to stack {}, only {} known",
                        stack - 1,
                        s.stacks.len()
                    ),
                ));
            }
            stack
        } else {
            0
        };
        let start = r.uint("start")?;
        let size = r.uint("size")?;
        let at = r.offset();
        let flags = r.uint("record flags")?;
        if flags >= 1 << 7 {
            return Err(FormatError::corrupt(
                at,
                format!("record {id}: unknown flag bits {flags:#x}"),
            ));
        }
        let kind = match flags & 3 {
            0 => AllocKind::Pageable,
            1 => AllocKind::PinnedAlloc,
            2 => AllocKind::Registered,
            _ => AllocKind::Untracked,
        };
        let state = match (flags >> 2) & 7 {
            0 => AllocState::Live,
            1 => AllocState::Freed,
            2 => AllocState::Replaced,
            3 => AllocState::Unmapped,
            4 => AllocState::Exited,
            b => {
                return Err(FormatError::corrupt(
                    at,
                    format!("record {id}: unknown state {b}"),
                ))
            }
        };
        let capped = if flags & (1 << 6) != 0 {
            let dropped = r.uint("events dropped")?;
            let mut c = TransferCounters::default();
            for d in Direction::ALL {
                c.by_direction[d.index()] = DirectionCounters {
                    pageable_transfers: r.uint("counter")?,
                    pageable_bytes: r.uint("counter")?,
                    pinned_transfers: r.uint("counter")?,
                    pinned_bytes: r.uint("counter")?,
                };
            }
            Some((c, dropped))
        } else {
            None
        };
        let n = r.uint("events length")?;
        let events_offset = r.offset();
        let events = r.take(n, "record events")?;
        let raw = RawRecord {
            offset,
            process,
            site,
            call_no,
            stack,
            start,
            size,
            kind,
            state,
            pinned_seen: flags & (1 << 5) != 0,
            capped,
            events,
            events_offset,
        };
        match (id as usize).cmp(&s.records.len()) {
            std::cmp::Ordering::Less => s.records[id as usize] = raw,
            std::cmp::Ordering::Equal => s.records.push(raw),
            std::cmp::Ordering::Greater => {
                return Err(FormatError::corrupt(
                    offset,
                    format!("record {id} skips ids (next expected: {})", s.records.len()),
                ))
            }
        }
    }
    Ok(())
}

fn read_stacks(r: &mut Reader<'_>, s: &mut Staging<'_>) -> Result<(), FormatError> {
    let at = r.offset();
    let first = r.uint("first stack index")?;
    if first != s.stacks.len() as u64 {
        return Err(FormatError::corrupt(
            at,
            format!(
                "stacks continue at index {first}, expected {}",
                s.stacks.len()
            ),
        ));
    }
    let count = r.uint("stack count")?;
    for _ in 0..count {
        let at = r.offset();
        let n = r.uint("stack length")?;
        if n == 0 || n > MAX_FRAMES as u64 {
            return Err(FormatError::corrupt(
                at,
                format!("a stack of {n} frames (1 to {MAX_FRAMES} allowed)"),
            ));
        }
        let mut frames = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let at = r.offset();
            match r.uint("frame type")? {
                FRAME_NATIVE => {
                    let at = r.offset();
                    let module = r.uint("frame module")?;
                    if module > s.modules.len() as u64 {
                        return Err(FormatError::corrupt(
                            at,
                            format!(
                                "frame refers to module {module}, only {} known",
                                s.modules.len() + 1
                            ),
                        ));
                    }
                    frames.push(RawFrame::Native(module, r.uint("frame offset")?));
                }
                FRAME_PYTHON => {
                    let file = r.string("Python file")?;
                    let line = r.u32("Python line")?;
                    let function = r.string("Python function")?;
                    frames.push(RawFrame::Python(PyFrame::new(&file, line, &function)));
                }
                t => return Err(FormatError::corrupt(at, format!("unknown frame type {t}"))),
            }
        }
        s.stacks.push(frames);
    }
    Ok(())
}

fn read_symbols(r: &mut Reader<'_>, s: &mut Staging<'_>) -> Result<(), FormatError> {
    let count = r.uint("symbol count")?;
    for _ in 0..count {
        let at = r.offset();
        let module = r.uint("symbol module")?;
        if module > s.modules.len() as u64 {
            return Err(FormatError::corrupt(
                at,
                format!(
                    "symbol refers to module {module}, only {} known",
                    s.modules.len() + 1
                ),
            ));
        }
        let offset = r.uint("symbol offset")?;
        let function = r.string("symbol function")?;
        let at = r.offset();
        let file = match r.uint("symbol file length")? {
            0 => None,
            n => Some(
                String::from_utf8(r.take(n - 1, "symbol file")?.to_vec())
                    .map_err(|_| FormatError::corrupt(at, "symbol file is not UTF-8"))?,
            ),
        };
        let at = r.offset();
        let line = match r.uint("symbol line")? {
            0 => None,
            n => Some(
                u32::try_from(n - 1)
                    .map_err(|_| FormatError::corrupt(at, "symbol line is out of range"))?,
            ),
        };
        s.symbols.push((
            module,
            offset,
            Symbol {
                function,
                file,
                line,
            },
        ));
    }
    Ok(())
}

fn read_redundant(r: &mut Reader<'_>, s: &mut Staging<'_>) -> Result<(), FormatError> {
    s.fingerprints = FingerprintStats {
        mode: r.uint("fingerprint stats")?,
        check_ppm: r.uint("fingerprint stats")?,
        uploads: r.uint("fingerprint stats")?,
        downloads: r.uint("fingerprint stats")?,
        skipped: r.uint("fingerprint stats")?,
        full_hashes: r.uint("fingerprint stats")?,
        checked: r.uint("fingerprint stats")?,
        sampled_false_same: r.uint("fingerprint stats")?,
        sampled_false_differ: r.uint("fingerprint stats")?,
        untracked_full_tables: r.uint("fingerprint stats")?,
    };
    let count = r.uint("redundancy count")?;
    for _ in 0..count {
        let at = r.offset();
        let record = r.u32("redundancy record")?;
        let mut red = Redundancy {
            uploads: r.u32("uploads")?,
            downloads: r.u32("downloads")?,
            redundant_uploads: r.u32("redundant uploads")?,
            redundant_upload_bytes: r.uint("redundant upload bytes")?,
            device_held: r.u32("device held")?,
            redundant_downloads: r.u32("redundant downloads")?,
            redundant_download_bytes: r.uint("redundant download bytes")?,
            ..Redundancy::default()
        };
        let mut pairs = [None, None];
        for pair in &mut pairs {
            let pat = r.offset();
            *pair = match r.uint("first redundant copy")? {
                0 => None,
                1 => Some((r.u32("copy number")?, r.u32("copy number")?)),
                n => {
                    return Err(FormatError::corrupt(
                        pat,
                        format!("first redundant copy marker {n} (0 or 1 expected)"),
                    ))
                }
            };
        }
        red.first_upload = pairs[0];
        red.first_download = pairs[1];
        s.redundant.insert(record, (at, red));
    }
    Ok(())
}

fn read_stats(r: &mut Reader<'_>, s: &mut Staging<'_>) -> Result<(), FormatError> {
    let mut st = HistoryStats {
        events_ingested: r.uint("stats")?,
        events_retained: r.uint("stats")?,
        events_dropped_by_cap: r.uint("stats")?,
        records: r.uint("stats")?,
        implicit_records: r.uint("stats")?,
        replaced_records: r.uint("stats")?,
        unmatched_frees: r.uint("stats")?,
        unattributed_events: r.uint("stats")?,
        ..HistoryStats::default()
    };
    for i in 0..8 {
        let t = DirTotals {
            transfers: r.uint("stats")?,
            bytes: r.uint("stats")?,
        };
        if i < 4 {
            st.transfers[i] = t;
        } else {
            st.device_only_transfers[i - 4] = t;
        }
    }
    let count = r.uint("source stat count")?;
    let mut src = BTreeMap::new();
    for _ in 0..count {
        let k = r.string("source stat name")?;
        let v = r.uint("source stat value")?;
        src.insert(k, v);
    }
    s.stats = st;
    s.source_stats = src;
    Ok(())
}

struct FileTables<'s> {
    sites: &'s [Site],
    streams: &'s [u64],
}

impl Resolve for FileTables<'_> {
    fn site(&self, index: u32) -> Option<Site> {
        self.sites.get(index as usize).copied()
    }
    fn stream(&self, index: u32) -> Option<u64> {
        self.streams.get(index as usize).copied()
    }
}

fn build(s: Staging<'_>, file_len: u64) -> Result<MemHistory, FormatError> {
    let Some(config) = s.config else {
        return Err(FormatError::truncated(
            file_len,
            "no frames after the header",
        ));
    };
    let modules: Arc<ModuleTable> = ModuleTable::shared();
    let mut module_ids = vec![ModuleId::UNKNOWN];
    for m in &s.modules {
        module_ids.push(modules.intern(m));
    }
    let sites: Vec<Site> = s
        .sites
        .iter()
        .map(|&(m, offset)| Site {
            module: module_ids[m as usize],
            offset,
        })
        .collect();
    let tables = FileTables {
        sites: &sites,
        streams: &s.streams,
    };
    let stacks = StackTable::shared();
    let mut stack_ids = Vec::with_capacity(s.stacks.len());
    for (i, raw) in s.stacks.iter().enumerate() {
        let frames: Vec<Frame> = raw
            .iter()
            .map(|f| match f {
                RawFrame::Native(m, offset) => Frame::Native(Site {
                    module: module_ids[*m as usize],
                    offset: *offset,
                }),
                RawFrame::Python(py) => Frame::Python(py.clone()),
            })
            .collect();
        let id = stacks.intern(&frames).filter(|id| id.index() == i);
        let Some(id) = id else {
            return Err(FormatError::corrupt(
                file_len,
                format!("stack {i} repeats an earlier stack"),
            ));
        };
        stack_ids.push(id);
    }
    let symbols: SymbolTable = s
        .symbols
        .into_iter()
        .map(|(m, offset, sym)| {
            (
                Site {
                    module: module_ids[m as usize],
                    offset,
                },
                sym,
            )
        })
        .collect();
    let mut history = MemHistory::restore(
        config,
        modules,
        s.processes,
        s.stats,
        s.source_stats,
        stacks,
        symbols,
    );
    history.restore_tables(&sites, &s.streams);
    for (id, raw) in s.records.into_iter().enumerate() {
        let ctx = RecordContext {
            start: raw.start,
            size: raw.size,
            size_shortcut: raw.kind != AllocKind::Untracked,
        };
        let mut src = SliceSource::new(raw.events);
        let mut events: Vec<RecordedEvent> = Vec::new();
        let mut prev = 0;
        loop {
            let at = raw.events_offset + src.position() as u64;
            match codec::decode(&mut src, ctx, prev, &tables) {
                Ok(Some(ev)) => {
                    prev = ev.ts_ns;
                    events.push(ev);
                }
                Ok(None) => break,
                Err(e) => {
                    return Err(FormatError::corrupt(
                        at,
                        format!("record {id}, event {}: {e}", events.len()),
                    ))
                }
            }
        }
        if src.remaining() != 0 {
            return Err(FormatError::corrupt(
                raw.events_offset + src.position() as u64,
                format!("record {id}: bytes after the end of its events"),
            ));
        }
        history
            .restore_record(RestoredRecord {
                process: raw.process,
                site: sites[raw.site as usize],
                call_no: raw.call_no,
                start: raw.start,
                size: raw.size,
                kind: raw.kind,
                state: raw.state,
                pinned_seen: raw.pinned_seen,
                capped: raw.capped,
                events,
                stack: raw.stack.checked_sub(1).map(|i| stack_ids[i as usize]),
            })
            .map_err(|m| FormatError::corrupt(raw.offset, format!("record {id}: {m}")))?;
    }
    *history.redundancy_mut().stats_mut() = s.fingerprints;
    let records = history.len();
    for (record, (at, red)) in s.redundant {
        if record as usize >= records {
            return Err(FormatError::corrupt(
                at,
                format!("redundancy summary of record {record}, only {records} records"),
            ));
        }
        history.redundancy_mut().restore(record, red);
    }
    Ok(history)
}
