//! The cost pinwise-preload's malloc-family hooks add, per malloc+free pair: builds
//! `bench/gpu/attribution/malloc_cost.c` (no CUDA involved) and runs it without the
//! library and with it (malloc hooks off, on without stacks, on with stacks), five times
//! each, interleaved; prints per phase the median over runs of each run's median, and the
//! difference to the run without the library. Needs a release build of the library:
//!
//! ```sh
//! cargo build --release -p pinwise-preload
//! cargo bench -p pinwise-preload --bench malloc_hooks
//! ```
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use pinwise_testkit::compile_c;

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
                 pinwise-preload` first",
                exe.display()
            );
            std::process::exit(1)
        })
}

/// `phase -> median ns per pair` from one run.
fn parse(stdout: &[u8]) -> BTreeMap<String, f64> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| {
            let p: Vec<&str> = l.split('\t').collect();
            Some((p.first()?.to_string(), p.get(1)?.parse().ok()?))
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

/// A configuration: name, whether the library is preloaded, its environment.
type Config = (&'static str, bool, &'static [(&'static str, &'static str)]);

/// The configurations.
const CONFIGS: &[Config] = &[
    ("no pinwise", false, &[]),
    (
        "pinwise, malloc hooks off",
        true,
        &[("PINWISE_MALLOC_HOOKS", "0")],
    ),
    (
        "pinwise, hooks on, no stacks",
        true,
        &[("PINWISE_STACKS", "0")],
    ),
    ("pinwise, hooks on, stacks", true, &[]),
];

fn main() {
    let dir = release_dir();
    let preload = dir.join("libpinwise_preload.so");
    let work = tempfile::tempdir().expect("temporary directory");
    let exe = work.path().join("malloc_cost");
    let source =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/gpu/attribution/malloc_cost.c");
    compile_c(&source, &exe, &["-O2"]);

    let mut results: Vec<BTreeMap<String, Vec<f64>>> = vec![BTreeMap::new(); CONFIGS.len()];
    for _ in 0..RUNS {
        for (i, (name, preloaded, env)) in CONFIGS.iter().enumerate() {
            let mut c = Command::new(&exe);
            c.env_remove("LD_PRELOAD");
            for (k, _) in std::env::vars_os() {
                if k.to_string_lossy().starts_with("PINWISE_") {
                    c.env_remove(k);
                }
            }
            if *preloaded {
                c.env("LD_PRELOAD", &preload);
            }
            c.envs(env.iter().copied());
            let out = c.output().expect("run");
            assert!(out.status.success(), "{name}: {out:?}");
            for (k, v) in parse(&out.stdout) {
                results[i].entry(k).or_default().push(v);
            }
        }
    }

    println!("pinwise-preload malloc-family hook cost (no CUDA involved)");
    println!(
        "machine: {}, {} CPUs ({}); {RUNS} runs per configuration, interleaved; ns per \
         malloc+free pair: median over runs of each run's median of 301 batches of 2000 pairs \
         (tracked1m: 101 batches of 20; tracked_first: one pair)",
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .unwrap_or_default()
            .trim(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model(),
    );
    println!();
    let mut header = "| phase |".to_string();
    let mut rule = "|---|".to_string();
    for (name, _, _) in CONFIGS {
        header.push_str(&format!(" {name} |"));
        rule.push_str("---|");
    }
    println!("{header}");
    println!("{rule}");
    let base = &results[0];
    for (phase, v) in base {
        let b = median(v.clone());
        let mut row = format!("| {phase} | {b:.1} |");
        for r in &results[1..] {
            let Some(u) = r.get(phase) else {
                row.push_str(" - |");
                continue;
            };
            let m = median(u.clone());
            row.push_str(&format!(" {m:.1} ({:+.1}) |", m - b));
        }
        println!("{row}");
    }
}
