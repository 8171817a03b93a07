//! Exact transfer counters of an allocation.
//!
//! Sums saturate: counters come from dumps too, and a corrupt dump must not make a sum
//! overflow (a real run never comes near 2^64 transfers or bytes).

use serde::{Deserialize, Serialize};

use crate::event::Direction;

/// Transfers and bytes of one direction, split by the state of the host memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectionCounters {
    /// Transfers whose host side was pageable.
    pub pageable_transfers: u64,
    /// Bytes those moved.
    pub pageable_bytes: u64,
    /// Transfers whose host side was pinned.
    pub pinned_transfers: u64,
    /// Bytes those moved.
    pub pinned_bytes: u64,
}

impl DirectionCounters {
    /// All transfers of this direction.
    pub fn transfers(&self) -> u64 {
        self.pageable_transfers
            .saturating_add(self.pinned_transfers)
    }

    /// All bytes of this direction.
    pub fn bytes(&self) -> u64 {
        self.pageable_bytes.saturating_add(self.pinned_bytes)
    }

    /// Counts one transfer.
    pub fn add(&mut self, bytes: u64, pinned: bool) {
        if pinned {
            self.pinned_transfers += 1;
            self.pinned_bytes = self.pinned_bytes.saturating_add(bytes);
        } else {
            self.pageable_transfers += 1;
            self.pageable_bytes = self.pageable_bytes.saturating_add(bytes);
        }
    }

    /// Adds another set of counters.
    pub fn merge(&mut self, other: &DirectionCounters) {
        self.pageable_transfers = self
            .pageable_transfers
            .saturating_add(other.pageable_transfers);
        self.pageable_bytes = self.pageable_bytes.saturating_add(other.pageable_bytes);
        self.pinned_transfers = self.pinned_transfers.saturating_add(other.pinned_transfers);
        self.pinned_bytes = self.pinned_bytes.saturating_add(other.pinned_bytes);
    }
}

/// An allocation's transfers by direction (indexed by [`Direction::index`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransferCounters {
    /// Per direction, in the order of [`Direction::ALL`].
    pub by_direction: [DirectionCounters; 4],
}

impl TransferCounters {
    /// Counts one transfer.
    pub fn add(&mut self, direction: Direction, bytes: u64, pinned: bool) {
        self.by_direction[direction.index()].add(bytes, pinned);
    }

    /// The counters of one direction.
    pub fn direction(&self, direction: Direction) -> &DirectionCounters {
        &self.by_direction[direction.index()]
    }

    /// All transfers.
    pub fn transfers(&self) -> u64 {
        self.by_direction
            .iter()
            .fold(0u64, |a, d| a.saturating_add(d.transfers()))
    }

    /// All bytes moved.
    pub fn bytes(&self) -> u64 {
        self.by_direction
            .iter()
            .fold(0u64, |a, d| a.saturating_add(d.bytes()))
    }

    /// Transfers whose host side was pageable.
    pub fn pageable_transfers(&self) -> u64 {
        self.by_direction
            .iter()
            .fold(0u64, |a, d| a.saturating_add(d.pageable_transfers))
    }

    /// Bytes moved from or to pageable memory.
    pub fn pageable_bytes(&self) -> u64 {
        self.by_direction
            .iter()
            .fold(0u64, |a, d| a.saturating_add(d.pageable_bytes))
    }

    /// Bytes moved from or to pinned memory.
    pub fn pinned_bytes(&self) -> u64 {
        self.by_direction
            .iter()
            .fold(0u64, |a, d| a.saturating_add(d.pinned_bytes))
    }

    /// Adds another set of counters.
    pub fn merge(&mut self, other: &TransferCounters) {
        for (a, b) in self.by_direction.iter_mut().zip(other.by_direction.iter()) {
            a.merge(b);
        }
    }
}
