//! Dump formats: JSON and binary round trips, the JSON Schema, appendable binary dumps,
//! format detection, and loaders that never panic and say what and where on bad input.

mod common;

use common::*;
use pinwise_core::event::{Direction, Event, EventKind, HostMemKind, HostState, ProbeKind};
use pinwise_core::format::{self, binary, json, BinaryAppender, DumpFormat, FormatErrorKind};
use pinwise_core::history::{HistoryConfig, MemHistory};
use pinwise_core::stack::{Frame, PyFrame, StackId, Symbol};
use pinwise_core::synth::{SynthConfig, SynthEvents};
use pinwise_core::tag::{ModuleIdentity, Site};
use proptest::prelude::*;

const A: u64 = 0x7000_0000;

/// A history with every kind of event, record kind and final state, with stacks (native
/// and Python frames) and symbols.
fn rich_history() -> MemHistory {
    rich_history_of(true)
}

/// [`rich_history`] as format version 1 could hold it: no stacks, no symbols.
fn rich_history_v1() -> MemHistory {
    rich_history_of(false)
}

fn rich_history_of(with_stacks: bool) -> MemHistory {
    let mut h = MemHistory::new(HistoryConfig {
        max_events_per_allocation: 8,
        track_untracked: true,
    });
    let app = h.modules().intern(&ModuleIdentity::with_build_id(
        "/opt/app/bin/train",
        vec![0xde, 0xad, 0xbe, 0xef],
    ));
    let lib = h
        .modules()
        .intern(&ModuleIdentity::from_path("/usr/lib/libtorch.so"));
    let at = |offset| Site {
        module: app,
        offset,
    };
    let stacks = h.stacks();
    let intern = |frames: &[Frame]| {
        if with_stacks {
            stacks.intern(frames)
        } else {
            None
        }
    };
    let stack_a = intern(&[
        Frame::Native(Site {
            module: lib,
            offset: 0x40,
        }),
        Frame::Native(Site {
            module: app,
            offset: 0x1234,
        }),
        Frame::Python(PyFrame::new("/srv/train.py", 88, "load_batch")),
        Frame::Python(PyFrame::new("/srv/train.py", 120, "<module>")),
    ]);
    let stack_b = intern(&[Frame::Native(Site {
        module: app,
        offset: 0x2000,
    })]);
    let with = |e: Event, s: Option<StackId>| match s {
        Some(s) => e.with_stack(s),
        None => e,
    };
    let mib = 1u64 << 20;
    let mut ts = 1_000_000_000;
    let mut t = || {
        ts += 1234;
        ts
    };
    h.ingest(&with(
        alloc(t(), PID, A, mib, HostMemKind::Pageable, at(0x1234)),
        stack_a,
    ));
    h.ingest(
        &Event::new(
            t(),
            PID,
            7,
            ProbeKind::Uprobe,
            EventKind::Transfer {
                direction: Direction::HtoD,
                host: A + 64,
                device: 0xd00,
                bytes: 4096,
                is_async: true,
                stream: 0xabc,
                host_state: HostState::Unknown,
            },
        )
        .with_site(Site {
            module: lib,
            offset: 0x77,
        }),
    );
    h.ingest(&pin(t(), PID, A, mib));
    h.ingest(&copy(t(), PID, Direction::DtoH, A, mib));
    h.ingest(&Event::new(
        t(),
        PID,
        7,
        ProbeKind::Tracepoint,
        EventKind::PageFault { addr: A + 8192 },
    ));
    h.ingest(&Event::new(
        t(),
        PID,
        7,
        ProbeKind::Tracepoint,
        EventKind::Mmap {
            start: A,
            len: 4096,
        },
    ));
    h.ingest(&unpin(t(), PID, A));
    h.ingest(&copy_state(
        t(),
        PID,
        Direction::HtoH,
        A,
        10,
        HostState::Pageable,
    ));
    h.ingest(&free(t(), PID, A));
    // A capped record with many copies, live at the end.
    h.ingest(&with(
        alloc(
            t(),
            PID,
            A + 4 * mib,
            2 * mib,
            HostMemKind::PinnedAlloc,
            at(0x2000),
        ),
        stack_b,
    ));
    for i in 0..50 {
        h.ingest(&copy(
            t(),
            PID,
            if i % 2 == 0 {
                Direction::HtoD
            } else {
                Direction::DtoH
            },
            A + 4 * mib + i,
            1000 + i,
        ));
    }
    // Untracked memory, a registration of unknown memory, an unmapped allocation.
    h.ingest(&copy(t(), PID, Direction::HtoD, A + 16 * mib, 300));
    h.ingest(&pin(t(), PID, A + 32 * mib, 3 * 4096));
    h.ingest(&alloc(
        t(),
        PID,
        A + 64 * mib,
        4096,
        HostMemKind::Registered,
        at(0x3000),
    ));
    h.ingest(&Event::new(
        t(),
        PID,
        7,
        ProbeKind::Tracepoint,
        EventKind::Munmap {
            start: A + 64 * mib,
            len: 8192,
        },
    ));
    // A second process that exits with a live allocation, then a new one with its pid.
    h.ingest(&alloc(t(), 200, A, 4096, HostMemKind::Pageable, at(0x1234)));
    h.ingest(&copy(t(), 200, Direction::HtoD, A, 4096));
    let exit = t();
    h.process_exited(200, exit);
    h.ingest(&alloc(t(), 200, A, 8192, HostMemKind::Pageable, at(0x1234)));
    // A copy with no host memory, an unmatched free, and a replaced allocation.
    h.ingest(&Event::new(
        t(),
        PID,
        7,
        ProbeKind::Uprobe,
        EventKind::Transfer {
            direction: Direction::DtoD,
            host: 0,
            device: 1,
            bytes: 5,
            is_async: false,
            stream: 0,
            host_state: HostState::Unknown,
        },
    ));
    h.ingest(&free(t(), PID, 0xdead));
    h.ingest(&alloc(
        t(),
        PID,
        A + 128 * mib,
        4096,
        HostMemKind::Pageable,
        site(0x9),
    ));
    h.ingest(&alloc(
        t(),
        PID,
        A + 128 * mib,
        4096,
        HostMemKind::Pageable,
        site(0x9),
    ));
    h.set_source_stats([("tracer.ringbuf_drops", 3u64), ("tracer.lost_events", 1)]);
    if with_stacks {
        let named = h.symbolize_with(|m, offsets| {
            offsets
                .iter()
                .map(|&o| {
                    (m.path.ends_with("train") && o != 0x2000).then(|| Symbol {
                        function: format!("load_{o:x}"),
                        file: (o == 0x1234).then(|| "train.cc".to_owned()),
                        line: (o == 0x1234).then_some(42),
                    })
                })
                .collect()
        });
        assert!(named >= 2, "{named}");
    }
    h
}

