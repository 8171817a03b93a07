//! Streams and events.

use std::ffi::c_uint;
use std::marker::PhantomData;

use crate::context::Context;
use crate::error::Result;
use crate::sys::*;

/// A CUDA stream: created (and destroyed on drop), or one of the default streams.
#[derive(Debug)]
pub struct Stream {
    ctx: Context,
    /// The `CUstream` handle as an integer (0 = legacy default stream).
    handle: usize,
    owned: bool,
}

impl Stream {
    /// `cuStreamCreate` with `CU_STREAM_DEFAULT` (synchronizes with the legacy default stream).
    pub fn new(ctx: &Context) -> Result<Stream> {
        Stream::with_flags(ctx, CU_STREAM_DEFAULT)
    }

    /// `cuStreamCreate` with `CU_STREAM_*` flags (e.g. `CU_STREAM_NON_BLOCKING`).
    pub fn with_flags(ctx: &Context, flags: c_uint) -> Result<Stream> {
        ctx.ensure_current()?;
        let driver = ctx.driver();
        let mut handle: CUstream = std::ptr::null_mut();
        // SAFETY: valid out-parameter; context current.
        driver.check("cuStreamCreate", unsafe {
            (driver.api().cuStreamCreate)(&mut handle, flags)
        })?;
        Ok(Stream {
            ctx: ctx.clone(),
            handle: handle as usize,
            owned: true,
        })
    }

    /// The default stream (handle NULL: the legacy default stream).
    pub fn default_stream(ctx: &Context) -> Stream {
        Stream {
            ctx: ctx.clone(),
            handle: 0,
            owned: false,
        }
    }

    /// The calling thread's per-thread default stream (`CU_STREAM_PER_THREAD`), as a
    /// [`PerThreadStream`], which cannot leave this thread.
    pub fn per_thread(ctx: &Context) -> PerThreadStream {
        PerThreadStream {
            inner: Stream {
                ctx: ctx.clone(),
                handle: CU_STREAM_PER_THREAD,
                owned: false,
            },
            _this_thread: PhantomData,
        }
    }

    /// The raw `CUstream`.
    pub fn handle(&self) -> CUstream {
        self.handle as CUstream
    }

    /// The context the stream belongs to.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// `cuStreamSynchronize`: waits for the work queued so far.
    pub fn synchronize(&self) -> Result<()> {
        self.ctx.ensure_current()?;
        let driver = self.ctx.driver();
        // SAFETY: a live stream handle; context current.
        driver.check("cuStreamSynchronize", unsafe {
            (driver.api().cuStreamSynchronize)(self.handle())
        })
    }

    /// `cuStreamQuery`: `true` when all queued work is done (`CUDA_ERROR_NOT_READY` is `false`).
    pub fn is_complete(&self) -> Result<bool> {
        self.ctx.ensure_current()?;
        let driver = self.ctx.driver();
        // SAFETY: a live stream handle; context current.
        let rc = unsafe { (driver.api().cuStreamQuery)(self.handle()) };
        if rc == CUDA_ERROR_NOT_READY {
            return Ok(false);
        }
        driver.check("cuStreamQuery", rc).map(|_| true)
    }

    /// `cuStreamWaitEvent`: later work on this stream waits for the event's latest record.
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        self.ctx.ensure_current()?;
        let driver = self.ctx.driver();
        // SAFETY: live stream and event handles; context current.
        driver.check("cuStreamWaitEvent", unsafe {
            (driver.api().cuStreamWaitEvent)(self.handle(), event.handle(), 0)
        })
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Stream {}
    impl Sealed for super::PerThreadStream {}
}

/// What work can be queued on: a [`Stream`] or a [`PerThreadStream`]. The asynchronous
/// copies and [`Event::record`] take either. Sealed: only this crate's types implement it.
pub trait AsStream: sealed::Sealed {
    /// The raw `CUstream`.
    fn handle(&self) -> CUstream;
}

impl AsStream for Stream {
    fn handle(&self) -> CUstream {
        Stream::handle(self)
    }
}

impl AsStream for PerThreadStream {
    fn handle(&self) -> CUstream {
        self.inner.handle()
    }
}

/// The calling thread's per-thread default stream (`CU_STREAM_PER_THREAD`), from
/// [`Stream::per_thread`].
///
/// The handle means "the per-thread default stream of whichever thread uses it": moved or
/// lent to another thread, it would silently name that thread's stream. So this type is
/// neither `Send` nor `Sync`, and it never hands out a `&Stream` (which is). It goes where
/// a [`Stream`] goes through [`AsStream`].
///
/// ```no_run
/// use pinwise_cuda::{Driver, Event, Stream};
///
/// let ctx = Driver::shared()?.device(0)?.primary_context()?;
/// let stream = Stream::per_thread(&ctx);
/// let done = Event::new(&ctx)?;
/// done.record(&stream)?;
/// stream.synchronize()?;
/// # Ok::<(), pinwise_cuda::CudaError>(())
/// ```
///
/// Moving it into another thread does not compile:
///
/// ```compile_fail,E0277
/// fn f(ctx: &pinwise_cuda::Context) {
///     let stream = pinwise_cuda::Stream::per_thread(ctx);
///     std::thread::spawn(move || stream.synchronize());
/// }
/// ```
///
/// Nor does lending it to a scoped thread:
///
/// ```compile_fail,E0277
/// fn f(ctx: &pinwise_cuda::Context) {
///     let stream = pinwise_cuda::Stream::per_thread(ctx);
///     std::thread::scope(|s| {
///         s.spawn(|| stream.synchronize());
///     });
/// }
/// ```
#[derive(Debug)]
pub struct PerThreadStream {
    inner: Stream,
    /// `*const ()` is neither `Send` nor `Sync`: the stream stays on its thread.
    _this_thread: PhantomData<*const ()>,
}

