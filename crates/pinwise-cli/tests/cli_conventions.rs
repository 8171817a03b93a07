//! The command line's conventions (README, "Conventions"), checked on the built `pinwise`
//! binary: exit statuses, messages, outputs, completions and manual pages.
use std::path::Path;
use std::process::{Command, Output};

fn pinwise(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pinwise"))
        .args(args)
        .env_remove("PINWISE_PRELOAD_LIB")
        .env("NO_COLOR", "1")
        .output()
        .expect("run pinwise")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn completions_are_generated_for_each_shell() {
    for (shell, marker) in [
        ("bash", "complete -F _pinwise"),
        ("zsh", "#compdef pinwise"),
        ("fish", "complete -c pinwise"),
    ] {
        let o = pinwise(&["completions", shell]);
        assert_eq!(o.status.code(), Some(0), "{shell}: {}", stderr(&o));
        let text = stdout(&o);
        assert!(text.contains(marker), "{shell}: no `{marker}`");
        // Subcommands and their options are in the script.
        assert!(text.contains("fail-under"), "{shell}: no --fail-under");
    }
    let o = pinwise(&["completions", "tcsh"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

#[test]
fn the_manual_page_is_roff_and_one_page_per_subcommand_is_written() {
    let o = pinwise(&["man"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let page = stdout(&o);
    assert!(page.contains(".TH pinwise 1"), "{page}");
    assert!(page.contains("pinwise\\-trace"), "subcommands listed");
    let dir = tempfile::tempdir().unwrap();
    let o = pinwise(&["man", "--out-dir", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for name in [
        "pinwise.1",
        "pinwise-trace.1",
        "pinwise-run.1",
        "pinwise-bench-alloc.1",
    ] {
        let p = dir.path().join(name);
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(text.starts_with(".ie") || text.contains(".TH"), "{name}");
    }
    let run = std::fs::read_to_string(dir.path().join("pinwise-run.1")).unwrap();
    assert!(
        run.contains("\\-\\-budget"),
        "pinwise-run.1 documents --budget"
    );
    assert!(!Path::new(&dir.path().join("pinwise-help.1")).exists());
}

/// A small synthetic history (not a measurement) in `dir`.
fn history(dir: &Path, seed: u64, format: pinwise_core::DumpFormat) -> std::path::PathBuf {
    use pinwise_core::synth::{SynthConfig, SynthEvents};
    use pinwise_core::{HistoryConfig, MemHistory};
    let mut h = MemHistory::new(HistoryConfig::default());
    let modules = h.modules();
    let cfg = SynthConfig {
        seed,
        allocations: 200,
        events: 2000,
        live_window: 40,
        ..SynthConfig::default()
    };
    for e in SynthEvents::new(cfg, &modules) {
        h.ingest(&e);
    }
    let ext = match format {
        pinwise_core::DumpFormat::Json => "json",
        _ => "bin",
    };
    let path = dir.join(format!("synth-{seed}.{ext}"));
    pinwise_core::save_history(&h, &path, format).unwrap();
    path
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn exit_statuses_are_0_ok_1_error_2_usage_3_threshold() {
    let dir = tempfile::tempdir().unwrap();
    let a = history(dir.path(), 1, pinwise_core::DumpFormat::Binary);
    let b = history(dir.path(), 2, pinwise_core::DumpFormat::Binary);
    let ok = pinwise(&["diff", s(&a), s(&a), "--fail-under", "1", "--quiet"]);
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    let below = pinwise(&["diff", s(&a), s(&b), "--fail-under", "0.99", "--quiet"]);
    assert_eq!(below.status.code(), Some(3), "{}", stderr(&below));
    assert!(
        stderr(&below).contains("under --fail-under"),
        "{}",
        stderr(&below)
    );
    let missing = pinwise(&["report", "/nonexistent/x.bin"]);
    assert_eq!(missing.status.code(), Some(1));
    for usage in [
        vec!["report"],
        vec!["diff", s(&a), s(&a), "--threshold", "-1"],
        vec!["trace", "--min-mmap", "lots"],
        vec!["trace"],
        vec!["run", "--budget", "5 parsecs", "--", "true"],
        vec!["nonsense"],
    ] {
        let o = pinwise(&usage);
        assert_eq!(o.status.code(), Some(2), "{usage:?}: {}", stderr(&o));
    }
}

#[test]
fn each_cause_of_an_error_is_said_once() {
    let o = pinwise(&["report", "/nonexistent/x.bin"]);
    let err = stderr(&o);
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
    assert!(
        err.starts_with("pinwise: error: cannot read /nonexistent/x.bin"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn one_size_grammar_everywhere() {
    // `--min-mmap 1.5M` was refused while `--budget 1.5G` was accepted: both parse now
    // (checked by the usage errors they do not give).
    for args in [
        vec![
            "trace",
            "--min-mmap",
            "1.5M",
            "--ringbuf-size",
            "64KiB",
            "--pid",
            "0",
        ],
        vec![
            "trace",
            "--malloc-min",
            "2G",
            "--dump-every",
            "1h 30m",
            "--pid",
            "0",
        ],
    ] {
        let o = pinwise(&args);
        let err = stderr(&o);
        assert!(!err.contains("invalid value"), "{args:?}: {err}");
    }
    let o = pinwise(&["trace", "--min-mmap", "3 furlongs", "--pid", "0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unknown size unit"), "{}", stderr(&o));
    let o = pinwise(&["trace", "--duration", "soon", "--pid", "0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("is not a duration"), "{}", stderr(&o));
}

#[test]
fn outputs_take_o_format_from_the_name_and_are_not_overwritten_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let h = history(dir.path(), 3, pinwise_core::DumpFormat::Binary);
    // Format from the extension.
    let json = dir.path().join("r.json");
    let o = pinwise(&["report", s(&h), "-o", s(&json), "--quiet"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(v.get("hotspots").is_some(), "{v}");
    assert!(stdout(&o).is_empty(), "nothing on stdout with -o");
    let html = dir.path().join("r.html");
    let o = pinwise(&["report", s(&h), "-o", s(&html), "--quiet"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(std::fs::read_to_string(&html)
        .unwrap()
        .starts_with("<!DOCTYPE html>"));
    // --format overrides the name.
    let txt = dir.path().join("r.out");
    let o = pinwise(&[
        "report",
        s(&h),
        "-o",
        s(&txt),
        "--format",
        "json",
        "--quiet",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    serde_json::from_slice::<serde_json::Value>(&std::fs::read(&txt).unwrap()).unwrap();
    // An existing file is kept, and the error says how to replace it.
    std::fs::write(&json, "keep me").unwrap();
    let o = pinwise(&["report", s(&h), "-o", s(&json), "--quiet"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("exists already (--force replaces it)"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_to_string(&json).unwrap(), "keep me");
    let o = pinwise(&["report", s(&h), "-o", s(&json), "--force", "--quiet"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_ne!(std::fs::read_to_string(&json).unwrap(), "keep me");
    // export: -o, and the older --perfetto still works; diff -o.
    let t = dir.path().join("t.json");
    let o = pinwise(&["export", s(&h), "-o", s(&t), "--quiet"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = pinwise(&["export", s(&h), "--perfetto", s(&t), "--quiet"]);
    assert_eq!(o.status.code(), Some(1), "exists: {}", stderr(&o));
    let o = pinwise(&["export", s(&h), "--perfetto", s(&t), "--force", "--quiet"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let d = dir.path().join("d.json");
    let o = pinwise(&["diff", s(&h), s(&h), "-o", s(&d), "--quiet"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    serde_json::from_slice::<serde_json::Value>(&std::fs::read(&d).unwrap()).unwrap();
    // trace -o keep.json over an existing file is refused before anything starts.
    let keep = dir.path().join("keep.json");
    std::fs::write(&keep, "precious").unwrap();
    let o = pinwise(&["trace", "-o", s(&keep), "--", "true"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("exists already"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&keep).unwrap(), "precious");
    let o = pinwise(&["run", "-o", s(&keep), "--", "true"]);
    assert!(stderr(&o).contains("exists already"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&keep).unwrap(), "precious");
}

#[test]
fn dash_is_stdin_and_stdout() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let h = history(dir.path(), 4, pinwise_core::DumpFormat::Json);
    let mut child = Command::new(env!("CARGO_BIN_EXE_pinwise"))
        .args(["report", "-", "--json", "--quiet"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&std::fs::read(&h).unwrap())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v.get("hotspots").is_some());
    let o = pinwise(&["export", s(&h), "-o", "-", "--quiet"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["traceEvents"].as_array().is_some_and(|e| !e.is_empty()));
}

#[test]
fn a_closed_pipe_ends_pinwise_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let h = history(dir.path(), 5, pinwise_core::DumpFormat::Binary);
    // The trace is far larger than a pipe's buffer (64 KiB), so the writer meets the
    // closed pipe.
    let whole = pinwise(&["export", s(&h), "-o", "-", "--quiet"]);
    assert!(
        whole.stdout.len() > 256 << 10,
        "{} bytes",
        whole.stdout.len()
    );
    // `pinwise export -o - | head -c 10`: the reader goes away after 10 bytes.
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "'{}' export '{}' -o - --quiet | head -c 10 >/dev/null",
            env!("CARGO_BIN_EXE_pinwise"),
            s(&h)
        ))
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(err.is_empty(), "{err}");
    assert!(!err.contains("Broken pipe"), "{err}");
}

#[test]
fn trace_takes_its_command_without_a_double_dash_as_run_does() {
    // Not a clap error about an unexpected argument: trace tries to start the program.
    let o = pinwise(&["trace", "./no-such-program-here", "--flag"]);
    let err = stderr(&o);
    assert!(!err.contains("unexpected argument"), "{err}");
    assert!(err.contains("no-such-program-here"), "{err}");
}

#[test]
fn text_reports_fit_columns_when_not_on_a_terminal_and_wide_shows_everything() {
    let dir = tempfile::tempdir().unwrap();
    let h = history(dir.path(), 5, pinwise_core::DumpFormat::Binary);
    let report = |columns: Option<&str>, extra: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_pinwise"));
        c.args(["report", s(&h), "--quiet"])
            .args(extra)
            .env("NO_COLOR", "1")
            .env_remove("COLUMNS");
        if let Some(columns) = columns {
            c.env("COLUMNS", columns);
        }
        let o = c.output().expect("run pinwise");
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        stdout(&o)
    };
    let widest = |text: &str| text.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    // Not a terminal: COLUMNS when set, else 100; never ANSI colour.
    for (columns, width) in [
        (Some("60"), 60),
        (Some("80"), 80),
        (Some("120"), 120),
        (None, 100),
    ] {
        let text = report(columns, &[]);
        assert!(widest(&text) <= width, "COLUMNS={columns:?}:\n{text}");
        assert!(
            widest(&text) > width - 20,
            "COLUMNS={columns:?} unused:\n{text}"
        );
        assert!(!text.contains('\x1b'));
        assert!(text.contains("HOTSPOTS"));
    }
    assert!(report(Some("60"), &[]).contains("not shown at this width"));
    // --wide: every column, whatever COLUMNS says.
    let wide = report(Some("60"), &["--wide"]);
    assert!(!wide.contains("not shown at this width"), "{wide}");
    assert!(widest(&wide) > 60, "{wide}");
}
