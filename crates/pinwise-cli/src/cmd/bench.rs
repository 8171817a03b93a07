//! `pinwise bench` (being built: see the issue tracker).
use std::process::ExitCode;

/// Arguments of `pinwise bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {}

/// Runs `pinwise bench`.
pub fn run(_args: BenchArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`pinwise bench` is not built yet")
}
