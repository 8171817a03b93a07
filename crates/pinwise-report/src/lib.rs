//! pinwise-report: what a person reads after a trace.
//!
//! | module | idea |
//! |---|---|
//! | [`input`] | reading history dumps and profiles, with a progress bar on large files |
//! | [`analysis`] | [`build_report`]: a history, the cost model and a resolver make a [`Report`] |
//! | [`model`] | [`Report`]'s parts: totals, estimated times, hot/cold spots, pinned for nothing, source health, plot data |
//! | `pass` | the one pass over every allocation and its events, on several threads |
//! | `health` | the sources' own statistics, and whether the run used the CPU stand-in |
//! | [`redundant`] | redundant transfers: copies whose bytes the other side already had, advice, sampling error |
//! | [`pool`] | the node's pinned pool (`pinwise run --pool`): pinned RAM it served, GPU page tables estimated, fallbacks |
//! | [`budget`] | the saving-versus-pinned-budget curve and the budget for a share of the saving |
//! | [`sites`] | naming call sites: [`SourceResolver`] (the caller symbolizes), labels |
//! | [`text`] | the terminal rendering, fitted to a width (names cut in the middle, less important columns left out) |
//! | [`layout`] | the width (the terminal's, `COLUMNS`, else 100), full names or not, colour: how one text rendering looks |
//! | [`html`] | the self-contained HTML page; [`plots`] draws its SVG plots |
//! | [`perfetto`] | the timeline in Chrome's trace event format (Perfetto, chrome://tracing) |
//! | [`diff`] | two histories or profiles side by side |
//! | [`run`] | what `pinwise run` says at the end: the library's per-process statistics added up, as text and JSON |
//! | [`units`] | bytes, durations and counts for people |
//! | [`json`] | how the JSON outputs name things (format, version, snake_case, keyed objects) |
//!
//! Estimated times come from core's cost model: a history records what moved, not how long
//! it took. Nothing here needs a GPU or privileges.
#![forbid(unsafe_code)]

pub mod analysis;
pub mod budget;
pub mod diff;
pub mod error;
pub mod health;
pub mod html;
pub mod input;
pub mod json;
pub mod layout;
pub mod model;
mod pass;
pub mod perfetto;
pub mod plots;
pub mod pool;
pub mod progress;
pub mod redundant;
pub mod run;
pub mod sites;
mod tags;
pub mod text;
pub mod units;

pub use analysis::{build_report, Report, ReportOptions};
pub use error::ReportError;
pub use input::{load_any, load_history, InputInfo, InputKind, Loaded};
pub use progress::Progress;
pub use sites::{NoSymbols, SiteLabel, SiteNames, SourceLocation, SourceResolver};
