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
//!
//! `HOOK_COST_BASELINE=/path/to/older/a.so:/path/to/b.so` adds a table per library, run
//! interleaved with the others: the same program under each (to compare a change with the
//! builds before it on the same machine, in the same minutes). `HOOK_COST_RUNS` sets the
//! runs per library (default 5).
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use pinwise_testkit::{compile_c, StandinLibs};

/// Runs per library; `HOOK_COST_RUNS` overrides.
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

/// The library's own sampled figures of one run: `hook_ns_median`, `hook_ns_net_median`
/// and the stage medians (describe, decide, record), ns.
const SAMPLED: [&str; 5] = [
    "hook_ns_median",
    "hook_ns_net_median",
    "hook_stages.describe_ns",
    "hook_stages.decide_ns",
    "hook_stages.record_ns",
];

fn sampled_of(v: &serde_json::Value) -> Vec<Option<f64>> {
    SAMPLED
        .iter()
        .map(|k| {
            k.split('.')
                .try_fold(v, |v, part| v.get(part))
                .and_then(|x| x.as_f64())
        })
        .collect()
}

/// `median (min–max)` of some figures.
fn spread(v: &[f64]) -> String {
    if v.is_empty() {
        return "–".into();
    }
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{:.1} ({lo:.1}–{hi:.1})", median(v.to_vec()))
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not used.
    let dir = release_dir();
    let runs = std::env::var("HOOK_COST_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(RUNS);
    let mut libraries = vec![("pinwise".to_string(), dir.join("libpinwise_preload.so"))];
    if let Some(list) = std::env::var_os("HOOK_COST_BASELINE") {
        for (i, b) in std::env::split_paths(&list).enumerate() {
            let label = b
                .file_stem()
                .map_or_else(|| "baseline".into(), |s| s.to_string_lossy().into_owned());
            libraries.insert(i, (label, b));
        }
    }
    let libs = StandinLibs::new();
    let work = tempfile::tempdir().expect("temporary directory");
    let exe = work.path().join("hook_cost");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/gpu/preload/hook_cost.c");
    let mut args = vec!["-O2".to_string()];
    args.extend(libs.cuda_link_args());
    compile_c(&source, &exe, &args);

    type PerCall = BTreeMap<String, Vec<(f64, f64)>>;
    let mut plain: PerCall = BTreeMap::new();
    let mut under: Vec<PerCall> = vec![BTreeMap::new(); libraries.len()];
    let mut sampled: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); SAMPLED.len()]; libraries.len()];
    for run in 0..runs {
        let out = libs
            .command(&exe)
            .env_remove("LD_PRELOAD")
            .output()
            .expect("run");
        assert!(out.status.success(), "plain run failed: {out:?}");
        for (k, v) in parse(&out.stdout) {
            plain.entry(k).or_default().push(v);
        }
        for (l, (label, preload)) in libraries.iter().enumerate() {
            let stats = work.path().join(format!("stats-{label}-{run}"));
            std::fs::create_dir(&stats).unwrap();
            let out = libs
                .command(&exe)
                .env("LD_PRELOAD", preload)
                .env("PINWISE_MODE", "adaptive")
                .env("PINWISE_STATS_DIR", &stats)
                .output()
                .expect("run under pinwise");
            assert!(out.status.success(), "run under {label} failed: {out:?}");
            for (k, v) in parse(&out.stdout) {
                under[l].entry(k).or_default().push(v);
            }
            for f in std::fs::read_dir(&stats).unwrap().flatten() {
                let v: serde_json::Value =
                    serde_json::from_slice(&std::fs::read(f.path()).unwrap()).unwrap();
                for (s, x) in sampled[l].iter_mut().zip(sampled_of(&v)) {
                    s.extend(x);
                }
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
        runs
    );
    for (l, (label, preload)) in libraries.iter().enumerate() {
        println!();
        println!("under {label} ({})", preload.display());
        println!();
        println!(
            "| call | plain ns (wall; CPU) | under pinwise ns (wall; CPU) | added ns (wall; CPU) |"
        );
        println!("|---|---|---|---|");
        for (k, v) in &plain {
            let Some(u) = under[l].get(k) else { continue };
            let wall = |v: &[(f64, f64)]| median(v.iter().map(|x| x.0).collect());
            let cpu = |v: &[(f64, f64)]| median(v.iter().map(|x| x.1).collect());
            let (pw, pc, uw, uc) = (wall(v), cpu(v), wall(u), cpu(u));
            println!(
                "| {k} | {pw:.1}; {pc:.1} | {uw:.1}; {uc:.1} | {:+.1}; {:+.1} |",
                uw - pw,
                uc - pc
            );
        }
        println!();
        println!(
            "library's own sampled bookkeeping per intercepted copy, ns, median (min–max) of \
             the runs' figures:"
        );
        for (name, s) in SAMPLED.iter().zip(&sampled[l]) {
            println!("- {name}: {}", spread(s));
        }
    }
}
