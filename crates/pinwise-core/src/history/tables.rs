//! Interning tables: call sites, CUDA streams, and (process, call site) slots become small
//! indices, so records and events store 1-4 bytes instead of 16.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash};

use rustc_hash::FxHasher;

use super::codec::{Intern, Resolve};
use crate::tag::Site;

pub(crate) type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// Values in first-seen order, each with a `u32` index.
#[derive(Debug, Clone)]
pub(crate) struct Interner<K> {
    items: Vec<K>,
    index: FxMap<K, u32>,
}

impl<K> Default for Interner<K> {
    fn default() -> Self {
        Interner {
            items: Vec::new(),
            index: FxMap::default(),
        }
    }
}

impl<K: Copy + Eq + Hash> Interner<K> {
    /// The index of `key`, adding it if new.
    #[inline]
    pub fn intern(&mut self, key: K) -> u32 {
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        let i = u32::try_from(self.items.len()).expect("more than 2^32 interned values");
        self.items.push(key);
        self.index.insert(key, i);
        i
    }

    /// The index of `key`, if it was interned.
    pub fn find(&self, key: &K) -> Option<u32> {
        self.index.get(key).copied()
    }

    /// The value at `index`.
    #[inline]
    pub fn get(&self, index: u32) -> Option<K> {
        self.items.get(index as usize).copied()
    }

    /// All values, by index.
    pub fn items(&self) -> &[K] {
        &self.items
    }

    /// Heap bytes (approximate for the hash map: buckets of key, value and control byte).
    pub fn heap_bytes(&self) -> usize {
        self.items.capacity() * std::mem::size_of::<K>()
            + self.index.capacity() * (std::mem::size_of::<(K, u32)>() + 1)
    }
}

/// The call-site and stream tables events refer to.
#[derive(Debug, Clone, Default)]
pub(crate) struct EventTables {
    pub sites: Interner<Site>,
    pub streams: Interner<u64>,
}

impl Intern for EventTables {
    #[inline]
    fn site_index(&mut self, site: Site) -> u32 {
        self.sites.intern(site)
    }

    #[inline]
    fn stream_index(&mut self, stream: u64) -> u32 {
        self.streams.intern(stream)
    }
}

impl Resolve for EventTables {
    #[inline]
    fn site(&self, index: u32) -> Option<Site> {
        self.sites.get(index)
    }

    #[inline]
    fn stream(&self, index: u32) -> Option<u64> {
        self.streams.get(index)
    }
}

/// A (process, call site) pair with its call counter: where call numbers come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct SlotKey {
    /// Index of the process in the history's process list.
    pub process: u32,
    /// Index of the call site in the site table.
    pub site: u32,
}

/// The slots, and the number of allocations seen at each.
#[derive(Debug, Clone, Default)]
pub(crate) struct Slots {
    keys: Interner<SlotKey>,
    calls: Vec<u32>,
}

impl Slots {
    pub fn intern(&mut self, key: SlotKey) -> u32 {
        let i = self.keys.intern(key);
        if i as usize == self.calls.len() {
            self.calls.push(0);
        }
        i
    }

    /// Counts one more allocation at `slot`; returns its call number (1 for the first).
    pub fn next_call(&mut self, slot: u32) -> u32 {
        let c = &mut self.calls[slot as usize];
        *c = c.saturating_add(1);
        *c
    }

    /// Makes sure the slot's counter is at least `call_no` (when restoring a dump).
    pub fn saw_call(&mut self, slot: u32, call_no: u32) {
        let c = &mut self.calls[slot as usize];
        *c = (*c).max(call_no);
    }

    #[inline]
    pub fn key(&self, slot: u32) -> SlotKey {
        self.keys.items()[slot as usize]
    }

    pub fn heap_bytes(&self) -> usize {
        self.keys.heap_bytes() + self.calls.capacity() * 4
    }
}
