//! The tracer as a library, for real (root, BPF), against the CPU stand-in for libcuda (a
//! TEST FIXTURE, not a GPU): capability checks, and a `TracerAgent` tracing its own
//! process while the test queries it. Skipped with a visible message without root;
//! failing under `CI=true` when BPF is unavailable.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pinwise_core::{load_history, Direction, DumpFormat};
use pinwise_cuda::{DeviceBuffer, Driver, PinnedHostRegion};
use pinwise_testkit::{require_bpf, StandinLibs};
use pinwise_trace::agent::{TracerAgent, TracerConfig};
use pinwise_trace::libs::LibraryOverrides;
use pinwise_trace::loader::KernelHookStatus;
use pinwise_trace::{capabilities, CheckState};

#[test]
fn capability_checks_find_uprobes_and_tracepoints_working() {
    if !require_bpf("capability_checks_find_uprobes_and_tracepoints_working") {
        return;
    }
    let caps = capabilities();
    assert!(caps.can_trace(), "{caps:#?}");
    assert_eq!(caps.uprobes.state, CheckState::Ok, "{caps:#?}");
    assert!(
        caps.uprobes.detail.contains("fired"),
        "{}",
        caps.uprobes.detail
    );
    assert_eq!(caps.tracepoints.state, CheckState::Ok, "{caps:#?}");
    // Where there is no nvidia module, the kernel hooks do not apply (and say why); where
    // there is one, they are either attached or refused with the kernel's own error.
    let nvidia_here = std::path::Path::new("/sys/module/nvidia").exists();
    if !nvidia_here {
        assert_eq!(caps.nvidia_kernel_hooks.state, CheckState::NotApplicable);
        assert!(caps.nvidia_kernel_hooks.detail.contains("nvidia"));
    }
    assert!(!caps.kprobes.detail.is_empty());
}

#[test]
fn agent_traces_its_own_process_and_answers_while_running() {
    if !require_bpf("agent_traces_its_own_process_and_answers_while_running") {
        return;
    }
    let libs = StandinLibs::new();
    let driver = Arc::new(Driver::load_from(&libs.libcuda()).expect("stand-in libcuda"));
    driver.init().unwrap();
    let ctx = driver.device(0).unwrap().primary_context().unwrap();

    let config = TracerConfig {
        libraries: LibraryOverrides {
            libcuda: Some(libs.libcuda()),
            libcudart: None,
        },
        ..TracerConfig::default()
    };
    let mut agent = TracerAgent::new(config);
    agent.start_self().expect("tracing this process");
    assert!(agent.is_running());
    assert!(matches!(
        agent.start_self(),
        Err(pinwise_trace::TraceError::State(_))
    ));
    let dir = tempfile::tempdir().unwrap();
    let periodic = dir.path().join("periodic.json");
    agent
        .dump_every(&periodic, DumpFormat::Json, Duration::from_millis(100))
        .unwrap();

    const COPIES: u64 = 25;
    const BYTES: usize = 8192;
    let mut host = PinnedHostRegion::new(&ctx, 1 << 20, 0).unwrap();
    host.as_mut_slice().fill(3);
    let dev = DeviceBuffer::new(&ctx, 1 << 20).unwrap();
    for _ in 0..COPIES {
        dev.copy_from_host(&host.as_slice()[..BYTES]).unwrap();
    }
    let start = host.as_ptr() as u64;

    // The history answers while tracing goes on.
    let deadline = Instant::now() + Duration::from_secs(10);
    let hot = loop {
        let hot = agent.hotspots(1);
        if hot.first().is_some_and(|h| h.transfer_count == COPIES) || Instant::now() > deadline {
            break hot;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let hot = hot.first().expect("a hotspot");
    assert_eq!(hot.start, start);
    assert_eq!(hot.transfer_count, COPIES);
    assert_eq!(
        hot.counters.direction(Direction::HtoD).bytes(),
        COPIES * BYTES as u64
    );
    let looked_up = agent
        .history()
        .lookup(std::process::id(), start + 100)
        .expect("interior pointer found");
    assert_eq!(looked_up.id, hot.id);
    assert!(agent
        .hotspots_threshold(COPIES)
        .iter()
        .any(|a| a.id == hot.id));
    assert!(!agent
        .coldspots_threshold(COPIES - 1)
        .iter()
        .any(|a| a.id == hot.id));
    let live = agent.stats();
    assert!(live.records > 0 && live.uprobes > 0, "{live:?}");

    // The periodic dump appears and reads back.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !periodic.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(load_history(&periodic).is_ok(), "periodic dump readable");

    drop(host);
    let stats = agent.stop().unwrap();
    assert!(!agent.is_running());
    assert_eq!(stats.ringbuf_drops, 0);
    assert!(stats.cuda_standin, "the stand-in libcuda is recognized");
    // Without an nvidia module the kernel hooks are not tried, and the reason says so.
    if !std::path::Path::new("/sys/module/nvidia").exists() {
        match &stats.kernel_hooks {
            Some(KernelHookStatus::NotApplicable(why)) => assert!(why.contains("nvidia"), "{why}"),
            other => panic!("kernel hooks without an nvidia module: {other:?}"),
        }
    }
    let hits: u64 = stats
        .function_hits
        .iter()
        .filter(|h| h.function == "cuMemcpyHtoD_v2")
        .map(|h| h.hits)
        .sum();
    assert_eq!(hits, COPIES, "BPF counted every copy");
    assert!(
        stats
            .program_costs
            .iter()
            .any(|c| c.program == "copy_htod" && c.run_count >= COPIES),
        "{:?}",
        stats.program_costs
    );
    // The freed allocation is in the final dump, written at stop.
    let history = load_history(&periodic).unwrap();
    let freed = history
        .allocations()
        .map(|v| v.info())
        .find(|a| a.start == start)
        .expect("the allocation");
    assert_eq!(freed.state.as_str(), "FREED");
    assert!(agent.stop().is_err(), "stopping twice is an error");
}

#[test]
fn launching_a_missing_program_is_a_clear_error() {
    if !require_bpf("launching_a_missing_program_is_a_clear_error") {
        return;
    }
    let libs = StandinLibs::new();
    let config = TracerConfig {
        libraries: LibraryOverrides {
            libcuda: Some(libs.libcuda()),
            libcudart: None,
        },
        ..TracerConfig::default()
    };
    let mut agent = TracerAgent::new(config);
    let err = agent
        .launch(&mut std::process::Command::new("/nonexistent/program"))
        .unwrap_err();
    assert!(err.to_string().contains("/nonexistent/program"), "{err}");
    assert!(!agent.is_running());
}
