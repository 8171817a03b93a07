//! Test support for pinwise's own tests (never shipped).
//!
//! - [`StandinLibs`]: a temporary library directory where `libcuda.so.1` and
//!   `libcudart.so.13` are the CPU stand-ins built by this workspace (TEST FIXTURES, not a
//!   GPU), for in-process loading (`PINWISE_LIBCUDA`, [`StandinLibs::libcuda`]) or child
//!   processes ([`StandinLibs::configure`]).
//! - [`require_root`] / [`require_bpf`]: the skip-or-fail rule for privileged tests: under
//!   `CI=true` a missing privilege fails the test; elsewhere the test prints a visible
//!   `SKIPPED` line and returns early.
//! - [`compile_c`] / [`compile_c_source`]: build C test programs with the system compiler;
//!   [`fixtures_include_dir`] holds `cuda_driver_min.h`, the CUDA driver declarations they use.
//! - [`locked_memory_bytes`] and [`proc_status_kib`]: read `/proc/self/status`.

pub mod buffers;
pub mod fuzz;
pub mod rng;

pub use buffers::in_allocation_order;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// File name of the libcuda stand-in as cargo builds it.
pub const CUDA_STANDIN_FILE: &str = "libpinwise_standin_cuda.so";
/// File name of the libcudart stand-in as cargo builds it.
pub const CUDART_STANDIN_FILE: &str = "libpinwise_standin_cudart.so";
/// Environment variable that overrides where the stand-ins are looked for.
pub const STANDIN_DIR_ENV: &str = "PINWISE_STANDIN_DIR";

/// A temporary directory laid out like a CUDA library directory, whose libraries are the
/// workspace's CPU stand-ins (TEST FIXTURES):
///
/// ```text
/// libcuda.so.1, libcuda.so          -> target/<profile>/libpinwise_standin_cuda.so
/// libcudart.so.13, libcudart.so     -> target/<profile>/libpinwise_standin_cudart.so
/// ```
///
/// The directory is removed when the value is dropped.
#[derive(Debug)]
pub struct StandinLibs {
    dir: tempfile::TempDir,
    cuda_standin: PathBuf,
    cudart_standin: PathBuf,
}

impl StandinLibs {
    /// Lays out the stand-ins found in the build directory of the running test.
    ///
    /// # Panics
    /// If the stand-ins have not been built ("run `cargo build --workspace` first"), or the
    /// temporary directory cannot be made.
    pub fn new() -> StandinLibs {
        let build = standin_build_dir().unwrap_or_else(|searched| {
            panic!(
                "the CPU stand-ins ({CUDA_STANDIN_FILE}, {CUDART_STANDIN_FILE}) were not found \
                 (looked in {searched}): run `cargo build --workspace` first"
            )
        });
        let cuda_standin = build.join(CUDA_STANDIN_FILE);
        let cudart_standin = build.join(CUDART_STANDIN_FILE);
        warn_if_stale(&cuda_standin, "fixtures/cuda-standin");
        warn_if_stale(&cudart_standin, "fixtures/cudart-standin");
        let dir = tempfile::Builder::new()
            .prefix("pinwise-standin-libs-")
            .tempdir()
            .expect("cannot create a temporary directory for the stand-in libraries");
        for (target, links) in [
            (&cuda_standin, ["libcuda.so.1", "libcuda.so"]),
            (&cudart_standin, ["libcudart.so.13", "libcudart.so"]),
        ] {
            for link in links {
                let at = dir.path().join(link);
                std::os::unix::fs::symlink(target, &at).unwrap_or_else(|e| {
                    panic!("cannot link {} -> {}: {e}", at.display(), target.display())
                });
            }
        }
        StandinLibs {
            dir,
            cuda_standin,
            cudart_standin,
        }
    }

    /// The library directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `<dir>/libcuda.so.1`: what to pass to `PINWISE_LIBCUDA` or `Driver::load_from`.
    pub fn libcuda(&self) -> PathBuf {
        self.dir().join("libcuda.so.1")
    }

    /// `<dir>/libcudart.so.13`.
    pub fn libcudart(&self) -> PathBuf {
        self.dir().join("libcudart.so.13")
    }

    /// The built libcuda stand-in itself (`target/<profile>/libpinwise_standin_cuda.so`).
    pub fn cuda_standin(&self) -> &Path {
        &self.cuda_standin
    }

