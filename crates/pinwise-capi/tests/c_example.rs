//! The C example (`examples/c/alloc_demo.c`) builds against `include/pinwise.h` and
//! `libpinwise.so`, and runs on the CPU stand-in for libcuda (a TEST FIXTURE) in each mode:
//! adaptive, then a profile run whose profile a use run follows from its first iteration.

use std::path::{Path, PathBuf};
use std::process::Output;

use pinwise_testkit::{compile_c, StandinLibs};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `target/<profile>`, where cargo put `libpinwise.so` next to this test's `deps/`.
fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

fn build(libs: &StandinLibs, out: &Path) {
    let lib_dir = build_dir();
    assert!(
        lib_dir.join("libpinwise.so").exists(),
        "libpinwise.so not found in {}",
        lib_dir.display()
    );
    let mut args = vec![
        format!("-I{}", repo().join("include").display()),
        format!("-L{}", lib_dir.display()),
        "-lpinwise".to_string(),
        format!("-Wl,-rpath,{}", lib_dir.display()),
    ];
    args.extend(libs.cuda_link_args());
    compile_c(&repo().join("examples/c/alloc_demo.c"), out, &args);
}

fn run(libs: &StandinLibs, exe: &Path, args: &[&str]) -> String {
    let out: Output = libs
        .command(exe)
        .args(args)
        .output()
        .expect("run alloc_demo");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "alloc_demo {args:?} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn c_example_builds_and_runs_in_every_mode() {
    if !pinwise_testkit::require_locked_memory("c_example_builds_and_runs_in_every_mode", 32 << 20)
    {
        return;
    }
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("alloc_demo");
    build(&libs, &exe);

    let adaptive = run(&libs, &exe, &["adaptive", "4", "6"]);
    assert!(
        adaptive.contains("CPU stand-in for libcuda (a test fixture"),
        "{adaptive}"
    );
    assert!(
        adaptive.contains("hot buffer pinned at the first iteration: no"),
        "{adaptive}"
    );
    assert!(
        !adaptive.contains("pinned 0,"),
        "the hot buffer got pinned: {adaptive}"
    );

    let profile = dir.path().join("demo.profile.json");
    let p = profile.to_str().unwrap();
    run(&libs, &exe, &["profile", p, "4", "6"]);
    assert!(profile.exists(), "the profile run wrote its profile");
    let used = run(&libs, &exe, &["use", p, "4", "6"]);
    assert!(
        used.contains("hot buffer pinned at the first iteration: yes"),
        "the use run follows the profile from the start:\n{used}"
    );
}

#[test]
fn bad_profile_is_a_clear_error_from_c() {
    let libs = StandinLibs::new();
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("alloc_demo");
    build(&libs, &exe);
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "not a profile").unwrap();
    let out = libs
        .command(&exe)
        .args(["use", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("pinwise_alloc_create failed") && err.contains("bad.json"),
        "{err}"
    );
}
