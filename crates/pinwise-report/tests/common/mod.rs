//! Histories for the tests: a hand-made scenario whose figures are known, and synthetic
//! streams (core's `synth`: not a measurement of any program).
#![allow(dead_code)]

use pinwise_core::event::{Direction, Event, EventKind, HostMemKind, HostState, ProbeKind};
use pinwise_core::synth::{SynthConfig, SynthEvents};
use pinwise_core::{HistoryConfig, MemHistory, ModuleId, ModuleIdentity, Site};
use pinwise_report::{SourceLocation, SourceResolver};

pub const MIB: u64 = 1 << 20;
pub const APP: &str = "/opt/app/bin/train";

pub const HOT_SITE: u64 = 0x1100;
pub const PINNED_SITE: u64 = 0x1200;
pub const REGISTERED_SITE: u64 = 0x1300;
pub const SMALL_SITE: u64 = 0x1500;
pub const COPY_SITE: u64 = 0x2000;

/// Names the scenario's sites like debug information would.
pub struct ScenarioSymbols;

impl SourceResolver for ScenarioSymbols {
    fn resolve(&mut self, module: &ModuleIdentity, offset: u64) -> Option<SourceLocation> {
        if module.path != APP {
            return None;
        }
        let (function, line) = match offset {
            HOT_SITE => ("load_batch", 41),
            PINNED_SITE => ("make_staging", 77),
            REGISTERED_SITE => ("register_weights", 90),
            SMALL_SITE => ("small_params", 120),
            _ => return None,
        };
        Some(SourceLocation {
            function: function.into(),
            file: Some("/src/train/loader.cc".into()),
            line: Some(line),
        })
    }
}

pub fn ev(ts: u64, pid: u32, kind: EventKind) -> Event {
    Event::new(ts, pid, pid, ProbeKind::Uprobe, kind)
}

pub fn alloc(ts: u64, pid: u32, start: u64, size: u64, kind: HostMemKind, site: Site) -> Event {
    Event::new(
        ts,
        pid,
        pid,
        ProbeKind::AllocatorCallback,
        EventKind::Alloc {
            start,
            size,
            kind,
            flags: 0,
        },
    )
    .with_site(site)
}

pub fn copy(ts: u64, pid: u32, direction: Direction, host: u64, bytes: u64, site: Site) -> Event {
    ev(
        ts,
        pid,
        EventKind::Transfer {
            direction,
            host,
            device: 0xd000_0000,
            bytes,
            is_async: false,
            stream: 0,
            host_state: HostState::Unknown,
        },
    )
    .with_site(site)
}

/// What the scenario holds, for assertions.
pub struct Scenario {
    pub history: MemHistory,
    pub app: ModuleId,
}

/// Two processes of one program:
///
/// pid 100: buffer A (64 MiB pageable, `load_batch`) copied 50x HtoD and 20x DtoH; buffer B
/// (16 MiB pinned by cuMemHostAlloc, `make_staging`) never copied and never freed; buffer C
/// (4 MiB pageable, `register_weights`) registered, copied 5x HtoD, unregistered; buffer D
/// (4 KiB, `small_params`) copied 3x HtoD; a 1 MiB HtoD copy from memory never seen
/// allocated; a 1 MiB device-to-device copy. The tracer reports 3 ring-buffer drops.
///
/// pid 200 (exits at the end): its buffer from `load_batch` (call 1 there too: the same tag
/// as A) copied 10x HtoD.
pub fn scenario() -> Scenario {
    let mut h = MemHistory::new(HistoryConfig::default());
    let app = h
        .modules()
        .intern(&ModuleIdentity::with_build_id(APP, vec![0xab, 0xcd, 0xef]));
    let site = |offset| Site {
        module: app,
        offset,
    };
    let copy_site = site(COPY_SITE);
    let (a, b, c, d) = (
        0x7f00_0000_0000u64,
        0x7f10_0000_0000u64,
        0x7f20_0000_0000u64,
        0x7f30_0000_0000u64,
    );
    let mut t = 1_000_000u64;
    let mut next = || {
        t += 10_000;
        t
    };
    let mut events = vec![
        alloc(
            next(),
            100,
            a,
            64 * MIB,
            HostMemKind::Pageable,
            site(HOT_SITE),
        ),
        alloc(
            next(),
            100,
            b,
            16 * MIB,
            HostMemKind::PinnedAlloc,
            site(PINNED_SITE),
        ),
        alloc(
            next(),
            100,
            c,
            4 * MIB,
            HostMemKind::Pageable,
            site(REGISTERED_SITE),
        ),
        alloc(
            next(),
            100,
            d,
            4096,
            HostMemKind::Pageable,
            site(SMALL_SITE),
        ),
    ];
    events.push(ev(
        next(),
        100,
        EventKind::PinPages {
            start: c,
            bytes: 4 * MIB,
            pages: None,
        },
    ));
    for i in 0..70 {
        let dir = if i % 7 < 5 {
            Direction::HtoD
        } else {
            Direction::DtoH
        };
        events.push(copy(next(), 100, dir, a, 64 * MIB, copy_site));
    }
    for _ in 0..5 {
        events.push(copy(next(), 100, Direction::HtoD, c, 4 * MIB, copy_site));
    }
    for _ in 0..3 {
        events.push(copy(next(), 100, Direction::HtoD, d, 4096, copy_site));
    }
    events.push(copy(
        next(),
        100,
        Direction::HtoD,
        0x7f40_0000_0000,
        MIB,
        copy_site,
    ));
    events.push(copy(next(), 100, Direction::DtoD, 0, MIB, copy_site));
    events.push(ev(
        next(),
        100,
        EventKind::UnpinPages {
            start: c,
            pages: None,
        },
    ));
    for start in [a, c, d] {
        events.push(ev(next(), 100, EventKind::Free { start }));
    }
    // The second process.
    let e = 0x7f50_0000_0000u64;
    events.push(alloc(
        next(),
        200,
        e,
        64 * MIB,
        HostMemKind::Pageable,
        site(HOT_SITE),
    ));
    for _ in 0..10 {
        events.push(copy(next(), 200, Direction::HtoD, e, 64 * MIB, copy_site));
    }
    for e in &events {
        h.ingest(e);
    }
    h.process_exited(200, next());
    h.set_source_stats([("tracer.ringbuf_drops", 3u64), ("tracer.records", 120)]);
    Scenario { history: h, app }
}

/// A synthetic history (core's `synth`).
pub fn synthetic(seed: u64, allocations: u64, events: u64, cap: u32) -> MemHistory {
    let mut h = MemHistory::new(HistoryConfig {
        max_events_per_allocation: cap,
        ..HistoryConfig::default()
    });
    let modules = h.modules();
    let cfg = SynthConfig {
        seed,
        allocations,
        events,
        live_window: 256.min(allocations as usize).max(1),
        ..SynthConfig::default()
    };
    for e in SynthEvents::new(cfg, &modules) {
        h.ingest(&e);
    }
    h
}

/// An `InputInfo` for a history that was never a file.
pub fn info(name: &str) -> pinwise_report::InputInfo {
    pinwise_report::InputInfo {
        path: name.into(),
        kind: pinwise_report::InputKind::BinaryHistory,
        file_bytes: 0,
        salvaged: None,
    }
}
