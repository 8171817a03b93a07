//! Finding the CUDA libraries a process uses, or will use, so that their entry points can
//! be probed.
//!
//! Uprobes attach to files (inodes), so pinwise probes the files the process really maps:
//! for a running process, those in `/proc/PID/maps`; for a command about to be launched,
//! the files the dynamic loader would pick (`LD_LIBRARY_PATH`, the executable's
//! `RUNPATH`/`RPATH`, the `ldconfig` cache, the default directories), PyTorch's bundled
//! runtime in `site-packages`, and the executable itself (static cudart). Probing a file the
//! process ends up not using costs nothing but the attach. Libraries mapped later (a
//! `dlopen` nobody could foresee) are picked up while tracing (see [`crate::agent`]).

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::procmaps::{path_in_process, ProcMaps};

/// The files to probe, by role, deduplicated by file identity (device and inode).
#[derive(Debug, Default, Clone)]
pub struct Libraries {
    /// Candidates for `libcuda.so.1` (driver entry points).
    pub driver: Vec<PathBuf>,
    /// Candidates for the runtime (`libcudart.so*`, or an executable with cudart linked in).
    pub runtime: Vec<PathBuf>,
}

/// `--libcuda` / `--libcudart`: use these files instead of searching.
#[derive(Debug, Default, Clone)]
pub struct LibraryOverrides {
    /// The driver library to probe.
    pub libcuda: Option<PathBuf>,
    /// The runtime library to probe (in addition to the executable's own symbols).
    pub libcudart: Option<PathBuf>,
}

/// Whether a file name is the CUDA driver library (`libcuda.so`, `libcuda.so.1`, ...).
pub fn is_driver_name(name: &str) -> bool {
    name == "libcuda.so" || name.starts_with("libcuda.so.")
}

/// Whether a file name is a shared CUDA runtime (`libcudart.so.13`, ...).
pub fn is_runtime_name(name: &str) -> bool {
    name == "libcudart.so" || name.starts_with("libcudart.so.")
}

/// Whether the library at `path` is pinwise's CPU stand-in for libcuda (a test fixture): it
/// exports the symbol `pinwise_standin_fixture`. Only the symbol tables are looked up (a
/// real libcuda is tens of MiB; reading it whole would show in the tracer's peak RSS).
pub fn is_cuda_standin(path: &Path) -> bool {
    use blazesym::inspect::source::{Elf, Source};
    let mut elf = Elf::new(path);
    elf.debug_syms = false;
    blazesym::inspect::Inspector::new()
        .lookup(&Source::Elf(elf), &["pinwise_standin_fixture"])
        .is_ok_and(|found| found.iter().any(|infos| !infos.is_empty()))
}

/// (device, inode) of a file, following symlinks; the device encoded as in
/// [`crate::procmaps::Mapping::dev`] (`major << 32 | minor`), so that files found on disk
/// and files seen in `/proc/PID/maps` compare equal.
pub fn file_id(path: &Path) -> Option<(u64, u64)> {
    let meta = fs::metadata(path).ok()?;
    let dev = meta.dev();
    let key = (u64::from(libc::major(dev)) << 32) | u64::from(libc::minor(dev));
    meta.is_file().then_some((key, meta.ino()))
}

impl Libraries {
    fn push_unique(list: &mut Vec<PathBuf>, seen: &mut HashSet<(u64, u64)>, path: PathBuf) {
        if let Some(id) = file_id(&path) {
            if seen.insert(id) {
                list.push(path);
            }
        }
    }

    fn from_candidates(
        driver: impl IntoIterator<Item = PathBuf>,
        runtime: impl IntoIterator<Item = PathBuf>,
    ) -> Libraries {
        let mut out = Libraries::default();
        let mut seen = HashSet::new();
        for p in driver {
            Self::push_unique(&mut out.driver, &mut seen, p);
        }
        let mut seen = HashSet::new();
        for p in runtime {
            Self::push_unique(&mut out.runtime, &mut seen, p);
        }
        out
    }

