//! The cost pinwise-preload adds per intercepted call, on the CPU stand-in for libcuda (a
//! TEST FIXTURE: these are not GPU figures; `bench/gpu/preload/run.sh` measures the same on
//! the GPU machine).
//!
//! Builds `bench/gpu/preload/hook_cost.c` against the stand-in, runs it without and with
//! `LD_PRELOAD=libpinwise_preload.so` (adaptive mode) five times each, interleaved, and
//! prints per call the median over runs of each run's median ns per call, the difference,
//! and the library's own sampled bookkeeping time. Needs release builds of the library and
//! the stand-ins:
//!
//! ```sh
//! cargo build --release -p pinwise-preload -p pinwise-standin-cuda -p pinwise-standin-cudart
//! cargo bench -p pinwise-preload --bench hook_cost
//! ```
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use pinwise_testkit::{compile_c, StandinLibs};

const RUNS: usize = 5;

fn release_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.ancestors()
        .skip(1)
        .take(3)
        .find(|d| d.join("libpinwise_preload.so").is_file())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| {
            eprintln!(
                "libpinwise_preload.so not found near {}: run `cargo build --release -p \
                 pinwise-preload -p pinwise-standin-cuda -p pinwise-standin-cudart` first",
                exe.display()
            );
            std::process::exit(1)
        })
}

/// `name -> (wall median ns, thread CPU median ns)` per call, from one run of hook_cost.
fn parse(stdout: &[u8]) -> BTreeMap<String, (f64, f64)> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| {
            let p: Vec<&str> = l.split('\t').collect();
            if p.len() < 5 {
                return None;
            }
            Some((p[0].to_string(), (p[1].parse().ok()?, p[4].parse().ok()?)))
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not used.
    let dir = release_dir();
    let preload = dir.join("libpinwise_preload.so");
    let libs = StandinLibs::new();
    let work = tempfile::tempdir().expect("temporary directory");
    let exe = work.path().join("hook_cost");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/gpu/preload/hook_cost.c");
    let mut args = vec!["-O2".to_string()];
    args.extend(libs.cuda_link_args());
    compile_c(&source, &exe, &args);

    let mut plain: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut under: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut sampled = Vec::new();
    for run in 0..RUNS {
        let out = libs
            .command(&exe)
            .env_remove("LD_PRELOAD")
            .output()
            .expect("run");
        assert!(out.status.success(), "plain run failed: {out:?}");
        for (k, v) in parse(&out.stdout) {
            plain.entry(k).or_default().push(v);
        }
        let stats = work.path().join(format!("stats-{run}"));
        std::fs::create_dir(&stats).unwrap();
        let out = libs
            .command(&exe)
            .env("LD_PRELOAD", &preload)
            .env("PINWISE_MODE", "adaptive")
            .env("PINWISE_STATS_DIR", &stats)
            .output()
            .expect("run under pinwise");
        assert!(out.status.success(), "run under pinwise failed: {out:?}");
        for (k, v) in parse(&out.stdout) {
            under.entry(k).or_default().push(v);
        }
        for f in std::fs::read_dir(&stats).unwrap().flatten() {
            let v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(f.path()).unwrap()).unwrap();
            if let Some(ns) = v["hook_ns_median"].as_f64() {
                sampled.push(ns);
            }
        }
    }

    println!(
        "pinwise-preload hook cost on the CPU stand-in for libcuda (TEST FIXTURE: not GPU \
         figures)"
    );
    println!(
        "machine: {}, {} CPUs ({}); {} runs each, interleaved; ns per call: median over runs \
         of each run's median of 7 repetitions, wall clock and the calling thread's CPU time \
         (which leaves out time the thread was not running)",
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .unwrap_or_default()
            .trim(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model(),
        RUNS
    );
    println!();
    println!(
        "| call | plain ns (wall; CPU) | under pinwise ns (wall; CPU) | added ns (wall; CPU) |"
    );
    println!("|---|---|---|---|");
    for (k, v) in &plain {
        let Some(u) = under.get(k) else { continue };
        let wall = |v: &[(f64, f64)]| median(v.iter().map(|x| x.0).collect());
        let cpu = |v: &[(f64, f64)]| median(v.iter().map(|x| x.1).collect());
        let (pw, pc, uw, uc) = (wall(v), cpu(v), wall(u), cpu(u));
        println!(
            "| {k} | {pw:.1}; {pc:.1} | {uw:.1}; {uc:.1} | {:+.1}; {:+.1} |",
            uw - pw,
            uc - pc
        );
    }
    if !sampled.is_empty() {
        println!();
        println!(
            "library's own sampled bookkeeping per intercepted copy (1 in 16 timed, median of \
             each run's median): {:.1} ns over {} runs",
            median(sampled.clone()),
            sampled.len()
        );
    }
}
