//! LEB128 variable-length integers and zigzag signed encoding.
//!
//! The history stores events as a few bytes each; most numbers in them are small (time
//! deltas of microseconds, call-site indices, "same size as the allocation"), so they are
//! written as unsigned LEB128: 7 bits per byte, high bit set on every byte but the last.
//! Signed deltas go through zigzag first (0, -1, 1, -2, ... become 0, 1, 2, 3, ...).
//!
//! Hand-written rather than taken from a crate: it is twenty lines on the hot path of
//! ingestion, the history needs it to read across the chunks of its arena (a byte at a
//! time through [`ByteSource`]), and the crates of the field (`leb128`, `integer-encoding`)
//! work on `io::Read`/slices only.

/// The most bytes a `u64` takes as LEB128.
pub const MAX_LEN: usize = 10;

/// Appends `value` as LEB128 to `out` at `*len`, advancing `*len`.
///
/// `out` must have room for [`MAX_LEN`] more bytes.
#[inline]
pub fn put(out: &mut [u8], len: &mut usize, mut value: u64) {
    while value >= 0x80 {
        out[*len] = (value as u8) | 0x80;
        *len += 1;
        value >>= 7;
    }
    out[*len] = value as u8;
    *len += 1;
}

/// Zigzag: maps signed to unsigned so that small magnitudes stay small.
#[inline]
pub const fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Inverse of [`zigzag`].
#[inline]
pub const fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Where a decoder reads bytes from: a slice of a file, or a chain of arena chunks.
pub trait ByteSource {
    /// The next byte, or `None` at the end.
    fn next_byte(&mut self) -> Option<u8>;
    /// How many bytes have been read so far (for error messages).
    fn position(&self) -> usize;
}

/// Why a varint could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VarintError {
    /// The input ended inside the number.
    Truncated,
    /// More than 64 bits.
    Overflow,
}

/// Reads one LEB128 `u64` from `src`.
#[inline]
pub fn get(src: &mut impl ByteSource) -> Result<u64, VarintError> {
    let mut value: u64 = 0;
    let mut shift = 0u32;
    loop {
        let byte = src.next_byte().ok_or(VarintError::Truncated)?;
        let bits = u64::from(byte & 0x7f);
        if shift == 63 && bits > 1 {
            return Err(VarintError::Overflow);
        }
        value |= bits << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
        shift += 7;
        if shift > 63 {
            return Err(VarintError::Overflow);
        }
    }
}

/// A [`ByteSource`] over a slice.
#[derive(Debug, Clone)]
pub struct SliceSource<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> SliceSource<'a> {
    /// Reads `bytes` from the start.
    pub fn new(bytes: &'a [u8]) -> Self {
        SliceSource { bytes, pos: 0 }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// Takes the next `n` bytes, if there are that many.
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let out = self.bytes.get(self.pos..end)?;
        self.pos = end;
        Some(out)
    }
}

impl ByteSource for SliceSource<'_> {
    #[inline]
    fn next_byte(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    fn position(&self) -> usize {
        self.pos
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn encode(v: u64) -> Vec<u8> {
        let mut buf = [0u8; MAX_LEN];
        let mut len = 0;
        put(&mut buf, &mut len, v);
        buf[..len].to_vec()
    }

    #[test]
    fn small_numbers_take_one_byte() {
        assert_eq!(encode(0), vec![0]);
        assert_eq!(encode(127), vec![127]);
        assert_eq!(encode(128), vec![0x80, 1]);
        assert_eq!(encode(u64::MAX).len(), MAX_LEN);
    }

    #[test]
    fn zigzag_keeps_small_magnitudes_small() {
        assert_eq!(zigzag(0), 0);
        assert_eq!(zigzag(-1), 1);
        assert_eq!(zigzag(1), 2);
        assert_eq!(unzigzag(zigzag(i64::MIN)), i64::MIN);
        assert_eq!(unzigzag(zigzag(i64::MAX)), i64::MAX);
    }

    #[test]
    fn truncated_and_overlong_input_are_errors() {
        assert_eq!(
            get(&mut SliceSource::new(&[0x80])),
            Err(VarintError::Truncated)
        );
        assert_eq!(get(&mut SliceSource::new(&[])), Err(VarintError::Truncated));
        let overlong = [0xffu8; 11];
        assert_eq!(
            get(&mut SliceSource::new(&overlong)),
            Err(VarintError::Overflow)
        );
        // 10th byte may only carry the top bit of a u64.
        let mut too_big = [0xffu8; 10];
        too_big[9] = 0x02;
        assert_eq!(
            get(&mut SliceSource::new(&too_big)),
            Err(VarintError::Overflow)
        );
    }

    proptest! {
        #[test]
        fn round_trip(v in any::<u64>()) {
            let bytes = encode(v);
            let mut src = SliceSource::new(&bytes);
            prop_assert_eq!(get(&mut src), Ok(v));
            prop_assert_eq!(src.remaining(), 0);
        }

        #[test]
        fn zigzag_round_trip(v in any::<i64>()) {
            prop_assert_eq!(unzigzag(zigzag(v)), v);
        }
    }
}
