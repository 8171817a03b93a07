//! `pinwise run` (being built: see the issue tracker).
use std::process::ExitCode;

/// Arguments of `pinwise run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {}

/// Runs `pinwise run`.
pub fn run(_args: RunArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`pinwise run` is not built yet")
}
