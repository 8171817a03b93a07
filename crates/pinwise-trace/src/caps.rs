//! What this machine lets the tracer do, checked for real (for `pinwise doctor` and for
//! clear errors): each item is tried, and its exact error kept.
//!
//! The uprobe and tracepoint checks load pinwise's own BPF objects, attach a uprobe to a
//! function of this very process and call it, and make an mmap/munmap pair, then look for
//! the events in the ring buffer.

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

use libbpf_rs::{MapHandle, MapType};

use crate::loader::{has_vmlinux_btf, BpfConfig, KernelHookStatus, Probes};
use crate::procmaps::ProcMaps;
use crate::raw::{self, kinds, RawEvent};

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckState {
    /// Works.
    Ok,
    /// Does not work, or is missing.
    Failed,
    /// Does not apply on this machine (e.g. no nvidia module).
    NotApplicable,
}

/// One checked item: its state and what was found (or the exact error).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Check {
    /// Works, fails, or does not apply.
    pub state: CheckState,
    /// What was found, or the exact error.
    pub detail: String,
}

impl Check {
    fn ok(detail: impl Into<String>) -> Self {
        Check {
            state: CheckState::Ok,
            detail: detail.into(),
        }
    }
    fn failed(detail: impl Into<String>) -> Self {
        Check {
            state: CheckState::Failed,
            detail: detail.into(),
        }
    }
    fn not_applicable(detail: impl Into<String>) -> Self {
        Check {
            state: CheckState::NotApplicable,
            detail: detail.into(),
        }
    }
    /// Whether it works.
    pub fn is_ok(&self) -> bool {
        self.state == CheckState::Ok
    }
}

/// What the tracer can do here.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Capabilities {
    /// Root, or CAP_BPF with CAP_PERFMON.
    pub privileges: Check,
    /// The bpf() system call works (a map can be created).
    pub bpf: Check,
    /// The kernel's own BTF (`/sys/kernel/btf/vmlinux`): needed for the fork hook with BTF
    /// and for fentry; without it a fallback tracepoint is used.
    pub btf_vmlinux: Check,
    /// tracefs mounted (`/sys/kernel/tracing`).
    pub tracefs: Check,
    /// A BPF ring buffer can be created.
    pub ring_buffer: Check,
    /// pinwise's BPF programs load (verifier accepts them).
    pub programs_load: Check,
    /// A uprobe on a function of this process fires and its event arrives.
    pub uprobes: Check,
    /// Syscall tracepoints fire and their events arrive.
    pub tracepoints: Check,
    /// fentry/fexit on the nvidia module's `os_lock_user_pages`/`os_unlock_user_pages`.
    pub nvidia_kernel_hooks: Check,
    /// Kprobes in this kernel (pinwise does not need them; reported for completeness).
    pub kprobes: Check,
}

impl Capabilities {
    /// Whether `pinwise trace` can work here (privileges, BPF, programs, uprobes,
    /// tracepoints).
    pub fn can_trace(&self) -> bool {
        [
            &self.privileges,
            &self.bpf,
            &self.ring_buffer,
            &self.programs_load,
            &self.uprobes,
            &self.tracepoints,
        ]
        .iter()
        .all(|c| c.is_ok())
    }
}

/// The function the uprobe check probes: it must stay a real, out-of-line function.
#[no_mangle]
#[inline(never)]
pub extern "C" fn pinwise_tracer_uprobe_self_test(dst: u64, src: u64, bytes: u64) -> u64 {
    std::hint::black_box(dst ^ src ^ bytes)
}

const SELF_TEST_ARGS: (u64, u64, u64) = (0x5157_0001, 0x5157_0002, 4242);

/// Capability bits of this process's effective set (bit N is capability N), from the
/// `caps` crate (`capget`); `None` when they cannot be read.
fn effective_capabilities() -> Option<u64> {
    let set = ::caps::read(None, ::caps::CapSet::Effective).ok()?;
    Some(set.iter().fold(0, |bits, cap| bits | cap.bitmask()))
}

