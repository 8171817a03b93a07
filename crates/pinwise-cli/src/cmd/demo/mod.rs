//! `pinwise demo`: pinwise's main job, end to end, on a small built-in workload.
//!
//! The workload ([`workload`]) allocates a few hot and cold host buffers per iteration and
//! moves them to and from the device. The demo then runs pinwise on it exactly as a user
//! would, with the same commands:
//!
//! 1. `pinwise trace` records each allocation's life with eBPF (needs root), and
//!    `pinwise report` says where the transfer time goes (text and an HTML page);
//! 2. the workload runs plain, for reference;
//! 3. `pinwise run --mode profile` learns which buffers pay for pinning, and
//!    `pinwise run --mode use` pins only those;
//!
//! and compares the runs: same results (checksums), time, pinned bytes asked versus held.
//! Without a usable libcuda it runs on pinwise's CPU stand-in (a test fixture) and says so
//! in its first line.
mod workload;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, Context, Result};
use pinwise_cuda::Driver;

/// Arguments of `pinwise demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Directory for the demo's files (trace, report, profile, histories) [default: a new
    /// directory under the system's temporary directory].
    #[arg(long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
    /// Iterations of the workload's loop.
    #[arg(long, default_value_t = 3, value_name = "N")]
    iterations: usize,
    /// Size unit of the workload's large buffers in KiB (hot buffers are 2 units, the cold
    /// one 4) [default: 4096, or 256 on the CPU stand-in without root, whose pinning is
    /// limited by RLIMIT_MEMLOCK].
    #[arg(long, value_name = "KIB")]
    unit_kib: Option<usize>,
    /// Skip the eBPF trace step (it needs root).
    #[arg(long)]
    no_trace: bool,
    /// Run the workload itself (what the demo launches under pinwise).
    #[arg(long, hide = true)]
    workload: bool,
}

/// Where libcuda comes from for this demo.
enum Driverside {
    /// A real driver with a GPU.
    Gpu { description: String },
    /// pinwise's CPU stand-in (test fixture), at this `libcuda.so.1` path.
    Standin { libcuda: PathBuf },
}

