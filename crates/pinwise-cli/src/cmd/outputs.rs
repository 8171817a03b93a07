//! Output files of `pinwise run` and `pinwise trace`: checked before the program starts,
//! and pinwise's own failures kept apart from the program's exit status.
//!
//! The program's exit status (or signal) is always passed through. A failure of pinwise's
//! own (an output not written) is said on stderr; with `--strict` it also makes pinwise
//! exit with [`STRICT_EXIT`] instead.
use std::path::Path;

use anyhow::{Context, Result};

/// The exit status of a `--strict` run whose outputs were not all written.
pub const STRICT_EXIT: u8 = 125;

/// Exit status of an error (pinwise could not do what was asked).
pub const EXIT_ERROR: u8 = 1;
/// Exit status of a usage error (bad arguments; clap uses it too).
pub const EXIT_USAGE: u8 = 2;
/// Exit status of a check whose threshold was not met (`diff --fail-under`).
pub const EXIT_THRESHOLD: u8 = 3;

/// A mistake in the arguments found after parsing (pinwise exits with [`EXIT_USAGE`]).
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A [`UsageError`] as an `anyhow::Error`.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(message.into()))
}

/// The exit status for `error`: [`EXIT_USAGE`] for a [`UsageError`], else [`EXIT_ERROR`].
pub fn exit_status(error: &anyhow::Error) -> u8 {
    if error.chain().any(|c| c.is::<UsageError>()) {
        EXIT_USAGE
    } else {
        EXIT_ERROR
    }
}

/// Whether `error` comes from writing to a closed pipe (`pinwise report x | head`): pinwise
/// then exits quietly.
pub fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Fails unless a file can be created at `path` (its directory exists and is writable, and
/// it is not another user's symlink), and, without `force`, unless nothing is there yet;
/// `flag` names the option in the error. Nothing is left behind.
pub fn check_before_run(flag: &str, path: &Path, force: bool) -> Result<()> {
    // Another user's symlink is refused as such, before "exists already".
    pinwise_core::safe_file::check_writable(path).with_context(|| {
        format!(
            "{flag} {}: the file cannot be written (checked before starting the program)",
            path.display()
        )
    })?;
    check_overwrite(flag, path, force)
}

/// The history format a file name asks for: JSON for `.json`, else binary (as the preload
/// library decides for `pinwise run -o`).
pub fn history_format_of(path: &Path) -> pinwise_core::DumpFormat {
    match path.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("json") => pinwise_core::DumpFormat::Json,
        _ => pinwise_core::DumpFormat::Binary,
    }
}

/// How a text rendering for `output` looks: on a terminal (stdout, a TTY), its width and
/// colour unless `NO_COLOR` is set (or `TERM=dumb`); elsewhere `COLUMNS` columns when set,
/// else 100, and no colour. Never narrower than 60 columns. `wide`: full names, every column.
pub fn text_layout(output: &Path, wide: bool) -> pinwise_report::layout::Layout {
    use std::io::IsTerminal as _;
    let tty = is_std(output) && std::io::stdout().is_terminal();
    let terminal = if tty {
        terminal_size::terminal_size().map(|(terminal_size::Width(w), _)| usize::from(w))
    } else {
        None
    };
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let dumb = std::env::var_os("TERM").is_some_and(|t| t == "dumb");
    layout_for(
        terminal,
        std::env::var("COLUMNS").ok().as_deref(),
        tty && !no_color && !dumb,
        wide,
    )
}

/// The layout for a terminal of `terminal` columns (`None`: not a terminal, or its size
/// unknown), the `COLUMNS` variable, colour or not, full names or not.
fn layout_for(
    terminal: Option<usize>,
    columns: Option<&str>,
    color: bool,
    wide: bool,
) -> pinwise_report::layout::Layout {
    use pinwise_report::layout::{Layout, BASE_WIDTH, MIN_WIDTH};
    let from_env = columns
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c > 0);
    Layout {
        width: terminal.or(from_env).unwrap_or(BASE_WIDTH).max(MIN_WIDTH),
        wide,
        color,
    }
}