/// Root, or CAP_BPF (39) with CAP_PERFMON (38), or CAP_SYS_ADMIN (21).
pub fn check_privileges() -> Check {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    privileges_verdict(euid, effective_capabilities().unwrap_or(0))
}

/// [`check_privileges`] for an effective uid and capability bits (bit N is capability N).
fn privileges_verdict(euid: u32, caps: u64) -> Check {
    const CAP_SYS_ADMIN: u64 = 1 << 21;
    const CAP_PERFMON: u64 = 1 << 38;
    const CAP_BPF: u64 = 1 << 39;
    if euid == 0 && caps & CAP_SYS_ADMIN != 0 {
        return Check::ok("running as root");
    }
    if caps & CAP_SYS_ADMIN != 0 {
        return Check::ok("CAP_SYS_ADMIN");
    }
    if caps & CAP_BPF != 0 && caps & CAP_PERFMON != 0 {
        return Check::ok("CAP_BPF and CAP_PERFMON");
    }
    Check::failed(format!(
        "not root (euid {euid}) and no CAP_BPF+CAP_PERFMON (CapEff {caps:#x}): run as root, or \
         `setcap cap_bpf,cap_perfmon+ep` on the pinwise binary"
    ))
}

fn check_map(map_type: MapType, key: u32, value: u32, entries: u32, what: &str) -> Check {
    let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
        ..Default::default()
    };
    match MapHandle::create(map_type, Some("pinwise_check"), key, value, entries, &opts) {
        Ok(_) => Check::ok(format!("{what} created")),
        Err(e) => Check::failed(format!("creating a {what}: {e:#}")),
    }
}

fn check_tracefs() -> Check {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let mount = mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_, dir, fstype) = (f.next()?, f.next()?, f.next()?);
        (fstype == "tracefs").then(|| dir.to_string())
    });
    match mount {
        Some(dir) => Check::ok(format!("tracefs mounted at {dir}")),
        None => Check::failed(
            "tracefs is not mounted: `mount -t tracefs nodev /sys/kernel/tracing` (libbpf then \
             uses it for uprobes where perf_event uprobes need it)",
        ),
    }
}

fn check_kprobes() -> Check {
    let config = read_kernel_config();
    if let Some(config) = config {
        if config.lines().any(|l| l == "CONFIG_KPROBES=y") {
            return Check::ok("CONFIG_KPROBES=y");
        }
        if config.lines().any(|l| l == "# CONFIG_KPROBES is not set") {
            return Check::failed("kprobes are not compiled in (# CONFIG_KPROBES is not set); pinwise does not need them");
        }
    }
    if Path::new("/sys/kernel/tracing/kprobe_events").exists()
        || Path::new("/sys/kernel/debug/tracing/kprobe_events").exists()
    {
        Check::ok("kprobe_events present in tracefs")
    } else {
        Check::failed("no kprobe_events in tracefs and no kernel config saying CONFIG_KPROBES=y; pinwise does not need them")
    }
}

