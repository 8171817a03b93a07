//! Accounting: how many pinned bytes each client holds, against its budget, and how many
//! the pool holds, against its capacity. Pure logic.
//!
//! The two are charged separately because a named buffer shared by several clients counts
//! once in the pool (one copy in RAM) but in full against each attached client's budget.

use std::collections::HashMap;

/// A connection's id in the service.
pub type ClientId = u64;

/// Why a charge was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The client's own budget.
    #[error(
        "{want} more bytes would put this client at {would} bytes, over its budget of {budget}"
    )]
    ClientBudget {
        /// Asked for.
        want: u64,
        /// What the client would hold.
        would: u64,
        /// Its budget.
        budget: u64,
    },
    /// The service's capacity.
    #[error(
        "{want} more bytes would put the pool at {would} bytes, over its capacity of {capacity}"
    )]
    Capacity {
        /// Asked for.
        want: u64,
        /// What the pool would hold.
        would: u64,
        /// Its capacity.
        capacity: u64,
    },
}

/// Bytes held per client and in total.
#[derive(Debug)]
pub struct Ledger {
    capacity: u64,
    client_budget: u64,
    total: u64,
    held: HashMap<ClientId, u64>,
}

impl Ledger {
    /// A ledger for a pool of `capacity` bytes in which no client holds more than
    /// `client_budget`.
    pub fn new(capacity: u64, client_budget: u64) -> Ledger {
        Ledger {
            capacity,
            client_budget,
            total: 0,
            held: HashMap::new(),
        }
    }

    /// Charges `bytes` to `client`'s budget, or says why not (and charges nothing).
    pub fn charge_client(&mut self, client: ClientId, bytes: u64) -> Result<(), Refusal> {
        let would = self.held(client).saturating_add(bytes);
        if would > self.client_budget {
            return Err(Refusal::ClientBudget {
                want: bytes,
                would,
                budget: self.client_budget,
            });
        }
        self.held.insert(client, would);
        Ok(())
    }

    /// Charges `bytes` to the pool's capacity, or says why not (and charges nothing).
    pub fn charge_total(&mut self, bytes: u64) -> Result<(), Refusal> {
        let would = self.total.saturating_add(bytes);
        if would > self.capacity {
            return Err(Refusal::Capacity {
                want: bytes,
                would,
                capacity: self.capacity,
            });
        }
        self.total = would;
        Ok(())
    }

    /// Both charges, or neither.
    pub fn charge(&mut self, client: ClientId, bytes: u64) -> Result<(), Refusal> {
        self.charge_client(client, bytes)?;
        if let Err(r) = self.charge_total(bytes) {
            self.release_client(client, bytes);
            return Err(r);
        }
        Ok(())
    }

    /// Gives back `bytes` of `client`'s budget (never more than it holds).
    pub fn release_client(&mut self, client: ClientId, bytes: u64) {
        if let Some(held) = self.held.get_mut(&client) {
            *held -= bytes.min(*held);
            if *held == 0 {
                self.held.remove(&client);
            }
        }
    }

    /// Gives back `bytes` of the pool's capacity (never more than is held).
    pub fn release_total(&mut self, bytes: u64) {
        self.total -= bytes.min(self.total);
    }

    /// Bytes charged to `client`.
    pub fn held(&self, client: ClientId) -> u64 {
        self.held.get(&client).copied().unwrap_or(0)
    }

    /// Bytes charged to the pool.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The capacity.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Each client's budget.
    pub fn client_budget(&self) -> u64 {
        self.client_budget
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_and_capacity_are_enforced_and_release_gives_back() {
        let mut l = Ledger::new(100, 60);
        l.charge(1, 50).unwrap();
        assert!(matches!(
            l.charge(1, 11),
            Err(Refusal::ClientBudget { would: 61, .. })
        ));
        l.charge(2, 50).unwrap();
        assert!(matches!(
            l.charge(3, 1),
            Err(Refusal::Capacity { would: 101, .. })
        ));
        assert_eq!(l.held(3), 0, "a refused charge charges nothing");
        assert_eq!((l.held(1), l.held(2), l.total()), (50, 50, 100));
        l.release_client(1, 80); // more than held: only what it holds
        l.release_total(50);
        assert_eq!((l.held(1), l.total()), (0, 50));
        l.release_client(7, 10); // unknown client: nothing
        assert_eq!(l.total(), 50);
        l.release_client(2, 50);
        l.release_total(500);
        assert_eq!(l.total(), 0);
    }

    #[test]
    fn a_shared_buffer_counts_once_in_the_pool_and_fully_per_client() {
        let mut l = Ledger::new(100, 80);
        l.charge(1, 80).unwrap(); // creator
        l.charge_client(2, 80).unwrap(); // attached: budget only
        l.charge_client(3, 80).unwrap();
        assert_eq!(l.total(), 80);
        assert!(l.charge_client(2, 1).is_err(), "client 2's budget is full");
        l.charge(4, 20).unwrap();
        assert_eq!(l.total(), 100);
    }
}
