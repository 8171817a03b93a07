//! pinwise-trace: the eBPF tracer for unmodified CUDA processes.
//!
//! - [`loader`]: the BPF programs (C, in `src/bpf/`), loaded with libbpf-rs and attached.
//! - [`probes`]: what is probed, in one table.
//! - [`libs`]: finding the CUDA libraries a process uses or will use.
//! - [`raw`]: ring-buffer records (layouts generated from `src/bpf/pinwise_events.h`).
//! - [`procmaps`], [`sites`]: addresses to ASLR-stable call sites; [`symbolize`]: sites
//!   to function and line, for reports.
pub mod agent;
pub mod caps;
pub mod error;
pub mod libs;
pub mod loader;
pub mod probes;
pub mod procmaps;
pub mod raw;
pub mod sites;
pub mod skel;
pub mod symbolize;
pub mod translate;

pub use agent::{TraceStats, TracerAgent, TracerConfig};
pub use caps::{capabilities, Capabilities, Check, CheckState};
pub use error::TraceError;
pub use symbolize::{symbolize, Symbol, Symbolizer};
