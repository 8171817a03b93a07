//! Reading inputs: history dumps (binary or JSON) and profiles, with progress on large files.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Serialize;

use pinwise_core::format::{binary, check_head, load_history_bytes, BINARY_MAGIC};
use pinwise_core::profile::{Profile, PROFILE_FORMAT};
use pinwise_core::MemHistory;

use crate::error::ReportError;
use crate::progress::Progress;

/// What kind of file an input is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InputKind {
    /// A binary history dump (`pinwise trace`, `pinwise run`, `save_history`).
    BinaryHistory,
    /// A JSON history dump.
    JsonHistory,
    /// A profile (`"format": "pinwise-profile"`).
    Profile,
}

impl InputKind {
    /// How a person would name it.
    pub fn describe(self) -> &'static str {
        match self {
            InputKind::BinaryHistory => "binary history",
            InputKind::JsonHistory => "JSON history",
            InputKind::Profile => "profile",
        }
    }
}

/// Which file was read, and what it was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InputInfo {
    /// The path as given.
    pub path: String,
    /// What it is.
    pub kind: InputKind,
    /// Its size in bytes.
    pub file_bytes: u64,
    /// For a binary history that was cut short: what was salvaged and what was left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub salvaged: Option<String>,
}

/// A loaded input.
#[derive(Debug)]
pub enum Loaded {
    /// A history dump.
    History(Box<MemHistory>),
    /// A profile.
    Profile(Box<Profile>),
}

/// Reads a whole file, advancing `progress` as it goes; `-` is stdin.
pub fn read_file(path: &Path, progress: &mut Progress) -> Result<Vec<u8>, ReportError> {
    let read_error = |source| ReportError::Read {
        path: path.to_path_buf(),
        source,
    };
    if path.as_os_str() == "-" {
        let mut bytes = Vec::new();
        std::io::stdin()
            .lock()
            .read_to_end(&mut bytes)
            .map_err(read_error)?;
        check_head(&bytes[..bytes.len().min(64)]).map_err(|e| e.in_file(path))?;
        return Ok(bytes);
    }
    let mut file = std::fs::File::open(path).map_err(read_error)?;
    let len = file.metadata().map_err(read_error)?.len();
    // The first bytes say whether this can be a pinwise file at all: a large file of
    // something else is refused without reading it.
    let mut head = [0u8; 64];
    let n = read_head(&mut file, &mut head).map_err(read_error)?;
    check_head(&head[..n]).map_err(|e| e.in_file(path))?;
    progress.bytes_stage(&format!("reading {}", path.display()), len);
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    bytes.extend_from_slice(&head[..n]);
    progress.advance(n as u64);
    let mut chunk = vec![0u8; 4 << 20];
    loop {
        let n = match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(read_error(e)),
        };
        bytes.extend_from_slice(&chunk[..n]);
        progress.advance(n as u64);
    }
    Ok(bytes)
}

/// Reads up to `buf.len()` bytes (fewer only at the end of the file).
fn read_head(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// What the bytes of a file are, from their first bytes (a binary magic, or a JSON object
/// whose `format` says profile).
pub fn sniff(bytes: &[u8]) -> InputKind {
    if bytes.starts_with(&BINARY_MAGIC) {
        return InputKind::BinaryHistory;
    }
    // The profile writer puts "format" first; look only at the beginning of the file.
    let head = &bytes[..bytes.len().min(256)];
    let needle = format!("\"{PROFILE_FORMAT}\"");
    if head.windows(needle.len()).any(|w| w == needle.as_bytes()) {
        InputKind::Profile
    } else if bytes
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'{')
    {
        InputKind::JsonHistory
    } else {
        // Let the history loader say what is wrong with it.
        InputKind::BinaryHistory
    }
}

/// Reads a history dump (binary or JSON).
pub fn load_history(
    path: impl AsRef<Path>,
    progress: &mut Progress,
) -> Result<(MemHistory, InputInfo), ReportError> {
    let path = path.as_ref();
    let bytes = read_file(path, progress)?;
    let kind = sniff(&bytes);
    if kind == InputKind::Profile {
        return Err(ReportError::WrongKind {
            path: path.to_path_buf(),
            found: "a profile",
            needed: "a history dump (`pinwise trace` and `pinwise run` write one)",
        });
    }
    let mut info = info(path, kind, bytes.len());
    progress.stage(&format!("decoding {}", path.display()));
    let history = if kind == InputKind::BinaryHistory {
        // A tracer killed mid-write leaves a file cut short: every whole frame is kept.
        let (history, salvage) = binary::read_salvaging(&bytes).map_err(|e| e.in_file(path))?;
        info.salvaged = salvage.map(|s| {
            format!(
                "the file was cut: {} whole frames salvaged, the {} bytes after them left out \
                 ({}){}",
                s.frames_kept,
                s.bytes_dropped,
                s.reason,
                if s.stats_behind {
                    "; the statistics are those of the last complete dump"
                } else {
                    ""
                }
            )
        });
        history
    } else {
        load_history_bytes(&bytes).map_err(|e| e.in_file(path))?
    };
    Ok((history, info))
}

/// Reads a history dump or a profile.
pub fn load_any(
    path: impl AsRef<Path>,
    progress: &mut Progress,
) -> Result<(Loaded, InputInfo), ReportError> {
    let path = path.as_ref();
    let bytes = read_file(path, progress)?;
    let kind = sniff(&bytes);
    let info = info(path, kind, bytes.len());
    progress.stage(&format!("decoding {}", path.display()));
    let loaded = match kind {
        InputKind::Profile => Loaded::Profile(Box::new(
            Profile::from_json_bytes(&bytes).map_err(|e| e.in_file(path))?,
        )),
        _ => Loaded::History(Box::new(
            load_history_bytes(&bytes).map_err(|e| e.in_file(path))?,
        )),
    };
    Ok((loaded, info))
}

fn info(path: &Path, kind: InputKind, len: usize) -> InputInfo {
    InputInfo {
        path: PathBuf::from(path).display().to_string(),
        kind,
        file_bytes: len as u64,
        salvaged: None,
    }
}
