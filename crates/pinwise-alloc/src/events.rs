//! A pool of completion events, so that freeing a block used by asynchronous copies does
//! not create a CUDA event every time.
//!
//! Events are created only when the pool is empty, and never while any lock is held (the
//! pool's own lock is released before `create_event` is called).

use parking_lot::Mutex;

use crate::backend::{BackendError, EventHandle, PinBackend};

/// Idle events ready to be recorded. See the module documentation.
#[derive(Debug, Default)]
pub struct EventPool {
    idle: Mutex<Vec<EventHandle>>,
}

impl EventPool {
    /// An empty pool.
    pub fn new() -> Self {
        Self::default()
    }

    /// An idle event, or a new one from `backend` when none is idle.
    pub fn take(&self, backend: &dyn PinBackend) -> Result<EventHandle, BackendError> {
        let reused = self.idle.lock().pop();
        match reused {
            Some(e) => Ok(e),
            None => backend.create_event(),
        }
    }

    /// Returns events whose records completed, for reuse.
    pub fn put_back(&self, events: impl IntoIterator<Item = EventHandle>) {
        self.idle.lock().extend(events);
    }

    /// Number of idle events.
    pub fn idle_count(&self) -> usize {
        self.idle.lock().len()
    }

    /// Destroys all idle events (at teardown).
    pub fn destroy_all(&self, backend: &dyn PinBackend) {
        let events = std::mem::take(&mut *self.idle.lock());
        for e in events {
            backend.destroy_event(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::MockBackend;

    #[test]
    fn events_are_reused() {
        let b = MockBackend::new();
        let pool = EventPool::new();
        let e1 = pool.take(&b).unwrap();
        let e2 = pool.take(&b).unwrap();
        assert_ne!(e1, e2);
        pool.put_back([e1, e2]);
        let _ = pool.take(&b).unwrap();
        let _ = pool.take(&b).unwrap();
        assert_eq!(b.events_created(), 2, "no new event while idle ones exist");
        pool.destroy_all(&b);
        assert_eq!(pool.idle_count(), 0);
    }
}
