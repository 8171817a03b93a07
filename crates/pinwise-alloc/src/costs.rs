//! The allocator's questions to pinwise-core's cost model and policy.
//!
//! The curves (measured transfer and pinning times, interpolated by size) are
//! [`pinwise_core::CostModel`]; whether a predicted use pays for pinning is
//! [`pinwise_core::Policy::decide`]. These helpers add only what the allocator needs on top:
//! the cheapest way to get fresh pinned memory, and predictions built from live counters.

use pinwise_core::policy::{PinRequest, PredictedTransfers};
use pinwise_core::{Decision, Direction, PinMethod, Policy};

/// Time one copy of `bytes` in `dir` saves when the host side is pinned, ns (never negative).
pub fn saving_ns(p: &Policy, bytes: u64, dir: Direction) -> f64 {
    p.cost_model().transfer_saving_ns(dir, bytes).max(0.0)
}

/// The cheapest way to obtain `bytes` of fresh pinned memory, and its cost (pin and later
/// unpin): allocate it pinned, or map it, touch it and register it.
pub fn cheapest_fresh(p: &Policy, bytes: u64) -> (PinMethod, f64) {
    let alloc = p.pin_cost_ns(bytes, PinMethod::MallocHost);
    let register =
        p.cost_model().malloc_touch_ns(bytes) + p.pin_cost_ns(bytes, PinMethod::RegisterTouched);
    if register < alloc {
        (PinMethod::RegisterTouched, register)
    } else {
        (PinMethod::MallocHost, alloc)
    }
}

/// The cost of registering `bytes` of memory that is already touched, and unregistering it.
pub fn register_touched_ns(p: &Policy, bytes: u64) -> f64 {
    p.pin_cost_ns(bytes, PinMethod::RegisterTouched)
}

/// The policy's decision on pinning `size` bytes by `method` for `transfers`, with
/// `remaining_budget` bytes left.
pub fn decide(
    p: &Policy,
    size: u64,
    transfers: PredictedTransfers,
    remaining_budget: u64,
    method: PinMethod,
) -> Decision {
    p.decide(&PinRequest {
        size,
        transfers,
        remaining_budget,
        method,
    })
}

/// Whether an allocation with transfers `t` (seen, or predicted) is worth holding pinned at
/// all: it is copied more than once, and pinning makes its copies faster. A buffer copied
/// once gains at most one faster copy, while its pinned memory stays pinned for its whole
/// life; pinned memory is for reused buffers. (Whether a worthy allocation is then pinned is
/// the policy's decision on what pinning it costs.)
pub fn worth_pinning(p: &Policy, t: &PredictedTransfers) -> bool {
    t.total() >= 2.0 && p.saving_ns(t) > 0.0
}

/// `t` scaled so that its total is `count` transfers (same mix of directions and sizes).
pub fn scaled(t: &PredictedTransfers, count: f64) -> PredictedTransfers {
    let total = t.total();
    if total <= 0.0 {
        return PredictedTransfers::none();
    }
    let k = count / total;
    let mut out = *t;
    for i in 0..4 {
        out.count[i] *= k;
        out.bytes[i] *= k;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinwise_core::CostModel;

    /// The decisions' building blocks on the built-in H200 calibration.
    #[test]
    fn h200_figures() {
        let p = Policy::new(CostModel::builtin());
        // 4 KiB: pinned copies are not faster; nothing to save.
        assert_eq!(saving_ns(&p, 4096, Direction::HtoD), 0.0);
        // 1 GiB host-to-device: ~100 ms pageable vs ~19 ms pinned.
        let s = saving_ns(&p, 1 << 30, Direction::HtoD);
        assert!((75e6..90e6).contains(&s), "{s}");
        // Registering touched memory is far cheaper than cuMemHostAlloc at 1 GiB...
        let reg = register_touched_ns(&p, 1 << 30);
        assert!((40e6..50e6).contains(&reg), "{reg}");
        // ...but fresh memory is cheaper allocated pinned than mapped, touched and registered.
        assert_eq!(cheapest_fresh(&p, 1 << 30).0, PinMethod::MallocHost);
        // One 1 GiB copy pays for registering the buffer it comes from.
        let once = PredictedTransfers::none().with(Direction::HtoD, 1.0, 1 << 30);
        assert!(decide(&p, 1 << 30, once, u64::MAX, PinMethod::RegisterTouched).pin);
        let scaled = scaled(&once, 4.0);
        assert_eq!(scaled.total(), 4.0);
        assert_eq!(
            scaled.bytes[Direction::HtoD.index()],
            4.0 * (1u64 << 30) as f64
        );
    }
}