    /// The built libcudart stand-in itself.
    pub fn cudart_standin(&self) -> &Path {
        &self.cudart_standin
    }

    /// A `LD_LIBRARY_PATH` value with the stand-in directory first, followed by the current
    /// `LD_LIBRARY_PATH` (if any).
    pub fn ld_library_path(&self) -> String {
        let mut value = self.dir().display().to_string();
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|v| !v.is_empty()) {
            value.push(':');
            value.push_str(&old.to_string_lossy());
        }
        value
    }

    /// Points a child process at the stand-ins: sets `LD_LIBRARY_PATH` and `PINWISE_LIBCUDA`.
    pub fn configure<'c>(&self, command: &'c mut Command) -> &'c mut Command {
        command
            .env("LD_LIBRARY_PATH", self.ld_library_path())
            .env("PINWISE_LIBCUDA", self.libcuda())
    }

    /// A `Command` for `program` already pointed at the stand-ins (see
    /// [`StandinLibs::configure`]).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new(program);
        self.configure(&mut command);
        command
    }

    /// Compiler arguments that link a C program against the cudart stand-in and let it find
    /// the stand-ins at run time: `-L<dir> -lcudart -Wl,-rpath,<dir>`.
    pub fn cudart_link_args(&self) -> Vec<String> {
        let dir = self.dir().display();
        vec![
            format!("-L{dir}"),
            "-lcudart".to_string(),
            format!("-Wl,-rpath,{dir}"),
        ]
    }

    /// Like [`StandinLibs::cudart_link_args`], for a program that links libcuda directly.
    pub fn cuda_link_args(&self) -> Vec<String> {
        let dir = self.dir().display();
        vec![
            format!("-L{dir}"),
            "-lcuda".to_string(),
            format!("-Wl,-rpath,{dir}"),
        ]
    }
}

impl Default for StandinLibs {
    fn default() -> Self {
        StandinLibs::new()
    }
}

/// The directory holding the built stand-ins: `$PINWISE_STANDIN_DIR` if set, else the
/// cargo build directory of the running executable (`target/<profile>/` for a test in
/// `target/<profile>/deps/`, an example in `target/<profile>/examples/`, or a binary).
/// `Err` lists where it looked.
pub fn standin_build_dir() -> Result<PathBuf, String> {
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::var_os(STANDIN_DIR_ENV) {
        candidates.push(PathBuf::from(dir));
    } else if let Ok(exe) = std::env::current_exe() {
        candidates.extend(exe.ancestors().skip(1).take(3).map(Path::to_path_buf));
    }
    candidates
        .iter()
        .find(|d| d.join(CUDA_STANDIN_FILE).is_file() && d.join(CUDART_STANDIN_FILE).is_file())
        .cloned()
        .ok_or_else(|| {
            candidates
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        })
}

/// Prints a warning when a stand-in is older than its sources (a `cargo test -p X` does not
/// rebuild it).
fn warn_if_stale(library: &Path, crate_dir: &str) {
    let sources = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(crate_dir)
        .join("src");
    let Ok(built) = library.metadata().and_then(|m| m.modified()) else {
        return;
    };
    let newest_source = std::fs::read_dir(&sources)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.metadata().ok()?.modified().ok())
        .max();
    if newest_source.is_some_and(|s| s > built) {
        say(&format!(
            "WARNING: {} is older than {}: run `cargo build --workspace` to rebuild it",
            library.display(),
            sources.display()
        ));
    }
}

/// Writes a line straight to the stderr stream. (libtest captures `eprintln!` of passing
/// tests, which would hide a skip or a warning.)
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Whether the tests run in CI (`CI=true`, as GitHub Actions and most CI systems set it).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// The skip-or-fail rule: `true` when nothing is missing; otherwise panics under `CI=true`
/// and prints a visible `SKIPPED` line elsewhere.
fn require(test_name: &str, missing: Option<String>) -> bool {
    match missing {
        None => true,
        Some(reason) if in_ci() => panic!("{test_name}: {reason} (CI=true, so this fails)"),
        Some(reason) => {
            say(&format!("SKIPPED {test_name}: {reason}"));
            false
        }
    }
}

