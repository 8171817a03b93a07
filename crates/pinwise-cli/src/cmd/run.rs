//! `pinwise run`: run a program with pinwise's preload library (smart pinning and
//! in-process tracing, no code change), pass its exit status through, and print what
//! pinwise did.
//!
//! The library (`libpinwise_preload.so`, next to the `pinwise` binary unless `--preload`
//! says otherwise) is put first in `LD_PRELOAD`, and configured through environment
//! variables (`PINWISE_MODE`, `PINWISE_PROFILE`, `PINWISE_BUDGET`, `PINWISE_HISTORY`,
//! `PINWISE_STATS_DIR`, ...; the library's crate documentation lists them all). Each
//! process it runs in writes its statistics into a temporary directory; after the command
//! exits, `pinwise run` reads them and prints a summary on stderr (the command's stdout stays
//! its own).
//!
//! - `--mode profile` records the run and writes a profile (`--profile`, default
//!   `<command>.pinwise-profile.json`) for `--mode use`.
//! - `--mode use` follows that profile; it is read before the command starts, and a
//!   profile that cannot be used is an error that names the file and the problem.
//! - `--mode adaptive` (the default) learns within the run.
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use pinwise_core::preload_stats::{OutputStats, ProcessStats};
use pinwise_report::run::{summary_lines, used_cuda};

/// How the library decides what to pin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    /// Learn within the run, per call site.
    Adaptive,
    /// Behave as adaptive, record, and write a profile for `--mode use`.
    Profile,
    /// Follow a profile written by `--mode profile`.
    Use,
}

impl ModeArg {
    fn as_str(self) -> &'static str {
        match self {
            ModeArg::Adaptive => "adaptive",
            ModeArg::Profile => "profile",
            ModeArg::Use => "use",
        }
    }
}

/// Arguments of `pinwise run`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    pinwise run --mode profile -- ./train --epochs 1\n  \
    pinwise run --mode use -- ./train --epochs 10\n  \
    pinwise run --budget 8G -o run.json -- python3 train.py\n\n\
    The library is configured through PINWISE_* environment variables, which this command \
    sets (see crates/pinwise-preload/src/lib.rs); PINWISE_LOG_LEVEL (warn by default) \
    applies with --log.")]
pub struct RunArgs {
    /// How pinned requests are decided.
    #[arg(long, value_enum, default_value_t = ModeArg::Adaptive)]
    pub mode: ModeArg,

    /// The profile to write (profile mode) or follow (use mode)
    /// [default: <command>.pinwise-profile.json].
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,

    /// Most bytes pinwise keeps pinned in a process (`8G`, `512MiB`, `25%` of RAM)
    /// [default: a quarter of RAM; and where the program pins 1 MiB or more itself, no more
    /// than its own peak; given, pinwise may pin up to it beside the program's own].
    #[arg(long, value_name = "SIZE")]
    pub budget: Option<String>,

    /// Write the history here (`.json`: JSON, else binary). It is appended to while the
    /// program runs (see --flush-every) and completed at exit.
    #[arg(short, long, value_name = "HISTORY")]
    pub output: Option<PathBuf>,

    /// Append what changed to the history every TIME while the program runs (`500ms`,
    /// `2s`; 10ms to 1h; `0`: only at exit), so that a program killed without warning
    /// (SIGKILL, the OOM killer) keeps its history up to the last flush. A JSON history's
    /// appends go to HISTORY.partial (binary) until the JSON file is written.
    #[arg(long, value_name = "TIME", default_value = "1s", value_parser = super::killed::parse_flush_every)]
    pub flush_every: String,

    /// The preload library [default: libpinwise_preload.so next to this binary, else in
    /// <prefix>/lib/pinwise/ or <prefix>/lib/ for a binary in <prefix>/bin/].
    #[arg(long, value_name = "PATH", env = "PINWISE_PRELOAD_LIB")]
    pub preload: Option<PathBuf>,

