//! The counter the copy hooks time their own bookkeeping with: the CPU's time-stamp counter
//! (x86-64 `rdtsc`, aarch64 the virtual counter `cntvct_el0`). Reading it touches no memory
//! (`clock_gettime` runs the vDSO's code and reads its data page: two more pages a sparse
//! copy would find cold) and costs about a third of a clock read (11.5 against 29.5 ns on
//! the development VM). Ticks become nanoseconds with the rate measured against
//! `CLOCK_MONOTONIC` between the state's creation and the statistics' writing
//! ([`ns_per_tick`]).
//!
//! On x86-64 a process may make `rdtsc` fault (`prctl(PR_SET_TSC, PR_TSC_SIGSEGV)`: SIGSEGV
//! in the calling thread and the threads it starts later). pinwise must never be what
//! crashes it:
//! - set before pinwise was loaded: [`choose`] asks `PR_GET_TSC` and reads
//!   `CLOCK_MONOTONIC` instead, through the system call (in practice such a process does not get this far: glibc's
//!   dynamic loader reads the counter before any preload runs);
//! - set by the program while it runs: the `prctl` export (`exports/prctl.rs`) calls
//!   [`stop_counter`] before the mode reaches the kernel, so no hook reads the counter in a
//!   thread where it faults (the mode is per thread and is set by the calling thread, which
//!   is in `prctl`, not in a hook), and pinwise's clock ([`monotonic_ns`]) makes the system
//!   call from then on: the vDSO's `clock_gettime` reads the same counter and faults too.
//!   The hook times sampled until then are ticks and those
//!   after nanoseconds: the statistics leave the hook times out ([`counter_stopped`]). A
//!   `prctl` made as a raw `syscall(SYS_prctl, ...)` is not seen. Code of pinwise's that
//!   reads std's clock (creating the state or the allocator, stamping events) holds
//!   [`CounterReadable`] meanwhile, which costs two `prctl` system calls each time.
//!
//! What this protects: pinwise's own part. The real libcuda reads the counter itself (on
//! the H100 machine, CUDA 13, a program that switched it off and then called CUDA died of
//! SIGSEGV without pinwise too: `bench/results/gpu-tsc-sigsegv.md`), so only threads that
//! make no CUDA calls after the switch keep running, with or without pinwise.

use std::sync::atomic::{AtomicBool, Ordering};

use pinwise_core::units::monotonic_ns;

/// Whether [`now`] reads the CPU's counter (else `CLOCK_MONOTONIC`).
static USE_COUNTER: AtomicBool = AtomicBool::new(false);
/// Whether the counter was given up while the process ran ([`stop_counter`]).
static STOPPED: AtomicBool = AtomicBool::new(false);

/// Decides once, at load, what [`now`] reads: the CPU's counter unless this process made it
/// fault.
pub fn choose() {
    let readable = counter_readable();
    if !readable {
        // The vDSO's clock reads the same counter.
        pinwise_core::units::use_system_call_clock();
    }
    USE_COUNTER.store(
        readable && !STOPPED.load(Ordering::SeqCst),
        Ordering::SeqCst,
    );
}

/// The program is about to make the counter fault (`PR_SET_TSC` to anything but
/// `PR_TSC_ENABLE`): [`now`] reads `CLOCK_MONOTONIC` from now on.
pub fn stop_counter() {
    // The vDSO's clock reads the same counter: the clock, too, through the kernel.
    pinwise_core::units::use_system_call_clock();
    // Said first, so that a `stamp::choose` racing with this sees it after its own store.
    STOPPED.store(true, Ordering::SeqCst);
    // Events are stamped with the clock from now on (after a last anchor, taken while the
    // counter still reads).
    crate::stamp::stop();
    USE_COUNTER.store(false, Ordering::SeqCst);
}

/// Whether [`now`] changed from counter ticks to nanoseconds while the process ran: times
/// taken with it before and after do not compare.
pub fn counter_stopped() -> bool {
    STOPPED.load(Ordering::Relaxed)
}

/// [`counter_stopped`], ordered with every other sequentially consistent access (for a
/// decision racing with [`stop_counter`]).
pub fn counter_stopped_now() -> bool {
    STOPPED.load(Ordering::SeqCst)
}

/// Makes the CPU's counter readable on this thread while it lives, after the program made
/// it fault ([`counter_stopped`]; nothing otherwise: one relaxed load): pinwise's own code
/// that reads the time through the standard library or a crate (the vDSO's
/// `clock_gettime`, which reads that counter: the allocator's timings, temporary file
/// names) runs with it, and the program's mode is put back when the guard is dropped.
#[must_use = "the counter is readable only while the guard lives"]
pub struct CounterReadable(Option<libc::c_ulong>);

impl CounterReadable {
    /// See [`CounterReadable`].
    #[inline]
    pub fn here() -> CounterReadable {
        if !counter_stopped() {
            return CounterReadable(None);
        }
        CounterReadable(enable_here())
    }
}

impl Drop for CounterReadable {
    fn drop(&mut self) {
        if let Some(mode) = self.0 {
            set_mode(mode);
        }
    }
}

/// Enables the counter for this thread (a thread of pinwise's own, started by a thread of
/// the program's that made it fault, inherits the mode). Returns the mode it had, if it
/// was not enabled.
pub fn enable_here() -> Option<libc::c_ulong> {
    #[cfg(target_arch = "x86_64")]
    {
        let mut mode: libc::c_int = 0;
        // SAFETY: PR_GET_TSC writes one int through the pointer, alive for the call. The
        // system call itself: pinwise's own `prctl` export is not for its own calls.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_prctl,
                libc::PR_GET_TSC,
                &mut mode as *mut libc::c_int,
            )
        };
        if rc != 0 || mode == libc::PR_TSC_ENABLE {
            return None;
        }
        set_mode(libc::PR_TSC_ENABLE as libc::c_ulong);
        Some(mode as libc::c_ulong)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

