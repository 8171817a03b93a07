//! Judges a recorded matrix again with this build's summary (the floor within the pinned
//! bound from each cell's runs, the run lengths): reads `alloc-matrix-runs.csv` and the
//! run's calibration, prints the markdown report.
//!
//! `cargo run -p pinwise-bench --example rejudge -- RUNS.csv CALIBRATION.csv [COMMAND]`

use anyhow::Context;
use pinwise_bench::matrix::{markdown, report_from_runs_csv, MatrixSummary};
use pinwise_core::{CostModel, Policy};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [runs, calibration, rest @ ..] = args.as_slice() else {
        anyhow::bail!("usage: rejudge RUNS.csv CALIBRATION.csv [COMMAND]");
    };
    let text = std::fs::read_to_string(runs).with_context(|| runs.clone())?;
    let model = CostModel::from_csv_file(std::path::Path::new(calibration))
        .with_context(|| calibration.clone())?;
    let report = report_from_runs_csv(&text, Policy::new(model))?;
    let summary = MatrixSummary::of(&report);
    let command = rest.first().cloned().unwrap_or_else(|| {
        format!("cargo run -p pinwise-bench --example rejudge -- {runs} {calibration}")
    });
    let md = markdown(&report, &summary, &command, &pinwise_bench::utc_now());
    let note = format!(
        "> **Recorded runs judged again** by this build's summary ({runs}): the runs, their \
         device and calibration are the recording's; the settings lines (time budget, \
         estimate, wall time, re-planning) are this build's defaults, not the recorded \
         run's: see the recording's own report for those.\n\n"
    );
    match md.split_once('\n') {
        Some((title, rest)) => print!("{title}\n\n{note}{}", rest.trim_start_matches('\n')),
        None => print!("{note}{md}"),
    }
    Ok(())
}
