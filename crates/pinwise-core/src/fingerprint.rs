//! Content fingerprints of copies, and the redundancy tracker that compares them.
//!
//! **Fingerprints.** A copy's *sampled* fingerprint is xxh3 (seeded with the copy's length)
//! over [`SAMPLE_LINES`] lines of [`LINE`] bytes spread evenly over the buffer, the first and
//! the last line always among them; the positions depend only on the length
//! ([`sample_offsets`]), so the in-process hooks and the eBPF tracer (which reads the same
//! lines with `bpf_probe_read_user`) compute the same value ([`hash_samples`]). Buffers of
//! at most [`SAMPLE_BYTES`] bytes are covered entirely by the sampled lines. A *full*
//! fingerprint is xxh3 over every byte (and the length).
//!
//! **The blind spot.** A change between the sampled lines of a buffer larger than
//! [`SAMPLE_BYTES`] leaves the sampled fingerprint unchanged: a copy whose bytes differ is
//! then called redundant (a false positive of the redundancy finding). A copy whose bytes
//! are equal always has an equal sampled fingerprint (no false negative). Full fingerprints
//! remove the blind spot; copies that carry both measure how often it matters
//! ([`FingerprintStats`]).
//!
//! **Redundancy** ([`RedundancyTracker`]): a host-to-device copy is redundant when its
//! fingerprint equals that device range's last known content (the device already holds
//! these bytes: [`Verdict::DeviceHolds`]) or the previous upload of the same host bytes
//! to the same device range ([`Verdict::SameAsUpload`]: the range was overwritten in
//! between, the same bytes were sent again). A device-to-host copy is redundant when it
//! brings the same bytes as the previous download of that device range into the same host
//! bytes ([`Verdict::FetchedUnchanged`]). Device ranges are exact: the same content at
//! another device offset is not redundant for the destination range. Only copies are seen:
//! a kernel that writes a device range between two identical uploads is invisible, so the
//! findings say "if no kernel writes it".

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::event::Direction;
use crate::history::tables::FxMap;

/// Bytes in one sampled line (a cache line).
pub const LINE: u64 = 64;
/// Lines a sampled fingerprint reads.
pub const SAMPLE_LINES: usize = 8;
/// Most bytes a sampled fingerprint reads; buffers this small are covered entirely.
pub const SAMPLE_BYTES: usize = SAMPLE_LINES * LINE as usize;

const SAMPLED_DOMAIN: u64 = 0x5a4d_504c_4544_0001;
const FULL_DOMAIN: u64 = 0x4655_4c4c_0000_0002;

/// The history's source statistic counting copies that were to be hashed in full but were
/// larger than the source's cap (`pinwise trace --fingerprint full` hashes in BPF, in the
/// copying thread, up to a cap): their fingerprint is the sampled one.
pub const FULL_OVER_CAP_STAT: &str = "tracer.fingerprint_full_over_cap";
/// The history's source statistic giving that cap, in bytes.
pub const FULL_CAP_BYTES_STAT: &str = "tracer.fingerprint_full_cap_bytes";

/// How copies are fingerprinted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum FingerprintMode {
    /// Not at all.
    #[default]
    Off,
    /// Sampled lines (bounded work per copy), with a full fingerprint on a sample of copies.
    Sampled,
    /// Every byte of every copy.
    Full,
}

impl FingerprintMode {
    /// `off`, `sampled` or `full`.
    pub const fn as_str(self) -> &'static str {
        match self {
            FingerprintMode::Off => "off",
            FingerprintMode::Sampled => "sampled",
            FingerprintMode::Full => "full",
        }
    }

    /// Parses [`FingerprintMode::as_str`]'s spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s.trim() {
            "off" | "0" | "no" => FingerprintMode::Off,
            "sampled" | "on" | "1" | "yes" => FingerprintMode::Sampled,
            "full" => FingerprintMode::Full,
            _ => return None,
        })
    }

    /// The number stored in a history (0 off, 1 sampled, 2 full).
    pub const fn code(self) -> u64 {
        match self {
            FingerprintMode::Off => 0,
            FingerprintMode::Sampled => 1,
            FingerprintMode::Full => 2,
        }
    }

    /// Reads [`FingerprintMode::code`].
    pub const fn from_code(c: u64) -> Self {
        match c {
            1 => FingerprintMode::Sampled,
            2 => FingerprintMode::Full,
            _ => FingerprintMode::Off,
        }
    }
}

