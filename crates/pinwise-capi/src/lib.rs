//! pinwise-capi: the C ABI of pinwise, `libpinwise.so` / `libpinwise.a`, declared in the
//! generated header `include/pinwise.h`.
//!
//! - [`alloc`]: the smart pinning allocator (`pinwise_alloc_*`).
//! - [`trace`]: the tracer agent and its advisory queries (`pinwise_tracer_*`).
pub mod alloc;
mod ffi;
pub mod trace;
