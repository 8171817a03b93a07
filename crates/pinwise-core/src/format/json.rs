//! The JSON dump: everything a history holds, in a shape scripts can rely on.
//!
//! The shape (checked in as `schemas/history.schema.json` at the repository root and tested against it):
//!
//! ```text
//! { "format": "pinwise-history", "version": 3,
//!   "config": {...}, "modules": [{"key", "path", "build_id"}], "processes": [...],
//!   "stats": {...}, "source_stats": {"name": n},
//!   "allocations": [
//!     { "id", "pid", "process", "start", "size", "kind",
//!       "tag": {"module", "offset", "call_no"},
//!       "final_state", "alloc_ts_ns", "end_ts_ns", "transfer_count", "bytes_transferred",
//!       "counters": {"HtoD": {...}, "DtoH": {...}, "DtoD": {...}, "HtoH": {...}},
//!       "pinned_by_registration", "events_dropped",
//!       "events": [ { "timestamp_ns", "type", "probe", "call_site": {"module", "offset"} | null,
//!                     and per type: "direction", "bytes", "host", "async", "stream",
//!                     "host_state", "reported_host_state", "flags", "start", "len",
//!                     "pages", "addr" } ] } ],
//!   "stacks": [ { "frames": [ {"type": "native", "module", "offset"}
//!                            | {"type": "python", "file", "line", "function"} ] } ],
//!   "symbols": [ {"module", "offset", "function", "file", "line"} ] }
//! ```
//!
//! Version 3 added `fingerprints` (how copies were fingerprinted, the sampled
//! fingerprint's measured error) and each allocation's `redundant` (its redundant copies,
//! present when a copy of it was fingerprinted); versions 1 and 2 still read.
//!
//! Version 2 added `stacks` (innermost frame first), `symbols` and each allocation's
//! `stack` (an index into `stacks`, or null); version 1 dumps (without them) still read.
//!
//! Modules are named by their identity key (`buildid:<hex>` or `path:<path>`), so tags from
//! two runs compare directly. Addresses and sizes are JSON integers.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;

use serde::ser::SerializeSeq;
use serde::{Deserialize, Serialize, Serializer};

use super::{FormatError, FormatErrorKind};
use crate::event::{Direction, HostState};
use crate::fingerprint::{FingerprintStats, Redundancy};
use crate::history::codec::{host_state_name, parse_direction, parse_host_state, parse_probe};
use crate::history::{
    AllocKind, AllocState, AllocationView, DirectionCounters, HistoryConfig, HistoryStats,
    MemHistory, ProcessInfo, Recorded, RecordedEvent, RestoredRecord, TransferCounters,
};
use crate::stack::{Frame, PyFrame, StackId, StackTable, Symbol, SymbolTable, MAX_FRAMES};
use crate::tag::{ModuleId, ModuleIdentity, ModuleTable, Site};

/// The `format` field of a JSON history dump.
pub const JSON_FORMAT: &str = "pinwise-history";
/// The JSON dump version this build writes (it reads this one and versions 1 and 2).
pub const JSON_VERSION: u64 = 3;
/// The oldest JSON dump version this build reads.
pub const JSON_MIN_VERSION: u64 = 1;

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
enum JsonFrame {
    Native {
        module: String,
        offset: u64,
    },
    Python {
        file: String,
        line: u32,
        function: String,
    },
}

#[derive(Debug, Serialize, Deserialize)]
struct JsonStack {
    frames: Vec<JsonFrame>,
}

#[derive(Debug, Serialize, Deserialize)]
struct JsonSymbol {
    module: String,
    offset: u64,
    function: String,
    file: Option<String>,
    line: Option<u32>,
}

