//! Asynchronous downloads waiting for their late fingerprint (`pinwise trace --fingerprint`).
//!
//! BPF reports an asynchronous download the driver accepted with `PW_FP_PENDING` (its bytes
//! are not in the host buffer yet) and, once a call that guarantees it completed returned
//! (see "asynchronous downloads" in `src/bpf/pinwise.bpf.c`), sends a `PW_EV_LATE_FP` record
//! with the fingerprint of its host bytes, naming the download by its thread and timestamp.
//! [`AsyncDownloads`] keeps the downloads in between, so that the fingerprint is given to the
//! history ([`pinwise_core::MemHistory::observe_late_fingerprint`]) only when that is exact:
//!
//! - a later copy of the same process (any direction) whose host or device range overlaps a
//!   pending download's makes it unknown (the host bytes hashed later may be that copy's,
//!   and the history must compare the copies touching a range in their order);
//! - a download still pending when its process exits or execs, or when tracing stops, is
//!   unknown, as is one BPF gave up (its stream destroyed, its context ended: no record
//!   comes) or could not remember (`PW_FP_UNTRACKED`);
//! - a late record for a download that is no longer pending is ignored.
//!
//! Unknown downloads are counted (and reported as skipped), never called redundant.

use std::collections::HashMap;

/// Most downloads kept at once. BPF keeps at most 1024 (`PW_MAX_ASYNC_DLS`); more here are
/// ones BPF gave up without a record, and the oldest go first (unknown).
pub const MAX_PENDING: usize = 4096;

/// One asynchronous download waiting for its fingerprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingDownload {
    /// Its process.
    pub pid: u32,
    /// The host buffer it writes.
    pub host: u64,
    /// The device range it reads.
    pub device: u64,
    /// Its length.
    pub bytes: u64,
    /// Its copy record's timestamp (the transfer event's).
    pub ts: u64,
}

impl PendingDownload {
    fn touched_by(&self, pid: u32, host: u64, device: u64, bytes: u64) -> bool {
        let meet = |a: u64, b: u64| {
            a != 0
                && b != 0
                && a < b.saturating_add(bytes.max(1))
                && b < a.saturating_add(self.bytes.max(1))
        };
        self.pid == pid && (meet(self.host, host) || meet(self.device, device))
    }
}

/// The pending asynchronous downloads of the traced processes, and what became of them.
#[derive(Debug, Default)]
pub struct AsyncDownloads {
    /// By (thread, timestamp) of the copy record.
    pending: HashMap<(u32, u64), PendingDownload>,
    /// Downloads left unknown.
    unknown: u64,
}

impl AsyncDownloads {
    /// A download reported pending by thread `tid` at `ts`.
    pub fn start(&mut self, tid: u32, d: PendingDownload) {
        if self.pending.len() >= MAX_PENDING {
            let oldest = self
                .pending
                .iter()
                .min_by_key(|(_, p)| p.ts)
                .map(|(k, _)| *k);
            if let Some(k) = oldest {
                self.pending.remove(&k);
                self.unknown += 1;
            }
        }
        if self.pending.insert((tid, d.ts), d).is_some() {
            self.unknown += 1;
        }
    }

    /// A download BPF could not remember: unknown.
    pub fn untracked(&mut self) {
        self.unknown += 1;
    }

    /// A copy of process `pid` touching `bytes` bytes at `host` (0: none) and `device` (0:
    /// none): the pending downloads it overlaps become unknown.
    pub fn touch(&mut self, pid: u32, host: u64, device: u64, bytes: u64) {
        if self.pending.is_empty() {
            return;
        }
        let before = self.pending.len();
        self.pending
            .retain(|_, p| !p.touched_by(pid, host, device, bytes));
        self.unknown += (before - self.pending.len()) as u64;
    }

    /// The late fingerprint of the download of thread `tid` at `ts` arrived: the download,
    /// if it is still pending (no longer pending afterwards).
    pub fn finish(&mut self, tid: u32, ts: u64) -> Option<PendingDownload> {
        self.pending.remove(&(tid, ts))
    }

    /// A finished download that nevertheless got no fingerprint (its bytes could not be
    /// read, or the history had nothing to compare it with): unknown.
    pub fn not_fingerprinted(&mut self) {
        self.unknown += 1;
    }

    /// Process `pid` exited or exec'd: its pending downloads are unknown.
    pub fn process_ended(&mut self, pid: u32) {
        let before = self.pending.len();
        self.pending.retain(|_, p| p.pid != pid);
        self.unknown += (before - self.pending.len()) as u64;
    }

    /// Tracing stops: every pending download is unknown.
    pub fn give_up_all(&mut self) {
        self.unknown += self.pending.len() as u64;
        self.pending.clear();
    }

    /// Downloads left unknown so far.
    pub fn unknown(&self) -> u64 {
        self.unknown
    }

    /// Downloads pending now.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dl(pid: u32, host: u64, device: u64, bytes: u64, ts: u64) -> PendingDownload {
        PendingDownload {
            pid,
            host,
            device,
            bytes,
            ts,
        }
    }

    #[test]
    fn a_copy_overlapping_either_range_of_the_same_process_makes_a_download_unknown() {
        let mut a = AsyncDownloads::default();
        a.start(1, dl(7, 0x1000, 0xd000, 0x100, 10));
        // Adjacent ranges, another process, no ranges: untouched.
        a.touch(7, 0x1100, 0, 0x10);
        a.touch(7, 0x0f00, 0, 0x100);
        a.touch(8, 0x1000, 0xd000, 0x100);
        a.touch(7, 0, 0, 0x10_0000);
        a.touch(7, 0, 0xd100, 0x10);
        assert_eq!((a.pending(), a.unknown()), (1, 0));
        // The last host byte.
        a.touch(7, 0x10ff, 0, 1);
        assert_eq!((a.pending(), a.unknown()), (0, 1));
        assert_eq!(
            a.finish(1, 10),
            None,
            "a touched download gets no fingerprint"
        );
        // The device range (a device-to-device copy).
        a.start(1, dl(7, 0x1000, 0xd000, 0x100, 11));
        a.touch(7, 0, 0xd080, 0x10);
        assert_eq!((a.pending(), a.unknown()), (0, 2));
    }

    #[test]
    fn a_download_is_finished_once_and_the_rest_are_unknown_at_the_end() {
        let mut a = AsyncDownloads::default();
        a.start(1, dl(7, 0x1000, 0xd000, 0x100, 10));
        a.start(2, dl(7, 0x2000, 0xd000, 0x100, 10));
        a.start(3, dl(9, 0x1000, 0xd000, 0x100, 12));
        assert_eq!(a.finish(1, 10), Some(dl(7, 0x1000, 0xd000, 0x100, 10)));
        assert_eq!(a.finish(1, 10), None);
        a.process_ended(9);
        assert_eq!((a.pending(), a.unknown()), (1, 1));
        a.untracked();
        a.give_up_all();
        assert_eq!((a.pending(), a.unknown()), (0, 3));
    }

    #[test]
    fn the_oldest_download_goes_when_too_many_are_pending() {
        let mut a = AsyncDownloads::default();
        for i in 0..MAX_PENDING as u64 + 1 {
            a.start(1, dl(7, 0x1000 + i * 0x100, 0xd000, 0x100, 100 + i));
        }
        assert_eq!((a.pending(), a.unknown()), (MAX_PENDING, 1));
        assert_eq!(a.finish(1, 100), None, "the oldest went");
        assert!(a.finish(1, 101).is_some());
    }
}
