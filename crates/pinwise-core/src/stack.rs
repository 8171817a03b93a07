//! Call stacks and the names of call sites.
//!
//! A [`Stack`] is up to [`MAX_FRAMES`] [`Frame`]s, innermost first: native frames (a
//! normalized [`Site`], as call sites are everywhere else) and Python frames (file, line,
//! function). A source that knows both puts the native frames first, down to (not
//! including) the interpreter's own frames, then the Python frames of the same thread,
//! innermost first.
//!
//! Stacks are interned in a [`StackTable`] (shared like the
//! [`ModuleTable`](crate::tag::ModuleTable)): an [`Event`](crate::event::Event) carries a
//! 4-byte [`StackId`], and a stack seen a million times is stored once.
//!
//! A [`SymbolTable`] names native sites (function, and file:line when debug information
//! exists). Sources fill it when a trace or run ends, so a history names its call sites on
//! a machine where the binaries are gone.

use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroU32;
use std::sync::Arc;

use parking_lot::RwLock;
use serde::{Deserialize, Serialize};

use crate::tag::Site;

/// The most frames a stack keeps (the innermost ones).
pub const MAX_FRAMES: usize = 32;

/// A Python frame: where the interpreter was in a function.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PyFrame {
    /// The code object's file name (`co_filename`), as the interpreter has it.
    pub file: Arc<str>,
    /// The line being executed (1-based; 0 when unknown).
    pub line: u32,
    /// The function's name (`co_qualname` where the interpreter has it, else `co_name`).
    pub function: Arc<str>,
}

impl PyFrame {
    /// A Python frame.
    pub fn new(file: &str, line: u32, function: &str) -> Self {
        PyFrame {
            file: Arc::from(file),
            line,
            function: Arc::from(function),
        }
    }
}

/// One frame of a stack.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Frame {
    /// A native frame: the return address, normalized (module and file offset).
    Native(Site),
    /// A Python frame.
    Python(PyFrame),
}

impl Frame {
    /// The native site, if this is a native frame.
    pub fn site(&self) -> Option<Site> {
        match self {
            Frame::Native(s) => Some(*s),
            Frame::Python(_) => None,
        }
    }
}

/// A stack: frames, innermost first, at most [`MAX_FRAMES`].
pub type Stack = Arc<[Frame]>;

/// An interned stack: an index into a [`StackTable`]. Never zero, so `Option<StackId>` is
/// 4 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StackId(NonZeroU32);

impl StackId {
    /// The id of the stack at `index` (0-based) of a table; `None` past `u32::MAX - 1`.
    pub fn from_index(index: usize) -> Option<StackId> {
        let v = u32::try_from(index).ok()?.checked_add(1)?;
        NonZeroU32::new(v).map(StackId)
    }

    /// The 0-based index in its table (what dumps write).
    pub fn index(self) -> usize {
        (self.0.get() - 1) as usize
    }
}

/// Interns stacks into [`StackId`]s. Shared (through `Arc`) by a history and the sources
/// that feed it; cheap to read from many threads.
#[derive(Debug, Default)]
pub struct StackTable {
    inner: RwLock<StackTableInner>,
}

#[derive(Debug, Default)]
struct StackTableInner {
    stacks: Vec<Stack>,
    by_frames: HashMap<Stack, StackId>,
}

impl StackTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new shared table.
    pub fn shared() -> Arc<StackTable> {
        Arc::new(Self::new())
    }

    /// The id of the stack made of `frames` (only the first [`MAX_FRAMES`] are kept),
    /// adding it if new; `None` for an empty stack.
    pub fn intern(&self, frames: &[Frame]) -> Option<StackId> {
        let frames = &frames[..frames.len().min(MAX_FRAMES)];
        if frames.is_empty() {
            return None;
        }
        if let Some(id) = self.inner.read().by_frames.get(frames) {
            return Some(*id);
        }
        let mut inner = self.inner.write();
        if let Some(id) = inner.by_frames.get(frames) {
            return Some(*id);
        }
        let id = StackId::from_index(inner.stacks.len())?;
        let stack: Stack = Arc::from(frames);
        inner.stacks.push(Arc::clone(&stack));
        inner.by_frames.insert(stack, id);
        Some(id)
    }

    /// The stack behind `id`, if the id came from this table.
    pub fn get(&self, id: StackId) -> Option<Stack> {
        self.inner.read().stacks.get(id.index()).cloned()
    }

    /// Number of stacks.
    pub fn len(&self) -> usize {
        self.inner.read().stacks.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// All stacks, indexed by [`StackId::index`].
    pub fn snapshot(&self) -> Vec<Stack> {
        self.inner.read().stacks.clone()
    }

    /// The stacks from index `first` on (for appendable dumps).
    pub fn since(&self, first: usize) -> Vec<Stack> {
        let inner = self.inner.read();
        inner
            .stacks
            .get(first..)
            .map(<[_]>::to_vec)
            .unwrap_or_default()
    }
}

/// The name of a native call site.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Symbol {
    /// The function (demangled).
    pub function: String,
    /// The source file, when debug information says.
    pub file: Option<String>,
    /// The line, when debug information says.
    pub line: Option<u32>,
}

impl Symbol {
    /// A symbol known by its function name only.
    pub fn function(name: impl Into<String>) -> Self {
        Symbol {
            function: name.into(),
            file: None,
            line: None,
        }
    }
}

/// Names of native call sites, by site (sites refer to the history's module table).
pub type SymbolTable = BTreeMap<Site, Symbol>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tag::ModuleId;

    fn native(offset: u64) -> Frame {
        Frame::Native(Site {
            module: ModuleId(1),
            offset,
        })
    }

    #[test]
    fn equal_stacks_share_one_id_and_ids_are_dense() {
        let t = StackTable::new();
        let a = t.intern(&[native(1), native(2)]).unwrap();
        let b = t
            .intern(&[native(1), Frame::Python(PyFrame::new("t.py", 3, "f"))])
            .unwrap();
        assert_eq!(t.intern(&[native(1), native(2)]), Some(a));
        assert_ne!(a, b);
        assert_eq!((a.index(), b.index()), (0, 1));
        assert_eq!(
            t.get(b).unwrap()[1],
            Frame::Python(PyFrame::new("t.py", 3, "f"))
        );
        assert_eq!(t.intern(&[]), None);
        assert_eq!(std::mem::size_of::<Option<StackId>>(), 4);
    }

    #[test]
    fn stacks_keep_their_innermost_frames_only() {
        let t = StackTable::new();
        let frames: Vec<Frame> = (0..40).map(native).collect();
        let id = t.intern(&frames).unwrap();
        let s = t.get(id).unwrap();
        assert_eq!(s.len(), MAX_FRAMES);
        assert_eq!(s[0], native(0));
        assert_eq!(t.intern(&frames[..MAX_FRAMES]), Some(id));
    }
}