#[derive(Debug, Serialize, Deserialize)]
struct JsonModule {
    key: String,
    path: String,
    build_id: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
struct JsonSite {
    module: String,
    offset: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct JsonTag {
    module: String,
    offset: u64,
    call_no: u32,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct JsonCounters {
    #[serde(rename = "HtoD")]
    htod: DirectionCounters,
    #[serde(rename = "DtoH")]
    dtoh: DirectionCounters,
    #[serde(rename = "DtoD")]
    dtod: DirectionCounters,
    #[serde(rename = "HtoH")]
    htoh: DirectionCounters,
}

impl From<&TransferCounters> for JsonCounters {
    fn from(c: &TransferCounters) -> Self {
        let [htod, dtoh, dtod, htoh] = c.by_direction;
        JsonCounters {
            htod,
            dtoh,
            dtod,
            htoh,
        }
    }
}

impl From<&JsonCounters> for TransferCounters {
    fn from(c: &JsonCounters) -> Self {
        TransferCounters {
            by_direction: [c.htod, c.dtoh, c.dtod, c.htoh],
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct JsonEvent {
    timestamp_ns: u64,
    #[serde(rename = "type")]
    kind: String,
    probe: String,
    call_site: Option<JsonSite>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    direction: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    host: Option<u64>,
    #[serde(default, rename = "async", skip_serializing_if = "Option::is_none")]
    is_async: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stream: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    host_state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reported_host_state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    flags: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    start: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    len: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pages: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    addr: Option<u64>,
}

#[derive(Debug, Serialize, Deserialize)]
struct JsonAllocation {
    id: u64,
    pid: u32,
    process: u32,
    start: u64,
    size: u64,
    kind: String,
    tag: JsonTag,
    final_state: String,
    alloc_ts_ns: u64,
    end_ts_ns: Option<u64>,
    transfer_count: u64,
    bytes_transferred: u64,
    counters: JsonCounters,
    pinned_by_registration: bool,
    events_dropped: u64,
    #[serde(default)]
    stack: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    redundant: Option<Redundancy>,
    events: Vec<JsonEvent>,
}

#[derive(Debug, Deserialize)]
struct JsonHistoryIn {
    config: HistoryConfig,
    modules: Vec<JsonModule>,
    processes: Vec<ProcessInfo>,
    stats: HistoryStats,
    #[serde(default)]
    source_stats: BTreeMap<String, u64>,
    allocations: Vec<JsonAllocation>,
    #[serde(default)]
    stacks: Vec<JsonStack>,
    #[serde(default)]
    symbols: Vec<JsonSymbol>,
    #[serde(default)]
    fingerprints: FingerprintStats,
}

#[derive(Debug, Deserialize)]
struct JsonHeader {
    format: Option<String>,
    version: Option<u64>,
}

#[derive(Serialize)]
struct JsonHistoryOut<'a> {
    format: &'static str,
    version: u64,
    config: &'a HistoryConfig,
    modules: Vec<JsonModule>,
    processes: Vec<ProcessInfo>,
    stats: &'a HistoryStats,
    source_stats: &'a BTreeMap<String, u64>,
    allocations: Allocations<'a>,
    stacks: Vec<JsonStack>,
    symbols: Vec<JsonSymbol>,
    fingerprints: &'a FingerprintStats,
}

/// Serializes the allocations one at a time (a dump of millions never exists whole).
struct Allocations<'a> {
    history: &'a MemHistory,
    keys: &'a [String],
}

impl Serialize for Allocations<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.history.len()))?;
        for v in self.history.allocations() {
            seq.serialize_element(&allocation_json(&v, self.keys))?;
        }
        seq.end()
    }
}

fn module_key(keys: &[String], id: ModuleId) -> String {
    keys.get(id.0 as usize)
        .cloned()
        .unwrap_or_else(|| "path:?".into())
}