/// The bytes read per sampled line of a `len`-byte buffer (`min(len, LINE)`).
pub const fn line_len(len: u64) -> u64 {
    if len < LINE {
        len
    } else {
        LINE
    }
}

/// Where the sampled lines of a `len`-byte buffer start: line `i` at
/// `i * (len - LINE) / (SAMPLE_LINES - 1)`, so the first line starts at 0 and the last ends
/// at `len`. Buffers shorter than a line: every line is the whole buffer.
pub const fn sample_offsets(len: u64) -> [u64; SAMPLE_LINES] {
    let mut out = [0u64; SAMPLE_LINES];
    if len <= LINE {
        return out;
    }
    let span = len - LINE;
    let mut i = 0;
    while i < SAMPLE_LINES {
        // i * span cannot overflow: span < 2^64 / 8 for any real buffer; saturate anyway.
        out[i] = (span / (SAMPLE_LINES as u64 - 1)) * i as u64
            + (span % (SAMPLE_LINES as u64 - 1)) * i as u64 / (SAMPLE_LINES as u64 - 1);
        i += 1;
    }
    out
}

/// The sampled fingerprint of a `len`-byte buffer from its sampled lines, concatenated in
/// order (`SAMPLE_LINES * line_len(len)` bytes, as [`gather_samples`] or the tracer's BPF
/// program lays them out).
pub fn hash_samples(len: u64, samples: &[u8]) -> u64 {
    xxh3_64_with_seed(samples, len ^ SAMPLED_DOMAIN)
}

/// Copies the sampled lines of `buf` into `out`, returning how many bytes were written.
pub fn gather_samples(buf: &[u8], out: &mut [u8; SAMPLE_BYTES]) -> usize {
    let len = buf.len() as u64;
    let l = line_len(len) as usize;
    let mut at = 0;
    for off in sample_offsets(len) {
        let off = off as usize;
        out[at..at + l].copy_from_slice(&buf[off..off + l]);
        at += l;
    }
    at
}

/// The sampled fingerprint of `buf`.
pub fn sampled(buf: &[u8]) -> u64 {
    let mut samples = [0u8; SAMPLE_BYTES];
    let n = gather_samples(buf, &mut samples);
    hash_samples(buf.len() as u64, &samples[..n])
}

/// The full fingerprint of `buf` (every byte, and the length).
pub fn full(buf: &[u8]) -> u64 {
    xxh3_64_with_seed(buf, buf.len() as u64 ^ FULL_DOMAIN)
}

/// A hasher that gives [`full`] of a `len`-byte buffer fed to it in pieces
/// (`update`, then `digest`): for readers that cannot see the buffer whole.
pub fn full_hasher(len: u64) -> xxhash_rust::xxh3::Xxh3 {
    xxhash_rust::xxh3::Xxh3::with_seed(len ^ FULL_DOMAIN)
}

/// What a source computed over one copy's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fingerprint {
    /// The sampled fingerprint (always present).
    pub sampled: u64,
    /// The full fingerprint, when this copy was hashed entirely.
    pub full: Option<u64>,
}

impl Fingerprint {
    /// Fingerprints `buf`: sampled, and full too when `full` is set.
    pub fn of(buf: &[u8], with_full: bool) -> Self {
        Fingerprint {
            sampled: sampled(buf),
            full: with_full.then(|| full(buf)),
        }
    }
}

