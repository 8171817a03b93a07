//! pinwise-capi: the C ABI of pinwise, `libpinwise.so` / `libpinwise.a`, declared in the
//! generated header `include/pinwise.h`.
//!
//! - [`alloc`]: the smart pinning allocator (`pinwise_alloc_*`).
//! - [`trace`]: the tracer agent and its advisory queries (`pinwise_tracer_*`).
//! - [`pool`]: the pinned-memory pool's client (`pinwise_pool_*`).
pub mod alloc;
mod ffi;
pub mod pool;
pub mod trace;
