//! pinwise-core: the data model every part of pinwise shares.
//!
//! Sources (the eBPF tracer, the preload hooks, the allocator) produce [`event::Event`]s;
//! a [`history::MemHistory`] turns them into per-allocation lives; queries, dumps
//! ([`format`]), profiles ([`profile`]), the cost model ([`cost`]) and the pinning policy
//! ([`policy`]) read it. Everything here is safe Rust that runs without a GPU and without
//! privileges.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cost;
pub mod event;
pub mod history;
pub mod tag;

mod segvec;
mod varint;

pub use cost::{CostModel, PinMethod};
pub use event::{Direction, Event, EventKind, HostMemKind, HostState, ProbeKind};
pub use history::{HistoryConfig, MemHistory, SharedHistory};
pub use tag::{ModuleId, ModuleIdentity, ModuleTable, Site, Tag};
