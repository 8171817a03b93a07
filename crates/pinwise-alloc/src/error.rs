//! Errors of the allocator.

/// What can go wrong when allocating, freeing or configuring.
#[derive(Debug, thiserror::Error)]
pub enum AllocError {
    /// A request for zero bytes.
    #[error("cannot allocate 0 bytes")]
    ZeroSize,
    /// A request too large to be served at all.
    #[error("cannot allocate {0} bytes: too large")]
    TooLarge(usize),
    /// The system refused even pageable memory.
    #[error("out of memory allocating {0} bytes of pageable memory")]
    OutOfMemory(usize),
    /// Pinned memory was required (by the caller's flags) and could not be had: the budget
    /// is full or the driver refused.
    #[error(
        "pinned memory required for {size} bytes, but the pinned budget is full or pinning failed"
    )]
    PinningUnavailable {
        /// Bytes asked for.
        size: usize,
    },
    /// A pointer this allocator did not hand out (or already freed).
    #[error("pointer {0:#x} was not allocated by this pinwise allocator (or was already freed)")]
    UnknownPointer(usize),
    /// Inconsistent settings.
    #[error("invalid allocator configuration: {0}")]
    Config(String),
    /// A driver operation failed (a copy, a synchronization).
    #[error(transparent)]
    Backend(#[from] crate::backend::BackendError),
    /// The CUDA driver could not be used.
    #[error("CUDA is not usable: {0}")]
    Cuda(String),
    /// A profile could not be read, or was not written.
    #[error("profile {path}: {message}")]
    Profile {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// An I/O error with the file it concerns.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
}
