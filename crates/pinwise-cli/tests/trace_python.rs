//! `pinwise trace` on a Python program (ctypes into the CPU stand-ins for libcuda and
//! libcudart, a TEST FIXTURE, not a GPU): the stacks BPF captures carry the interpreter's
//! frames, named `file:line in function` from the script, for a pinned allocation, pageable
//! ones (the malloc probes), copies (sampled), a copy made on a second thread and a pinned
//! allocation in a forked child; the report shows them. Attached by `--pid` to a Python process that runs already, the tracer names
//! the frames of the allocation it makes after the attach. Run with Debian's `/usr/bin/python3` (CPython 3.11, what CI has) and with the
//! pyenv builds of 3.10-3.13 where they are installed (`/root/.pyenv/versions/`).
//! Needs root for BPF: skipped with a visible message elsewhere, failing under `CI=true`
//! when BPF is unavailable.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use pinwise_core::history::AllocKind;
use pinwise_core::{load_history, Frame, MemHistory};
use pinwise_testkit::{require_bpf, StandinLibs};

fn script() -> PathBuf {
    program("py_trace_sites.py")
}

fn program(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/programs")
        .join(name)
}

/// The line of the script marked `# site: <name>`.
fn line_of(source: &str, name: &str) -> u32 {
    let marker = format!("# site: {name}");
    let found: Vec<u32> = source
        .lines()
        .enumerate()
        .filter(|(_, l)| l.trim_end().ends_with(&marker))
        .map(|(i, _)| i as u32 + 1)
        .collect();
    assert_eq!(found.len(), 1, "one line marked {marker:?}");
    found[0]
}

/// The interpreters to run: Debian's python3 (required), pyenv's 3.10-3.13 if present.
fn interpreters() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let system = Path::new("/usr/bin/python3");
    if system.exists() {
        out.push(system.to_path_buf());
    } else if std::env::var_os("CI").is_some() {
        panic!("/usr/bin/python3 is needed (scripts/setup.sh installs it)");
    } else {
        eprintln!("SKIPPED: no /usr/bin/python3");
    }
    for v in ["3.10.13", "3.11.7", "3.12.1", "3.13.0"] {
        let minor = &v[..v.rfind('.').unwrap()];
        let p = PathBuf::from(format!("/root/.pyenv/versions/{v}/bin/python{minor}"));
        if p.exists() {
            out.push(p);
        } else {
            eprintln!("not here (not tested): {}", p.display());
        }
    }
    out
}

/// The Python frames of a stack as (function, line), and whether they all come from the
/// script.
fn python_frames(stack: &[Frame]) -> Vec<(String, u32, String)> {
    stack
        .iter()
        .filter_map(|f| match f {
            Frame::Python(p) => Some((p.function.to_string(), p.line, p.file.to_string())),
            Frame::Native(_) => None,
        })
        .collect()
}

fn from_script(frames: &[(String, u32, String)]) -> Vec<(&str, u32)> {
    frames_in(frames, "py_trace_sites.py")
}

/// The (function, line) of the frames whose file is `script` (a file name).
fn frames_in<'a>(frames: &'a [(String, u32, String)], script: &str) -> Vec<(&'a str, u32)> {
    frames
        .iter()
        .filter(|(_, _, file)| file.ends_with(script))
        .map(|(f, l, _)| (f.as_str(), *l))
        .collect()
}

fn trace(libs: &StandinLibs, python: &Path, out: &Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_pinwise"))
        .env("LD_LIBRARY_PATH", libs.ld_library_path())
        // Each Python version is traced to the same file: replaced.
        .args(["trace", "--force", "--malloc", "--copy-stacks", "1", "-o"])
        .arg(out)
        .arg("--")
        .arg(python)
        .arg(script())
        .arg(libs.libcudart())
        .output()
        .expect("running pinwise trace");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "pinwise trace {} failed:\n{stderr}",
        python.display()
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(&format!("total {}", 3 * 256 * 1024)),
        "{stdout}"
    );
    stderr
}

fn user_label(h: &MemHistory, stack: &[Frame]) -> String {
    h.frame_label(&stack[h.user_frame(stack).expect("a user frame")])
}

