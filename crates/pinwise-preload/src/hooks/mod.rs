//! What every intercepted call does. The exports (`exports`) decode the C arguments and
//! call these with a closure that forwards the call to the real function; everything here
//! forwards unchanged when pinwise is off, when pinwise's own code is running on this
//! thread, or when anything inside pinwise panics (pinwise then turns itself off).
//!
//! One module per kind of call: [`alloc`] (pinned allocations and the program's own
//! registrations), [`copy`] (copies: describe, decide, forward, record), [`query`] (pointer
//! queries), [`procaddr`] (entry points handed out by `dlsym` and `cuGetProcAddress`),
//! [`runtime`] (the runtime level above the driver hooks) and [`context`] (streams and
//! contexts ending). What a copy's arguments mean is decoded in [`crate::decode`].

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;

use crate::guard;
use crate::state::{self, State};

pub mod alloc;
pub mod context;
pub mod copy;
pub mod procaddr;
pub mod query;
pub mod runtime;

/// The state, when this hook should do its work. While the outputs are written before the
/// process ends, waits for them first (see `flush`).
#[inline]
fn active() -> Option<&'static State> {
    if !state::enabled() || guard::inside() {
        return None;
    }
    if crate::flush::ending() {
        crate::flush::pause_while_ending();
    }
    state::get()
}

/// Whether the driver-level hooks are on (`PINWISE_DRIVER_HOOKS=0` turns them into plain
/// forwarding, even where a driver hands out our exports itself).
#[inline]
fn driver_hooks_on() -> bool {
    state::DRIVER_HOOKS.load(Ordering::Relaxed)
}

/// The state, when a driver-level hook should do its work.
#[inline]
fn driver_active() -> Option<&'static State> {
    if !driver_hooks_on() {
        return None;
    }
    active()
}

/// Runs pinwise's part of a hook; a panic turns pinwise off instead of unwinding into C.
fn guarded<R>(f: impl FnOnce() -> R) -> Option<R> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => Some(r),
        Err(_) => {
            state::turn_off("a panic inside a hook");
            None
        }
    }
}
