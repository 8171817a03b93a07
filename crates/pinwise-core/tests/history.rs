//! MemHistory behaviour: attribution, address reuse, call numbers, pin state, untracked
//! memory, the event cap, queries, processes, concurrency.

mod common;

use std::cmp::Reverse;

use common::*;
use pinwise_core::cost::CostModel;
use pinwise_core::event::{Direction, Event, EventKind, HostMemKind, HostState, ProbeKind};
use pinwise_core::history::{
    AllocKind, AllocState, HistoryConfig, MemHistory, Recorded, SharedHistory,
};
use pinwise_core::synth::{SynthConfig, SynthEvents};
use pinwise_core::tag::Tag;

const A: u64 = 0x7000_0000;

#[test]
fn interior_pointers_are_attributed_to_their_allocation() {
    let mut h = MemHistory::default();
    h.ingest(&alloc(1, PID, A, 4096, HostMemKind::Pageable, site(0x10)));
    h.ingest(&copy(2, PID, Direction::HtoD, A, 4096));
    h.ingest(&copy(3, PID, Direction::DtoH, A + 0x800, 100));
    h.ingest(&copy(4, PID, Direction::HtoD, A + 4095, 1));
    assert_eq!(h.len(), 1, "all three copies went to the one allocation");
    let v = h.lookup(PID, A + 0x123).expect("interior lookup");
    assert_eq!(v.transfer_count(), 3);
    let c = v.counters();
    assert_eq!(c.direction(Direction::HtoD).pageable_transfers, 2);
    assert_eq!(c.direction(Direction::HtoD).pageable_bytes, 4097);
    assert_eq!(c.direction(Direction::DtoH).pageable_bytes, 100);
    let hosts: Vec<u64> = v
        .events()
        .filter_map(|e| match e.what {
            Recorded::Transfer { host, .. } => Some(host),
            _ => None,
        })
        .collect();
    assert_eq!(
        hosts,
        vec![A, A + 0x800, A + 4095],
        "interior host pointers are kept"
    );
    // One past the end is not inside: it becomes untracked memory.
    h.ingest(&copy(5, PID, Direction::HtoD, A + 4096, 8));
    assert_eq!(h.len(), 2);
    assert_eq!(
        h.lookup(PID, A + 4096).unwrap().kind(),
        AllocKind::Untracked
    );
    assert_eq!(h.lookup(PID, A).unwrap().transfer_count(), 3);
    // Another process's address space is another space.
    assert!(h.lookup(PID + 1, A).is_none());
}

#[test]
fn an_address_reused_after_a_free_starts_a_new_record() {
    let mut h = MemHistory::default();
    h.ingest(&alloc(
        1,
        PID,
        A,
        1 << 20,
        HostMemKind::Pageable,
        site(0x10),
    ));
    h.ingest(&copy(2, PID, Direction::HtoD, A, 1 << 20));
    h.ingest(&free(3, PID, A));
    h.ingest(&alloc(
        4,
        PID,
        A,
        1 << 19,
        HostMemKind::Pageable,
        site(0x10),
    ));
    h.ingest(&copy(5, PID, Direction::DtoH, A + 16, 64));
    h.ingest(&copy(6, PID, Direction::DtoH, A + 32, 64));
    assert_eq!(h.len(), 2);
    let first = h.allocations().next().unwrap();
    assert_eq!(first.state(), AllocState::Freed);
    assert_eq!(first.transfer_count(), 1);
    assert_eq!((first.alloc_ts_ns(), first.end_ts_ns()), (1, Some(3)));
    let second = h.lookup(PID, A).unwrap();
    assert_eq!(second.transfer_count(), 2);
    assert_eq!(second.size(), 1 << 19);
    assert_eq!(
        second.tag().call_no,
        2,
        "second allocation from the same site"
    );
    assert_eq!(second.state(), AllocState::Live);
    assert_eq!(second.end_ts_ns(), None);
    let second = second.id();
    // A free of an address nobody allocated is counted, not attributed.
    h.ingest(&free(7, PID, A + 8));
    assert_eq!(h.stats().unmatched_frees, 1);
    // A new allocation over a live one whose free was missed replaces it.
    h.ingest(&alloc(
        8,
        PID,
        A + 4096,
        4096,
        HostMemKind::Pageable,
        site(0x20),
    ));
    assert_eq!(h.view(second).unwrap().state(), AllocState::Replaced);
    assert_eq!(h.stats().replaced_records, 1);
}

