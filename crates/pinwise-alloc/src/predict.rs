//! The adaptive mode's predictor: per call site, a two-level pattern history table.
//!
//! As a branch predictor guesses "taken" from the recent outcomes of a branch, this guesses
//! "hot" (pinning would pay) for the next allocation at a call site from the outcomes of
//! that site's recent allocations. Level one is the site's *history*: its last `bits`
//! outcomes (newest in bit 0). Level two is the *pattern table*: for each of the
//! `2^bits` histories, a 2-bit saturating counter (0-1 cold, 2-3 hot) and the transfer count
//! last seen after that history. So a site whose buffers alternate hot, cold, hot, ... is
//! predicted exactly once both patterns were seen, where "hot last time" would be wrong
//! every time.
//!
//! A pattern not seen yet at a site falls back to the site's overall 2-bit counter
//! (bimodal), so a site that is always hot is predicted hot after one outcome.

/// Default history length in outcomes.
pub const DEFAULT_HISTORY_BITS: u8 = 4;

/// Longest history supported.
pub const MAX_HISTORY_BITS: u8 = 8;

#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    counter: u8,
    trained: bool,
    transfers: u32,
}

/// Where a prediction came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PredictionSource {
    /// Nothing recorded at this site yet.
    NoHistory,
    /// The pattern table entry for the site's current history.
    Pattern,
    /// The site's overall counter (this history pattern not seen yet).
    Bimodal,
}

/// A guess for the next allocation at a site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prediction {
    /// Pinning is predicted to pay.
    pub hot: bool,
    /// Transfers expected over the allocation's life (what was seen the last time this
    /// pattern, or this site, produced the predicted outcome).
    pub expected_transfers: u32,
    /// Where the guess came from.
    pub source: PredictionSource,
}

/// One call site's predictor state.
#[derive(Debug, Clone)]
pub struct SitePredictor {
    bits: u8,
    history: u16,
    outcomes: u32,
    bimodal: u8,
    last_hot_transfers: u32,
    last_cold_transfers: u32,
    table: Box<[Entry]>,
}

impl SitePredictor {
    /// A predictor remembering the last `bits` outcomes (clamped to 1..=8).
    pub fn new(bits: u8) -> Self {
        let bits = bits.clamp(1, MAX_HISTORY_BITS);
        SitePredictor {
            bits,
            history: 0,
            outcomes: 0,
            bimodal: 1,
            last_hot_transfers: 0,
            last_cold_transfers: 0,
            table: vec![Entry::default(); 1 << bits].into_boxed_slice(),
        }
    }

    fn mask(&self) -> u16 {
        ((1u32 << self.bits) - 1) as u16
    }

    /// The guess for the next allocation at this site.
    pub fn predict(&self) -> Prediction {
        if self.outcomes == 0 {
            return Prediction {
                hot: false,
                expected_transfers: 0,
                source: PredictionSource::NoHistory,
            };
        }
        let e = self.table[self.history as usize];
        // A history is only meaningful once `bits` outcomes filled it.
        if e.trained && self.outcomes >= self.bits as u32 {
            return Prediction {
                hot: e.counter >= 2,
                expected_transfers: e.transfers,
                source: PredictionSource::Pattern,
            };
        }
        let hot = self.bimodal >= 2;
        Prediction {
            hot,
            expected_transfers: if hot {
                self.last_hot_transfers
            } else {
                self.last_cold_transfers
            },
            source: PredictionSource::Bimodal,
        }
    }

    /// Records the outcome of an allocation that ended (hot: pinning it would have paid)
    /// and how many transfers it saw.
    pub fn record(&mut self, hot: bool, transfers: u32) {
        let filled = self.outcomes >= self.bits as u32;
        if filled {
            let e = &mut self.table[self.history as usize];
            e.counter = step(e.counter, hot);
            if !e.trained {
                // First time this pattern is seen: start from its outcome, weakly.
                e.counter = if hot { 2 } else { 1 };
                e.trained = true;
            }
            e.transfers = transfers;
        }
        self.bimodal = step(self.bimodal, hot);
        if hot {
            self.last_hot_transfers = transfers;
        } else {
            self.last_cold_transfers = transfers;
        }
        self.history = ((self.history << 1) | hot as u16) & self.mask();
        self.outcomes = self.outcomes.saturating_add(1);
    }

    /// Outcomes recorded so far.
    pub fn outcomes(&self) -> u32 {
        self.outcomes
    }
}

fn step(counter: u8, up: bool) -> u8 {
    if up {
        (counter + 1).min(3)
    } else {
        counter.saturating_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Accuracy of `p` over `pattern` repeated `rounds` times, counted after `warmup` outcomes.
    fn accuracy(p: &mut SitePredictor, pattern: &[bool], rounds: usize, warmup: usize) -> f64 {
        let (mut right, mut total) = (0, 0);
        for (i, &hot) in pattern
            .iter()
            .cycle()
            .take(pattern.len() * rounds)
            .enumerate()
        {
            let guess = p.predict();
            if i >= warmup {
                total += 1;
                right += (guess.hot == hot) as u32;
            }
            p.record(hot, if hot { 16 } else { 0 });
        }
        right as f64 / total as f64
    }

    #[test]
    fn alternating_site_is_predicted_exactly() {
        let mut p = SitePredictor::new(DEFAULT_HISTORY_BITS);
        let acc = accuracy(&mut p, &[true, false], 50, 8);
        assert_eq!(
            acc, 1.0,
            "a two-level predictor learns hot/cold alternation"
        );
        // "Hot last time" gets every single one of these wrong.
        let mut last = false;
        let mut wrong = 0;
        for hot in [true, false].iter().cycle().take(100) {
            wrong += (last != *hot) as u32;
            last = *hot;
        }
        assert_eq!(wrong, 100);
    }

    #[test]
    fn longer_patterns_are_learned() {
        let mut p = SitePredictor::new(DEFAULT_HISTORY_BITS);
        let acc = accuracy(&mut p, &[true, true, false], 40, 12);
        assert_eq!(acc, 1.0);
    }

    #[test]
    fn always_hot_site_is_hot_after_one_outcome() {
        let mut p = SitePredictor::new(DEFAULT_HISTORY_BITS);
        assert_eq!(p.predict().source, PredictionSource::NoHistory);
        assert!(!p.predict().hot, "nothing known: pageable");
        p.record(true, 32);
        let g = p.predict();
        assert!(g.hot);
        assert_eq!(g.expected_transfers, 32);
        assert_eq!(g.source, PredictionSource::Bimodal);
        for _ in 0..10 {
            p.record(true, 32);
        }
        assert_eq!(p.predict().source, PredictionSource::Pattern);
        assert!(p.predict().hot);
    }

    #[test]
    fn a_change_of_behaviour_is_followed() {
        let mut p = SitePredictor::new(2);
        for _ in 0..10 {
            p.record(true, 8);
        }
        for _ in 0..3 {
            p.record(false, 0);
        }
        assert!(!p.predict().hot, "a site that went cold is predicted cold");
    }
}
