//! What the allocator asks of a cost model, and the sums it builds from the answers.
//!
//! The curves themselves (measured transfer and pinning times, interpolated by size) are
//! pinwise-core's [`pinwise_core::cost::CostModel`]; [`CostView`] is the narrow view of it
//! the engine needs, so that tests can also drive the engine with simple synthetic costs.

use pinwise_core::Direction;

use crate::backend::PinMethod;

/// Times the allocator's decisions weigh, in nanoseconds.
pub trait CostView: Send + Sync {
    /// One copy of `bytes` in direction `dir` from pageable (`pinned == false`) or pinned
    /// host memory.
    fn transfer_ns(&self, bytes: u64, dir: Direction, pinned: bool) -> f64;

    /// Pinning `bytes` by `method` and unpinning them later: `cuMemHostAlloc` plus
    /// `cuMemFreeHost`, or `cuMemHostRegister` plus `cuMemHostUnregister` of memory that is
    /// already touched.
    fn pin_unpin_ns(&self, bytes: u64, method: PinMethod) -> f64;

    /// Touching `bytes` of freshly mapped memory for the first time (page faults).
    fn touch_ns(&self, bytes: u64) -> f64;
}

/// Time one copy of `bytes` in `dir` saves when the host side is pinned (never negative).
pub fn saving_ns(c: &dyn CostView, bytes: u64, dir: Direction) -> f64 {
    (c.transfer_ns(bytes, dir, false) - c.transfer_ns(bytes, dir, true)).max(0.0)
}

/// The smaller saving of one host-to-device and one device-to-host copy of `bytes`: what a
/// transfer of unknown direction is credited with.
pub fn min_saving_ns(c: &dyn CostView, bytes: u64) -> f64 {
    saving_ns(c, bytes, Direction::HtoD).min(saving_ns(c, bytes, Direction::DtoH))
}

/// The cheapest way to obtain `bytes` of fresh pinned memory, and its cost (pin and later
/// unpin): allocate pinned, or map, touch and register.
pub fn cheapest_fresh(c: &dyn CostView, bytes: u64) -> (PinMethod, f64) {
    let alloc = c.pin_unpin_ns(bytes, PinMethod::AllocPinned);
    let register = c.touch_ns(bytes) + c.pin_unpin_ns(bytes, PinMethod::Register);
    if register < alloc {
        (PinMethod::Register, register)
    } else {
        (PinMethod::AllocPinned, alloc)
    }
}

/// The cost of registering `bytes` of memory that is already touched (and unregistering it).
pub fn register_touched_ns(c: &dyn CostView, bytes: u64) -> f64 {
    c.pin_unpin_ns(bytes, PinMethod::Register)
}
