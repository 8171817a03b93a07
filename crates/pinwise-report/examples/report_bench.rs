//! Times the report's phases on a large synthetic history (core's `synth`: not a
//! measurement of a real program, it exercises the paths at realistic ratios).
//!
//! ```text
//! cargo run --release -p pinwise-report --example report_bench -- \
//!     [--allocations 1000000] [--events 10000000] [--json] [--file PATH] [--html OUT]
//! ```
//!
//! Writes the history to `--file` (binary, or JSON with `--json`) unless it exists, then
//! reads it back and times each phase: read and decode, analysis (every allocation and
//! event), the text rendering, and the HTML page if asked. Prints one line per phase.

use std::path::PathBuf;
use std::time::Instant;

use pinwise_core::synth::{SynthConfig, SynthEvents};
use pinwise_core::{save_history, CostModel, DumpFormat, HistoryConfig, MemHistory};
use pinwise_report::{build_report, load_history, NoSymbols, Progress, ReportOptions};

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let allocations: u64 = arg(&args, "--allocations", 1_000_000);
    let events: u64 = arg(&args, "--events", 10 * allocations);
    let json = args.iter().any(|a| a == "--json");
    let file: PathBuf = arg(
        &args,
        "--file",
        std::env::temp_dir().join(format!(
            "pinwise-synth-{allocations}-{events}.{}",
            if json { "json" } else { "pwh" }
        )),
    );
    let html: Option<PathBuf> = args
        .iter()
        .position(|a| a == "--html")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from);

    if !file.exists() {
        let t = Instant::now();
        let mut history = MemHistory::new(HistoryConfig::default());
        let cfg = SynthConfig {
            allocations,
            events,
            ..SynthConfig::default()
        };
        let modules = history.modules();
        for e in SynthEvents::new(cfg, &modules) {
            history.ingest(&e);
        }
        let format = if json {
            DumpFormat::Json
        } else {
            DumpFormat::Binary
        };
        save_history(&history, &file, format)?;
        println!(
            "generated {} ({} records, {} events) in {:.2} s",
            file.display(),
            history.len(),
            history.stats().events_ingested,
            t.elapsed().as_secs_f64()
        );
    }
    let size = std::fs::metadata(&file)?.len();
    let total = Instant::now();

    let t = Instant::now();
    let mut progress = Progress::hidden();
    let (history, info) = load_history(&file, &mut progress)?;
    let load_s = t.elapsed().as_secs_f64();
    println!(
        "load: {:.2} s ({} records, file {:.1} MiB)",
        load_s,
        history.len(),
        size as f64 / (1 << 20) as f64
    );

    let t = Instant::now();
    let cost = CostModel::builtin();
    let report = build_report(
        &history,
        info,
        &cost,
        &ReportOptions::default(),
        &mut NoSymbols,
        &mut progress,
    );
    println!("analysis: {:.2} s", t.elapsed().as_secs_f64());

    let t = Instant::now();
    let text = pinwise_report::text::render(&report);
    println!(
        "text: {:.3} s ({} lines)",
        t.elapsed().as_secs_f64(),
        text.lines().count()
    );
    println!(
        "total (load + analysis + text): {:.2} s",
        total.elapsed().as_secs_f64()
    );
    if let Some(path) = html {
        let t = Instant::now();
        pinwise_report::html::write(&report, &path)?;
        println!(
            "html: {:.2} s -> {}",
            t.elapsed().as_secs_f64(),
            path.display()
        );
    }
    Ok(())
}