fn event_json(ev: &RecordedEvent, keys: &[String]) -> JsonEvent {
    let mut j = JsonEvent {
        timestamp_ns: ev.ts_ns,
        kind: ev.what.type_name().to_owned(),
        probe: ev.probe.as_str().to_owned(),
        call_site: ev.site.map(|s| JsonSite {
            module: module_key(keys, s.module),
            offset: s.offset,
        }),
        ..JsonEvent::default()
    };
    match ev.what {
        Recorded::Alloc { flags } => j.flags = Some(flags),
        Recorded::Free => {}
        Recorded::PinPages {
            start,
            bytes,
            pages,
        } => {
            j.start = Some(start);
            j.bytes = Some(bytes);
            j.pages = pages;
        }
        Recorded::UnpinPages { start, pages } => {
            j.start = Some(start);
            j.pages = pages;
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
            j.direction = Some(direction.as_str().to_owned());
            j.bytes = Some(bytes);
            j.host = Some(host);
            j.is_async = Some(is_async);
            j.stream = Some(stream);
            j.host_state = Some(if pinned { "PINNED" } else { "PAGEABLE" }.to_owned());
            j.reported_host_state = Some(host_state_name(reported).to_owned());
        }
        Recorded::Mmap { start, len } | Recorded::Munmap { start, len } => {
            j.start = Some(start);
            j.len = Some(len);
        }
        Recorded::PageFault { addr } => j.addr = Some(addr),
    }
    j
}

fn allocation_json(v: &AllocationView<'_>, keys: &[String]) -> JsonAllocation {
    let info = v.info();
    JsonAllocation {
        id: u64::from(info.id.0),
        pid: info.pid,
        process: v.process_index(),
        start: info.start,
        size: info.size,
        kind: info.kind.as_str().to_owned(),
        tag: JsonTag {
            module: module_key(keys, info.tag.site.module),
            offset: info.tag.site.offset,
            call_no: info.tag.call_no,
        },
        final_state: info.state.as_str().to_owned(),
        alloc_ts_ns: info.alloc_ts_ns,
        end_ts_ns: info.end_ts_ns,
        transfer_count: info.transfer_count,
        bytes_transferred: info.bytes_transferred,
        counters: JsonCounters::from(&info.counters),
        pinned_by_registration: info.pinned_by_registration,
        events_dropped: info.events_dropped,
        stack: info.stack.map(StackId::index),
        redundant: v.redundancy().copied(),
        events: v.events().map(|e| event_json(&e, keys)).collect(),
    }
}

/// Writes `history` as a JSON dump.
pub fn write(history: &MemHistory, w: &mut dyn Write) -> Result<(), FormatError> {
    // Stacks first: modules (taken after) then cover every frame, even while sources
    // intern more.
    let stack_list = history.stacks().snapshot();
    let identities = history.modules().snapshot();
    let keys: Vec<String> = identities.iter().map(|m| m.key()).collect();
    let stacks = stack_list
        .iter()
        .map(|st| JsonStack {
            frames: st
                .iter()
                .map(|f| match f {
                    Frame::Native(site) => JsonFrame::Native {
                        module: module_key(&keys, site.module),
                        offset: site.offset,
                    },
                    Frame::Python(py) => JsonFrame::Python {
                        file: py.file.to_string(),
                        line: py.line,
                        function: py.function.to_string(),
                    },
                })
                .collect(),
        })
        .collect();
    let symbols = history
        .symbols()
        .iter()
        .map(|(site, sym)| JsonSymbol {
            module: module_key(&keys, site.module),
            offset: site.offset,
            function: sym.function.clone(),
            file: sym.file.clone(),
            line: sym.line,
        })
        .collect();
    let out = JsonHistoryOut {
        format: JSON_FORMAT,
        version: JSON_VERSION,
        config: history.config(),
        modules: identities
            .iter()
            .map(|m| JsonModule {
                key: m.key(),
                path: m.path.clone(),
                build_id: m.build_id_hex(),
            })
            .collect(),
        processes: history.processes().copied().collect(),
        stats: history.stats(),
        source_stats: history.source_stats(),
        allocations: Allocations {
            history,
            keys: &keys,
        },
        stacks,
        symbols,
        fingerprints: history.fingerprint_stats(),
    };
    serde_json::to_writer(&mut *w, &out).map_err(|e| FormatError::io(e.into()))?;
    w.write_all(b"\n").map_err(FormatError::io)
}