    /// Serve every pinned request pinned (still from the pool): never pageable.
    #[arg(long)]
    pub keep_pinned: bool,

    /// Serve the program's pinned requests of 1 MiB or more pageable first (adaptive and
    /// profile modes), registered in place once their own copies show them hot: cold pinned
    /// buffers stay pageable. Opt-in: a kernel that reads pinned memory through its host
    /// pointer faults on a buffer served pageable, and cold buffers copy at pageable speed.
    #[arg(long, conflicts_with = "keep_pinned")]
    pub pageable_first: bool,

    /// Never register the program's own pageable buffers.
    #[arg(long)]
    pub no_promote: bool,

    /// Serve the program's large pinned requests from the node's pinned pool (`pinwise
    /// pool serve`) listening at SOCKET [default: $PINWISE_POOL_SOCKET, else
    /// /run/pinwise/pool.sock]: their pages are pinned and mapped on the GPU once, by the
    /// service, which does their host<->device copies (an asynchronous copy on such a
    /// buffer becomes synchronous). Without a service, or when it refuses or goes away,
    /// the program is served in-process as without --pool (counted in the summary).
    #[arg(long, value_name = "SOCKET", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    pub pool: Option<PathBuf>,

    /// With --pool: the smallest pinned request served from the pool (`8MiB`, `8M`,
    /// `8388608`; the grammar of PINWISE_POOL_MIN).
    #[arg(long, value_name = "SIZE", default_value = "8M", value_parser = parse_pool_min)]
    pub pool_min: u64,

    /// Record malloc-family allocations of at least this size (`64K`, `1M`, `4096`) as
    /// pageable allocations with their call site and stack.
    #[arg(long, value_name = "SIZE", default_value = "64K")]
    pub min_tracked: String,

    /// Do not record malloc-family allocations (copies into them are then recorded against
    /// buffers of unknown origin).
    #[arg(long)]
    pub no_malloc_hooks: bool,

    /// Record allocations with their call site only, without call stacks.
    #[arg(long)]
    pub no_stacks: bool,

    /// Do not store function names in the history when the program ends (reports then
    /// name sites only where the binaries can still be read).
    #[arg(long)]
    pub no_symbols: bool,

    /// Replace output files that exist already (without it, pinwise refuses before starting
    /// the program).
    #[arg(long)]
    pub force: bool,

    /// Also write the summary as JSON (per process and totals).
    #[arg(long, value_name = "FILE")]
    pub stats_json: Option<PathBuf>,

    /// A signal (USR1, USR2) that makes the library write its outputs while the program
    /// runs (for programs that never exit normally).
    #[arg(long, value_name = "SIGNAL")]
    pub dump_signal: Option<String>,

    /// Exit with status 125 if pinwise itself failed (an output not written) instead of
    /// passing the program's exit status through (failures are said on stderr either way).
    #[arg(long)]
    pub strict: bool,

    /// Log what the library does to this file (`stderr` for the program's stderr).
    #[arg(long, value_name = "FILE")]
    pub log: Option<String>,

    /// Fingerprint the bytes of each host-device copy to find redundant transfers (the
    /// same bytes sent again to a device range that holds them, a result fetched
    /// unchanged): `sampled` hashes 8 cache lines spread over the buffer (a change between
    /// them goes unseen), `full` every byte (costs a pass over each buffer), `off` nothing
    /// (the default: sampled costs about a microsecond per copy, a checked read of the
    /// sampled lines). Asynchronous downloads are hashed by a background thread once their
    /// stream reached them (an event recorded after the copy; the program never waits).
    #[arg(long, value_name = "MODE", default_value = "off", value_parser = ["off", "sampled", "full"])]
    pub fingerprint: String,

    /// In sampled mode, the fraction of copies (0 to 1) also hashed in full to measure how
    /// often the sampled fingerprint is wrong (the report states it); copies above 4 MiB
    /// only with 1.
    #[arg(long, value_name = "FRACTION", default_value = "0.0625", value_parser = parse_fraction)]
    pub fingerprint_check: f64,

