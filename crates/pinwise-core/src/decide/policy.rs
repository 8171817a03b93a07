//! The pinning policy: pin an allocation when what it saves on its predicted transfers
//! exceeds what pinning it costs, and the budget allows; say why either way.
//!
//! For one allocation ([`Policy::decide`]):
//!
//! ```text
//! saving = sum over directions of  predicted transfers x (pageable time - pinned time)(mean size)
//! cost   = pin cost + unpin cost (size, method)
//! pin if saving > cost x payback_factor  and  size <= remaining budget
//! ```
//!
//! A whole profile under a budget is planned by [`crate::decide::plan::PinPlan`], which
//! asks this policy about each block it would add, at the price [`crate::decide::pricing`]
//! gives.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::cost::{CostModel, PinMethod};
use crate::event::Direction;
use crate::history::TransferCounters;
use crate::profile::ProfileEntry;

/// Predicted transfers of one allocation: per direction (index [`Direction::index`]), how
/// many and how many bytes in total.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PredictedTransfers {
    /// Transfers per direction.
    pub count: [f64; 4],
    /// Bytes per direction (total over those transfers).
    pub bytes: [f64; 4],
}

impl PredictedTransfers {
    /// No transfers.
    pub fn none() -> Self {
        Self::default()
    }

    /// Adds `count` transfers of `bytes_each` bytes in `direction`.
    pub fn with(mut self, direction: Direction, count: f64, bytes_each: u64) -> Self {
        self.count[direction.index()] += count;
        self.bytes[direction.index()] += count * bytes_each as f64;
        self
    }

    /// These transfers and `other`'s together.
    pub fn plus(mut self, other: &PredictedTransfers) -> Self {
        for i in 0..4 {
            self.count[i] += other.count[i];
            self.bytes[i] += other.bytes[i];
        }
        self
    }

    /// What a past allocation's counters predict (the same again).
    pub fn from_counters(c: &TransferCounters) -> Self {
        let mut p = Self::default();
        for d in Direction::ALL {
            let dc = c.direction(d);
            p.count[d.index()] = dc.transfers() as f64;
            p.bytes[d.index()] = dc.bytes() as f64;
        }
        p
    }

    /// What a profile entry predicts for one run.
    pub fn from_profile_entry(e: &ProfileEntry) -> Self {
        let mut p = Self::default();
        for d in Direction::ALL {
            p.count[d.index()] = e.predicted_transfers(d);
            p.bytes[d.index()] = e.predicted_bytes(d);
        }
        p
    }

    /// All predicted transfers.
    pub fn total(&self) -> f64 {
        self.count.iter().sum()
    }
}

/// What is asked: should this allocation be pinned?
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PinRequest {
    /// Its size in bytes.
    pub size: u64,
    /// Its predicted transfers.
    pub transfers: PredictedTransfers,
    /// Pinned bytes still available under the budget.
    pub remaining_budget: u64,
    /// How it would be pinned.
    pub method: PinMethod,
}

/// What pinning one allocation costs, as its caller prices it
/// ([`Policy::decide_priced`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PinPrice {
    /// The whole cost of pinning it (obtaining, giving back, holding), ns.
    pub cost_ns: f64,
    /// Copies on it are timed at the bandwidth of memory pinned this way.
    pub bandwidth_of: PinMethod,
}

/// Why the policy decided as it did.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Reason {
    /// The predicted saving exceeds the cost of pinning, and it fits the budget.
    PaysBack,
    /// No transfers are predicted: pinning would be pure cost.
    NoTransfersPredicted,
    /// At this size, pinned copies are not faster than pageable ones: no number of
    /// transfers pays back.
    NeverPaysBackAtThisSize,
    /// Pinning would pay back only after `break_even` transfers (with the same mix of
    /// directions and sizes); fewer are predicted.
    TooFewTransfers {
        /// Transfers needed to break even.
        break_even: f64,
        /// Transfers predicted.
        predicted: f64,
    },
    /// It would pay back, but the budget has `remaining` bytes left (at some moment of its
    /// lifetime, for plans) and it needs more.
    BudgetFull {
        /// Bytes left.
        remaining: u64,
    },
    /// The allocation is empty.
    EmptyAllocation,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::PaysBack => write!(
                f,
                "pays back: the predicted saving exceeds the pinning cost"
            ),
            Reason::NoTransfersPredicted => write!(f, "no transfers predicted"),
            Reason::NeverPaysBackAtThisSize => {
                write!(
                    f,
                    "never pays back at this size: pinned copies are no faster"
                )
            }
            Reason::TooFewTransfers {
                break_even,
                predicted,
            } => write!(
                f,
                "too few transfers: {predicted:.1} predicted, {break_even:.1} needed to pay back"
            ),
            Reason::BudgetFull { remaining } => {
                write!(f, "budget full: {remaining} bytes left")
            }
            Reason::EmptyAllocation => write!(f, "empty allocation"),
        }
    }
}

