//! pinwise-core: the data model every part of pinwise shares.
//!
//! Sources (the eBPF tracer, the preload hooks, the allocator) produce [`event::Event`]s;
//! a history turns them into per-allocation lives; queries, dumps, profiles, the cost model
//! and the pinning policy read it. Everything here is safe Rust that runs without a GPU and
//! without privileges.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod event;
pub mod tag;

pub use event::{Direction, Event, EventKind, HostMemKind, HostState, ProbeKind};
pub use tag::{ModuleId, ModuleIdentity, ModuleTable, Site, Tag};
