//! The decision engine: the one place each pinning decision is made. The report
//! (pinwise-report), the allocator (pinwise-alloc's engine and use mode) and the preload
//! library (pinwise-preload) gather facts and ask here; none of them decides on its own.
//!
//! | module | decides |
//! |---|---|
//! | [`pricing`] | what pinning costs at what the engine will do (pool hit, registering a warm mapping, fresh memory the cheaper way, holding it), and which cost table prices it (a named calibration, this GPU's cached calibration, else the built-in table) |
//! | [`policy`] | whether a predicted use pays for pinning at a price, and why (`Policy`) |
//! | [`rules`] | per allocation: serve pinned or pageable (flags, the profile's advice, pinned-and-reused, the hot-site free-block rule, the site's history); keep a program's pinned request pinned; promote a pageable buffer that turned hot |
//! | [`earn`] | a program's pinned request without evidence: served pageable first, registered in place once its copies recur close together and pay, or once buffers kept pageable cost more than the slowdown bound; the pricing of pageable-first against pinned-first |
//! | [`grade`] | the pool block size of a request |
//! | [`ceiling`] | the most bytes that may be page-locked: the program's own peak (what plain CUDA would lock for it), unless it pins nothing or a budget was given; what pinwise's extras give back before a program request; a program request's block size |
//! | [`plan`] | `PinPlan`: which allocations of a profile to pin within a budget (block model: graded sizes, pool reuse, peak-aware); the report's budget curve and use mode's advice |

pub mod ceiling;
pub mod earn;
pub mod grade;
pub mod plan;
pub mod policy;
pub mod pricing;
pub mod rules;