fn synthetic(n_alloc: u64, n_events: u64) -> MemHistory {
    let mut h = MemHistory::default();
    let events: Vec<Event> = SynthEvents::new(
        SynthConfig {
            allocations: n_alloc,
            events: n_events,
            live_window: 50,
            ..SynthConfig::default()
        },
        &h.modules(),
    )
    .collect();
    h.ingest_batch(&events);
    h
}

#[test]
fn the_rich_history_has_what_it_claims() {
    let h = rich_history();
    let states: Vec<&str> = h.allocations().map(|v| v.state().as_str()).collect();
    for s in ["LIVE", "FREED", "REPLACED", "UNMAPPED", "EXITED"] {
        assert!(states.contains(&s), "missing state {s}: {states:?}");
    }
    let kinds: Vec<&str> = h.allocations().map(|v| v.kind().as_str()).collect();
    for k in ["PAGEABLE", "PINNED_ALLOC", "REGISTERED", "UNTRACKED"] {
        assert!(kinds.contains(&k), "missing kind {k}");
    }
    assert!(h.allocations().any(|v| v.is_capped()));
    let types: std::collections::HashSet<&str> = h
        .allocations()
        .flat_map(|v| v.events().map(|e| e.what.type_name()).collect::<Vec<_>>())
        .collect();
    assert_eq!(types.len(), 8, "{types:?}");
}

