//! Real interpreters: Python loads the `pyframes_probe` example (a cdylib over this crate)
//! with ctypes from a script written here, calls it from known lines of nested functions,
//! and the frames the probe captured must be exactly those lines.
//!
//! Interpreters: `python3` on PATH (required: scripts/setup.sh installs Debian's), plus
//! every CPython 3.10-3.13 found under ~/.pyenv/versions and in `PINWISE_TEST_PYTHONS`
//! (colon-separated paths).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The probe library cargo built with this test (`cargo test` builds examples).
fn probe() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap();
    let lib = profile_dir.join("examples/libpyframes_probe.so");
    assert!(
        lib.exists(),
        "{} missing: build it with `cargo build -p pinwise-pyframes --examples` \
         (cargo test and nextest build it)",
        lib.display()
    );
    lib
}

/// The interpreters to run: python3 first, then the others found.
fn pythons() -> Vec<String> {
    let mut out = vec!["python3".to_string()];
    if Path::new("/usr/bin/python3").exists() {
        out.push("/usr/bin/python3".into());
    }
    if let Some(home) = std::env::var_os("HOME") {
        let versions = Path::new(&home).join(".pyenv/versions");
        if let Ok(dir) = std::fs::read_dir(&versions) {
            let mut found: Vec<String> = dir
                .filter_map(|e| e.ok())
                .filter(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    ["3.10.", "3.11.", "3.12.", "3.13."]
                        .iter()
                        .any(|p| n.starts_with(p))
                })
                .map(|e| e.path().join("bin/python3"))
                .filter(|p| p.exists())
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            found.sort();
            out.extend(found);
        }
    }
    if let Ok(extra) = std::env::var("PINWISE_TEST_PYTHONS") {
        out.extend(extra.split(':').filter(|s| !s.is_empty()).map(String::from));
    }
    out
}

/// The script. Lines matter: the test asserts them (see `EXPECTED_*`).
const SCRIPT: &str = r#"import ctypes, sys, threading
lib = ctypes.CDLL(sys.argv[1])
held = ctypes.PyDLL(sys.argv[1])
buf = ctypes.create_string_buffer(1 << 16)

def inner(api, mode):
    x = 1
    y = x + 1
    n = api.pyframes_probe(mode, buf, len(buf))
    return n, buf.value.decode()

def middle(api, mode):
    return inner(api, mode)

def outer(api, mode):
    pad = 0
    return middle(api, mode)

class Model:
    def forward(self, api, mode):
        return outer(api, mode)

def report(label, result):
    n, text = result
    print("BEGIN %s %d" % (label, n))
    print(text, end="")
    print("END")

vbuf = ctypes.create_string_buffer(16)
lib.pyframes_version(vbuf, 16)
print("VERSION %s %d.%d" % (vbuf.value.decode(), sys.version_info[0], sys.version_info[1]))
report("released-capture", outer(lib, 0))
report("released-now", outer(lib, 1))
report("held-capture", outer(held, 0))
report("method", Model().forward(lib, 0))
results = []
t = threading.Thread(target=lambda: results.append(outer(lib, 0)))
t.start()
t.join()
report("thread", results[0])
print("ALLOCATIONS %d" % lib.pyframes_capture_allocations())

# Threads capturing at once, each at its own depth: each must see its own stack.
def climb(depth, tag, own, failures):
    if depth > 0:
        return climb(depth - 1, tag, own, failures)
    for _ in range(50):
        n = own.pyframes_probe(0, tbuf[tag], len(tbuf[tag]))
        names = [l.rsplit(":", 1)[1] for l in tbuf[tag].value.decode().splitlines()]
        # climb at depth 0, `tag` more climbs, the thread's entry, threading's frames.
        if names[:tag + 2] != ["climb"] * (tag + 1) + ["entry%d" % tag]:
            failures.append((tag, names))

failures = []
tbuf = [ctypes.create_string_buffer(1 << 16) for _ in range(4)]
def entry0(): climb(0, 0, lib, failures)
def entry1(): climb(1, 1, lib, failures)
def entry2(): climb(2, 2, lib, failures)
def entry3(): climb(3, 3, lib, failures)
threads = [threading.Thread(target=f) for f in (entry0, entry1, entry2, entry3)]
for t in threads: t.start()
for t in threads: t.join()
print("CONCURRENT failures=%d %s" % (len(failures), failures[:2]))

def gen(api):
    yield outer(api, 0)
report("generator", next(gen(lib)))

def deep(depth):
    if depth:
        return deep(depth - 1)
    return outer(lib, 0)
report("deep", deep(40))
"#;

/// `(line, function)` of the frames under the probe call, innermost first, for a call
/// from `outer` at module level.
const EXPECTED_NESTED: [(u32, &str); 3] = [(9, "inner"), (13, "middle"), (17, "outer")];

#[derive(Debug)]
struct Frame {
    file: String,
    line: u32,
    function: String,
}

