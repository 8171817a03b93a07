//! `pinwise trace` (being built: see the issue tracker).
use std::process::ExitCode;

/// Arguments of `pinwise trace`.
#[derive(Debug, clap::Args)]
pub struct TraceArgs {}

/// Runs `pinwise trace`.
pub fn run(_args: TraceArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`pinwise trace` is not built yet")
}