#[test]
fn json_round_trip_keeps_everything() {
    for h in [
        rich_history(),
        synthetic(2000, 20_000),
        MemHistory::default(),
    ] {
        let text = json::to_string(&h);
        let back = json::read(text.as_bytes()).unwrap();
        assert_same_history(&h, &back);
        assert_eq!(json::to_string(&back), text, "writing is deterministic");
    }
}

#[test]
fn binary_round_trip_keeps_everything_and_is_compact() {
    for h in [
        rich_history(),
        synthetic(2000, 20_000),
        MemHistory::default(),
    ] {
        let bytes = binary::to_bytes(&h);
        let back = binary::read(&bytes).unwrap();
        assert_same_history(&h, &back);
        assert_eq!(binary::to_bytes(&back), bytes);
    }
    let h = synthetic(2000, 20_000);
    let (b, j) = (binary::to_bytes(&h).len(), json::to_string(&h).len());
    let per_event = b as f64 / h.stats().events_retained as f64;
    // Events as the history encodes them plus ~20 bytes of record header per allocation.
    assert!(
        per_event < 12.0,
        "{per_event} bytes per event in the binary dump"
    );
    assert!(j > 10 * b, "binary {b} vs JSON {j}");
}

#[test]
fn the_json_dump_follows_its_schema_and_the_issues_shape() {
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../../../schemas/history.schema.json")).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    let doc: serde_json::Value = serde_json::from_str(&json::to_string(&rich_history())).unwrap();
    let errors: Vec<String> = validator.iter_errors(&doc).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:#?}");
    // The shape scripts rely on.
    let a = &doc["allocations"][0];
    for key in [
        "start",
        "size",
        "tag",
        "final_state",
        "transfer_count",
        "bytes_transferred",
        "events",
    ] {
        assert!(a.get(key).is_some(), "allocation lacks {key}");
    }
    assert_eq!(a["tag"]["module"], "buildid:deadbeef");
    assert_eq!(a["tag"]["call_no"], 1);
    let e = &a["events"][1];
    for key in [
        "timestamp_ns",
        "type",
        "direction",
        "bytes",
        "call_site",
        "probe",
    ] {
        assert!(e.get(key).is_some(), "event lacks {key}");
    }
    assert_eq!(e["type"], "DEVICE_TRANSFER");
    assert_eq!(e["direction"], "HtoD");
    assert_eq!(e["call_site"]["module"], "path:/usr/lib/libtorch.so");
    assert_eq!(a["stack"], 0);
    assert_eq!(doc["stacks"][0]["frames"][2]["type"], "python");
    assert_eq!(doc["stacks"][0]["frames"][2]["line"], 88);
    assert_eq!(doc["stacks"][0]["frames"][0]["type"], "native");
    assert!(doc["symbols"].as_array().is_some_and(|s| !s.is_empty()));
    // The schema rejects what it should.
    let mut bad = doc.clone();
    bad["stacks"][0]["frames"][2]["type"] = "ruby".into();
    assert!(!validator.is_valid(&bad));
    let mut bad = doc.clone();
    bad["allocations"][0]["events"][1]["type"] = "TELEPORT".into();
    assert!(!validator.is_valid(&bad));
    let mut bad = doc.clone();
    bad["allocations"][0]["events"][1]
        .as_object_mut()
        .unwrap()
        .remove("direction");
    assert!(!validator.is_valid(&bad));
}