    /// Applies `--libcuda`/`--libcudart`: an override replaces the search for that role
    /// (the executable stays a runtime candidate, for static cudart).
    /// An override is kept even if the file does not exist, so that the error names it.
    pub fn with_overrides(self, overrides: &LibraryOverrides, executable: Option<&Path>) -> Self {
        let driver = match &overrides.libcuda {
            Some(p) => vec![p.clone()],
            None => self.driver,
        };
        let runtime = match &overrides.libcudart {
            Some(p) => {
                let mut runtime =
                    Libraries::from_candidates([], executable.map(Path::to_path_buf)).runtime;
                runtime.push(p.clone());
                runtime
            }
            None => self.runtime,
        };
        Libraries { driver, runtime }
    }

    /// Whether no driver library was found.
    pub fn has_no_driver(&self) -> bool {
        self.driver.is_empty()
    }

    /// Every file, driver and runtime candidates (the executable included).
    pub fn all(&self) -> Vec<PathBuf> {
        self.driver.iter().chain(&self.runtime).cloned().collect()
    }
}

/// The CUDA libraries process `pid` maps now, and its executable.
pub fn in_process(pid: u32) -> std::io::Result<Libraries> {
    let maps = ProcMaps::read(pid)?;
    Ok(in_maps(pid, &maps))
}

/// The CUDA libraries in a maps snapshot of process `pid`, and its executable.
pub fn in_maps(pid: u32, maps: &ProcMaps) -> Libraries {
    let mut driver = Vec::new();
    let mut runtime = Vec::new();
    if let Ok(exe) = fs::read_link(format!("/proc/{pid}/exe")) {
        if let Some(exe) = exe.to_str() {
            runtime.push(path_in_process(
                pid,
                exe.strip_suffix(" (deleted)").unwrap_or(exe),
            ));
        }
    }
    for m in maps.mappings() {
        let (Some(path), Some(name)) = (m.file_path(), m.file_name()) else {
            continue;
        };
        if is_driver_name(name) {
            driver.push(path_in_process(pid, path));
        } else if is_runtime_name(name) {
            runtime.push(path_in_process(pid, path));
        }
    }
    Libraries::from_candidates(driver, runtime)
}

/// The environment a launched command will see, for the loader's search.
#[derive(Debug, Default, Clone)]
pub struct LaunchEnv {
    /// `PATH` (to find the program).
    pub path: Option<OsString>,
    /// `LD_LIBRARY_PATH`.
    pub ld_library_path: Option<OsString>,
    /// The working directory the command starts in.
    pub cwd: Option<PathBuf>,
}

impl LaunchEnv {
    /// This process's environment.
    pub fn current() -> Self {
        LaunchEnv {
            path: std::env::var_os("PATH"),
            ld_library_path: std::env::var_os("LD_LIBRARY_PATH"),
            cwd: std::env::current_dir().ok(),
        }
    }
}