/// How well sampled fingerprints did, and how much was fingerprinted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FingerprintStats {
    /// The mode the source ran in ([`FingerprintMode::code`]).
    pub mode: u64,
    /// Fraction of copies also hashed in full in sampled mode, in parts per million.
    pub check_ppm: u64,
    /// Host-to-device copies fingerprinted.
    pub uploads: u64,
    /// Device-to-host copies fingerprinted.
    pub downloads: u64,
    /// Copies a source could not fingerprint (pitched copies, asynchronous downloads whose
    /// completion was not seen or that a later copy touched first, reads that failed).
    pub skipped: u64,
    /// Copies fingerprinted in full.
    pub full_hashes: u64,
    /// Copies whose verdict was decided on full fingerprints (the copy and what it was
    /// compared with both hashed in full): the sampled verdict was checked against it.
    pub checked: u64,
    /// Of those, the sampled fingerprints alone would have called the copy redundant
    /// although its bytes differed (a false positive).
    pub sampled_false_same: u64,
    /// Of those, the sampled fingerprints alone would have missed a redundant copy (a
    /// false negative; equal bytes always have equal sampled fingerprints, so this stays
    /// 0 and is counted to show it).
    pub sampled_false_differ: u64,
    /// Copies not compared because the tracker's tables were full.
    pub untracked_full_tables: u64,
}

impl FingerprintStats {
    /// Measured rate of false "redundant" verdicts of the sampled fingerprint among checked
    /// copies (`None` when none was checked).
    pub fn false_positive_rate(&self) -> Option<f64> {
        (self.checked > 0).then(|| self.sampled_false_same as f64 / self.checked as f64)
    }

    /// Measured rate of missed redundant copies among checked copies.
    pub fn false_negative_rate(&self) -> Option<f64> {
        (self.checked > 0).then(|| self.sampled_false_differ as f64 / self.checked as f64)
    }

    /// The mode the source ran in.
    pub fn mode(&self) -> FingerprintMode {
        FingerprintMode::from_code(self.mode)
    }
}

/// The redundancy found in one allocation's copies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redundancy {
    /// Fingerprinted uploads from this allocation.
    pub uploads: u32,
    /// Fingerprinted downloads into it.
    pub downloads: u32,
    /// Uploads found redundant.
    pub redundant_uploads: u32,
    /// Their bytes.
    pub redundant_upload_bytes: u64,
    /// Of the redundant uploads, those whose device range already held the bytes.
    pub device_held: u32,
    /// Downloads that fetched the same bytes as the previous download of that range.
    pub redundant_downloads: u32,
    /// Their bytes.
    pub redundant_download_bytes: u64,
    /// The first redundant upload: (its number, the number of the upload it repeats; 0 when
    /// the device range's content came from another buffer or a download).
    pub first_upload: Option<(u32, u32)>,
    /// The first redundant download: (its number, the number of the download it repeats).
    pub first_download: Option<(u32, u32)>,
}

impl Redundancy {
    /// Whether any copy was found redundant.
    pub fn any(&self) -> bool {
        self.redundant_uploads > 0 || self.redundant_downloads > 0
    }
}

/// One fingerprinted copy, as the history attributes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyObservation {
    /// The process.
    pub pid: u32,
    /// The allocation record the host side belongs to.
    pub record: u32,
    /// Offset of the host side in that allocation.
    pub host_offset: u64,
    /// Device address of the copy.
    pub device: u64,
    /// Bytes copied.
    pub bytes: u64,
    /// `HtoD` or `DtoH` (others are not compared).
    pub direction: Direction,
    /// The copy's fingerprint.
    pub fingerprint: Fingerprint,
}

/// What the tracker concluded about one copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Bytes not seen there before (or nothing to compare with).
    Fresh,
    /// An upload whose device range already held these bytes (`upload`: the number of this
    /// allocation's upload that put them there, 0 when another buffer or a download did).
    DeviceHolds {
        /// The upload repeated.
        upload: u32,
    },
    /// An upload of the same bytes as this host range's previous upload to the same device
    /// range (which was overwritten in between).
    SameAsUpload {
        /// The upload repeated.
        upload: u32,
    },
    /// A download that brought the same bytes as the previous download of that device range
    /// into the same host bytes.
    FetchedUnchanged {
        /// The download repeated.
        download: u32,
    },
}

impl Verdict {
    /// Whether the copy was redundant.
    pub fn is_redundant(self) -> bool {
        !matches!(self, Verdict::Fresh)
    }
}

