//! What a calibration measures ([`CalibrationConfig`]). The measuring itself
//! (`pinwise calibrate`) is in the pinwise-bench crate; the settings stay here because the
//! automatic calibration ([`crate::autocal`]) chooses its own ([`crate::autocal::quick_config`])
//! and pinwise-alloc does not depend on the measuring tools.

/// What to measure.
#[derive(Debug, Clone)]
pub struct CalibrationConfig {
    /// Sizes, bytes (ascending).
    pub sizes: Vec<usize>,
    /// Measurements per figure (the median is kept).
    pub repeats: usize,
    /// At least this many bytes are copied per bandwidth figure (small sizes repeat more).
    pub min_bytes_per_figure: usize,
    /// Before each timed host-to-device copy, the CPU writes the buffer (untimed), as a
    /// program fills its data before uploading it (the default since cache version
    /// [`crate::autocal::CACHE_VERSION`] 2); otherwise the buffer holds what the previous
    /// download left (`pinwise calibrate --copies-unwritten`), which on the H100 and H200
    /// made a pinned 4 KiB copy look faster than a pageable one where programs found it
    /// slower (`bench/results/calibration-written-first.md`).
    pub write_before_upload: bool,
}

impl Default for CalibrationConfig {
    /// 4 KiB to 1 GiB in steps of 4 (the built-in table's sizes), 3 repeats, 64 MiB per
    /// bandwidth figure at least.
    fn default() -> Self {
        CalibrationConfig {
            sizes: (0..10).map(|i| 4096usize << (2 * i)).collect(),
            repeats: 3,
            min_bytes_per_figure: 64 << 20,
            write_before_upload: true,
        }
    }
}
