//! The run summary's computation: the processes' statistics added up ([`RunTotals::of`]),
//! whether a process used CUDA ([`used_cuda`]), and the JSON document (`--stats-json`).

use pinwise_core::preload_stats::ProcessStats;

use super::model::RunTotals;

/// Whether a process made CUDA host-memory calls (its malloc-family allocations alone do
/// not count).
pub fn used_cuda(p: &ProcessStats) -> bool {
    let t = &p.transfers;
    p.host_allocs + p.registrations + p.host_frees + t.HtoD.count + t.DtoH.count + t.HtoH.count > 0
}

impl RunTotals {
    /// The statistics of `ps` added up.
    pub fn of(ps: &[ProcessStats]) -> RunTotals {
        let sum = |f: &dyn Fn(&ProcessStats) -> u64| ps.iter().map(f).sum::<u64>();
        let promotions_on_transfers = sum(&|p| p.promotions_on_transfers);
        let promotions_by_allocator = sum(&|p| p.promotions_by_allocator);
        let promotions_on_queries = sum(&|p| p.promotions_on_queries);
        RunTotals {
            processes: ps.len(),
            host_allocs: sum(&|p| p.host_allocs),
            served_pinned: sum(&|p| p.served_pinned),
            served_pageable: sum(&|p| p.served_pageable),
            forwarded: sum(&|p| p.forwarded),
            required_outside_budget: sum(&|p| p.required_outside_budget),
            transfers_htod: sum(&|p| p.transfers.HtoD.count),
            transfers_dtoh: sum(&|p| p.transfers.DtoH.count),
            transfers_dtod: sum(&|p| p.transfers.DtoD.count),
            transfers_htoh: sum(&|p| p.transfers.HtoH.count),
            bytes_htod: sum(&|p| p.transfers.HtoD.bytes),
            bytes_dtoh: sum(&|p| p.transfers.DtoH.bytes),
            transfers_pinned: sum(&|p| p.transfers_pinned),
            transfers_pageable: sum(&|p| p.transfers_pageable),
            transfers_unknown: sum(&|p| p.transfers_unknown),
            captured_copies: sum(&|p| p.captured_copies),
            failed_copies: sum(&|p| p.failed_copies),
            pinned_bytes_peak_max: ps
                .iter()
                .map(|p| p.engine.pinned_bytes_peak)
                .max()
                .unwrap_or(0),
            program_pinned_bytes_peak_max: ps
                .iter()
                .map(|p| p.program_pinned_bytes_peak)
                .max()
                .unwrap_or(0),
            budget_bytes_max: ps.iter().map(|p| p.engine.budget_bytes).max().unwrap_or(0),
            pool_hits: sum(&|p| p.engine.pool_hits),
            pool_misses: sum(&|p| p.engine.pool_misses),
            fallbacks: sum(&|p| p.engine.fallbacks + p.promotion_failures),
            budget_refusals: sum(&|p| p.engine.budget_refusals + p.promotion_budget_refusals),
            promotions: promotions_on_transfers + promotions_by_allocator + promotions_on_queries,
            promotions_on_transfers,
            promotions_by_allocator,
            promotions_on_queries,
            demotions: sum(&|p| p.demotions),
            merged_registrations: sum(&|p| p.merged_registrations),
            events: sum(&|p| p.events),
            events_lost: sum(&|p| p.events_lost),
            hook_samples: sum(&|p| p.hook_samples),
            wrapped: sum(&|p| p.wrapped_by_dlsym + p.wrapped_by_proc_address + p.wrapped_by_rule),
        }
    }
}

/// How the command ran, for the JSON summary.
#[derive(Debug, Clone)]
pub struct RunInfo {
    /// The command and its arguments.
    pub command: Vec<String>,
    /// The mode (`adaptive`, `profile`, `use`).
    pub mode: String,
    /// Its exit code, if it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// Wall time, seconds.
    pub elapsed_s: f64,
}

/// The `pinwise-run-summary` document (version 1): how the command ran, every process's
/// own statistics record (`raw`, as the library wrote it) with its output paths as they are
/// now (`processes`, the same order), and the totals.
pub fn summary_json(
    run: &RunInfo,
    processes: &[ProcessStats],
    raw: &[serde_json::Value],
) -> serde_json::Value {
    serde_json::json!({
        "format": "pinwise-run-summary",
        "version": 1,
        "command": run.command,
        "mode": run.mode,
        "exit_code": run.exit_code,
        "signal": run.signal,
        "elapsed_s": run.elapsed_s,
        "processes": processes.iter().zip(raw).map(|(p, raw)| {
            let mut raw = raw.clone();
            raw["history"] = serde_json::to_value(&p.history).unwrap_or_default();
            raw["profile"] = serde_json::to_value(&p.profile).unwrap_or_default();
            raw
        }).collect::<Vec<_>>(),
        "totals": totals_json(processes),
    })
}

/// The `totals` of the JSON summary.
pub fn totals_json(ps: &[ProcessStats]) -> serde_json::Value {
    let mut t = serde_json::to_value(RunTotals::of(ps)).unwrap_or_default();
    if let Some(pool) = pinwise_core::pool_use::PoolUseStats::total(ps.iter().map(|p| &p.pool)) {
        t["pool"] = serde_json::json!({
            "stats": pool,
            "gpu_pagetable_bytes_moved_estimate": pool.pagetable_bytes_moved(),
            "gpu_pagetable_bytes_saved_estimate": pool.pagetable_bytes_saved(),
        });
    }
    t
}
