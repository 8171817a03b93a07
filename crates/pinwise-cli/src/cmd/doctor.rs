//! `pinwise doctor` (being built: see the issue tracker).
use std::process::ExitCode;

/// Arguments of `pinwise doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {}

/// Runs `pinwise doctor`.
pub fn run(_args: DoctorArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`pinwise doctor` is not built yet")
}