/// Runs `pinwise demo`.
pub fn run(args: DemoArgs) -> Result<ExitCode> {
    if args.workload {
        let unit = args.unit_kib.unwrap_or(4096) * 1024;
        workload::run(args.iterations, unit)?;
        return Ok(ExitCode::SUCCESS);
    }
    let exe = std::env::current_exe().context("cannot find the pinwise executable")?;
    let out = match &args.out_dir {
        Some(d) => {
            pinwise_core::safe_file::create_private_dir_all(d)
                .with_context(|| format!("cannot create {}", d.display()))?;
            d.clone()
        }
        None => fresh_dir(&std::env::temp_dir(), "pinwise-demo")?,
    };

    let side = choose_driver(&exe, &out)?;
    let root = super::is_root();
    let unit_kib = args.unit_kib.unwrap_or(match (&side, root) {
        (Driverside::Standin { .. }, false) => 256,
        _ => 4096,
    });
    match &side {
        Driverside::Gpu { description } => {
            println!("pinwise demo on {description}");
        }
        Driverside::Standin { libcuda } => {
            println!(
                "pinwise demo on the CPU stand-in for libcuda.so.1 (TEST FIXTURE: no usable \
                 libcuda here; every time below is a fixture figure, not a GPU figure)"
            );
            println!("  stand-in: {}", libcuda.display());
        }
    }
    println!("  files: {}", out.display());
    println!(
        "\nThe workload ({} iterations; each allocates, copies and frees):",
        args.iterations
    );
    for line in workload::describe(unit_kib * 1024) {
        println!("  {line}");
    }

    let workload_args: Vec<OsString> = vec![
        exe.clone().into(),
        "demo".into(),
        "--workload".into(),
        "--iterations".into(),
        args.iterations.to_string().into(),
        "--unit-kib".into(),
        unit_kib.to_string().into(),
    ];
    let env = DemoEnv::new(&side);

    // 1. Trace with eBPF, then report.
    heading(1, "trace it with eBPF: pinwise trace, then pinwise report");
    let trace_file = out.join("trace.json");
    if args.no_trace {
        println!("skipped (--no-trace)");
    } else if !root {
        println!("skipped: `pinwise trace` needs root (or CAP_BPF+CAP_PERFMON); run the demo as root to see it");
    } else {
        let mut trace = vec![
            OsString::from("trace"),
            "-o".into(),
            trace_file.clone().into(),
            "--top".into(),
            "5".into(),
        ];
        if let Driverside::Standin { libcuda } = &side {
            trace.push("--libcuda".into());
            trace.push(libcuda.clone().into());
        }
        trace.push("--".into());
        trace.extend(workload_args.iter().cloned());
        let ok = env.pinwise(&exe, &trace)?.success();
        if ok && trace_file.exists() {
            let html = out.join("report.html");
            env.pinwise(
                &exe,
                &[
                    "report".into(),
                    trace_file.clone().into(),
                    "--top".into(),
                    "6".into(),
                    "--html".into(),
                    html.clone().into(),
                ],
            )?;
            println!("(the same with plots: {})", html.display());
        } else {
            println!("the trace step failed (see above); the demo goes on without it");
        }
    }

    // 2. The workload alone, for reference.
    heading(2, "the workload alone (no pinwise), for reference");
    let plain = env.workload(&workload_args)?;
    println!("{}", plain.describe());

    // 3. Profile, then use.
    heading(
        3,
        "smart pinning: pinwise run --mode profile, then --mode use",
    );
    let profile = out.join("profile.json");
    let mut runs = Vec::new();
    for mode in ["profile", "use"] {
        let stats = out.join(format!("{mode}-stats.json"));
        let history = out.join(format!("{mode}-run.json"));
        let mut run = vec![
            OsString::from("run"),
            "--mode".into(),
            mode.into(),
            "--profile".into(),
            profile.clone().into(),
            "-o".into(),
            history.into(),
            "--stats-json".into(),
            stats.clone().into(),
            "--".into(),
        ];
        run.extend(workload_args.iter().cloned());
        println!(
            "$ pinwise run --mode {mode} --profile {} -- <workload>",
            profile.display()
        );
        let result = env.capture_pinwise(&exe, &run)?;
        let peak = peak_pinned(&stats);
        println!(
            "{}, pinned peak {}",
            result.describe(),
            peak.map_or("unknown".into(), pinwise_core::units::format_size)
        );
        runs.push((mode, result, peak));
    }

    // What it amounts to.
    heading(4, "what pinwise changed");
    let mut same = true;
    for (mode, r, _) in &runs {
        if r.checksum != plain.checksum {
            same = false;
            println!(
                "MISMATCH: the {mode} run's checksum {} differs from the plain run's {}",
                r.checksum, plain.checksum
            );
        }
    }
    if same {
        println!(
            "results: identical in every run (checksum {})",
            plain.checksum
        );
    }
    if let Some((_, used, peak)) = runs.iter().find(|(m, _, _)| *m == "use") {
        let asked = plain.pinned_asked / args.iterations.max(1) as u64;
        println!(
            "pinned memory: the program asks for {} per iteration; under --mode use pinwise held at most {}",
            pinwise_core::units::format_size(asked),
            peak.map_or("unknown".into(), pinwise_core::units::format_size)
        );
        let label = match side {
            Driverside::Standin { .. } => " (CPU stand-in: fixture timings, not GPU figures)",
            Driverside::Gpu { .. } => "",
        };
        println!(
            "time of the workload loop: plain {:.1} ms, under pinwise --mode use {:.1} ms{label}",
            plain.elapsed_ms, used.elapsed_ms
        );
    }
    println!("\nfiles: {}", out.display());
    println!(
        "next: `pinwise report {}` and `pinwise doctor`",
        trace_or_history(&trace_file, &out).display()
    );
    Ok(if same {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// A new directory `<parent>/<prefix>-<pid>` (or `-<pid>-<n>`), made by this call. Never
/// one that already existed: the demo links the libcuda its children load into it, so a
/// directory someone else prepared in a shared temporary directory could hand a demo run
/// as root a library of their choice.
fn fresh_dir(parent: &Path, prefix: &str) -> Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let pid = std::process::id();
    for n in 0..100 {
        let dir = parent.join(match n {
            0 => format!("{prefix}-{pid}"),
            n => format!("{prefix}-{pid}-{n}"),
        });
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot create {}", dir.display())),
        }
    }
    bail!(
        "cannot create a new directory {prefix}-{pid}-<n> in {}: all names taken",
        parent.display()
    )
}

fn trace_or_history(trace: &Path, out: &Path) -> PathBuf {
    if trace.exists() {
        trace.to_path_buf()
    } else {
        out.join("profile-run.json")
    }
}

fn heading(n: usize, text: &str) {
    println!("\n[{n}] {text}");
}

/// A real driver with a device when there is one (and it is not the stand-in); else the
/// stand-in built next to this executable, linked into `out/lib` as `libcuda.so.1`.
fn choose_driver(exe: &Path, out: &Path) -> Result<Driverside> {
    if let Ok(driver) = Driver::shared() {
        if driver.standin_marker().is_none() {
            if let Ok(dev) = driver.device(0) {
                let name = dev.name().unwrap_or_else(|_| "a CUDA device".into());
                let version = driver
                    .version()
                    .map(|v| format!(", CUDA driver API {}.{}", v / 1000, (v % 1000) / 10))
                    .unwrap_or_default();
                return Ok(Driverside::Gpu {
                    description: format!("{name} ({}{version})", driver.path()),
                });
            }
        } else {
            return Ok(Driverside::Standin {
                libcuda: PathBuf::from(driver.path()),
            });
        }
    }
    let dir = exe.parent().context("the executable has no directory")?;
    let standin = dir.join("libpinwise_standin_cuda.so");
    if !standin.exists() {
        bail!(
            "no usable libcuda.so.1 on this machine, and pinwise's CPU stand-in is not built \
             next to {} (build the workspace: cargo build --release --workspace)",
            exe.display()
        );
    }
    let lib = out.join("lib");
    pinwise_core::safe_file::create_private_dir_all(&lib)?;
    let link = lib.join("libcuda.so.1");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&standin, &link)
        .with_context(|| format!("cannot link {} to {}", link.display(), standin.display()))?;
    Ok(Driverside::Standin { libcuda: link })
}