/// The effective user id, from `/proc/self/status`.
pub fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// `true` when running as root. Otherwise: under `CI=true` panics; elsewhere prints
/// `SKIPPED <name>: needs root for BPF` to stderr and returns `false`.
///
/// ```no_run
/// # fn traces_a_copy() {
/// if !pinwise_testkit::require_root("traces_a_copy") {
///     return;
/// }
/// # }
/// ```
pub fn require_root(test_name: &str) -> bool {
    let missing = (effective_uid() != Some(0)).then(|| "needs root for BPF".to_string());
    require(test_name, missing)
}

/// Like [`require_root`], and also checks that the kernel has the BPF system call
/// (`/proc/sys/kernel/unprivileged_bpf_disabled` exists only then). Whether a particular
/// program loads is for the test itself to find out.
pub fn require_bpf(test_name: &str) -> bool {
    let missing = if effective_uid() != Some(0) {
        Some("needs root for BPF".to_string())
    } else if !Path::new("/proc/sys/kernel/unprivileged_bpf_disabled").exists() {
        Some("this kernel has no BPF system call (CONFIG_BPF_SYSCALL)".to_string())
    } else {
        None
    };
    require(test_name, missing)
}

/// Compiles the C program `src` to the executable `out` with `$CC` (default `cc`), adding
/// `extra_args` after the output (libraries, `-D` flags, ...).
///
/// # Panics
/// If the compiler cannot be run or fails; the message holds its full output.
pub fn compile_c<S: AsRef<std::ffi::OsStr>>(src: &Path, out: &Path, extra_args: &[S]) {
    let compiler: OsString = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let mut command = Command::new(&compiler);
    command
        .arg("-O1")
        .arg("-g")
        .arg("-Wall")
        .arg(src)
        .arg("-o")
        .arg(out)
        .args(extra_args);
    let output = command.output().unwrap_or_else(|e| {
        panic!(
            "cannot run the C compiler {}: {e} (install a C compiler, e.g. `apt-get install gcc`)",
            compiler.to_string_lossy()
        )
    });
    if !output.status.success() {
        panic!(
            "compiling {} failed ({}):\n{:?}\n{}{}",
            src.display(),
            output.status,
            command,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// `fixtures/include/`: `cuda_driver_min.h`, the CUDA driver API declarations the C test
/// programs use (no CUDA headers needed). Programs in the repository include it by
/// relative path; [`compile_c_source`] puts this directory on the include path.
pub fn fixtures_include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/include")
}

/// Writes `code` to `<out>.c` and compiles it to `out` (see [`compile_c`]), with
/// [`fixtures_include_dir`] on the include path: `code` may `#include "cuda_driver_min.h"`.
pub fn compile_c_source<S: AsRef<std::ffi::OsStr>>(code: &str, out: &Path, extra_args: &[S]) {
    let src = out.with_extension("c");
    std::fs::write(&src, code).unwrap_or_else(|e| panic!("cannot write {}: {e}", src.display()));
    let mut args: Vec<OsString> = vec![format!("-I{}", fixtures_include_dir().display()).into()];
    args.extend(extra_args.iter().map(|a| a.as_ref().to_os_string()));
    compile_c(&src, out, &args);
}

/// This process's `RLIMIT_MEMLOCK` soft limit in bytes (`None` = unlimited or unreadable),
/// from `/proc/self/limits`.
pub fn locked_memory_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// Whether this process may lock `bytes` more of memory with `mlock` (root, or a high
/// enough `RLIMIT_MEMLOCK`): the stand-in pins with `mlock`. Otherwise: under `CI=true`
/// panics; elsewhere prints `SKIPPED <name>: ...` and returns `false`.
pub fn require_locked_memory(test_name: &str, bytes: u64) -> bool {
    let root = effective_uid() == Some(0);
    let missing = match locked_memory_limit() {
        Some(limit) if !root && limit < locked_memory_bytes() + bytes => Some(format!(
            "needs {bytes} bytes of lockable memory, RLIMIT_MEMLOCK is {limit} \
             (run as root or `ulimit -l unlimited`)"
        )),
        _ => None,
    };
    require(test_name, missing)
}

/// A `kB` field of `/proc/self/status` (`VmLck`, `VmRSS`, ...), in KiB.
pub fn proc_status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Bytes of this process's memory locked in RAM (`VmLck`), which pinning with `mlock` (the
/// stand-in's `cuMemHostAlloc`/`cuMemHostRegister`) raises.
pub fn locked_memory_bytes() -> u64 {
    proc_status_kib("VmLck").expect("/proc/self/status has no VmLck line") * 1024
}

/// The name of the unprivileged user the symlink tests plant files as.
pub const PROBE_USER: &str = "pinwise-probe";

/// An unprivileged user (`pinwise-probe`, created with `useradd --system` when absent) as
/// `(name, uid)`, for tests in which another user plants files. Needs root; otherwise, or
/// when the user cannot be created, panics under `CI=true` and prints `SKIPPED` elsewhere,
/// returning `None`.
pub fn require_other_user(test_name: &str) -> Option<(String, u32)> {
    if effective_uid() != Some(0) {
        require(test_name, Some("needs root to act as a second user".into()));
        return None;
    }
    let uid = |name: &str| -> Option<u32> {
        let out = Command::new("id").args(["-u", name]).output().ok()?;
        if !out.status.success() {
            return None;
        }
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    if uid(PROBE_USER).is_none() {
        let made = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
            ])
            .arg(PROBE_USER)
            .status();
        if !made.is_ok_and(|s| s.success()) && uid(PROBE_USER).is_none() {
            require(
                test_name,
                Some(format!(
                    "cannot create the unprivileged user {PROBE_USER} (useradd)"
                )),
            );
            return None;
        }
    }
    match uid(PROBE_USER) {
        Some(u) if u != 0 => Some((PROBE_USER.to_string(), u)),
        _ => {
            require(test_name, Some(format!("no usable uid for {PROBE_USER}")));
            None
        }
    }
}

/// Runs `sh -c script` as `user` (through `runuser`, from util-linux; needs root), and
/// panics if it fails.
pub fn run_as(user: &str, script: &str) {
    let out = Command::new("runuser")
        .args(["-u", user, "--", "sh", "-c", script])
        .output()
        .unwrap_or_else(|e| panic!("cannot run runuser: {e}"));
    assert!(
        out.status.success(),
        "as {user}: {script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_proc_status_fields() {
        assert!(proc_status_kib("VmRSS").unwrap() > 0);
        assert_eq!(proc_status_kib("NoSuchField"), None);
        assert!(effective_uid().is_some());
    }

    #[test]
    fn compiles_and_runs_a_c_program() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("hello");
        compile_c_source(
            "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 6 * 7); return 0; }\n",
            &exe,
            &[] as &[&str],
        );
        let out = Command::new(&exe).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "42");
    }

    #[test]
    #[should_panic(expected = "compiling")]
    fn a_broken_c_program_panics_with_the_compiler_output() {
        let dir = tempfile::tempdir().unwrap();
        compile_c_source(
            "int main(void) { return nope; }\n",
            &dir.path().join("bad"),
            &[] as &[&str],
        );
    }

    #[test]
    fn standin_libs_link_to_the_built_fixtures() {
        // Needs `cargo build --workspace` first, like every test that uses the stand-ins.
        let libs = StandinLibs::new();
        let target = std::fs::read_link(libs.libcuda()).unwrap();
        assert_eq!(target, libs.cuda_standin());
        assert!(libs.libcudart().exists());
        assert!(libs
            .ld_library_path()
            .starts_with(&libs.dir().display().to_string()));
        let mut command = Command::new("true");
        libs.configure(&mut command);
        let envs: Vec<_> = command.get_envs().map(|(k, _)| k.to_owned()).collect();
        assert!(envs.contains(&"PINWISE_LIBCUDA".into()));
        assert!(envs.contains(&"LD_LIBRARY_PATH".into()));
    }

    #[test]
    fn reads_the_locked_memory_limit() {
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
        let unlimited = limits
            .lines()
            .any(|l| l.starts_with("Max locked memory") && l.contains("unlimited"));
        assert_eq!(locked_memory_limit().is_none(), unlimited);
        assert!(require_locked_memory("testkit_self_test", 0) || in_ci());
    }

    #[test]
    fn require_root_matches_the_effective_uid() {
        if in_ci() && effective_uid() != Some(0) {
            return; // would panic by design
        }
        assert_eq!(
            require_root("testkit_self_test"),
            effective_uid() == Some(0)
        );
    }
}