#[test]
fn python_frames_name_the_script_lines_of_allocations_and_copies() {
    let name = "python_frames_name_the_script_lines_of_allocations_and_copies";
    if !require_bpf(name) {
        return;
    }
    let source = std::fs::read_to_string(script()).unwrap();
    let l = |n: &str| line_of(&source, n);
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let pythons = interpreters();
    for python in &pythons {
        let shown = python.display().to_string();
        let out = dir.path().join("py.json");
        let stderr = trace(&libs, python, &out);
        let h = load_history(&out).unwrap_or_else(|e| panic!("{shown}: {e}\n{stderr}"));
        let stat = |k: &str| h.source_stats().get(k).copied().unwrap_or(0);
        assert!(stat("tracer.python_stacks") > 0, "{shown}:\n{stderr}");
        let with_stacks: Vec<_> = h
            .allocations()
            .filter_map(|a| {
                let stack = a.stack()?;
                let py = python_frames(&stack);
                Some((a, stack, py))
            })
            .collect();

        // The pinned buffers: cudaMallocHost in pin_buffer, called from main (1 MiB), and
        // in in_child, in a forked child (64 KiB).
        let pinned = |size: u64| {
            let found: Vec<_> = with_stacks
                .iter()
                .filter(|(a, _, _)| a.kind() == AllocKind::PinnedAlloc && a.size() == size)
                .collect();
            assert_eq!(
                found.len(),
                1,
                "{shown}: one pinned allocation of {size} bytes"
            );
            found[0]
        };
        let (_, _, py) = pinned(1 << 16);
        assert_eq!(
            from_script(py),
            [
                ("in_child", l("child")),
                ("main", l("main-fork")),
                ("<module>", l("module"))
            ],
            "{shown}: {py:?}"
        );
        let (_, stack, py) = pinned(1 << 20);
        assert_eq!(
            from_script(py),
            [
                ("pin_buffer", l("pin")),
                ("main", l("main-pin")),
                ("<module>", l("module"))
            ],
            "{shown}: {py:?}"
        );
        assert_eq!(
            user_label(&h, stack),
            format!("py_trace_sites.py:{} in pin_buffer", l("pin")),
            "{shown}"
        );

        // The three pageable buffers: bytearray in make_buffer (the malloc probes), each
        // copied once.
        let made: Vec<_> = with_stacks
            .iter()
            .filter(|(_, _, py)| py.first().is_some_and(|f| f.0 == "make_buffer"))
            .collect();
        assert_eq!(made.len(), 3, "{shown}");
        for (a, stack, py) in &made {
            assert_eq!(a.kind(), AllocKind::Pageable, "{shown}");
            assert_eq!(a.transfer_count(), 1, "{shown}");
            assert_eq!(
                from_script(py),
                [
                    ("make_buffer", l("make")),
                    ("main", l("main-make")),
                    ("<module>", l("module"))
                ],
                "{shown}: {py:?}"
            );
            // Python frames only: the interpreter's native frames are replaced by them.
            assert!(matches!(stack[0], Frame::Python(_)), "{shown}: {stack:?}");
        }

        // The small buffers: below the malloc threshold, their records are made by their
        // first (sampled) copy and keep its stack: upload, from main, and from the worker
        // thread (whose outer frames are the threading module's).
        let copied: Vec<_> = with_stacks
            .iter()
            .filter(|(a, _, _)| a.kind() == AllocKind::Untracked)
            .map(|(a, stack, py)| (a.size(), stack, py))
            .collect();
        let by_size = |size: u64| {
            let found: Vec<_> = copied.iter().filter(|c| c.0 == size).collect();
            assert_eq!(found.len(), 1, "{shown}: one record of {size} bytes");
            found[0]
        };
        // Records of untracked memory span what the copies touched.
        let (_, stack, py) = by_size(32 * 1024);
        assert_eq!(
            from_script(py),
            [
                ("upload", l("upload")),
                ("main", l("main-small")),
                ("<module>", l("module"))
            ],
            "{shown}: {py:?}"
        );
        assert_eq!(
            user_label(&h, stack),
            format!("py_trace_sites.py:{} in upload", l("upload")),
            "{shown}"
        );
        let (_, _, py) = by_size(16 * 1024);
        assert_eq!(
            from_script(py),
            [("upload", l("upload")), ("worker", l("worker"))],
            "{shown}: {py:?}"
        );
        assert!(
            py.iter()
                .any(|(f, _, file)| f == "run" && file.ends_with("threading.py")),
            "{shown}: {py:?}"
        );

        // The report shows them.
        let report = Command::new(env!("CARGO_BIN_EXE_pinwise"))
            .args(["report", "--stacks"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(report.status.success());
        let text = String::from_utf8_lossy(&report.stdout);
        for (function, line) in [
            ("make_buffer", l("make")),
            ("pin_buffer", l("pin")),
            ("upload", l("upload")),
            ("worker", l("worker")),
        ] {
            let want = format!("py_trace_sites.py:{line} in {function}");
            assert!(text.contains(&want), "{shown}: no {want:?} in\n{text}");
        }
        eprintln!("{shown}: Python frames as expected");
    }
    assert!(!pythons.is_empty() || std::env::var_os("CI").is_none());
}

/// `pinwise trace --pid` attached to a Python process that runs already: the interpreter is
/// found in its maps at the attach, and the allocation it makes afterwards has the script's
/// frames.
#[test]
fn python_frames_of_a_process_attached_to() {
    let name = "python_frames_of_a_process_attached_to";
    if !require_bpf(name) {
        return;
    }
    let script = program("py_attach.py");
    let source = std::fs::read_to_string(&script).unwrap();
    let l = |n: &str| line_of(&source, n);
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    for python in interpreters() {
        let shown = python.display().to_string();
        let mut program = Command::new(&python)
            .arg(&script)
            .arg(libs.libcudart())
            .env("LD_LIBRARY_PATH", libs.ld_library_path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting the program");
        let mut lines = BufReader::new(program.stdout.take().unwrap()).lines();
        assert_eq!(lines.next().unwrap().unwrap(), "ready", "{shown}");
        let out = dir.path().join("attach.json");
        let mut trace = Command::new(env!("CARGO_BIN_EXE_pinwise"))
            .args(["trace", "--force", "--pid"])
            .arg(program.id().to_string())
            .arg("--libcuda")
            .arg(libs.libcuda())
            .arg("-o")
            .arg(&out)
            .stderr(Stdio::piped())
            .spawn()
            .expect("running pinwise trace");
        let mut trace_err = BufReader::new(trace.stderr.take().unwrap());
        let mut stderr = String::new();
        loop {
            let mut line = String::new();
            let n = trace_err.read_line(&mut line).unwrap();
            stderr.push_str(&line);
            assert!(
                n > 0,
                "{shown}: pinwise trace ended before tracing:\n{stderr}"
            );
            if line.contains("tracing PID") {
                break;
            }
        }
        let mut stdin = program.stdin.take().unwrap();
        stdin.write_all(b"go\n").unwrap();
        drop(stdin);
        assert_eq!(lines.next().unwrap().unwrap(), "done", "{shown}");
        assert!(program.wait().unwrap().success(), "{shown}");
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut trace_err, &mut rest).unwrap();
        stderr.push_str(&rest);
        assert!(trace.wait().unwrap().success(), "{shown}:\n{stderr}");
        let h = load_history(&out).unwrap_or_else(|e| panic!("{shown}: {e}\n{stderr}"));
        let pinned: Vec<_> = h
            .allocations()
            .filter(|a| a.kind() == AllocKind::PinnedAlloc)
            .collect();
        assert_eq!(pinned.len(), 1, "{shown}:\n{stderr}");
        let stack = pinned[0].stack().expect("the pinned allocation's stack");
        let py = python_frames(&stack);
        assert_eq!(
            frames_in(&py, "py_attach.py"),
            [
                ("pin_after_attach", l("pin")),
                ("main", l("main-pin")),
                ("<module>", l("module"))
            ],
            "{shown}: {py:?}"
        );
        eprintln!("{shown}: Python frames after the attach as expected");
    }
}
