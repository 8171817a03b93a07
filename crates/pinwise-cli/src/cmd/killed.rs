//! `pinwise run` after a program that ended without its outputs (`SIGKILL`, the OOM killer,
//! a crash no handler caught): the history the library appended while the program ran
//! (every `--flush-every`) is read back, every whole append kept, and written complete at
//! the `-o` path in the format asked for (a JSON history's appends are in
//! `<path>.partial`, removed then).

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use pinwise_core::format::{binary, partial_path, read_checked};
use pinwise_core::{DumpFormat, MemHistory};

/// The shortest `--flush-every`.
const MIN: Duration = Duration::from_millis(10);
/// The longest `--flush-every`.
const MAX: Duration = Duration::from_secs(3600);

/// `--flush-every`: `0`/`off`, or a duration between 10 ms and 1 h (the grammar of
/// `trace --dump-every`); returned as the library's `PINWISE_FLUSH_EVERY` takes it.
pub fn parse_flush_every(s: &str) -> Result<String, String> {
    let t = s.trim();
    if t == "0" || t.eq_ignore_ascii_case("off") {
        return Ok("0".into());
    }
    let d = pinwise_core::units::parse_duration(t).map_err(|e| e.to_string())?;
    if !(MIN..=MAX).contains(&d) {
        return Err(format!(
            "`{t}` is out of range: between 10ms and 1h (or 0 for off)"
        ));
    }
    Ok(format!("{}ms", d.as_secs_f64() * 1e3))
}

/// What was salvaged.
#[derive(Debug)]
pub struct Salvaged {
    /// Records in the history.
    pub records: usize,
    /// The newest event's age when the program ended, when known.
    pub last_event_age: Option<Duration>,
    /// Whether the file was cut in the middle of an append (whole appends kept).
    pub cut: Option<String>,
}

