//! The copy gate (`pinwise_preload::promote::CopyGate`) on every path where pinwise gives
//! back a registration it made for the program: a copy in flight on one thread while
//! another thread's copy makes pinwise release that registration
//! (`programs/gate_race.c`), against the libcuda stand-in (a TEST FIXTURE), which keeps each
//! copy from registered memory in flight for `PINWISE_STANDIN_COPY_DELAY_US` and counts
//! registrations taken away under a copy in flight. No timing is asserted: only that no
//! copy lost its registration, that the releases happened and were counted, and that the
//! bytes that arrived are the plain run's.

mod common;

use std::path::Path;
use std::process::Output;

use common::*;

/// Each copy from registered memory stays in flight this long (µs).
const DELAY_US: &str = "2000";

fn line(out: &Output, key: &str) -> String {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix(key).map(str::to_string))
        .unwrap_or_else(|| panic!("no `{key}` line: {out:?}"))
}

fn in_use(out: &Output) -> u64 {
    line(out, "unregistered_in_use ").trim().parse().unwrap()
}

fn plain(s: &Setup, exe: &Path, args: &[&str]) -> Output {
    let mut c = s.libs.command(exe);
    c.args(args).current_dir(s.dir.path());
    clean_env(&mut c);
    c.env("PINWISE_STANDIN_COPY_DELAY_US", DELAY_US);
    let out = c.output().expect("run the program");
    assert_ok(&out, &format!("plain {args:?}"));
    out
}

/// `pinwise run --no-malloc-hooks` of `exe args` with each copy from registered memory in
/// flight for [`DELAY_US`]: it must succeed and the bytes that arrived must be `base`'s.
/// Its output and its process's statistics.
fn gated(s: &Setup, exe: &Path, args: &[&str], base: &Output) -> (Output, serde_json::Value) {
    let summary_path = s.path("gate.json");
    let mut c = s.libs.command(pinwise());
    c.args(["run", "--no-malloc-hooks", "--force", "--stats-json"])
        .arg(&summary_path)
        .arg("--")
        .arg(exe)
        .args(args)
        .current_dir(s.dir.path());
    clean_env(&mut c);
    c.env("PINWISE_STANDIN_COPY_DELAY_US", DELAY_US);
    let out = c.output().expect("run pinwise");
    assert_ok(&out, &format!("pinwise run {args:?}"));
    assert_eq!(
        line(&out, "sum "),
        line(base, "sum "),
        "the bytes that arrived"
    );
    let p = summary(&summary_path)["processes"][0].clone();
    eprintln!("{p}");
    (out, p)
}

#[test]
fn a_registration_pinwise_gives_back_is_never_taken_from_a_copy_in_flight() {
    let s = Setup::new();
    let exe = s.build_driver("gate_race.c", &["-ldl", "-pthread"]);

    // The count works: the program's own unregistration under the other thread's copies.
    let own = plain(&s, &exe, &["own"]);
    assert!(
        in_use(&own) > 0,
        "the stand-in saw no registration taken from a copy in flight: {own:?}"
    );

    let base = plain(&s, &exe, &[]);
    assert_eq!(in_use(&base), 0, "plain: nothing registered");
    let (out, p) = gated(&s, &exe, &[], &base);
    assert_eq!(
        in_use(&out),
        0,
        "a registration pinwise gave back while a copy from it was in flight: {p}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        p["promotions_on_transfers"].as_u64() >= Some(1),
        "the hot buffer was registered: {p}"
    );
    assert!(
        p["demotions"].as_u64() >= Some(1),
        "a copy past the registration made pinwise give it back: {p}"
    );
    assert_eq!(
        p["demotions"], p["promotions_on_transfers"],
        "each registration given back once (released, or at the free): {p}"
    );
    assert_eq!(p["copy_gate_overruns"], 0, "no wait ran out: {p}");
    assert_eq!(p["promotion_failures"], 0, "{p}");
    assert_eq!(p["failed_copies"], 0, "{p}");
}

#[test]
fn a_copy_of_other_memory_never_waits_on_the_gate_nor_holds_a_release_up() {
    let s = Setup::new();
    let exe = s.build_driver("gate_race.c", &["-ldl", "-pthread"]);
    let base = plain(&s, &exe, &["apart"]);
    let (out, p) = gated(&s, &exe, &["apart"], &base);
    assert_eq!(in_use(&out), 0, "{p}");
    assert!(
        p["promotions_on_transfers"].as_u64() >= Some(2),
        "both hot buffers were registered: {p}"
    );
    assert!(
        p["demotions"].as_u64() >= Some(1),
        "the main thread's edge copies made pinwise give its buffer back: {p}"
    );
    // The releases ran while the other thread kept copying its own buffer (each copy in
    // flight for DELAY_US): a process-wide gate would have made them wait.
    assert_eq!(
        p["copy_gate_waits"], 0,
        "a copy or a release waited on the gate for memory it does not share: {p}"
    );
    assert_eq!(p["copy_gate_overruns"], 0, "{p}");
    assert_eq!(p["failed_copies"], 0, "{p}");
}
