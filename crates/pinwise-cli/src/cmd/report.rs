//! `pinwise report`: where a history's transfer time goes and what pinning would save, in
//! the terminal (100 columns), as JSON, or as a self-contained HTML page with plots.
//!
//! Also home of what `export` and `diff` share with it: the cost model from `--calibration`,
//! the pin method argument, and the call-site resolver backed by pinwise-trace's blazesym
//! symbolizer.
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use pinwise_core::{CostModel, ModuleIdentity, PinMethod};
use pinwise_report::{NoSymbols, Progress, ReportOptions, SourceLocation, SourceResolver};

/// How the smart allocator would pin memory (what pinning costs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PinMethodArg {
    /// Register memory already allocated and touched (`cuMemHostRegister`).
    Register,
    /// Allocate pinned memory (`cuMemHostAlloc`).
    Mallochost,
}

impl From<PinMethodArg> for PinMethod {
    fn from(m: PinMethodArg) -> Self {
        match m {
            PinMethodArg::Register => PinMethod::RegisterTouched,
            PinMethodArg::Mallochost => PinMethod::MallocHost,
        }
    }
}

/// Format of `pinwise report`'s output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    /// Tables for a terminal.
    Text,
    /// JSON (`schemas/report.schema.json`).
    Json,
    /// A self-contained HTML page with plots.
    Html,
}

impl ReportFormat {
    /// The format a file name asks for: `.json`, `.html`/`.htm`, else text.
    fn of(path: &Path) -> ReportFormat {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("json") => ReportFormat::Json,
            Some("html" | "htm") => ReportFormat::Html,
            _ => ReportFormat::Text,
        }
    }
}

/// Arguments of `pinwise report`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  pinwise report run.json\n  \
                  pinwise report run.bin -o report.html\n  \
                  pinwise report run.bin -o report.json\n  \
                  pinwise report - --json < run.bin | jq .hotspots\n  \
                  pinwise report run.bin --calibration my-gpu.csv\n\n\
                  Times are estimates from the cost model (built in: measured on an H200; \
                  `pinwise calibrate` measures this machine's): a history records what moved, \
                  not how long it took.")]
pub struct ReportArgs {
    /// History file written by `pinwise trace` or `pinwise run` (binary or JSON; `-`:
    /// stdin).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// Write the report here (`-`: stdout) [default: stdout]. The format follows the name:
    /// `.json` JSON, `.html` an HTML page with plots, else text.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// The report's format, whatever the output's name [default: from -o, else text].
    #[arg(long, value_enum, conflicts_with = "json")]
    pub format: Option<ReportFormat>,

    /// The same as `--format json`.
    #[arg(long)]
    pub json: bool,

    /// Replace an output file that exists already.
    #[arg(long)]
    pub force: bool,

    /// Also write the HTML page here (the text still goes to stdout): the older spelling
    /// of `-o FILE.html`, kept for scripts.
    #[arg(long, value_name = "OUT.html", hide = true)]
    pub html: Option<PathBuf>,

    /// Calibration CSV for the cost model (`pinwise calibrate` writes one) [default: the
    /// built-in one, measured on an NVIDIA H200].
    #[arg(long, value_name = "FILE")]
    pub calibration: Option<PathBuf>,

    /// Rows in each table.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub top: usize,

    /// Share of the attainable saving the pinned budget should capture (0 to 1).
    #[arg(long, default_value_t = 0.9, value_parser = parse_share, value_name = "SHARE")]
    pub capture: f64,

    /// How the smart allocator would pin (its pinning costs).
    #[arg(long, value_enum, default_value_t = PinMethodArg::Register)]
    pub pin_method: PinMethodArg,

    /// Name call sites by module and offset only (no symbol look-up).
    #[arg(long)]
    pub no_symbols: bool,

    /// Full names and every column in the tables, never fitted to the terminal's width.
    #[arg(long)]
    pub wide: bool,

    /// Show each allocation's whole call stack (native and Python frames) under its row.
    #[arg(long)]
    pub stacks: bool,

    /// No progress bar (it shows on a terminal only, when reading takes long).
    #[arg(long)]
    pub quiet: bool,
}

/// Parses a share between 0 and 1.
pub(crate) fn parse_share(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a number (a share between 0 and 1, like 0.9)"))?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is not between 0 and 1"))
    }
}

/// The cost model: the calibration file's, or the built-in one.
pub(crate) fn cost_model(calibration: Option<&Path>) -> Result<CostModel> {
    match calibration {
        Some(path) => CostModel::from_csv_file(path)
            .with_context(|| format!("cannot use the calibration {}", path.display())),
        None => Ok(CostModel::builtin()),
    }
}

