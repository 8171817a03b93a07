//! Dumps of a history: JSON ([`json`]) and compact binary ([`binary`]), and one loader
//! that tells them apart ([`load_history`]).
//!
//! Loaders never panic on any input: truncated, corrupt or wrong-version input gives a
//! [`FormatError`] that says what is wrong and where (byte offset, or JSON path and line).

pub mod binary;
pub mod json;

use std::fmt;
use std::path::Path;

use crate::history::MemHistory;

pub use binary::{BinaryAppender, BINARY_MAGIC, BINARY_VERSION};
pub use json::{JSON_FORMAT, JSON_VERSION};

/// The binary file a JSON history's appends go to while the program that writes it runs
/// (`pinwise run -o h.json` appends to `h.json.partial`, and removes it once `h.json` is
/// written; a run killed before leaves it). Binary, whatever the name says.
pub fn partial_path(json_history: &Path) -> std::path::PathBuf {
    let mut name = json_history.as_os_str().to_owned();
    name.push(".partial");
    std::path::PathBuf::from(name)
}

/// Which dump format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DumpFormat {
    /// The JSON dump (schema: `schemas/history.schema.json`).
    Json,
    /// The compact binary dump.
    Binary,
}

impl DumpFormat {
    /// The format a file name suggests: `.json` is JSON, anything else binary.
    pub fn from_path(path: &Path) -> DumpFormat {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("json") => DumpFormat::Json,
            _ => DumpFormat::Binary,
        }
    }
}

/// What is wrong with a dump or profile.
#[derive(Debug)]
pub enum FormatErrorKind {
    /// Reading or writing failed.
    Io(std::io::Error),
    /// Neither a pinwise binary dump nor JSON.
    Unrecognized(String),
    /// A format version this build does not read.
    UnsupportedVersion {
        /// Which format.
        format: &'static str,
        /// The version found.
        found: u64,
        /// The version this build reads.
        supported: u64,
    },
    /// The input ends too early.
    Truncated {
        /// Byte offset where more was expected.
        offset: u64,
        /// What was being read.
        what: String,
    },
    /// The bytes are not what they should be.
    Corrupt {
        /// Byte offset of the bad data.
        offset: u64,
        /// What is wrong.
        what: String,
    },
    /// JSON that does not parse, or does not have the expected shape.
    Json {
        /// Where in the document (e.g. `allocations[3].events[0].type`).
        path: String,
        /// 1-based line (0 when unknown).
        line: usize,
        /// 1-based column (0 when unknown).
        column: usize,
        /// What is wrong.
        message: String,
    },
}

/// An error of a loader or writer, with the file it concerns when there is one.
#[derive(Debug)]
pub struct FormatError {
    /// The file, when known.
    pub file: Option<String>,
    /// What is wrong.
    pub kind: FormatErrorKind,
}

impl FormatError {
    pub(crate) fn new(kind: FormatErrorKind) -> Self {
        FormatError { file: None, kind }
    }

    pub(crate) fn truncated(offset: u64, what: impl Into<String>) -> Self {
        Self::new(FormatErrorKind::Truncated {
            offset,
            what: what.into(),
        })
    }

    pub(crate) fn corrupt(offset: u64, what: impl Into<String>) -> Self {
        Self::new(FormatErrorKind::Corrupt {
            offset,
            what: what.into(),
        })
    }

    pub(crate) fn json(
        path: impl Into<String>,
        line: usize,
        column: usize,
        message: impl Into<String>,
    ) -> Self {
        Self::new(FormatErrorKind::Json {
            path: path.into(),
            line,
            column,
            message: message.into(),
        })
    }

    pub(crate) fn io(e: std::io::Error) -> Self {
        Self::new(FormatErrorKind::Io(e))
    }