/// Whether `path` is `-`: stdout (for an output) or stdin (for an input).
pub fn is_std(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// Fails when an output file `path` exists already and `force` is not given; `flag` names
/// the option in the error. `-` (stdout) is never refused.
pub fn check_overwrite(flag: &str, path: &Path, force: bool) -> Result<()> {
    if !force && !is_std(path) && std::fs::symlink_metadata(path).is_ok() {
        anyhow::bail!(
            "{flag} {}: the file exists already (--force replaces it)",
            path.display()
        );
    }
    Ok(())
}

/// Writes an output through `write`: to stdout for `-`, else as a new `0600` file (see
/// `pinwise_core::safe_file`), refused when it exists and `force` is not given.
pub fn write_output(
    flag: &str,
    path: &Path,
    force: bool,
    write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> Result<()> {
    if is_std(path) {
        let mut out = std::io::stdout().lock();
        write(&mut out).context("writing to stdout")?;
        return std::io::Write::flush(&mut out).context("writing to stdout");
    }
    // Another user's symlink is refused as such, before "exists already".
    pinwise_core::safe_file::check_writable(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    check_overwrite(flag, path, force)?;
    pinwise_core::safe_file::write_with(path, write)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Pinwise's own failures during a run, said on stderr as they happen.
#[derive(Debug, Default)]
pub struct Failures(Vec<String>);

impl Failures {
    /// Says `what` on stderr and remembers it.
    pub fn add(&mut self, what: String) {
        eprintln!("pinwise: error: {what}");
        self.0.push(what);
    }

    /// Remembers a failure already said on stderr (by the summary).
    pub fn already_said(&mut self, what: String) {
        self.0.push(what);
    }

    /// Whether anything failed.
    pub fn any(&self) -> bool {
        !self.0.is_empty()
    }
}

/// `error` and its causes, each said once: a cause whose text the message before it already
/// contains (errors that print their source themselves) is left out.
pub fn render_error(error: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// Accepts the signals the preload library may take over for `--dump-signal` (`USR1`,
/// `USR2`, `RTMIN+n`, with or without `SIG`, or their numbers), as the library does; refuses
/// the others (`KILL`, `STOP`, `INT`, ...) with the reason.
pub fn check_dump_signal(text: &str) -> Result<()> {
    let v = text.trim();
    let name = v
        .strip_prefix("SIG")
        .or_else(|| v.strip_prefix("sig"))
        .unwrap_or(v)
        .to_ascii_uppercase();
    let n = match name.as_str() {
        "USR1" => Some(libc::SIGUSR1),
        "USR2" => Some(libc::SIGUSR2),
        s if s.starts_with("RTMIN+") => s["RTMIN+".len()..]
            .parse::<i32>()
            .ok()
            .map(|k| libc::SIGRTMIN() + k),
        s => s.parse().ok(),
    };
    match n {
        Some(n)
            if n == libc::SIGUSR1
                || n == libc::SIGUSR2
                || (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&n) =>
        {
            Ok(())
        }
        _ => anyhow::bail!(
            "--dump-signal {text}: must be USR1, USR2 or RTMIN+n (n from 0 to {}): other \
             signals mean something else to the program (KILL and STOP cannot be caught at all)",
            libc::SIGRTMAX() - libc::SIGRTMIN()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_width_comes_from_the_terminal_then_columns_then_100() {
        let width = |terminal, columns| layout_for(terminal, columns, false, false).width;
        assert_eq!(
            width(Some(132), Some("80")),
            132,
            "a terminal's own width first"
        );
        assert_eq!(width(None, Some("80")), 80, "COLUMNS when not a terminal");
        assert_eq!(width(None, Some(" 120 ")), 120);
        assert_eq!(width(None, None), 100);
        assert_eq!(
            width(None, Some("wide")),
            100,
            "a COLUMNS that is no number"
        );
        assert_eq!(width(None, Some("0")), 100);
        assert_eq!(width(None, Some("20")), 60, "never narrower than 60");
        assert_eq!(width(Some(40), None), 60);
        let l = layout_for(None, None, true, true);
        assert!(l.color && l.wide);
    }

    #[test]
    fn causes_already_in_the_message_are_said_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        let inner = pinwise_core::load_history("/nonexistent/x.json").unwrap_err();
        let e = anyhow::Error::new(inner).context("reading the history");
        let text = render_error(&e);
        assert_eq!(text.matches("No such file").count(), 1, "{text}");
        assert!(text.starts_with("reading the history: "), "{text}");
        let e = anyhow::Error::new(io).context("outer");
        assert_eq!(render_error(&e), "outer: No such file");
    }

    #[test]
    fn only_signals_the_library_accepts_are_dump_signals() {
        for ok in ["USR1", "SIGUSR2", "usr1", "RTMIN+3", "10", "12"] {
            assert!(check_dump_signal(ok).is_ok(), "{ok}");
        }
        for bad in [
            "KILL", "SIGSTOP", "9", "19", "INT", "TERM", "SEGV", "RTMIN+99", "x", "",
        ] {
            let e = check_dump_signal(bad).unwrap_err().to_string();
            assert!(e.contains("USR1, USR2 or RTMIN+n"), "{bad}: {e}");
        }
    }

    #[test]
    fn unwritable_outputs_are_found_before_the_run() {
        let dir = tempfile::tempdir().unwrap();
        check_before_run("-o", &dir.path().join("h.json"), false).unwrap();
        let e = check_before_run("-o", &dir.path().join("no/such/dir/h.json"), false).unwrap_err();
        let text = render_error(&e);
        assert!(
            text.contains("-o ") && text.contains("before starting"),
            "{text}"
        );
    }

    #[test]
    fn an_existing_output_is_replaced_only_with_force() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("keep.json");
        std::fs::write(&p, "precious").unwrap();
        let e = check_before_run("-o", &p, false).unwrap_err().to_string();
        assert!(e.contains("exists already (--force replaces it)"), "{e}");
        check_before_run("-o", &p, true).unwrap();
        let e = write_output("-o", &p, false, |w| w.write_all(b"new")).unwrap_err();
        assert!(render_error(&e).contains("exists already"), "{e}");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "precious");
        write_output("-o", &p, true, |w| w.write_all(b"new")).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
        check_overwrite("-o", Path::new("-"), false).unwrap();
    }
}
