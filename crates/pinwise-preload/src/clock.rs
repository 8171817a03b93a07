//! Timestamps: `CLOCK_MONOTONIC` nanoseconds, what the kernel's `bpf_ktime_get_ns()` returns,
//! so that events from the hooks line up with the eBPF tracer's.

/// `CLOCK_MONOTONIC` now, in nanoseconds (vDSO: no system call, no allocation).
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-parameter; CLOCK_MONOTONIC exists on every Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
