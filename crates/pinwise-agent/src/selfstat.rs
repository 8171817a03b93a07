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

/// utime + stime (fields 14 and 15) of a `/proc/PID/stat` line, in clock ticks.
pub fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Resident memory of this process in bytes (`VmRSS` of `/proc/self/status`).
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| parse_status_kib(&s, "VmRSS:"))
        .map_or(0, |k| k * 1024)
}

/// A `kB` field of `/proc/PID/status`.
pub fn parse_status_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_and_status() {
        let stat = "42 (my (odd) name) S 1 42 42 0 -1 4194560 10 0 0 0 250 50 0 0 20 0 3 0 100";
        assert_eq!(parse_cpu_ticks(stat), Some(300));
        assert_eq!(parse_cpu_ticks("nonsense"), None);
        let status = "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n";
        assert_eq!(parse_status_kib(status, "VmRSS:"), Some(1024));
        assert_eq!(parse_status_kib(status, "VmSwap:"), None);
        // This process: some memory, and the reading does not fail.
        assert!(rss_bytes() > 0);
        assert!(cpu_seconds() >= 0.0);
    }
}