#[test]
fn periodic_binary_dumps_append_and_read_back_as_of_each_append() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.pwh");
    let mut h = MemHistory::new(HistoryConfig {
        max_events_per_allocation: 16,
        track_untracked: true,
    });
    let stream: Vec<Event> = SynthEvents::new(
        SynthConfig {
            allocations: 3000,
            events: 30_000,
            live_window: 80,
            ..SynthConfig::default()
        },
        &h.modules(),
    )
    .collect();
    let mut appender = BinaryAppender::create(&path).unwrap();
    let mut sizes = Vec::new();
    for (i, chunk) in stream.chunks(4000).enumerate() {
        h.ingest_batch(chunk);
        h.set_source_stat("dumps", i as u64);
        appender.append(&h).unwrap();
        let loaded = format::load_history(&path).unwrap();
        assert_same_history(&h, &loaded);
        sizes.push(std::fs::metadata(&path).unwrap().len());
    }
    h.process_exited(4242, u64::MAX / 2);
    appender.append(&h).unwrap();
    assert_same_history(&h, &format::load_history(&path).unwrap());
    // Appending writes what changed, not the whole history again.
    let whole = binary::to_bytes(&h).len() as u64;
    let file = std::fs::metadata(&path).unwrap().len();
    assert!(
        file < 2 * whole,
        "appended file {file} vs one-shot dump {whole}"
    );
    assert!(sizes.windows(2).all(|w| w[1] > w[0]));
}

/// An append writes the records created since the previous one and the live ones that
/// changed; an unchanged live record is not written again (so an append's cost follows what
/// happened since the previous one, not the size of the history), and the file still reads
/// back as the whole history. An append encoded but not written changes nothing.
#[test]
fn appends_skip_unchanged_live_records() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.bin");
    let mut h = MemHistory::new(HistoryConfig::default());
    let site = Site {
        module: h.modules().intern(&ModuleIdentity::from_path("/opt/app")),
        offset: 0x10,
    };
    let mut ts = 1_000;
    let mut t = || {
        ts += 10;
        ts
    };
    let base = |i: u64| A + (i << 24);
    for i in 0..500 {
        h.ingest(&alloc(
            t(),
            PID,
            base(i),
            1 << 20,
            HostMemKind::Pageable,
            site,
        ));
    }
    let mut app = BinaryAppender::create(&path).unwrap();
    let first = app.encode(&h).unwrap();
    assert_eq!(first.records(), 500);
    app.write(first, false).unwrap();
    // Nothing happened: no record is written again.
    let idle = app.encode(&h).unwrap();
    assert_eq!(idle.records(), 0);
    // Encoded, never written: the next append still holds what it held.
    h.ingest(&copy(t(), PID, Direction::HtoD, base(3), 4096));
    assert_eq!(app.encode(&h).unwrap().records(), 1);
    // One copy into one buffer, one freed, one new: three records.
    h.ingest(&copy(t(), PID, Direction::DtoH, base(7), 4096));
    h.ingest(&free(t(), PID, base(9)));
    h.ingest(&alloc(
        t(),
        PID,
        base(600),
        4096,
        HostMemKind::PinnedAlloc,
        site,
    ));
    let next = app.encode(&h).unwrap();
    assert_eq!(next.records(), 4, "two copied into, one freed, one new");
    app.write(next, false).unwrap();
    assert_same_history(&h, &format::load_history(&path).unwrap());
    assert_eq!(app.appends(), 2);
    assert_eq!(app.file_len(), std::fs::metadata(&path).unwrap().len());
    // The process ends: every live record changes state.
    h.process_exited(PID, t());
    let last = app.encode(&h).unwrap();
    assert_eq!(
        last.records(),
        500,
        "499 pageable and 1 pinned, all live until then"
    );
    app.write(last, true).unwrap();
    assert_same_history(&h, &format::load_history(&path).unwrap());
}

#[test]
fn load_history_tells_the_formats_apart_by_content() {
    let dir = tempfile::tempdir().unwrap();
    let h = rich_history();
    for (name, fmt) in [
        ("a.json", DumpFormat::Json),
        ("b.bin", DumpFormat::Binary),
        ("c.json", DumpFormat::Binary),
        ("d", DumpFormat::Json),
    ] {
        let path = dir.path().join(name);
        format::save_history(&h, &path, fmt).unwrap();
        assert_same_history(&h, &format::load_history(&path).unwrap());
    }
    assert_eq!(
        DumpFormat::from_path(std::path::Path::new("x.JSON")),
        DumpFormat::Json
    );
    assert_eq!(
        DumpFormat::from_path(std::path::Path::new("x.pwh")),
        DumpFormat::Binary
    );
    let err = format::load_history(dir.path().join("missing.json")).unwrap_err();
    assert!(err.to_string().contains("missing.json"), "{err}");
    std::fs::write(dir.path().join("e"), "").unwrap();
    assert!(format::load_history(dir.path().join("e"))
        .unwrap_err()
        .to_string()
        .contains("empty"));
    std::fs::write(dir.path().join("f"), "hello").unwrap();
    let err = format::load_history(dir.path().join("f")).unwrap_err();
    assert!(
        matches!(err.kind, FormatErrorKind::Unrecognized(_)),
        "{err}"
    );
}

