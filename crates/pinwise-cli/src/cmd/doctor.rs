//! `pinwise doctor`: can this machine run pinwise, and how well?
//!
//! Every item is checked for real (libcuda loaded and asked, BPF programs loaded and a
//! uprobe fired, ...), and each missing item says what it disables. Exit status 0 when
//! pinwise can run (a usable libcuda with at least one device), 1 otherwise.
use std::path::Path;
use std::process::ExitCode;

use pinwise_cuda::nvml::{normalize_pci_bus_id, Nvml};
use pinwise_cuda::Driver;
use pinwise_trace::caps::{self, CheckState};
use serde::Serialize;

/// Arguments of `pinwise doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Print the findings as JSON instead of a screen for people.
    #[arg(long)]
    json: bool,
    /// Skip the eBPF checks (they load BPF programs and fire a uprobe, which needs root).
    #[arg(long)]
    no_bpf: bool,
}

/// Outcome of one item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum State {
    Ok,
    /// Works, with a caveat worth reading.
    Warn,
    Failed,
    NotApplicable,
}

impl State {
    fn mark(self) -> &'static str {
        match self {
            State::Ok => "ok  ",
            State::Warn => "warn",
            State::Failed => "FAIL",
            State::NotApplicable => "n/a ",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
struct Item {
    section: &'static str,
    name: String,
    state: State,
    detail: String,
    /// What does not work because of this item (empty when it works).
    #[serde(skip_serializing_if = "String::is_empty")]
    disables: String,
}

/// `format` of `pinwise doctor --json` (`schemas/doctor.schema.json`).
pub const DOCTOR_FORMAT: &str = "pinwise-doctor";
/// `version` of `pinwise doctor --json`.
pub const DOCTOR_VERSION: u32 = 1;

#[derive(Debug, Serialize)]
struct Report {
    format: &'static str,
    version: u32,
    can_run: bool,
    can_trace: bool,
    can_pin: bool,
    verdict: String,
    items: Vec<Item>,
}

struct Builder {
    items: Vec<Item>,
}

impl Builder {
    fn add(
        &mut self,
        section: &'static str,
        name: impl Into<String>,
        state: State,
        detail: impl Into<String>,
        disables: &str,
    ) {
        self.items.push(Item {
            section,
            name: name.into(),
            state,
            detail: detail.into(),
            disables: if matches!(state, State::Ok | State::NotApplicable) {
                String::new()
            } else {
                disables.to_string()
            },
        });
    }
}

/// Runs `pinwise doctor`.
pub fn run(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let mut b = Builder { items: Vec::new() };
    let cuda = check_cuda(&mut b);
    let can_pin = cuda.is_some();
    let can_trace = if args.no_bpf {
        b.add(
            "eBPF tracing",
            "checks",
            State::NotApplicable,
            "skipped (--no-bpf)",
            "",
        );
        false
    } else {
        check_bpf(&mut b)
    };
    check_memory(&mut b);
    check_preload(&mut b);
    check_agent(&mut b, can_trace, !args.no_bpf);

    let report = Report {
        format: DOCTOR_FORMAT,
        version: DOCTOR_VERSION,
        can_run: can_pin,
        can_trace,
        can_pin,
        verdict: verdict(cuda, can_trace, !args.no_bpf),
        items: b.items,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_screen(&report);
    }
    Ok(if report.can_run {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The report's last line. `cuda`: what [`check_cuda`] found; `bpf_checked`: whether the
/// eBPF checks ran (not `--no-bpf`).
fn verdict(cuda: Option<CudaSide>, can_trace: bool, bpf_checked: bool) -> String {
    let trace = if !bpf_checked {
        "`pinwise trace` (eBPF) not checked (--no-bpf)"
    } else if can_trace {
        "`pinwise trace` (eBPF) works"
    } else {
        "`pinwise trace` (eBPF) does not work (see FAIL lines)"
    };
    match cuda {
        Some(CudaSide::Gpu) => format!("pinwise can run here: smart pinning works; {trace}"),
        Some(CudaSide::Standin) => format!(
            "pinwise can run here, but only on its CPU stand-in for libcuda (a test fixture, \
             not a GPU: nothing measured is a GPU figure); {trace}"
        ),
        None => format!("pinwise cannot run here: no usable libcuda with a device; {trace}"),
    }
}

fn print_screen(report: &Report) {
    println!("pinwise doctor: can this machine run pinwise?");
    let mut section = "";
    for item in &report.items {
        if item.section != section {
            section = item.section;
            println!("\n{section}");
        }
        println!(
            "  [{}] {:<22} {}",
            item.state.mark(),
            item.name,
            item.detail
        );
        if !item.disables.is_empty() {
            println!("         {:<22} -> disables: {}", "", item.disables);
        }
    }
    println!("\n{}", report.verdict);
}

/// What libcuda is, when it is usable (loads, initializes, has a device).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CudaSide {
    /// A real driver.
    Gpu,
    /// pinwise's CPU stand-in (a test fixture).
    Standin,
}

/// libcuda, devices, NVML. `None` when smart pinning cannot run (no libcuda with a device).
fn check_cuda(b: &mut Builder) -> Option<CudaSide> {
    const S: &str = "CUDA";
    const NO_CUDA: &str =
        "everything that talks to the GPU: smart pinning, `pinwise run`, calibrate, bench";
    let driver = match Driver::shared() {
        Ok(d) => d,
        Err(e) => {
            b.add(
                S,
                "libcuda",
                State::Failed,
                format!("{e} (set PINWISE_LIBCUDA=/path/to/libcuda.so.1 to choose one)"),
                NO_CUDA,
            );
            return None;
        }
    };
    let fixture = driver.standin_marker();
    let mut detail = driver.path().to_string();
    if let Some(file) = driver.loaded_file() {
        if file != Path::new(driver.path()) {
            detail.push_str(&format!(" -> {}", file.display()));
        }
    }
    if let Err(e) = driver.init() {
        b.add(
            S,
            "libcuda",
            State::Failed,
            format!("{detail}: {e}"),
            NO_CUDA,
        );
        return None;
    }
    match driver.version() {
        Ok(v) => detail.push_str(&format!(
            ", CUDA driver API {}.{}",
            v / 1000,
            (v % 1000) / 10
        )),
        Err(e) => detail.push_str(&format!(", version unknown ({e})")),
    }
    if let Some(marker) = &fixture {
        b.add(
            S,
            "libcuda",
            State::Warn,
            format!("{detail}: {marker}"),
            "real GPU figures: this is the CPU stand-in, a test fixture",
        );
    } else {
        b.add(S, "libcuda", State::Ok, detail, "");
    }

    let nvml = Nvml::load();
    let nvml_devices = nvml
        .as_ref()
        .ok()
        .and_then(|n| n.devices().ok())
        .unwrap_or_default();
    match &nvml {
        Ok(n) => {
            let version = n
                .driver_version()
                .map(|v| format!(", driver {v}"))
                .unwrap_or_default();
            b.add(S, "NVML", State::Ok, format!("{}{version}", n.path()), "");
        }
        Err(e) => b.add(
            S,
            "NVML",
            if fixture.is_some() {
                State::NotApplicable
            } else {
                State::Warn
            },
            e.to_string(),
            "PCIe link generation and width in this report",
        ),
    }

    let devices = match driver.devices() {
        Ok(d) => d,
        Err(e) => {
            b.add(S, "GPUs", State::Failed, e.to_string(), NO_CUDA);
            return None;
        }
    };
    if devices.is_empty() {
        b.add(
            S,
            "GPUs",
            State::Failed,
            "libcuda reports no device",
            NO_CUDA,
        );
        return None;
    }
    for dev in &devices {
        let name = dev
            .name()
            .unwrap_or_else(|e| format!("(name unknown: {e})"));
        let mem = dev
            .total_memory()
            .map(|m| format!(", {:.1} GiB", m as f64 / (1u64 << 30) as f64))
            .unwrap_or_default();
        let cc = dev
            .compute_capability()
            .map(|(ma, mi)| format!(", compute {ma}.{mi}"))
            .unwrap_or_default();
        let bus = dev.pci_bus_id().unwrap_or_default();
        let link = nvml_devices
            .iter()
            .find(|n| {
                n.pci_bus_id
                    .as_deref()
                    .is_some_and(|id| same_bus_id(id, &bus))
            })
            .map(|n| {
                let p = n.pcie;
                let f = |g: Option<u32>, w: Option<u32>| match (g, w) {
                    (Some(g), Some(w)) => format!("Gen{g} x{w}"),
                    _ => "unknown".to_string(),
                };
                format!(
                    ", PCIe {} (max {})",
                    f(p.current_generation, p.current_width),
                    f(p.max_generation, p.max_width)
                )
            })
            .unwrap_or_else(|| ", PCIe link unknown (no NVML)".to_string());
        b.add(
            S,
            format!("GPU {}", dev.ordinal()),
            State::Ok,
            format!("{name}{mem}{cc}{link}, bus {bus}"),
            "",
        );
    }
    Some(if fixture.is_some() {
        CudaSide::Standin
    } else {
        CudaSide::Gpu
    })
}

fn same_bus_id(a: &str, b: &str) -> bool {
    !a.is_empty() && normalize_pci_bus_id(a) == normalize_pci_bus_id(b)
}

/// The eBPF checks of pinwise-trace. Returns whether `pinwise trace` can work.
fn check_bpf(b: &mut Builder) -> bool {
    const S: &str = "eBPF tracing";
    const TRACE: &str = "`pinwise trace` (eBPF)";
    let c = caps::capabilities();
    let state = |s: &CheckState| match s {
        CheckState::Ok => State::Ok,
        CheckState::Failed => State::Failed,
        CheckState::NotApplicable => State::NotApplicable,
    };
    let rows: [(&str, &caps::Check, &str); 10] = [
        (
            "privileges",
            &c.privileges,
            "`pinwise trace` needs root or CAP_BPF+CAP_PERFMON",
        ),
        ("bpf()", &c.bpf, TRACE),
        (
            "BTF (vmlinux)",
            &c.btf_vmlinux,
            "BTF-typed hooks (fork following falls back to a tracepoint; no fentry)",
        ),
        (
            "tracefs",
            &c.tracefs,
            "uprobes and tracepoints cannot attach: `pinwise trace`",
        ),
        ("ring buffer", &c.ring_buffer, TRACE),
        ("BPF programs load", &c.programs_load, TRACE),
        (
            "uprobes",
            &c.uprobes,
            "CUDA calls cannot be seen: `pinwise trace`",
        ),
        (
            "tracepoints",
            &c.tracepoints,
            "mmap/munmap of pageable buffers and following child processes",
        ),
        (
            "nvidia kernel hooks",
            &c.nvidia_kernel_hooks,
            "pinned page counts from the driver (os_lock_user_pages); user-space events still work",
        ),
        // Reported, not required: nothing is disabled without them.
        ("kprobes", &c.kprobes, ""),
    ];
    for (name, check, disables) in rows {
        let mut st = state(&check.state);
        // Kprobes are reported, not required.
        if name == "kprobes" && st == State::Failed {
            st = State::Warn;
        }
        b.add(S, name, st, check.detail.clone(), disables);
    }
    c.can_trace()
}

/// Whether `pinwise agent` can run on this node: eBPF tracing works, a driver library
/// to probe node-wide is found, cgroup v2 gives container labels, the metrics port is free.
fn check_agent(b: &mut Builder, can_trace: bool, bpf_checked: bool) {
    const S: &str = "Fleet";
    const DISABLES: &str = "`pinwise agent` (node-wide monitoring for Prometheus)";
    if !bpf_checked {
        b.add(S, "agent", State::NotApplicable, "skipped (--no-bpf)", "");
        return;
    }
    let libs = pinwise_agent::agent::driver_libraries(&[]);
    let cgroup = pinwise_agent::cgroup::cgroup2_mount();
    let port = std::net::TcpListener::bind("127.0.0.1:9464").is_ok();
    let (state, detail) = match (&libs, can_trace) {
        (_, false) => (
            State::Failed,
            "eBPF tracing does not work here (see above)".to_string(),
        ),
        (Err(e), true) => (State::Failed, e.to_string()),
        (Ok(libs), true) => {
            let names: Vec<String> = libs.iter().map(|p| p.display().to_string()).collect();
            let mut detail = format!("would probe {} node-wide", names.join(", "));
            let mut state = State::Ok;
            match &cgroup {
                Some(m) => detail.push_str(&format!("; cgroup v2 at {}", m.display())),
                None => {
                    state = State::Warn;
                    detail.push_str("; no cgroup v2: no container or pod labels");
                }
            }
            if !port {
                state = State::Warn;
                detail.push_str("; 127.0.0.1:9464 is in use (pass --listen)");
            }
            (state, detail)
        }
    };
    let disables = if state == State::Failed { DISABLES } else { "" };
    b.add(S, "agent", state, detail, disables);
}

/// memlock limit and transparent huge pages.
fn check_memory(b: &mut Builder) {
    const S: &str = "Host memory";
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let memlock = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))
        .map(|l| {
            l.split_whitespace()
                .skip(3)
                .take(2)
                .collect::<Vec<_>>()
                .join(" / ")
        })
        .unwrap_or_else(|| "unknown".into());
    let root = super::is_root();
    let unlimited = memlock.starts_with("unlimited");
    b.add(
        S,
        "memlock limit",
        if unlimited || root {
            State::Ok
        } else {
            State::Warn
        },
        format!(
            "soft / hard: {memlock} bytes{}",
            if root && !unlimited {
                " (root: CAP_IPC_LOCK lifts it)"
            } else {
                ""
            }
        ),
        "pinning above the limit fails (pinwise falls back to pageable and counts it)",
    );
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    b.add(S, "transparent huge pages", State::Ok, thp, "");
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map(|kib| format!("{:.1} GiB", kib as f64 / (1u64 << 20) as f64))
        .unwrap_or_else(|| "unknown".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    b.add(
        S,
        "machine",
        State::Ok,
        format!("Linux {kernel}, MemTotal {mem}"),
        "",
    );
}

/// The preload library `pinwise run` injects (where `pinwise run` looks for it).
fn check_preload(b: &mut Builder) {
    use super::preload_path;
    let explicit = std::env::var_os(preload_path::PRELOAD_ENV).map(std::path::PathBuf::from);
    let found = match explicit {
        Some(p) => preload_path::locate(Some(&p)).map_err(|e| super::outputs::render_error(&e)),
        None => preload_path::search().map_err(|looked| {
            format!(
                "{} not found (looked in: {})",
                preload_path::PRELOAD_FILE,
                looked
                    .iter()
                    .map(|p| p.parent().unwrap_or(p).display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }),
    };
    match found {
        Ok(p) => b.add(
            "pinwise",
            "preload library",
            State::Ok,
            p.display().to_string(),
            "",
        ),
        Err(detail) => b.add(
            "pinwise",
            "preload library",
            State::Failed,
            detail,
            "`pinwise run` (see the README's Install section)",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_says_whether_pinwise_runs_on_a_gpu_or_the_standin() {
        let gpu = verdict(Some(CudaSide::Gpu), true, true);
        assert!(
            gpu.starts_with("pinwise can run here: smart pinning works"),
            "{gpu}"
        );
        assert!(gpu.contains("(eBPF) works"), "{gpu}");
        let standin = verdict(Some(CudaSide::Standin), false, true);
        assert!(standin.contains("CPU stand-in"), "{standin}");
        assert!(standin.contains("does not work"), "{standin}");
        let none = verdict(None, true, false);
        assert!(none.starts_with("pinwise cannot run here"), "{none}");
        assert!(none.contains("not checked (--no-bpf)"), "{none}");
    }
}
