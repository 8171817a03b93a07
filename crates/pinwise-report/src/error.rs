//! Errors of this crate: each says which file and what went wrong.

use std::path::PathBuf;

/// Why a report, export or diff could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// An input file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An input file is not a valid history or profile (the message names the file, what
    /// is wrong and where).
    #[error("{0}")]
    Format(#[from] pinwise_core::FormatError),
    /// An input is another kind of pinwise file than the command needs.
    #[error("{}: this is {found}; this command needs {needed}", path.display())]
    WrongKind {
        /// The file.
        path: PathBuf,
        /// What it is.
        found: &'static str,
        /// What was needed.
        needed: &'static str,
    },
    /// An output file could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A plot could not be drawn.
    #[error("cannot draw the plot \"{plot}\": {message}")]
    Plot {
        /// Which plot.
        plot: &'static str,
        /// What the plotting library said.
        message: String,
    },
}