#[test]
fn every_truncation_of_a_binary_dump_is_an_error_that_says_where() {
    let bytes = binary::to_bytes(&rich_history());
    for len in 0..bytes.len() {
        let err = format::load_history_bytes(&bytes[..len]).unwrap_err();
        let msg = err.to_string();
        match &err.kind {
            FormatErrorKind::Truncated { .. } => {
                assert!(msg.contains("truncated at byte"), "{msg}")
            }
            FormatErrorKind::Unrecognized(_) => assert!(len < 4, "len {len}: {msg}"),
            other => panic!("len {len}: unexpected {other:?}"),
        }
    }
}

#[test]
fn wrong_versions_and_corruption_are_named() {
    let mut bytes = binary::to_bytes(&rich_history());
    bytes[8] = 9;
    let e = format::load_history_bytes(&bytes).unwrap_err().to_string();
    assert!(e.contains("version 9 is not supported"), "{e}");
    bytes[8] = 3;
    let last = bytes.len() - 3;
    bytes[last] ^= 0x40;
    let e = format::load_history_bytes(&bytes).unwrap_err();
    assert!(matches!(e.kind, FormatErrorKind::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("checksum mismatch"), "{e}");
    let text = json::to_string(&rich_history()).replace("\"version\":3", "\"version\":4");
    let e = format::load_history_bytes(text.as_bytes())
        .unwrap_err()
        .to_string();
    assert!(e.contains("version 4 is not supported"), "{e}");
    let text = json::to_string(&rich_history()).replacen("\"final_state\":", "\"state\":", 1);
    let e = format::load_history_bytes(text.as_bytes()).unwrap_err();
    let FormatErrorKind::Json { path, line, .. } = &e.kind else {
        panic!("{e}")
    };
    assert_eq!(path, "allocations[0]");
    assert_eq!(*line, 1);
    assert!(e.to_string().contains("final_state"), "{e}");
    let text = json::to_string(&rich_history()).replacen("\"DEVICE_TRANSFER\"", "\"TELEPORT\"", 1);
    let e = format::load_history_bytes(text.as_bytes())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("allocations[0].events[1].type") && e.contains("TELEPORT"),
        "{e}"
    );
    let e = format::load_history_bytes(br#"{"format":"pinwise-profile","version":1}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("profile, not a history"), "{e}");
    let text = json::to_string(&rich_history());
    let e = format::load_history_bytes(&text.as_bytes()[..text.len() / 2]).unwrap_err();
    assert!(
        matches!(e.kind, FormatErrorKind::Json { line: 1, .. }),
        "{e}"
    );
}

/// Recomputes every frame's checksum, so mutations reach the decoders behind it.
fn fix_checksums(bytes: &mut [u8]) {
    let mut pos = 16;
    while pos + 12 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[pos + 4..pos + 8].try_into().unwrap()) as usize;
        let Some(payload) = bytes.get(pos + 12..pos + 12 + len) else {
            return;
        };
        let crc = crc32fast::hash(payload);
        bytes[pos + 8..pos + 12].copy_from_slice(&crc.to_le_bytes());
        pos += 12 + len;
    }
}