/// The JSON dump as a string.
pub fn to_string(history: &MemHistory) -> String {
    let mut buf = Vec::new();
    // Writing to memory cannot fail.
    let _ = write(history, &mut buf);
    String::from_utf8(buf).unwrap_or_default()
}

fn json_error(e: serde_path_to_error::Error<serde_json::Error>) -> FormatError {
    let path = e.path().to_string();
    let inner = e.into_inner();
    FormatError::json(path, inner.line(), inner.column(), inner.to_string())
}

/// Reads a JSON history dump.
pub fn read(bytes: &[u8]) -> Result<MemHistory, FormatError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    let header: JsonHeader = serde_path_to_error::deserialize(de).map_err(json_error)?;
    match header.format.as_deref() {
        Some(JSON_FORMAT) => {}
        Some(crate::profile::PROFILE_FORMAT) => {
            return Err(FormatError::json(
                "format",
                0,
                0,
                "this is a pinwise profile, not a history dump",
            ))
        }
        Some(other) => {
            return Err(FormatError::json(
                "format",
                0,
                0,
                format!("expected \"{JSON_FORMAT}\", found \"{other}\""),
            ))
        }
        None => return Err(FormatError::json("format", 0, 0, "missing field `format`")),
    }
    match header.version {
        Some(JSON_MIN_VERSION..=JSON_VERSION) => {}
        Some(v) => {
            return Err(FormatError::new(FormatErrorKind::UnsupportedVersion {
                format: "JSON history",
                found: v,
                supported: JSON_VERSION,
            }))
        }
        None => {
            return Err(FormatError::json(
                "version",
                0,
                0,
                "missing field `version`",
            ))
        }
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    let doc: JsonHistoryIn = serde_path_to_error::deserialize(de).map_err(json_error)?;
    build(doc)
}

fn invalid(path: String, message: impl Into<String>) -> FormatError {
    FormatError::json(path, 0, 0, message)
}

