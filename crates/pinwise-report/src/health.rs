//! What the history says about its sources: their own statistics (drops, lost events),
//! the history's bookkeeping, and whether the run used the CPU stand-in for libcuda.

use std::collections::BTreeMap;

use pinwise_core::{MemHistory, ModuleTable};

use crate::model::{Provenance, SourceHealth};

/// Words in a source statistic's name that mean information was lost or is doubtful.
const LOSS_WORDS: [&str; 8] = [
    "drop", "lost", "error", "fail", "full", "unknown", "without", "overflow",
];

pub(crate) fn source_health(history: &MemHistory) -> SourceHealth {
    let stats = history.source_stats().clone();
    let losses: BTreeMap<String, u64> = stats
        .iter()
        .filter(|(k, &v)| v > 0 && LOSS_WORDS.iter().any(|w| k.contains(w)))
        .map(|(k, &v)| (k.clone(), v))
        .collect();
    let mut warnings = Vec::new();
    for (k, v) in &losses {
        warnings.push(format!("source statistic {k} = {v}"));
    }
    let s = history.stats();
    if s.events_dropped_by_cap > 0 {
        warnings.push(format!(
            "{} events were not kept (per-allocation cap of {}); counters stay exact, timelines miss them",
            s.events_dropped_by_cap,
            history.config().max_events_per_allocation
        ));
    }
    if s.unmatched_frees > 0 {
        warnings.push(format!(
            "{} frees of addresses with no live allocation",
            s.unmatched_frees
        ));
    }
    if s.unattributed_events > 0 {
        warnings.push(format!(
            "{} events could not be attributed to an allocation",
            s.unattributed_events
        ));
    }
    if s.replaced_records > 0 {
        warnings.push(format!(
            "{} allocations were replaced before their free was seen (missed frees?)",
            s.replaced_records
        ));
    }
    if let Some(&n) = stats
        .get("preload.stack_captures_skipped")
        .filter(|&&n| n > 0)
    {
        warnings.push(format!(
            "{n} allocations have their call site but no call stack: beyond its first 32 captures \
             and 10 ms, a thread spends at most 0.5 % of its time capturing stacks"
        ));
    }
    for c in contradictions(history) {
        warnings.push(format!("{CONTRADICTION} {c}"));
    }
    SourceHealth {
        stats,
        losses,
        warnings,
    }
}

/// How warnings about figures that contradict each other begin (the text report also
/// repeats them at its top).
pub const CONTRADICTION: &str = "CONTRADICTION:";

/// Larger than any host memory (256 TiB): a size or a transfer beyond it is impossible.
const IMPOSSIBLE_BYTES: u64 = 1 << 48;

/// Figures of `history` that cannot all be true (a damaged or forged file): statistics
/// larger than what the history holds, impossible sizes. Empty for a sound history.
pub fn contradictions(history: &MemHistory) -> Vec<String> {
    use pinwise_core::Direction;
    let s = history.stats();
    let mut out = Vec::new();
    if s.events_retained > s.events_ingested {
        out.push(format!(
            "{} events retained but only {} ingested",
            s.events_retained, s.events_ingested
        ));
    }
    if s.events_dropped_by_cap > s.events_ingested {
        out.push(format!(
            "{} events dropped by the cap but only {} ingested",
            s.events_dropped_by_cap, s.events_ingested
        ));
    }
    let mut per_dir = [(0u64, 0u64); 4];
    let mut stored_events = 0u64;
    let mut huge = 0u64;
    let mut largest = 0u64;
    for a in history.allocations() {
        if a.size() > IMPOSSIBLE_BYTES {
            huge += 1;
            largest = largest.max(a.size());
        }
        stored_events = stored_events.saturating_add(a.events_retained());
        let c = a.counters();
        for d in Direction::ALL {
            let dc = c.direction(d);
            let e = &mut per_dir[d.index()];
            e.0 = e.0.saturating_add(dc.transfers());
            e.1 =
                e.1.saturating_add(dc.pageable_bytes.saturating_add(dc.pinned_bytes));
        }
    }
    if huge > 0 {
        out.push(format!(
            "{huge} allocations are larger than any host memory (largest: {largest} bytes)"
        ));
    }
    if stored_events > s.events_retained {
        out.push(format!(
            "the allocations hold {stored_events} events, the statistics say {} were retained",
            s.events_retained
        ));
    }
    for d in Direction::ALL {
        let t = s.transfers[d.index()];
        let (count, bytes) = per_dir[d.index()];
        if count > t.transfers || bytes > t.bytes {
            out.push(format!(
                "{d:?}: the allocations count {count} transfers of {bytes} bytes, the totals only \
                 {} of {} bytes",
                t.transfers, t.bytes
            ));
        }
        if t.transfers > 0 && t.bytes / t.transfers > IMPOSSIBLE_BYTES {
            out.push(format!(
                "{d:?}: {} transfers of {} bytes, more than any host memory each",
                t.transfers, t.bytes
            ));
        }
        if t.transfers == 0 && t.bytes > 0 {
            out.push(format!("{d:?}: {} bytes moved by no transfer", t.bytes));
        }
    }
    out
}

/// The stand-in's names, as they appear in its file names and in statistics sources may
/// record (`libpinwise_standin_cuda.so`, `pinwise-standin-libs-*`, `*standin*`).
const STANDIN_MARK: &str = "standin";

pub(crate) fn provenance(history: &MemHistory, modules: &ModuleTable) -> Provenance {
    let mut evidence: Vec<String> = history
        .source_stats()
        .iter()
        .filter(|(k, &v)| v > 0 && k.to_ascii_lowercase().contains(STANDIN_MARK))
        .map(|(k, v)| format!("source statistic {k} = {v}"))
        .collect();
    evidence.extend(
        modules
            .snapshot()
            .iter()
            .filter(|m| m.path.to_ascii_lowercase().contains(STANDIN_MARK))
            .map(|m| format!("call sites in {}", m.path)),
    );
    let cpu_standin = !evidence.is_empty();
    let note = if cpu_standin {
        "This history comes from a run on the CPU stand-in for libcuda (a test fixture): no \
         GPU moved these bytes. Times below are what the cost model predicts for the same \
         transfers on the calibrated GPU, not figures of this run."
            .to_owned()
    } else {
        "The history does not record which device ran. Times below are estimates from the \
         cost model (the history records what moved, not how long it took)."
            .to_owned()
    };
    Provenance {
        cpu_standin,
        evidence,
        note,
    }
}

#[cfg(test)]
mod stack_budget_tests {
    use super::*;
    use pinwise_core::HistoryConfig;

    #[test]
    fn allocations_left_without_a_stack_are_told() {
        let mut h = MemHistory::new(HistoryConfig::default());
        assert!(!source_health(&h)
            .warnings
            .iter()
            .any(|w| w.contains("no call stack")));
        h.set_source_stat("preload.stack_captures_skipped", 7);
        let w = source_health(&h).warnings;
        assert!(
            w.iter()
                .any(|w| w.starts_with("7 allocations have their call site but no call stack")),
            "{w:?}"
        );
    }
}
