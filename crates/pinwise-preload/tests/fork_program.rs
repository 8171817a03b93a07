//! A program that forks (cudart stand-in, a TEST FIXTURE): a child without CUDA reads and
//! frees buffers pinwise registered in the parent; a child that execs does CUDA work of its
//! own. Output unchanged; the parent's history exact; the exec'd child's history written
//! beside the parent's (`<stem>.<pid>.<ext>`); the child without CUDA writes nothing.

mod common;

use common::*;
use pinwise_core::Direction;

#[test]
fn forked_and_execd_children_work_and_are_recorded_apart() {
    let s = Setup::new();
    let exe = s.build_cudart("fork_workload.c", &[]);
    let plain = s.run_plain(&exe, &[]);
    assert_ok(&plain, "plain");
    let expected = calls(&plain);
    // The exec'd worker's history is written beside this one, as fork.<pid>.json.
    let run = s.run_recorded(&exe, &[], "fork.json");
    assert_same_stdout(&run.out, &plain, "under pinwise");
    assert!(String::from_utf8_lossy(&run.out.stdout).contains("worker-status=0"));

    let h = &run.history;
    assert_eq!(allocations(h).len() as u64, expected["alloc"]);
    assert_eq!(transfers(h, Direction::HtoD), expected["htod"]);
    assert_eq!(transfers(h, Direction::DtoH), expected["dtoh"]);
    assert_eq!(h.processes().count(), 1, "only the parent's events");

    let summary = &run.summary;
    let procs = summary["processes"].as_array().unwrap();
    assert_eq!(
        procs.len(),
        2,
        "parent and exec'd worker; the reader used no CUDA: {summary}"
    );
    let worker = procs.iter().find(|p| p["top_process"] == false).unwrap();
    let worker_hist = worker["history"]["path"].as_str().unwrap();
    assert!(
        worker_hist.ends_with(&format!("fork.{}.json", worker["pid"])),
        "{worker_hist}"
    );
    let wh = history(std::path::Path::new(worker_hist));
    assert_eq!(allocations(&wh).len(), 1);
    assert_eq!(transfers(&wh, Direction::HtoD), 3);
    // The parent's registrations were unregistered by the parent; the reader child forgot
    // them (its free of the registered buffer is a plain free).
    let parent = procs.iter().find(|p| p["top_process"] == true).unwrap();
    assert_eq!(
        parent["demotions"], parent["promotions_on_transfers"],
        "{parent}"
    );
}