fn build(doc: JsonHistoryIn) -> Result<MemHistory, FormatError> {
    let modules: Arc<ModuleTable> = ModuleTable::shared();
    for (i, m) in doc.modules.iter().enumerate() {
        let identity = match &m.build_id {
            Some(hex) => ModuleIdentity::with_build_id(
                m.path.clone(),
                parse_hex(hex).ok_or_else(|| {
                    invalid(format!("modules[{i}].build_id"), "not a hexadecimal string")
                })?,
            ),
            None => ModuleIdentity::from_path(m.path.clone()),
        };
        if identity.key() != m.key {
            return Err(invalid(
                format!("modules[{i}].key"),
                format!(
                    "key \"{}\" does not match the module's identity \"{}\"",
                    m.key,
                    identity.key()
                ),
            ));
        }
        modules.intern(&identity);
    }
    let find_module = |key: &str, path: String| {
        modules
            .find_key(key)
            .ok_or_else(|| invalid(path, format!("module \"{key}\" is not in `modules`")))
    };
    let stacks = StackTable::shared();
    let mut stack_ids = Vec::with_capacity(doc.stacks.len());
    for (i, st) in doc.stacks.iter().enumerate() {
        let at = |j: usize, field: &str| format!("stacks[{i}].frames[{j}].{field}");
        if st.frames.len() > MAX_FRAMES {
            return Err(invalid(
                format!("stacks[{i}].frames"),
                format!("{} frames (at most {MAX_FRAMES})", st.frames.len()),
            ));
        }
        let mut frames = Vec::with_capacity(st.frames.len());
        for (j, f) in st.frames.iter().enumerate() {
            frames.push(match f {
                JsonFrame::Native { module, offset } => Frame::Native(Site {
                    module: find_module(module, at(j, "module"))?,
                    offset: *offset,
                }),
                JsonFrame::Python {
                    file,
                    line,
                    function,
                } => Frame::Python(PyFrame::new(file, *line, function)),
            });
        }
        let id = stacks.intern(&frames);
        match id {
            Some(id) if id.index() == i => stack_ids.push(id),
            Some(_) => return Err(invalid(format!("stacks[{i}]"), "repeats an earlier stack")),
            None => return Err(invalid(format!("stacks[{i}].frames"), "an empty stack")),
        }
    }
    let mut symbols = SymbolTable::new();
    for (i, sym) in doc.symbols.into_iter().enumerate() {
        let site = Site {
            module: find_module(&sym.module, format!("symbols[{i}].module"))?,
            offset: sym.offset,
        };
        symbols.insert(
            site,
            Symbol {
                function: sym.function,
                file: sym.file,
                line: sym.line,
            },
        );
    }
    let fingerprints = doc.fingerprints;
    let process_count = doc.processes.len();
    let pids: Vec<u32> = doc.processes.iter().map(|p| p.pid).collect();
    let mut history = MemHistory::restore(
        doc.config,
        Arc::clone(&modules),
        doc.processes,
        doc.stats,
        doc.source_stats,
        stacks,
        symbols,
    );
    for (i, a) in doc.allocations.into_iter().enumerate() {
        let at = |field: &str| format!("allocations[{i}].{field}");
        if a.id != i as u64 {
            return Err(invalid(
                at("id"),
                format!(
                    "id {} where {i} was expected (allocations must be in id order)",
                    a.id
                ),
            ));
        }
        if a.process as usize >= process_count {
            return Err(invalid(
                at("process"),
                format!("process {} but only {process_count} processes", a.process),
            ));
        }
        if pids[a.process as usize] != a.pid {
            return Err(invalid(
                at("pid"),
                format!(
                    "pid {} but process {} has pid {}",
                    a.pid, a.process, pids[a.process as usize]
                ),
            ));
        }
        let kind = AllocKind::parse(&a.kind)
            .ok_or_else(|| invalid(at("kind"), format!("unknown kind \"{}\"", a.kind)))?;
        let state = AllocState::parse(&a.final_state).ok_or_else(|| {
            invalid(
                at("final_state"),
                format!("unknown state \"{}\"", a.final_state),
            )
        })?;
        let site = Site {
            module: find_module(&a.tag.module, at("tag.module"))?,
            offset: a.tag.offset,
        };
        let mut events = Vec::with_capacity(a.events.len());
        for (j, e) in a.events.iter().enumerate() {
            let path = format!("allocations[{i}].events[{j}]");
            events.push(event_from_json(e, &path, &find_module)?);
        }
        let stack = match a.stack {
            None => None,
            Some(k) => Some(*stack_ids.get(k).ok_or_else(|| {
                invalid(
                    at("stack"),
                    format!("stack {k} but only {} stacks", stack_ids.len()),
                )
            })?),
        };
        let counters = TransferCounters::from(&a.counters);
        let mut from_events = TransferCounters::default();
        for e in &events {
            if let Recorded::Transfer {
                direction,
                bytes,
                pinned,
                ..
            } = e.what
            {
                from_events.add(direction, bytes, pinned);
            }
        }
        let capped = if a.events_dropped > 0 {
            Some((counters, a.events_dropped))
        } else {
            if from_events != counters {
                return Err(invalid(
                    at("counters"),
                    "counters do not match the transfer events (and no events were dropped)",
                ));
            }
            None
        };
        if counters.transfers() != a.transfer_count || counters.bytes() != a.bytes_transferred {
            return Err(invalid(
                at("transfer_count"),
                "transfer_count or bytes_transferred do not match the counters",
            ));
        }
        history
            .restore_record(RestoredRecord {
                process: a.process,
                site,
                call_no: a.tag.call_no,
                start: a.start,
                size: a.size,
                kind,
                state,
                pinned_seen: a.pinned_by_registration,
                capped,
                events,
                stack,
            })
            .map_err(|m| invalid(format!("allocations[{i}]"), m))?;
        if let Some(r) = a.redundant {
            history.redundancy_mut().restore(i as u32, r);
        }
    }
    *history.redundancy_mut().stats_mut() = fingerprints;
    Ok(history)
}

