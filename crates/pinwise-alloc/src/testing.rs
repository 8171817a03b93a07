//! Test support: [`MockBackend`], a [`PinBackend`] in plain memory.
//!
//! **Test fixture.** Nothing here talks to a GPU and nothing measured on it is a GPU
//! figure. It exists so that pools, the budget, the predictors and the engine can be tested
//! exactly: it counts what is pinned (and the peak), refuses double registration like the
//! driver does, lets a test make pinning fail, and runs asynchronous copies *late* (a
//! stream's queued copies run only as its events are polled or the stream is
//! synchronized), so that reusing a block before its copies completed is caught.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::backend::{BackendError, DevicePtr, EventHandle, PinBackend, StreamHandle};

const PAGE: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PinKind {
    Allocated,
    Registered,
}

#[derive(Debug)]
enum StreamOp {
    Copy { dst: usize, src: usize, len: usize },
    Event(u64),
}

#[derive(Debug, Default)]
struct MockState {
    /// Page-locked ranges by start: (len, how).
    pinned: HashMap<usize, (usize, PinKind)>,
    pinned_bytes: u64,
    peak_pinned_bytes: u64,
    /// Device allocations by start: len.
    device: HashMap<u64, usize>,
    /// Queued work per stream.
    streams: HashMap<u64, VecDeque<StreamOp>>,
    /// Events: the stream of their last record, and whether that record has been reached.
    events: HashMap<u64, (u64, bool)>,
    next_event: u64,
    alloc_pinned_calls: u64,
    register_calls: u64,
    events_created: u64,
}

/// A [`PinBackend`] in plain host memory, for tests. See the module documentation.
#[derive(Debug, Default)]
pub struct MockBackend {
    state: Mutex<MockState>,
    fail_pinning: AtomicBool,
    fail_unpinning: AtomicBool,
    fail_events: AtomicBool,
    /// How many stream operations one `event_completed` poll runs (0 is taken as 1).
    progress_per_poll: AtomicU64,
}

impl MockBackend {
    /// A mock where pinning succeeds and each event poll runs one queued operation.
    pub fn new() -> Self {
        let m = MockBackend::default();
        m.progress_per_poll.store(1, Ordering::Relaxed);
        m
    }

    /// Makes every later `alloc_pinned` and `register` fail (`true`) or succeed (`false`).
    pub fn set_fail_pinning(&self, fail: bool) {
        self.fail_pinning.store(fail, Ordering::SeqCst);
    }

    /// Makes every later `free_pinned` and `unregister` fail (`true`: the memory stays
    /// page-locked) or behave (`false`).
    pub fn set_fail_unpinning(&self, fail: bool) {
        self.fail_unpinning.store(fail, Ordering::SeqCst);
    }

    /// Makes every later `create_event` and `record_event` fail (`true`) or succeed.
    pub fn set_fail_events(&self, fail: bool) {
        self.fail_events.store(fail, Ordering::SeqCst);
    }

    /// Bytes page-locked now (allocated pinned plus registered).
    pub fn pinned_bytes(&self) -> u64 {
        self.state.lock().pinned_bytes
    }

    /// The most bytes that were ever page-locked at once.
    pub fn peak_pinned_bytes(&self) -> u64 {
        self.state.lock().peak_pinned_bytes
    }

    /// Number of live page-locked ranges.
    pub fn pinned_ranges(&self) -> usize {
        self.state.lock().pinned.len()
    }

    /// Calls of `alloc_pinned` and of `register` that succeeded, in that order.
    pub fn pin_calls(&self) -> (u64, u64) {
        let s = self.state.lock();
        (s.alloc_pinned_calls, s.register_calls)
    }

    /// Events created so far.
    pub fn events_created(&self) -> u64 {
        self.state.lock().events_created
    }