/// The answer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// Pin it.
    pub pin: bool,
    /// Why.
    pub reason: Reason,
    /// Predicted time pinning saves on its transfers, ns.
    pub saving_ns: f64,
    /// Cost of pinning and unpinning it, ns.
    pub cost_ns: f64,
}

impl Decision {
    /// Saving minus cost, ns.
    pub fn net_ns(&self) -> f64 {
        self.saving_ns - self.cost_ns
    }
}

/// Knobs of the policy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PolicyConfig {
    /// Pin only when the saving exceeds the cost times this (1.0: any net gain; larger
    /// values leave a margin for predictions that do not come true).
    pub payback_factor: f64,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            payback_factor: 1.0,
        }
    }
}

/// The policy: a cost model and its knobs.
#[derive(Debug, Clone)]
pub struct Policy {
    cost: CostModel,
    config: PolicyConfig,
}

impl Policy {
    /// A policy over `cost`, with default knobs.
    pub fn new(cost: CostModel) -> Self {
        Self::with_config(cost, PolicyConfig::default())
    }

    /// A policy with explicit knobs.
    pub fn with_config(cost: CostModel, config: PolicyConfig) -> Self {
        Policy { cost, config }
    }

    /// Its cost model.
    pub fn cost_model(&self) -> &CostModel {
        &self.cost
    }

    /// Its knobs.
    pub fn config(&self) -> &PolicyConfig {
        &self.config
    }

    /// Predicted saving of pinning, ns, for these transfers.
    pub fn saving_ns(&self, transfers: &PredictedTransfers) -> f64 {
        Direction::ALL
            .iter()
            .map(|&d| {
                let n = transfers.count[d.index()];
                if n <= 0.0 {
                    return 0.0;
                }
                let each = (transfers.bytes[d.index()] / n).round() as u64;
                n * self.cost.transfer_saving_ns(d, each)
            })
            .sum()
    }

    /// Cost of pinning and later unpinning `size` bytes by `method`, ns.
    pub fn pin_cost_ns(&self, size: u64, method: PinMethod) -> f64 {
        self.cost.pin_cost_ns(size, method) + self.cost.unpin_cost_ns(size, method)
    }

    /// Transfers of `size` bytes each in `direction` needed for pinning to pay back;
    /// `None` when no number does.
    pub fn break_even_transfers(
        &self,
        direction: Direction,
        size: u64,
        method: PinMethod,
    ) -> Option<f64> {
        let each = self.cost.transfer_saving_ns(direction, size);
        (each > 0.0).then(|| self.pin_cost_ns(size, method) * self.config.payback_factor / each)
    }

    /// Predicted saving of pinning by `method`, ns: as [`Policy::saving_ns`], with
    /// registered memory's own host-to-device bandwidth for [`PinMethod::RegisterTouched`].
    pub fn saving_ns_by(&self, transfers: &PredictedTransfers, method: PinMethod) -> f64 {
        Direction::ALL
            .iter()
            .map(|&d| {
                let n = transfers.count[d.index()];
                if n <= 0.0 {
                    return 0.0;
                }
                let each = (transfers.bytes[d.index()] / n).round() as u64;
                n * self.cost.transfer_saving_ns_by(d, each, method)
            })
            .sum()
    }

    /// Decides for one allocation, pinning priced by [`Policy::pin_cost_ns`] of the
    /// request's method and copies timed at `cuMemHostAlloc` memory's bandwidth.
    pub fn decide(&self, req: &PinRequest) -> Decision {
        self.decide_priced(
            req,
            &PinPrice {
                cost_ns: self.pin_cost_ns(req.size, req.method),
                bandwidth_of: PinMethod::MallocHost,
            },
        )
    }

    /// Decides for one allocation at a price the caller knows better than the request's
    /// method does (an allocator's pool hit, its way of obtaining fresh memory, the price
    /// of holding memory pinned): `price.cost_ns` is the whole cost, and copies are timed
    /// at the bandwidth of memory pinned by `price.bandwidth_of`.
    pub fn decide_priced(&self, req: &PinRequest, price: &PinPrice) -> Decision {
        let cost_ns = price.cost_ns;
        let decision = |pin, reason, saving_ns| Decision {
            pin,
            reason,
            saving_ns,
            cost_ns,
        };
        if req.size == 0 {
            return decision(false, Reason::EmptyAllocation, 0.0);
        }
        let predicted = req.transfers.total();
        if predicted <= 0.0 {
            return decision(false, Reason::NoTransfersPredicted, 0.0);
        }
        let saving = self.saving_ns_by(&req.transfers, price.bandwidth_of);
        if saving <= 0.0 {
            return decision(false, Reason::NeverPaysBackAtThisSize, saving);
        }
        let needed = cost_ns * self.config.payback_factor;
        if saving <= needed {
            let break_even = predicted * needed / saving;
            return decision(
                false,
                Reason::TooFewTransfers {
                    break_even,
                    predicted,
                },
                saving,
            );
        }
        if req.size > req.remaining_budget {
            return decision(
                false,
                Reason::BudgetFull {
                    remaining: req.remaining_budget,
                },
                saving,
            );
        }
        decision(true, Reason::PaysBack, saving)
    }
}