#[derive(Debug, Clone, Copy)]
struct DeviceContent {
    len: u64,
    fingerprint: Fingerprint,
    /// The record and upload number that wrote it (`u32::MAX`: a download revealed it).
    record: u32,
    upload: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct HostKey {
    record: u32,
    host_offset: u64,
    device: u64,
    bytes: u64,
    download: bool,
}

#[derive(Debug, Clone, Copy)]
struct PrevCopy {
    fingerprint: Fingerprint,
    number: u32,
}

/// Entries each of the tracker's tables may hold (device ranges; host ranges).
pub const TRACKER_CAP: usize = 1 << 16;

/// Compares each copy's fingerprint with what was known before it (see the module
/// documentation). Memory is bounded by [`TRACKER_CAP`] entries per table (or the cap given
/// to [`RedundancyTracker::with_cap`]).
#[derive(Debug, Clone)]
pub struct RedundancyTracker {
    /// (pid, device start) -> content; ranges of one pid never overlap.
    device: BTreeMap<(u32, u64), DeviceContent>,
    host: FxMap<HostKey, PrevCopy>,
    per_record: FxMap<u32, (Redundancy, u64)>,
    stats: FingerprintStats,
    generation: u64,
    cap: usize,
}

impl Default for RedundancyTracker {
    fn default() -> Self {
        Self::with_cap(TRACKER_CAP)
    }
}

impl RedundancyTracker {
    /// An empty tracker.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty tracker whose device-range and host-range tables hold at most `cap` entries
    /// each (copies past it are counted in [`FingerprintStats::untracked_full_tables`]).
    pub fn with_cap(cap: usize) -> Self {
        RedundancyTracker {
            device: BTreeMap::new(),
            host: FxMap::default(),
            per_record: FxMap::default(),
            stats: FingerprintStats::default(),
            generation: 0,
            cap,
        }
    }

    /// Statistics so far.
    pub fn stats(&self) -> &FingerprintStats {
        &self.stats
    }

    /// Mutable statistics (sources set the mode and count skipped copies; readers restore).
    pub fn stats_mut(&mut self) -> &mut FingerprintStats {
        &mut self.stats
    }

    /// The redundancy found in record `record`'s copies, if any copy of it was fingerprinted.
    pub fn record(&self, record: u32) -> Option<&Redundancy> {
        self.per_record.get(&record).map(|(r, _)| r)
    }

    /// Every record with fingerprinted copies, with its summary, in record order.
    pub fn records(&self) -> Vec<(u32, Redundancy)> {
        let mut v: Vec<(u32, Redundancy)> =
            self.per_record.iter().map(|(&k, (r, _))| (k, *r)).collect();
        v.sort_unstable_by_key(|e| e.0);
        v
    }

    /// Records whose summary changed after generation `since`, with the current generation
    /// (for appendable dumps: pass the returned generation next time).
    pub fn changed_since(&self, since: u64) -> (Vec<(u32, Redundancy)>, u64) {
        let mut v: Vec<(u32, Redundancy)> = self
            .per_record
            .iter()
            .filter(|(_, (_, g))| *g > since)
            .map(|(&k, (r, _))| (k, *r))
            .collect();
        v.sort_unstable_by_key(|e| e.0);
        (v, self.generation)
    }

    /// Restores a record's summary (readers of dumps).
    pub fn restore(&mut self, record: u32, r: Redundancy) {
        self.generation += 1;
        self.per_record.insert(record, (r, self.generation));
    }

    /// Forgets what is known of `[device, device + len)` in process `pid` (something the
    /// tracker cannot compare wrote there: a device-to-device copy).
    pub fn invalidate_device(&mut self, pid: u32, device: u64, len: u64) {
        let end = device.saturating_add(len.max(1));
        while let Some(&k) = self
            .device
            .range((pid, device)..(pid, end))
            .next()
            .map(|e| e.0)
        {
            self.device.remove(&k);
        }
        if let Some((&k, c)) = self.device.range((pid, 0)..(pid, device)).next_back() {
            if k.1.saturating_add(c.len) > device {
                self.device.remove(&k);
            }
        }
    }