    /// Whether `ptr..ptr+len` lies inside one page-locked range.
    pub fn is_pinned(&self, ptr: *const u8, len: usize) -> bool {
        let s = self.state.lock();
        let p = ptr as usize;
        s.pinned
            .iter()
            .any(|(&start, &(l, _))| p >= start && p + len <= start + l)
    }

    /// "Device" memory: host memory standing in for it. Freed with [`MockBackend::free_device`].
    pub fn alloc_device(&self, len: usize) -> DevicePtr {
        let v = vec![0u8; len.max(1)].into_boxed_slice();
        let addr = Box::into_raw(v) as *mut u8 as u64;
        self.state.lock().device.insert(addr, len.max(1));
        DevicePtr(addr)
    }

    /// Frees mock device memory.
    pub fn free_device(&self, dev: DevicePtr) {
        let len = self.state.lock().device.remove(&dev.0);
        if let Some(len) = len {
            // SAFETY: `dev` came from `alloc_device`, which leaked a boxed slice of `len` bytes
            // at this address; it was removed from the table, so it is freed once.
            unsafe {
                drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                    dev.0 as *mut u8,
                    len,
                )));
            }
        }
    }

    /// Reads `len` bytes of mock device memory.
    pub fn read_device(&self, dev: DevicePtr, len: usize) -> Vec<u8> {
        let s = self.state.lock();
        assert!(
            s.device
                .iter()
                .any(|(&a, &l)| dev.0 >= a && dev.0 + len as u64 <= a + l as u64),
            "read outside mock device memory"
        );
        // SAFETY: checked above that the range lies inside a live mock device allocation.
        unsafe { std::slice::from_raw_parts(dev.0 as *const u8, len).to_vec() }
    }

    /// Runs every queued operation of every stream.
    pub fn drain_all(&self) {
        let mut s = self.state.lock();
        let ids: Vec<u64> = s.streams.keys().copied().collect();
        for id in ids {
            run_stream(&mut s, id, usize::MAX);
        }
    }

    fn pin_failure(&self, op: &'static str) -> Result<(), BackendError> {
        if self.fail_pinning.load(Ordering::SeqCst) {
            Err(BackendError::new(
                op,
                "CUDA_ERROR_OUT_OF_MEMORY (mock: injected)",
            ))
        } else {
            Ok(())
        }
    }

    fn unpin_failure(&self, op: &'static str) -> Result<(), BackendError> {
        if self.fail_unpinning.load(Ordering::SeqCst) {
            Err(BackendError::new(op, "CUDA_ERROR_UNKNOWN (mock: injected)"))
        } else {
            Ok(())
        }
    }

    fn check_device(s: &MockState, dev: DevicePtr, len: usize) -> Result<(), BackendError> {
        if s.device
            .iter()
            .any(|(&a, &l)| dev.0 >= a && dev.0 + len as u64 <= a + l as u64)
        {
            Ok(())
        } else {
            Err(BackendError::new(
                "cuMemcpy",
                "CUDA_ERROR_INVALID_VALUE (mock: not device memory)",
            ))
        }
    }

    fn add_pinned(s: &mut MockState, start: usize, len: usize, kind: PinKind) {
        s.pinned.insert(start, (len, kind));
        s.pinned_bytes += len as u64;
        s.peak_pinned_bytes = s.peak_pinned_bytes.max(s.pinned_bytes);
    }
}

/// Runs up to `max_ops` queued operations of stream `id`.
fn run_stream(s: &mut MockState, id: u64, max_ops: usize) {
    for _ in 0..max_ops {
        let op = match s.streams.get_mut(&id).and_then(|q| q.pop_front()) {
            Some(op) => op,
            None => return,
        };
        match op {
            StreamOp::Copy { dst, src, len } => {
                // SAFETY: the caller of copy_htod/copy_dtoh promised both ranges stay valid
                // until the copy completes, which is now.
                unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
            }
            StreamOp::Event(e) => {
                if let Some(ev) = s.events.get_mut(&e) {
                    ev.1 = true;
                }
            }
        }
    }
}

