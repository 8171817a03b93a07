//! Call stacks of the application, captured in a hook: return addresses from the
//! application's call into the hooked function outward, up to
//! [`pinwise_core::stack::MAX_FRAMES`].
//!
//! The walk uses the unwinder (`_Unwind_Backtrace`: the frames' `.eh_frame` unwind tables,
//! so it works without frame pointers, in libraries built without them). It runs only on
//! the slow paths: allocations the history records (pinned ones, pageable ones at or above
//! the tracking threshold), never on copies or small allocations. Its cost per capture is
//! measured in `bench/results/preload-malloc-hooks.md`.
//!
//! Under a Python interpreter the recorder ends the walk at the first frame inside the
//! interpreter ([`capture_until`]): the Python frames, read from the interpreter, take the
//! place of its native frames in the stack.

use std::ffi::{c_int, c_void};

use pinwise_core::stack::MAX_FRAMES;

/// Whether events carry call stacks (`PINWISE_STACKS`, read when the library is loaded).
static STACKS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Whether events carry call stacks.
#[inline]
pub fn stacks_enabled() -> bool {
    STACKS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Turns call stacks on or off.
pub fn set_stacks_enabled(on: bool) {
    STACKS.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Return addresses, innermost first.
#[derive(Debug, Clone, Copy)]
pub struct Frames {
    ips: [usize; MAX_FRAMES],
    len: usize,
}

impl Frames {
    /// The captured return addresses.
    pub fn as_slice(&self) -> &[usize] {
        &self.ips[..self.len]
    }
}

/// Frames the walk may pass before it finds `from` (pinwise's own frames, and the
/// runtime's between a runtime hook and the driver hook underneath).
const MAX_SKIPPED: u32 = 48;

/// This thread's stack from the frame whose return address is `from` (the application's
/// call site, as the hook's trampoline saw it) outward. If `from` is not found on the
/// stack (an unwinder without tables for some frame), the stack is `from` alone.
pub fn capture_from(from: usize) -> Frames {
    capture_until(from, &|_| false)
}

/// [`capture_from`], ending before the first frame (`from`'s included) whose return
/// address `stop` accepts: the frames of an interpreter whose own frames replace them
/// need not be walked.
pub fn capture_until(from: usize, stop: &dyn Fn(usize) -> bool) -> Frames {
    struct Walk<'a> {
        from: usize,
        started: bool,
        walked: u32,
        stop: &'a dyn Fn(usize) -> bool,
        frames: Frames,
    }
    unsafe extern "C" fn each(ctx: *mut c_void, arg: *mut c_void) -> c_int {
        // SAFETY: `arg` is the `Walk` passed below, alive for the whole walk; `ctx` is the
        // unwinder's context for this frame.
        let (walk, ip) = unsafe { (&mut *(arg as *mut Walk<'_>), _Unwind_GetIP(ctx)) };
        walk.walked += 1;
        if !walk.started {
            if ip != walk.from {
                return if walk.walked > MAX_SKIPPED {
                    END_OF_STACK
                } else {
                    NO_REASON
                };
            }
            walk.started = true;
        }
        if ip == 0 || (walk.stop)(ip) {
            return END_OF_STACK;
        }
        let f = &mut walk.frames;
        f.ips[f.len] = ip;
        f.len += 1;
        if f.len == MAX_FRAMES {
            END_OF_STACK
        } else {
            NO_REASON
        }
    }
    let mut walk = Walk {
        from,
        started: false,
        walked: 0,
        stop,
        frames: Frames {
            ips: [0; MAX_FRAMES],
            len: 0,
        },
    };
    if from != 0 {
        // SAFETY: the callback only reads the frame's IP and writes `walk`.
        unsafe { _Unwind_Backtrace(each, &mut walk as *mut Walk<'_> as *mut c_void) };
    }
    if !walk.started && from != 0 && !stop(from) {
        walk.frames.ips[0] = from;
        walk.frames.len = 1;
    }
    walk.frames
}

const NO_REASON: c_int = 0;
const END_OF_STACK: c_int = 5;

extern "C" {
    fn _Unwind_Backtrace(
        trace: unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int,
        arg: *mut c_void,
    ) -> c_int;
    fn _Unwind_GetIP(ctx: *mut c_void) -> usize;
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// Where `leaf`'s capture ends (0: nowhere).
        static STOP_AT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    #[inline(never)]
    fn leaf(out: &mut Vec<usize>) -> usize {
        // The return address into `middle`, as a hook's trampoline would see it.
        let mut me = 0usize;
        struct First(usize, u32);
        unsafe extern "C" fn second(ctx: *mut c_void, arg: *mut c_void) -> c_int {
            // SAFETY: as in `capture_from`.
            let (w, ip) = unsafe { (&mut *(arg as *mut First), _Unwind_GetIP(ctx)) };
            w.1 += 1;
            // Frame 1: the unwinder's own caller (this function); frame 2: `leaf`'s
            // return address into `middle`.
            if w.1 == 2 {
                w.0 = ip;
                return END_OF_STACK;
            }
            NO_REASON
        }
        let mut f = First(0, 0);
        // SAFETY: the callback only writes `f`.
        unsafe { _Unwind_Backtrace(second, &mut f as *mut First as *mut c_void) };
        me = me.max(f.0);
        let stop_at = STOP_AT.with(|s| s.get());
        let stop = |ip: usize| stop_at != 0 && ip == stop_at;
        out.extend_from_slice(capture_until(me, &stop).as_slice());
        me
    }

    #[inline(never)]
    fn middle(out: &mut Vec<usize>) -> usize {
        let r = leaf(out);
        std::hint::black_box(r)
    }

    #[test]
    fn a_capture_starts_at_the_given_return_address_and_goes_outward() {
        let mut out = Vec::new();
        let from = std::hint::black_box(middle(&mut out));
        assert_ne!(from, 0);
        assert_eq!(
            out[0], from,
            "the first frame is the caller's return address"
        );
        assert!(out.len() > 2, "frames beyond the first: {out:x?}");
        assert!(out.len() <= MAX_FRAMES);
    }

    #[test]
    fn a_capture_ends_before_the_first_frame_the_stop_accepts() {
        // The same walk from the same place twice: whole, then ended at the third frame.
        let mut walks = [Vec::new(), Vec::new()];
        for walk in walks.iter_mut() {
            let _ = std::hint::black_box(middle(walk));
            STOP_AT.with(|s| s.set(walk.get(2).copied().unwrap_or(0)));
        }
        STOP_AT.with(|s| s.set(0));
        let [full, cut] = walks;
        assert!(full.len() > 3, "{full:x?}");
        assert_eq!(cut, full[..2], "{full:x?}");
        // A stop that accepts the first frame: nothing, even without unwind tables.
        assert!(capture_until(0x1234, &|ip| ip == 0x1234)
            .as_slice()
            .is_empty());
    }

    #[test]
    fn an_address_not_on_the_stack_gives_itself_alone() {
        let f = capture_from(0x1234);
        assert_eq!(f.as_slice(), &[0x1234]);
        assert!(capture_from(0).as_slice().is_empty());
    }
}