#[test]
fn call_numbers_count_allocations_per_process_and_site() {
    let mut h = MemHistory::default();
    let mut ts = 0;
    let mut next = |h: &mut MemHistory, pid: u32, start: u64, at: u64| {
        ts += 1;
        h.ingest(&alloc(ts, pid, start, 64, HostMemKind::Pageable, site(at)));
        h.lookup(pid, start).unwrap().tag().call_no
    };
    assert_eq!(next(&mut h, 1, A, 0x10), 1);
    assert_eq!(next(&mut h, 1, A + 64, 0x10), 2);
    assert_eq!(
        next(&mut h, 1, A + 128, 0x20),
        1,
        "another site counts on its own"
    );
    assert_eq!(
        next(&mut h, 2, A, 0x10),
        1,
        "another process counts on its own"
    );
    assert_eq!(next(&mut h, 1, A + 192, 0x10), 3);
    let tag = Tag {
        site: site(0x10),
        call_no: 1,
    };
    let by_tag = h.by_tag(tag);
    assert_eq!(by_tag.len(), 2, "one per process");
    let mut pids: Vec<u32> = by_tag.iter().map(|v| v.pid()).collect();
    pids.sort();
    assert_eq!(pids, vec![1, 2]);
    let agg = h.site_aggregate(site(0x10)).unwrap();
    assert_eq!(
        (
            agg.allocations,
            agg.processes,
            agg.max_call_no,
            agg.total_size
        ),
        (4, 2, 3, 256)
    );
}

#[test]
fn pin_state_follows_registration_and_allocation_kind() {
    let mut h = MemHistory::default();
    let mib = 1u64 << 20;
    h.ingest(&alloc(1, PID, A, mib, HostMemKind::Pageable, site(0x10)));
    h.ingest(&copy(2, PID, Direction::HtoD, A, mib));
    h.ingest(&pin(3, PID, A, mib));
    h.ingest(&copy(4, PID, Direction::HtoD, A + 4096, 4096));
    h.ingest(&unpin(5, PID, A));
    h.ingest(&copy(6, PID, Direction::HtoD, A, mib));
    // The source's own knowledge wins over the history's.
    h.ingest(&copy_state(
        7,
        PID,
        Direction::HtoD,
        A,
        8,
        HostState::Pinned,
    ));
    let v = h.lookup(PID, A).unwrap();
    let d = *v.counters().direction(Direction::HtoD);
    assert_eq!((d.pageable_transfers, d.pinned_transfers), (2, 2));
    assert_eq!((d.pageable_bytes, d.pinned_bytes), (2 * mib, 4096 + 8));
    assert!(v.pinned_by_registration());
    // cuMemHostAlloc memory is pinned from the start.
    h.ingest(&alloc(
        8,
        PID,
        A + 2 * mib,
        mib,
        HostMemKind::PinnedAlloc,
        site(0x20),
    ));
    h.ingest(&copy(9, PID, Direction::DtoH, A + 2 * mib, mib));
    let c = h.lookup(PID, A + 2 * mib).unwrap().counters();
    assert_eq!(c.direction(Direction::DtoH).pinned_transfers, 1);
    // Registering memory whose allocation was never seen makes a REGISTERED record.
    h.ingest(&pin(10, PID, A + 8 * mib, 2 * mib));
    h.ingest(&copy(11, PID, Direction::HtoD, A + 9 * mib, 4096));
    let r = h.lookup(PID, A + 9 * mib).unwrap();
    assert_eq!(
        (r.kind(), r.size(), r.tag().call_no),
        (AllocKind::Registered, 2 * mib, 0)
    );
    assert_eq!(r.counters().direction(Direction::HtoD).pinned_transfers, 1);
}

