//! Peak pinned memory under `pinwise run` against the program's own (issue 10: "peak pinned
//! bytes under pinwise ≤ the plain run's in every program"), on patterns of frameworks that
//! pin memory themselves (`tests/programs/peak_pinned.c`). The libcuda stand-in (a TEST
//! FIXTURE) counts the bytes it page-locked, whoever asked (`pinwise_standin_pinned_bytes`),
//! and the program prints the most it held at once: the same measure plain and under
//! pinwise. Only byte counts are asserted, no timings.

mod common;

use std::path::Path;
use std::process::Output;

use common::*;

const MIB: u64 = 1 << 20;

/// The `pinned_peak` line the program printed.
fn stand_in_peak(out: &Output, what: &str) -> u64 {
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("pinned_peak "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{what}: no pinned_peak line in {text}"))
}

/// The program's `sum` line (its results, which pinwise must not change).
fn sum_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.starts_with("sum "))
        .unwrap_or("")
        .to_string()
}

struct Run {
    peak: u64,
    summary: serde_json::Value,
}

impl Run {
    fn total(&self, key: &str) -> u64 {
        self.summary["totals"][key]
            .as_u64()
            .unwrap_or_else(|| panic!("totals.{key} in {}", self.summary))
    }

    fn process(&self, key: &str) -> u64 {
        self.summary["processes"][0][key]
            .as_u64()
            .unwrap_or_else(|| panic!("{key} in {}", self.summary))
    }
}

/// Runs `exe pattern` plainly: its peak, and its results.
fn plain(s: &Setup, exe: &Path, pattern: &str) -> (u64, String) {
    let out = s.run_plain(exe, &[pattern]);
    assert_ok(&out, &format!("{pattern} plain"));
    (stand_in_peak(&out, pattern), sum_line(&out))
}

/// Runs `exe pattern` under `pinwise run <args>`: the peak the stand-in counted and the
/// summary, after checking the program's results are the plain run's.
fn under_pinwise(s: &Setup, exe: &Path, pattern: &str, args: &[&str], sum: &str) -> Run {
    let what = format!("{pattern} {args:?}");
    let summary_path = s.path(&format!(
        "{pattern}-{}.json",
        args.join("_").replace('/', "_")
    ));
    let mut a = args.to_vec();
    a.extend(["--force", "--stats-json", summary_path.to_str().unwrap()]);
    let out = s.run_pinwise(&a, exe, &[pattern]);
    assert_ok(&out, &what);
    assert_eq!(sum_line(&out), sum, "{what}: the program's results changed");
    let run = Run {
        peak: stand_in_peak(&out, &what),
        summary: summary(&summary_path),
    };
    // The summary's peak counts every byte locked in the process, as the stand-in does.
    assert_eq!(
        run.total("pinned_bytes_peak_max"),
        run.peak,
        "{what}: the summary's peak is what the driver locked"
    );
    run
}

/// Every mode, the profile of the profile run followed by the use run.
fn modes(s: &Setup, pattern: &str) -> Vec<(&'static str, Vec<String>)> {
    let profile = s.path(&format!("{pattern}.profile.json"));
    let profile = profile.to_str().unwrap().to_string();
    ["adaptive", "profile", "use"]
        .into_iter()
        .map(|m| {
            let mut a = vec!["--mode".to_string(), m.to_string()];
            if m != "adaptive" {
                a.extend(["--profile".to_string(), profile.clone()]);
            }
            (m, a)
        })
        .collect()
}

/// Programs that pin memory themselves: under pinwise, in every mode, the process never
/// holds more pinned bytes than it does plainly; in adaptive mode exactly as many (its own
/// requests are served pinned, nothing is added beside them), and the summary names the
/// program's own peak as the plain run's.
#[test]
fn programs_that_pin_hold_no_more_pinned_memory_under_pinwise() {
    let s = Setup::new();
    let exe = s.build_driver("peak_pinned.c", &["-ldl"]);
    let expected = [
        // A CuPy-like pinned pool of 16 MiB beside hot 8 MiB pageable buffers: 16, not 32.
        ("pool", 16 * MIB),
        // torch_mixed-like: 8 x 4 MiB hot pinned + 4 x 16 MiB cold pinned, 8 x 4 MiB hot
        // pageable: 96, not 128.
        ("mixed", 96 * MIB),
        // 32 MiB freed, then 48 MiB asked: 48, not 80 (the idle segment is given back).
        ("regrow", 48 * MIB),
        // The program's own 16 MiB registration beside a hot pageable buffer.
        ("register", 16 * MIB),
        // Pinned nothing at first (a hot buffer was promoted), then 16 MiB.
        ("late", 16 * MIB),
    ];
    for (pattern, plain_peak) in expected {
        let (peak, sum) = plain(&s, &exe, pattern);
        assert_eq!(peak, plain_peak, "{pattern}: the plain run's peak");
        for (mode, args) in modes(&s, pattern) {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let run = under_pinwise(&s, &exe, pattern, &args, &sum);
            eprintln!(
                "{pattern} {mode}: peak {} MiB (plain {} MiB), own {} MiB, promotions {}, \
                 ceiling releases {}",
                run.peak as f64 / MIB as f64,
                plain_peak / MIB,
                run.total("program_pinned_bytes_peak_max") as f64 / MIB as f64,
                run.total("promotions"),
                run.process("ceiling_releases"),
            );
            assert!(
                run.peak <= plain_peak,
                "{pattern} {mode}: {} bytes pinned at most under pinwise, {plain_peak} plain",
                run.peak
            );
            assert_eq!(
                run.total("program_pinned_bytes_peak_max"),
                plain_peak,
                "{pattern} {mode}: the program's own peak, as plain CUDA locks it"
            );
            if mode == "adaptive" {
                assert_eq!(run.peak, plain_peak, "{pattern} adaptive");
            }
        }
    }
}

