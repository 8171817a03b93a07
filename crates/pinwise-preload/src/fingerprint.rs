//! Fingerprints of the bytes a copy moved, computed by the copy hook after the driver
//! accepted the copy (the copy is never delayed: for an upload the call has already
//! returned from the driver; a synchronous download's bytes are in place). What a
//! fingerprint is, and how the history compares them: `pinwise_core::fingerprint`.
//!
//! Work per copy is bounded in sampled mode: [`SAMPLE_LINES`] reads of at most 64 bytes (one
//! `process_vm_readv`, so that a pointer that is not readable host memory is skipped, never
//! a fault in the program) and one xxh3 of at most 512 bytes. Full hashes read 4 KiB at a
//! time the same way. A copy chosen for the full check (a fraction of copies,
//! chosen by host address, device address and length, so that every repeat of a copy is
//! chosen alike and two hashed copies can be compared; at most [`CHECK_MAX_BYTES`] unless
//! every copy is checked), and every copy in full mode, is hashed entirely, in the calling
//! thread.
//!
//! Not fingerprinted here (counted as skipped): pitched (2D/3D) copies. Asynchronous
//! downloads, whose bytes arrive later, when the stream gets there, are fingerprinted by
//! [`crate::async_fp`] once it has (and counted as skipped when they cannot be).

use std::sync::atomic::{AtomicU64, Ordering};

use pinwise_core::fingerprint::{
    full_hasher, hash_samples, line_len, sample_offsets, Fingerprint, FingerprintMode,
    SAMPLE_BYTES, SAMPLE_LINES,
};
use pinwise_core::{Direction, MemHistory};

use crate::decode::HostCopy;
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

/// Whether `c` is an asynchronous download to fingerprint later ([`crate::async_fp`]).
pub fn is_async_download(st: &State, c: &HostCopy) -> bool {
    st.config.fingerprint != FingerprintMode::Off
        && c.direction == Direction::DtoH
        && c.stream.is_some()
        && c.host != 0
        && c.device != 0
        && c.bytes != 0
        && c.span == c.bytes
}

/// The fingerprint of copy `c`, which the driver carried out (or, for an asynchronous
/// upload, accepted), per the configured mode; `None` when off or not fingerprintable (an
/// asynchronous download: see [`is_async_download`]).
pub fn of_copy(st: &State, c: &HostCopy) -> Option<Fingerprint> {
    let mode = st.config.fingerprint;
    if mode == FingerprintMode::Off || c.host == 0 || c.device == 0 || c.bytes == 0 {
        return None;
    }
    match c.direction {
        Direction::HtoD => {}
        Direction::DtoH if c.stream.is_none() => {}
        _ => return None,
    }
    if c.span != c.bytes {
        SKIPPED.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    of_host(st, c.host, c.device, c.bytes)
}

/// The fingerprint of the `bytes` host bytes at `host` of a copy to or from `device`, per
/// the configured mode; `None` (counted as skipped) when they cannot be read.
pub fn of_host(st: &State, host: usize, device: u64, bytes: usize) -> Option<Fingerprint> {
    let mode = st.config.fingerprint;
    let c = HostCopy {
        direction: Direction::DtoH,
        host,
        device,
        bytes,
        span: bytes,
        stream: None,
        per_thread: false,
    };
    let len = c.bytes as u64;
    let l = line_len(len) as usize;
    let mut samples = [0u8; SAMPLE_BYTES];
    let offsets = sample_offsets(len);
    let ranges: [(usize, usize); SAMPLE_LINES] =
        std::array::from_fn(|i| (c.host + offsets[i] as usize, l));
    if !read_own(&ranges, &mut samples[..SAMPLE_LINES * l]) {
        SKIPPED.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    let sampled = hash_samples(len, &samples[..SAMPLE_LINES * l]);
    let whole = match mode {
        FingerprintMode::Full => true,
        _ => checked(c.host as u64, c.device, len, st.config.fingerprint_check),
    };
    let full = if whole {
        let mut h = full_hasher(len);
        let mut chunk = [0u8; 4096];
        let mut at = 0usize;
        while at < c.bytes {
            let n = (c.bytes - at).min(chunk.len());
            if !read_own(&[(c.host + at, n)], &mut chunk[..n]) {
                SKIPPED.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            h.update(&chunk[..n]);
            at += n;
        }
        Some(h.digest())
    } else {
        None
    };
    Some(Fingerprint { sampled, full })
}

/// Reads `ranges` (address, length) of this process into `out`, back to back, with one
/// `process_vm_readv`: memory that is not readable (a device pointer the driver did not
/// name, a range unmapped meanwhile) gives `false` instead of a fault in the program.
fn read_own(ranges: &[(usize, usize)], out: &mut [u8]) -> bool {
    let total: usize = ranges.iter().map(|r| r.1).sum();
    if total != out.len() || ranges.len() > SAMPLE_LINES {
        return false;
    }
    let local = libc::iovec {
        iov_base: out.as_mut_ptr() as *mut libc::c_void,
        iov_len: out.len(),
    };
    let remote: [libc::iovec; SAMPLE_LINES] = std::array::from_fn(|i| {
        let (a, n) = ranges.get(i).copied().unwrap_or((0, 0));
        libc::iovec {
            iov_base: a as *mut libc::c_void,
            iov_len: n,
        }
    });
    // SAFETY: `local` is `out`, writable for its length; the remote ranges are only read,
    // by the kernel, which reports an unreadable one as an error or a short count.
    let n = unsafe {
        libc::process_vm_readv(
            libc::getpid(),
            &local,
            1,
            remote.as_ptr(),
            ranges.len() as libc::c_ulong,
            0,
        )
    };
    n == total as isize
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
    let (late, unknown) = crate::async_fp::counts();
    s.skipped = SKIPPED.load(Ordering::Relaxed) + unknown;
    h.set_source_stat("preload.fingerprint_async_downloads", late);
    h.set_source_stat("preload.fingerprint_async_downloads_unknown", unknown);
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
