//! `pinwise export`: a history as a timeline in Chrome's trace event format, for Perfetto UI
//! (ui.perfetto.dev, "Open trace file") and chrome://tracing.
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use pinwise_report::perfetto::{self, ExportOptions};
use pinwise_report::Progress;

use super::report::{cost_model, resolver};

/// Arguments of `pinwise export`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example:\n  pinwise export run.bin --perfetto run.trace.json\n\n\
                  Allocations are slices on lane tracks, transfers are slices inside them \
                  (durations modeled by the cost model: the history records when a copy was \
                  issued, not how long it took), pin/unpin are instants, live host bytes are \
                  counters."
)]
pub struct ExportArgs {
    /// History file written by `pinwise trace` or `pinwise run` (binary or JSON; `-`:
    /// stdin).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// Write the timeline (Chrome trace event JSON, for Perfetto) here (`-`: stdout).
    /// `--perfetto FILE` is the older spelling.
    #[arg(
        short = 'o',
        long = "output",
        alias = "perfetto",
        value_name = "OUT.json"
    )]
    pub perfetto: PathBuf,

    /// Replace an output file that exists already.
    #[arg(long)]
    pub force: bool,

    /// Only the N allocations that moved the most bytes (large histories make large traces).
    #[arg(long, value_name = "N")]
    pub top: Option<usize>,

    /// Calibration CSV for the modeled transfer durations [default: built-in (H200)].
    #[arg(long, value_name = "FILE")]
    pub calibration: Option<PathBuf>,

    /// Name call sites by module and offset only (no symbol look-up).
    #[arg(long)]
    pub no_symbols: bool,

    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// Above this many allocations, a hint about `--top` is printed.
const MANY_ALLOCATIONS: usize = 200_000;

/// Runs `pinwise export`.
pub fn run(args: ExportArgs) -> Result<ExitCode> {
    let cost = cost_model(args.calibration.as_deref())?;
    let mut progress = Progress::new(!args.quiet);
    let (history, _info) = pinwise_report::load_history(&args.file, &mut progress)?;
    if history.len() > MANY_ALLOCATIONS && args.top.is_none() {
        eprintln!(
            "pinwise: {} allocations: the trace will be large; `--top N` keeps the N busiest",
            history.len()
        );
    }
    progress.stage(&format!("writing {}", args.perfetto.display()));
    let mut resolver = resolver(args.no_symbols);
    let mut summary = None;
    super::outputs::write_output("-o", &args.perfetto, args.force, |out| {
        summary = Some(perfetto::write_trace(
            &history,
            &cost,
            &ExportOptions { top: args.top },
            resolver.as_mut(),
            out,
        )?);
        Ok(())
    })?;
    let summary = summary.expect("the trace was written");
    progress.finish();
    eprintln!(
        "pinwise: wrote {} trace events to {}: {} allocations on {} lanes, {} transfers, {} \
         pin/unpin, {} counter samples{}",
        summary.events,
        args.perfetto.display(),
        summary.allocations,
        summary.lanes,
        summary.transfers,
        summary.pin_events,
        summary.counter_samples,
        if summary.allocations_left_out > 0 {
            format!(
                " ({} allocations left out by --top)",
                summary.allocations_left_out
            )
        } else {
            String::new()
        }
    );
    eprintln!(
        "pinwise: transfer durations are modeled by the cost model ({}); open the file in \
         ui.perfetto.dev or chrome://tracing",
        cost.source()
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exports_a_history_as_a_trace_that_parses() {
        let dir = tempfile::tempdir().unwrap();
        let file = super::super::report::tests::synthetic_history(dir.path(), 11);
        let out = dir.path().join("t.json");
        let code = run(ExportArgs {
            file,
            perfetto: out.clone(),
            force: false,
            top: Some(20),
            calibration: None,
            no_symbols: true,
            quiet: true,
        })
        .unwrap();
        assert_eq!(code, ExitCode::SUCCESS);
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        let events = v["traceEvents"].as_array().unwrap();
        let slices = events.iter().filter(|e| e["cat"] == "allocation").count();
        assert_eq!(slices, 20, "--top 20 keeps 20 allocations");
    }

    #[test]
    fn an_unwritable_output_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = super::super::report::tests::synthetic_history(dir.path(), 12);
        let out = dir.path().join("no-such-dir").join("t.json");
        let err = run(ExportArgs {
            file,
            perfetto: out,
            force: false,
            top: None,
            calibration: None,
            no_symbols: true,
            quiet: true,
        })
        .unwrap_err();
        let msg = format!("{err:#}");
        assert!(
            msg.contains("cannot write") && msg.contains("no-such-dir"),
            "{msg}"
        );
    }
}