    /// The command and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<OsString>,
}

/// The pool threshold: the preload's grammar for `PINWISE_POOL_MIN`
/// ([`pinwise_core::pool_use::parse_min_bytes`]).
fn parse_pool_min(v: &str) -> Result<u64, String> {
    pinwise_core::pool_use::parse_min_bytes(v).map_err(|e| e.to_string())
}

/// The socket `--pool` names: its value, else the pool's default.
fn pool_socket(arg: &std::path::Path) -> PathBuf {
    if arg.as_os_str().is_empty() {
        pinwise_pool::default_socket()
    } else {
        arg.to_path_buf()
    }
}

/// A fraction between 0 and 1.
pub(crate) fn parse_fraction(v: &str) -> Result<f64, String> {
    match v.trim().parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("{v:?} is not a fraction between 0 and 1")),
    }
}

/// Runs `pinwise run`.
pub fn run(args: RunArgs) -> Result<ExitCode> {
    let preload = super::preload_path::locate(args.preload.as_deref())?;
    let program = args.command[0].clone();
    let program_name = Path::new(&program)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "program".into());
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let absolute = |p: &Path| {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            cwd.join(p)
        }
    };

    let profile = match args.mode {
        ModeArg::Adaptive => args.profile.as_deref().map(absolute),
        ModeArg::Profile | ModeArg::Use => Some(absolute(
            args.profile
                .clone()
                .unwrap_or_else(|| PathBuf::from(format!("{program_name}.pinwise-profile.json")))
                .as_path(),
        )),
    };
    if args.mode == ModeArg::Use {
        let path = profile.as_ref().expect("use mode has a profile path");
        let p = pinwise_core::Profile::load(path).with_context(|| {
            format!(
                "--mode use: the profile {} cannot be used (make one with `pinwise run --mode \
                 profile -- CMD`)",
                path.display()
            )
        })?;
        tracing::info!(entries = p.entries.len(), "profile read");
    }
    if args.mode == ModeArg::Profile {
        let path = profile.as_ref().expect("profile mode has a profile path");
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.is_dir() {
                bail!(
                    "--mode profile: cannot write the profile {}: {} is not a directory",
                    path.display(),
                    dir.display()
                );
            }
        }
    }
    // Sizes are kept as written (the library reads them with the same parser) and checked
    // here: a bad one is a usage error.
    let usage = super::outputs::usage;
    if let Some(b) = &args.budget {
        pinwise_core::units::parse_size_or_ram_percent(b)
            .map_err(|e| usage(format!("--budget: {e}")))?;
    }
    if pinwise_core::units::parse_size_or_ram_percent(&args.min_tracked)
        .map_err(|e| usage(format!("--min-tracked: {e}")))?
        == 0
    {
        return Err(super::outputs::usage(
            "--min-tracked: the size must be at least 1 byte (--no-malloc-hooks turns tracking off)",
        ));
    }
    let history = args.output.as_deref().map(absolute);
    // Every output is checked before the program starts.
    if let Some(sig) = &args.dump_signal {
        super::outputs::check_dump_signal(sig)?;
    }
    let mut outputs: Vec<(&str, PathBuf)> = Vec::new();
    outputs.extend(history.clone().map(|p| ("-o", p)));
    outputs.extend(
        args.stats_json
            .as_deref()
            .map(|p| ("--stats-json", absolute(p))),
    );
    if args.mode == ModeArg::Profile {
        outputs.extend(profile.clone().map(|p| ("--profile", p)));
    }
    for (flag, path) in &outputs {
        // Profile mode rewrites its profile: learning again is what it is for.
        let force = args.force || *flag == "--profile";
        super::outputs::check_before_run(flag, path, force)?;
    }
    if let Some(log) = args.log.as_deref().filter(|l| *l != "stderr") {
        pinwise_core::safe_file::open_append(&absolute(Path::new(log))).with_context(|| {
            format!("--log {log}: the file cannot be written (checked before starting the program)")
        })?;
    }

    super::supervise::remove_stale_dirs(&std::env::temp_dir());
    let stats_dir = StatsDir::create()?;
    let mut command = Command::new(&program);
    command.args(&args.command[1..]);
    let ld_preload = match std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        Some(old) => {
            let mut v = preload.clone().into_os_string();
            v.push(":");
            v.push(old);
            v
        }
        None => preload.clone().into_os_string(),
    };
    command
        .env("LD_PRELOAD", ld_preload)
        .env("PINWISE_MODE", args.mode.as_str())
        .env("PINWISE_STATS_DIR", stats_dir.path())
        .env("PINWISE_LAUNCHER_PID", std::process::id().to_string());
    for (name, value) in [
        (
            "PINWISE_PROFILE",
            profile.as_ref().map(|p| p.as_os_str().to_owned()),
        ),
        (
            "PINWISE_HISTORY",
            history.as_ref().map(|p| p.as_os_str().to_owned()),
        ),
        ("PINWISE_BUDGET", args.budget.as_ref().map(OsString::from)),
        (
            "PINWISE_DUMP_SIGNAL",
            args.dump_signal.as_ref().map(OsString::from),
        ),
        ("PINWISE_LOG", args.log.as_ref().map(OsString::from)),
        (
            "PINWISE_FLUSH_EVERY",
            history.as_ref().map(|_| OsString::from(&args.flush_every)),
        ),
        (
            "PINWISE_POOL",
            args.pool
                .as_deref()
                .map(|p| pool_socket(p).into_os_string()),
        ),
        (
            "PINWISE_POOL_MIN",
            args.pool
                .as_ref()
                .map(|_| OsString::from(args.pool_min.to_string())),
        ),
    ] {
        match value {
            Some(v) => command.env(name, v),
            None => command.env_remove(name),
        };
    }
    command.env(
        "PINWISE_KEEP_PINNED",
        if args.keep_pinned { "1" } else { "0" },
    );
    command.env(
        "PINWISE_PAGEABLE_FIRST",
        if args.pageable_first { "1" } else { "0" },
    );
    command.env(
        "PINWISE_PROMOTE_PAGEABLE",
        if args.no_promote { "0" } else { "1" },
    );
    command
        .env("PINWISE_MIN_TRACKED", &args.min_tracked)
        .env(
            "PINWISE_MALLOC_HOOKS",
            if args.no_malloc_hooks { "0" } else { "1" },
        )
        .env("PINWISE_STACKS", if args.no_stacks { "0" } else { "1" })
        .env("PINWISE_FINGERPRINT", &args.fingerprint)
        .env(
            "PINWISE_FINGERPRINT_CHECK",
            args.fingerprint_check.to_string(),
        );

    super::supervise::die_with_parent(&mut command);
    let started = Instant::now();
    let mut child = command
        .spawn()
        .with_context(|| format!("cannot run {}", program.to_string_lossy()))?;
    // Ctrl-C goes to the whole foreground group: the command decides what to do with it,
    // and pinwise stays to report; a signal sent to pinwise alone is passed on to the
    // command (see `supervise`).
    let forwarding = super::supervise::Forwarding::to(child.id());
    let status = child.wait().context("waiting for the command failed")?;
    let ended_ns = pinwise_core::units::monotonic_ns();
    drop(forwarding);
    let elapsed = started.elapsed();

    let (mut processes, raw): (Vec<ProcessStats>, Vec<serde_json::Value>) =
        stats_dir.read().into_iter().unzip();
    adopt_single_child_outputs(
        &mut processes,
        history.as_deref(),
        profile.as_deref(),
        args.mode,
    );
    if !args.no_symbols {
        for p in &processes {
            if let (Some(path), true) = (&p.history.path, p.history.written) {
                let profile = p
                    .profile
                    .path
                    .as_deref()
                    .filter(|_| p.profile.written && args.mode == ModeArg::Profile);
                if let Err(e) = store_symbols(Path::new(path), profile.map(Path::new)) {
                    eprintln!(
                        "pinwise: names not stored in {path}: {}",
                        super::outputs::render_error(&e)
                    );
                }
            }
        }
    }
    let how = match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!("was killed by signal {s}"),
        _ => "ended".to_string(),
    };
    eprintln!(
        "pinwise: `{}` {how} after {:.2} s (mode {})",
        program.to_string_lossy(),
        elapsed.as_secs_f64(),
        args.mode.as_str()
    );
    for line in summary_lines(&processes) {
        eprintln!("pinwise: {line}");
    }
    let mut failures = super::outputs::Failures::default();
    for p in &processes {
        for out in [&p.history, &p.profile] {
            if let (Some(path), false, Some(e)) = (&out.path, out.written, &out.error) {
                // The summary above said it ("... NOT written to ...").
                failures.already_said(format!("{path} not written: {e}"));
            }
        }
    }
    // The started process wrote no statistics: it was killed without warning (SIGKILL),
    // after the library appended its history while it ran.
    let mut salvaged = false;
    if let (Some(path), false) = (&history, processes.iter().any(|p| p.top_process)) {
        let name = |h: &mut pinwise_core::MemHistory| {
            if !args.no_symbols {
                name_sites(h);
            }
        };
        match super::killed::salvage(path, ended_ns, name) {
            Ok(Some(s)) => {
                salvaged = true;
                eprintln!(
                    "pinwise: the history {} holds what was flushed while the program ran \
                     ({} records{}{}); later events were lost",
                    path.display(),
                    s.records,
                    s.last_event_age
                        .map(|a| format!(", the newest {:.2} s before it ended", a.as_secs_f64()))
                        .unwrap_or_default(),
                    s.cut
                        .map(|c| format!("; the file was cut mid-write, whole appends kept: {c}"))
                        .unwrap_or_default(),
                );
            }
            Ok(None) => {}
            Err(e) => failures.add(format!("the history {}: {e:#}", path.display())),
        }
    }
    if processes.is_empty() {
        for (what, path) in [
            ("history", history.as_deref().filter(|_| !salvaged)),
            ("profile", profile.as_deref()),
        ] {
            if let (Some(path), true) = (path, what == "history" || args.mode == ModeArg::Profile) {
                failures.add(format!(
                    "the {what} {} was NOT written: the program ended before pinwise could \
                     write it",
                    path.display()
                ));
            }
        }
    }
    if let Some(path) = &args.stats_json {
        let run = pinwise_report::run::RunInfo {
            command: args
                .command
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            mode: args.mode.as_str().to_string(),
            exit_code: status.code(),
            signal: status.signal(),
            elapsed_s: elapsed.as_secs_f64(),
        };
        let doc = pinwise_report::run::summary_json(&run, &processes, &raw);
        if let Err(e) =
            pinwise_core::safe_file::write_bytes(path, &serde_json::to_vec_pretty(&doc)?)
        {
            failures.add(format!("--stats-json {}: {e}", path.display()));
        }
    }
    drop(stats_dir);
    if args.strict && failures.any() {
        return Ok(ExitCode::from(super::outputs::STRICT_EXIT));
    }

    if let Some(sig) = status.signal() {
        // Die the same way, so that a shell sees what the command did (a signal whose
        // default is to be ignored falls through to the exit status below).
        let _ = signal_hook::low_level::emulate_default_handler(sig);
        return Ok(ExitCode::from((128 + sig).clamp(0, 255) as u8));
    }
    Ok(ExitCode::from(
        status.code().unwrap_or(1).clamp(0, 255) as u8
    ))
}