fn small_dump() -> Vec<u8> {
    binary::to_bytes(&rich_history())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn mutated_binary_dumps_never_panic(
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        fix in any::<bool>(),
    ) {
        let mut bytes = small_dump();
        for (i, v) in flips {
            let i = i.index(bytes.len());
            bytes[i] = v;
        }
        if fix {
            fix_checksums(&mut bytes);
        }
        let _ = format::load_history_bytes(&bytes);
    }

    #[test]
    fn mutated_json_dumps_never_panic(
        flips in prop::collection::vec((any::<prop::sample::Index>(), prop::sample::select(b"0123456789{}[]\",:-ea ".to_vec())), 1..6),
    ) {
        let mut bytes = json::to_string(&rich_history()).into_bytes();
        for (i, v) in flips {
            let i = i.index(bytes.len());
            bytes[i] = v;
        }
        let _ = format::load_history_bytes(&bytes);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512), magic in any::<bool>()) {
        let mut input = bytes;
        if magic {
            let mut with = format::BINARY_MAGIC.to_vec();
            with.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
            with.extend_from_slice(&input);
            input = with;
            fix_checksums(&mut input);
        }
        let _ = format::load_history_bytes(&input);
    }
}

/// Counters a capped record carries are taken as the dump writes them; counts whose sums
/// overflow 64 bits saturate (and here no longer match the dump's totals), never panic.
#[test]
fn counters_that_overflow_when_summed_do_not_panic() {
    let h = rich_history();
    let mut doc: serde_json::Value = serde_json::from_str(&json::to_string(&h)).unwrap();
    let allocations = doc["allocations"].as_array_mut().unwrap();
    let capped = allocations
        .iter_mut()
        .find(|a| a["events_dropped"].as_u64().unwrap_or(0) > 0)
        .expect("the rich history has a capped record");
    for field in [
        "pageable_transfers",
        "pinned_transfers",
        "pageable_bytes",
        "pinned_bytes",
    ] {
        capped["counters"]["HtoD"][field] = serde_json::json!(u64::MAX);
    }
    // The dump's transfer_count no longer matches: an error that says where.
    let e = format::load_history_bytes(doc.to_string().as_bytes())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("allocations[") && e.contains("transfer_count"),
        "{e}"
    );
}

/// The stats a dump carries are restored as they are, whatever they say: restoring its
/// records does not add to them (it used to, and overflowed on a dump saying u64::MAX).
#[test]
fn stats_at_their_limit_load() {
    let h = rich_history();
    let mut doc: serde_json::Value = serde_json::from_str(&json::to_string(&h)).unwrap();
    for field in ["events_retained", "records"] {
        doc["stats"][field] = serde_json::json!(u64::MAX);
    }
    let back = format::load_history_bytes(doc.to_string().as_bytes()).unwrap();
    assert_eq!(back.stats().events_retained, u64::MAX);
    assert_eq!(back.stats().records, u64::MAX);
}

/// Version 1 dumps (JSON and binary, written by the build before stacks and symbols, kept in
/// tests/data) still read, and hold exactly what the same history holds today without stacks.
#[test]
fn version_1_dumps_still_read() {
    let expected = json::to_string(&rich_history_v1());
    for file in ["history-v1.bin", "history-v1.json"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(file);
        let h = format::load_history(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(h.stacks().is_empty(), "{file}");
        assert!(h.symbols().is_empty(), "{file}");
        assert!(h.allocations().all(|a| a.stack().is_none()), "{file}");
        assert_eq!(json::to_string(&h), expected, "{file}");
    }
    let v1 = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/history-v1.bin"),
    )
    .unwrap();
    assert_eq!(u32::from_le_bytes(v1[8..12].try_into().unwrap()), 1);
}