/// Turns what the library appended to the history at `history` (or to its `.partial` file,
/// for a JSON history) into a complete file at `history`; `name`: stores the call sites'
/// names first. `ended_ns`: `CLOCK_MONOTONIC` when the program ended. `Ok(None)`: nothing was
/// appended (no file).
pub fn salvage(
    history: &Path,
    ended_ns: u64,
    name: impl FnOnce(&mut MemHistory),
) -> Result<Option<Salvaged>> {
    let format = DumpFormat::from_path(history);
    let appended = match format {
        DumpFormat::Json => partial_path(history),
        DumpFormat::Binary => history.to_path_buf(),
    };
    // Read only a file this user made (the library made it 0600): never through another
    // user's symlink, never another user's file planted at the name.
    let appended = pinwise_core::safe_file::resolve_output(&appended)?;
    let meta = match std::fs::symlink_metadata(&appended) {
        Ok(m) if m.is_file() => m,
        _ => return Ok(None),
    };
    let me = pinwise_core::safe_file::caller_uid();
    if std::os::unix::fs::MetadataExt::uid(&meta) != me {
        anyhow::bail!(
            "{} is owned by uid {}, not by this user (uid {me}): not read",
            appended.display(),
            std::os::unix::fs::MetadataExt::uid(&meta)
        );
    }
    let bytes = read_checked(&appended).with_context(|| appended.display().to_string())?;
    let (mut h, cut) = binary::read_salvaging(&bytes)
        .map_err(|e| e.in_file(&appended))
        .context("the history appended while the program ran is unreadable")?;
    name(&mut h);
    pinwise_core::save_history(&h, history, format)?;
    if format == DumpFormat::Json {
        std::fs::remove_file(&appended)
            .with_context(|| format!("cannot remove {}", appended.display()))?;
    }
    let newest = h.processes().map(|p| p.last_ts_ns).max().unwrap_or(0);
    Ok(Some(Salvaged {
        records: h.len(),
        last_event_age: (newest > 0 && ended_ns >= newest)
            .then(|| Duration::from_nanos(ended_ns - newest)),
        cut: cut.map(|c| c.reason),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_intervals() {
        assert_eq!(parse_flush_every("1s").unwrap(), "1000ms");
        assert_eq!(parse_flush_every("250ms").unwrap(), "250ms");
        assert_eq!(parse_flush_every("off").unwrap(), "0");
        assert_eq!(parse_flush_every("0").unwrap(), "0");
        for bad in ["5ms", "2h", "soon", "-1s"] {
            assert!(parse_flush_every(bad).is_err(), "{bad}");
        }
        assert!(parse_flush_every("5ms")
            .unwrap_err()
            .contains("between 10ms and 1h"));
    }

    #[test]
    fn a_killed_runs_appends_become_a_complete_history() {
        use pinwise_core::event::{Direction, Event, EventKind, HostMemKind, ProbeKind};
        use pinwise_core::format::BinaryAppender;
        use pinwise_core::{HistoryConfig, Site};
        let dir = tempfile::tempdir().unwrap();
        let ev = |ts, kind| Event::new(ts, 7, 7, ProbeKind::InProcessHook, kind);
        for json in [true, false] {
            let mut h = MemHistory::new(HistoryConfig::default());
            h.ingest(
                &ev(
                    1_000,
                    EventKind::Alloc {
                        start: 0x1000,
                        size: 4096,
                        kind: HostMemKind::PinnedAlloc,
                        flags: 0,
                    },
                )
                .with_site(Site::UNKNOWN),
            );
            let history = dir.path().join(if json { "h.json" } else { "h.bin" });
            let appended = if json {
                partial_path(&history)
            } else {
                history.clone()
            };
            let mut app = BinaryAppender::create(&appended).unwrap();
            app.append(&h).unwrap();
            h.ingest(&ev(
                2_000,
                EventKind::Transfer {
                    direction: Direction::HtoD,
                    host: 0x1000,
                    device: 0xd000,
                    bytes: 4096,
                    is_async: false,
                    stream: 0,
                    host_state: pinwise_core::HostState::Pinned,
                },
            ));
            app.append(&h).unwrap();
            // Killed in the middle of a third append.
            let mut bytes = std::fs::read(&appended).unwrap();
            bytes.extend_from_slice(&[2, 0, 0, 0, 200, 0, 0, 0]);
            std::fs::write(&appended, &bytes).unwrap();
            let s = salvage(&history, 1_000_002_000, |_| {})
                .unwrap()
                .expect("salvaged");
            assert_eq!(s.records, 1);
            assert!(s.cut.is_some());
            assert_eq!(s.last_event_age, Some(Duration::from_secs(1)));
            let back = pinwise_core::load_history(&history).unwrap();
            assert_eq!(back.stats().transfers[Direction::HtoD.index()].transfers, 1);
            assert_eq!(appended.exists(), !json, "{json}");
        }
        assert!(salvage(&dir.path().join("none.bin"), 0, |_| {})
            .unwrap()
            .is_none());
    }

    /// Root salvaging a killed run's JSON history does not read a `.partial` file another
    /// user planted (nor follow their symlink).
    #[test]
    fn another_users_partial_file_is_not_read() {
        if pinwise_core::safe_file::caller_uid() != 0 {
            eprintln!("SKIPPED another_users_partial_file_is_not_read: needs root (chown)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let history = dir.path().join("h.json");
        let h = MemHistory::new(pinwise_core::HistoryConfig::default());
        pinwise_core::save_history(&h, partial_path(&history), DumpFormat::Binary).unwrap();
        std::os::unix::fs::chown(partial_path(&history), Some(65534), Some(65534)).unwrap();
        let e = salvage(&history, 0, |_| {}).unwrap_err().to_string();
        assert!(e.contains("not by this user"), "{e}");
        assert!(!history.exists());
        std::fs::remove_file(partial_path(&history)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", partial_path(&history)).unwrap();
        std::os::unix::fs::lchown(partial_path(&history), Some(65534), Some(65534)).unwrap();
        let e = format!("{:#}", salvage(&history, 0, |_| {}).unwrap_err());
        assert!(e.contains("refusing to write through symlink"), "{e}");
        assert!(!history.exists());
    }
}
