//! `pinwise trace`: trace an unmodified CUDA process with eBPF, write its history, and
//! print a short summary.
//!
//! `pinwise trace -- CMD ARGS...` launches CMD traced from its first instruction (its exit
//! status is passed through); `pinwise trace --pid N [--duration 30s]` traces a running
//! process until it exits, the duration ends, or Ctrl-C. Whatever ends the trace, what was
//! seen is written. Everything pinwise prints goes to stderr, so that a traced command's
//! stdout stays its own; `--summary-json FILE` writes the summary for scripts.
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use pinwise_core::history::Summary;
use pinwise_core::units::{format_size, parse_duration, parse_size};
use pinwise_core::{CostModel, Direction, DumpFormat};
use pinwise_trace::agent::{TraceStats, TracerAgent, TracerConfig};
use pinwise_trace::libs::LibraryOverrides;
use pinwise_trace::loader::{BpfConfig, KernelHookStatus};
use pinwise_trace::{caps, Symbolizer};
use signal_hook::consts::{SIGINT, SIGTERM};

/// History file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FormatArg {
    /// JSON (readable; the schema is in pinwise-core).
    Json,
    /// Compact binary (appendable; `pinwise report` reads both).
    Bin,
}

/// Arguments of `pinwise trace`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  pinwise trace -- ./my_cuda_app --size 64M\n  \
                  pinwise trace --pid 4242 --duration 30s -o run.json\n\n\
                  Needs root (or CAP_BPF and CAP_PERFMON)."
)]
pub struct TraceArgs {
    /// Trace this running process (and the children it forks from now on).
    #[arg(long, value_name = "PID", conflicts_with = "command")]
    pub pid: Option<u32>,

    /// Stop after this long (`30s`, `2m`, `500ms`; a bare number is seconds). Default: until
    /// the process exits, or Ctrl-C.
    #[arg(long, value_parser = parse_duration, value_name = "TIME")]
    pub duration: Option<Duration>,

    /// Where to write the history [default: pinwise-trace-<PID>.json or .bin]. Its format
    /// follows the name: JSON for `.json`, else the compact binary format.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Format of the history file, whatever its name [default: from -o's extension, JSON
    /// without -o].
    #[arg(long, value_enum)]
    pub format: Option<FormatArg>,

    /// Replace output files that exist already (without it, pinwise refuses before tracing).
    #[arg(long)]
    pub force: bool,

    /// Probe this libcuda instead of looking for it.
    #[arg(long, value_name = "PATH")]
    pub libcuda: Option<PathBuf>,

    /// Probe this libcudart (besides the executable's own symbols) instead of looking.
    #[arg(long, value_name = "PATH")]
    pub libcudart: Option<PathBuf>,

    /// Size of the BPF ring buffer (`256K`, `4M`, ...; rounded up to a power of two).
    /// Events that find it full are dropped and counted, never waited for.
    #[arg(long, value_parser = parse_size, default_value = "4M", value_name = "BYTES")]
    pub ringbuf_size: u64,

    /// Also write the history every TIME while tracing (binary: appended; JSON: rewritten).
    #[arg(long, value_parser = parse_duration, value_name = "TIME")]
    pub dump_every: Option<Duration>,

    /// Anonymous mappings from this size up become tracked pageable allocations.
    #[arg(long, value_parser = parse_size, default_value = "1M", value_name = "BYTES")]
    pub min_mmap: u64,

    /// Record user page faults on tracked memory (costly: every first touch is an event).
    #[arg(long)]
    pub page_faults: bool,

    /// Do not try the kernel hooks into the nvidia module (fentry on os_lock_user_pages).
    #[arg(long)]
    pub no_kernel_hooks: bool,

    /// Do not capture the user call chain (up to 32 frames) of allocations. Chains are
    /// walked by frame pointers: they stop, or go astray, at code built without them.
    #[arg(long)]
    pub no_stacks: bool,