impl PerThreadStream {
    /// The raw `CUstream` (`CU_STREAM_PER_THREAD`).
    pub fn handle(&self) -> CUstream {
        self.inner.handle()
    }

    /// The context the stream belongs to.
    pub fn context(&self) -> &Context {
        self.inner.context()
    }

    /// `cuStreamSynchronize`: waits for the work this thread queued so far.
    pub fn synchronize(&self) -> Result<()> {
        self.inner.synchronize()
    }

    /// `cuStreamQuery`: `true` when all queued work is done.
    pub fn is_complete(&self) -> Result<bool> {
        self.inner.is_complete()
    }

    /// `cuStreamWaitEvent`: later work on this stream waits for the event's latest record.
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        self.inner.wait_event(event)
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let driver = self.ctx.driver().clone();
        let result = self.ctx.ensure_current().and_then(|_| {
            // SAFETY: the stream was created by `with_flags` and is destroyed once.
            driver.check("cuStreamDestroy_v2", unsafe {
                (driver.api().cuStreamDestroy_v2)(self.handle())
            })
        });
        if let Err(e) = result {
            tracing::warn!("destroying a stream: {e}");
        }
    }
}

/// A CUDA event: a marker recorded into a stream.
#[derive(Debug)]
pub struct Event {
    ctx: Context,
    handle: usize,
}

impl Event {
    /// `cuEventCreate` with `CU_EVENT_DEFAULT` (timing enabled).
    pub fn new(ctx: &Context) -> Result<Event> {
        Event::with_flags(ctx, CU_EVENT_DEFAULT)
    }

    /// `cuEventCreate` with `CU_EVENT_*` flags.
    pub fn with_flags(ctx: &Context, flags: c_uint) -> Result<Event> {
        ctx.ensure_current()?;
        let driver = ctx.driver();
        let mut handle: CUevent = std::ptr::null_mut();
        // SAFETY: valid out-parameter; context current.
        driver.check("cuEventCreate", unsafe {
            (driver.api().cuEventCreate)(&mut handle, flags)
        })?;
        Ok(Event {
            ctx: ctx.clone(),
            handle: handle as usize,
        })
    }

    /// The raw `CUevent`.
    pub fn handle(&self) -> CUevent {
        self.handle as CUevent
    }

    /// `cuEventRecord` into `stream`.
    pub fn record<S: AsStream + ?Sized>(&self, stream: &S) -> Result<()> {
        self.ctx.ensure_current()?;
        let driver = self.ctx.driver();
        // SAFETY: live event and stream handles; context current.
        driver.check("cuEventRecord", unsafe {
            (driver.api().cuEventRecord)(self.handle(), stream.handle())
        })
    }

    /// `cuEventQuery`: `true` once the stream reached the latest record (or it was never
    /// recorded).
    pub fn is_complete(&self) -> Result<bool> {
        let driver = self.ctx.driver();
        // SAFETY: a live event handle.
        let rc = unsafe { (driver.api().cuEventQuery)(self.handle()) };
        if rc == CUDA_ERROR_NOT_READY {
            return Ok(false);
        }
        driver.check("cuEventQuery", rc).map(|_| true)
    }

    /// `cuEventSynchronize`: waits for the latest record.
    pub fn synchronize(&self) -> Result<()> {
        let driver = self.ctx.driver();
        // SAFETY: a live event handle.
        driver.check("cuEventSynchronize", unsafe {
            (driver.api().cuEventSynchronize)(self.handle())
        })
    }

    /// `cuEventElapsedTime`: milliseconds from this event to `end` (both completed).
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        let driver = self.ctx.driver();
        let mut ms: f32 = 0.0;
        // SAFETY: valid out-parameter and live event handles.
        driver.check("cuEventElapsedTime", unsafe {
            (driver.api().cuEventElapsedTime)(&mut ms, self.handle(), end.handle())
        })?;
        Ok(ms)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let driver = self.ctx.driver();
        // SAFETY: the event was created by `with_flags` and is destroyed once.
        let rc = unsafe { (driver.api().cuEventDestroy_v2)(self.handle()) };
        if let Err(e) = driver.check("cuEventDestroy_v2", rc) {
            tracing::warn!("destroying an event: {e}");
        }
    }
}
