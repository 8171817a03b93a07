//! The agent's own CPU time and resident memory, from procfs.

/// CPU seconds (user + system) of this process, from `/proc/self/stat`.
pub fn cpu_seconds() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| parse_cpu_ticks(&s))
        .map_or(0.0, |t| t as f64 / hz)
}

/// utime + stime (fields 14 and 15) of a `/proc/PID/stat` line, in clock ticks (parsed
/// with `procfs-core`).
pub fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    use procfs_core::FromRead;
    let stat = procfs_core::process::Stat::from_read(stat.as_bytes()).ok()?;
    Some(stat.utime + stat.stime)
}

/// Resident memory of this process in bytes (`VmRSS` of `/proc/self/status`).
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| parse_status(&s))
        .and_then(|s| s.vmrss)
        .map_or(0, |k| k * 1024)
}

/// A `/proc/PID/status` text, parsed with `procfs-core` (its `Vm*` fields in kB).
pub fn parse_status(status: &str) -> Option<procfs_core::process::Status> {
    use procfs_core::FromBufRead;
    procfs_core::process::Status::from_buf_read(status.as_bytes()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_and_status() {
        // A whole line as Linux 6.x writes it, with a command name holding parentheses
        // and spaces.
        let stat = "42 (my (odd) name) S 1 42 42 0 -1 4194560 10 0 0 0 250 50 0 0 20 0 3 0 \
                    100 9000000 300 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 17 1 0 0 0 \
                    0 0 0 0 0 0 0 0 0";
        assert_eq!(parse_cpu_ticks(stat), Some(300));
        assert_eq!(parse_cpu_ticks("nonsense"), None);
        let own = std::fs::read_to_string("/proc/self/status").unwrap();
        let parsed = parse_status(&own).expect("this process's status parses");
        let line_kib = |field: &str| -> u64 {
            let line = own.lines().find(|l| l.starts_with(field)).unwrap();
            line.split_whitespace().nth(1).unwrap().parse().unwrap()
        };
        assert_eq!(parsed.vmhwm, Some(line_kib("VmHWM:")));
        assert!(
            parse_status("Name:\tx\n").is_none(),
            "required fields missing"
        );
        // This process: some memory, and the reading does not fail.
        assert!(rss_bytes() > 0);
        assert!(cpu_seconds() >= 0.0);
        let own_stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(parse_cpu_ticks(&own_stat).is_some());
    }
}