/// Call sites named through pinwise-trace's symbolizer (blazesym: DWARF, else the symbol
/// table; a file whose build ID changed is not used).
pub(crate) struct BlazeResolver {
    symbolizer: pinwise_trace::Symbolizer,
}

impl SourceResolver for BlazeResolver {
    fn resolve(&mut self, module: &ModuleIdentity, offset: u64) -> Option<SourceLocation> {
        self.symbolizer
            .symbolize(module, offset)
            .map(|s| SourceLocation {
                function: s.function,
                file: s.file,
                line: s.line,
            })
    }
}

/// The resolver the commands use: blazesym, or none with `--no-symbols`.
pub(crate) fn resolver(no_symbols: bool) -> Box<dyn SourceResolver> {
    if no_symbols {
        Box::new(NoSymbols)
    } else {
        Box::new(BlazeResolver {
            symbolizer: pinwise_trace::Symbolizer::new(),
        })
    }
}

/// Runs `pinwise report`.
pub fn run(args: ReportArgs) -> Result<ExitCode> {
    let cost = cost_model(args.calibration.as_deref())?;
    let mut progress = Progress::new(!args.quiet);
    let (history, info) = pinwise_report::load_history(&args.file, &mut progress)?;
    let options = ReportOptions {
        top: args.top,
        capture_share: args.capture,
        pin_method: args.pin_method.into(),
        ..ReportOptions::default()
    };
    let mut resolver = resolver(args.no_symbols);
    let report = pinwise_report::build_report(
        &history,
        info,
        &cost,
        &options,
        resolver.as_mut(),
        &mut progress,
    );
    let format = match (args.format, args.json, &args.output) {
        (Some(f), _, _) => f,
        (None, true, _) => ReportFormat::Json,
        (None, false, Some(path)) => ReportFormat::of(path),
        (None, false, None) => ReportFormat::Text,
    };
    if let Some(path) = &args.html {
        progress.stage("drawing the HTML report");
        let page = pinwise_report::html::render(&report)?;
        super::outputs::write_output("--html", path, args.force, |w| w.write_all(page.as_bytes()))?;
    }
    let bytes = match format {
        ReportFormat::Json => {
            let mut v = serde_json::to_vec_pretty(&report).context("writing the JSON report")?;
            v.push(b'\n');
            v
        }
        ReportFormat::Html => {
            progress.stage("drawing the HTML report");
            pinwise_report::html::render(&report)?.into_bytes()
        }
        ReportFormat::Text => {
            let output = args.output.clone().unwrap_or_else(|| PathBuf::from("-"));
            let options = pinwise_report::text::TextOptions {
                stacks: args.stacks,
                layout: super::outputs::text_layout(&output, args.wide),
            };
            pinwise_report::text::render_with(&report, options).into_bytes()
        }
    };
    progress.finish();
    let output = args.output.clone().unwrap_or_else(|| PathBuf::from("-"));
    super::outputs::write_output("-o", &output, args.force, |w| w.write_all(&bytes))?;
    for path in [args.html.as_ref(), args.output.as_ref()]
        .into_iter()
        .flatten()
    {
        if !super::outputs::is_std(path) {
            eprintln!("pinwise: wrote the report to {}", path.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use pinwise_core::synth::{SynthConfig, SynthEvents};
    use pinwise_core::{save_history, DumpFormat, HistoryConfig, MemHistory, ModuleTable, Site};

    /// A small synthetic history (not a measurement) saved in `dir`.
    pub(crate) fn synthetic_history(dir: &Path, seed: u64) -> PathBuf {
        let mut h = MemHistory::new(HistoryConfig::default());
        let modules = h.modules();
        let cfg = SynthConfig {
            seed,
            allocations: 400,
            events: 4000,
            live_window: 40,
            ..SynthConfig::default()
        };
        for e in SynthEvents::new(cfg, &modules) {
            h.ingest(&e);
        }
        let path = dir.join(format!("synth-{seed}.bin"));
        save_history(&h, &path, DumpFormat::Binary).unwrap();
        path
    }

    fn args(file: PathBuf) -> ReportArgs {
        ReportArgs {
            file,
            output: None,
            format: None,
            json: false,
            force: false,
            html: None,
            calibration: None,
            top: 5,
            capture: 0.9,
            pin_method: PinMethodArg::Register,
            no_symbols: true,
            wide: false,
            stacks: false,
            quiet: true,
        }
    }

    #[test]
    fn reports_a_history_and_writes_the_html_page() {
        let dir = tempfile::tempdir().unwrap();
        let file = synthetic_history(dir.path(), 3);
        let html = dir.path().join("r.html");
        let code = run(ReportArgs {
            html: Some(html.clone()),
            ..args(file)
        })
        .unwrap();
        assert_eq!(code, ExitCode::SUCCESS);
        let page = std::fs::read_to_string(&html).unwrap();
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert_eq!(page.matches("<svg").count(), pinwise_report::html::PLOTS);
    }

    #[test]
    fn a_corrupt_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = synthetic_history(dir.path(), 4);
        let bytes = std::fs::read(&file).unwrap();
        // Cut short: every whole frame is salvaged, and the report says so.
        let cut = dir.path().join("cut.bin");
        std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
        assert_eq!(run(args(cut.clone())).unwrap(), ExitCode::SUCCESS);
        let (_, info) = pinwise_report::load_history(&cut, &mut Progress::hidden()).unwrap();
        let note = info.salvaged.expect("a salvage note");
        assert!(
            note.contains("the file was cut: 2 whole frames salvaged"),
            "{note}"
        );
        // Corrupt: an error naming the file.
        let bad = dir.path().join("bad.bin");
        let mut flipped = bytes.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0xff;
        std::fs::write(&bad, &flipped).unwrap();
        let err = run(args(bad.clone())).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains(&bad.display().to_string()), "{msg}");
        assert!(msg.contains("corrupt"), "{msg}");
        let missing = dir.path().join("missing.bin");
        let msg = format!("{:#}", run(args(missing.clone())).unwrap_err());
        assert!(
            msg.contains("cannot read") && msg.contains("missing.bin"),
            "{msg}"
        );
    }

    #[test]
    fn a_bad_calibration_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = synthetic_history(dir.path(), 5);
        let cal = dir.path().join("cal.csv");
        std::fs::write(&cal, "size_bytes,nonsense\n1,2\n").unwrap();
        let err = run(ReportArgs {
            calibration: Some(cal),
            ..args(file)
        })
        .unwrap_err();
        assert!(format!("{err:#}").contains("cal.csv"), "{err:#}");
    }

    #[test]
    fn shares_outside_zero_to_one_are_refused() {
        assert_eq!(parse_share("0.9"), Ok(0.9));
        assert!(parse_share("1.5").is_err());
        assert!(parse_share("ninety").is_err());
    }

    #[inline(never)]
    fn a_function_the_resolver_names() -> u64 {
        std::hint::black_box(7)
    }

    #[test]
    fn the_blazesym_resolver_names_functions_of_this_binary() {
        // This test binary's own function, found through /proc/self/maps as a site would be.
        let addr = a_function_the_resolver_names as *const () as u64 + 1;
        assert_eq!(a_function_the_resolver_names(), 7);
        let maps = pinwise_trace::procmaps::ProcMaps::read(std::process::id()).unwrap();
        let exe = std::env::current_exe().unwrap().canonicalize().unwrap();
        let m = maps.find(addr).expect("the test binary is mapped");
        assert_eq!(m.file_path().map(Path::new), Some(exe.as_path()));
        let (module, offset) = (m.file_path().unwrap().to_string(), m.file_offset(addr));
        let table = ModuleTable::new();
        let id = table.intern(&ModuleIdentity::from_path(module));
        let mut r = resolver(false);
        let mut names = pinwise_report::SiteNames::new(r.as_mut());
        let label = names.site(&table, Site { module: id, offset });
        let loc = label.location.as_ref().expect("symbolized");
        assert!(
            loc.function.contains("a_function_the_resolver_names"),
            "{loc:?}"
        );
        assert!(label.short().contains("report.rs:"), "{}", label.short());
        // With --no-symbols: module and offset.
        let mut none = resolver(true);
        let mut names = pinwise_report::SiteNames::new(none.as_mut());
        let plain = names.site(&table, Site { module: id, offset });
        assert!(plain.location.is_none());
        assert!(plain.short().contains("+0x"), "{}", plain.short());
    }

    /// `pinwise report`, `export` and `diff` (the built binary) on histories that
    /// `pinwise run` and `pinwise trace` wrote for a program on the CPU stand-ins for
    /// libcuda and libcudart (TEST FIXTURES, not a GPU): `bench/gpu/trace/workload.c`,
    /// which prints what it did.
    mod standin_runs {
        use std::process::{Command, Output};

        use pinwise_core::{CostModel, Direction};
        use pinwise_testkit::{compile_c, require_bpf, StandinLibs};
        use serde_json::Value;

        use super::*;

        fn workload(libs: &StandinLibs, dir: &Path) -> PathBuf {
            let src =
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/gpu/trace/workload.c");
            let exe = dir.join("workload");
            let mut args: Vec<String> = vec!["-DPINWISE_STANDIN".into()];
            args.extend(libs.cudart_link_args());
            args.extend(libs.cuda_link_args());
            args.push("-lpthread".into());
            compile_c(&src, &exe, &args);
            exe
        }

        /// The `pinwise` binary cargo built next to this test (`target/<profile>/pinwise`).
        fn pinwise() -> Command {
            let exe = std::env::current_exe().unwrap();
            let bin = exe
                .parent()
                .and_then(Path::parent)
                .map(|d| d.join("pinwise"))
                .unwrap();
            assert!(
                bin.is_file(),
                "{} is missing: build the workspace first (scripts/test.sh does)",
                bin.display()
            );
            Command::new(bin)
        }

        fn ok(output: Output, what: &str) -> Output {
            assert!(
                output.status.success(),
                "{what} failed ({}):\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
            output
        }

        /// Runs `pinwise <how> -o out -- workload 2`; returns what the workload says it did.
        fn record(libs: &StandinLibs, how: &[&str], out: &Path) -> Value {
            let dir = out.parent().unwrap();
            let exe = workload(libs, dir);
            let output = ok(
                pinwise()
                    .env("LD_LIBRARY_PATH", libs.ld_library_path())
                    .args(how)
                    .arg("-o")
                    .arg(out)
                    .arg("--")
                    .arg(&exe)
                    .arg("2")
                    .output()
                    .unwrap(),
                &format!("pinwise {}", how.join(" ")),
            );
            serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
                panic!(
                    "the workload's output is not JSON ({e}): {}",
                    String::from_utf8_lossy(&output.stdout)
                )
            })
        }

        /// Checks report (JSON, text, HTML) and export on one history against what the
        /// workload did. The commands run in this process (the code under test is this
        /// build's); only the recording ran the `pinwise` binary.
        fn check_outputs(history: &Path, expected: &Value) {
            let dir = history.parent().unwrap();
            let (h, info) = pinwise_report::load_history(history, &mut Progress::hidden())
                .unwrap_or_else(|e| panic!("{e}"));
            let mut names = resolver(false);
            let report = pinwise_report::build_report(
                &h,
                info,
                &CostModel::builtin(),
                &ReportOptions::default(),
                names.as_mut(),
                &mut Progress::hidden(),
            );
            let json = serde_json::to_value(&report).unwrap();
            for d in [Direction::HtoD, Direction::DtoH, Direction::DtoD] {
                let row = &json["directions"][d.index()];
                assert_eq!(row["direction"], d.as_str());
                assert_eq!(row["transfers"], expected[d.as_str()]["transfers"], "{d:?}");
                assert_eq!(row["bytes"], expected[d.as_str()]["bytes"], "{d:?}");
            }
            // Call sites the source attributed are named: function and line in workload.c.
            // (The tracer does not always find the call site of a large mmap'd buffer; such
            // a site shows as module+offset, and the tracer counts it as unknown.)
            assert!(!report.hotspots.is_empty());
            let mut named = 0;
            for row in &report.hotspots {
                let Some(loc) = &row.site.location else {
                    assert_eq!(row.site.module_key, "path:?", "{row:?}");
                    continue;
                };
                assert_eq!(loc.function, "worker", "{row:?}");
                assert!(
                    loc.file.as_deref().unwrap().ends_with("workload.c"),
                    "{row:?}"
                );
                assert!(loc.line.unwrap() > 0, "{row:?}");
                named += 1;
            }
            assert!(named > 0, "no hotspot was named: {:?}", report.hotspots);
            let text = pinwise_report::text::render(&report);
            assert!(text.contains("worker (workload.c:"), "{text}");
            assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
            // The command itself: text on stdout, the HTML page.
            let page = dir.join("r.html");
            // Both histories of a test are reported to the same page: replaced.
            let code = run(ReportArgs {
                html: Some(page.clone()),
                force: true,
                no_symbols: false,
                ..args(history.to_path_buf())
            })
            .unwrap();
            assert_eq!(code, ExitCode::SUCCESS);
            let page = std::fs::read_to_string(page).unwrap();
            assert_eq!(page.matches("<svg").count(), pinwise_report::html::PLOTS);
            assert!(page.contains("worker (workload.c:"));
            // The Perfetto export: every host copy is a slice.
            let trace = dir.join("t.json");
            let code = super::super::super::export::run(super::super::super::export::ExportArgs {
                file: history.to_path_buf(),
                perfetto: trace.clone(),
                force: true,
                top: None,
                calibration: None,
                no_symbols: false,
                quiet: true,
            })
            .unwrap();
            assert_eq!(code, ExitCode::SUCCESS);
            let v: Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
            let events = v["traceEvents"].as_array().unwrap();
            for e in events {
                for field in ["name", "ph", "ts", "pid", "tid"] {
                    assert!(e.get(field).is_some(), "no {field} in {e}");
                }
                if e["ph"] == "X" {
                    assert!(e["dur"].as_f64().unwrap() >= 0.0, "{e}");
                }
            }
            let copies = events.iter().filter(|e| e["cat"] == "transfer").count() as u64;
            let host_copies = expected["HtoD"]["transfers"].as_u64().unwrap()
                + expected["DtoH"]["transfers"].as_u64().unwrap();
            assert_eq!(copies, host_copies, "every host copy is a slice");
        }

        fn compare(a: &Path, b: &Path) -> pinwise_report::diff::DiffReport {
            let (la, ia) = pinwise_report::load_any(a, &mut Progress::hidden()).unwrap();
            let (lb, ib) = pinwise_report::load_any(b, &mut Progress::hidden()).unwrap();
            let mut names = resolver(false);
            pinwise_report::diff::diff(
                &pinwise_report::diff::entries_of(&la),
                ia,
                &pinwise_report::diff::entries_of(&lb),
                ib,
                &pinwise_core::Policy::new(CostModel::builtin()),
                &pinwise_report::diff::DiffOptions::default(),
                names.as_mut(),
            )
        }

        /// A history against itself matches exactly (and `pinwise diff --fail-under 1`
        /// passes); two runs of the same build share their module and most tags. (Two runs
        /// need not have exactly the same tags: the program's threads race, and a source may
        /// miss a call site or a free in one run and not the other.)
        fn diff_checks(a: &Path, b: &Path) {
            let same = compare(a, a);
            assert_eq!((same.tags.only_a, same.tags.only_b), (0, 0), "{same:?}");
            assert!(same.site_counts.is_empty(), "{same:?}");
            assert_eq!(same.pinning.share, 1.0);
            let code = super::super::super::diff::run(super::super::super::diff::DiffArgs {
                a: a.to_path_buf(),
                b: a.to_path_buf(),
                output: None,
                format: None,
                force: false,
                wide: false,
                json: true,
                threshold: 0.25,
                top: 5,
                fail_under: Some(1.0),
                calibration: None,
                pin_method: PinMethodArg::Register,
                no_symbols: false,
                quiet: true,
            })
            .unwrap();
            assert_eq!(code, ExitCode::SUCCESS);
            let d = compare(a, b);
            assert!(d.module_changes.is_empty(), "{d:?}");
            assert!(d.tags.matched > d.tags.only_a + d.tags.only_b, "{d:?}");
        }

        #[test]
        fn histories_written_by_pinwise_run() {
            let libs = StandinLibs::new();
            let preload = libs
                .cuda_standin()
                .parent()
                .unwrap()
                .join("libpinwise_preload.so");
            assert!(
                preload.is_file(),
                "{} is missing: build the workspace first",
                preload.display()
            );
            let dir = tempfile::tempdir().unwrap();
            let preload = preload.display().to_string();
            let mut files = Vec::new();
            for run in 1..=2 {
                let out = dir.path().join(format!("run{run}.bin"));
                let expected = record(&libs, &["run", "--preload", &preload], &out);
                check_outputs(&out, &expected);
                files.push(out);
            }
            diff_checks(&files[0], &files[1]);
        }

        #[test]
        fn histories_written_by_pinwise_trace() {
            if !require_bpf("histories_written_by_pinwise_trace") {
                return;
            }
            let libs = StandinLibs::new();
            let dir = tempfile::tempdir().unwrap();
            let mut files = Vec::new();
            for (run, format) in [(1, "bin"), (2, "json")] {
                let out = dir.path().join(format!("trace{run}.{format}"));
                let expected = record(&libs, &["trace", "--format", format], &out);
                check_outputs(&out, &expected);
                files.push(out);
            }
            diff_checks(&files[0], &files[1]);
        }
    }
}