/// The environment the demo's children run in.
struct DemoEnv {
    vars: Vec<(&'static str, OsString)>,
}

impl DemoEnv {
    fn new(side: &Driverside) -> Self {
        let mut vars = Vec::new();
        if let Driverside::Standin { libcuda } = side {
            vars.push(("PINWISE_LIBCUDA", libcuda.clone().into_os_string()));
            let dir = libcuda.parent().map(Path::to_path_buf).unwrap_or_default();
            let mut path = dir.into_os_string();
            if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
                path.push(":");
                path.push(old);
            }
            vars.push(("LD_LIBRARY_PATH", path));
        }
        DemoEnv { vars }
    }

    fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new(program);
        for (k, v) in &self.vars {
            cmd.env(k, v);
        }
        cmd
    }

    /// Runs `pinwise ARGS`, output straight to the terminal.
    fn pinwise(&self, exe: &Path, args: &[OsString]) -> Result<std::process::ExitStatus> {
        println!("$ pinwise {}", shown(args));
        self.command(exe)
            .args(args)
            .status()
            .with_context(|| format!("cannot run {}", exe.display()))
    }

    /// Runs `pinwise ARGS` on the workload; its stderr (pinwise's summary) goes to the
    /// terminal, its stdout is read for the workload's line.
    fn capture_pinwise(&self, exe: &Path, args: &[OsString]) -> Result<WorkloadResult> {
        let output = self
            .command(exe)
            .args(args)
            .stderr(std::process::Stdio::inherit())
            .output()
            .with_context(|| format!("cannot run {}", exe.display()))?;
        WorkloadResult::parse(&output)
    }

    /// Runs the workload alone.
    fn workload(&self, argv: &[OsString]) -> Result<WorkloadResult> {
        let output = self
            .command(Path::new(&argv[0]))
            .args(&argv[1..])
            .stderr(std::process::Stdio::inherit())
            .output()
            .context("cannot run the workload")?;
        WorkloadResult::parse(&output)
    }
}