    /// The same error, naming `file`.
    pub fn in_file(mut self, file: impl AsRef<Path>) -> Self {
        self.file = Some(file.as_ref().display().to_string());
        self
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{file}: ")?;
        }
        match &self.kind {
            FormatErrorKind::Io(e) => write!(f, "{e}"),
            FormatErrorKind::Unrecognized(what) => write!(f, "not a pinwise file: {what}"),
            FormatErrorKind::UnsupportedVersion {
                format,
                found,
                supported,
            } => write!(
                f,
                "{format} version {found} is not supported (this build reads version {supported})"
            ),
            FormatErrorKind::Truncated { offset, what } => {
                write!(f, "truncated at byte {offset}: {what}")
            }
            FormatErrorKind::Corrupt { offset, what } => {
                write!(f, "corrupt at byte {offset}: {what}")
            }
            FormatErrorKind::Json {
                path,
                line,
                column,
                message,
            } => {
                let at = if path.is_empty() { "." } else { path };
                if *line > 0 {
                    write!(
                        f,
                        "invalid JSON at {at} (line {line}, column {column}): {message}"
                    )
                } else {
                    write!(f, "invalid JSON at {at}: {message}")
                }
            }
        }
    }
}

impl std::error::Error for FormatError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            FormatErrorKind::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// Reads a history dump, JSON or binary (told apart by the binary magic). The first bytes
/// are checked before the rest is read ([`check_head`]).
pub fn load_history(path: impl AsRef<Path>) -> Result<MemHistory, FormatError> {
    let path = path.as_ref();
    let bytes = read_checked(path).map_err(|e| e.in_file(path))?;
    load_history_bytes(&bytes).map_err(|e| e.in_file(path))
}

/// Reads the file at `path` whole, after [`check_head`] accepted its first bytes.
pub fn read_checked(path: &Path) -> Result<Vec<u8>, FormatError> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut head = Vec::with_capacity(64);
    (&mut file).take(64).read_to_end(&mut head)?;
    check_head(&head)?;
    let mut bytes = head;
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Whether a file beginning with `head` can be a pinwise file (the binary magic, or JSON:
/// `{` first after any whitespace), so that a large file of something else is refused
/// without being read.
pub fn check_head(head: &[u8]) -> Result<(), FormatError> {
    if head.is_empty() {
        return Err(FormatError::new(FormatErrorKind::Unrecognized(
            "the file is empty".into(),
        )));
    }
    if BINARY_MAGIC.starts_with(&head[..head.len().min(BINARY_MAGIC.len())]) {
        return Ok(());
    }
    match head.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') | None => Ok(()),
        Some(_) => Err(FormatError::new(FormatErrorKind::Unrecognized(
            "neither the pinwise binary magic nor a JSON object".into(),
        ))),
    }
}

/// Reads a history dump from memory, JSON or binary.
pub fn load_history_bytes(bytes: &[u8]) -> Result<MemHistory, FormatError> {
    if bytes.starts_with(&BINARY_MAGIC) {
        return binary::read(bytes);
    }
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => json::read(bytes),
        None => Err(FormatError::new(FormatErrorKind::Unrecognized(
            "the file is empty".into(),
        ))),
        Some(_) if bytes.len() >= 4 && BINARY_MAGIC.starts_with(&bytes[..4]) => Err(
            FormatError::truncated(bytes.len() as u64, "binary history header"),
        ),
        Some(_) => Err(FormatError::new(FormatErrorKind::Unrecognized(
            "neither the pinwise binary magic nor a JSON object".into(),
        ))),
    }
}

/// Writes a history dump to `path` in `format` (atomically: a temporary file renamed).
pub fn save_history(
    history: &MemHistory,
    path: impl AsRef<Path>,
    format: DumpFormat,
) -> Result<(), FormatError> {
    save_history_with(history, path, format, crate::safe_file::Durability::Synced)
}

/// [`save_history`], synced to the disk or not as `durability` says.
pub fn save_history_with(
    history: &MemHistory,
    path: impl AsRef<Path>,
    format: DumpFormat,
    durability: crate::safe_file::Durability,
) -> Result<(), FormatError> {
    let path = path.as_ref();
    crate::safe_file::write_with_durability(path, durability, |w| match format {
        DumpFormat::Json => json::write(history, w),
        DumpFormat::Binary => binary::write(history, w),
    })
    .map_err(|e| e.in_file(path))
}

impl From<std::io::Error> for FormatError {
    fn from(e: std::io::Error) -> Self {
        FormatError::io(e)
    }
}