/// The kernel's build configuration, from `/proc/config.gz` (decompressed with `zcat`) or
/// `/boot/config-$(uname -r)`.
fn read_kernel_config() -> Option<String> {
    if Path::new("/proc/config.gz").exists() {
        if let Ok(out) = std::process::Command::new("zcat")
            .arg("/proc/config.gz")
            .output()
        {
            if out.status.success() {
                return Some(String::from_utf8_lossy(&out.stdout).into_owned());
            }
        }
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    std::fs::read_to_string(format!("/boot/config-{}", release.trim())).ok()
}

/// Runs every check. Loads and attaches BPF programs briefly; takes well under a second.
pub fn capabilities() -> Capabilities {
    let privileges = check_privileges();
    let btf_vmlinux = if has_vmlinux_btf() {
        Check::ok("/sys/kernel/btf/vmlinux present")
    } else {
        Check::failed("/sys/kernel/btf/vmlinux missing: the fork hook falls back to a tracepoint, fentry is unavailable")
    };
    let tracefs = check_tracefs();
    let kprobes = check_kprobes();
    let bpf = check_map(MapType::Hash, 4, 4, 1, "BPF hash map");
    let ring_buffer = check_map(MapType::RingBuf, 0, 0, 4096, "BPF ring buffer");

    let config = BpfConfig {
        ringbuf_bytes: 64 << 10,
        min_mmap_bytes: 1 << 20,
        wakeup_bytes: 1,
        page_faults: false,
        kernel_hooks: true,
        ..BpfConfig::default()
    };
    let (programs_load, uprobes, tracepoints, nvidia_kernel_hooks) = match Probes::load(&config) {
        Err(e) => {
            let why = format!("{e}");
            (
                Check::failed(why.clone()),
                Check::failed(format!("programs did not load: {why}")),
                Check::failed(format!("programs did not load: {why}")),
                match crate::loader::nvidia_hooks_not_applicable() {
                    Some(na) => Check::not_applicable(na),
                    None => Check::failed(format!("programs did not load: {why}")),
                },
            )
        }
        Ok(mut probes) => {
            let hooks = match probes.kernel_hooks() {
                KernelHookStatus::Attached => {
                    Check::ok("fexit/os_lock_user_pages and fentry/os_unlock_user_pages attached")
                }
                KernelHookStatus::NotApplicable(why) => Check::not_applicable(why.clone()),
                KernelHookStatus::Refused(err) => Check::failed(err.clone()),
            };
            let (u, t) = self_test(&mut probes);
            (Check::ok("pinwise.bpf.o loaded"), u, t, hooks)
        }
    };
    Capabilities {
        privileges,
        bpf,
        btf_vmlinux,
        tracefs,
        ring_buffer,
        programs_load,
        uprobes,
        tracepoints,
        nvidia_kernel_hooks,
        kprobes,
    }
}

/// Attaches the copy probe to [`pinwise_tracer_uprobe_self_test`], calls it, maps and
/// unmaps 2 MiB, and looks for both events.
fn self_test(probes: &mut Probes) -> (Check, Check) {
    let pid = std::process::id();
    let uprobe_attach = attach_self_test_uprobe(probes);
    if let Err(e) = probes.trace_process(pid) {
        let e = e.to_string();
        return (Check::failed(e.clone()), Check::failed(e));
    }
    let seen: Rc<RefCell<Vec<RawEvent>>> = Rc::default();
    let ring = {
        let map = probes.events_map();
        let sink = Rc::clone(&seen);
        let mut builder = libbpf_rs::RingBufferBuilder::new();
        let added = builder
            .add(&map, move |data: &[u8]| {
                if let Ok(ev) = raw::decode(data) {
                    sink.borrow_mut().push(ev);
                }
                0
            })
            .map(|_| ());
        match added.and_then(|()| builder.build()) {
            Ok(r) => r,
            Err(e) => {
                probes.untrace_process(pid);
                let e = format!("reading the ring buffer: {e:#}");
                return (Check::failed(e.clone()), Check::failed(e));
            }
        }
    };
    let (dst, src, n) = SELF_TEST_ARGS;
    if uprobe_attach.is_ok() {
        std::hint::black_box(pinwise_tracer_uprobe_self_test(
            std::hint::black_box(dst),
            src,
            n,
        ));
    }
    let mapped_at = map_and_unmap(2 << 20);

    let deadline = Instant::now() + Duration::from_secs(1);
    let (mut got_uprobe, mut got_munmap) = (false, false);
    while Instant::now() < deadline && !(got_uprobe && got_munmap) {
        let _ = ring.poll(Duration::from_millis(20));
        let _ = ring.consume();
        for ev in seen.borrow().iter() {
            match ev {
                RawEvent::Copy(c) if c.h.pid == pid && (c.dst, c.src, c.bytes) == (dst, src, n) => {
                    got_uprobe = true
                }
                RawEvent::Release(r)
                    if r.h.kind == kinds::MUNMAP && r.h.pid == pid && Some(r.addr) == mapped_at =>
                {
                    got_munmap = true
                }
                _ => {}
            }
        }
    }
    probes.untrace_process(pid);
    let uprobe = match uprobe_attach {
        Err(e) => Check::failed(e),
        Ok(where_) if got_uprobe => Check::ok(format!("uprobe on {where_} fired and reported")),
        Ok(where_) => Check::failed(format!(
            "uprobe on {where_} attached but no event arrived within 1 s"
        )),
    };
    let tracepoint = if mapped_at.is_none() {
        Check::failed("mmap of 2 MiB failed; syscall tracepoints not checked")
    } else if got_munmap {
        Check::ok("syscalls/sys_enter_munmap fired and reported")
    } else {
        Check::failed("syscalls/sys_enter_munmap attached but no event arrived within 1 s")
    };
    (uprobe, tracepoint)
}

fn attach_self_test_uprobe(probes: &mut Probes) -> Result<String, String> {
    let addr = pinwise_tracer_uprobe_self_test as *const () as u64;
    let maps = ProcMaps::read(std::process::id()).map_err(|e| format!("reading own maps: {e}"))?;
    let m = maps
        .find(addr)
        .filter(|m| m.is_file())
        .ok_or("the self-test function is in no file mapping")?;
    let path = m
        .file_path()
        .ok_or("the self-test function's file has no path")?;
    let offset = m.file_offset(addr);
    probes
        .attach_raw_uprobe(
            Path::new(path),
            offset,
            "copy_htod",
            crate::probes::UPROBES[0].func,
        )
        .map_err(|e| format!("attaching a uprobe to {path}+{offset:#x}: {e}"))?;
    Ok(format!("{path}+{offset:#x}"))
}

/// mmap and munmap an anonymous region of `len` bytes; its address, or None.
fn map_and_unmap(len: usize) -> Option<u64> {
    // SAFETY: an anonymous private mapping with no address hint; unmapped right after,
    // never accessed.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return None;
        }
        libc::munmap(p, len);
        Some(p as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn privileges_need_root_with_sys_admin_or_bpf_with_perfmon() {
        let full = u64::MAX >> 23; // CapEff of root on a 6.x kernel: bits 0..=40
        assert_eq!(privileges_verdict(0, full), Check::ok("running as root"));
        assert_eq!(
            privileges_verdict(1000, 1 << 21),
            Check::ok("CAP_SYS_ADMIN")
        );
        assert_eq!(
            privileges_verdict(1000, (1 << 38) | (1 << 39)),
            Check::ok("CAP_BPF and CAP_PERFMON")
        );
        let only_bpf = privileges_verdict(1000, 1 << 39);
        assert_eq!(only_bpf.state, CheckState::Failed);
        assert!(
            only_bpf.detail.contains("euid 1000")
                && only_bpf.detail.contains("CapEff 0x8000000000"),
            "{}",
            only_bpf.detail
        );
        // Root without CAP_SYS_ADMIN (dropped in a container) is not enough by itself.
        let root_without = privileges_verdict(0, 1 << 38);
        assert_eq!(root_without.state, CheckState::Failed);
        assert!(
            root_without.detail.contains("euid 0"),
            "{}",
            root_without.detail
        );
    }

    #[test]
    fn this_process_capabilities_are_read() {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        let caps = effective_capabilities().expect("effective capabilities readable");
        if euid == 0 {
            assert_ne!(caps, 0, "root here has capabilities");
        }
        // The same bits the kernel shows as `CapEff` (what pinwise read before `caps`).
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let cap_eff = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .map(|hex| u64::from_str_radix(hex.trim(), 16).unwrap())
            .unwrap();
        assert_eq!(caps, cap_eff);
        assert_eq!(check_privileges(), privileges_verdict(euid, caps));
    }
}