fn shown(args: &[OsString]) -> String {
    args.iter()
        .map(|a| {
            let s = a.to_string_lossy();
            if s.ends_with("/pinwise") {
                "pinwise".to_string()
            } else {
                s.into_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// What the workload printed.
struct WorkloadResult {
    checksum: String,
    elapsed_ms: f64,
    pinned_asked: u64,
}

impl WorkloadResult {
    fn parse(output: &std::process::Output) -> Result<Self> {
        let stdout = String::from_utf8_lossy(&output.stdout);
        let line = stdout
            .lines()
            .find(|l| l.starts_with("pinwise-demo-workload "))
            .with_context(|| {
                format!(
                    "the workload did not finish (status {}); its output: {}",
                    output.status,
                    stdout.trim()
                )
            })?;
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                .map(str::to_string)
                .with_context(|| format!("the workload's line lacks {name}: {line}"))
        };
        Ok(WorkloadResult {
            checksum: field("checksum")?,
            elapsed_ms: field("elapsed_ms")?.parse().context("elapsed_ms")?,
            pinned_asked: field("pinned_asked")?.parse().context("pinned_asked")?,
        })
    }

    fn describe(&self) -> String {
        format!(
            "workload: checksum {}, loop {:.1} ms, asked for {} pinned in all",
            self.checksum,
            self.elapsed_ms,
            pinwise_core::units::format_size(self.pinned_asked)
        )
    }
}

/// Peak pinned bytes over the processes of a `pinwise run --stats-json` file.
fn peak_pinned(stats: &Path) -> Option<u64> {
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(stats).ok()?).ok()?;
    doc["processes"]
        .as_array()?
        .iter()
        .filter_map(|p| p["engine"]["pinned_bytes_peak"].as_u64())
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_files_directory_is_always_a_new_one() {
        let tmp = tempfile::tempdir().unwrap();
        let taken = tmp
            .path()
            .join(format!("pinwise-demo-{}", std::process::id()));
        std::fs::create_dir(&taken).unwrap();
        let first = fresh_dir(tmp.path(), "pinwise-demo").unwrap();
        assert_ne!(first, taken, "an existing directory is never reused");
        assert!(first.is_dir());
        let second = fresh_dir(tmp.path(), "pinwise-demo").unwrap();
        assert_ne!(second, first);
        // Private: the demo's traces are root's when it runs as root.
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&first).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn the_workload_line_is_read_back() {
        let output = std::process::Output {
            status: std::process::ExitStatus::default(),
            stdout: b"noise\npinwise-demo-workload checksum=00ff elapsed_ms=1.5 pinned_asked=42 iterations=3\n"
                .to_vec(),
            stderr: Vec::new(),
        };
        let r = WorkloadResult::parse(&output).unwrap();
        assert_eq!(
            (r.checksum.as_str(), r.elapsed_ms, r.pinned_asked),
            ("00ff", 1.5, 42)
        );
        let missing = std::process::Output {
            stdout: b"pinwise-demo-workload checksum=00ff\n".to_vec(),
            ..output
        };
        let err = WorkloadResult::parse(&missing).err().unwrap().to_string();
        assert!(err.contains("elapsed_ms"), "{err}");
    }
}