impl PinBackend for MockBackend {
    fn describe(&self) -> String {
        "mock backend (test fixture, no GPU)".to_string()
    }

    fn is_fixture(&self) -> bool {
        true
    }

    fn alloc_pinned(&self, len: usize, _flags: u32) -> Result<*mut u8, BackendError> {
        self.pin_failure("cuMemHostAlloc")?;
        let len = len.max(1).next_multiple_of(PAGE);
        let layout = std::alloc::Layout::from_size_align(len, PAGE)
            .map_err(|e| BackendError::new("cuMemHostAlloc", e))?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        if p.is_null() {
            return Err(BackendError::new(
                "cuMemHostAlloc",
                "CUDA_ERROR_OUT_OF_MEMORY",
            ));
        }
        let mut s = self.state.lock();
        s.alloc_pinned_calls += 1;
        MockBackend::add_pinned(&mut s, p as usize, len, PinKind::Allocated);
        Ok(p)
    }

    unsafe fn free_pinned(&self, ptr: *mut u8) -> Result<(), BackendError> {
        self.unpin_failure("cuMemFreeHost")?;
        let mut s = self.state.lock();
        match s.pinned.get(&(ptr as usize)).copied() {
            Some((len, PinKind::Allocated)) => {
                s.pinned.remove(&(ptr as usize));
                s.pinned_bytes -= len as u64;
                drop(s);
                let layout = std::alloc::Layout::from_size_align(len, PAGE)
                    .expect("layout was valid at allocation");
                // SAFETY: allocated by alloc_pinned with this layout; removed from the table.
                unsafe { std::alloc::dealloc(ptr, layout) };
                Ok(())
            }
            _ => Err(BackendError::new(
                "cuMemFreeHost",
                "CUDA_ERROR_INVALID_VALUE (mock: not allocated pinned)",
            )),
        }
    }

    unsafe fn register(&self, ptr: *mut u8, len: usize) -> Result<(), BackendError> {
        self.pin_failure("cuMemHostRegister")?;
        let p = ptr as usize;
        if !p.is_multiple_of(PAGE) || !len.is_multiple_of(PAGE) || len == 0 {
            return Err(BackendError::new(
                "cuMemHostRegister",
                "CUDA_ERROR_INVALID_VALUE (mock: not page-aligned)",
            ));
        }
        let mut s = self.state.lock();
        if s.pinned
            .iter()
            .any(|(&start, &(l, _))| p < start + l && start < p + len)
        {
            return Err(BackendError::new(
                "cuMemHostRegister",
                "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
            ));
        }
        s.register_calls += 1;
        MockBackend::add_pinned(&mut s, p, len, PinKind::Registered);
        Ok(())
    }

    unsafe fn unregister(&self, ptr: *mut u8) -> Result<(), BackendError> {
        self.unpin_failure("cuMemHostUnregister")?;
        let mut s = self.state.lock();
        match s.pinned.get(&(ptr as usize)).copied() {
            Some((len, PinKind::Registered)) => {
                s.pinned.remove(&(ptr as usize));
                s.pinned_bytes -= len as u64;
                Ok(())
            }
            _ => Err(BackendError::new(
                "cuMemHostUnregister",
                "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
            )),
        }
    }

    fn create_event(&self) -> Result<EventHandle, BackendError> {
        if self.fail_events.load(Ordering::SeqCst) {
            return Err(BackendError::new(
                "cuEventCreate",
                "CUDA_ERROR_OUT_OF_MEMORY (mock: injected)",
            ));
        }
        let mut s = self.state.lock();
        s.next_event += 1;
        s.events_created += 1;
        let id = s.next_event;
        s.events.insert(id, (0, true));
        Ok(EventHandle(id))
    }

    fn destroy_event(&self, event: EventHandle) {
        self.state.lock().events.remove(&event.0);
    }

