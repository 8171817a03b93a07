//! The ceiling on page-locked bytes: pinwise never holds more pinned memory than the
//! program would hold by itself without pinwise, unless the program pins nothing of note
//! (less than [`OF_NOTE`] at once: a few scalars' staging buffers, no transfer buffer; then
//! the budget bounds what pinwise pins for it) or the user gave a budget explicitly (then
//! pinwise may pin up to it). The preload may give back late (its `ceiling_deferred`
//! stat): not while a copy may be using a registration, nor while a graph capture is open.
//!
//! The program's *own* pinned bytes are what plain CUDA would lock for it now: every pinned
//! request (`cuMemHostAlloc`, `cuMemAllocHost`) at its page-rounded size, whether pinwise
//! served it pinned, pageable or passed it on, and every registration the program made
//! itself. Pinwise's *extras* are what it pins beyond those: its hot pageable buffers
//! registered in place (promotions), and idle pool segments kept after the program freed
//! their blocks. Extras live in the headroom the program left unused: its own peak so far
//! minus everything locked now. A program request that would push the locked total over
//! the ceiling first takes its room back from the extras ([`to_give_back`]).
//!
//! | question | function | asked by |
//! |---|---|---|
//! | the most bytes that may be locked now | [`ceiling`] | preload (sets the budget's limit) |
//! | how many bytes of extras must be given back before a program request is served | [`to_give_back`] | preload (`cuMemHostAlloc`, `cuMemHostRegister`) |
//! | ... before memory the program already counts is locked | [`over`] | preload (a query on a pageable-served request) |
//! | the pool block a request is served from | [`block_size`] | allocator engine |

use crate::decide::grade::{graded_size, FINE_FROM, PAGE};

/// The least a program must pin at once for its own peak to be the ceiling (1 MiB, where
/// copies start to run at bandwidth rather than latency): less is bookkeeping (PyTorch
/// pins 8 bytes for a scalar's copy), and a program that holds only that much pins nothing
/// of note.
pub const OF_NOTE: u64 = FINE_FROM as u64;

/// Where the ceiling comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// The most bytes the program's own pinned requests and registrations held at once
    /// so far (page-rounded), as plain CUDA would have locked them.
    pub program_peak: u64,
    /// The pinned budget's cap.
    pub cap: u64,
    /// Whether the user gave the budget (`--budget`); otherwise it is the default.
    pub explicit_budget: bool,
}

/// The most bytes that may be page-locked in the process now:
/// - a budget the user gave: the larger of it and the program's own peak (the program's
///   own requests are the program's; pinwise's extras may fill the budget);
/// - no budget given and the program pinned nothing of note yet (less than [`OF_NOTE`]):
///   the default budget (hot pageable buffers promoted are the speed-up, and the budget
///   bounds them);
/// - otherwise the program's own peak: pinwise's extras only fill the room the program
///   itself left unused.
pub fn ceiling(b: &Bounds) -> u64 {
    if b.explicit_budget {
        b.program_peak.max(b.cap)
    } else if b.program_peak < OF_NOTE {
        b.cap
    } else {
        b.program_peak
    }
}

/// With `locked` bytes page-locked now: how many bytes of pinwise's extras must be given
/// back before `bytes` more are locked for the program's own sake (memory it already counts
/// among its own, such as a pageable allocation served for its pinned request that must now
/// be registered), so that the locked total stays within the ceiling.
pub fn over(b: &Bounds, locked: u64, bytes: u64) -> u64 {
    locked.saturating_add(bytes).saturating_sub(ceiling(b))
}

/// Before a program's pinned request of `request` bytes (page-rounded) is served, with
/// `locked` bytes page-locked now and `program_now` of them (or of pageable memory served
/// for them) the program's own: how many bytes of pinwise's extras must be given back so
/// that serving it keeps the locked total within the ceiling the request itself raises
/// (the program's peak grows with its own bytes). 0 when it fits; a request the program's
/// own bytes alone exceed the ceiling for is the program's business, and takes only what
/// extras there are.
pub fn to_give_back(b: &Bounds, program_now: u64, locked: u64, request: u64) -> u64 {
    let peak = b.program_peak.max(program_now.saturating_add(request));
    over(
        &Bounds {
            program_peak: peak,
            ..*b
        },
        locked,
        request,
    )
}

/// The pool block a request of `size` bytes is served from: a program's own pinned request
/// gets exactly the pages plain CUDA would lock for it (so that pinwise holds no more than
/// the program would); pinwise's own allocations get the graded size
/// ([`graded_size`]: at most 1/16 more, so that freed blocks are found again).
pub fn block_size(size: usize, program_request: bool) -> usize {
    if program_request {
        size.max(1).next_multiple_of(PAGE)
    } else {
        graded_size(size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn bounds(program_peak: u64, cap: u64, explicit_budget: bool) -> Bounds {
        Bounds {
            program_peak,
            cap,
            explicit_budget,
        }
    }

    #[test]
    fn a_program_that_pins_sets_the_ceiling() {
        assert_eq!(ceiling(&bounds(16 * MIB, 4096 * MIB, false)), 16 * MIB);
        assert_eq!(
            ceiling(&bounds(0, 4096 * MIB, false)),
            4096 * MIB,
            "pins nothing: the budget bounds the promotions"
        );
        assert_eq!(
            ceiling(&bounds(4096, 4096 * MIB, false)),
            4096 * MIB,
            "a scalar's staging buffer is nothing of note"
        );
        assert_eq!(ceiling(&bounds(OF_NOTE, 4096 * MIB, false)), OF_NOTE);
        assert_eq!(ceiling(&bounds(16 * MIB, 64 * MIB, true)), 64 * MIB);
        assert_eq!(ceiling(&bounds(96 * MIB, 64 * MIB, true)), 96 * MIB);
    }

    #[test]
    fn requests_take_their_room_back_from_the_extras() {
        let b = bounds(32 * MIB, 4096 * MIB, false);
        // Freed 32 MiB (kept idle by the pool), asks for 48: the idle 32 must go.
        assert_eq!(to_give_back(&b, 0, 32 * MIB, 48 * MIB), 32 * MIB);
        // 16 of the program's own live, 16 MiB of promotions in the headroom, asks 16 more:
        // the program's peak stays 32, so the promotions give way.
        assert_eq!(to_give_back(&b, 16 * MIB, 32 * MIB, 16 * MIB), 16 * MIB);
        // Room enough.
        assert_eq!(to_give_back(&b, 16 * MIB, 16 * MIB, 16 * MIB), 0);
        // The first pinned request of a program pinwise promoted buffers for: the default
        // budget no longer applies, the promotions give way.
        let first = bounds(0, 4096 * MIB, false);
        assert_eq!(to_give_back(&first, 0, 8 * MIB, 16 * MIB), 8 * MIB);
        // A budget the user gave keeps them.
        let given = bounds(0, 64 * MIB, true);
        assert_eq!(to_give_back(&given, 0, 8 * MIB, 16 * MIB), 0);
    }

    #[test]
    fn program_requests_get_their_pages_only() {
        assert_eq!(block_size((4 << 20) + 1, true), (4 << 20) + 4096);
        assert_eq!(block_size((4 << 20) + 1, false), graded_size((4 << 20) + 1));
        assert_eq!(block_size(0, true), 4096);
    }
}
