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

/// Whether this process runs as root (effective uid 0).
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(test)]
mod tests {
    #[test]
    fn is_root_agrees_with_the_effective_uid_the_kernel_shows() {
        let uid = pinwise_testkit::effective_uid().expect("Uid line in /proc/self/status");
        assert_eq!(super::is_root(), uid == 0);
    }
}