    fn record_event(&self, event: EventHandle, stream: StreamHandle) -> Result<(), BackendError> {
        if self.fail_events.load(Ordering::SeqCst) {
            return Err(BackendError::new(
                "cuEventRecord",
                "CUDA_ERROR_LAUNCH_FAILED (mock: injected)",
            ));
        }
        let mut s = self.state.lock();
        match s.events.get_mut(&event.0) {
            Some(ev) => *ev = (stream.0, false),
            None => {
                return Err(BackendError::new(
                    "cuEventRecord",
                    "CUDA_ERROR_INVALID_HANDLE",
                ))
            }
        }
        s.streams
            .entry(stream.0)
            .or_default()
            .push_back(StreamOp::Event(event.0));
        Ok(())
    }

    fn event_completed(&self, event: EventHandle) -> Result<bool, BackendError> {
        let mut s = self.state.lock();
        let (stream, done) = *s
            .events
            .get(&event.0)
            .ok_or_else(|| BackendError::new("cuEventQuery", "CUDA_ERROR_INVALID_HANDLE"))?;
        if done {
            return Ok(true);
        }
        let per_poll = self.progress_per_poll.load(Ordering::Relaxed).max(1) as usize;
        run_stream(&mut s, stream, per_poll);
        Ok(s.events.get(&event.0).is_some_and(|e| e.1))
    }

    fn synchronize_event(&self, event: EventHandle) -> Result<(), BackendError> {
        let mut s = self.state.lock();
        let (stream, done) = *s
            .events
            .get(&event.0)
            .ok_or_else(|| BackendError::new("cuEventSynchronize", "CUDA_ERROR_INVALID_HANDLE"))?;
        while !done && !s.events.get(&event.0).is_some_and(|e| e.1) {
            if s.streams.get(&stream).is_none_or(|q| q.is_empty()) {
                break;
            }
            run_stream(&mut s, stream, 1);
        }
        Ok(())
    }

    fn synchronize_stream(&self, stream: StreamHandle) -> Result<(), BackendError> {
        run_stream(&mut self.state.lock(), stream.0, usize::MAX);
        Ok(())
    }

    unsafe fn copy_htod(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
        stream: Option<StreamHandle>,
    ) -> Result<(), BackendError> {
        let mut s = self.state.lock();
        MockBackend::check_device(&s, dst, len)?;
        match stream {
            None => {
                // SAFETY: the caller promised `src` is readable for `len`; `dst` was checked.
                unsafe { std::ptr::copy(src, dst.0 as *mut u8, len) };
            }
            Some(st) => s
                .streams
                .entry(st.0)
                .or_default()
                .push_back(StreamOp::Copy {
                    dst: dst.0 as usize,
                    src: src as usize,
                    len,
                }),
        }
        Ok(())
    }

    unsafe fn copy_dtoh(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        len: usize,
        stream: Option<StreamHandle>,
    ) -> Result<(), BackendError> {
        let mut s = self.state.lock();
        MockBackend::check_device(&s, src, len)?;
        match stream {
            None => {
                // SAFETY: the caller promised `dst` is writable for `len`; `src` was checked.
                unsafe { std::ptr::copy(src.0 as *const u8, dst, len) };
            }
            Some(st) => s
                .streams
                .entry(st.0)
                .or_default()
                .push_back(StreamOp::Copy {
                    dst: dst as usize,
                    src: src.0 as usize,
                    len,
                }),
        }
        Ok(())
    }
}

impl Drop for MockBackend {
    fn drop(&mut self) {
        let s = self.state.get_mut();
        let dev: Vec<(u64, usize)> = s.device.drain().collect();
        for (addr, len) in dev {
            // SAFETY: each entry is a boxed slice leaked by alloc_device and still owned here.
            unsafe {
                drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                    addr as *mut u8,
                    len,
                )));
            }
        }
    }
}
