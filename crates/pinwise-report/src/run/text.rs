//! The run summary as text: [`summary_lines`].

use pinwise_core::preload_stats::ProcessStats;
use pinwise_core::units::format_size;

use super::compute::used_cuda;
use super::model::RunTotals;

/// The summary `pinwise run` prints on stderr, one line each.
pub fn summary_lines(ps: &[ProcessStats]) -> Vec<String> {
    let mut lines = Vec::new();
    if ps.is_empty() {
        lines.push(
            "no statistics were written: the library did not load (a static executable?), or \
             the program was killed without warning (SIGKILL, the OOM killer)"
                .to_string(),
        );
        return lines;
    }
    if ps.iter().any(|p| p.driver_is_standin) {
        lines.push(
            "the libcuda in use is pinwise's CPU stand-in (TEST FIXTURE: not a GPU; timings \
             here are not GPU figures)"
                .to_string(),
        );
    }
    if ps.len() > 1 {
        let pids: Vec<String> = ps.iter().map(|p| p.pid.to_string()).collect();
        lines.push(format!(
            "{} processes wrote statistics (pids {}); totals below",
            ps.len(),
            pids.join(", ")
        ));
    }
    let t = RunTotals::of(ps);
    lines.push(format!(
        "pinned requests {}: {} served pinned (pool hits {}, misses {}), {} served pageable, \
         {} passed to CUDA ({} over the budget but required pinned)",
        t.host_allocs,
        t.served_pinned,
        t.pool_hits,
        t.pool_misses,
        t.served_pageable,
        t.forwarded,
        t.required_outside_budget,
    ));
    lines.push(format!(
        "transfers seen {}: HtoD {} ({}), DtoH {} ({}), DtoD {}, HtoH {}; host side pinned {}, \
         pageable {}, not known to pinwise {}",
        t.transfers_htod + t.transfers_dtoh + t.transfers_dtod + t.transfers_htoh,
        t.transfers_htod,
        format_size(t.bytes_htod),
        t.transfers_dtoh,
        format_size(t.bytes_dtoh),
        t.transfers_dtod,
        t.transfers_htoh,
        t.transfers_pinned,
        t.transfers_pageable,
        t.transfers_unknown,
    ));
    if let Some(pool) = pinwise_core::pool_use::PoolUseStats::total(ps.iter().map(|p| &p.pool)) {
        lines.push(pool.summary_line());
    }
    if t.captured_copies > 0 {
        lines.push(format!(
            "{} asynchronous copies were captured into CUDA graphs (recorded; nothing pinned, \
             waited for or learned from them; registrations they used kept until the memory \
             is freed)",
            t.captured_copies
        ));
    }
    for p in ps.iter().filter(|p| p.incremental.errors > 0) {
        lines.push(format!(
            "[pid {}] appending to the history while the program ran failed {} times (the \
             program went on; a kill then would have lost more): {}",
            p.pid,
            p.incremental.errors,
            p.incremental.last_error.as_deref().unwrap_or("?")
        ));
    }
    if t.failed_copies > 0 {
        lines.push(format!(
            "{} copies were refused by the driver (the program got CUDA's error; not in the \
             history)",
            t.failed_copies
        ));
    }
    lines.push(format!(
        "pinned bytes peak {} (the program's own {}; budget {}); existing buffers pinned where they lie {} (the \
         program's own {}, its allocator's {}, before a pointer query {}; unpinned again {}, \
         joined with a neighbour {}); fallbacks to pageable {}; budget refusals {}",
        format_size(t.pinned_bytes_peak_max),
        format_size(t.program_pinned_bytes_peak_max),
        if t.budget_bytes_max > 0 {
            format_size(t.budget_bytes_max)
        } else {
            "-".into()
        },
        t.promotions,
        t.promotions_on_transfers,
        t.promotions_by_allocator,
        t.promotions_on_queries,
        t.demotions,
        t.merged_registrations,
        t.fallbacks,
        t.budget_refusals,
    ));
    if t.hook_samples > 0 {
        // The process with the most samples speaks for the run (medians do not add up).
        let busiest = ps
            .iter()
            .max_by_key(|p| p.hook_samples)
            .expect("samples > 0");
        let median = busiest
            .hook_ns_median
            .map_or("-".to_string(), |m| format!("{m:.0} ns"));
        let mean = busiest
            .hook_ns_mean
            .map_or("-".to_string(), |m| format!("{m:.0} ns"));
        lines.push(format!(
            "hook cost per intercepted copy: median {median} (mean {mean}; {} samples, one copy \
             in 16 timed, one in 4 of a thread's first 64; pinwise's bookkeeping only, the CUDA \
             call itself excluded)",
            busiest.hook_samples
        ));
    }
    // Events alone may be malloc-family allocations: CUDA calls are what count here.
    if t.wrapped == 0 && !ps.iter().any(used_cuda) {
        lines.push(
            "no CUDA host-memory call was seen (the program did not use CUDA, or reached the \
             driver some way pinwise does not intercept)"
                .into(),
        );
    }
    for p in ps {
        let who = if ps.len() > 1 {
            format!("[pid {}] ", p.pid)
        } else {
            String::new()
        };
        for (what, out) in [("history", &p.history), ("profile", &p.profile)] {
            match (&out.path, out.written, &out.error) {
                (Some(path), true, _) => lines.push(format!("{who}{what} written to {path}")),
                (Some(path), false, Some(e)) => {
                    lines.push(format!("{who}{what} NOT written to {path}: {e}"))
                }
                _ => {}
            }
        }
        if p.mode == "use" && p.engine.advice_unmatched > 0 {
            lines.push(format!(
                "{who}use mode: {} allocations had no matching advice in the profile (decided \
                 adaptively)",
                p.engine.advice_unmatched
            ));
        }
        if !p.pricing.is_empty() {
            lines.push(format!("{who}decisions priced with the {}", p.pricing));
        }
        if let Some(why) = &p.allocator_unavailable {
            if used_cuda(p) {
                lines.push(format!("{who}the allocator did not run: {why}"));
            }
        }
        if p.events_lost > 0 {
            lines.push(format!("{who}{} events were lost", p.events_lost));
        }
        for problem in &p.problems {
            lines.push(format!("{who}problem: {problem}"));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::compute::totals_json;

    #[test]
    fn sizes_read_well() {
        // The summary uses the reports' one byte formatter (three figures).
        assert_eq!(format_size(512), "512 B");
        assert_eq!(format_size(12 << 20), "12.0 MiB");
        assert_eq!(format_size(3 << 30), "3.00 GiB");
    }

    #[test]
    fn an_empty_run_says_why_there_is_nothing() {
        let lines = summary_lines(&[]);
        assert_eq!(lines.len(), 1);
        assert!(lines[0].contains("no statistics"));
    }

    #[test]
    fn statistics_files_parse_and_sum() {
        let a: ProcessStats = serde_json::from_str(
            r#"{"format":"pinwise-preload-stats","pid":1,"top_process":true,"mode":"use",
               "driver_is_standin":true,"host_allocs":3,"served_pinned":2,"served_pageable":1,
               "transfers":{"HtoD":{"count":4,"bytes":400},"DtoH":{"count":1,"bytes":100}},
               "engine":{"pinned_bytes_peak":8192,"budget_bytes":1048576,"advice_unmatched":2},
               "program_pinned_bytes_peak":4096,
               "history":{"path":"/tmp/h.json","written":true},
               "some_future_field":7}"#,
        )
        .unwrap();
        let mut b = a.clone();
        b.pid = 2;
        b.top_process = false;
        b.engine.pinned_bytes_peak = 4096;
        let lines = summary_lines(&[a, b]);
        let text = lines.join("\n");
        assert!(text.contains("TEST FIXTURE"), "{text}");
        assert!(text.contains("2 processes"), "{text}");
        assert!(
            text.contains("pinned requests 6: 4 served pinned"),
            "{text}"
        );
        assert!(text.contains("HtoD 8 (800 B)"), "{text}");
        assert!(
            text.contains(
                "pinned bytes peak 8.00 KiB (the program's own 4.00 KiB; budget 1.00 MiB)"
            ),
            "{text}"
        );
        assert!(
            text.contains("[pid 1] history written to /tmp/h.json"),
            "{text}"
        );
        assert!(
            text.contains("2 allocations had no matching advice"),
            "{text}"
        );
    }

    #[test]
    fn copies_captured_into_graphs_are_summed_and_said_only_when_there_are_some() {
        let p = |captured: u64| ProcessStats {
            captured_copies: captured,
            ..Default::default()
        };
        let said = |ps: &[ProcessStats]| {
            summary_lines(ps)
                .into_iter()
                .find(|l| l.contains("captured into CUDA graphs"))
        };
        let both = [p(3), p(4)];
        assert_eq!(totals_json(&both)["captured_copies"], 7);
        let line = said(&both).expect("a line about captured copies");
        assert!(line.starts_with("7 asynchronous copies"), "{line}");
        assert_eq!(said(&[p(0)]), None);
        assert_eq!(totals_json(&[p(0)])["captured_copies"], 0);
    }
}
