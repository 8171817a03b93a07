//! Periodic per-process histories: each followed process's events also feed a history of
//! its own, written (binary, `pinwise report` reads it) when the process exits and every
//! [`HistorySettings::every`] while it lives, then dropped from memory at its exit.
//!
//! Files are `pinwise-<pid>-<comm>-<n>.bin` in the history directory (made `0700`), each
//! written `0600` through a temporary file renamed into place ([`pinwise_core::safe_file`]),
//! so a reader never sees half a file and no file is written through a planted symlink.
//! SIGHUP starts a new file (`<n>` + 1) for every live process.
//!
//! # Disk cap
//!
//! After each write, while the directory's `pinwise-*.bin` files hold more than
//! [`HistorySettings::max_bytes`], the least recently written file is removed (never the
//! one just written). Memory: a live process's history keeps at most
//! [`HistorySettings::events_per_allocation`] events per allocation, plus a record per
//! allocation.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use pinwise_core::{DumpFormat, Event, HistoryConfig, MemHistory, ModuleTable};

use crate::error::AgentError;

/// Where and how often histories are written.
#[derive(Debug, Clone)]
pub struct HistorySettings {
    /// The directory (created `0700` if missing).
    pub dir: PathBuf,
    /// A live process's history is rewritten this often.
    pub every: Duration,
    /// Most bytes of history files kept in the directory.
    pub max_bytes: u64,
    /// Events kept per allocation in memory and in the files.
    pub events_per_allocation: u32,
}

struct Live {
    history: MemHistory,
    comm: String,
    generation: u32,
    last_write: Instant,
    dirty: bool,
}

/// The per-process histories.
pub struct HistoryStore {
    settings: HistorySettings,
    modules: Arc<ModuleTable>,
    live: HashMap<u32, Live>,
    /// Files written so far.
    pub files_written: u64,
    /// Files removed by the disk cap.
    pub files_removed: u64,
    /// Writes that failed.
    pub write_errors: u64,
}

impl std::fmt::Debug for HistoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HistoryStore")
            .field("dir", &self.settings.dir)
            .field("live", &self.live.len())
            .finish()
    }
}

/// A file-name-safe form of a command name.
fn sanitize(comm: &str) -> String {
    let s: String = comm
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() {
        "unknown".into()
    } else {
        s
    }
}

impl HistoryStore {
    /// A store writing into `settings.dir`; `modules`: the tracer's module table (the
    /// events' call sites refer to it).
    pub fn new(settings: HistorySettings, modules: Arc<ModuleTable>) -> Result<Self, AgentError> {
        pinwise_core::safe_file::create_private_dir_all(&settings.dir).map_err(|e| {
            AgentError::Histories {
                path: settings.dir.clone(),
                detail: e.to_string(),
            }
        })?;
        Ok(HistoryStore {
            settings,
            modules,
            live: HashMap::new(),
            files_written: 0,
            files_removed: 0,
            write_errors: 0,
        })
    }

    /// Processes with a history in memory.
    pub fn live_count(&self) -> usize {
        self.live.len()
    }

    fn path(&self, pid: u32, live: &Live) -> PathBuf {
        self.settings.dir.join(format!(
            "pinwise-{pid}-{}-{}.bin",
            sanitize(&live.comm),
            live.generation
        ))
    }

    /// Takes an event of followed process `pid` (named `comm`).
    pub fn ingest(&mut self, pid: u32, comm: &str, ev: &Event) {
        let config = HistoryConfig {
            max_events_per_allocation: self.settings.events_per_allocation.max(2),
            track_untracked: true,
        };
        let modules = &self.modules;
        let live = self.live.entry(pid).or_insert_with(|| Live {
            history: MemHistory::with_modules(config, Arc::clone(modules)),
            comm: comm.to_string(),
            generation: 0,
            last_write: Instant::now(),
            dirty: false,
        });
        live.history.ingest(ev);
        live.dirty = true;
    }

    /// Process `pid` exited: its history is written a last time and dropped.
    pub fn exited(&mut self, pid: u32, ts_ns: u64) {
        if let Some(mut live) = self.live.remove(&pid) {
            live.history.process_exited(pid, ts_ns);
            self.write(pid, &live);
        }
    }

    /// Writes the histories that changed and are due.
    pub fn tick(&mut self) {
        let due: Vec<u32> = self
            .live
            .iter()
            .filter(|(_, l)| l.dirty && l.last_write.elapsed() >= self.settings.every)
            .map(|(pid, _)| *pid)
            .collect();
        for pid in due {
            self.write_live(pid);
        }
    }

    /// Writes every history that changed (at the agent's stop).
    pub fn flush(&mut self) {
        let dirty: Vec<u32> = self
            .live
            .iter()
            .filter(|(_, l)| l.dirty)
            .map(|(pid, _)| *pid)
            .collect();
        for pid in dirty {
            self.write_live(pid);
        }
    }

