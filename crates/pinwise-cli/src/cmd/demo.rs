//! `pinwise demo` (being built: see the issue tracker).
use std::process::ExitCode;

/// Arguments of `pinwise demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {}

/// Runs `pinwise demo`.
pub fn run(_args: DemoArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`pinwise demo` is not built yet")
}
