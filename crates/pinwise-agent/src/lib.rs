//! `pinwise agent`: always-on, node-wide monitoring of host<->device transfers.
//!
//! The tracer ([`pinwise_trace::TracerAgent::start_system`]) probes the driver library
//! files for every process that maps them; each process is traced from its first CUDA
//! call on. Its events feed a bounded [`table::ProcessTable`] of per-process summaries
//! (no event lists), which `/metrics` exposes in Prometheus's format ([`metrics`]) and
//! `--otlp` pushes to an OpenTelemetry collector (the same families and labels).
//!
//! - [`cgroup`]: container id, pod UID and QoS class from a cgroup path.
//! - [`pods`]: pod namespace and name from the pod UID (the kubelet's log directories).
//! - [`gpus`]: the GPUs a process has open (`/dev/nvidia<N>` descriptors).
//! - [`process`]: one process's summary; how a copy's host memory kind is decided.
//! - [`table`]: the process table, filters, memory cap and eviction.
//! - [`metrics`]: metric names, labels, the cardinality cap.
//! - `otlp` (feature `otlp`, on by default): the same metrics pushed over OTLP/HTTP.
//! - [`http`]: the endpoint.
//! - [`histories`]: periodic per-process histories, rotated under a disk cap.
//! - [`agent`]: all of it together, signals; the seams ([`agent::TraceBackend`],
//!   [`agent::LibraryScan`], [`table::ProcessProbe`]) that let tests run it without BPF.
//!
//! The agent's death leaves traced programs alone: uprobes and BPF programs belong to the
//! agent's file descriptors, which the kernel closes (detaching them) when it dies, and a
//! probe never waits for the agent (a full ring buffer drops and counts).

pub mod agent;
pub mod cgroup;
pub mod error;
pub mod gpus;
pub mod histories;
pub mod http;
pub mod metrics;
#[cfg(feature = "otlp")]
pub mod otlp;
pub mod pods;
pub mod process;
pub mod selfstat;
pub mod table;

pub use agent::{Agent, AgentConfig, Signals};
pub use error::AgentError;
