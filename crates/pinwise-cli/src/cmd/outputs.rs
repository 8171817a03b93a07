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

/// Fails unless a file can be created at `path` (its directory exists and is writable, and
/// it is not another user's symlink); `flag` names the option in the error. Nothing is left
/// behind.
pub fn check_before_run(flag: &str, path: &Path) -> Result<()> {
    pinwise_core::safe_file::check_writable(path).with_context(|| {
        format!(
            "{flag} {}: the file cannot be written (checked before starting the program)",
            path.display()
        )
    })
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
        check_before_run("-o", &dir.path().join("h.json")).unwrap();
        let e = check_before_run("-o", &dir.path().join("no/such/dir/h.json")).unwrap_err();
        let text = render_error(&e);
        assert!(
            text.contains("-o ") && text.contains("before starting"),
            "{text}"
        );
    }
}
