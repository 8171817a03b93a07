//! Fingerprints of the bytes a copy moved, computed by the copy hook after the driver
//! accepted the copy (the copy is never delayed: for an upload the call has already
//! returned from the driver; a synchronous download's bytes are in place). What a
//! fingerprint is, and how the history compares them: `pinwise_core::fingerprint`.
//!
//! Work per copy is bounded in sampled mode: [`SAMPLE_LINES`] reads of at most 64 bytes and
//! one xxh3 of at most 512 bytes. A copy chosen for the full check (a fraction of copies,
//! chosen by host address, device address and length, so that every repeat of a copy is
//! chosen alike and two hashed copies can be compared; at most [`CHECK_MAX_BYTES`] unless
//! every copy is checked), and every copy in full mode, is hashed entirely, in the calling
//! thread.
//!
//! Not fingerprinted (counted as skipped): pitched (2D/3D) copies, and asynchronous
//! downloads (their bytes arrive later, when the stream gets there).

use std::sync::atomic::{AtomicU64, Ordering};

use pinwise_core::fingerprint::{
    full, hash_samples, line_len, sample_offsets, Fingerprint, FingerprintMode, SAMPLE_BYTES,
    SAMPLE_LINES,
};
use pinwise_core::{Direction, MemHistory};

use crate::hooks::Copy;
use crate::state::State;

/// Copies that could have been fingerprinted but were not.
static SKIPPED: AtomicU64 = AtomicU64::new(0);

/// Copies larger than this are not hashed in full for the check unless every copy is
/// checked (`check` 1): a 64 MiB hash takes milliseconds.
pub const CHECK_MAX_BYTES: u64 = 4 << 20;

/// Whether a copy of `len` bytes from `host` to `device` is one of the `check` fraction
/// hashed in full (copies above [`CHECK_MAX_BYTES`] only when `check` is 1).
pub fn checked(host: u64, device: u64, len: u64, check: f64) -> bool {
    if check >= 1.0 {
        return true;
    }
    if check <= 0.0 || len > CHECK_MAX_BYTES {
        return false;
    }
    let mut key = [0u8; 24];
    key[..8].copy_from_slice(&host.to_le_bytes());
    key[8..16].copy_from_slice(&device.to_le_bytes());
    key[16..].copy_from_slice(&len.to_le_bytes());
    let h = xxhash_rust::xxh3::xxh3_64(&key);
    (h % 1_000_000) < (check * 1e6) as u64
}

/// The fingerprint of copy `c`, which the driver carried out (or, for an asynchronous
/// upload, accepted), per the configured mode; `None` when off or not fingerprintable.
pub fn of_copy(st: &State, c: &Copy) -> Option<Fingerprint> {
    let mode = st.config.fingerprint;
    if mode == FingerprintMode::Off || c.host == 0 || c.device == 0 || c.bytes == 0 {
        return None;
    }
    match c.direction {
        Direction::HtoD => {}
        Direction::DtoH if c.stream.is_none() => {}
        Direction::DtoH => {
            SKIPPED.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        _ => return None,
    }
    if c.span != c.bytes {
        SKIPPED.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    let len = c.bytes as u64;
    let l = line_len(len) as usize;
    let mut samples = [0u8; SAMPLE_BYTES];
    for (i, off) in sample_offsets(len).iter().enumerate() {
        // SAFETY: `off + l <= len`, so the read stays in [host, host + bytes): the program's
        // memory that the driver just read (upload) or wrote (synchronous download) for this
        // copy and reported success, so it is mapped and readable. The destination is this
        // stack array (`i * l + l <= SAMPLE_BYTES`). A concurrent write by another thread can
        // only change the bytes read, never the addresses.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (c.host + *off as usize) as *const u8,
                samples.as_mut_ptr().add(i * l),
                l,
            )
        };
    }
    let sampled = hash_samples(len, &samples[..SAMPLE_LINES * l]);
    let whole = match mode {
        FingerprintMode::Full => true,
        _ => checked(c.host as u64, c.device, len, st.config.fingerprint_check),
    };
    let full = whole.then(|| {
        // SAFETY: as above: [host, host + bytes) is the copy's host memory, mapped and
        // readable; the slice lives only for this hash.
        let buf = unsafe { std::slice::from_raw_parts(c.host as *const u8, c.bytes) };
        full(buf)
    });
    Some(Fingerprint { sampled, full })
}

/// Stores the fingerprinting settings and the copies skipped in the history's statistics.
pub fn note_stats(st: &State, h: &mut MemHistory) {
    let s = h.redundancy_mut().stats_mut();
    s.mode = st.config.fingerprint.code();
    s.check_ppm = match st.config.fingerprint {
        FingerprintMode::Full => 1_000_000,
        FingerprintMode::Sampled => (st.config.fingerprint_check * 1e6) as u64,
        FingerprintMode::Off => 0,
    };
    s.skipped = SKIPPED.load(Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_sample_is_a_fraction_of_keys_and_stable() {
        let n = 20_000u64;
        let chosen = (0..n)
            .filter(|&i| {
                checked(
                    0x7f00_0000 + i * 4096,
                    0xd000_0000 + i * 65536,
                    4096,
                    0.0625,
                )
            })
            .count() as f64;
        let share = chosen / n as f64;
        assert!((0.05..0.075).contains(&share), "{share}");
        for i in 0..100 {
            let h = 0x7f00_0000 + i * 4096;
            assert_eq!(checked(h, 7, 8, 0.5), checked(h, 7, 8, 0.5));
        }
        assert!(checked(1, 2, 3, 1.0));
        assert!(!checked(1, 2, 3, 0.0));
        assert!((0..1000).all(|i| !checked(i * 4096, 7, CHECK_MAX_BYTES + 1, 0.99)));
        assert!(checked(1, 2, CHECK_MAX_BYTES + 1, 1.0));
    }
}