/// The executable `program` names: itself if it contains a `/`, else the first match in
/// `PATH`.
pub fn resolve_program(program: &Path, env: &LaunchEnv) -> Option<PathBuf> {
    if program.as_os_str().to_string_lossy().contains('/') {
        let p = match &env.cwd {
            Some(cwd) if program.is_relative() => cwd.join(program),
            _ => program.to_path_buf(),
        };
        return p.is_file().then_some(p);
    }
    let path = env.path.clone().unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// Where the dynamic loader looks for `elf`'s libraries, in its order: DT_RPATH (only
/// without DT_RUNPATH), LD_LIBRARY_PATH, DT_RUNPATH (the default directories not included).
fn search_dirs(elf: &ElfDeps, executable: &Path, env: &LaunchEnv) -> Vec<PathBuf> {
    let origin = executable.parent().unwrap_or(Path::new("/"));
    let mut search: Vec<PathBuf> = Vec::new();
    if elf.runpath.is_empty() {
        search.extend(elf.rpath.iter().map(|d| expand_origin(d, origin)));
    }
    if let Some(llp) = &env.ld_library_path {
        search.extend(std::env::split_paths(llp).filter(|p| !p.as_os_str().is_empty()));
    }
    search.extend(elf.runpath.iter().map(|d| expand_origin(d, origin)));
    search
}

/// The `libpython3.*` libraries a command links (as the dynamic loader will find them):
/// read ahead of the launch, so that the tracer knows the interpreter when it is mapped.
pub fn python_libraries(executable: &Path, env: &LaunchEnv) -> Vec<PathBuf> {
    let elf = ElfDeps::read(executable);
    let search = search_dirs(&elf, executable, env);
    let defaults = default_dirs();
    let mut out = Vec::new();
    for needed in elf.needed.iter().filter(|n| n.starts_with("libpython3.")) {
        let found = search
            .iter()
            .chain(defaults.iter())
            .map(|d| d.join(needed))
            .find(|p| p.is_file());
        match found {
            Some(p) => out.push(p),
            None => out.extend(LdconfigCache::load().find(|n| n == needed.as_str())),
        }
    }
    out
}

/// The libraries a command will use, found the way the dynamic loader would find them.
pub fn for_command(executable: &Path, env: &LaunchEnv) -> Libraries {
    let ldconfig = LdconfigCache::load();
    let elf = ElfDeps::read(executable);
    let search = search_dirs(&elf, executable, env);
    let defaults = default_dirs();

    let find_in_dirs = |name: &str| -> Vec<PathBuf> {
        search
            .iter()
            .chain(defaults.iter())
            .map(|d| d.join(name))
            .filter(|p| p.is_file())
            .collect()
    };

    // Driver: what `dlopen("libcuda.so.1")` would find, and every ldconfig entry for it.
    let mut driver = find_in_dirs("libcuda.so.1");
    driver.extend(ldconfig.find(is_driver_name));

    // Runtime: the executable (static cudart), its libcudart dependency, every libcudart
    // known to ldconfig, and PyTorch's bundled copies when the program is Python.
    let mut runtime = vec![executable.to_path_buf()];
    for needed in elf.needed.iter().filter(|n| is_runtime_name(n)) {
        runtime.extend(find_in_dirs(needed));
    }
    for dir in &search {
        runtime.extend(runtime_files_in(dir));
    }
    runtime.extend(ldconfig.find(is_runtime_name));
    let name = executable
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name.starts_with("python") {
        for site in python_site_packages(executable, env) {
            runtime.extend(bundled_runtimes(&site));
        }
    }
    Libraries::from_candidates(driver, runtime)
}

fn expand_origin(dir: &str, origin: &Path) -> PathBuf {
    let origin = origin.to_string_lossy();
    PathBuf::from(
        dir.replace("${ORIGIN}", &origin)
            .replace("$ORIGIN", &origin),
    )
}

fn default_dirs() -> Vec<PathBuf> {
    [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib64",
        "/usr/lib64",
        "/lib",
        "/usr/lib",
    ]
    .iter()
    .map(PathBuf::from)
    .collect()
}

fn runtime_files_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| is_runtime_name(&e.file_name().to_string_lossy()))
        .map(|e| e.path())
        .collect()
}

/// `libcudart.so*` that pip wheels bundle: `nvidia/cu13/lib`, `nvidia/cuda_runtime/lib`
/// (CUDA 12 wheels), `torch/lib`.
fn bundled_runtimes(site_packages: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = fs::read_dir(site_packages.join("nvidia")) {
        for e in entries.filter_map(Result::ok) {
            out.extend(runtime_files_in(&e.path().join("lib")));
        }
    }
    out.extend(runtime_files_in(&site_packages.join("torch/lib")));
    out
}

