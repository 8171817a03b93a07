//! `pinwise convert`: a history from one dump format to the other (binary to JSON for
//! scripts, JSON to binary to keep it small). The Python package's `load_history` reads a
//! binary history through it.
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use pinwise_core::format::{binary, json};
use pinwise_core::DumpFormat;
use pinwise_report::Progress;

use super::trace::FormatArg;

/// Arguments of `pinwise convert`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  pinwise convert run.bin -o run.json\n  \
                  pinwise convert run.bin -o - --format json | jq .stats\n\n\
                  A binary history cut short (a killed program) is converted up to its last \
                  whole frame, as `pinwise report` reads it.")]
pub struct ConvertArgs {
    /// History file written by `pinwise trace` or `pinwise run` (binary or JSON; `-`:
    /// stdin).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// Write the converted history here (`-`: stdout). Its format follows the name: JSON
    /// for `.json`, else binary.
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: PathBuf,

    /// Format of the output, whatever its name [default: from -o's extension; JSON for
    /// `-`].
    #[arg(long, value_enum)]
    pub format: Option<FormatArg>,

    /// Replace an output file that exists already.
    #[arg(long)]
    pub force: bool,

    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// The output format `args` ask for: `--format`, else JSON for stdout and from the
/// extension for a file.
pub fn output_format(args: &ConvertArgs) -> DumpFormat {
    match args.format {
        Some(FormatArg::Json) => DumpFormat::Json,
        Some(FormatArg::Bin) => DumpFormat::Binary,
        None if super::outputs::is_std(&args.output) => DumpFormat::Json,
        None => DumpFormat::from_path(&args.output),
    }
}

/// Runs `pinwise convert`.
pub fn run(args: ConvertArgs) -> Result<ExitCode> {
    let format = output_format(&args);
    let mut progress = Progress::new(!args.quiet);
    let (history, info) = pinwise_report::load_history(&args.file, &mut progress)?;
    if let Some(salvaged) = &info.salvaged {
        eprintln!("pinwise: {}: {salvaged}", args.file.display());
    }
    progress.stage(&format!("writing {}", args.output.display()));
    super::outputs::write_output("-o", &args.output, args.force, |out| {
        match format {
            DumpFormat::Json => json::write(&history, out),
            DumpFormat::Binary => binary::write(&history, out),
        }
        .map_err(std::io::Error::other)
    })?;
    progress.finish();
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn args(output: &str, format: Option<FormatArg>) -> ConvertArgs {
        ConvertArgs {
            file: PathBuf::from("in.bin"),
            output: PathBuf::from(output),
            format,
            force: false,
            quiet: true,
        }
    }

    #[test]
    fn the_output_format_follows_the_flag_then_the_name_and_stdout_is_json() {
        assert_eq!(output_format(&args("x.json", None)), DumpFormat::Json);
        assert_eq!(output_format(&args("x.bin", None)), DumpFormat::Binary);
        assert_eq!(output_format(&args("-", None)), DumpFormat::Json);
        assert_eq!(
            output_format(&args("-", Some(FormatArg::Bin))),
            DumpFormat::Binary
        );
        assert_eq!(
            output_format(&args("x.json", Some(FormatArg::Bin))),
            DumpFormat::Binary
        );
    }

    #[test]
    fn a_binary_history_converts_to_json_and_back_unchanged() {
        use pinwise_core::synth::{SynthConfig, SynthEvents};
        use pinwise_core::{HistoryConfig, MemHistory};
        let dir = tempfile::tempdir().unwrap();
        let mut h = MemHistory::new(HistoryConfig::default());
        let modules = h.modules();
        let cfg = SynthConfig {
            seed: 7,
            allocations: 50,
            events: 500,
            live_window: 10,
            ..SynthConfig::default()
        };
        for e in SynthEvents::new(cfg, &modules) {
            h.ingest(&e);
        }
        let bin = dir.path().join("h.bin");
        pinwise_core::save_history(&h, &bin, DumpFormat::Binary).unwrap();
        let to = |input: &Path, out: &str| {
            let out = dir.path().join(out);
            let mut a = args(out.to_str().unwrap(), None);
            a.file = input.to_path_buf();
            run(a).unwrap();
            out
        };
        let js = to(&bin, "h.json");
        let text = std::fs::read_to_string(&js).unwrap();
        assert!(text.starts_with("{\"format\":\"pinwise-history\""), "JSON");
        let back = to(&js, "back.bin");
        let original = pinwise_core::format::load_history(&bin).unwrap();
        let round = pinwise_core::format::load_history(&back).unwrap();
        // Same dump, byte for byte, once through JSON.
        assert_eq!(json::to_string(&original), json::to_string(&round));
        assert_eq!(original.len(), 50);
        // An existing output is refused without --force.
        let mut again = args(js.to_str().unwrap(), None);
        again.file = bin.clone();
        let e = run(again).unwrap_err();
        assert!(format!("{e:#}").contains("exists already"), "{e:#}");
    }
}