#[test]
fn untracked_memory_gets_one_record_per_range_reused_and_grown() {
    let mut h = MemHistory::default();
    h.ingest(&alloc(
        1,
        PID,
        A + 0x10000,
        4096,
        HostMemKind::Pageable,
        site(0x10),
    ));
    // A small stack or heap buffer never seen allocated.
    h.ingest(&copy(2, PID, Direction::HtoD, A, 256));
    h.ingest(&copy(3, PID, Direction::DtoH, A + 128, 64));
    assert_eq!(h.len(), 2);
    let u = h.lookup(PID, A).unwrap();
    assert_eq!(
        (u.kind(), u.start(), u.size(), u.transfer_count()),
        (AllocKind::Untracked, A, 256, 2)
    );
    assert_eq!(u.tag().call_no, 0);
    // A copy reaching further grows it, but never into the next allocation.
    h.ingest(&copy(4, PID, Direction::HtoD, A + 200, 0x20000));
    let u = h.lookup(PID, A).unwrap();
    let untracked = u.id();
    assert_eq!(u.size(), 0x10000, "clipped at the next live allocation");
    assert_eq!(u.transfer_count(), 3);
    let bytes: Vec<u64> = u
        .events()
        .filter_map(|e| match e.what {
            Recorded::Transfer { bytes, .. } => Some(bytes),
            _ => None,
        })
        .collect();
    assert_eq!(
        bytes,
        vec![256, 64, 0x20000],
        "sizes survive the record growing"
    );
    assert_eq!(h.lookup(PID, A + 0x10000).unwrap().transfer_count(), 0);
    // An allocation over untracked memory replaces the untracked record.
    h.ingest(&alloc(5, PID, A, 512, HostMemKind::Pageable, site(0x10)));
    assert_eq!(h.view(untracked).unwrap().state(), AllocState::Replaced);
    assert_eq!(h.lookup(PID, A + 8).unwrap().kind(), AllocKind::Pageable);
    assert_eq!(h.stats().implicit_records, 1);
    // With tracking off, such copies are only counted.
    let mut off = MemHistory::new(HistoryConfig {
        track_untracked: false,
        ..HistoryConfig::default()
    });
    off.ingest(&copy(1, PID, Direction::HtoD, A, 256));
    assert_eq!((off.len(), off.stats().unattributed_events), (0, 1));
    assert_eq!(off.stats().transfers[Direction::HtoD.index()].bytes, 256);
}

#[test]
fn the_event_cap_bounds_memory_and_counters_stay_exact() {
    let cap = 5;
    let mut h = MemHistory::new(HistoryConfig {
        max_events_per_allocation: cap,
        ..HistoryConfig::default()
    });
    let mut ts = 1;
    h.ingest(&alloc(
        ts,
        PID,
        A,
        1 << 16,
        HostMemKind::Pageable,
        site(0x10),
    ));
    let (mut h2d, mut d2h) = (0u64, 0u64);
    for i in 0..1000u64 {
        ts += 1;
        let dir = if i % 3 == 0 {
            Direction::DtoH
        } else {
            Direction::HtoD
        };
        let bytes = 1000 + i;
        if dir == Direction::HtoD {
            h2d += bytes;
        } else {
            d2h += bytes;
        }
        if i == 500 {
            h.ingest(&pin(ts, PID, A, 1 << 16));
            ts += 1;
        }
        h.ingest(&copy(ts, PID, dir, A + i, bytes));
    }
    h.ingest(&free(ts + 1, PID, A));
    let v = h.allocations().next().unwrap();
    assert!(v.is_capped());
    let c = v.counters();
    assert_eq!(v.transfer_count(), 1000);
    assert_eq!(c.direction(Direction::HtoD).bytes(), h2d);
    assert_eq!(c.direction(Direction::DtoH).bytes(), d2h);
    // Pinned from the 501st copy on (500 copies), although those events were not retained.
    assert_eq!(
        c.direction(Direction::HtoD).pinned_transfers
            + c.direction(Direction::DtoH).pinned_transfers,
        500
    );
    // The allocation and its end are always retained.
    let kinds: Vec<&str> = v.events().map(|e| e.what.type_name()).collect();
    assert_eq!(kinds.len() as u32, cap + 1);
    assert_eq!(kinds.first(), Some(&"ALLOC"));
    assert_eq!(kinds.last(), Some(&"FREE"));
    assert_eq!(v.end_ts_ns(), Some(ts + 1));
    // 1003 events (alloc, 1000 copies, a pin, the free); cap + the free retained.
    assert_eq!(v.events_dropped(), 1003 - u64::from(cap + 1));
    assert_eq!(h.stats().events_dropped_by_cap, v.events_dropped());
    assert_eq!(h.hotspots(1)[0].id(), v.id());
}

