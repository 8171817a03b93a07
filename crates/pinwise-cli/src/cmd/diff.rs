//! `pinwise diff A B`: two histories or profiles side by side (per call site and per tag:
//! what got hotter or colder, appeared or disappeared, changed size), and whether the
//! pinning A advises still pays back in B: a check that a profile still matches the program.
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use pinwise_core::Policy;
use pinwise_report::diff::{self, DiffOptions};
use pinwise_report::Progress;

use super::report::{cost_model, parse_share, resolver, PinMethodArg};

/// Exit status when B confirms less of A's advice than `--fail-under` asks (the
/// "threshold not met" status of the README's conventions).
pub const EXIT_MISMATCH: u8 = super::outputs::EXIT_THRESHOLD;

/// Format of `pinwise diff`'s output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DiffFormat {
    /// Tables for a terminal.
    Text,
    /// JSON (`schemas/diff.schema.json`).
    Json,
}

/// Arguments of `pinwise diff`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  pinwise diff profile.json new-run.bin\n  \
                  pinwise diff old.bin new.bin --json\n  \
                  pinwise diff app.profile.json today.bin --fail-under 0.8   # exit 3 when the \
                  profile no longer matches")]
pub struct DiffArgs {
    /// The reference: a history (binary or JSON) or a profile.
    #[arg(value_name = "A")]
    pub a: PathBuf,

    /// What to compare with it: a history or a profile.
    #[arg(value_name = "B")]
    pub b: PathBuf,

    /// Write the comparison here (`-`: stdout) [default: stdout]; `.json`: JSON, else text.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// The comparison's format, whatever the output's name [default: from -o, else text].
    #[arg(long, value_enum, conflicts_with = "json")]
    pub format: Option<DiffFormat>,

    /// The same as `--format json`.
    #[arg(long)]
    pub json: bool,

    /// Replace an output file that exists already.
    #[arg(long)]
    pub force: bool,

    /// Full names and every column in the tables, never fitted to the terminal's width.
    #[arg(long)]
    pub wide: bool,

    /// Relative change that counts as hotter, colder, resized (0.25: 25 %).
    #[arg(long, default_value_t = 0.25, value_name = "SHARE")]
    pub threshold: f64,

    /// Rows in each table.
    #[arg(long, default_value_t = 15, value_name = "N")]
    pub top: usize,

    /// Exit with status 3 when B confirms less than this share of A's estimated pinning
    /// saving (0 to 1).
    #[arg(long, value_parser = parse_share, value_name = "SHARE")]
    pub fail_under: Option<f64>,

    /// Calibration CSV for the cost model [default: built-in (H200)].
    #[arg(long, value_name = "FILE")]
    pub calibration: Option<PathBuf>,

    /// How pinning is costed.
    #[arg(long, value_enum, default_value_t = PinMethodArg::Register)]
    pub pin_method: PinMethodArg,

    /// Name call sites by module and offset only (no symbol look-up).
    #[arg(long)]
    pub no_symbols: bool,

    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// Runs `pinwise diff`.
pub fn run(args: DiffArgs) -> Result<ExitCode> {
    if !(args.threshold.is_finite() && args.threshold >= 0.0) {
        return Err(super::outputs::usage(format!(
            "--threshold must be a share of 0 or more, not {}",
            args.threshold
        )));
    }
    let cost = cost_model(args.calibration.as_deref())?;
    let mut progress = Progress::new(!args.quiet);
    let (a, a_info) = pinwise_report::load_any(&args.a, &mut progress)?;
    let (b, b_info) = pinwise_report::load_any(&args.b, &mut progress)?;
    progress.stage("comparing");
    let (pa, pb) = (diff::entries_of(&a), diff::entries_of(&b));
    drop((a, b));
    let mut resolver = resolver(args.no_symbols);
    let report = diff::diff(
        &pa,
        a_info,
        &pb,
        b_info,
        &Policy::new(cost),
        &DiffOptions {
            top: args.top,
            threshold: args.threshold,
            pin_method: args.pin_method.into(),
        },
        resolver.as_mut(),
    );
    progress.finish();
    let json = match (args.format, &args.output) {
        (Some(f), _) => f == DiffFormat::Json,
        (None, _) if args.json => true,
        (None, Some(path)) => {
            super::outputs::history_format_of(path) == pinwise_core::DumpFormat::Json
        }
        (None, None) => false,
    };
    let bytes = if json {
        let mut v = serde_json::to_vec_pretty(&report).context("writing the JSON diff")?;
        v.push(b'\n');
        v
    } else {
        let output = args.output.clone().unwrap_or_else(|| PathBuf::from("-"));
        let layout = super::outputs::text_layout(&output, args.wide);
        diff::render_text_with(&report, layout).into_bytes()
    };
    let output = args.output.clone().unwrap_or_else(|| PathBuf::from("-"));
    super::outputs::write_output("-o", &output, args.force, |w| w.write_all(&bytes))?;
    match args.fail_under {
        Some(min) if report.pinning.share < min => {
            eprintln!(
                "pinwise: B confirms {:.1} % of A's pinning saving, under --fail-under {:.1} %",
                report.pinning.share * 100.0,
                min * 100.0
            );
            Ok(ExitCode::from(EXIT_MISMATCH))
        }
        _ => Ok(ExitCode::SUCCESS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: PathBuf, b: PathBuf) -> DiffArgs {
        DiffArgs {
            a,
            b,
            output: None,
            format: None,
            force: false,
            wide: false,
            json: false,
            threshold: 0.25,
            top: 5,
            fail_under: None,
            calibration: None,
            pin_method: PinMethodArg::Register,
            no_symbols: true,
            quiet: true,
        }
    }

    #[test]
    fn a_history_matches_itself_and_its_profile() {
        let dir = tempfile::tempdir().unwrap();
        let file = super::super::report::tests::synthetic_history(dir.path(), 21);
        let history = pinwise_core::load_history(&file).unwrap();
        let profile = dir.path().join("p.json");
        pinwise_core::Profile::from_history(&history)
            .save(&profile)
            .unwrap();
        for b in [file.clone(), profile.clone()] {
            let code = run(DiffArgs {
                fail_under: Some(1.0),
                ..args(file.clone(), b)
            })
            .unwrap();
            assert_eq!(code, ExitCode::SUCCESS);
        }
    }

    #[test]
    fn another_input_fails_a_strict_check() {
        let dir = tempfile::tempdir().unwrap();
        let a = super::super::report::tests::synthetic_history(dir.path(), 22);
        let b = super::super::report::tests::synthetic_history(dir.path(), 23);
        let code = run(DiffArgs {
            fail_under: Some(0.99),
            ..args(a, b)
        })
        .unwrap();
        assert_eq!(code, ExitCode::from(EXIT_MISMATCH));
    }
}
