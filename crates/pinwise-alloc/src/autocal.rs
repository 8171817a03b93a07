//! Every GPU its own cost model: on first use on a GPU without a calibration, a quick
//! calibration ([`quick_config`], a few seconds) is measured and cached under the user's
//! cache directory, one file per GPU ([`cache_file`], keyed by the GPU's UUID); later uses
//! read the cache. The built-in H200 table is used only when that is impossible (the GPU
//! cannot be identified, or measuring fails), and [`Resolved::announcement`] then says so.
//! A cache file that cannot be read is reported by name and replaced by a new calibration.
//!
//! [`resolve`] does the deciding with the measuring passed in (so it is tested without a
//! GPU); [`spawn`] runs it on a background thread. Where the cache is and how it is read
//! without measuring belong to the pricing ([`pinwise_core::decide::pricing`]), which
//! chooses the table every decision is priced with.

use std::path::{Path, PathBuf};

use pinwise_core::CostModel;

use crate::calibrate::CalibrationConfig;

pub use pinwise_core::decide::pricing::{
    cache_dir, cache_file, cached, old_cache_file, CACHE_DIR_ENV, CACHE_VERSION,
};

/// The automatic calibration's settings: five sizes from 4 KiB to 256 MiB, two
/// measurements each, 16 MiB per bandwidth figure (a few seconds on an H100 or H200; the
/// model extrapolates above 256 MiB with the last cost per byte).
pub fn quick_config() -> CalibrationConfig {
    CalibrationConfig {
        sizes: vec![4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20],
        repeats: 2,
        min_bytes_per_figure: 16 << 20,
        write_before_upload: true,
    }
}

/// Where a resolved calibration came from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// Read from this GPU's cache file.
    Cached(PathBuf),
    /// Measured now, in this many seconds; cached in the file if it could be written.
    Calibrated {
        /// The cache file written, if any.
        path: Option<PathBuf>,
        /// Seconds the measuring took.
        secs: f64,
    },
    /// The built-in H200 table, and why.
    BuiltIn(String),
}

/// The cost model to use, where it came from, and what to tell the user.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The model.
    pub model: CostModel,
    /// Where it came from.
    pub source: Source,
    /// Problems met on the way (a cache file that could not be read or written).
    pub notes: Vec<String>,
}

impl Resolved {
    /// Which calibration this is, in one line for reports: this GPU's cached calibration
    /// (and its file), this GPU's calibration measured now (how long, where cached, and
    /// the measurement's own source), or the built-in table and why.
    pub fn describe(&self) -> String {
        match &self.source {
            Source::Cached(p) => format!(
                "automatic: this GPU's cached calibration {}",
                p.display()
            ),
            Source::Calibrated { path, secs } => format!(
                "automatic: this GPU's calibration, measured now in {secs:.1} s (first use), {} ({})",
                match path {
                    Some(p) => format!("cached in {}", p.display()),
                    None => "not cached".to_string(),
                },
                self.model.source()
            ),
            Source::BuiltIn(why) => format!("built-in H200 table, not this GPU's: {why}"),
        }
    }

    /// The model, its source named by [`Resolved::describe`].
    pub fn described_model(&self) -> CostModel {
        self.model.clone().with_source(self.describe())
    }

    /// What to print once on stderr: nothing for a cached calibration without problems;
    /// otherwise the calibration made, or why the built-in table is used, and the notes.
    pub fn announcement(&self) -> Option<String> {
        let mut lines = self.notes.clone();
        match &self.source {
            Source::Cached(_) => {}
            Source::Calibrated { path, secs } => lines.push(match path {
                Some(p) => format!(
                    "pinwise: calibrated this GPU in {secs:.1} s (first use); cached in {}",
                    p.display()
                ),
                None => {
                    format!("pinwise: calibrated this GPU in {secs:.1} s (first use); not cached")
                }
            }),
            Source::BuiltIn(why) => lines.push(format!(
                "pinwise: using the built-in H200 calibration, not this GPU's: {why}"
            )),
        }
        (!lines.is_empty()).then(|| lines.join("\n"))
    }
}

