//! `pinwise calibrate` (being built: see the issue tracker).
use std::process::ExitCode;

/// Arguments of `pinwise calibrate`.
#[derive(Debug, clap::Args)]
pub struct CalibrateArgs {}

/// Runs `pinwise calibrate`.
pub fn run(_args: CalibrateArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`pinwise calibrate` is not built yet")
}
