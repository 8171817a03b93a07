//! `pinwise diff` (being built: see the issue tracker).
use std::process::ExitCode;

/// Arguments of `pinwise diff`.
#[derive(Debug, clap::Args)]
pub struct DiffArgs {}

/// Runs `pinwise diff`.
pub fn run(_args: DiffArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`pinwise diff` is not built yet")
}