/// The calibration of GPU `key`: the cache file in `dir` if it is there and readable,
/// else `measure()` (cached in `dir`), else the built-in table. See the module
/// documentation.
pub fn resolve(
    key: Option<&str>,
    dir: Option<&Path>,
    measure: impl FnOnce() -> Result<CostModel, String>,
) -> Resolved {
    let mut notes = Vec::new();
    let Some(key) = key else {
        return built_in("the GPU could not be identified".into(), notes);
    };
    let path = dir.map(|d| cache_file(d, key));
    if let Some(p) = &path {
        if p.exists() {
            match CostModel::from_csv_file(p) {
                Ok(model) => {
                    return Resolved {
                        model,
                        source: Source::Cached(p.clone()),
                        notes,
                    }
                }
                Err(e) => notes.push(format!(
                    "pinwise: the cached calibration {} cannot be used ({e}); calibrating again",
                    p.display()
                )),
            }
        }
    }
    if let Some(old) = dir.map(|d| old_cache_file(d, key)).filter(|p| p.exists()) {
        notes.push(format!(
            "pinwise: the cached calibration {} was measured by an older pinwise (uploads of \
             buffers the CPU had not just written); calibrating again",
            old.display()
        ));
    }
    let t = std::time::Instant::now();
    let model = match measure() {
        Ok(m) => m,
        Err(e) => return built_in(format!("the automatic calibration failed: {e}"), notes),
    };
    let secs = t.elapsed().as_secs_f64();
    let written = path.and_then(|p| match write_cache(&p, &model) {
        Ok(()) => Some(p),
        Err(e) => {
            notes.push(format!(
                "pinwise: could not cache the calibration in {}: {e}",
                p.display()
            ));
            None
        }
    });
    Resolved {
        model,
        source: Source::Calibrated {
            path: written,
            secs,
        },
        notes,
    }
}

fn built_in(why: String, notes: Vec<String>) -> Resolved {
    Resolved {
        model: CostModel::builtin(),
        source: Source::BuiltIn(why),
        notes,
    }
}

/// Writes `model` to `path` with [`pinwise_core::safe_file`] (a private directory, a 0600
/// file through a temporary renamed into place: a reader never sees half a file, and
/// another user's symlink is refused).
fn write_cache(path: &Path, model: &CostModel) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        pinwise_core::safe_file::create_private_dir_all(dir)?;
    }
    pinwise_core::safe_file::write_bytes(path, model.to_csv().as_bytes())
}

