//! Size grading, decided in pinwise-core ([`pinwise_core::decide::grade`]): the allocator's
//! pool carves blocks of these sizes, and the plan of a profile counts them.

pub use pinwise_core::decide::grade::{graded_size, FINE_FROM, PAGE, STEPS_PER_OCTAVE};