fn event_from_json(
    e: &JsonEvent,
    path: &str,
    find_module: &impl Fn(&str, String) -> Result<ModuleId, FormatError>,
) -> Result<RecordedEvent, FormatError> {
    let need = |v: Option<u64>, field: &str| {
        v.ok_or_else(|| {
            invalid(
                format!("{path}.{field}"),
                format!("{} needs `{field}`", e.kind),
            )
        })
    };
    let probe = parse_probe(&e.probe).ok_or_else(|| {
        invalid(
            format!("{path}.probe"),
            format!("unknown probe \"{}\"", e.probe),
        )
    })?;
    let site = match &e.call_site {
        Some(s) => Some(Site {
            module: find_module(&s.module, format!("{path}.call_site.module"))?,
            offset: s.offset,
        }),
        None => None,
    };
    let what = match e.kind.as_str() {
        "ALLOC" => Recorded::Alloc {
            flags: e.flags.unwrap_or(0),
        },
        "FREE" => Recorded::Free,
        "PIN_PAGES" => Recorded::PinPages {
            start: need(e.start, "start")?,
            bytes: e.bytes.unwrap_or(0),
            pages: e.pages,
        },
        "UNPIN_PAGES" => Recorded::UnpinPages {
            start: need(e.start, "start")?,
            pages: e.pages,
        },
        "DEVICE_TRANSFER" => {
            let dir = e.direction.as_deref().ok_or_else(|| {
                invalid(
                    format!("{path}.direction"),
                    "DEVICE_TRANSFER needs `direction`",
                )
            })?;
            let direction: Direction = parse_direction(dir).ok_or_else(|| {
                invalid(
                    format!("{path}.direction"),
                    format!("unknown direction \"{dir}\""),
                )
            })?;
            let pinned = match e.host_state.as_deref() {
                Some("PINNED") => true,
                Some("PAGEABLE") => false,
                other => {
                    return Err(invalid(
                        format!("{path}.host_state"),
                        format!("expected \"PAGEABLE\" or \"PINNED\", found {other:?}"),
                    ))
                }
            };
            let reported: HostState = match e.reported_host_state.as_deref() {
                None => HostState::Unknown,
                Some(s) => parse_host_state(s).ok_or_else(|| {
                    invalid(
                        format!("{path}.reported_host_state"),
                        format!("unknown host state \"{s}\""),
                    )
                })?,
            };
            Recorded::Transfer {
                direction,
                bytes: need(e.bytes, "bytes")?,
                host: need(e.host, "host")?,
                is_async: e.is_async.unwrap_or(false),
                stream: e.stream.unwrap_or(0),
                pinned,
                reported,
            }
        }
        "MMAP" => Recorded::Mmap {
            start: need(e.start, "start")?,
            len: need(e.len, "len")?,
        },
        "MUNMAP" => Recorded::Munmap {
            start: need(e.start, "start")?,
            len: need(e.len, "len")?,
        },
        "PAGE_FAULT" => Recorded::PageFault {
            addr: need(e.addr, "addr")?,
        },
        other => {
            return Err(invalid(
                format!("{path}.type"),
                format!("unknown event type \"{other}\""),
            ))
        }
    };
    Ok(RecordedEvent {
        ts_ns: e.timestamp_ns,
        probe,
        site,
        what,
    })
}

pub(crate) fn parse_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}
