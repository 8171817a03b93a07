//! A repeatable pseudo-random generator for tests (xorshift64*): no dependencies, the same
//! sequence from the same seed on every machine.

/// A xorshift64* generator. The seed must not be 0 (`Rng::new` makes it odd).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed` (made odd, so never 0).
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// An index below `n` (0 when `n` is 0).
    pub fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sequence_is_repeatable_and_bounded() {
        let (mut a, mut b) = (Rng::new(42), Rng::new(42));
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
            let n = a.below(7);
            assert_eq!(n, b.below(7));
            assert!(n < 7);
            assert_eq!((a.index(0), b.index(0)), (0, 0));
        }
        assert_ne!(Rng::new(1).next_u64(), Rng::new(3).next_u64());
    }
}
