//! How `pinwise run` looks after the program it started, so that nothing is lost when either
//! is interrupted:
//!
//! - **Signals sent to pinwise** (`SIGINT`, `SIGTERM`, `SIGHUP`, `SIGQUIT` from `kill`, a
//!   service manager, a job scheduler) are passed on to the program, and pinwise keeps
//!   waiting for it, then writes its summary as usual. The same signals coming from the
//!   terminal (Ctrl-C, Ctrl-\, a hang-up) already reach the whole foreground group, program
//!   included, so pinwise does not send them a second time (told apart by `si_code`).
//! - **If pinwise itself dies** (`SIGKILL`), the kernel sends the program `SIGTERM`
//!   (`PR_SET_PDEATHSIG`, set in the child before `exec`): the preload library writes the
//!   history and statistics before the program ends. A program that handles or ignores
//!   `SIGTERM` keeps running, and its outputs are written when it exits.
//! - A temporary statistics directory (`$TMPDIR/pinwise-run-<pid>-…`) left by a `pinwise
//!   run` that was killed is removed by the next `pinwise run` of the same user.
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};

/// The signals passed on to the program.
pub const FORWARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// The program's pid while it runs (0: none).
static CHILD: AtomicI32 = AtomicI32::new(0);

/// Makes the kernel send `SIGTERM` to the program when pinwise dies (set before `exec`).
pub fn die_with_parent(command: &mut Command) {
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions (prctl, getppid).
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGTERM as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            // pinwise may have died between the fork and the prctl.
            if libc::getppid() != parent {
                return Err(std::io::Error::other(
                    "pinwise ended before the program started",
                ));
            }
            Ok(())
        });
    }
}

/// While alive, [`FORWARDED`] signals do not stop pinwise: a signal some process sent is
/// passed on to the program `child`; one from the terminal (which the program got too) is
/// dropped. The previous actions are restored on drop.
///
/// Hand-written with `sigaction` rather than signal-hook: signal-hook never gives a signal
/// its previous disposition back (its handler stays installed after `unregister`), while
/// this must put back exactly what was there once the program has exited: the default
/// action, or `SIG_IGN` inherited from `nohup`, so that pinwise can again be stopped (or
/// not) while it writes the outputs.
pub struct Forwarding {
    old: Vec<(libc::c_int, libc::sigaction)>,
}

impl Forwarding {
    /// Starts forwarding to `child`.
    pub fn to(child: u32) -> Forwarding {
        CHILD.store(child as i32, Ordering::Release);
        let mut old = Vec::new();
        for sig in FORWARDED {
            // SAFETY: sigaction with valid structures; the handler is async-signal-safe.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_signal as *const () as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
                libc::sigemptyset(&mut action.sa_mask);
                let mut previous: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &action, &mut previous) == 0 {
                    old.push((sig, previous));
                }
            }
        }
        Forwarding { old }
    }
}

impl Drop for Forwarding {
    fn drop(&mut self) {
        for (sig, previous) in &self.old {
            // SAFETY: restoring the action saved by `to`.
            unsafe { libc::sigaction(*sig, previous, std::ptr::null_mut()) };
        }
        CHILD.store(0, Ordering::Release);
    }
}

/// Whether a signal with this `si_code` was sent by a process (`kill`, `sigqueue`,
/// `tgkill`), as opposed to the kernel or the terminal.
pub fn sent_by_a_process(si_code: libc::c_int) -> bool {
    si_code <= 0
}

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo with SA_SIGINFO.
    let code = unsafe { info.as_ref() }.map_or(0, |i| i.si_code);
    let child = CHILD.load(Ordering::Acquire);
    if child > 0 && sent_by_a_process(code) {
        // SAFETY: kill is async-signal-safe; errno is saved and restored.
        unsafe {
            let errno = *libc::__errno_location();
            libc::kill(child, sig);
            *libc::__errno_location() = errno;
        }
    }
}

/// Removes `pinwise-run-<pid>-*` directories in `base` that belong to this user and whose
/// `pinwise run` (`<pid>`) is gone. Returns how many were removed.
pub fn remove_stale_dirs(base: &Path) -> usize {
    let me = pinwise_core::safe_file::caller_uid();
    let Ok(entries) = std::fs::read_dir(base) else {
        return 0;
    };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("pinwise-run-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(meta) = std::fs::symlink_metadata(e.path()) else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != me || pid <= 0 || alive(pid) {
            continue;
        }
        if std::fs::remove_dir_all(e.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_signals_from_processes_are_forwarded() {
        assert!(sent_by_a_process(libc::SI_USER));
        assert!(sent_by_a_process(libc::SI_QUEUE));
        assert!(sent_by_a_process(libc::SI_TKILL));
        assert!(!sent_by_a_process(libc::SI_KERNEL));
    }

    #[test]
    fn stale_dirs_of_dead_runs_are_removed_live_and_foreign_ones_kept() {
        let base = tempfile::tempdir().unwrap();
        // A pid that cannot exist (above pid_max's largest possible value).
        let dead = base.path().join("pinwise-run-2147483646-5-0");
        std::fs::create_dir(&dead).unwrap();
        std::fs::write(dead.join("1.json"), "{}").unwrap();
        let live = base
            .path()
            .join(format!("pinwise-run-{}-5-0", std::process::id()));
        std::fs::create_dir(&live).unwrap();
        let other = base.path().join("pinwise-demo-1");
        std::fs::create_dir(&other).unwrap();
        assert_eq!(remove_stale_dirs(base.path()), 1);
        assert!(!dead.exists());
        assert!(live.exists());
        assert!(other.exists());
        if pinwise_core::safe_file::caller_uid() == 0 {
            let foreign = base.path().join("pinwise-run-2147483645-1-0");
            std::fs::create_dir(&foreign).unwrap();
            std::os::unix::fs::chown(&foreign, Some(65534), None).unwrap();
            assert_eq!(remove_stale_dirs(base.path()), 0);
            assert!(foreign.exists());
        }
    }
}