    /// SIGHUP: the current files are finished; live processes continue in new files.
    pub fn reopen(&mut self) {
        self.flush();
        for live in self.live.values_mut() {
            live.generation += 1;
            live.dirty = true;
        }
    }

    fn write_live(&mut self, pid: u32) {
        if let Some(live) = self.live.remove(&pid) {
            self.write(pid, &live);
            let mut live = live;
            live.last_write = Instant::now();
            live.dirty = false;
            self.live.insert(pid, live);
        }
    }

    fn write(&mut self, pid: u32, live: &Live) {
        let path = self.path(pid, live);
        match pinwise_core::save_history(&live.history, &path, DumpFormat::Binary) {
            Ok(()) => {
                self.files_written += 1;
                self.enforce_cap(&path);
            }
            Err(e) => {
                self.write_errors += 1;
                tracing::warn!("history of PID {pid}: {e}");
            }
        }
    }

    /// Removes the least recently written files until the directory holds at most the
    /// cap (never `keep`).
    fn enforce_cap(&mut self, keep: &Path) {
        let Ok(entries) = std::fs::read_dir(&self.settings.dir) else {
            return;
        };
        let mut files: Vec<(SystemTime, u64, PathBuf)> = entries
            .flatten()
            .filter(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                name.starts_with("pinwise-") && name.ends_with(".bin")
            })
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                m.is_file().then(|| {
                    (
                        m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                        m.len(),
                        e.path(),
                    )
                })
            })
            .collect();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        files.sort();
        for (_, len, path) in files {
            if total <= self.settings.max_bytes {
                break;
            }
            if path == keep {
                continue;
            }
            if std::fs::remove_file(&path).is_ok() {
                total -= len;
                self.files_removed += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinwise_core::{Direction, EventKind, HostState, ProbeKind};
    use std::os::unix::fs::PermissionsExt;

    fn copy(pid: u32, ts: u64) -> Event {
        Event::new(
            ts,
            pid,
            pid,
            ProbeKind::Uprobe,
            EventKind::Transfer {
                direction: Direction::HtoD,
                host: 0x1000 + ts,
                device: 0x2000,
                bytes: 4096,
                is_async: false,
                stream: 0,
                host_state: HostState::Unknown,
            },
        )
    }

    fn store(dir: &Path, max_bytes: u64) -> HistoryStore {
        HistoryStore::new(
            HistorySettings {
                dir: dir.join("h"),
                every: Duration::ZERO,
                max_bytes,
                events_per_allocation: 16,
            },
            Arc::new(ModuleTable::default()),
        )
        .unwrap()
    }

    #[test]
    fn a_process_history_is_written_private_on_exit_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = store(dir.path(), u64::MAX);
        for ts in 1..=5 {
            s.ingest(42, "my app", &copy(42, ts));
        }
        s.exited(42, 10);
        assert_eq!(s.live_count(), 0, "dropped from memory at exit");
        let path = dir.path().join("h/pinwise-42-my_app-0.bin");
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let dmode = std::fs::metadata(dir.path().join("h"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(dmode & 0o077, 0, "directory private");
        let h = pinwise_core::load_history(&path).unwrap();
        assert_eq!(h.stats().transfers[Direction::HtoD.index()].transfers, 5);
    }

    #[test]
    fn periodic_writes_reopen_and_the_disk_cap() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = store(dir.path(), u64::MAX);
        s.ingest(1, "a", &copy(1, 1));
        s.tick();
        assert!(dir.path().join("h/pinwise-1-a-0.bin").is_file());
        s.reopen();
        s.ingest(1, "a", &copy(1, 2));
        s.tick();
        assert!(
            dir.path().join("h/pinwise-1-a-1.bin").is_file(),
            "SIGHUP: a new file"
        );
        let one = std::fs::metadata(dir.path().join("h/pinwise-1-a-1.bin"))
            .unwrap()
            .len();

        // A cap of about two files: writing more removes the oldest, never the newest.
        let mut s = store(dir.path(), 2 * one + one / 2);
        for pid in 10..14 {
            std::thread::sleep(Duration::from_millis(15));
            s.ingest(pid, "b", &copy(pid, 1));
            s.exited(pid, 2);
        }
        let left: Vec<String> = std::fs::read_dir(dir.path().join("h"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        let total: u64 = std::fs::read_dir(dir.path().join("h"))
            .unwrap()
            .flatten()
            .map(|e| e.metadata().unwrap().len())
            .sum();
        assert!(total <= 2 * one + one / 2, "{left:?} hold {total} bytes");
        assert!(left.contains(&"pinwise-13-b-0.bin".to_string()), "{left:?}");
        assert!(s.files_removed >= 4, "{}", s.files_removed);
    }
}
