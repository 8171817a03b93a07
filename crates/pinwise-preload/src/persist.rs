//! The history written while the program runs, so that a run that ends without warning
//! (`SIGKILL`, the OOM killer, a crash no handler catches) keeps everything up to the last
//! flush.
//!
//! **How.** Every [`Config::flush_every`](crate::config::Config::flush_every) (1 s by
//! default, `PINWISE_FLUSH_EVERY`, `pinwise run --flush-every`), the drain thread appends
//! what changed since the previous append to a binary history
//! ([`pinwise_core::format::BinaryAppender`]: frames, each checksummed, ending with a stats
//! frame): the records made since, and the live records that changed (a live record with no
//! new event is not written again). The format has no frame that adds events to a record,
//! so a record that changed is written whole, its retained events included (at most
//! `max_events_per_allocation`, 1024 by default): an append costs what happened since the
//! previous one, not the size of the history (figures: `bench/results/incremental-history.md`).
//! The append is encoded while the history's lock is held, and written to the file after it
//! is let go, on the drain thread (which blocks every signal), never in a hook; a hook never
//! waits for it either: a hook whose ring is full drains the ring itself, and if the history
//! is busy the events wait in the recorder's collector for the next drain (see `recorder`). A write that fails (a full disk) is counted in the statistics
//! (`incremental` in the per-process statistics), the file is cut back to its last whole
//! append, and the program goes on; the next append includes what the failed one held.
//! Appends are not synced to the disk (a killed process's writes are in the kernel's cache
//! already); the last one, at the end, is, except when the process is ending on a signal or
//! `_exit` (see `flush::durability`). Then a JSON history also gets a last append to its
//! side file before the JSON file is written, so that a wait that runs out while the JSON
//! is written still leaves everything for `pinwise run` to complete the file from.
//!
//! **Which file.** A binary history (`-o h.bin`) is the file appended to: created (mode
//! `0600`, [`pinwise_core::safe_file`]) at the first flush, appended to at each, and at the
//! end (normal exit, `_exit`, a signal pinwise flushes on, the dump signal) the last append
//! is made to it. A JSON history (`-o h.json`) is written whole at the end, as before; while
//! the program runs, the appends go to a binary file beside it, `h.json.partial`, which is
//! removed once the JSON file is written. A run killed before that leaves `h.json.partial`
//! (`pinwise report` and `pinwise export` read it; `pinwise run` turns it into `h.json` when
//! the program was killed and `pinwise run` was not).
//!
//! **What is lost on `SIGKILL`**: the events of the last interval at most (plus the 10 ms
//! the drain thread sleeps between drains, and the time the last append took), and a file
//! cut in the middle of an append keeps every whole append before it
//! (`pinwise_core::format::binary::read_salvaging`, which `pinwise report` uses).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use pinwise_core::format::BinaryAppender;
use pinwise_core::preload_stats::IncrementalStats;
use pinwise_core::safe_file::Durability;

use crate::recorder::Recorder;

/// The history file written while the program runs. See the module documentation.
pub struct HistoryFile {
    inner: Mutex<Inner>,
}

struct Inner {
    every: Option<Duration>,
    next_due: Instant,
    /// The file appended to, once created.
    appender: Option<(PathBuf, BinaryAppender)>,
    /// The outputs were written for good: no more appends.
    closed: bool,
    stats: IncrementalStats,
}

impl HistoryFile {
    /// Appends every `every` (`None`: never while the program runs).
    pub fn new(every: Option<Duration>) -> HistoryFile {
        HistoryFile {
            inner: Mutex::new(Inner {
                every,
                next_due: Instant::now() + every.unwrap_or_default(),
                appender: None,
                closed: false,
                stats: IncrementalStats {
                    interval_ms: every.map_or(0, |e| e.as_millis() as u64),
                    ..IncrementalStats::default()
                },
            }),
        }
    }

    /// Whether an append is due now (and, if so, the next one is scheduled).
    pub fn due(&self) -> bool {
        let mut inner = self.inner.lock();
        let Some(every) = inner.every else {
            return false;
        };
        let now = Instant::now();
        if inner.closed || now < inner.next_due {
            return false;
        }
        // At a fixed rate (the drain thread wakes every 10 ms: the lateness of one append
        // is not added to the next's).
        let next = inner.next_due + every;
        inner.next_due = if next > now { next } else { now + every };
        true
    }

    /// The file the appends go to for a history at `path` (already made per process).
    pub fn target(path: &Path) -> PathBuf {
        match pinwise_core::DumpFormat::from_path(path) {
            pinwise_core::DumpFormat::Binary => path.to_path_buf(),
            pinwise_core::DumpFormat::Json => pinwise_core::format::partial_path(path),
        }
    }