/// The `site-packages` directories of a Python interpreter: those next to it
/// (`<prefix>/lib/python3*/site-packages`, which covers virtual environments), and those
/// the interpreter itself reports (asked with a 5-second limit).
fn python_site_packages(python: &Path, env: &LaunchEnv) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(prefix) = python.parent().and_then(Path::parent) {
        if let Ok(entries) = fs::read_dir(prefix.join("lib")) {
            for e in entries.filter_map(Result::ok) {
                if e.file_name().to_string_lossy().starts_with("python") {
                    out.push(e.path().join("site-packages"));
                }
            }
        }
    }
    let mut cmd = Command::new(python);
    cmd.args([
        "-c",
        "import site,sys\nfor p in site.getsitepackages()+[site.getusersitepackages()]: print(p)",
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    if let Some(llp) = &env.ld_library_path {
        cmd.env("LD_LIBRARY_PATH", llp);
    }
    if let Some(output) = run_with_timeout(cmd, Duration::from_secs(5)) {
        out.extend(output.lines().map(PathBuf::from));
    }
    out.retain(|p| p.is_dir());
    out
}

fn run_with_timeout(mut cmd: Command, limit: Duration) -> Option<String> {
    use std::io::Read;
    let mut child = cmd.spawn().ok()?;
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let mut text = String::new();
    child.stdout.take()?.read_to_string(&mut text).ok()?;
    Some(text)
}

/// The `ldconfig -p` listing: library name to path.
#[derive(Debug, Default)]
pub struct LdconfigCache {
    entries: Vec<(String, PathBuf)>,
}

impl LdconfigCache {
    /// Runs `ldconfig -p` (empty when it cannot be run).
    pub fn load() -> Self {
        for ldconfig in ["/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"] {
            let mut cmd = Command::new(ldconfig);
            cmd.arg("-p")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null());
            if let Some(text) = run_with_timeout(cmd, Duration::from_secs(5)) {
                return LdconfigCache::parse(&text);
            }
        }
        LdconfigCache::default()
    }

    /// Parses `ldconfig -p` output: `\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/libcuda.so.1`.
    pub fn parse(text: &str) -> Self {
        let entries = text
            .lines()
            .filter_map(|line| {
                let (left, path) = line.split_once(" => ")?;
                let name = left.split_whitespace().next()?;
                // 64-bit libraries only: pinwise runs on x86-64.
                if left.contains("(libc6)") && !left.contains("x86-64") {
                    return None;
                }
                Some((name.to_string(), PathBuf::from(path.trim())))
            })
            .collect();
        LdconfigCache { entries }
    }

    /// Paths of the entries whose name matches.
    pub fn find(&self, matches: impl Fn(&str) -> bool) -> Vec<PathBuf> {
        self.entries
            .iter()
            .filter(|(name, _)| matches(name))
            .map(|(_, path)| path.clone())
            .collect()
    }
}

/// What an executable's dynamic section says about its libraries.
#[derive(Debug, Default)]
struct ElfDeps {
    needed: Vec<String>,
    rpath: Vec<String>,
    runpath: Vec<String>,
}

impl ElfDeps {
    /// Reads `DT_NEEDED`, `DT_RPATH` and `DT_RUNPATH`; empty for anything unreadable (a
    /// script, a static executable).
    fn read(path: &Path) -> ElfDeps {
        use object::read::elf::ElfFile64;
        use object::Endianness;
        let Ok(data) = fs::read(path) else {
            return ElfDeps::default();
        };
        let Ok(file) = ElfFile64::<Endianness>::parse(&*data) else {
            return ElfDeps::default();
        };
        let Ok(table) = file.elf_dynamic_table() else {
            return ElfDeps::default();
        };
        let mut deps = ElfDeps::default();
        for d in table.iter() {
            let Ok(value) = table.string(d) else {
                continue;
            };
            let value = String::from_utf8_lossy(value).into_owned();
            match d.tag {
                object::elf::DT_NEEDED => deps.needed.push(value),
                object::elf::DT_RPATH => deps.rpath.extend(value.split(':').map(String::from)),
                object::elf::DT_RUNPATH => deps.runpath.extend(value.split(':').map(String::from)),
                _ => {}
            }
        }
        deps
    }
}

/// The C library process `pid` maps (`libc.so.6`, or an older `libc-2.*.so`), as a path
/// this process can open: where the malloc probes go.
pub fn libc_of(pid: u32) -> Option<PathBuf> {
    let maps = ProcMaps::read(pid).ok()?;
    maps.mappings()
        .iter()
        .filter(|m| m.exec)
        .find(|m| {
            m.file_name().is_some_and(|n| {
                n.starts_with("libc.so") || (n.starts_with("libc-") && n.ends_with(".so"))
            })
        })
        .and_then(|m| m.file_path())
        .map(|p| crate::procmaps::path_in_process(pid, p))
}

/// Whether a library's file name says it is an allocator pinwise probes with `--malloc`
/// (`libjemalloc.so.2`, `libmimalloc.so.2`, `libtcmalloc.so.4`, ...: their own `malloc`).
pub fn is_allocator_name(name: &str) -> bool {
    name.starts_with("lib")
        && name.contains(".so")
        && ["jemalloc", "mimalloc", "tcmalloc"]
            .iter()
            .any(|a| name.contains(a))
}

