//! What the Python frames add to the BPF programs of `pinwise trace`, per event: runs a
//! Python workload (`bench/trace-pyframes/pyframes_cost.py`) traced twice, Python frames
//! off and on (every copy sampled for its stack), and prints the kernel's run-time
//! statistics of the programs that capture them (ns per run).
//!
//! `cargo run -p pinwise-trace --example pyframes_cost -- PYTHON LIBCUDART DEPTH N` as root,
//! with `LD_LIBRARY_PATH` pointing at the libcuda to probe (the CPU stand-in: a TEST
//! FIXTURE; its figures are the dev VM's kernel, not a GPU's).
use std::process::Command;

use pinwise_trace::{TracerAgent, TracerConfig};

const PROGRAMS: [&str; 2] = ["host_alloc_return", "copy_htod"];

fn run(python: &str, args: &[String], frames: bool) -> Vec<(String, f64, u64)> {
    let mut config = TracerConfig::default();
    config.bpf.python_frames = frames;
    config.bpf.copy_stack_every = 1;
    let mut agent = TracerAgent::new(config);
    let mut cmd = Command::new(python);
    cmd.args(args);
    let mut child = agent.launch(&mut cmd).expect("launching the workload");
    let status = child.wait().expect("waiting for the workload");
    assert!(status.success(), "the workload failed: {status}");
    let stats = agent.stop().expect("stopping the tracer");
    let py = |k: &str| {
        agent
            .history()
            .read()
            .source_stats()
            .get(k)
            .copied()
            .unwrap_or(0)
    };
    eprintln!(
        "python frames {}: python_stacks {}, unnamed frames {}, truncated {}",
        if frames { "on" } else { "off" },
        py("tracer.python_stacks"),
        py("tracer.python_frames_unnamed"),
        py("tracer.python_truncated")
    );
    stats
        .program_costs
        .iter()
        .filter(|c| PROGRAMS.contains(&c.program.as_str()))
        .map(|c| {
            (
                c.program.clone(),
                c.ns_per_run().unwrap_or(f64::NAN),
                c.run_count,
            )
        })
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [python, libcudart, depth, n] = &args[..] else {
        eprintln!("usage: pyframes_cost PYTHON LIBCUDART DEPTH N");
        std::process::exit(2);
    };
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../bench/trace-pyframes/pyframes_cost.py"
    );
    let work = vec![
        script.to_string(),
        libcudart.clone(),
        depth.clone(),
        n.clone(),
    ];
    for frames in [false, true] {
        for (program, ns, runs) in run(python, &work, frames) {
            println!(
                "depth {depth} python_frames {} {program} {ns:.0} ns/run x {runs}",
                if frames { "on" } else { "off" }
            );
        }
    }
}
