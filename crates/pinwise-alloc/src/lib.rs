//! pinwise-alloc: the smart pinning host allocator.
//!
//! Pinned (page-locked) host memory makes host<->device copies about 3x faster, but pinning
//! costs time and memory the OS can no longer page. This crate pins only what pays:
//!
//! - [`HostAllocator`] / [`HostBuffer`]: the Rust API (buffers free themselves; their copy
//!   methods teach the allocator which buffers are hot);
//! - [`engine::Engine`]: gathers the facts and serves, on raw pointers, call sites and
//!   flags (what the C ABI and the preload library drive); every decision it acts on is
//!   made by pinwise-core's decision engine ([`pinwise_core::decide`]);
//! - [`pool`]: page-locked segments carved into blocks (best fit, split, coalesce, no
//!   power-of-two waste), reused only after the copies on them completed;
//! - [`pageable`]: the path for what is not pinned (with a bounded cache of warm mappings);
//! - [`pressure`]: whether the machine is short of memory (the cache then empties);
//! - [`budget`]: a hard cap on pinned bytes, reserved atomically before pinning;
//! - [`demand`]: what the pool's blocks are wanted for (their recent peak), so that only
//!   spare idle blocks serve requests that would otherwise be pageable;
//! - [`predict`]: the adaptive mode's per-call-site pattern history table;
//! - [`callsite`]: allocation identity (call site normalized across runs);
//! - [`plan`]: use mode's advice ([`plan::ProfileAdvice`]): core's plan of a profile, per
//!   tag of this process;
//! - [`backend`]: the driver operations it needs, behind [`backend::PinBackend`];
//! - [`calibrate`]: what a calibration measures (the measuring, `pinwise calibrate`, and
//!   `pinwise bench alloc` are in the pinwise-bench crate);
//! - [`autocal`]: every GPU its own calibration, measured on first use and cached per GPU;
//! - `testing` (feature `testing`, for tests only): a mock backend in plain memory.

pub mod autocal;
pub mod backend;
pub mod budget;
mod buffer;
pub mod calibrate;
pub mod callsite;
pub mod demand;
pub mod engine;
mod error;
pub mod events;
pub mod grade;
pub mod pageable;
pub mod plan;
pub mod pool;
pub mod predict;
pub mod pressure;
pub mod record;
mod stats;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use backend::{DevicePtr, PinBackend, StreamHandle};
pub use buffer::{HostAllocator, HostBuffer};
pub use engine::{AllocFlags, Allocation, Engine, EngineConfig, Mode};
pub use error::AllocError;
pub use stats::AllocStats;
