//! Event builders and history comparison shared by the integration tests.
#![allow(dead_code)]

use pinwise_core::event::{Direction, Event, EventKind, HostMemKind, HostState, ProbeKind};
use pinwise_core::history::MemHistory;
use pinwise_core::tag::{ModuleId, Site};

pub const PID: u32 = 100;

pub fn site(offset: u64) -> Site {
    Site {
        module: ModuleId::UNKNOWN,
        offset,
    }
}

pub fn alloc(ts: u64, pid: u32, start: u64, size: u64, kind: HostMemKind, at: Site) -> Event {
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
    .with_site(at)
}

pub fn free(ts: u64, pid: u32, start: u64) -> Event {
    Event::new(
        ts,
        pid,
        pid,
        ProbeKind::AllocatorCallback,
        EventKind::Free { start },
    )
}

pub fn copy(ts: u64, pid: u32, direction: Direction, host: u64, bytes: u64) -> Event {
    copy_state(ts, pid, direction, host, bytes, HostState::Unknown)
}

pub fn copy_state(
    ts: u64,
    pid: u32,
    direction: Direction,
    host: u64,
    bytes: u64,
    host_state: HostState,
) -> Event {
    Event::new(
        ts,
        pid,
        pid + 1,
        ProbeKind::Uprobe,
        EventKind::Transfer {
            direction,
            host,
            device: 0xd000_0000,
            bytes,
            is_async: false,
            stream: 0,
            host_state,
        },
    )
    .with_site(site(0x900))
}

pub fn pin(ts: u64, pid: u32, start: u64, bytes: u64) -> Event {
    Event::new(
        ts,
        pid,
        pid,
        ProbeKind::KernelHook,
        EventKind::PinPages {
            start,
            bytes,
            pages: Some(bytes.div_ceil(4096)),
        },
    )
}

pub fn unpin(ts: u64, pid: u32, start: u64) -> Event {
    Event::new(
        ts,
        pid,
        pid,
        ProbeKind::KernelHook,
        EventKind::UnpinPages { start, pages: None },
    )
}

/// Asserts two histories hold the same records, events, processes and stats.
pub fn assert_same_history(a: &MemHistory, b: &MemHistory) {
    assert_eq!(a.len(), b.len(), "record count");
    assert_eq!(a.stats(), b.stats(), "stats");
    assert_eq!(a.source_stats(), b.source_stats(), "source stats");
    assert_eq!(a.config(), b.config(), "config");
    let pa: Vec<_> = a.processes().copied().collect();
    let pb: Vec<_> = b.processes().copied().collect();
    assert_eq!(pa, pb, "processes");
    let ka = a.modules().snapshot();
    let kb = b.modules().snapshot();
    for (va, vb) in a.allocations().zip(b.allocations()) {
        let (ia, ib) = (va.info(), vb.info());
        assert_eq!(ia.id, ib.id);
        assert_eq!(ia.pid, ib.pid);
        assert_eq!(
            (ia.start, ia.size, ia.kind, ia.state),
            (ib.start, ib.size, ib.kind, ib.state),
            "record {:?}",
            ia.id
        );
        assert_eq!(ia.tag.call_no, ib.tag.call_no);
        assert_eq!(ia.tag.site.offset, ib.tag.site.offset);
        assert_eq!(
            ka[ia.tag.site.module.0 as usize].key(),
            kb[ib.tag.site.module.0 as usize].key()
        );
        assert_eq!(
            (ia.alloc_ts_ns, ia.end_ts_ns),
            (ib.alloc_ts_ns, ib.end_ts_ns)
        );
        assert_eq!(ia.counters, ib.counters);
        assert_eq!(
            (ia.transfer_count, ia.bytes_transferred),
            (ib.transfer_count, ib.bytes_transferred)
        );
        assert_eq!(
            (ia.events_retained, ia.events_dropped),
            (ib.events_retained, ib.events_dropped)
        );
        assert_eq!(ia.pinned_by_registration, ib.pinned_by_registration);
        for (ea, eb) in va.events().zip(vb.events()) {
            assert_eq!((ea.ts_ns, ea.probe, ea.what), (eb.ts_ns, eb.probe, eb.what));
            assert_eq!(
                ea.site.map(|s| (ka[s.module.0 as usize].key(), s.offset)),
                eb.site.map(|s| (kb[s.module.0 as usize].key(), s.offset))
            );
        }
    }
    let ha: Vec<_> = a.hotspots(20).iter().map(|v| v.id()).collect();
    let hb: Vec<_> = b.hotspots(20).iter().map(|v| v.id()).collect();
    assert_eq!(ha, hb, "hotspots");
    let ca: Vec<_> = a.coldspots(20).iter().map(|v| v.id()).collect();
    let cb: Vec<_> = b.coldspots(20).iter().map(|v| v.id()).collect();
    assert_eq!(ca, cb, "coldspots");
}