    /// Appends what changed in the recorder's history to the file for `path` (creating it
    /// at the first append). `sync`: and syncs it to the disk. Errors are counted.
    pub fn append(&self, path: &Path, recorder: &Recorder, sync: bool) -> Result<(), String> {
        let mut inner = self.inner.lock();
        if inner.closed {
            // `finish` ran since `due` said yes (the exit path): the history is written
            // whole; another append would re-create a JSON history's side file.
            return Ok(());
        }
        let r = inner.append(
            &Self::target(path),
            recorder,
            sync,
            crate::flush::durability(),
        );
        if let Err(e) = &r {
            inner.stats.errors += 1;
            inner.stats.last_error = Some(e.clone());
        }
        r
    }

    /// At the end (`snapshot`: the dump signal; the program goes on): writes the history at
    /// `path` completely. A binary history gets its last append (or, if appending fails,
    /// is written whole); a JSON history is written whole, and its side file removed (when the
    /// process is ending, after a last append to the side file: see the match below). A
    /// history that could not be written keeps what the appends wrote, if any, and says so.
    pub fn finish(&self, path: &Path, recorder: &Recorder, snapshot: bool) -> Result<(), String> {
        let mut inner = self.inner.lock();
        if !snapshot {
            inner.closed = true;
        }
        let format = pinwise_core::DumpFormat::from_path(path);
        let durability = crate::flush::durability();
        let whole = || {
            recorder
                .with_history(|h| {
                    pinwise_core::format::save_history_with(h, path, format, durability)
                })
                .map_err(|e| e.to_string())
        };
        // Synced at the end, unless the process is ending (see `flush::durability`).
        let sync = !snapshot && durability == Durability::Synced;
        let result = match format {
            pinwise_core::DumpFormat::Binary if inner.every.is_some() => {
                match inner.append(path, recorder, sync, durability) {
                    Ok(()) => Ok(()),
                    Err(e) => {
                        inner.stats.errors += 1;
                        inner.stats.last_error = Some(e.clone());
                        match whole() {
                            Ok(()) => {
                                // A new file replaced it: later appends start over.
                                inner.appender = None;
                                Ok(())
                            }
                            Err(w) => Err(format!("{e}; writing it whole failed too: {w}")),
                        }
                    }
                }
            }
            pinwise_core::DumpFormat::Json
                if inner.every.is_some() && !snapshot && durability == Durability::Unsynced =>
            {
                // The process is ending and the wait for these outputs is bounded: the last
                // append first (quick), so that if the wait runs out while the JSON file is
                // written, `pinwise run` completes it from the side file.
                if let Err(e) = inner.append(&Self::target(path), recorder, false, durability) {
                    inner.stats.errors += 1;
                    inner.stats.last_error = Some(e);
                }
                whole()
            }
            _ => whole(),
        };
        if snapshot {
            return result;
        }
        match result {
            Ok(()) => {
                if format == pinwise_core::DumpFormat::Json {
                    // The JSON file holds everything: the side file goes.
                    if let Some((side, _)) = inner.appender.take() {
                        let _ = std::fs::remove_file(side);
                    }
                }
                Ok(())
            }
            Err(e) => {
                // What the appends wrote stays, if anything; a file without any goes.
                let kept = match inner.appender.take() {
                    Some((file, app)) if app.appends() > 0 => Some(file),
                    Some((file, _)) => {
                        let _ = std::fs::remove_file(file);
                        None
                    }
                    None => None,
                };
                Err(match kept {
                    Some(file) => format!("{e} (what was flushed before is in {})", file.display()),
                    None => e,
                })
            }
        }
    }

    /// The statistics of the appends so far.
    pub fn stats(&self) -> IncrementalStats {
        let inner = self.inner.lock();
        let mut s = inner.stats.clone();
        s.path = inner
            .appender
            .as_ref()
            .map(|(p, _)| p.display().to_string());
        s
    }
}

impl Inner {
    /// `durability`: of a file created now (its directory entry).
    fn append(
        &mut self,
        target: &Path,
        recorder: &Recorder,
        sync: bool,
        durability: Durability,
    ) -> Result<(), String> {
        if self.appender.as_ref().is_none_or(|(p, _)| p != target) {
            let app = BinaryAppender::create_with(target, durability).map_err(|e| e.to_string())?;
            self.appender = Some((target.to_path_buf(), app));
        }
        let Some((_, app)) = self.appender.as_mut() else {
            return Err("no history file".into());
        };
        let started = Instant::now();
        // Encoded under the history's lock, written after it is let go.
        let encoded = recorder
            .with_history(|h| app.encode(h))
            .map_err(|e| e.to_string())?;
        let encoded_ns = started.elapsed().as_nanos() as u64;
        let (bytes, records) = (encoded.len() as u64, encoded.records() as u64);
        app.write(encoded, sync)
            .map_err(|e| format!("{}: {e}", target.display()))?;
        let s = &mut self.stats;
        s.appends += 1;
        s.bytes += bytes;
        s.records += records;
        s.encode_ns_max = s.encode_ns_max.max(encoded_ns);
        s.encode_ns_total += encoded_ns;
        s.bytes_max = s.bytes_max.max(bytes);
        Ok(())
    }
}
