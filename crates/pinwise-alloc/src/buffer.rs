//! The Rust API: [`HostAllocator`] and [`HostBuffer`]s that free themselves.

use std::panic::Location;
use std::sync::Arc;

use pinwise_core::{Direction, Site, Tag};

use crate::backend::{DevicePtr, PinBackend, StreamHandle};
use crate::engine::{AllocFlags, Engine, EngineConfig, Live};
use crate::error::AllocError;
use crate::stats::AllocStats;

/// The smart pinning host allocator. Cheap to clone (it shares one engine).
#[derive(Debug, Clone)]
pub struct HostAllocator {
    engine: Arc<Engine>,
}

impl HostAllocator {
    /// An allocator on `backend` with `config`.
    pub fn new(backend: Arc<dyn PinBackend>, config: EngineConfig) -> Result<Self, AllocError> {
        Ok(HostAllocator {
            engine: Arc::new(Engine::new(backend, config)?),
        })
    }

    /// An allocator sharing an existing engine.
    pub fn from_engine(engine: Arc<Engine>) -> Self {
        HostAllocator { engine }
    }

    /// The engine behind it.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Allocates `size` bytes; the call site is the caller's source location.
    #[track_caller]
    pub fn alloc(&self, size: usize) -> Result<HostBuffer, AllocError> {
        let site = self.engine.sites().resolve_location(Location::caller());
        self.alloc_at(size, site, AllocFlags::NONE)
    }

    /// Allocates `size` bytes for an explicit call site, with flags.
    pub fn alloc_at(
        &self,
        size: usize,
        site: Site,
        flags: AllocFlags,
    ) -> Result<HostBuffer, AllocError> {
        let a = self.engine.alloc(size, site, flags)?;
        let live = self
            .engine
            .live_of(a.ptr as usize)
            .expect("a fresh allocation is live");
        if live.needs_zeroing() {
            // SAFETY: a fresh allocation of `live.size` writable bytes that nobody else uses
            // yet; zeroed so that `as_slice` reads initialized bytes.
            unsafe { std::ptr::write_bytes(a.ptr, 0, live.size) };
        }
        Ok(HostBuffer {
            engine: self.engine.clone(),
            live,
        })
    }

    /// A snapshot of the statistics.
    pub fn stats(&self) -> AllocStats {
        self.engine.stats()
    }
}

/// Host memory from a [`HostAllocator`]; freed when dropped. Its copy methods go through
/// the allocator, which learns from them which buffers are hot.
///
/// Fresh memory reads as zeros; memory reused from a pool holds what was written before.
#[derive(Debug)]
pub struct HostBuffer {
    engine: Arc<Engine>,
    live: Arc<Live>,
}

impl HostBuffer {
    /// Bytes asked for.
    pub fn len(&self) -> usize {
        self.live.size
    }

    /// Never true: zero-byte allocations are refused.
    pub fn is_empty(&self) -> bool {
        self.live.size == 0
    }

    /// Whether the memory is page-locked now.
    pub fn is_pinned(&self) -> bool {
        self.live.is_pinned()
    }

    /// Its identity: call site and call number.
    pub fn tag(&self) -> Tag {
        self.live.tag
    }

    /// The first byte.
    pub fn as_ptr(&self) -> *const u8 {
        self.live.start as *const u8
    }

    /// The first byte, for writing.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.live.start as *mut u8
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `start..start+size` is memory this buffer owns exclusively, initialized
        // (zeroed when fresh), valid until drop.
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.live.size) }
    }

    /// The bytes, for writing.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.as_mut_ptr(), self.live.size) }
    }

    /// Copies the whole buffer to device memory at `dst` and waits for it.
    pub fn copy_to_device(&self, dst: DevicePtr) -> Result<(), AllocError> {
        self.note(Direction::HtoD, None);
        // SAFETY: the source is this buffer, readable for its length; the copy is synchronous.
        unsafe {
            self.engine
                .backend()
                .copy_htod(dst, self.as_ptr(), self.len(), None)?
        };
        Ok(())
    }

    /// Copies device memory at `src` into the whole buffer and waits for it.
    pub fn copy_from_device(&mut self, src: DevicePtr) -> Result<(), AllocError> {
        self.note(Direction::DtoH, None);
        let (dst, len) = (self.as_mut_ptr(), self.len());
        // SAFETY: the destination is this buffer, writable (`&mut self`); synchronous copy.
        unsafe { self.engine.backend().copy_dtoh(dst, src, len, None)? };
        Ok(())
    }

    /// Queues a copy of the whole buffer to `dst` on `stream`. The buffer's memory is not
    /// reused after drop until the copy completed.
    ///
    /// # Safety
    /// The buffer must not be written until the copy completed (synchronize the stream).
    pub unsafe fn copy_to_device_async(
        &self,
        dst: DevicePtr,
        stream: StreamHandle,
    ) -> Result<(), AllocError> {
        self.note(Direction::HtoD, Some(stream));
        // SAFETY: readable for its length; the caller keeps it unwritten until completion,
        // and the engine keeps the memory from reuse until the stream passed this point.
        unsafe {
            self.engine
                .backend()
                .copy_htod(dst, self.as_ptr(), self.len(), Some(stream))?
        };
        Ok(())
    }

    /// Queues a copy of device memory at `src` into the whole buffer on `stream`.
    ///
    /// # Safety
    /// The buffer must not be read or written until the copy completed.
    pub unsafe fn copy_from_device_async(
        &mut self,
        src: DevicePtr,
        stream: StreamHandle,
    ) -> Result<(), AllocError> {
        self.note(Direction::DtoH, Some(stream));
        let (dst, len) = (self.as_mut_ptr(), self.len());
        // SAFETY: writable for its length; the caller keeps it untouched until completion,
        // and the engine keeps the memory from reuse until the stream passed this point.
        unsafe {
            self.engine
                .backend()
                .copy_dtoh(dst, src, len, Some(stream))?
        };
        Ok(())
    }

    /// Tells the allocator about a copy the caller made itself (of `bytes` bytes).
    pub fn note_transfer(&self, bytes: usize, direction: Direction, stream: Option<StreamHandle>) {
        self.engine
            .note_transfer_on(&self.live, self.live.start, bytes, direction, stream);
    }

    fn note(&self, direction: Direction, stream: Option<StreamHandle>) {
        self.note_transfer(self.len(), direction, stream);
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        self.engine.free_live(&self.live);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn buffers_and_allocators_cross_threads() {
        assert_send_sync::<HostBuffer>();
        assert_send_sync::<HostAllocator>();
        assert_send_sync::<Engine>();
    }

    /// The engine hands out small pageable memory unzeroed (as `malloc`); the Rust API
    /// still reads zeros in a fresh buffer, also where the heap reuses memory just written.
    #[test]
    fn fresh_small_buffers_read_zeros_though_the_engine_does_not_zero() {
        use pinwise_core::{CostModel, Policy};
        let alloc = HostAllocator::new(
            Arc::new(crate::testing::MockBackend::new()),
            EngineConfig::new(Policy::new(CostModel::builtin())),
        )
        .unwrap();
        for size in [1usize, 100, 4096, 16 << 10, (64 << 10) - 1] {
            for _ in 0..4 {
                let mut b = alloc.alloc(size).unwrap();
                assert!(!b.is_pinned());
                assert!(b.as_slice().iter().all(|&x| x == 0), "size {size}");
                b.as_mut_slice().fill(0xa5);
            }
        }
    }
}
