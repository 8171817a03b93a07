//! Two histories or profiles side by side: what got hotter or colder, what appeared or
//! disappeared, what changed size, and whether the pinning one of them advises still holds
//! for the other (for checking that a profile still matches the program).
//!
//! Both inputs are reduced to per-tag profile entries (a history through the same
//! entries a profile holds). Tags and call sites match by module identity key (build ID,
//! else path), offset and, for tags, call number, so a rebuilt program matches nothing:
//! the diff then says which modules changed identity.
//!
//! [`model`]: what a diff is; [`compute`]: making one; [`text`]: the terminal rendering (the
//! JSON rendering is the model's `Serialize`).

pub mod compute;
pub mod model;
pub mod text;

pub use compute::{diff, entries_of};
pub use model::*;
pub use text::{render_text, render_text_with};