    /// With --malloc: unwind the call chains of malloc-family allocations with the
    /// modules' .eh_frame (BPF copies 16 KiB of the thread's stack per allocation event),
    /// so that chains go through code built without frame pointers (Rust's standard
    /// library, most distributions' C libraries). The ring buffer is then at least 64 MiB;
    /// while it is half full, allocations keep their frame-pointer chains. Off by default:
    /// a larger copy per event (bench/results/trace-dwarf-stacks.md).
    #[arg(long, conflicts_with = "no_stacks")]
    pub dwarf_stacks: bool,

    /// Probe libc's malloc family (malloc, calloc, realloc, free, posix_memalign,
    /// aligned_alloc, memalign, valloc), and the same entry points of an allocator linked
    /// into the executable or mapped as a library (jemalloc: `_rjem_*` as tikv-jemallocator
    /// builds it, or unprefixed with mallocx/rallocx/sdallocx; mimalloc: `mi_*`; an
    /// executable's own malloc): every block of --malloc-min or more becomes a pageable
    /// allocation with its call site and stack. Off by default: a uprobe is a trap on every
    /// call, small ones included (see bench/results/trace-malloc-probes.md).
    #[arg(long)]
    pub malloc: bool,

    /// With --malloc: blocks smaller than this are not recorded (filtered in BPF).
    #[arg(long, value_parser = parse_size, default_value = "64K", value_name = "BYTES")]
    pub malloc_min: u64,

    /// Fingerprint copies to find redundant transfers (the same bytes sent again to a device
    /// range that holds them, a result fetched unchanged), in BPF, from the host buffer: an
    /// upload's source at its entry, a synchronous download's destination at its return.
    /// `sampled` (what a bare `--fingerprint` means) reads 8 cache lines spread over the
    /// buffer (a change between them goes unseen); `full` hashes every byte too, in the
    /// copying thread's probe (4 KiB reads; copies above --fingerprint-full-max are
    /// sampled only, and counted); `off` nothing. Asynchronous downloads (their bytes arrive
    /// later) are hashed at the return of the stream, event or context sync call (or query
    /// answering success) that completed them; those whose completion is not seen are
    /// counted as skipped. Each download then costs a return probe too, and each sync call
    /// two probes. A bare `--fingerprint` right before the command needs `--` between
    /// them (`--fingerprint -- ./app`), else the command is read as the mode.
    #[arg(
        long,
        value_name = "MODE",
        num_args = 0..=1,
        default_value = "off",
        default_missing_value = "sampled",
        value_parser = ["off", "sampled", "full"]
    )]
    pub fingerprint: String,

    /// In sampled mode, the fraction of copies (0 to 1) also hashed in full to measure how
    /// often the sampled fingerprint is wrong (the report states it); copies above 4 MiB
    /// only with 1.
    #[arg(long, value_name = "FRACTION", default_value = "0.0625", value_parser = super::run::parse_fraction)]
    pub fingerprint_check: f64,

    /// With --fingerprint full: copies larger than this are fingerprinted by their sampled
    /// lines only (the full hash runs in the copying thread, which waits for it).
    #[arg(long, value_parser = parse_size, default_value = "256M", value_name = "BYTES")]
    pub fingerprint_full_max: u64,

    /// One copy in N, at random, carries its call chain too (0: none, 1: every copy).
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub copy_stacks: u32,

    /// Hotspots shown in the summary.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub top: usize,

    /// Also write the summary (counts, bytes by direction, drops, probe costs) as JSON.
    #[arg(long, value_name = "FILE")]
    pub summary_json: Option<PathBuf>,

    /// Exit with status 125 if pinwise itself failed (an output not written) instead of
    /// passing the command's exit status through (failures are said on stderr either way).
    #[arg(long)]
    pub strict: bool,

    /// The command to launch and trace, and its arguments (`--` before it is optional, as
    /// for `pinwise run`).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<OsString>,
}

/// Set by SIGINT/SIGTERM once [`catch_interrupts`] ran.
static INTERRUPTED: OnceLock<Arc<AtomicBool>> = OnceLock::new();
/// Once set, SIGINT/SIGTERM do their default action again (end pinwise).
static DEFAULT_INTERRUPTS: OnceLock<Arc<AtomicBool>> = OnceLock::new();

