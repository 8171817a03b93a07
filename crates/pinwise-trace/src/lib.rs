//! pinwise-trace: the eBPF tracer for unmodified CUDA processes.
//!
//! How a trace flows:
//!
//! ```text
//!  libcuda / libcudart / exe ──uprobes──┐
//!  syscalls, sched (tracepoints) ───────┼─► one BPF ring buffer ─► event thread ─► SharedHistory
//!  nvidia os_lock_user_pages (fexit) ───┘   (drops counted)        decode (raw)     (pinwise-core)
//!                                                                  translate
//!                                                                  sites (maps, blazesym)
//! ```
//!
//! - [`loader`]: the BPF programs (C, `src/bpf/`), loaded with libbpf-rs and attached:
//!   uprobes by file, system-wide, filtered by process inside BPF.
//! - [`probes`]: what is probed, in one table.
//! - [`libs`]: finding the CUDA libraries a process uses or will use.
//! - [`raw`]: ring-buffer records (Rust layouts generated from `src/bpf/pinwise_events.h`).
//! - [`procmaps`], [`sites`]: return addresses to ASLR-stable call sites (module build ID +
//!   file offset); [`mod@symbolize`]: sites to function and line, for reports.
//! - [`translate`]: records to `pinwise_core::Event`s (copy directions, registrations,
//!   CUDA's own mappings left out).
//! - [`python`]: CPython 3.10-3.13 in traced processes: where BPF finds their frames, and
//!   the naming of the frames it captures (`file:line in function` in the stacks).
//! - [`preattach`]: on `--pid`, what the process had pinned before the attach (the driver's
//!   `/dev/nvidiactl` mappings); memory allocated before it has an unknown state.
//! - [`agent`]: [`TracerAgent`], the library API (launch, attach to a PID or to itself,
//!   query while running, dumps); `pinwise-capi` wraps it for C.
//! - [`caps`]: what this machine lets the tracer do, for `pinwise doctor`.
//!
//! Tracing needs root, or CAP_BPF with CAP_PERFMON.
pub mod agent;
pub mod async_dl;
pub mod caps;
pub mod error;
pub mod libs;
pub mod loader;
pub mod preattach;
pub mod probes;
pub mod procmaps;
pub mod python;
pub mod raw;
pub mod sites;
pub mod skel;
pub mod symbolize;
pub mod translate;
pub mod unwind;

pub use agent::{TraceStats, TracerAgent, TracerConfig};
pub use caps::{capabilities, Capabilities, Check, CheckState};
pub use error::TraceError;
pub use symbolize::{symbolize, Symbol, Symbolizer};
