//! Shared setup for the tests that run programs under `pinwise run` against the CPU
//! stand-ins for libcuda and libcudart (TEST FIXTURES, not a GPU; nothing here measures
//! anything).
//!
//! The programs are built at test time (C with the system compiler, Rust with `rustc`)
//! from `tests/programs/`. `pinwise` and `libpinwise_preload.so` are the ones in the build
//! directory of the running test (`cargo build --workspace` makes them).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pinwise_core::history::{AllocKind, AllocState, AllocationView};
use pinwise_core::{Direction, MemHistory};
use pinwise_testkit::{compile_c, StandinLibs};

/// The build directory (`target/<profile>/`) holding `pinwise` and the preload library.
pub fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.ancestors()
        .skip(1)
        .take(3)
        .find(|d| d.join("pinwise").is_file() && d.join("libpinwise_preload.so").is_file())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| {
            panic!(
                "`pinwise` and `libpinwise_preload.so` were not found near {}: run \
                 `cargo build --workspace` first",
                exe.display()
            )
        })
}

/// The `pinwise` binary.
pub fn pinwise() -> PathBuf {
    build_dir().join("pinwise")
}

/// The preload library. Panics if it is older than its sources: `cargo test -p
/// pinwise-preload` builds the crate's tests, not its `cdylib`.
pub fn preload() -> PathBuf {
    let lib = build_dir().join("libpinwise_preload.so");
    let built = lib
        .metadata()
        .and_then(|m| m.modified())
        .expect("library metadata");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut stack = vec![src];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("read src").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if e
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t > built)
            {
                panic!(
                    "{} is older than {}: run `cargo build -p pinwise-preload` (or \
                     `cargo build --workspace`) before these tests",
                    lib.display(),
                    p.display()
                );
            }
        }
    }
    lib
}

/// A test program's source.
pub fn program_source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/programs")
        .join(name)
}

/// Stand-ins, a scratch directory, and programs built in it.
pub struct Setup {
    pub libs: StandinLibs,
    pub dir: tempfile::TempDir,
}

impl Setup {
    pub fn new() -> Setup {
        let _ = preload(); // fail early on a stale library
        Setup {
            libs: StandinLibs::new(),
            dir: tempfile::tempdir().expect("temporary directory"),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Builds `tests/programs/<source>` linked against the cudart stand-in.
    pub fn build_cudart(&self, source: &str, extra: &[&str]) -> PathBuf {
        let exe = self.path(source.trim_end_matches(".c"));
        let mut args = self.libs.cudart_link_args();
        args.extend(extra.iter().map(|s| s.to_string()));
        compile_c(&program_source(source), &exe, &args);
        exe
    }

    /// Builds `tests/programs/<source>` linked against the libcuda stand-in.
    pub fn build_driver(&self, source: &str, extra: &[&str]) -> PathBuf {
        let exe = self.path(source.trim_end_matches(".c"));
        let mut args = self.libs.cuda_link_args();
        args.extend(extra.iter().map(|s| s.to_string()));
        compile_c(&program_source(source), &exe, &args);
        exe
    }

    /// Builds a plain C program (no CUDA library linked).
    pub fn build_plain(&self, source: &str, extra: &[&str]) -> PathBuf {
        let exe = self.path(source.trim_end_matches(".c"));
        compile_c(&program_source(source), &exe, extra);
        exe
    }

    /// `program args` without pinwise (stand-ins on the library path).
    pub fn run_plain(&self, program: &Path, args: &[&str]) -> Output {
        let mut c = self.libs.command(program);
        c.args(args).current_dir(self.dir.path());
        clean_env(&mut c);
        c.output().expect("run the program")
    }

    /// `pinwise run <pinwise_args> -- program args`.
    ///
    /// The tests written before malloc-family tracking count the CUDA side's allocations
    /// exactly: unless `pinwise_args` says something about tracking (`--min-tracked`,
    /// `--no-malloc-hooks`), `--no-malloc-hooks` is added. The tests of tracking
    /// (`malloc_sites.rs`) ask for it, and run these workloads with it too.
    pub fn run_pinwise(&self, pinwise_args: &[&str], program: &Path, args: &[&str]) -> Output {
        let mut c = self.libs.command(pinwise());
        c.arg("run");
        if !pinwise_args
            .iter()
            .any(|a| a.starts_with("--min-tracked") || *a == "--no-malloc-hooks")
        {
            c.arg("--no-malloc-hooks");
        }
        c.args(pinwise_args)
            .arg("--")
            .arg(program)
            .args(args)
            .current_dir(self.dir.path());
        clean_env(&mut c);
        c.output().expect("run pinwise")
    }

    /// `pinwise run <pinwise_args> -o <history_file> --stats-json <stem>-summary.json --
    /// program` (files in the scratch directory; `history_file`'s extension picks the
    /// format, `.json` or `.bin`), which must succeed; loads the history and the summary it
    /// wrote.
    pub fn run_recorded(
        &self,
        program: &Path,
        pinwise_args: &[&str],
        history_file: &str,
    ) -> RecordedRun {
        let stem = Path::new(history_file)
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a history file name");
        let history_path = self.path(history_file);
        let summary_path = self.path(&format!("{stem}-summary.json"));
        let mut args = pinwise_args.to_vec();
        args.extend([
            "-o",
            history_path.to_str().unwrap(),
            "--stats-json",
            summary_path.to_str().unwrap(),
        ]);
        let out = self.run_pinwise(&args, program, &[]);
        assert_ok(&out, stem);
        RecordedRun {
            out,
            history: history(&history_path),
            summary: summary(&summary_path),
        }
    }
}

/// What [`Setup::run_recorded`] ran: pinwise's output (the program's, plus pinwise's
/// summary on stderr), the history and the summary JSON it wrote.
pub struct RecordedRun {
    pub out: Output,
    pub history: MemHistory,
    pub summary: serde_json::Value,
}

impl RecordedRun {
    /// The summary of the command's own process (the first of `processes`).
    pub fn process(&self) -> &serde_json::Value {
        &self.summary["processes"][0]
    }
}

/// Removes pinwise settings the test's own environment may carry.
pub fn clean_env(c: &mut Command) {
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("PINWISE_")
            && k != "PINWISE_LIBCUDA"
            && k != "PINWISE_STANDIN_DIR"
        {
            c.env_remove(k);
        }
    }
    c.env_remove("LD_PRELOAD");
}

/// Panics with everything the run printed unless it succeeded.
pub fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Panics unless `out` printed on stdout exactly what `plain` (the run without pinwise)
/// printed: compared as text first, for a readable difference, then byte for byte.
pub fn assert_same_stdout(out: &Output, plain: &Output, what: &str) {
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&plain.stdout),
        "{what}: stdout differs from the run without pinwise"
    );
    assert_eq!(out.stdout, plain.stdout, "{what}: byte-identical");
}