fn interrupted() -> bool {
    INTERRUPTED
        .get()
        .is_some_and(|flag| flag.load(Ordering::SeqCst))
}

/// Ctrl-C and SIGTERM end the trace (what was seen is written) instead of killing pinwise:
/// signal-hook sets a flag; its default action comes back with
/// [`restore_default_interrupts`].
fn catch_interrupts() -> Result<()> {
    let flag = INTERRUPTED.get_or_init(Arc::default);
    let default = DEFAULT_INTERRUPTS.get_or_init(Arc::default);
    for signal in [SIGINT, SIGTERM] {
        // Registered first, so that it runs first: once asked for, the default action.
        signal_hook::flag::register_conditional_default(signal, Arc::clone(default))
            .and_then(|_| signal_hook::flag::register(signal, Arc::clone(flag)))
            .with_context(|| format!("cannot catch signal {signal}"))?;
    }
    Ok(())
}

fn status(msg: impl AsRef<str>) {
    eprintln!("pinwise trace: {}", msg.as_ref());
}

/// Why the trace ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ending {
    CommandExited(ExitStatus),
    ProcessExited,
    Duration,
    Interrupted,
}

/// Runs `pinwise trace`.
pub fn run(args: TraceArgs) -> Result<ExitCode> {
    if args.pid.is_none() && args.command.is_empty() {
        return Err(super::outputs::usage(
            "nothing to trace: give a command (pinwise trace ./app ARGS) or --pid N",
        ));
    }
    let privileges = caps::check_privileges();
    if !privileges.is_ok() {
        bail!("{}", privileges.detail);
    }
    if let Some(pid) = args.pid {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            bail!("no process with PID {pid}");
        }
    }
    // 16 KiB of stack per allocation: a larger ring, so that bursts keep their stacks.
    let ringbuf_size = if args.dwarf_stacks {
        args.ringbuf_size.max(64 << 20)
    } else {
        args.ringbuf_size
    };
    let ringbuf_bytes = u32::try_from(ringbuf_size)
        .ok()
        .filter(|&b| b <= 1 << 30)
        .ok_or_else(|| anyhow::anyhow!("--ringbuf-size {} is above 1 GiB", args.ringbuf_size))?;
    let config = TracerConfig {
        bpf: BpfConfig {
            ringbuf_bytes,
            min_mmap_bytes: args.min_mmap.max(1),
            page_faults: args.page_faults,
            kernel_hooks: !args.no_kernel_hooks,
            alloc_stacks: !args.no_stacks,
            dwarf_stacks: args.dwarf_stacks,
            copy_stack_every: if args.no_stacks { 0 } else { args.copy_stacks },
            malloc_min_bytes: args.malloc_min.max(1),
            fingerprint: args.fingerprint != "off",
            fingerprint_full: args.fingerprint == "full",
            fingerprint_check_ppm: (args.fingerprint_check * 1e6) as u32,
            fingerprint_full_max_bytes: args.fingerprint_full_max,
            ..BpfConfig::default()
        },
        libraries: LibraryOverrides {
            libcuda: args.libcuda.clone(),
            libcudart: args.libcudart.clone(),
        },
        malloc: args.malloc,
        ..TracerConfig::default()
    };
    // Attached: memory allocated before the attach may have been pinned then; no records
    // (and so no advice) for memory whose allocation was not seen.
    let config = if args.pid.is_some() {
        config.for_attach()
    } else {
        config
    };
    let format = match (args.format, &args.output) {
        (Some(FormatArg::Json), _) | (None, None) => DumpFormat::Json,
        (Some(FormatArg::Bin), _) => DumpFormat::Binary,
        (None, Some(path)) => super::outputs::history_format_of(path),
    };
    // Every output is checked before anything starts (the default history name depends on
    // the PID, unknown yet: its directory is checked).
    let planned = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from("pinwise-trace.json"));
    super::outputs::check_before_run("-o", &planned, args.force || args.output.is_none())?;
    if let Some(path) = &args.summary_json {
        super::outputs::check_before_run("--summary-json", path, args.force)?;
    }
    catch_interrupts()?;
    let mut agent = TracerAgent::new(config);
    let started = Instant::now();

    let mut child = None;
    let (target_pid, what) = match args.pid {
        Some(pid) => {
            agent
                .start_pid(pid)
                .with_context(|| format!("cannot trace PID {pid}"))?;
            (pid, format!("PID {pid}"))
        }
        None => {
            let mut command = Command::new(&args.command[0]);
            command.args(&args.command[1..]);
            let c = agent
                .launch(&mut command)
                .with_context(|| format!("cannot trace `{}`", args.command[0].to_string_lossy()))?;
            let pid = c.id();
            child = Some(c);
            (pid, format!("`{}` (PID {pid})", shell_words(&args.command)))
        }
    };
    let output = args.output.clone().unwrap_or_else(|| {
        PathBuf::from(format!(
            "pinwise-trace-{target_pid}.{}",
            if format == DumpFormat::Json {
                "json"
            } else {
                "bin"
            }
        ))
    });
    if let Some(every) = args.dump_every {
        agent
            .dump_every(&output, format, every)
            .context("setting up periodic dumps")?;
    }
    let stats_now = agent.stats();
    status(format!(
        "tracing {what}: {} uprobes on {} files; kernel hooks: {}",
        stats_now.uprobes,
        stats_now.probed_files.len(),
        hooks_text(stats_now.kernel_hooks.as_ref())
    ));

    let ending = wait_for_end(
        &mut agent,
        child.as_mut(),
        target_pid,
        args.duration,
        started,
    );
    match &ending {
        Ending::Interrupted => status("interrupted: writing what was seen"),
        Ending::ProcessExited if args.pid.is_some() => {
            status(format!("PID {target_pid} exited: writing what was seen"))
        }
        Ending::Duration => status("duration reached"),
        _ => {}
    }
    let stats = agent.stop().context("stopping the tracer")?;
    let elapsed = started.elapsed();
    // The whole history, also after periodic dumps (appended or rewritten while tracing).
    let mut failures = super::outputs::Failures::default();
    let dumped = agent
        .dump(&output, format)
        .with_context(|| format!("writing the history to {}", output.display()));

    let summary = agent.history().read().summary(&CostModel::builtin());
    print_summary(&agent, &summary, &stats, &what, elapsed, args.top);
    match dumped {
        Ok(()) => status(format!("history written to {}", output.display())),
        Err(e) => failures.add(super::outputs::render_error(&e)),
    }
    if let Some(path) = &args.summary_json {
        if let Err(e) = write_summary_json(path, &agent, &summary, &stats, target_pid, elapsed) {
            failures.add(super::outputs::render_error(&e));
        }
    }

    // A launched command's exit status is passed through. After Ctrl-C it normally got
    // the signal too; wait for it either way. A second Ctrl-C now ends pinwise at once
    // (what was seen is written already) and leaves the command running.
    let code = match (ending, child) {
        (Ending::CommandExited(st), _) => exit_code(st),
        (_, Some(mut c)) => {
            restore_default_interrupts();
            if let Ok(None) = c.try_wait() {
                status(format!(
                    "waiting for PID {} to exit (Ctrl-C again to leave it running)",
                    c.id()
                ));
            }
            match c.wait() {
                Ok(st) => exit_code(st),
                Err(_) => ExitCode::FAILURE,
            }
        }
        _ => ExitCode::SUCCESS,
    };
    if args.strict && failures.any() {
        return Ok(ExitCode::from(super::outputs::STRICT_EXIT));
    }
    Ok(code)
}