fn synthetic(allocations: u64, events: u64, window: usize) -> MemHistory {
    let mut h = MemHistory::default();
    let stream: Vec<Event> = SynthEvents::new(
        SynthConfig {
            allocations,
            events,
            live_window: window,
            ..SynthConfig::default()
        },
        &h.modules(),
    )
    .collect();
    h.ingest_batch(&stream);
    h
}

#[test]
fn hotspot_and_coldspot_queries_match_a_brute_force_ranking() {
    let h = synthetic(5000, 60_000, 300);
    let mut all: Vec<(u64, u32)> = h
        .allocations()
        .map(|v| (v.transfer_count(), v.id().0))
        .collect();
    assert!(all.len() >= 5000);
    all.sort_by_key(|&(t, id)| (Reverse(t), id));
    let hot: Vec<(u64, u32)> = h
        .hotspots(50)
        .iter()
        .map(|v| (v.transfer_count(), v.id().0))
        .collect();
    assert_eq!(hot, all[..50]);
    all.sort_by_key(|&(t, id)| (t, id));
    let cold: Vec<(u64, u32)> = h
        .coldspots(50)
        .iter()
        .map(|v| (v.transfer_count(), v.id().0))
        .collect();
    assert_eq!(cold, all[..50]);
    let min = 30;
    let over = h.hotspots_threshold(min);
    assert_eq!(over.len(), all.iter().filter(|(t, _)| *t >= min).count());
    assert!(over
        .windows(2)
        .all(|w| w[0].transfer_count() >= w[1].transfer_count()));
    let under = h.coldspots_threshold(2);
    assert_eq!(under.len(), all.iter().filter(|(t, _)| *t <= 2).count());
    assert!(under.iter().all(|v| v.transfer_count() <= 2));
    assert!(h.hotspots_threshold(u64::MAX).is_empty());
    assert_eq!(h.coldspots_threshold(u64::MAX).len(), h.len());
    assert_eq!(h.hotspots(usize::MAX).len(), h.len());
}

