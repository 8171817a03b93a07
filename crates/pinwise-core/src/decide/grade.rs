//! Size grading: how much a request is rounded up before it is carved from a pool (the
//! allocator's pool carves these blocks; the plan of a profile counts them).
//!
//! Power-of-two rounding (what PyTorch's caching host allocator does) wastes up to half of
//! every block. pinwise rounds up to whole pages, and above [`FINE_FROM`] to sixteenths of
//! the request's power of two, so a block is at most 1/16 (6.25 %) larger than asked,
//! while sizes still fall into few enough classes that freed blocks are found again.

/// The page size blocks and segments are aligned to.
pub const PAGE: usize = 4096;

/// Above this size, requests are rounded to a sixteenth of their power of two.
pub const FINE_FROM: usize = 1 << 20;

/// Steps per power of two above [`FINE_FROM`].
pub const STEPS_PER_OCTAVE: usize = 16;

/// The size a pool block for `size` requested bytes has: a whole number of pages, and
/// above 1 MiB a multiple of `2^floor(log2(size)) / 16`. Never less than one page.
pub fn graded_size(size: usize) -> usize {
    let paged = size.max(1).next_multiple_of(PAGE);
    if paged <= FINE_FROM {
        return paged;
    }
    let octave = 1usize << (usize::BITS - 1 - paged.leading_zeros());
    let step = (octave / STEPS_PER_OCTAVE).max(PAGE);
    paged.next_multiple_of(step)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn examples() {
        assert_eq!(graded_size(0), PAGE);
        assert_eq!(graded_size(1), PAGE);
        assert_eq!(graded_size(4096), 4096);
        assert_eq!(graded_size(4097), 8192);
        assert_eq!(graded_size(1 << 20), 1 << 20);
        assert_eq!(graded_size((1 << 30) + 1), (1 << 30) + (1 << 26));
        assert_eq!(graded_size(3 << 20), 3 << 20);
        assert_eq!(graded_size((3 << 20) + 5), (3 << 20) + (1 << 17));
    }

    proptest! {
        #[test]
        fn graded_size_is_close_and_aligned(size in 1usize..(1 << 34)) {
            let g = graded_size(size);
            prop_assert!(g >= size);
            prop_assert_eq!(g % PAGE, 0);
            // At most one page or one sixteenth above the request, whichever is larger.
            prop_assert!(g - size < PAGE.max(size / STEPS_PER_OCTAVE + PAGE));
            prop_assert_eq!(graded_size(g), g, "grading is idempotent");
        }
    }
}
