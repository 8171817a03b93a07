//! The streams a live allocation was copied on asynchronously, and the lock-free memo of the
//! last one, so that the copy hooks' common case (another copy on the same stream) takes no
//! lock and touches only the record's first cache line.
//!
//! Invariant: a [`LastStream`] holding a stream means that stream is in its record's
//! `async_streams` list. It is set only under the list's lock after the stream is in the
//! list, and cleared under that lock before a stream leaves the list; a reader that sees it
//! may therefore skip the list: its copy's stream is there (or is being forgotten
//! concurrently, which orders that copy before the forgetting).

use std::sync::atomic::{AtomicU64, Ordering};

use super::Live;
use crate::backend::StreamHandle;

/// No stream remembered (not a handle the driver hands out: handles are pointers, or the
/// small special values 0, 1 and 2).
const NONE: u64 = u64::MAX;

/// The last stream an allocation was copied on asynchronously (see the module documentation).
#[derive(Debug)]
pub(crate) struct LastStream(AtomicU64);

impl LastStream {
    /// Remembers nothing.
    pub(crate) const fn new() -> Self {
        Self(AtomicU64::new(NONE))
    }

    /// Whether `s` is remembered (then it is in the record's list). Relaxed: nothing else
    /// is read on the strength of it.
    #[inline]
    fn is(&self, s: StreamHandle) -> bool {
        s.0 != NONE && self.0.load(Ordering::Relaxed) == s.0
    }

    /// Only under the list's lock, with `s` in the list.
    fn set(&self, s: StreamHandle) {
        if s.0 != NONE && self.0.load(Ordering::Relaxed) != s.0 {
            self.0.store(s.0, Ordering::Relaxed);
        }
    }

    /// Only under the list's lock, before a stream leaves the list.
    fn clear(&self) {
        self.0.store(NONE, Ordering::Relaxed);
    }
}

impl Live {
    /// Notes an asynchronous copy on `s`: the allocation's block is not reused before the
    /// stream's work is done.
    #[inline]
    pub(super) fn note_stream(&self, s: StreamHandle) {
        if self.last_stream.is(s) {
            return;
        }
        let mut list = self.async_streams.lock();
        if !list.contains(&s) {
            list.push(s);
        }
        self.last_stream.set(s);
    }

    /// Whether an asynchronous copy on `s` was noted (and not forgotten).
    pub(super) fn has_stream(&self, s: StreamHandle) -> bool {
        self.async_streams.lock().contains(&s)
    }

    /// Forgets `s`.
    pub(super) fn drop_stream(&self, s: StreamHandle) {
        let mut list = self.async_streams.lock();
        self.last_stream.clear();
        list.retain(|x| *x != s);
    }

    /// Forgets the streams `dead` says are, and returns them.
    pub(super) fn drop_streams_where(
        &self,
        dead: impl Fn(StreamHandle) -> bool,
    ) -> Vec<StreamHandle> {
        let mut list = self.async_streams.lock();
        self.last_stream.clear();
        let (gone, kept): (Vec<_>, Vec<_>) = list.iter().partition(|s| dead(**s));
        *list = kept;
        gone
    }

    /// Forgets every stream, and returns them (the allocation is being freed).
    pub(super) fn take_streams(&self) -> Vec<StreamHandle> {
        let mut list = self.async_streams.lock();
        self.last_stream.clear();
        std::mem::take(&mut *list)
    }

    /// Whether the memo agrees with the list (the module's invariant). For tests.
    #[cfg(test)]
    fn memo_consistent(&self) -> bool {
        let list = self.async_streams.lock();
        let last = self.last_stream.0.load(Ordering::Relaxed);
        last == NONE || list.contains(&StreamHandle(last))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU8};
    use std::sync::Arc;

    use parking_lot::Mutex;
    use pinwise_core::{Site, Tag};

    use super::*;
    use crate::engine::{Origin, Planned, NO_PROMOTION};

    fn live() -> Live {
        Live {
            start: 0x1000,
            size: 4096,
            transfers: Default::default(),
            origin: Origin::PoolBlock,
            promotion: AtomicU8::new(NO_PROMOTION),
            last_stream: LastStream::new(),
            bytes: Default::default(),
            block_len: 4096,
            tag: Tag {
                site: Site::UNKNOWN,
                call_no: 1,
            },
            planned: Planned::No,
            spare: false,
            async_streams: Mutex::new(Vec::new()),
        }
    }

    #[test]
    fn a_noted_stream_is_listed_once_and_forgotten_ones_are_not() {
        let l = live();
        let (a, b) = (StreamHandle(0x10), StreamHandle(0x20));
        l.note_stream(a);
        l.note_stream(a);
        l.note_stream(b);
        l.note_stream(a);
        assert_eq!(*l.async_streams.lock(), vec![a, b]);
        assert!(l.memo_consistent());
        l.drop_stream(a);
        assert!(!l.has_stream(a));
        assert!(l.memo_consistent());
        // Noting `a` again after forgetting it lists it again (the memo did not hide it).
        l.note_stream(a);
        assert!(l.has_stream(a));
        assert_eq!(l.take_streams(), vec![b, a]);
        assert!(!l.has_stream(a) && !l.has_stream(b));
        l.note_stream(b);
        assert_eq!(l.drop_streams_where(|s| s == b), vec![b]);
        assert!(!l.has_stream(b));
        assert!(l.memo_consistent());
    }

    #[test]
    fn the_default_stream_is_remembered_like_any_other() {
        let l = live();
        l.note_stream(StreamHandle::DEFAULT);
        assert!(l.last_stream.is(StreamHandle::DEFAULT));
        assert!(l.has_stream(StreamHandle::DEFAULT));
    }

    /// Readers note copies on a few streams while a writer forgets them: the memo never
    /// names a stream missing from the list, and a stream noted after the writer stopped
    /// is listed.
    #[test]
    fn concurrent_notes_and_forgets_keep_the_memo_in_the_list() {
        let l = Arc::new(live());
        let stop = Arc::new(AtomicBool::new(false));
        let streams: Vec<StreamHandle> = (1..=3).map(|i| StreamHandle(i * 0x100)).collect();
        let noters: Vec<_> = (0..3)
            .map(|t| {
                let (l, stop, streams) = (l.clone(), stop.clone(), streams.clone());
                std::thread::spawn(move || {
                    let mut i = t;
                    while !stop.load(Ordering::Relaxed) {
                        l.note_stream(streams[i % streams.len()]);
                        i += 1;
                    }
                })
            })
            .collect();
        let checks = Arc::new(AtomicU64::new(0));
        let checker = {
            let (l, stop, checks) = (l.clone(), stop.clone(), checks.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    assert!(l.memo_consistent(), "the memo names a stream not listed");
                    checks.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        // At least 20,000 rounds, and on until the checker has checked a while (on a loaded
        // machine it may not have run yet).
        let mut round = 0usize;
        while round < 20_000 || checks.load(Ordering::Relaxed) < 1_000 {
            round += 1;
            match round % 3 {
                0 => l.drop_stream(streams[round % streams.len()]),
                1 => {
                    let _ = l.take_streams();
                }
                _ => {
                    let _ = l.drop_streams_where(|s| s == streams[0]);
                }
            }
            assert!(l.memo_consistent());
        }
        stop.store(true, Ordering::Relaxed);
        for n in noters {
            n.join().unwrap();
        }
        checker.join().unwrap();
        assert!(l.memo_consistent());
        let _ = l.take_streams();
        for s in &streams {
            l.note_stream(*s);
            assert!(
                l.has_stream(*s),
                "a stream noted after the forgets is listed"
            );
        }
    }
}
