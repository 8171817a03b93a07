//! One module per subcommand. Each has a clap `Args` struct and a `run` function.
pub mod agent;
pub mod bench;
pub mod bench_pool;
pub mod calibrate;
pub mod convert;
pub mod demo;
pub mod diff;
pub mod doctor;
pub mod export;
pub mod killed;
pub mod outputs;
pub mod pool;
pub mod preload_path;
pub mod report;
pub mod run;
pub mod shell;
pub mod supervise;
pub mod trace;

/// Whether this process runs as root (effective uid 0, from `/proc/self/status`).
pub(crate) fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false)
}