/// The `calls: k=v ...` line a test program prints on stderr.
pub fn calls(out: &Output) -> BTreeMap<String, u64> {
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .find(|l| l.starts_with("calls:"))
        .unwrap_or_else(|| panic!("no `calls:` line in:\n{err}"));
    line["calls:".len()..]
        .split_whitespace()
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("k=v");
            (k.to_string(), v.parse().expect("a number"))
        })
        .collect()
}

/// The summary JSON `pinwise run --stats-json` wrote.
pub fn summary(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).expect("summary written")).expect("summary JSON")
}

/// Loads a history dump.
pub fn history(path: &Path) -> MemHistory {
    pinwise_core::load_history(path).unwrap_or_else(|e| panic!("history {}: {e}", path.display()))
}

/// Allocations (not implicit records) of a history.
pub fn allocations(h: &MemHistory) -> Vec<AllocationView<'_>> {
    h.allocations().filter(|a| a.tag().call_no > 0).collect()
}

/// Transfers of one direction in the whole history.
pub fn transfers(h: &MemHistory, d: Direction) -> u64 {
    h.stats().transfers[d.index()].transfers
}

/// Allocation records grouped by call site offset: (kinds in call order, states).
pub fn by_site(h: &MemHistory) -> BTreeMap<u64, Vec<(u32, AllocKind, AllocState, u64)>> {
    let mut m: BTreeMap<u64, Vec<(u32, AllocKind, AllocState, u64)>> = BTreeMap::new();
    for a in allocations(h) {
        m.entry(a.tag().site.offset).or_default().push((
            a.tag().call_no,
            a.kind(),
            a.state(),
            a.transfer_count(),
        ));
    }
    for v in m.values_mut() {
        v.sort_by_key(|e| e.0);
    }
    m
}

/// A working `python3`; `None` (the test skips, visibly) where there is none, except under
/// `CI`, where its absence fails the test.
pub fn python3() -> Option<&'static str> {
    let found = ["python3", "/usr/bin/python3"].into_iter().find(|p| {
        Command::new(p)
            .arg("-c")
            .arg("pass")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if found.is_none() {
        if std::env::var_os("CI").is_some() {
            panic!("python3 is needed (scripts/setup.sh installs it)");
        }
        eprintln!("SKIPPED: no python3");
    }
    found
}
