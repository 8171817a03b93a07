//! The byte arena holding every record's encoded events.
//!
//! Events live in 32-byte chunks. A record's events are a chain: its first chunk is the
//! chunk at the record's own index in `heads` (so a record needs no pointer to it), and
//! further chunks come from `chunks`, shared by all records. The first 4 bytes of a chunk
//! are the index of the next one in `chunks` (0: none; chunk 0 of `chunks` is never handed
//! out), the other 28 hold encoded events, which may straddle chunks. Unused bytes are
//! zero, and a zero head byte ends a record's events, so a chain needs no length. A live
//! allocation's append position (its [`Cursor`]) lives in the live-address index and is
//! dropped when the allocation ends.
//!
//! Small chunks keep the waste per record under 28 bytes; chunks are allocated a segment
//! (1 MiB) at a time, so the arena never copies what it holds.

use crate::segvec::SegVec;
use crate::varint::ByteSource;

/// Bytes in a chunk.
pub(crate) const CHUNK: usize = 32;
/// Where a chunk's payload starts (after the next-chunk index).
const PAYLOAD: u8 = 4;
/// 2^15 chunks of 32 bytes: 1 MiB segments.
const SEGMENT_SHIFT: u32 = 15;

/// A chunk: a record's head chunk, or a continuation chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkRef {
    Head(u32),
    Next(u32),
}

/// Where the next byte of a chain goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cursor {
    chunk: ChunkRef,
    pos: u8,
}

/// The arena.
#[derive(Debug, Clone)]
pub(crate) struct EventArena {
    heads: SegVec<[u8; CHUNK], SEGMENT_SHIFT>,
    chunks: SegVec<[u8; CHUNK], SEGMENT_SHIFT>,
    used_bytes: u64,
}

impl Default for EventArena {
    fn default() -> Self {
        Self::new()
    }
}

impl EventArena {
    pub fn new() -> Self {
        let mut chunks = SegVec::new();
        chunks.push([0u8; CHUNK]); // chunk 0: the "no next chunk" marker
        EventArena {
            heads: SegVec::new(),
            chunks,
            used_bytes: 0,
        }
    }

    fn chunk_mut(&mut self, c: ChunkRef) -> &mut [u8; CHUNK] {
        match c {
            ChunkRef::Head(i) => &mut self.heads[i as usize],
            ChunkRef::Next(i) => &mut self.chunks[i as usize],
        }
    }

    fn chunk(&self, c: ChunkRef) -> Option<&[u8; CHUNK]> {
        match c {
            ChunkRef::Head(i) => self.heads.get(i as usize),
            ChunkRef::Next(i) => self.chunks.get(i as usize),
        }
    }

    /// Starts the chain of record `record`, which must be the next record (records and
    /// head chunks are numbered alike); returns the cursor to append at.
    pub fn start_chain(&mut self, record: u32) -> Cursor {
        let index = self.heads.push([0u8; CHUNK]);
        debug_assert_eq!(
            index, record as usize,
            "one head chunk per record, in order"
        );
        Cursor {
            chunk: ChunkRef::Head(record),
            pos: PAYLOAD,
        }
    }

    /// Appends `bytes` to the chain whose end `cursor` points at.
    pub fn append(&mut self, cursor: &mut Cursor, mut bytes: &[u8]) {
        self.used_bytes += bytes.len() as u64;
        while !bytes.is_empty() {
            if usize::from(cursor.pos) == CHUNK {
                let index = self.chunks.push([0u8; CHUNK]);
                // 2^32 chunks of 32 bytes is 128 GiB of events: far beyond any bounded history.
                let next = u32::try_from(index).expect("event arena exceeds 2^32 chunks (128 GiB)");
                self.chunk_mut(cursor.chunk)[..4].copy_from_slice(&next.to_le_bytes());
                *cursor = Cursor {
                    chunk: ChunkRef::Next(next),
                    pos: PAYLOAD,
                };
            }
            let pos = usize::from(cursor.pos);
            let n = bytes.len().min(CHUNK - pos);
            self.chunk_mut(cursor.chunk)[pos..pos + n].copy_from_slice(&bytes[..n]);
            cursor.pos += n as u8;
            bytes = &bytes[n..];
        }
    }

    /// Reads the chain of record `record`.
    pub fn reader(&self, record: u32) -> ChainReader<'_> {
        ChainReader {
            arena: self,
            chunk: Some(ChunkRef::Head(record)),
            pos: PAYLOAD,
            read: 0,
        }
    }

    /// Continuation chunks handed out, the reserved one included.
    #[cfg(test)]
    pub fn chunks(&self) -> usize {
        self.chunks.len()
    }

    /// Bytes of encoded events written (without chunk headers and unused tails).
    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.heads.heap_bytes() + self.chunks.heap_bytes()
    }
}

/// Reads a chain's bytes in order, following its links.
#[derive(Debug, Clone)]
pub(crate) struct ChainReader<'a> {
    arena: &'a EventArena,
    chunk: Option<ChunkRef>,
    pos: u8,
    read: usize,
}

impl ByteSource for ChainReader<'_> {
    #[inline]
    fn next_byte(&mut self) -> Option<u8> {
        let mut chunk = self.arena.chunk(self.chunk?)?;
        if usize::from(self.pos) == CHUNK {
            let next = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
            if next == 0 {
                self.chunk = None;
                return None;
            }
            self.chunk = Some(ChunkRef::Next(next));
            self.pos = PAYLOAD;
            chunk = self.arena.chunk(ChunkRef::Next(next))?;
        }
        let b = chunk[usize::from(self.pos)];
        self.pos += 1;
        self.read += 1;
        Some(b)
    }

    fn position(&self) -> usize {
        self.read
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(arena: &EventArena, record: u32) -> Vec<u8> {
        let mut r = arena.reader(record);
        std::iter::from_fn(|| r.next_byte()).collect()
    }

    #[test]
    fn chains_straddle_chunks_and_stay_separate() {
        let mut arena = EventArena::new();
        let (a, b) = (0, 1);
        let mut ca = arena.start_chain(a);
        let mut cb = arena.start_chain(b);
        let data_a: Vec<u8> = (1..=100).collect();
        for piece in data_a.chunks(7) {
            arena.append(&mut ca, piece);
            arena.append(&mut cb, &[0xee]);
        }
        let got_a = read_all(&arena, a);
        // The chain reads back its bytes, then the zero padding of its last chunk.
        assert_eq!(&got_a[..100], &data_a[..]);
        assert!(got_a[100..].iter().all(|&x| x == 0));
        let got_b = read_all(&arena, b);
        assert_eq!(got_b.iter().filter(|&&x| x == 0xee).count(), 15);
        assert_eq!(arena.used_bytes(), 115);
        // 100 bytes need 4 chunks of 28 (the head and 3 more), 15 bytes the head alone;
        // plus the reserved chunk.
        assert_eq!(arena.chunks(), 1 + 3);
        assert!(read_all(&arena, 2).is_empty(), "no such record");
    }

    #[test]
    fn a_chain_that_fills_its_chunk_exactly_ends_there() {
        let mut arena = EventArena::new();
        let mut c = arena.start_chain(0);
        arena.append(&mut c, &[9u8; 28]);
        assert_eq!(read_all(&arena, 0), vec![9u8; 28]);
        arena.append(&mut c, &[7]);
        let got = read_all(&arena, 0);
        assert_eq!(got.len(), 56);
        assert_eq!(got[28], 7);
    }
}
