//! A Rust program using the CUDA runtime through FFI (like crates such as cudarc), built
//! with `rustc` at test time against the cudart stand-in (a TEST FIXTURE): its `Vec`s are
//! the program's own pageable memory (Rust's allocator: malloc and free underneath).

mod common;

use std::process::Command;

use common::*;
use pinwise_core::Direction;

fn rustc() -> std::path::PathBuf {
    if let Some(r) = std::env::var_os("RUSTC") {
        return r.into();
    }
    // Cargo runs tests with CARGO set; rustc sits next to it.
    if let Some(cargo) = std::env::var_os("CARGO") {
        let sibling = std::path::Path::new(&cargo).with_file_name("rustc");
        if sibling.is_file() {
            return sibling;
        }
    }
    "rustc".into()
}

#[test]
fn a_rust_program_runs_unchanged_in_every_mode() {
    let s = Setup::new();
    let exe = s.path("rust_workload");
    let dir = s.libs.dir().display().to_string();
    let out = Command::new(rustc())
        .args(["-O", "--edition", "2021", "-L", &dir, "-C"])
        .arg(format!("link-arg=-Wl,-rpath,{dir}"))
        .arg(program_source("rust_workload.rs"))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run rustc");
    assert_ok(&out, "rustc");
    let plain = s.run_plain(&exe, &[]);
    assert_ok(&plain, "plain");
    let expected = calls(&plain);
    let profile = s.path("rust.profile.json");
    let profile = profile.to_str().unwrap();
    for mode in ["adaptive", "profile", "use"] {
        let run = s.run_recorded(
            &exe,
            // The program pins memory itself: its hot Vecs are registered beside it only
            // within a budget given (pinwise_core::decide::ceiling).
            &["--mode", mode, "--profile", profile, "--budget", "1G"],
            &format!("rust-{mode}.json"),
        );
        assert_same_stdout(&run.out, &plain, mode);
        let h = &run.history;
        assert_eq!(allocations(h).len() as u64, expected["alloc"], "{mode}");
        assert_eq!(transfers(h, Direction::HtoD), expected["htod"], "{mode}");
        assert_eq!(transfers(h, Direction::DtoH), expected["dtoh"], "{mode}");
        let p = run.process();
        // The two 8 MiB Vecs are copied 8 times each: hot, registered in place, and
        // unregistered when Rust frees them.
        assert!(
            p["promotions_on_transfers"].as_u64() >= Some(1),
            "{mode}: {p}"
        );
        assert_eq!(p["demotions"], p["promotions_on_transfers"], "{mode}: {p}");
    }
}
