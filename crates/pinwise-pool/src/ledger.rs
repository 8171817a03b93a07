//! Accounting: how many pinned bytes each client holds, against its budget and the
//! service's capacity. Pure logic.

use std::collections::HashMap;

/// A connection's id in the service.
pub type ClientId = u64;

/// Why a reservation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The client's own budget.
    #[error(
        "{want} more bytes would put this client at {would} bytes, over its budget of {budget}"
    )]
    ClientBudget { want: u64, would: u64, budget: u64 },
    /// The service's capacity.
    #[error(
        "{want} more bytes would put the pool at {would} bytes, over its capacity of {capacity}"
    )]
    Capacity {
        want: u64,
        would: u64,
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

    /// Takes `bytes` for `client`, or says why not (and takes nothing).
    pub fn reserve(&mut self, client: ClientId, bytes: u64) -> Result<(), Refusal> {
        let held = self.held.get(&client).copied().unwrap_or(0);
        let would = held.saturating_add(bytes);
        if would > self.client_budget {
            return Err(Refusal::ClientBudget {
                want: bytes,
                would,
                budget: self.client_budget,
            });
        }
        let total = self.total.saturating_add(bytes);
        if total > self.capacity {
            return Err(Refusal::Capacity {
                want: bytes,
                would: total,
                capacity: self.capacity,
            });
        }
        self.total = total;
        self.held.insert(client, would);
        Ok(())
    }

    /// Gives back `bytes` that `client` holds (never more than it holds).
    pub fn release(&mut self, client: ClientId, bytes: u64) {
        if let Some(held) = self.held.get_mut(&client) {
            let n = bytes.min(*held);
            *held -= n;
            self.total -= n;
            if *held == 0 {
                self.held.remove(&client);
            }
        }
    }

    /// Bytes `client` holds.
    pub fn held(&self, client: ClientId) -> u64 {
        self.held.get(&client).copied().unwrap_or(0)
    }

    /// Bytes held by all clients.
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
        l.reserve(1, 50).unwrap();
        assert!(matches!(
            l.reserve(1, 11),
            Err(Refusal::ClientBudget { would: 61, .. })
        ));
        l.reserve(2, 50).unwrap();
        assert!(matches!(
            l.reserve(3, 1),
            Err(Refusal::Capacity { would: 101, .. })
        ));
        assert_eq!((l.held(1), l.held(2), l.total()), (50, 50, 100));
        l.release(1, 80); // more than held: only what it holds
        assert_eq!((l.held(1), l.total()), (0, 50));
        l.release(7, 10); // unknown client: nothing
        assert_eq!(l.total(), 50);
        l.reserve(3, 50).unwrap();
        l.release(2, 50);
        l.release(3, 50);
        assert_eq!(l.total(), 0);
    }
}