    /// Whether `a` and `b` are the same bytes: on full fingerprints when `use_full` and both
    /// have one (then `*checked` is set), else on sampled ones.
    fn same(a: &Fingerprint, b: &Fingerprint, use_full: bool, checked: &mut bool) -> bool {
        match (a.full, b.full) {
            (Some(x), Some(y)) if use_full => {
                *checked = true;
                x == y
            }
            _ => a.sampled == b.sampled,
        }
    }

    /// The verdict on `obs` from what is known, deciding on full fingerprints where both
    /// copies have one when `use_full` (returns whether any comparison did).
    fn verdict(&self, obs: &CopyObservation, key: &HostKey, use_full: bool) -> (Verdict, bool) {
        let fp = &obs.fingerprint;
        let mut checked = false;
        if !key.download {
            if let Some(c) = self.device.get(&(obs.pid, obs.device)) {
                if c.len == obs.bytes && Self::same(&c.fingerprint, fp, use_full, &mut checked) {
                    let upload = if c.record == obs.record { c.upload } else { 0 };
                    return (Verdict::DeviceHolds { upload }, checked);
                }
            }
        }
        if let Some(prev) = self.host.get(key) {
            if Self::same(&prev.fingerprint, fp, use_full, &mut checked) {
                let v = if key.download {
                    Verdict::FetchedUnchanged {
                        download: prev.number,
                    }
                } else {
                    Verdict::SameAsUpload {
                        upload: prev.number,
                    }
                };
                return (v, checked);
            }
        }
        (Verdict::Fresh, checked)
    }