#[test]
fn ingest_batch_equals_one_at_a_time_and_events_come_back_in_order() {
    let h = synthetic(500, 6000, 40);
    let mut one = MemHistory::default();
    let stream: Vec<Event> = SynthEvents::new(
        SynthConfig {
            allocations: 500,
            events: 6000,
            live_window: 40,
            ..SynthConfig::default()
        },
        &one.modules(),
    )
    .collect();
    for e in &stream {
        one.ingest(e);
    }
    common::assert_same_history(&h, &one);
    assert_eq!(h.stats().events_ingested, stream.len() as u64);
    assert_eq!(
        h.stats().events_retained,
        stream.len() as u64,
        "nothing capped, all attributed"
    );
    for v in h.allocations() {
        let ts: Vec<u64> = v.events().map(|e| e.ts_ns).collect();
        assert!(ts.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(
            v.events()
                .filter(|e| matches!(e.what, Recorded::Transfer { .. }))
                .count() as u64,
            v.transfer_count()
        );
    }
}

#[test]
fn os_events_and_process_exit() {
    let mut h = MemHistory::default();
    h.ingest(&alloc(1, PID, A, 8192, HostMemKind::Pageable, site(0x10)));
    h.ingest(&alloc(
        2,
        PID,
        A + 8192,
        8192,
        HostMemKind::Pageable,
        site(0x10),
    ));
    h.ingest(&Event::new(
        3,
        PID,
        PID,
        ProbeKind::Tracepoint,
        EventKind::PageFault { addr: A + 100 },
    ));
    h.ingest(&Event::new(
        4,
        PID,
        PID,
        ProbeKind::Tracepoint,
        EventKind::PageFault { addr: 0x10 },
    ));
    assert_eq!(h.stats().unattributed_events, 1);
    let kinds: Vec<&str> = h
        .lookup(PID, A)
        .unwrap()
        .events()
        .map(|e| e.what.type_name())
        .collect();
    assert_eq!(kinds, vec!["ALLOC", "PAGE_FAULT"]);
    // Unmapping the first whole and half of the second: the first ends, the second lives.
    h.ingest(&Event::new(
        5,
        PID,
        PID,
        ProbeKind::Tracepoint,
        EventKind::Munmap {
            start: A,
            len: 12288,
        },
    ));
    let first = h.allocations().next().unwrap();
    assert_eq!(
        (first.state(), first.end_ts_ns()),
        (AllocState::Unmapped, Some(5))
    );
    let second = h.lookup(PID, A + 8192).unwrap();
    assert_eq!(second.events().last().unwrap().what.type_name(), "MUNMAP");
    let second = second.id();
    // The process exits: its live allocations end with it; the pid may come back.
    assert!(h.process_exited(PID, 10));
    assert!(!h.process_exited(PID, 11));
    assert_eq!(h.view(second).unwrap().state(), AllocState::Exited);
    assert_eq!(h.view(second).unwrap().end_ts_ns(), Some(10));
    assert_eq!(h.live_count(), 0);
    h.ingest(&alloc(20, PID, A, 64, HostMemKind::Pageable, site(0x10)));
    assert_eq!(
        h.lookup(PID, A).unwrap().tag().call_no,
        1,
        "a new process counts afresh"
    );
    assert_eq!(h.processes().count(), 2);
    assert_eq!(h.processes().next().unwrap().exit_ts_ns, Some(10));
}

#[test]
fn summary_splits_bytes_and_estimates_what_pinning_saves() {
    let mut h = MemHistory::default();
    let big = 64u64 << 20;
    h.ingest(&alloc(1, PID, A, big, HostMemKind::Pageable, site(0x10)));
    for i in 0..20 {
        h.ingest(&copy(2 + i, PID, Direction::HtoD, A, big));
    }
    h.ingest(&alloc(
        100,
        PID,
        A + 2 * big,
        4096,
        HostMemKind::Pageable,
        site(0x20),
    ));
    h.ingest(&copy(101, PID, Direction::HtoD, A + 2 * big, 4096));
    h.ingest(&alloc(
        200,
        PID,
        A + 4 * big,
        big,
        HostMemKind::PinnedAlloc,
        site(0x30),
    ));
    h.ingest(&copy(201, PID, Direction::DtoH, A + 4 * big, big));
    h.ingest(&Event::new(
        300,
        PID,
        PID,
        ProbeKind::Uprobe,
        EventKind::Transfer {
            direction: Direction::DtoD,
            host: 0,
            device: 1,
            bytes: 999,
            is_async: false,
            stream: 0,
            host_state: HostState::Unknown,
        },
    ));
    h.set_source_stat("tracer.ringbuf_drops", 7);
    let cost = CostModel::builtin();
    let s = h.summary(&cost);
    assert_eq!((s.records, s.live, s.implicit), (3, 3, 0));
    let htod = s.by_direction[Direction::HtoD.index()];
    assert_eq!(htod.attributed.pageable_bytes, 20 * big + 4096);
    assert_eq!(
        s.by_direction[Direction::DtoH.index()]
            .attributed
            .pinned_bytes,
        big
    );
    assert_eq!(s.by_direction[Direction::DtoD.index()].all.bytes, 999);
    let expect_share = (20 * big + 4096) as f64 / (21 * big + 4096) as f64;
    assert!((s.pageable_share - expect_share).abs() < 1e-12);
    let e = s.estimate;
    let per_copy = cost.transfer_ns(Direction::HtoD, big, false)
        - cost.transfer_ns(Direction::HtoD, big, true);
    let small = cost.transfer_ns(Direction::HtoD, 4096, false)
        - cost.transfer_ns(Direction::HtoD, 4096, true);
    assert!((e.transfer_saving_ns - (20.0 * per_copy + small)).abs() < 1.0);
    assert_eq!(
        e.allocations_worth_pinning, 1,
        "the 64 MiB buffer pays back, the 4 KiB one never"
    );
    assert!(e.net_saving_pin_worthwhile_ns > 0.0);
    assert!(e.net_saving_pin_worthwhile_ns > e.net_saving_pin_all_ns);
    assert!(!e.approximate);
    assert_eq!(s.source_stats.get("tracer.ringbuf_drops"), Some(&7));
}

#[test]
fn one_thread_feeds_while_others_query() {
    let shared = SharedHistory::default();
    let stream: Vec<Event> = SynthEvents::new(
        SynthConfig {
            allocations: 3000,
            events: 30_000,
            live_window: 100,
            ..SynthConfig::default()
        },
        &shared.modules(),
    )
    .collect();
    let feeder = {
        let shared = shared.clone();
        let stream = stream.clone();
        std::thread::spawn(move || {
            for batch in stream.chunks(256) {
                shared.ingest_batch(batch);
            }
        })
    };
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let shared = shared.clone();
            std::thread::spawn(move || {
                let mut last = 0;
                for _ in 0..200 {
                    let n = shared.read().len();
                    assert!(n >= last, "records never disappear");
                    last = n;
                    let hot = shared.hotspots(5);
                    assert!(hot
                        .windows(2)
                        .all(|w| w[0].transfer_count >= w[1].transfer_count));
                }
            })
        })
        .collect();
    feeder.join().unwrap();
    for r in readers {
        r.join().unwrap();
    }
    let mut alone = MemHistory::with_modules(HistoryConfig::default(), shared.modules());
    alone.ingest_batch(&stream);
    common::assert_same_history(&shared.read(), &alone);
}