/// Where the program pins nothing of note, promotion is the speed-up: a hot pageable buffer is
/// registered, within the budget; a budget too small for it keeps it pageable. Where the
/// user gives a budget, pinwise may pin up to it beside the program's own memory.
#[test]
fn the_budget_bounds_what_pinwise_pins_beyond_the_program() {
    let s = Setup::new();
    let exe = s.build_driver("peak_pinned.c", &["-ldl"]);
    let (peak, sum) = plain(&s, &exe, "hot");
    assert_eq!(peak, 4096, "one page for a scalar");
    let run = under_pinwise(&s, &exe, "hot", &[], &sum);
    assert_eq!(run.process("promotions_on_transfers"), 1, "{}", run.summary);
    // The scalar's page and the 8 MiB buffer's pages (malloc's block starts inside a page:
    // one page more).
    assert_eq!(run.peak, 4096 + 8 * MIB + 4096);
    assert_eq!(run.total("program_pinned_bytes_peak_max"), 4096);
    let run = under_pinwise(&s, &exe, "hot", &["--budget", "4M"], &sum);
    assert_eq!(run.total("promotions"), 0, "{}", run.summary);
    assert_eq!(run.peak, 4096, "a budget of 4 MiB holds no 8 MiB buffer");

    let (peak, sum) = plain(&s, &exe, "pool");
    assert_eq!(peak, 16 * MIB);
    let run = under_pinwise(&s, &exe, "pool", &["--budget", "40M"], &sum);
    assert!(
        run.process("promotions_on_transfers") >= 1,
        "a budget given: the hot pageable buffers may be pinned beside the pool: {}",
        run.summary
    );
    assert!(run.peak > 16 * MIB && run.peak <= 40 * MIB, "{}", run.peak);
}

/// A program that pins cold buffers (torch_mixed's shape at its sizes: four 64 MiB pinned
/// buffers moved every 100 steps beside 8 hot pinned and 8 hot pageable 4 MiB buffers):
/// with `--pageable-first`, pinned requests are served pageable first
/// (`pinwise_core::decide::earn`), the hot ones
/// are registered in place once each, the cold ones stay pageable, so the most pinned at
/// once is the hot working set (64 MiB), not the program's 288 MiB; the program's results
/// are byte for byte the plain run's. Steps are 20 ms (slept): the cold buffers' pageable
/// copies cost less than the slowdown bound allows beside what the promotions save.
#[test]
fn cold_pinned_buffers_stay_pageable_and_the_peak_is_the_hot_working_set() {
    let s = Setup::new();
    let exe = s.build_driver("peak_pinned.c", &["-ldl"]);
    let (plain_peak, sum) = plain(&s, &exe, "cold");
    assert_eq!(plain_peak, (8 * 4 + 4 * 64) * MIB, "the plain run's peak");
    let run = under_pinwise(
        &s,
        &exe,
        "cold",
        &["--mode", "adaptive", "--pageable-first"],
        &sum,
    );
    let hot_set = 16 * 4 * MIB;
    eprintln!(
        "cold adaptive: peak {} MiB (plain {} MiB, hot set {} MiB), served pageable {}, \
         earned {}, promoted pageable {}, demotions {}, refusals {}: {}",
        run.peak as f64 / MIB as f64,
        plain_peak / MIB,
        hot_set / MIB,
        run.process("served_pageable"),
        run.process("promotions_by_allocator"),
        run.process("promotions_on_transfers"),
        run.process("demotions"),
        run.process("promotion_budget_refusals"),
        run.summary
    );
    assert!(
        run.peak * 10 <= hot_set * 11,
        "peak {} bytes pinned, more than 1.1 x the hot working set ({hot_set})",
        run.peak
    );
    assert_eq!(
        run.process("served_pageable"),
        12,
        "every pinned request served pageable first"
    );
    assert_eq!(
        run.process("promotions_by_allocator"),
        8,
        "the 8 hot pinned buffers registered, once each; the cold ones not"
    );
    assert_eq!(
        run.process("promotions_on_transfers"),
        8,
        "the 8 hot pageable buffers registered, once each"
    );
    assert_eq!(run.process("promotions_on_queries"), 0);
    assert_eq!(run.process("merged_registrations"), 0);
    assert_eq!(
        run.process("demotions"),
        16,
        "each of the 16 registrations given back once, when the program freed its buffer"
    );
    assert_eq!(run.process("ceiling_releases"), 0, "none given back early");
    assert_eq!(run.process("promotion_failures"), 0);
    assert_eq!(
        run.total("program_pinned_bytes_peak_max"),
        plain_peak,
        "the program's own peak, as plain CUDA locks it"
    );
}