fn set_mode(mode: libc::c_ulong) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PR_SET_TSC takes the mode by value; it changes this thread only.
    unsafe {
        libc::syscall(libc::SYS_prctl, libc::PR_SET_TSC, mode);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = mode;
}

/// Whether `prctl(option, arg2, ...)` would make the counter fault.
pub fn makes_counter_fault(option: libc::c_int, arg2: libc::c_ulong) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        option == libc::PR_SET_TSC && arg2 != libc::PR_TSC_ENABLE as libc::c_ulong
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (option, arg2);
        false
    }
}

/// Whether the counter reads in this process (does not fault on this thread).
#[cfg(target_arch = "x86_64")]
pub(crate) fn counter_readable() -> bool {
    let mut mode: libc::c_int = 0;
    // SAFETY: PR_GET_TSC writes one int through the pointer, alive for the call.
    let rc = unsafe { libc::prctl(libc::PR_GET_TSC, &mut mode as *mut libc::c_int) };
    rc == 0 && mode == libc::PR_TSC_ENABLE
}

/// Whether the counter reads in this process (always, on aarch64).
#[cfg(target_arch = "aarch64")]
pub(crate) fn counter_readable() -> bool {
    // Linux lets user code read the virtual counter always.
    true
}

/// Now, in ticks of the CPU's counter (or nanoseconds: see [`choose`]).
#[inline(always)]
pub fn now() -> u64 {
    if !USE_COUNTER.load(Ordering::Relaxed) {
        return monotonic_ns();
    }
    read_counter()
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn read_counter() -> u64 {
    // SAFETY: `rdtsc` has no preconditions; `choose` checked that it does not fault here.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(target_arch = "aarch64")]
#[inline(always)]
fn read_counter() -> u64 {
    let v: u64;
    // SAFETY: reading the virtual counter register, which Linux lets user code read.
    unsafe { core::arch::asm!("mrs {}, cntvct_el0", out(reg) v, options(nomem, nostack)) };
    v
}

/// A pair of readings of [`now`] and `CLOCK_MONOTONIC`, taken together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anchor {
    /// [`now`].
    pub ticks: u64,
    /// `CLOCK_MONOTONIC`, ns.
    pub ns: u64,
}

impl Anchor {
    /// Both now.
    pub fn take() -> Anchor {
        Anchor {
            ticks: now(),
            ns: monotonic_ns(),
        }
    }
}

/// Nanoseconds per tick between two anchors; `None` when less than `min_ns` passed
/// between them or the counter did not advance (too short to tell).
pub fn ns_per_tick(from: Anchor, to: Anchor, min_ns: u64) -> Option<f64> {
    let ns = to.ns.checked_sub(from.ns)?;
    let ticks = to.ticks.checked_sub(from.ticks)?;
    (ns >= min_ns && ticks > 0).then(|| ns as f64 / ticks as f64)
}

/// Nanoseconds per tick from `origin` to now, waiting (at most about 2 ms, once) until
/// 1 ms has passed since `origin` so that the rate is known to 0.01 % (two clock reads of
/// 30 ns in 1 ms, at worst 0.006 %).
pub fn rate_since(origin: Anchor) -> f64 {
    const MIN_NS: u64 = 1_000_000;
    loop {
        let now = Anchor::take();
        if let Some(r) = ns_per_tick(origin, now, MIN_NS) {
            return r;
        }
        if now.ns.saturating_sub(origin.ns) > 2 * MIN_NS || now.ticks < origin.ticks {
            // The counter went backwards or stood still: count it as nanoseconds.
            return 1.0;
        }
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_elapsed_nanoseconds_over_elapsed_ticks() {
        let a = Anchor {
            ticks: 1_000,
            ns: 5_000_000,
        };
        let b = Anchor {
            ticks: 1_000 + 2_500_000,
            ns: 5_000_000 + 1_000_000,
        };
        assert_eq!(ns_per_tick(a, b, 1_000_000), Some(0.4));
        assert_eq!(ns_per_tick(a, b, 2_000_000), None, "too short to tell");
        assert_eq!(ns_per_tick(b, a, 0), None, "backwards");
        let still = Anchor { ticks: 1_000, ..b };
        assert_eq!(ns_per_tick(a, still, 0), None, "the counter stood still");
    }

    #[test]
    fn only_setting_the_counter_to_fault_stops_it() {
        assert!(makes_counter_fault(
            libc::PR_SET_TSC,
            libc::PR_TSC_SIGSEGV as libc::c_ulong
        ));
        assert!(!makes_counter_fault(
            libc::PR_SET_TSC,
            libc::PR_TSC_ENABLE as libc::c_ulong
        ));
        assert!(!makes_counter_fault(
            libc::PR_GET_TSC,
            libc::PR_TSC_SIGSEGV as libc::c_ulong
        ));
        assert!(!makes_counter_fault(libc::PR_SET_NAME, 0));
    }

    #[test]
    fn the_counter_advances_with_the_clock() {
        choose();
        let origin = Anchor::take();
        let r = rate_since(origin);
        // Any counter of 1 MHz to 10 GHz (or nanoseconds).
        assert!((0.1..=1000.0).contains(&r), "{r} ns per tick");
        let (a, b) = (now(), now());
        assert!(b >= a);
    }
}
