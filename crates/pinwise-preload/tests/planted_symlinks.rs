//! Root runs pinwise in a directory where another (unprivileged) user planted symlinks:
//! at every output path it will be asked to write, at every per-process name derived from
//! them, and at every temporary name older versions used (`.<name>.tmp<PID>`,
//! `<name>.tmp<PID>`, `<stem>.tmp`) for the next few hundred pids. Whatever pinwise does,
//! nothing outside the outputs the command named may change; the files it writes are 0600.
//! Runs every writer: `pinwise run -o/--stats-json/--log/--profile` (the preload library
//! writes the history, profile and log), `report --html`, `export --perfetto`,
//! `calibrate --out`, and, where BPF works, `pinwise trace -o/--summary-json`. Stand-ins are
//! TEST FIXTURES. Needs root (skips visibly elsewhere, fails under CI=true).

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;

/// What a directory entry is: a symlink's target, or a file's mode and content.
#[derive(Debug, PartialEq, Eq)]
enum Entry {
    Link(PathBuf, u32),
    File(u32, Vec<u8>),
    Dir(u32),
}

fn snapshot(dir: &Path) -> BTreeMap<String, Entry> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let entry = if m.file_type().is_symlink() {
                Entry::Link(std::fs::read_link(&p).unwrap(), m.uid())
            } else if m.is_dir() {
                Entry::Dir(m.mode())
            } else {
                Entry::File(m.mode(), std::fs::read(&p).unwrap())
            };
            (e.file_name().to_string_lossy().into_owned(), entry)
        })
        .collect()
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

fn last_pid() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1)
}

struct Scene {
    s: Setup,
    victim_dir: tempfile::TempDir,
    victim: PathBuf,
    user: String,
    uid: u32,
    exe: PathBuf,
    good_history: PathBuf,
}

/// The named outputs, relative to the scratch directory.
const OUTPUTS: [&str; 8] = [
    "hist.json",
    "hist.bin",
    "stats.json",
    "run.log",
    "prof.json",
    "page.html",
    "perfetto.json",
    "cal.csv",
];
const TRACE_OUTPUTS: [&str; 2] = ["trace.json", "trace-summary.json"];

impl Scene {
    fn new(test: &str) -> Option<Scene> {
        let (user, uid) = pinwise_testkit::require_other_user(test)?;
        let s = Setup::new();
        let exe = s.build_cudart("cudart_workload.c", &[]);
        // A history to report on, written before anything is planted, outside the scene.
        let victim_dir = tempfile::tempdir().unwrap();
        let good_history = victim_dir.path().join("good.json");
        let out = s.run_pinwise(&["-o", good_history.to_str().unwrap()], &exe, &[]);
        assert_ok(&out, "the history to report on");
        let victim = victim_dir.path().join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
        // A shared directory like /tmp: world-writable, sticky.
        std::fs::set_permissions(s.dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        Some(Scene {
            s,
            victim_dir,
            victim,
            user,
            uid,
            exe,
            good_history,
        })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.s.path(name)
    }

    /// The other user plants `ln -s victim <name>` for each name (through `runuser`).
    fn plant_as_user(&self, names: &[String]) {
        let mut script = String::new();
        for n in names {
            script += &format!(
                "ln -s '{}' '{}' && ",
                self.victim.display(),
                self.path(n).display()
            );
        }
        script += "true";
        pinwise_testkit::run_as(&self.user, &script);
    }

    /// Plants many symlinks owned by the other user at once (root makes them and hands them
    /// over with lchown: the same result as the user making them, hundreds of times faster).
    fn plant_bulk(&self, names: &[String]) {
        for n in names {
            let p = self.path(n);
            if std::fs::symlink_metadata(&p).is_ok() {
                continue;
            }
            std::os::unix::fs::symlink(&self.victim, &p).unwrap();
            std::os::unix::fs::lchown(&p, Some(self.uid), Some(self.uid)).unwrap();
        }
    }

    /// Every predictable temporary or per-process name for the next `n` pids.
    fn predictable_names(&self, n: u32) -> Vec<String> {
        let first = last_pid();
        let mut names = Vec::new();
        for name in OUTPUTS.iter().chain(&TRACE_OUTPUTS) {
            let (stem, _) = name.rsplit_once('.').unwrap();
            names.push(format!("{stem}.tmp"));
            for pid in first..first + n {
                names.push(format!(".{name}.tmp{pid}"));
                names.push(format!("{stem}.tmp{pid}"));
            }
        }
        names
    }

    fn pinwise(&self) -> Command {
        let mut c = self.s.libs.command(pinwise());
        c.current_dir(self.s.dir.path());
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("PINWISE_") && k != "PINWISE_STANDIN_DIR" {
                c.env_remove(k);
            }
        }
        c.env_remove("LD_PRELOAD");
        c
    }