/// SIGINT and SIGTERM end pinwise again, as if no handler were installed.
fn restore_default_interrupts() {
    if let Some(default) = DEFAULT_INTERRUPTS.get() {
        default.store(true, Ordering::SeqCst);
    }
}

fn wait_for_end(
    agent: &mut TracerAgent,
    mut child: Option<&mut std::process::Child>,
    pid: u32,
    duration: Option<Duration>,
    started: Instant,
) -> Ending {
    loop {
        if interrupted() {
            return Ending::Interrupted;
        }
        if let Some(c) = child.as_deref_mut() {
            if let Ok(Some(st)) = c.try_wait() {
                return Ending::CommandExited(st);
            }
        } else if agent.has_exited(pid) || !Path::new(&format!("/proc/{pid}")).exists() {
            return Ending::ProcessExited;
        }
        if duration.is_some_and(|d| started.elapsed() >= d) {
            return Ending::Duration;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn exit_code(status: ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(code.clamp(0, 255) as u8),
        (None, Some(signal)) => ExitCode::from((128 + signal).clamp(0, 255) as u8),
        _ => ExitCode::FAILURE,
    }
}

fn shell_words(words: &[OsString]) -> String {
    words
        .iter()
        .map(|w| w.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

fn hooks_text(hooks: Option<&KernelHookStatus>) -> String {
    match hooks {
        Some(KernelHookStatus::Attached) => "attached (os_lock_user_pages)".into(),
        Some(KernelHookStatus::NotApplicable(why)) => format!("not applicable ({why})"),
        Some(KernelHookStatus::Refused(err)) => format!("refused by the kernel: {err}"),
        None => "?".into(),
    }
}

fn site_text(agent: &TracerAgent, symbolizer: &Symbolizer, site: pinwise_core::Site) -> String {
    let Some(module) = agent.history().modules().get(site.module) else {
        return "?".into();
    };
    let name = Path::new(&module.path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| module.path.clone());
    let place = format!("{name}+{:#x}", site.offset);
    match symbolizer.symbolize(&module, site.offset) {
        Some(sym) => format!("{place} {sym}"),
        None => place,
    }
}

fn print_summary(
    agent: &TracerAgent,
    summary: &Summary,
    stats: &TraceStats,
    what: &str,
    elapsed: Duration,
    top: usize,
) {
    if stats.cuda_standin {
        status(
            "the libcuda traced is pinwise's CPU stand-in (TEST FIXTURE: not a GPU; nothing \
             here is a GPU figure)",
        );
    }
    status(format!(
        "{what}: {:.2} s, {} events, {} allocations, {} dropped (ring buffer full)",
        elapsed.as_secs_f64(),
        stats.records,
        summary.records,
        stats.ringbuf_drops
    ));
    let dirs: Vec<String> = Direction::ALL
        .iter()
        .map(|d| {
            let all = summary.by_direction[d.index()].all;
            format!(
                "{} {} ({})",
                d.as_str(),
                all.transfers,
                format_size(all.bytes)
            )
        })
        .collect();
    status(format!(
        "transfers: {}; pageable share of host<->device bytes: {:.1} %",
        dirs.join(", "),
        summary.pageable_share * 100.0
    ));
    if let Some(a) = &stats.attach {
        let stat = *agent.history().read().stats();
        let unknown: u64 = [Direction::HtoD, Direction::DtoH]
            .iter()
            .map(|d| {
                let all = stat.transfers[d.index()].transfers;
                all.saturating_sub(summary.by_direction[d.index()].attributed.transfers())
            })
            .sum();
        status(format!(
            "attached to PID {}: the driver had pinned {} in {} mappings before the attach \
             ({} of them copied since, recorded as pinned allocations without a call site); \
             {} host<->device transfers touched memory whose allocation the trace did not \
             see (made before the attach, or from the heap), whose pinned state cannot be \
             known: they are counted, and left out of any advice",
            a.pid,
            format_size(a.pinned_bytes),
            a.pinned_mappings,
            a.pinned_reported,
            unknown
        ));
    }
    let symbolizer = Symbolizer::new();
    let hot = agent.hotspots(top);
    if !hot.is_empty() {
        status("top hotspots (transfers, bytes, size, kind, call site):");
        for (i, a) in hot.iter().enumerate() {
            status(format!(
                "  {}. {:>6} transfers {:>10}  {:>10} {:<12} #{} {}",
                i + 1,
                a.transfer_count,
                format_size(a.bytes_transferred),
                format_size(a.size),
                a.kind.as_str(),
                a.tag.call_no,
                site_text(agent, &symbolizer, a.tag.site)
            ));
        }
    }
    let costs: Vec<String> = stats
        .program_costs
        .iter()
        .filter_map(|c| {
            Some(format!(
                "{} {:.0} ns x {}",
                c.program,
                c.ns_per_run()?,
                c.run_count
            ))
        })
        .collect();
    if !costs.is_empty() {
        status(format!(
            "BPF cost per run (kernel side, all processes): {}",
            costs.join(", ")
        ));
    } else if let Some(why) = &stats.program_costs_unavailable {
        status(format!("BPF cost unavailable: {why}"));
    }
    let lost = stats.pending_full + stats.returns_without_entry + stats.decode_errors;
    if lost > 0 || stats.user_read_failures > 0 {
        status(format!(
            "incomplete records: {} calls whose entry or return was missed, {} failed reads \
             of the traced process's memory, {} undecodable records",
            stats.pending_full + stats.returns_without_entry,
            stats.user_read_failures,
            stats.decode_errors
        ));
    }
    status(format!(
        "tracer memory: RSS {} (peak {})",
        format_size(stats.tracer_rss_bytes),
        format_size(stats.tracer_peak_rss_bytes)
    ));
}

/// `format` of `pinwise trace --summary-json` (`schemas/trace-summary.schema.json`).
pub const TRACE_SUMMARY_FORMAT: &str = "pinwise-trace-summary";
/// `version` of `pinwise trace --summary-json` (files without one predate it, and had
/// `summary.by_direction` as a positional array).
pub const TRACE_SUMMARY_VERSION: u32 = 1;

fn write_summary_json(
    path: &Path,
    agent: &TracerAgent,
    summary: &Summary,
    stats: &TraceStats,
    pid: u32,
    elapsed: Duration,
) -> Result<()> {
    let symbolizer = Symbolizer::new();
    let hotspots: Vec<serde_json::Value> = agent
        .hotspots(usize::MAX)
        .iter()
        .map(|a| {
            let module = agent.history().modules().get(a.tag.site.module);
            serde_json::json!({
                "pid": a.pid,
                "start": a.start,
                "size": a.size,
                "kind": pinwise_report::json::snake_case(&format!("{:?}", a.kind)),
                "state": pinwise_report::json::snake_case(&format!("{:?}", a.state)),
                "module": module.as_ref().map(|m| m.key()),
                "module_path": module.as_ref().map(|m| m.path.clone()),
                "offset": a.tag.site.offset,
                "call_no": a.tag.call_no,
                "transfer_count": a.transfer_count,
                "bytes_transferred": a.bytes_transferred,
                "by_direction": Direction::ALL.iter().map(|d| {
                    let c = a.counters.direction(*d);
                    (d.as_str().to_string(), serde_json::json!({"transfers": c.transfers(), "bytes": c.bytes()}))
                }).collect::<serde_json::Map<_, _>>(),
                "site": module.as_ref().and_then(|m| symbolizer.symbolize(m, a.tag.site.offset)),
            })
        })
        .collect();
    let by_direction: serde_json::Map<String, serde_json::Value> = Direction::ALL
        .iter()
        .map(|d| {
            let all = summary.by_direction[d.index()].all;
            (
                d.as_str().to_string(),
                serde_json::json!({"transfers": all.transfers, "bytes": all.bytes}),
            )
        })
        .collect();
    // The history's summary, its directions keyed by name (not by position).
    let mut summary = serde_json::to_value(summary)?;
    summary["by_direction"] = serde_json::Value::Object(
        Direction::ALL
            .iter()
            .map(|d| {
                let s = &summary["by_direction"][d.index()];
                (d.as_str().to_string(), s.clone())
            })
            .collect(),
    );
    let value = serde_json::json!({
        "format": TRACE_SUMMARY_FORMAT,
        "version": TRACE_SUMMARY_VERSION,
        "pid": pid,
        "seconds": elapsed.as_secs_f64(),
        "summary": summary,
        "by_direction": by_direction,
        "tracer": stats,
        "allocations": hotspots,
    });
    let text = serde_json::to_string_pretty(&value)?;
    pinwise_core::safe_file::write_bytes(path, text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}
