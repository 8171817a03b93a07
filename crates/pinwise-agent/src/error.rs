//! Errors of the agent.

use std::path::PathBuf;

/// What can stop the agent from starting or running.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// No driver library to probe.
    #[error("no libcuda.so.1 found (ldconfig lists none); name one with --libcuda PATH")]
    NoLibcuda,
    /// A library named with --libcuda is not a file.
    #[error("--libcuda {0}: no such file")]
    NoSuchLibrary(PathBuf),
    /// The tracer failed.
    #[error("tracer: {0}")]
    Trace(#[from] pinwise_trace::TraceError),
    /// The metrics endpoint could not listen.
    #[error("cannot serve metrics on {addr}: {source}")]
    Listen {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Signal handlers could not be installed.
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    /// The history directory could not be used.
    #[error("history directory {path}: {detail}")]
    Histories {
        /// The directory.
        path: PathBuf,
        /// Why.
        detail: String,
    },
    /// The OTLP push could not be set up.
    #[error("--otlp {0}")]
    Otlp(String),
}
