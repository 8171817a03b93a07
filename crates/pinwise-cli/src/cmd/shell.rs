//! `pinwise completions SHELL` and `pinwise man`: shell completion scripts (clap_complete)
//! and manual pages (clap_mangen), generated from the same clap definition as the command.
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};

/// Arguments of `pinwise completions`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    pinwise completions bash > ~/.local/share/bash-completion/completions/pinwise\n  \
    pinwise completions zsh > ~/.zfunc/_pinwise\n  \
    pinwise completions fish > ~/.config/fish/completions/pinwise.fish")]
pub struct CompletionsArgs {
    /// The shell to write the completion script for (to stdout).
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Arguments of `pinwise man`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    pinwise man | man -l -\n  \
    pinwise man --out-dir ~/.local/share/man/man1")]
pub struct ManArgs {
    /// Write pinwise.1 and one page per subcommand (pinwise-trace.1, ...) into this
    /// directory instead of printing pinwise.1 to stdout.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

/// Runs `pinwise completions`: `cli` is the whole command's definition.
pub fn completions(args: CompletionsArgs, mut cli: clap::Command) -> Result<ExitCode> {
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cli, "pinwise", &mut out);
    std::io::stdout().write_all(&out)?;
    Ok(ExitCode::SUCCESS)
}

/// Runs `pinwise man`: `cli` is the whole command's definition.
pub fn man(args: ManArgs, cli: clap::Command) -> Result<ExitCode> {
    match args.out_dir {
        None => {
            let mut out = Vec::new();
            clap_mangen::Man::new(cli).render(&mut out)?;
            std::io::stdout().write_all(&out)?;
        }
        Some(dir) => {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("--out-dir {}", dir.display()))?;
            for path in write_pages(cli, &dir)? {
                println!("{}", path.display());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes the page of `cmd` and of each subcommand (recursively) into `dir`; returns the
/// paths written.
fn write_pages(cmd: clap::Command, dir: &std::path::Path) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let mut stack = vec![(cmd.get_name().to_string(), cmd)];
    while let Some((name, mut cmd)) = stack.pop() {
        cmd = cmd.name(name.clone());
        cmd.build();
        for sub in cmd.get_subcommands() {
            if sub.get_name() == "help" || sub.is_hide_set() {
                continue;
            }
            stack.push((format!("{name}-{}", sub.get_name()), sub.clone()));
        }
        let path = dir.join(format!("{name}.1"));
        let mut out = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut out)?;
        std::fs::write(&path, out).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    written.sort();
    Ok(written)
}
