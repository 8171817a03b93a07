//! pinwise-core: the data model every part of pinwise shares.
//!
//! Sources (the eBPF tracer, the preload hooks, the allocator) produce [`event::Event`]s;
//! a [`history::MemHistory`] turns them into per-allocation lives; queries, dumps
//! ([`format`](mod@format)), profiles ([`profile`]), the cost model ([`cost`]) and the decision engine
//! ([`decide`]: pricing, the pin/promote/keep/serve rules, the plan of a profile) read it. Everything here is safe Rust that runs without a GPU and without
//! privileges.
//!
//! | module | idea |
//! |---|---|
//! | [`event`] | `Event`: what every source reports |
//! | [`fingerprint`] | content fingerprints of copies; the redundant-transfer tracker |
//! | [`tag`] | `Site`, `Tag`, `ModuleTable`: an allocation's identity across runs |
//! | [`stack`] | `Frame`, `StackTable`, `Symbol`: call stacks (native and Python) and site names |
//! | [`history`] | `MemHistory`, `SharedHistory`: per-allocation lives and the queries on them |
//! | [`format`](mod@format) | JSON and binary dumps, `load_history` |
//! | [`profile`] | `Profile`: what the allocator needs from a past run |
//! | [`safe_file`] | creating output files and directories safely (0600/0700, no planted symlinks) |
//! | [`pool_use`] | `PoolUseStats`: what `pinwise run --pool` got from the node's pinned pool |
//! | [`preload_stats`] | `ProcessStats`: the preload library's per-process statistics file |
//! | [`cost`] | `CostModel`: transfer and pinning times by size, from a calibration |
//! | [`decide`] | the one place every pinning decision is made: [`decide::pricing`], [`decide::policy`] (`Policy`: pin or not, and why), [`decide::rules`] (serve pinned or pageable, keep pinned, promote), [`decide::plan`] (`PinPlan`: a profile planned within a budget) |
//! | [`timeline`] | `Timeline`: pinned bytes over lifetimes (budget peaks) |
//! | [`units`] | the one clock (`CLOCK_MONOTONIC` ns) and the one size and duration grammar |
//! | [`synth`] | deterministic synthetic event streams for benchmarks and tests |
// No unsafe code, but for the one libc call of the clock (`units::monotonic_ns`), which
// allows it locally.
#![deny(unsafe_code)]

pub mod cost;
pub mod decide;
pub mod event;
pub mod fingerprint;
pub mod format;
pub mod history;
pub mod pagetable;
pub mod pool_use;
pub mod preload_stats;
pub mod profile;
pub mod safe_file;
pub mod stack;
pub mod synth;
pub mod tag;
pub mod timeline;
pub mod units;

mod segvec;
mod varint;

pub use cost::{CostModel, PinMethod};
pub use decide::policy;
pub use decide::policy::{Decision, Policy, Reason};
pub use event::{Direction, Event, EventKind, HostMemKind, HostState, ProbeKind};
pub use format::{load_history, save_history, DumpFormat, FormatError};
pub use history::{HistoryConfig, MemHistory, SharedHistory};
pub use profile::Profile;
pub use stack::{Frame, PyFrame, StackId, StackTable, Symbol, SymbolTable};
pub use tag::{ModuleId, ModuleIdentity, ModuleTable, Site, Tag};