/// [`resolve`] on a background thread.
pub fn spawn(
    key: Option<String>,
    dir: Option<PathBuf>,
    measure: impl FnOnce() -> Result<CostModel, String> + Send + 'static,
) -> std::thread::JoinHandle<Resolved> {
    std::thread::Builder::new()
        .name("pinwise-calibrate".into())
        .spawn(move || resolve(key.as_deref(), dir.as_deref(), measure))
        .expect("spawning a thread")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn measured() -> CostModel {
        CostModel::from_csv_str(&CostModel::builtin().to_csv(), "measured (test)").unwrap()
    }

    #[test]
    fn first_use_measures_and_caches_then_reads_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let calls = Cell::new(0);
        let r = resolve(Some("GPU-1234"), Some(dir.path()), || {
            calls.set(calls.get() + 1);
            Ok(measured())
        });
        let file = cache_file(dir.path(), "GPU-1234");
        assert_eq!(calls.get(), 1);
        assert!(matches!(&r.source, Source::Calibrated { path: Some(p), .. } if *p == file));
        let a = r.announcement().unwrap();
        assert!(
            a.contains("calibrated this GPU") && a.contains("calibration-v2-GPU-1234.csv"),
            "{a}"
        );
        assert!(file.exists());
        let d = r.described_model();
        assert!(
            d.source()
                .starts_with("automatic: this GPU's calibration, measured now in")
                && d.source().contains("calibration-v2-GPU-1234.csv")
                && d.source().contains("measured (test)"),
            "{}",
            d.source()
        );
        // Second use: the cache, no measuring, nothing to announce.
        let r = resolve(Some("GPU-1234"), Some(dir.path()), || {
            calls.set(calls.get() + 1);
            Ok(measured())
        });
        assert_eq!(calls.get(), 1);
        assert_eq!(r.source, Source::Cached(file.clone()));
        assert_eq!(r.model.points(), measured().points());
        assert_eq!(r.announcement(), None);
        assert_eq!(
            r.describe(),
            format!(
                "automatic: this GPU's cached calibration {}",
                file.display()
            )
        );
        // Another GPU has its own file.
        let r = resolve(Some("GPU-5678"), Some(dir.path()), || Ok(measured()));
        assert!(matches!(r.source, Source::Calibrated { .. }));
    }

    #[test]
    fn cached_reads_without_measuring() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(cached("GPU-9", dir.path()).unwrap(), None);
        resolve(Some("GPU-9"), Some(dir.path()), || Ok(measured()));
        let m = cached("GPU-9", dir.path()).unwrap().unwrap();
        assert_eq!(m.points(), measured().points());
        std::fs::write(cache_file(dir.path(), "GPU-9"), "junk").unwrap();
        let e = cached("GPU-9", dir.path()).unwrap_err();
        assert!(
            e.contains("calibration-v2-GPU-9.csv") && e.contains("cannot be used"),
            "{e}"
        );
    }

    /// A cache of the older method is not read: this GPU is measured again (written first,
    /// [`quick_config`]), the old file named, the new one written beside it.
    #[test]
    fn an_old_cache_is_measured_again() {
        assert!(quick_config().write_before_upload);
        let dir = tempfile::tempdir().unwrap();
        let old = old_cache_file(dir.path(), "GPU-1234");
        std::fs::write(&old, CostModel::builtin().to_csv()).unwrap();
        let calls = Cell::new(0);
        let r = resolve(Some("GPU-1234"), Some(dir.path()), || {
            calls.set(calls.get() + 1);
            Ok(measured())
        });
        assert_eq!(calls.get(), 1);
        let file = cache_file(dir.path(), "GPU-1234");
        assert!(matches!(&r.source, Source::Calibrated { path: Some(p), .. } if *p == file));
        let a = r.announcement().unwrap();
        assert!(
            a.contains("calibration-GPU-1234.csv") && a.contains("older pinwise"),
            "{a}"
        );
        assert!(file.exists() && old.exists());
    }

    #[test]
    fn a_corrupt_cache_file_is_named_and_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let file = cache_file(dir.path(), "GPU-1234");
        std::fs::write(&file, "size_bytes,nonsense\n1,2\n").unwrap();
        let r = resolve(Some("GPU-1234"), Some(dir.path()), || Ok(measured()));
        assert!(matches!(r.source, Source::Calibrated { .. }));
        let a = r.announcement().unwrap();
        assert!(
            a.contains("cannot be used")
                && a.contains("calibration-v2-GPU-1234.csv")
                && a.contains("missing column"),
            "{a}"
        );
        // Replaced by a readable calibration.
        assert!(CostModel::from_csv_file(&file).is_ok());
    }

    #[test]
    fn the_built_in_table_only_when_impossible_and_then_said() {
        let dir = tempfile::tempdir().unwrap();
        let r = resolve(None, Some(dir.path()), || panic!("no GPU to measure"));
        assert!(matches!(&r.source, Source::BuiltIn(w) if w.contains("could not be identified")));
        assert_eq!(r.model.source(), CostModel::builtin().source());
        let r = resolve(Some("GPU-1"), Some(dir.path()), || {
            Err("cuMemHostAlloc failed".into())
        });
        let a = r.announcement().unwrap();
        assert!(
            a.contains("built-in H200") && a.contains("cuMemHostAlloc failed"),
            "{a}"
        );
        assert!(!cache_file(dir.path(), "GPU-1").exists(), "nothing cached");
        // No cache directory: measured, not cached, and said.
        let r = resolve(Some("GPU-1"), None, || Ok(measured()));
        assert!(r.announcement().unwrap().contains("not cached"));
    }

    #[test]
    fn an_unwritable_cache_is_a_note_not_a_failure() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, "").unwrap();
        // The cache "directory" is a regular file: it cannot be created.
        let r = resolve(Some("GPU-1"), Some(&blocker.join("sub")), || Ok(measured()));
        assert!(matches!(r.source, Source::Calibrated { path: None, .. }));
        assert!(r.announcement().unwrap().contains("could not cache"));
    }

    #[test]
    fn the_cache_dir_follows_the_environment() {
        // Read-only check of the default: some directory named pinwise, or the variable.
        match std::env::var_os(CACHE_DIR_ENV) {
            Some(d) if !d.is_empty() => assert_eq!(cache_dir(), Some(PathBuf::from(d))),
            _ => {
                if let Some(d) = cache_dir() {
                    assert!(d.ends_with("pinwise"), "{}", d.display());
                }
            }
        }
    }

    #[test]
    fn spawn_resolves_in_the_background() {
        let dir = tempfile::tempdir().unwrap();
        let h = spawn(
            Some("GPU-bg".into()),
            Some(dir.path().to_path_buf()),
            || Ok(measured()),
        );
        let r = h.join().unwrap();
        assert!(matches!(r.source, Source::Calibrated { path: Some(_), .. }));
    }
}
