//! `pinwise agent`: always-on, node-wide monitoring of host<->device transfers.
//!
//! The tracer ([`pinwise_trace::TracerAgent::start_system`]) probes the driver library
//! files for every process that maps them; each process is traced from its first CUDA
//! call on. Its events feed a bounded [`table::ProcessTable`] of per-process summaries
//! (no event lists), which `/metrics` exposes in Prometheus's format ([`metrics`]).
//!
//! - [`cgroup`]: container id, pod UID and QoS class from a cgroup path.
//! - [`process`]: one process's summary; how a copy's host memory kind is decided.
//! - [`table`]: the process table, filters, memory cap and eviction.
//! - [`metrics`]: metric names, labels, the cardinality cap.
//! - [`http`]: the endpoint.
//! - [`histories`]: periodic per-process histories, rotated under a disk cap.
//! - [`agent`]: all of it together, signals.
//!
//! The agent's death leaves traced programs alone: uprobes and BPF programs belong to the
//! agent's file descriptors, which the kernel closes (detaching them) when it dies, and a
//! probe never waits for the agent (a full ring buffer drops and counts).

pub mod agent;
pub mod cgroup;
pub mod error;
pub mod histories;
pub mod http;
pub mod metrics;
pub mod process;
pub mod selfstat;
pub mod table;

pub use agent::{Agent, AgentConfig, Signals};
pub use error::AgentError;
