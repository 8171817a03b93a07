//! `pinwise export` (being built: see the issue tracker).
use std::process::ExitCode;

/// Arguments of `pinwise export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {}

/// Runs `pinwise export`.
pub fn run(_args: ExportArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`pinwise export` is not built yet")
}