/// A temporary directory for the processes' statistics, removed when dropped.
struct StatsDir(PathBuf);

impl StatsDir {
    fn create() -> Result<StatsDir> {
        let base = std::env::temp_dir();
        for attempt in 0..100u32 {
            let dir = base.join(format!(
                "pinwise-run-{}-{}-{attempt}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.subsec_nanos())
                    .unwrap_or(0)
            ));
            match pinwise_core::safe_file::create_private_dir(&dir) {
                Ok(()) => return Ok(StatsDir(dir)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot create {}", dir.display()))
                }
            }
        }
        bail!("cannot create a temporary directory in {}", base.display())
    }

    fn path(&self) -> &Path {
        &self.0
    }

    /// Every process's statistics, the started process first, then by pid, each with the
    /// file as the library wrote it (fields this version does not know included, for
    /// `--stats-json`). Files that cannot be read are reported and skipped.
    fn read(&self) -> Vec<(ProcessStats, serde_json::Value)> {
        let mut out = Vec::new();
        let Ok(entries) = std::fs::read_dir(&self.0) else {
            return out;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            match std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| {
                    let raw: serde_json::Value =
                        serde_json::from_slice(&b).map_err(|e| e.to_string())?;
                    let s: ProcessStats =
                        serde_json::from_value(raw.clone()).map_err(|e| e.to_string())?;
                    Ok((s, raw))
                }) {
                Ok(s) => out.push(s),
                Err(e) => eprintln!("pinwise: statistics {} unreadable: {e}", path.display()),
            }
        }
        out.sort_by_key(|(s, _)| (!s.top_process, s.pid));
        out
    }
}

