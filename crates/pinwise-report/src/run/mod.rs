//! What `pinwise run` says when the command ended: the preload library's per-process
//! statistics ([`ProcessStats`](pinwise_core::preload_stats::ProcessStats)) added up
//! ([`model`], [`compute`]), as lines for the terminal ([`text`]) and as the
//! `pinwise-run-summary` JSON document ([`compute::summary_json`]). The CLI only runs the
//! command, reads the statistics and prints or writes these.

pub mod compute;
pub mod model;
pub mod text;

pub use compute::{summary_json, totals_json, used_cuda, RunInfo};
pub use model::RunTotals;
pub use text::summary_lines;