/// Stacks (native and Python frames) and symbols survive both formats, and a stack seen
/// twice is stored once.
#[test]
fn stacks_and_symbols_round_trip() {
    let h = rich_history();
    assert_eq!(h.stacks().len(), 2);
    let first = h.allocations().next().unwrap();
    let stack = first.stack().expect("the first allocation has a stack");
    assert_eq!(stack.len(), 4);
    assert_eq!(
        stack[2],
        Frame::Python(PyFrame::new("/srv/train.py", 88, "load_batch"))
    );
    let app_site = stack[1].site().unwrap();
    let sym = h.symbol(app_site).expect("the app site is named");
    assert_eq!(sym.function, "load_1234");
    assert_eq!(sym.file.as_deref(), Some("train.cc"));
    assert_eq!(sym.line, Some(42));
    // 0x2000 was left unnamed by the resolver; the libtorch frame too.
    assert!(h.symbols().keys().all(|s| s.offset != 0x2000));
    for (name, back) in [
        (
            "binary",
            format::load_history_bytes(&binary::to_bytes(&h)).unwrap(),
        ),
        (
            "json",
            format::load_history_bytes(json::to_string(&h).as_bytes()).unwrap(),
        ),
    ] {
        assert_eq!(json::to_string(&back), json::to_string(&h), "{name}");
        assert_eq!(binary::to_bytes(&back), binary::to_bytes(&h), "{name}");
        let a = back.allocations().next().unwrap();
        assert_eq!(a.stack().as_deref(), Some(&stack[..]), "{name}");
        assert_eq!(back.symbol(app_site), Some(sym), "{name}");
        assert_eq!(back.symbols().len(), h.symbols().len(), "{name}");
    }
    // Labels and the user frame come from what the history holds.
    assert_eq!(h.frame_label(&stack[1]), "load_1234 (train.cc:42)");
    assert_eq!(h.frame_label(&stack[0]), "libtorch.so+0x40");
    assert_eq!(h.frame_label(&stack[2]), "train.py:88 in load_batch");
    assert_eq!(h.user_frame(&stack), Some(2), "the Python frame wins");
    assert_eq!(h.user_frame(&stack[..2]), Some(1), "past libtorch");
    // A record naming a stack the file lacks is an error that says so.
    let text = json::to_string(&h).replacen("\"stack\":0", "\"stack\":7", 1);
    let e = format::load_history_bytes(text.as_bytes())
        .unwrap_err()
        .to_string();
    assert!(e.contains("stack 7 but only 2 stacks"), "{e}");
}

/// Redundancy summaries and fingerprint statistics survive both formats and appendable
/// binary dumps (an append writes the summaries that changed since the previous one).
#[test]
fn redundancy_round_trips_and_appends() {
    use pinwise_core::fingerprint::Fingerprint;
    let mut h = MemHistory::default();
    h.redundancy_mut().stats_mut().mode = 1;
    h.ingest(&alloc(
        1,
        PID,
        A,
        1 << 20,
        HostMemKind::Pageable,
        site(0x10),
    ));
    let weights = vec![7u8; 1 << 20];
    let mut changed = weights.clone();
    changed[5000] = 1;
    let up = |ts, buf: &[u8]| {
        copy(ts, PID, Direction::HtoD, A, buf.len() as u64)
            .with_fingerprint(Fingerprint::of(buf, true))
    };
    h.ingest(&up(2, &weights));
    h.ingest(&up(3, &weights));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.bin");
    let mut appender = BinaryAppender::create(&path).unwrap();
    appender.append(&h).unwrap();
    h.ingest(&up(4, &changed));
    h.ingest(&up(5, &changed));
    h.ingest(&up(6, &changed));
    appender.append(&h).unwrap();
    let r = *h.allocations().next().unwrap().redundancy().unwrap();
    assert_eq!((r.uploads, r.redundant_uploads, r.device_held), (5, 3, 3));
    assert_eq!(r.redundant_upload_bytes, 3 << 20);
    assert_eq!(r.first_upload, Some((2, 1)));
    let s = *h.fingerprint_stats();
    assert_eq!((s.uploads, s.full_hashes, s.checked), (5, 5, 4));
    assert_eq!(
        s.sampled_false_same, 1,
        "upload 3 -> 4: a change between sampled lines"
    );
    for (name, back) in [
        ("appended", format::load_history(&path).unwrap()),
        (
            "binary",
            format::load_history_bytes(&binary::to_bytes(&h)).unwrap(),
        ),
        (
            "json",
            format::load_history_bytes(json::to_string(&h).as_bytes()).unwrap(),
        ),
    ] {
        let a = back.allocations().next().unwrap();
        assert_eq!(a.redundancy(), Some(&r), "{name}");
        assert_eq!(back.fingerprint_stats(), &s, "{name}");
        assert_eq!(json::to_string(&back), json::to_string(&h), "{name}");
    }
    // The JSON dump with redundancy follows the schema.
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../../../schemas/history.schema.json")).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    let doc: serde_json::Value = serde_json::from_str(&json::to_string(&h)).unwrap();
    let errors: Vec<String> = validator.iter_errors(&doc).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:#?}");
    assert_eq!(doc["allocations"][0]["redundant"]["first_upload"][1], 1);
    assert_eq!(doc["fingerprints"]["sampled_false_same"], 1);
    // A binary summary naming a record the file lacks is an error that says so.
    let mut other = MemHistory::default();
    other.redundancy_mut().restore(5, r);
    let e = format::load_history_bytes(&binary::to_bytes(&other))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("redundancy summary of record 5, only 0 records"),
        "{e}"
    );
}