impl Drop for StatsDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Stores in the history at `path` the names of the call sites it refers to (resolved now,
/// while the program's files are still there), so that reports made elsewhere name them;
/// and in the profile the same run wrote, the names of its sites (for `pinwise diff`).
fn store_symbols(path: &Path, profile: Option<&Path>) -> Result<()> {
    let mut history = pinwise_core::load_history(path)?;
    name_sites(&mut history);
    pinwise_core::save_history(&history, path, pinwise_core::DumpFormat::from_path(path))?;
    if let Some(profile_path) = profile {
        let mut p = pinwise_core::Profile::load(profile_path)?;
        p.add_symbols(&history);
        p.save(profile_path)?;
    }
    Ok(())
}

/// Stores in `history` the names of the call sites it refers to (resolved now).
fn name_sites(history: &mut pinwise_core::MemHistory) {
    let symbolizer = pinwise_trace::Symbolizer::new();
    let named = history.symbolize_with(|module, offsets| {
        offsets
            .iter()
            .map(|&offset| {
                symbolizer
                    .symbolize(module, offset)
                    .map(|s| pinwise_core::Symbol {
                        function: s.function,
                        file: s.file,
                        line: s.line,
                    })
            })
            .collect()
    });
    tracing::info!(named, "call-site names stored");
}

/// When the started process used no CUDA (a shell, a launcher) and exactly one other process
/// did, that process's history and profile become the main ones.
fn adopt_single_child_outputs(
    processes: &mut [ProcessStats],
    history: Option<&Path>,
    profile: Option<&Path>,
    mode: ModeArg,
) {
    let top_idle = processes.iter().any(|p| p.top_process && !used_cuda(p))
        || !processes.iter().any(|p| p.top_process);
    let busy: Vec<usize> = processes
        .iter()
        .enumerate()
        .filter(|(_, p)| !p.top_process && used_cuda(p))
        .map(|(i, _)| i)
        .collect();
    if !top_idle || busy.len() != 1 {
        return;
    }
    let p = &mut processes[busy[0]];
    let adopt = |out: &mut OutputStats, main: Option<&Path>| {
        if let (Some(main), Some(from), true) = (main, out.path.clone(), out.written) {
            // Renamed onto the file the output path names (its own symlink followed, another
            // user's refused: pinwise_core::safe_file's rule).
            let target = pinwise_core::safe_file::resolve_output(main);
            if target.is_ok_and(|t| std::fs::rename(&from, t).is_ok()) {
                out.path = Some(main.display().to_string());
            }
        }
    };
    adopt(&mut p.history, history);
    if mode == ModeArg::Profile {
        adopt(&mut p.profile, profile);
    }
}
