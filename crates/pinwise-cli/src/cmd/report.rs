//! `pinwise report` (being built: see the issue tracker).
use std::process::ExitCode;

/// Arguments of `pinwise report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {}

/// Runs `pinwise report`.
pub fn run(_args: ReportArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`pinwise report` is not built yet")
}
