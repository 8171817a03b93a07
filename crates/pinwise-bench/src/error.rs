//! [`BenchError`]: why a benchmark or a calibration could not run or be written.

use std::path::PathBuf;

use pinwise_alloc::backend::BackendError;
use pinwise_alloc::AllocError;

/// Why a benchmark or a calibration failed. Its message names the problem (and the file,
/// for a file that could not be written).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The allocator backend (pinning, copying) failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The allocator engine failed.
    #[error(transparent)]
    Alloc(#[from] AllocError),
    /// The CUDA driver failed (device memory).
    #[error(transparent)]
    Cuda(#[from] pinwise_cuda::CudaError),
    /// The measured points do not make a cost model.
    #[error(transparent)]
    CostModel(#[from] pinwise_core::cost::CostModelError),
    /// A file or directory could not be written.
    #[error("{}: {source}", path.display())]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Drawing the SVG plot failed.
    #[error("drawing the plot: {0}")]
    Plot(String),
    /// The operating system refused memory (`mmap`, `malloc`).
    #[error("{0}")]
    OutOfMemory(String),
    /// The benchmark or calibration cannot proceed as asked (nothing to measure, a pointer
    /// it did not hand out, a run that left no profile).
    #[error("{0}")]
    Invalid(String),
}

impl BenchError {
    /// A file or directory at `path` that could not be written.
    pub fn write(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        BenchError::Write {
            path: path.into(),
            source,
        }
    }

    /// The benchmark cannot proceed: `why`.
    pub fn invalid(why: impl Into<String>) -> Self {
        BenchError::Invalid(why.into())
    }
}

impl<E: std::error::Error + Send + Sync> From<plotters::drawing::DrawingAreaErrorKind<E>>
    for BenchError
{
    fn from(e: plotters::drawing::DrawingAreaErrorKind<E>) -> Self {
        BenchError::Plot(e.to_string())
    }
}
