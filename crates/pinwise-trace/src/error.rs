//! The tracer's errors. Each names what went wrong and, where there is one, what to do.

use std::path::PathBuf;

/// Errors of the tracer.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// BPF needs privileges this process lacks.
    #[error(
        "not permitted to load BPF programs ({detail}): run pinwise as root, or give it \
         CAP_BPF and CAP_PERFMON (e.g. `sudo setcap cap_bpf,cap_perfmon+ep $(which pinwise)`)"
    )]
    NotPermitted {
        /// The kernel's or libbpf's words.
        detail: String,
    },
    /// The kernel refused to load or create something.
    #[error("loading the BPF programs failed: {0}")]
    Load(String),
    /// An attach failed where it must not (a tracepoint every trace needs).
    #[error("attaching {what} failed: {detail}")]
    Attach {
        /// What was being attached.
        what: String,
        /// The error.
        detail: String,
    },
    /// No process with this id.
    #[error("no process with PID {0} (is it still running?)")]
    NoSuchProcess(u32),
    /// The target does not use CUDA's driver library, so there is nothing to probe.
    #[error(
        "no libcuda found for {target}: it does not map libcuda.so* and none was found where \
         the loader would look (LD_LIBRARY_PATH, ldconfig cache); pass --libcuda PATH"
    )]
    NoLibcuda {
        /// PID or command.
        target: String,
    },
    /// A library given with `--libcuda`/`--libcudart` or found does not exist.
    #[error("library {0} does not exist or is not a file")]
    NoSuchLibrary(PathBuf),
    /// None of the probes could be attached to a library.
    #[error("no CUDA entry point of {path} could be probed: {detail}")]
    NothingAttached {
        /// The library.
        path: PathBuf,
        /// Why.
        detail: String,
    },
    /// The command to trace could not be started.
    #[error("could not start `{program}`: {source}")]
    Launch {
        /// The program.
        program: String,
        /// The error.
        source: std::io::Error,
    },
    /// The agent is in the wrong state for the call (started twice, stopped before start).
    #[error("tracer agent: {0}")]
    State(&'static str),
    /// Writing a dump failed.
    #[error("writing {path} failed: {detail}")]
    Dump {
        /// Where.
        path: PathBuf,
        /// The error.
        detail: String,
    },
    /// Another I/O error.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: std::io::Error,
    },
}

impl TraceError {
    /// Classifies a libbpf error from loading: permission problems get their own variant.
    pub(crate) fn from_load(err: &libbpf_rs::Error) -> TraceError {
        let detail = format!("{err:#}");
        if matches!(err.kind(), libbpf_rs::ErrorKind::PermissionDenied)
            || detail.contains("Operation not permitted")
            || detail.contains("Permission denied")
        {
            TraceError::NotPermitted { detail }
        } else {
            TraceError::Load(detail)
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> TraceError {
        TraceError::Io {
            context: context.into(),
            source,
        }
    }
}