#[test]
fn memory_stays_within_the_budget_per_record_and_event() {
    let h = synthetic(20_000, 200_000, 1024);
    let m = h.memory_usage();
    let s = h.stats();
    // Encoded bytes per retained event, and arena bytes (whole chunks) per event.
    let used = m.event_bytes_used as f64 / s.events_retained as f64;
    let arena = m.event_arena as f64 / s.events_retained as f64;
    assert!(used < 10.0, "{used} encoded bytes per event");
    assert!(arena < 16.0, "{arena} arena bytes per event");
    assert!(m.records as f64 / h.len() as f64 <= 33.0);
}

mod arbitrary_streams {
    //! Any stream of events, however inconsistent (frees of unknown addresses, overlapping
    //! allocations, pins of nothing, exits), keeps the history consistent and dumpable.

    use super::*;
    use pinwise_core::format::{binary, json};
    use pinwise_core::tag::{ModuleId, Site};
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Ev(Event),
        Exit(u32),
    }

    fn arb_op() -> impl Strategy<Value = Op> {
        // A small address space (64 KiB, 256-byte grain) so that events collide.
        let addr = (0u64..256).prop_map(|a| 0x10_0000 + a * 256);
        let size = prop_oneof![Just(0u64), 1u64..4096, Just(1u64 << 20)];
        let pid = 1u32..3;
        let dir = prop::sample::select(Direction::ALL.to_vec());
        let state = prop::sample::select(vec![
            HostState::Unknown,
            HostState::Pageable,
            HostState::Pinned,
        ]);
        let kind = prop::sample::select(vec![
            HostMemKind::Pageable,
            HostMemKind::PinnedAlloc,
            HostMemKind::Registered,
        ]);
        let site = prop::option::of((0u32..2, 0u64..4).prop_map(|(m, o)| Site {
            module: ModuleId(m),
            offset: o,
        }));
        let ek = prop_oneof![
            3 => (addr.clone(), size.clone(), kind).prop_map(|(start, size, kind)| EventKind::Alloc { start, size, kind, flags: 0 }),
            2 => addr.clone().prop_map(|start| EventKind::Free { start }),
            1 => (addr.clone(), size.clone(), prop::option::of(0u64..4)).prop_map(|(start, bytes, pages)| EventKind::PinPages { start, bytes, pages }),
            1 => addr.clone().prop_map(|start| EventKind::UnpinPages { start, pages: None }),
            6 => (dir, prop_oneof![Just(0u64), addr.clone()], size.clone(), any::<bool>(), 0u64..3, state)
                .prop_map(|(direction, host, bytes, is_async, stream, host_state)| EventKind::Transfer { direction, host, device: 1, bytes, is_async, stream, host_state }),
            1 => (addr.clone(), size.clone()).prop_map(|(start, len)| EventKind::Mmap { start, len }),
            1 => (addr.clone(), size).prop_map(|(start, len)| EventKind::Munmap { start, len }),
            1 => addr.prop_map(|addr| EventKind::PageFault { addr }),
        ];
        prop_oneof![
            30 => (pid.clone(), 0u64..1000, site, ek).prop_map(|(pid, dt, site, kind)| {
                let mut e = Event::new(dt, pid, pid, ProbeKind::Uprobe, kind);
                e.site = site;
                Op::Ev(e)
            }),
            1 => pid.prop_map(Op::Exit),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        #[test]
        fn any_stream_keeps_the_history_consistent(ops in prop::collection::vec(arb_op(), 0..300), cap in 2u32..6) {
            let mut h = MemHistory::new(HistoryConfig { max_events_per_allocation: cap, track_untracked: true });
            h.modules().intern(&pinwise_core::tag::ModuleIdentity::from_path("/m1"));
            let mut ts = 0;
            for op in &ops {
                match op {
                    Op::Ev(e) => {
                        ts += e.ts_ns; // non-decreasing, with repeats
                        h.ingest(&Event { ts_ns: ts, ..*e });
                    }
                    Op::Exit(pid) => {
                        h.process_exited(*pid, ts);
                    }
                }
            }
            // Every transfer is in exactly one record, or counted as device-only.
            let s = *h.stats();
            let all: u64 = s.transfers.iter().map(|t| t.transfers).sum();
            let device: u64 = s.device_only_transfers.iter().map(|t| t.transfers).sum();
            let in_records: u64 = h.allocations().map(|v| v.counters().transfers()).sum();
            prop_assert_eq!(all, device + in_records);
            prop_assert_eq!(s.events_ingested, ops.iter().filter(|o| matches!(o, Op::Ev(_))).count() as u64);
            // Live allocations do not overlap and are found by any of their bytes.
            let mut live: Vec<(u32, u64, u64)> = h
                .allocations()
                .filter(|v| v.state() == AllocState::Live)
                .map(|v| (v.process_index(), v.start(), v.end()))
                .collect();
            live.sort();
            for w in live.windows(2) {
                prop_assert!(w[0].0 != w[1].0 || w[0].2 <= w[1].1, "overlap {:?}", w);
            }
            for v in h.allocations().filter(|v| v.state() == AllocState::Live && v.size() > 0) {
                let found = h.lookup(v.pid(), v.end() - 1).map(|f| f.id());
                prop_assert_eq!(found, Some(v.id()));
            }
            // Exact counters agree with the retained events of uncapped records.
            for v in h.allocations().filter(|v| !v.is_capped()) {
                let n = v.events().filter(|e| matches!(e.what, Recorded::Transfer { .. })).count() as u64;
                prop_assert_eq!(n, v.transfer_count());
            }
            let hot = h.hotspots(5);
            prop_assert!(hot.windows(2).all(|w| w[0].transfer_count() >= w[1].transfer_count()));
            // Whatever happened, the dumps read back the same history.
            common::assert_same_history(&h, &json::read(json::to_string(&h).as_bytes()).unwrap());
            common::assert_same_history(&h, &binary::read(&binary::to_bytes(&h)).unwrap());
        }
    }
}
