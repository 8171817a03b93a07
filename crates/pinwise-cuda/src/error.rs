//! Typed errors: a missing library, a missing symbol, a failed CUDA call, a bad argument.

use crate::sys::CUresult;

/// Everything that can go wrong talking to the driver. Never a panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CudaError {
    /// The driver library could not be loaded.
    #[error("cannot load the CUDA driver library {path}: {reason}")]
    LibraryNotFound {
        /// The path or name tried (`libcuda.so.1`, or `PINWISE_LIBCUDA`'s value).
        path: String,
        /// What the dynamic loader said (`dlerror`).
        reason: String,
    },
    /// The library loaded but lacks an entry point pinwise needs.
    #[error("the CUDA driver library {path} has no symbol {symbol}: {reason}")]
    MissingSymbol {
        /// The library's path or name.
        path: String,
        /// The missing symbol (`cuMemcpyHtoD_v2`, ...).
        symbol: &'static str,
        /// What the dynamic loader said.
        reason: String,
    },
    /// A driver call returned an error.
    #[error(
        "{call} failed: {} ({code}): {}",
        name.as_deref().unwrap_or("unknown CUDA error"),
        message.as_deref().unwrap_or("no description from the driver")
    )]
    Driver {
        /// The driver function (`cuMemHostRegister_v2`, ...).
        call: &'static str,
        /// CUDA's numeric code.
        code: CUresult,
        /// CUDA's name for it (`CUDA_ERROR_INVALID_VALUE`), from `cuGetErrorName`.
        name: Option<String>,
        /// CUDA's message (`invalid argument`), from `cuGetErrorString`.
        message: Option<String>,
    },
    /// A safe wrapper refused its arguments before calling the driver.
    #[error("invalid argument to {call}: {reason}")]
    InvalidArgument {
        /// The operation.
        call: &'static str,
        /// What is wrong.
        reason: String,
    },
}

impl CudaError {
    /// CUDA's numeric code, for driver errors.
    pub fn code(&self) -> Option<CUresult> {
        match self {
            CudaError::Driver { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// CUDA's name for the error (`CUDA_ERROR_INVALID_VALUE`), for driver errors.
    pub fn cuda_name(&self) -> Option<&str> {
        match self {
            CudaError::Driver { name, .. } => name.as_deref(),
            _ => None,
        }
    }

    /// Whether this is the driver error `code`.
    pub fn is(&self, code: CUresult) -> bool {
        self.code() == Some(code)
    }
}

/// The loader's own words for a libloading error (`dlerror` text when there is one).
pub(crate) fn dl_reason(e: &libloading::Error) -> String {
    use std::error::Error;
    match e.source() {
        Some(source) => source.to_string(),
        None => e.to_string(),
    }
}

/// Shorthand for this crate's results.
pub type Result<T, E = CudaError> = std::result::Result<T, E>;
