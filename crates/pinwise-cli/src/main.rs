//! The `pinwise` command: trace CUDA programs' host memory, pin it smartly, report on it.
mod cmd;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// pinwise: see where your CUDA program's host<->device transfer time goes, and pin only
/// the host memory that pays for it.
#[derive(Debug, Parser)]
#[command(name = "pinwise", version, propagate_version = true)]
struct Cli {
    /// More log output (-v: info, -vv: debug, -vvv: trace). `RUST_LOG` overrides it.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Trace an unmodified CUDA process with eBPF and record each host allocation's life.
    Trace(cmd::trace::TraceArgs),
    /// Run a program with pinwise's preload library: smart pinning and in-process tracing.
    Run(cmd::run::RunArgs),
    /// Summarize a history: where transfer time goes and what pinning would save.
    Report(cmd::report::ReportArgs),
    /// Export a history as a timeline (Chrome trace event format, for Perfetto).
    Export(cmd::export::ExportArgs),
    /// Convert a history between the JSON and binary formats.
    Convert(cmd::convert::ConvertArgs),
    /// Compare two histories or profiles.
    Diff(cmd::diff::DiffArgs),
    /// Benchmarks (`pinwise bench alloc`: the smart allocator against other strategies).
    Bench(cmd::bench::BenchArgs),
    /// Measure this machine's transfer and pinning costs and write a calibration file.
    Calibrate(cmd::calibrate::CalibrateArgs),
    /// Check whether this machine can run pinwise, and how well.
    Doctor(cmd::doctor::DoctorArgs),
    /// Run a small built-in workload through pinwise end to end and show what it found.
    Demo(cmd::demo::DemoArgs),
    /// Monitor every CUDA process on this node, always on; metrics for Prometheus.
    Agent(cmd::agent::AgentArgs),
    /// A node-local pinned-memory service: processes share pinned buffers, one GPU mapping.
    Pool(cmd::pool::PoolArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(cmd::shell::CompletionsArgs),
    /// Print the manual page (or write one per subcommand with --out-dir).
    Man(cmd::shell::ManArgs),
}

fn init_logging(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}

/// Lets a write to a closed pipe end the process quietly (as `cat` does) instead of
/// failing: for the commands that only print, not those that supervise a program (`run`,
/// `trace`, `demo`), which must outlive their terminal to write the program's history, nor
/// `agent`, which writes to sockets. (One `signal` call: signal-hook installs handlers and
/// has no way to set a disposition back to the default without raising the signal.)
fn quiet_on_closed_pipe() {
    // SAFETY: restoring the default disposition of SIGPIPE at start-up, before any thread
    // is spawned; no handler is installed.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    // Only the commands that print and end: never for one that supervises a program or
    // serves sockets (`agent`: a client that hangs up must not end it).
    if matches!(
        cli.command,
        Command::Report(_)
            | Command::Export(_)
            | Command::Convert(_)
            | Command::Diff(_)
            | Command::Doctor(_)
            | Command::Completions(_)
            | Command::Man(_)
    ) {
        quiet_on_closed_pipe();
    }
    let result = match cli.command {
        Command::Trace(args) => cmd::trace::run(args),
        Command::Run(args) => cmd::run::run(args),
        Command::Report(args) => cmd::report::run(args),
        Command::Export(args) => cmd::export::run(args),
        Command::Convert(args) => cmd::convert::run(args),
        Command::Diff(args) => cmd::diff::run(args),
        Command::Bench(args) => cmd::bench::run(args),
        Command::Calibrate(args) => cmd::calibrate::run(args),
        Command::Doctor(args) => cmd::doctor::run(args),
        Command::Demo(args) => cmd::demo::run(args),
        Command::Agent(args) => cmd::agent::run(args),
        Command::Pool(args) => cmd::pool::run(args),
        Command::Completions(args) => cmd::shell::completions(args, Cli::command()),
        Command::Man(args) => cmd::shell::man(args, Cli::command()),
    };
    match result {
        Ok(code) => code,
        Err(err) if cmd::outputs::is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("pinwise: error: {}", cmd::outputs::render_error(&err));
            ExitCode::from(cmd::outputs::exit_status(&err))
        }
    }
}
