//! The history's timestamps are `CLOCK_MONOTONIC` nanoseconds however the hooks stamped
//! their events (the CPU's counter, converted by the drain, or the clock: `crate::stamp`):
//! each copy's event lies between the program's own clock reads around the copy, on two
//! threads, and each allocation's events never go back. The statistics say which source
//! was used, as this machine's CPU flags and clocksource predict. Against the libcuda
//! stand-in (a TEST FIXTURE); nothing is timed.

mod common;

use std::collections::HashMap;

use common::*;
use pinwise_core::history::Recorded;

/// Copies per thread in `stamped_copies.c`.
const COPIES: usize = 400;
/// How far a copy's time may lie outside the program's clock reads around it, ns: the
/// conversion's error, bounded by the widest anchor the drain takes (`stamp::MAX_ANCHOR_WIDTH`,
/// at most 5 µs for a counter of 2 GHz or more; measured: within 150 ns).
const TOLERANCE_NS: u64 = 5_000;

/// Whether this machine's stamps should be the counter: an invariant counter with `rdtscp`
/// (`/proc/cpuinfo`) that the kernel's clock reads (`tsc` clocksource).
fn counter_expected() -> bool {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags: Vec<&str> = cpuinfo
        .lines()
        .find(|l| l.starts_with("flags"))
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default();
    let clocksource =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .unwrap_or_default();
    cfg!(target_arch = "x86_64")
        && flags.contains(&"nonstop_tsc")
        && flags.contains(&"rdtscp")
        && clocksource.trim() == "tsc"
}

#[test]
fn each_copy_is_recorded_between_the_programs_clock_reads_around_it() {
    let s = Setup::new();
    let exe = s.build_driver("stamped_copies.c", &["-pthread"]);
    let run = s.run_recorded(&exe, &["--mode", "adaptive"], "stamped.bin");
    assert_ok(&run.out, "pinwise run");
    let stdout = String::from_utf8_lossy(&run.out.stdout);
    let mut bufs: HashMap<u64, usize> = HashMap::new();
    let mut windows = vec![Vec::new(); 2];
    for line in stdout.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["buf", t, addr] => {
                bufs.insert(addr.parse().unwrap(), t.parse().unwrap());
            }
            ["copy", t, _, before, after] => {
                let t: usize = t.parse().unwrap();
                windows[t].push((
                    before.parse::<u64>().unwrap(),
                    after.parse::<u64>().unwrap(),
                ));
            }
            _ => panic!("unexpected line {line}"),
        }
    }
    assert_eq!(bufs.len(), 2, "{stdout}");
    let mut checked = 0;
    let mut worst = 0;
    for a in run.history.allocations() {
        let Some(&t) = bufs.get(&a.start()) else {
            continue;
        };
        let times: Vec<u64> = a.events().map(|e| e.ts_ns).collect();
        assert!(
            times.windows(2).all(|w| w[0] <= w[1]),
            "thread {t}'s buffer: events in order"
        );
        let copies: Vec<u64> = a
            .events()
            .filter(|e| matches!(e.what, Recorded::Transfer { .. }))
            .map(|e| e.ts_ns)
            .collect();
        assert_eq!(copies.len(), COPIES, "thread {t}: every copy recorded");
        for (k, (ts, (before, after))) in copies.iter().zip(&windows[t]).enumerate() {
            let outside = before.saturating_sub(*ts).max(ts.saturating_sub(*after));
            worst = worst.max(outside);
            assert!(
                outside <= TOLERANCE_NS,
                "thread {t} copy {k}: recorded at {ts}, made between {before} and {after}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 2 * COPIES, "both threads' copies were found");
    eprintln!("largest distance outside a copy's window: {worst} ns");
    let p = run.process();
    let stamps = &p["timestamps"];
    let expected = if counter_expected() {
        "counter"
    } else {
        "clock"
    };
    assert_eq!(stamps["source"], expected, "{stamps}");
    assert_eq!(
        stamps["fallback"].is_null(),
        expected == "counter",
        "{stamps}"
    );
    let converted =
        stamps["counter_stamps"].as_u64().unwrap() + stamps["clock_stamps"].as_u64().unwrap();
    assert_eq!(
        Some(converted),
        p["events"].as_u64(),
        "every ingested event converted once: {p}"
    );
    if expected == "counter" {
        assert_eq!(stamps["clock_stamps"], 0, "{stamps}");
        assert!(stamps["anchors"].as_u64() >= Some(2), "{stamps}");
    }
}