/// The frames of the report labelled `label`.
fn section(out: &str, label: &str) -> (i64, Vec<Frame>) {
    let begin = out
        .lines()
        .position(|l| l.starts_with(&format!("BEGIN {label} ")))
        .unwrap_or_else(|| panic!("no {label} report in:\n{out}"));
    let lines: Vec<&str> = out.lines().collect();
    let n = lines[begin].rsplit(' ').next().unwrap().parse().unwrap();
    let frames = lines[begin + 1..]
        .iter()
        .take_while(|l| **l != "END")
        .map(|l| {
            let mut it = l.rsplitn(3, ':');
            let function = it.next().unwrap().to_string();
            let line = it.next().unwrap().parse().unwrap();
            let file = it.next().unwrap().to_string();
            Frame {
                file,
                line,
                function,
            }
        })
        .collect();
    (n, frames)
}

fn assert_frames(python: &str, label: &str, got: &[Frame], script: &Path, want: &[(u32, &str)]) {
    let render = |fs: &[Frame]| {
        fs.iter()
            .map(|f| format!("{}:{}:{}", f.file, f.line, f.function))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        got.len() >= want.len(),
        "{python} {label}: too few frames:\n{}",
        render(got)
    );
    for (i, (line, function)) in want.iter().enumerate() {
        let f = &got[i];
        assert_eq!(
            (f.file.as_str(), f.line, f.function.as_str()),
            (script.to_str().unwrap(), *line, *function),
            "{python} {label} frame {i}; all:\n{}",
            render(got)
        );
    }
}

#[test]
fn frames_of_nested_functions_are_exact_in_every_python_found() {
    let lib = probe();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("nested.py");
    std::fs::write(&script, SCRIPT).unwrap();
    let mut ran = Vec::new();
    for python in pythons() {
        let out = match Command::new(&python).arg(&script).arg(&lib).output() {
            Ok(o) => o,
            Err(e) if python == "python3" => panic!("python3 is required (scripts/setup.sh): {e}"),
            Err(_) => continue,
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{python} failed: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let version = stdout
            .lines()
            .find_map(|l| l.strip_prefix("VERSION "))
            .unwrap_or_else(|| panic!("{python}: no VERSION line:\n{stdout}"));
        let (detected, actual) = version.split_once(' ').unwrap();
        assert_eq!(detected, actual, "{python}: detected version");

        for label in ["released-capture", "released-now", "held-capture"] {
            let (n, frames) = section(&stdout, label);
            assert_eq!(n, 4, "{python} {label}: frame count");
            let mut want = EXPECTED_NESTED.to_vec();
            want.push((32 + label_index(label), "<module>"));
            assert_frames(&python, label, &frames, &script, &want);
            assert_eq!(frames.len(), 4);
        }
        let (_, frames) = section(&stdout, "method");
        let mut want = EXPECTED_NESTED.to_vec();
        want.extend([(21, "forward"), (35, "<module>")]);
        assert_frames(&python, "method", &frames, &script, &want);
        assert_eq!(frames.len(), 5);

        // A thread started by `threading`: our three frames, the lambda, then
        // threading.py's own (`run`, `_bootstrap_inner`, `_bootstrap`).
        let (_, frames) = section(&stdout, "thread");
        let mut want = EXPECTED_NESTED.to_vec();
        want.push((37, "<lambda>"));
        assert_frames(&python, "thread", &frames, &script, &want);
        let rest: Vec<&str> = frames[4..].iter().map(|f| f.function.as_str()).collect();
        assert_eq!(rest, ["run", "_bootstrap_inner", "_bootstrap"], "{python}");
        assert!(
            frames[4].file.ends_with("threading.py"),
            "{}",
            frames[4].file
        );

        // 100 captures after detection: no heap allocation at all.
        let allocations = stdout
            .lines()
            .find_map(|l| l.strip_prefix("ALLOCATIONS "))
            .unwrap_or_else(|| panic!("{python}: no ALLOCATIONS line"));
        assert_eq!(allocations, "0", "{python}: capture allocated");
        let concurrent = stdout
            .lines()
            .find_map(|l| l.strip_prefix("CONCURRENT "))
            .unwrap_or_else(|| panic!("{python}: no CONCURRENT line"));
        assert!(
            concurrent.starts_with("failures=0 "),
            "{python}: {concurrent}"
        );

        // A generator's frame (3.11+ keeps it in the generator object, off the data stack).
        let (_, frames) = section(&stdout, "generator");
        let mut want = EXPECTED_NESTED.to_vec();
        want.extend([(66, "gen"), (67, "<module>")]);
        assert_frames(&python, "generator", &frames, &script, &want);
        assert_eq!(frames.len(), 5);

        // 45 Python frames deep: the 32 innermost.
        let (n, frames) = section(&stdout, "deep");
        assert_eq!(n, pinwise_pyframes::MAX_FRAMES as i64, "{python}");
        let mut want = EXPECTED_NESTED.to_vec();
        want.push((72, "deep"));
        want.extend([(71, "deep"); 28]);
        assert_frames(&python, "deep", &frames, &script, &want);
        ran.push(format!("{python} ({actual})"));
    }
    eprintln!("ran with: {}", ran.join(", "));
    assert!(!ran.is_empty());
}

fn label_index(label: &str) -> u32 {
    match label {
        "released-capture" => 0,
        "released-now" => 1,
        _ => 2,
    }
}
