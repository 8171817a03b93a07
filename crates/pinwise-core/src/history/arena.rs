//! The byte arena holding every record's encoded events.
//!
//! The arena is an array of 32-byte chunks shared by all records. A record's events are a
//! chain of chunks: the first 4 bytes of a chunk are the index of the next one (0: none;
//! chunk 0 is never handed out), the other 28 hold encoded events, which may straddle
//! chunks. Unused bytes are zero, and a zero head byte ends a record's events, so a chain
//! needs no length. A live allocation's append position (its [`Cursor`]) lives in the
//! live-address index and is dropped when the allocation ends.
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

/// Where the next byte of a chain goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cursor {
    chunk: u32,
    pos: u8,
}

/// The arena.
#[derive(Debug, Clone)]
pub(crate) struct EventArena {
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
            chunks,
            used_bytes: 0,
        }
    }

    fn alloc_chunk(&mut self) -> u32 {
        let index = self.chunks.push([0u8; CHUNK]);
        // 2^32 chunks of 32 bytes is 128 GiB of events: far beyond any bounded history.
        u32::try_from(index).expect("event arena exceeds 2^32 chunks (128 GiB)")
    }

    /// Starts a new chain; returns its head and the cursor to append at.
    pub fn start_chain(&mut self) -> (u32, Cursor) {
        let chunk = self.alloc_chunk();
        (
            chunk,
            Cursor {
                chunk,
                pos: PAYLOAD,
            },
        )
    }

    /// Appends `bytes` to the chain whose end `cursor` points at.
    pub fn append(&mut self, cursor: &mut Cursor, mut bytes: &[u8]) {
        self.used_bytes += bytes.len() as u64;
        while !bytes.is_empty() {
            if usize::from(cursor.pos) == CHUNK {
                let next = self.alloc_chunk();
                self.chunks[cursor.chunk as usize][..4].copy_from_slice(&next.to_le_bytes());
                *cursor = Cursor {
                    chunk: next,
                    pos: PAYLOAD,
                };
            }
            let pos = usize::from(cursor.pos);
            let n = bytes.len().min(CHUNK - pos);
            self.chunks[cursor.chunk as usize][pos..pos + n].copy_from_slice(&bytes[..n]);
            cursor.pos += n as u8;
            bytes = &bytes[n..];
        }
    }

    /// Reads the chain starting at `head` (0 reads nothing).
    pub fn reader(&self, head: u32) -> ChainReader<'_> {
        ChainReader {
            arena: self,
            chunk: head,
            pos: PAYLOAD,
            read: 0,
        }
    }

    /// Chunks handed out, the reserved one included.
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
        self.chunks.heap_bytes()
    }
}

/// Reads a chain's bytes in order, following its links.
#[derive(Debug, Clone)]
pub(crate) struct ChainReader<'a> {
    arena: &'a EventArena,
    chunk: u32,
    pos: u8,
    read: usize,
}

impl ByteSource for ChainReader<'_> {
    #[inline]
    fn next_byte(&mut self) -> Option<u8> {
        if self.chunk == 0 {
            return None;
        }
        if usize::from(self.pos) == CHUNK {
            let c = self.arena.chunks.get(self.chunk as usize)?;
            let next = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            if next == 0 {
                self.chunk = 0;
                return None;
            }
            self.chunk = next;
            self.pos = PAYLOAD;
        }
        let b = *self
            .arena
            .chunks
            .get(self.chunk as usize)?
            .get(usize::from(self.pos))?;
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

    fn read_all(arena: &EventArena, head: u32) -> Vec<u8> {
        let mut r = arena.reader(head);
        std::iter::from_fn(|| r.next_byte()).collect()
    }

    #[test]
    fn chains_straddle_chunks_and_stay_separate() {
        let mut arena = EventArena::new();
        let (a, mut ca) = arena.start_chain();
        let (b, mut cb) = arena.start_chain();
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
        // 100 bytes need 4 chunks of 28, 15 bytes one: plus the reserved chunk.
        assert_eq!(arena.chunks(), 1 + 4 + 1);
        assert!(read_all(&arena, 0).is_empty());
    }

    #[test]
    fn a_chain_that_fills_its_chunk_exactly_ends_there() {
        let mut arena = EventArena::new();
        let (head, mut c) = arena.start_chain();
        arena.append(&mut c, &[9u8; 28]);
        assert_eq!(read_all(&arena, head), vec![9u8; 28]);
        arena.append(&mut c, &[7]);
        let got = read_all(&arena, head);
        assert_eq!(got.len(), 56);
        assert_eq!(got[28], 7);
    }
}