/// The files of process `pid` that may hold an allocator of their own, for the malloc
/// probes: its executable (a Rust program with jemalloc or mimalloc as its global
/// allocator links it statically) and the allocator libraries it maps (by name: reading
/// the symbols of every library, libtorch's included, would take seconds).
pub fn allocator_files_of(pid: u32) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(exe) = std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .and_then(|p| p.to_str().map(|p| crate::procmaps::path_in_process(pid, p)))
    {
        out.push(exe);
    }
    if let Ok(maps) = ProcMaps::read(pid) {
        for m in maps.mappings().iter().filter(|m| m.exec) {
            if m.file_name().is_some_and(is_allocator_name) {
                if let Some(p) = m.file_path() {
                    let p = crate::procmaps::path_in_process(pid, p);
                    if !out.contains(&p) {
                        out.push(p);
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocator_libraries_are_known_by_name() {
        for n in [
            "libjemalloc.so.2",
            "libmimalloc.so.2.1",
            "libtcmalloc_minimal.so.4",
        ] {
            assert!(is_allocator_name(n), "{n}");
        }
        for n in [
            "libc.so.6",
            "libcuda.so.1",
            "jemalloc.txt",
            "libtorch_cpu.so",
        ] {
            assert!(!is_allocator_name(n), "{n}");
        }
        // This process's executable is always among the files looked at.
        let files = allocator_files_of(std::process::id());
        assert_eq!(files.first(), std::env::current_exe().ok().as_ref());
    }

    #[test]
    fn parses_the_ldconfig_listing() {
        let text = "\
1234 libs found in cache `/etc/ld.so.cache'
\tlibcudart.so.13 (libc6,x86-64) => /usr/local/cuda/targets/x86_64-linux/lib/libcudart.so.13
\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/libcuda.so.1
\tlibcuda.so.1 (libc6,x86-64) => /usr/local/nvidia/lib64/libcuda.so.1
\tlibcuda.so.1 (libc6) => /usr/lib32/libcuda.so.1
\tlibc.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libc.so.6
";
        let cache = LdconfigCache::parse(text);
        assert_eq!(
            cache.find(is_driver_name),
            vec![
                PathBuf::from("/usr/lib/libcuda.so.1"),
                PathBuf::from("/usr/local/nvidia/lib64/libcuda.so.1")
            ]
        );
        assert_eq!(
            cache.find(is_runtime_name),
            vec![PathBuf::from(
                "/usr/local/cuda/targets/x86_64-linux/lib/libcudart.so.13"
            )]
        );
    }

    #[test]
    fn names_of_cuda_libraries() {
        assert!(is_driver_name("libcuda.so.1"));
        assert!(is_driver_name("libcuda.so"));
        assert!(!is_driver_name("libcudart.so.13"));
        assert!(!is_driver_name("libcuda_standin.so"));
        assert!(is_runtime_name("libcudart.so.13"));
        assert!(!is_runtime_name("libcudart_static.a"));
    }

    #[test]
    fn finds_a_launched_command_s_libraries_through_ld_library_path() {
        let dir = tempfile::tempdir().unwrap();
        // Stand-ins for the two libraries: the search only looks at names and files.
        fs::copy("/bin/true", dir.path().join("libcuda.so.1")).unwrap();
        fs::copy("/bin/false", dir.path().join("libcudart.so.13")).unwrap();
        let env = LaunchEnv {
            path: Some("/usr/bin:/bin".into()),
            ld_library_path: Some(dir.path().as_os_str().to_owned()),
            cwd: None,
        };
        let exe = resolve_program(Path::new("true"), &env).unwrap();
        let libs = for_command(&exe, &env);
        assert_eq!(libs.driver.first(), Some(&dir.path().join("libcuda.so.1")));
        assert_eq!(libs.runtime.first(), Some(&exe));
        assert!(libs.runtime.contains(&dir.path().join("libcudart.so.13")));
    }

    #[test]
    fn only_a_library_exporting_the_fixture_marker_is_the_stand_in() {
        assert!(!is_cuda_standin(&std::env::current_exe().unwrap()));
        assert!(!is_cuda_standin(Path::new("/nonexistent/libcuda.so.1")));
    }

    #[test]
    fn reads_this_test_binary_s_needed_libraries() {
        let exe = std::env::current_exe().unwrap();
        let deps = ElfDeps::read(&exe);
        assert!(
            deps.needed.iter().any(|n| n.starts_with("libc.so")),
            "{:?}",
            deps.needed
        );
    }
}