    /// Compares one copy with what is known, remembers it, and returns the verdict.
    pub fn observe(&mut self, obs: &CopyObservation) -> Verdict {
        let download = match obs.direction {
            Direction::HtoD => false,
            Direction::DtoH => true,
            _ => return Verdict::Fresh,
        };
        let fp = obs.fingerprint;
        if fp.full.is_some() {
            self.stats.full_hashes += 1;
        }
        self.generation += 1;
        let generation = self.generation;
        let (summary, g) = self.per_record.entry(obs.record).or_default();
        *g = generation;
        let number = if download {
            self.stats.downloads += 1;
            summary.downloads = summary.downloads.saturating_add(1);
            summary.downloads
        } else {
            self.stats.uploads += 1;
            summary.uploads = summary.uploads.saturating_add(1);
            summary.uploads
        };
        let key = HostKey {
            record: obs.record,
            host_offset: obs.host_offset,
            device: obs.device,
            bytes: obs.bytes,
            download,
        };
        let (verdict, checked) = self.verdict(obs, &key, true);
        if checked {
            // Both copies were hashed in full: what would the sampled fingerprints alone
            // have said?
            let (sampled, _) = self.verdict(obs, &key, false);
            self.stats.checked += 1;
            if sampled.is_redundant() && !verdict.is_redundant() {
                self.stats.sampled_false_same += 1;
            }
            if !sampled.is_redundant() && verdict.is_redundant() {
                self.stats.sampled_false_differ += 1;
            }
        }
        let (summary, _) = self
            .per_record
            .get_mut(&obs.record)
            .expect("inserted above");
        match verdict {
            Verdict::Fresh => {}
            Verdict::DeviceHolds { upload } | Verdict::SameAsUpload { upload } => {
                summary.redundant_uploads = summary.redundant_uploads.saturating_add(1);
                summary.redundant_upload_bytes =
                    summary.redundant_upload_bytes.saturating_add(obs.bytes);
                if matches!(verdict, Verdict::DeviceHolds { .. }) {
                    summary.device_held = summary.device_held.saturating_add(1);
                }
                summary.first_upload.get_or_insert((number, upload));
            }
            Verdict::FetchedUnchanged { download } => {
                summary.redundant_downloads = summary.redundant_downloads.saturating_add(1);
                summary.redundant_download_bytes =
                    summary.redundant_download_bytes.saturating_add(obs.bytes);
                summary.first_download.get_or_insert((number, download));
            }
        }
        // Remember this copy.
        let mut full_tables = false;
        let prev = PrevCopy {
            fingerprint: fp,
            number,
        };
        if self.host.len() < self.cap || self.host.contains_key(&key) {
            self.host.insert(key, prev);
        } else {
            full_tables = true;
        }
        self.invalidate_device(obs.pid, obs.device, obs.bytes);
        if self.device.len() < self.cap {
            self.device.insert(
                (obs.pid, obs.device),
                DeviceContent {
                    len: obs.bytes,
                    fingerprint: fp,
                    record: if download { u32::MAX } else { obs.record },
                    upload: if download { 0 } else { number },
                },
            );
        } else {
            full_tables = true;
        }
        if full_tables {
            self.stats.untracked_full_tables += 1;
        }
        verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_full_hash_fed_in_pieces_is_the_full_hash() {
        let buf: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut h = full_hasher(buf.len() as u64);
        for piece in buf.chunks(4096) {
            h.update(piece);
        }
        assert_eq!(h.digest(), full(&buf));
    }
    use proptest::prelude::*;

    fn obs(
        record: u32,
        off: u64,
        device: u64,
        dir: Direction,
        buf: &[u8],
        full: bool,
    ) -> CopyObservation {
        CopyObservation {
            pid: 7,
            record,
            host_offset: off,
            device,
            bytes: buf.len() as u64,
            direction: dir,
            fingerprint: Fingerprint::of(buf, full),
        }
    }

    #[test]
    fn a_capped_tracker_stops_remembering_at_its_cap_and_counts_it() {
        let mut t = RedundancyTracker::with_cap(2);
        for i in 0..4u64 {
            let buf = [i as u8; 64];
            t.observe(&obs(
                1,
                i * 64,
                0x1000 * (i + 1),
                Direction::HtoD,
                &buf,
                false,
            ));
        }
        // Copies 3 and 4 found both tables full.
        assert_eq!(t.stats().untracked_full_tables, 2);
        // A repeat of a remembered copy is still found; one of a forgotten copy is not.
        let first = [0u8; 64];
        let again = t.observe(&obs(1, 0, 0x1000, Direction::HtoD, &first, false));
        assert!(again.is_redundant());
        let last = [3u8; 64];
        let forgotten = t.observe(&obs(1, 192, 0x4000, Direction::HtoD, &last, false));
        assert_eq!(forgotten, Verdict::Fresh);
    }

    #[test]
    fn offsets_start_at_zero_end_at_the_last_line_and_stay_inside() {
        for len in [
            0u64,
            1,
            63,
            64,
            65,
            511,
            512,
            513,
            4096,
            1 << 20,
            (1 << 26) + 3,
        ] {
            let o = sample_offsets(len);
            let l = line_len(len);
            assert_eq!(o[0], 0);
            assert_eq!(o[SAMPLE_LINES - 1] + l, len, "len {len}");
            assert!(o.windows(2).all(|w| w[0] <= w[1]));
            if len <= SAMPLE_BYTES as u64 {
                // The lines cover every byte.
                for w in o.windows(2) {
                    assert!(w[1] <= w[0] + l, "gap at len {len}");
                }
            }
        }
    }

    #[test]
    fn sampled_misses_a_change_between_lines_full_catches_it() {
        let a = vec![3u8; 1 << 20];
        let mut b = a.clone();
        let o = sample_offsets(a.len() as u64);
        // The byte just after the first line, far from the second.
        let between = (o[0] + LINE + 100) as usize;
        assert!(between < o[1] as usize);
        b[between] ^= 1;
        assert_eq!(sampled(&a), sampled(&b));
        assert_ne!(full(&a), full(&b));
    }

    #[test]
    fn a_change_in_the_last_line_is_caught_by_sampling_one_elsewhere_in_the_last_page_is_not() {
        let a = vec![9u8; 1 << 20];
        let mut last_line = a.clone();
        *last_line.last_mut().unwrap() ^= 0x80;
        assert_ne!(sampled(&a), sampled(&last_line));
        assert_ne!(full(&a), full(&last_line));
        let mut last_page = a.clone();
        let i = a.len() - 4096 + 10;
        last_page[i] ^= 0x80;
        assert_eq!(sampled(&a), sampled(&last_page));
        assert_ne!(full(&a), full(&last_page));
    }

    #[test]
    fn the_length_is_part_of_the_fingerprint() {
        let a = vec![0u8; 4096];
        assert_ne!(sampled(&a), sampled(&a[..4095]));
        assert_ne!(full(&a), full(&a[..4095]));
    }

    #[test]
    fn a_repeated_upload_is_redundant_and_names_the_upload_it_repeats() {
        let mut t = RedundancyTracker::new();
        let buf = vec![1u8; 8192];
        assert_eq!(
            t.observe(&obs(1, 0, 0x1000, Direction::HtoD, &buf, false)),
            Verdict::Fresh
        );
        assert_eq!(
            t.observe(&obs(1, 0, 0x1000, Direction::HtoD, &buf, false)),
            Verdict::DeviceHolds { upload: 1 }
        );
        let r = t.record(1).unwrap();
        assert_eq!((r.uploads, r.redundant_uploads, r.device_held), (2, 1, 1));
        assert_eq!(r.redundant_upload_bytes, 8192);
        assert_eq!(r.first_upload, Some((2, 1)));
    }

    #[test]
    fn the_same_bytes_at_another_device_offset_are_not_redundant() {
        let mut t = RedundancyTracker::new();
        let buf = vec![1u8; 8192];
        t.observe(&obs(1, 0, 0x1000, Direction::HtoD, &buf, true));
        assert_eq!(
            t.observe(&obs(1, 0, 0x10000, Direction::HtoD, &buf, true)),
            Verdict::Fresh
        );
        assert!(!t.record(1).unwrap().any());
    }

    #[test]
    fn an_overwritten_range_makes_a_reupload_same_as_upload_not_device_holds() {
        let mut t = RedundancyTracker::new();
        let a = vec![1u8; 4096];
        let b = vec![2u8; 4096];
        t.observe(&obs(1, 0, 0x1000, Direction::HtoD, &a, false));
        // Another allocation writes an overlapping range.
        t.observe(&obs(2, 0, 0x1800, Direction::HtoD, &b, false));
        assert_eq!(
            t.observe(&obs(1, 0, 0x1000, Direction::HtoD, &a, false)),
            Verdict::SameAsUpload { upload: 1 }
        );
        assert_eq!(t.record(1).unwrap().device_held, 0);
    }

    #[test]
    fn changed_bytes_are_fresh_and_a_device_to_device_write_forgets_the_content() {
        let mut t = RedundancyTracker::new();
        let a = vec![1u8; 4096];
        let mut b = a.clone();
        b[0] = 5;
        t.observe(&obs(1, 0, 0x1000, Direction::HtoD, &a, false));
        assert_eq!(
            t.observe(&obs(1, 0, 0x1000, Direction::HtoD, &b, false)),
            Verdict::Fresh
        );
        t.invalidate_device(7, 0x1000, 16);
        // Host-side memory of upload #2 remains: the same bytes again are a re-upload.
        assert_eq!(
            t.observe(&obs(1, 0, 0x1000, Direction::HtoD, &b, false)),
            Verdict::SameAsUpload { upload: 2 }
        );
    }

    #[test]
    fn a_result_fetched_unchanged_is_a_redundant_download() {
        let mut t = RedundancyTracker::new();
        let r1 = vec![4u8; 1000];
        let mut r2 = r1.clone();
        r2[999] = 0;
        assert_eq!(
            t.observe(&obs(3, 0, 0x9000, Direction::DtoH, &r1, false)),
            Verdict::Fresh
        );
        assert_eq!(
            t.observe(&obs(3, 0, 0x9000, Direction::DtoH, &r1, false)),
            Verdict::FetchedUnchanged { download: 1 }
        );
        assert_eq!(
            t.observe(&obs(3, 0, 0x9000, Direction::DtoH, &r2, false)),
            Verdict::Fresh
        );
        let r = t.record(3).unwrap();
        assert_eq!(
            (r.downloads, r.redundant_downloads, r.redundant_uploads),
            (3, 1, 0)
        );
        assert_eq!(r.first_download, Some((2, 1)));
    }

    #[test]
    fn full_fingerprints_decide_and_measure_the_sampled_error() {
        let mut t = RedundancyTracker::new();
        let a = vec![0u8; 1 << 16];
        let mut b = a.clone();
        b[200] = 1; // between the first two sampled lines
        t.observe(&obs(1, 0, 0x1000, Direction::HtoD, &a, true));
        assert_eq!(
            t.observe(&obs(1, 0, 0x1000, Direction::HtoD, &b, true)),
            Verdict::Fresh
        );
        let s = t.stats();
        assert_eq!(
            (s.checked, s.sampled_false_same, s.sampled_false_differ),
            (1, 1, 0)
        );
        assert_eq!(s.false_positive_rate(), Some(1.0));
        // The same change, sampled only: wrongly redundant (the documented blind spot).
        let mut t = RedundancyTracker::new();
        t.observe(&obs(1, 0, 0x1000, Direction::HtoD, &a, false));
        assert!(t
            .observe(&obs(1, 0, 0x1000, Direction::HtoD, &b, false))
            .is_redundant());
        assert_eq!(t.stats().checked, 0);
    }

    #[test]
    fn changed_since_lists_only_records_touched_after_a_generation() {
        let mut t = RedundancyTracker::new();
        let a = vec![0u8; 64];
        t.observe(&obs(1, 0, 0x1000, Direction::HtoD, &a, false));
        let (v, g) = t.changed_since(0);
        assert_eq!(v.len(), 1);
        t.observe(&obs(2, 0, 0x2000, Direction::HtoD, &a, false));
        let (v, _) = t.changed_since(g);
        assert_eq!(v.iter().map(|e| e.0).collect::<Vec<_>>(), vec![2]);
    }

    proptest! {
        #[test]
        fn hashing_the_gathered_samples_is_the_sampled_fingerprint(
            buf in proptest::collection::vec(any::<u8>(), 0..5000)
        ) {
            let mut s = [0u8; SAMPLE_BYTES];
            let n = gather_samples(&buf, &mut s);
            prop_assert_eq!(n as u64, SAMPLE_LINES as u64 * line_len(buf.len() as u64));
            prop_assert_eq!(hash_samples(buf.len() as u64, &s[..n]), sampled(&buf));
        }

        #[test]
        fn any_one_byte_change_changes_the_full_fingerprint_and_sampled_iff_in_a_line(
            buf in proptest::collection::vec(any::<u8>(), 1..6000),
            at in any::<proptest::sample::Index>(),
            flip in 1u8..=255,
        ) {
            let i = at.index(buf.len());
            let mut b = buf.clone();
            b[i] ^= flip;
            prop_assert_ne!(full(&buf), full(&b));
            let len = buf.len() as u64;
            let in_line = sample_offsets(len)
                .iter()
                .any(|&o| (o..o + line_len(len)).contains(&(i as u64)));
            prop_assert_eq!(sampled(&buf) != sampled(&b), in_line);
            if buf.len() <= SAMPLE_BYTES {
                prop_assert!(in_line);
            }
        }

        #[test]
        fn equal_bytes_are_always_redundant_and_in_full_mode_changed_bytes_never(
            buf in proptest::collection::vec(any::<u8>(), 1..3000),
            changes in proptest::collection::vec((any::<proptest::sample::Index>(), 1u8..=255), 0..3),
            full_mode in any::<bool>(),
        ) {
            let mut t = RedundancyTracker::new();
            t.observe(&obs(1, 0, 0x1000, Direction::HtoD, &buf, full_mode));
            let mut b = buf.clone();
            for (at, flip) in &changes {
                let i = at.index(b.len());
                b[i] ^= flip;
            }
            let v = t.observe(&obs(1, 0, 0x1000, Direction::HtoD, &b, full_mode));
            if b == buf {
                prop_assert!(v.is_redundant());
            } else if full_mode || buf.len() <= SAMPLE_BYTES {
                prop_assert_eq!(v, Verdict::Fresh);
            }
        }
    }
}
