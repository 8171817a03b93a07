//! Per-thread state of the hooks: the re-entrancy guard and the runtime call in progress.
//!
//! All of it is `const`-initialized thread-local storage without destructors: touching it
//! never allocates. (The `free`/`realloc`/`munmap` hooks do not touch it at all: they may
//! run while a thread is being torn down.)

use std::cell::Cell;

thread_local! {
    /// Depth of pinwise's own code on this thread: while > 0, hooks forward at once.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Whether a runtime call is in progress.
    static RUNTIME_ACTIVE: Cell<bool> = const { Cell::new(false) };
    /// The application's call site of the runtime call in progress (0: unknown).
    static RUNTIME_SITE: Cell<usize> = const { Cell::new(0) };
    /// Whether a driver hook observed the runtime call in progress.
    static RUNTIME_SEEN: Cell<bool> = const { Cell::new(false) };
    /// Whether the runtime call in progress is a copy (its pointer queries are the
    /// runtime's own, not the program's).
    static RUNTIME_COPY: Cell<bool> = const { Cell::new(false) };
    /// Calls counted for sampling the hook cost.
    static SAMPLE_TICK: Cell<u32> = const { Cell::new(0) };
}

/// Whether pinwise's own code is running on this thread.
#[inline]
pub fn inside() -> bool {
    DEPTH.with(|d| d.get() > 0)
}

/// Marks pinwise's own code as running on this thread until dropped.
pub struct Inside(());

impl Inside {
    /// Enters.
    #[inline]
    pub fn enter() -> Inside {
        DEPTH.with(|d| d.set(d.get() + 1));
        Inside(())
    }
}

impl Drop for Inside {
    #[inline]
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// What a runtime hook saves and restores around the call it forwards (runtime calls may
/// nest: cudart calling itself through an exported name).
#[derive(Debug, Clone, Copy)]
pub struct RuntimeFrame {
    active: bool,
    site: usize,
    seen: bool,
    copy: bool,
}

/// Starts a runtime call made from `site` (0: unknown): driver hooks below attribute to it.
#[inline]
pub fn enter_runtime(site: usize, copy: bool) -> RuntimeFrame {
    RuntimeFrame {
        active: RUNTIME_ACTIVE.with(|c| c.replace(true)),
        site: RUNTIME_SITE.with(|c| c.replace(site)),
        seen: RUNTIME_SEEN.with(|c| c.replace(false)),
        copy: RUNTIME_COPY.with(|c| c.replace(copy)),
    }
}

/// Ends the runtime call; returns whether a driver hook observed it.
#[inline]
pub fn leave_runtime(saved: RuntimeFrame) -> bool {
    RUNTIME_ACTIVE.with(|c| c.set(saved.active));
    RUNTIME_SITE.with(|c| c.set(saved.site));
    RUNTIME_COPY.with(|c| c.set(saved.copy));
    RUNTIME_SEEN.with(|c| c.replace(saved.seen))
}

/// For a driver hook: the call site to attribute to (the runtime caller's when inside a
/// runtime call, else `own`), marking the runtime call as observed.
#[inline]
pub fn driver_site(own: usize) -> usize {
    if !RUNTIME_ACTIVE.with(|c| c.get()) {
        return own;
    }
    RUNTIME_SEEN.with(|c| c.set(true));
    match RUNTIME_SITE.with(|c| c.get()) {
        0 => own,
        rt => rt,
    }
}

/// Whether a runtime copy is in progress on this thread.
#[inline]
pub fn in_runtime_copy() -> bool {
    RUNTIME_COPY.with(|c| c.get())
}

/// Whether this call should be timed (one in `every`, per thread).
#[inline]
pub fn sample(every: u32) -> bool {
    SAMPLE_TICK.with(|c| {
        let n = c.get().wrapping_add(1);
        c.set(n);
        n % every == 0
    })
}