#[test]
fn a_profile_follows_its_schema_and_a_broken_one_does_not() {
    use pinwise_core::profile::Profile;
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../../../schemas/profile.schema.json")).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    // A profile as pinwise writes it: saved to a file, read back as JSON.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.json");
    Profile::from_history(&rich_history()).save(&path).unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&doc)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    // Every part of the format is exercised.
    assert_eq!(doc["format"], "pinwise-profile");
    assert_eq!(doc["version"], 2);
    for part in ["modules", "entries", "sites", "symbols"] {
        assert!(
            doc[part].as_array().is_some_and(|a| !a.is_empty()),
            "the profile has no {part}: {doc}"
        );
    }
    let entries = doc["entries"].as_array().unwrap();
    assert!(entries.iter().any(|e| e["end_ns"].is_null()));
    assert!(entries.iter().any(|e| e["end_ns"].is_u64()));
    assert!(entries
        .iter()
        .any(|e| e["transfers"]["HtoD"]["transfers"].as_u64() > Some(0)));
    // A version 1 profile (no symbols) is still one; the reader agrees.
    let mut v1 = doc.clone();
    v1["version"] = 1.into();
    v1.as_object_mut().unwrap().remove("symbols");
    assert!(validator.is_valid(&v1));
    Profile::from_json_bytes(v1.to_string().as_bytes()).expect("the reader takes version 1");

    // Hand-broken profiles fail, each for its own reason.
    type Break = fn(&mut serde_json::Value);
    let broken: [(&str, Break); 10] = [
        ("no format", |d| {
            d.as_object_mut().unwrap().remove("format");
        }),
        ("a history's format", |d| {
            d["format"] = "pinwise-history".into()
        }),
        ("a future version", |d| d["version"] = 3.into()),
        ("version 2 without symbols", |d| {
            d.as_object_mut().unwrap().remove("symbols");
        }),
        ("an unknown kind", |d| {
            d["entries"][0]["kind"] = "Teleported".into()
        }),
        ("a negative size", |d| d["entries"][0]["size"] = (-1).into()),
        ("a call number past u32", |d| {
            d["entries"][0]["call_no"] = 4_294_967_296u64.into()
        }),
        ("transfers as a positional array", |d| {
            d["entries"][0]["transfers"] = serde_json::json!([[1, 2], [0, 0], [0, 0], [0, 0]])
        }),
        ("a direction missing", |d| {
            d["sites"][0]["transfers"]
                .as_object_mut()
                .unwrap()
                .remove("DtoH");
        }),
        ("a misspelt field", |d| {
            let e = d.as_object_mut().unwrap().remove("entries").unwrap();
            d["entires"] = e;
        }),
    ];
    for (why, break_it) in broken {
        let mut bad = doc.clone();
        break_it(&mut bad);
        assert!(!validator.is_valid(&bad), "{why}: validates");
    }
    // A module key that is neither a build id nor a path.
    let mut bad = doc.clone();
    bad["modules"][0]["key"] = "inode:12".into();
    assert!(!validator.is_valid(&bad), "a bad module key validates");
}