    /// Runs every writer once; returns each command's name and output.
    fn run_writers(&self, with_trace: bool) -> Vec<(&'static str, Output)> {
        let p = |n: &str| self.path(n).to_str().unwrap().to_string();
        let mut runs = Vec::new();
        let run = |args: &[String]| {
            self.pinwise()
                .args(args)
                .env("PINWISE_LOG_LEVEL", "debug")
                .output()
                .expect("run pinwise")
        };
        let strs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let exe = self.exe.to_str().unwrap();
        runs.push((
            "run -o json --stats-json --log",
            run(&strs(&[
                "run",
                "-o",
                &p("hist.json"),
                "--stats-json",
                &p("stats.json"),
                "--log",
                &p("run.log"),
                "--",
                exe,
            ])),
        ));
        runs.push((
            "run -o bin --mode profile --profile",
            run(&strs(&[
                "run",
                "-o",
                &p("hist.bin"),
                "--mode",
                "profile",
                "--profile",
                &p("prof.json"),
                "--",
                exe,
            ])),
        ));
        let good = self.good_history.to_str().unwrap();
        runs.push((
            "report --html",
            run(&strs(&[
                "report",
                "--quiet",
                "--no-symbols",
                "--html",
                &p("page.html"),
                good,
            ])),
        ));
        runs.push((
            "export --perfetto",
            run(&strs(&[
                "export",
                "--quiet",
                "--no-symbols",
                "--perfetto",
                &p("perfetto.json"),
                good,
            ])),
        ));
        let mut cal = self.pinwise();
        cal.env("PINWISE_LIBCUDA", self.s.libs.libcuda())
            .args(strs(&[
                "calibrate",
                "--sizes",
                "4K",
                "--repeats",
                "1",
                "-o",
                &p("cal.csv"),
            ]));
        runs.push((
            "calibrate --out",
            cal.output().expect("run pinwise calibrate"),
        ));
        if with_trace {
            runs.push((
                "trace -o --summary-json",
                run(&strs(&[
                    "trace",
                    "-o",
                    &p("trace.json"),
                    "--summary-json",
                    &p("trace-summary.json"),
                    "--",
                    exe,
                ])),
            ));
        }
        runs
    }
}

fn show(what: &str, out: &Output) -> String {
    format!(
        "{what}: {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn symlinks_planted_at_the_outputs_are_refused_and_nothing_else_changes() {
    let Some(scene) = Scene::new("symlinks_planted_at_the_outputs_are_refused") else {
        return;
    };
    let with_trace = pinwise_testkit::require_bpf("planted_symlinks (trace part)");
    let mut named: Vec<String> = OUTPUTS.iter().map(|s| s.to_string()).collect();
    if with_trace {
        named.extend(TRACE_OUTPUTS.iter().map(|s| s.to_string()));
    }
    scene.plant_as_user(&named);
    let before = snapshot(scene.s.dir.path());
    let victims_before = snapshot(scene.victim_dir.path());
    for (what, out) in scene.run_writers(with_trace) {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("refusing to"),
            "{what} did not say it refused the symlink\n{}",
            show(what, &out)
        );
    }
    assert_eq!(
        std::fs::read_to_string(&scene.victim).unwrap(),
        "precious\n"
    );
    assert_eq!(snapshot(scene.victim_dir.path()), victims_before);
    let after = snapshot(scene.s.dir.path());
    // Every planted symlink is still there, unchanged; nothing new was left behind.
    for n in &named {
        assert_eq!(
            after.get(n),
            Some(&Entry::Link(scene.victim.clone(), scene.uid)),
            "{n} changed"
        );
    }
    assert_eq!(after, before, "the directory changed");
}

#[test]
fn symlinks_planted_at_predictable_temporary_names_are_never_followed() {
    let Some(scene) = Scene::new("symlinks_planted_at_predictable_temporary_names") else {
        return;
    };
    let with_trace = pinwise_testkit::require_bpf("planted temporary names (trace part)");
    let planted = scene.predictable_names(400);
    // A few by the user's own hand, the rest handed over in bulk.
    scene.plant_as_user(&planted[..8]);
    scene.plant_bulk(&planted[8..]);
    let before = snapshot(scene.s.dir.path());
    let victims_before = snapshot(scene.victim_dir.path());
    for (what, out) in scene.run_writers(with_trace) {
        assert!(out.status.success(), "{}", show(what, &out));
    }
    assert_eq!(
        std::fs::read_to_string(&scene.victim).unwrap(),
        "precious\n"
    );
    assert_eq!(snapshot(scene.victim_dir.path()), victims_before);
    let mut after = snapshot(scene.s.dir.path());
    let mut named: Vec<&str> = OUTPUTS.to_vec();
    if with_trace {
        named.extend(TRACE_OUTPUTS);
    }
    for n in &named {
        let p = scene.path(n);
        let m = std::fs::symlink_metadata(&p).unwrap_or_else(|e| panic!("{n} missing: {e}"));
        assert!(m.is_file(), "{n} is not a regular file");
        assert_eq!(mode(&p), 0o600, "{n} mode");
        assert!(m.len() > 0, "{n} is empty");
        after.remove(*n);
    }
    assert_eq!(after, before, "something besides the named outputs changed");
}

#[test]
fn the_temporary_statistics_directory_is_private() {
    let s = Setup::new();
    let out = s.run_pinwise(
        &[],
        Path::new("/bin/sh"),
        &["-c", "stat -c %a \"$PINWISE_STATS_DIR\""],
    );
    assert_ok(&out, "stat");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "700");
}
