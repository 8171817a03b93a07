//! A progress bar on stderr for work on large files: hidden until the work turns out to
//! take long (a large file, or a stage running past half a second), and never drawn when
//! stderr is not a terminal (indicatif checks). Each stage's duration is logged at debug
//! level (`pinwise -vv`).

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Files at least this large show the bar from the start.
pub const LARGE_FILE_BYTES: u64 = 32 << 20;
/// Work that runs this long shows the bar.
pub const SLOW_AFTER: Duration = Duration::from_millis(500);

/// Progress of reading and analysing one input. Cheap when hidden.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
    enabled: bool,
    shown: bool,
    started: Instant,
    /// The stage under way and when it began.
    current: Option<(String, Instant)>,
}

impl Progress {
    /// A progress display that may appear on stderr (`enabled`), or never does.
    pub fn new(enabled: bool) -> Self {
        Progress {
            bar: ProgressBar::hidden(),
            enabled,
            shown: false,
            started: Instant::now(),
            current: None,
        }
    }

    /// One that never shows (for tests and library callers).
    pub fn hidden() -> Self {
        Self::new(false)
    }

    /// Whether it is drawn (or would be, on a terminal).
    pub fn is_shown(&self) -> bool {
        self.shown
    }

    /// Shows the bar now (if enabled).
    pub fn show(&mut self) {
        if self.enabled && !self.shown {
            self.shown = true;
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.bar.enable_steady_tick(Duration::from_millis(120));
        }
    }

    fn show_if_slow(&mut self) {
        if !self.shown && self.started.elapsed() >= SLOW_AFTER {
            self.show();
        }
    }

    /// Logs how long the stage under way took, and starts `next` (if any).
    fn next_stage(&mut self, next: Option<&str>) {
        if let Some((name, began)) = self.current.take() {
            tracing::debug!("{name}: {:.3} s", began.elapsed().as_secs_f64());
        }
        self.current = next.map(|n| (n.to_owned(), Instant::now()));
    }

    /// Starts a stage measured in bytes (reading a file of `total` bytes).
    pub fn bytes_stage(&mut self, message: &str, total: u64) {
        self.next_stage(Some(message));
        self.bar.set_style(
            ProgressStyle::with_template(
                "{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec})",
            )
            .expect("a valid progress template")
            .progress_chars("=> "),
        );
        self.bar.set_length(total);
        self.bar.set_position(0);
        self.bar.set_message(message.to_owned());
        if total >= LARGE_FILE_BYTES {
            self.show();
        }
        self.show_if_slow();
    }

    /// Starts a stage with no measure of its own (decoding, analysing).
    pub fn stage(&mut self, message: &str) {
        self.next_stage(Some(message));
        self.show_if_slow();
        self.bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                .expect("a valid progress template"),
        );
        self.bar.set_message(message.to_owned());
    }

    /// Advances a bytes stage.
    pub fn advance(&mut self, bytes: u64) {
        self.bar.inc(bytes);
        self.show_if_slow();
    }

    /// Removes the bar (and logs the last stage's duration).
    pub fn finish(&mut self) {
        self.next_stage(None);
        self.bar.finish_and_clear();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}
