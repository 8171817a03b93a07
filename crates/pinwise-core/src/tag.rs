//! Identity of an allocation across runs.
//!
//! A call site is a [`Site`]: the module it lies in (an interned [`ModuleId`] standing for a
//! [`ModuleIdentity`]: build ID where the ELF has one, else its path) and the offset inside
//! that module's file. ASLR and PIE move the module, not the offset, so a site is the same
//! in every run of the same build. A [`Tag`] adds the call number: the 1st, 2nd, ... allocation
//! made from that site in the process.
//!
//! Sources turn raw return addresses into sites (the tracer with blazesym and
//! `/proc/PID/maps`, in-process sources with `dladdr`); everything downstream compares sites.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use parking_lot::RwLock;
use serde::{Deserialize, Serialize};

/// What makes a module the same module in another run.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ModuleIdentity {
    /// The ELF build ID (`NT_GNU_BUILD_ID`), when the file has one.
    pub build_id: Option<Vec<u8>>,
    /// The file's path when it was seen (for people; the build ID wins for identity).
    pub path: String,
}

impl ModuleIdentity {
    /// A module known only by its path.
    pub fn from_path(path: impl Into<String>) -> Self {
        ModuleIdentity {
            build_id: None,
            path: path.into(),
        }
    }

    /// A module with a build ID.
    pub fn with_build_id(path: impl Into<String>, build_id: Vec<u8>) -> Self {
        ModuleIdentity {
            build_id: Some(build_id),
            path: path.into(),
        }
    }

    /// The key that decides identity across runs: `buildid:<hex>` when there is a build ID,
    /// else `path:<path>`.
    pub fn key(&self) -> String {
        match &self.build_id {
            Some(id) if !id.is_empty() => format!("buildid:{}", hex(id)),
            _ => format!("path:{}", self.path),
        }
    }

    /// The build ID in lowercase hex, if any.
    pub fn build_id_hex(&self) -> Option<String> {
        self.build_id.as_deref().map(hex)
    }
}

fn hex(bytes: &[u8]) -> String {
    use fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// An interned module: an index into a [`ModuleTable`]. `ModuleId::UNKNOWN` (0) stands for
/// "no module known" (the source could not tell where the call came from).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ModuleId(pub u32);

impl ModuleId {
    /// The module of call sites nobody could attribute.
    pub const UNKNOWN: ModuleId = ModuleId(0);
}

/// A normalized call site: module plus offset inside the module's file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Site {
    /// The module the return address lies in.
    pub module: ModuleId,
    /// Offset of the return address inside the module's file.
    pub offset: u64,
}

impl Site {
    /// The site of allocations whose call site is unknown.
    pub const UNKNOWN: Site = Site {
        module: ModuleId::UNKNOWN,
        offset: 0,
    };
}

/// An allocation's identity across runs: its call site and its call number at that site
/// (1 for the first allocation made from the site in the process).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Tag {
    /// Where the allocation was asked for.
    pub site: Site,
    /// The how-manyth allocation from that site this was, starting at 1.
    pub call_no: u32,
}

/// Interns [`ModuleIdentity`]s into small [`ModuleId`]s. Shared (through `Arc`) by the
/// history and the sources that feed it; cheap to read from many threads.
#[derive(Debug)]
pub struct ModuleTable {
    inner: RwLock<ModuleTableInner>,
}

#[derive(Debug)]
struct ModuleTableInner {
    modules: Vec<ModuleIdentity>,
    by_key: HashMap<String, ModuleId>,
}

impl Default for ModuleTable {
    fn default() -> Self {
        Self::new()
    }
}

impl ModuleTable {
    /// A table holding only the unknown module, `ModuleId(0)`, whose path is `"?"`.
    pub fn new() -> Self {
        let unknown = ModuleIdentity::from_path("?");
        let mut by_key = HashMap::new();
        by_key.insert(unknown.key(), ModuleId::UNKNOWN);
        ModuleTable {
            inner: RwLock::new(ModuleTableInner {
                modules: vec![unknown],
                by_key,
            }),
        }
    }

    /// A new shared table.
    pub fn shared() -> Arc<ModuleTable> {
        Arc::new(Self::new())
    }

    /// The id of `identity`, adding it if it is new. Two identities with the same
    /// [`ModuleIdentity::key`] get the same id.
    pub fn intern(&self, identity: &ModuleIdentity) -> ModuleId {
        let key = identity.key();
        if let Some(id) = self.inner.read().by_key.get(&key) {
            return *id;
        }
        let mut inner = self.inner.write();
        if let Some(id) = inner.by_key.get(&key) {
            return *id;
        }
        let id = ModuleId(inner.modules.len() as u32);
        inner.modules.push(identity.clone());
        inner.by_key.insert(key, id);
        id
    }

    /// The identity behind `id`, if the id came from this table.
    pub fn get(&self, id: ModuleId) -> Option<ModuleIdentity> {
        self.inner.read().modules.get(id.0 as usize).cloned()
    }

    /// The id already given to a module with this identity key, if any.
    pub fn find_key(&self, key: &str) -> Option<ModuleId> {
        self.inner.read().by_key.get(key).copied()
    }

    /// Number of modules, the unknown one included.
    pub fn len(&self) -> usize {
        self.inner.read().modules.len()
    }

    /// Never true: the unknown module is always there.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// A copy of all identities, indexed by `ModuleId.0`.
    pub fn snapshot(&self) -> Vec<ModuleIdentity> {
        self.inner.read().modules.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_id_wins_over_path_for_identity() {
        let t = ModuleTable::new();
        let a = t.intern(&ModuleIdentity::with_build_id("/a/app", vec![0xab, 0xcd]));
        let b = t.intern(&ModuleIdentity::with_build_id(
            "/b/app-copy",
            vec![0xab, 0xcd],
        ));
        let c = t.intern(&ModuleIdentity::from_path("/a/app"));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, ModuleId::UNKNOWN);
        assert_eq!(t.get(a).unwrap().key(), "buildid:abcd");
        assert_eq!(t.len(), 3);
    }
}
