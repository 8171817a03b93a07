//! `pinwise run --pool`: the program's large pinned requests served from the node's pinned
//! pool (`pinwise pool serve`, crate pinwise-pool), and the copies on them done by the
//! service, so that their pages are pinned and mapped on the GPU once, by the service.
//!
//! - **Which requests** ([`wants`]; core's `decide::rules::from_node_pool` decides and says
//!   why): pinned requests (`cuMemHostAlloc`, `cuMemAllocHost`, their runtime forms) of at
//!   least `PINWISE_POOL_MIN` bytes (8 MiB by default) whose flags ask for nothing but
//!   `PORTABLE`. Smaller ones stay with the in-process allocator (a copy through the service
//!   costs about 18 us more, and small buffers' page tables are next to nothing). pinwise's
//!   promotions (the program's pageable buffers registered in place) stay in-process: they
//!   are the program's memory at the program's addresses, not a buffer pinwise could hand
//!   out from elsewhere.
//! - **The connection** is made at the first request that qualifies, waiting at most 1 s;
//!   every later answer at most 20 s (a hung service is given up, not waited for). Its
//!   socket is close-on-exec.
//! - **A copy** has a deadline to start (5 s) and two answers (see `pinwise_pool::proto`):
//!   the service answers `Started` and then never starts a copy past its deadline. A copy not
//!   started in time is made here (`copies_not_started`), safely: the service will never make
//!   it; the connection is given up (it is out of step). A started copy is waited for, up to
//!   120 s: the service ends itself when a copy of its runs past 60 s (its copy limit; that
//!   ends the copy with its CUDA context), and a service that dies closes the connection, so
//!   the copy is then made here (`copies_stuck` past 120 s: only a frozen service, for
//!   instance one stopped by a signal, gets there; its GPU copy, already queued, has long
//!   finished by then, unless the service was frozen between its clock check and queueing
//!   the copy, the one window this bound does not close).
//! - **Copies** whose host side lies in a pool buffer (one-dimensional host-to-device and
//!   device-to-host) go to the service: the device allocation's CUDA IPC handle is sent
//!   once (`DeviceCache`), the whole context is synchronized first (the work a copy is
//!   ordered after may be on another stream: the legacy default stream and blocking streams
//!   wait for each other), and the service answers when the bytes arrived. So an
//!   **asynchronous copy on a pool buffer is synchronous**: done when the call returns
//!   (`async_made_sync` counts them).
//! - **Every failure falls back** to what the program would get without the pool, and is
//!   counted ([`pinwise_core::pool_use::PoolUseStats`]): no service, a refusal (budget,
//!   capacity) or a lost connection serve the request in-process; a copy the service cannot
//!   do (no IPC handle, as for VMM or stream-ordered device memory; a 2D/3D copy; a stream
//!   being captured; a lost connection) or a pointer query about the buffer registers the
//!   buffer in this process (`cuMemHostRegister`, charged to the budget as the program's
//!   own pinned memory, as plain CUDA would have locked it), and its copies go to this
//!   process's CUDA from then on. The buffer's bytes stay where they are (the mapping
//!   outlives the service), so nothing is lost.
//! - The buffers are `MADV_DONTFORK`, like CUDA's pinned memory: a forked child never
//!   shares them (it would write into its parent's memory). A forked child never uses the
//!   parent's connection: the fork generation (`recorder::GENERATION`, bumped by the
//!   `pthread_atfork` child handler) makes the parent's pool invisible to it, the handler
//!   closes the inherited socket (so the service sees the parent's connection close when
//!   the parent does), and the child connects on its own if it asks for pinned memory.
//! - **Locks**: the buffer table is locked only to look a buffer up (entries are shared,
//!   `Arc`): registering a buffer here (a fallback) holds only that buffer's own lock, and a
//!   service call holds the connection, never the table, so copies and queries on other
//!   buffers go on. A buffer freed while a call still uses it stays mapped until that call
//!   lets go.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use pinwise_core::decide::rules;
use pinwise_core::pool_use::PoolUseStats;
use pinwise_core::Direction;
use pinwise_cuda::sys::{
    pfn, CUdeviceptr, CUipcMemHandle, CUresult, CUDA_SUCCESS, CU_STREAM_PER_THREAD,
};
use pinwise_cuda::{DevicePtr, IpcMemHandle};
use pinwise_pool::{DeviceCache, PoolBuffer, PoolClient, PoolError};

use crate::backend::StreamCapture;
use crate::decode::HostCopy;
use crate::guard::Inside;
use crate::recorder::GENERATION;
use crate::state::State;

/// How long connecting and the service's welcome may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long any later answer may take (an allocation the service pins may take seconds).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a copy waits for the service to start it (its deadline): the service starts a
/// copy as soon as it reads the request, so only a stopped or hung service misses it.
pub const COPY_START_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a copy the service started may take (a copy of tens of GiB takes seconds):
/// longer than the service's own copy limit, past which a running service ends itself.
pub const STARTED_COPY_LIMIT: Duration = pinwise_pool::DEFAULT_STARTED_LIMIT;
/// How long the statistics written at exit wait for the service's accounting.
pub const STATS_TIMEOUT: Duration = Duration::from_millis(500);

/// Whether a pinned request of `size` bytes with CUDA `flags` goes to the pool when the
/// pool's threshold is `min_bytes`: core's rule ([`rules::from_node_pool`], which says why).
pub fn wants(size: usize, flags: u32, min_bytes: u64) -> bool {
    rules::from_node_pool(flags, size, min_bytes)
}

/// Where a pool buffer's copies go when the service does not do them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Here {
    /// Nowhere yet: the service does them.
    No,
    /// Registered in this process (in context `context`): copies go to this CUDA.
    Registered { context: usize },
    /// Registering it here failed as well: copies go to this CUDA as pageable copies.
    Pageable,
    /// Freed by the program (a copy still holding the entry goes to this CUDA as it is).
    Freed,
}

/// One pool buffer handed to the program. Shared (`Arc`) between the table and the calls
/// working on it, so that no table lock is held across a registration or a service call:
/// its mapping lives until the last of them lets go.
struct Entry {
    buf: PoolBuffer,
    /// Bytes the program asked for.
    size: usize,
    /// The flags it asked with.
    flags: u32,
    /// Where its copies go; locked while it is registered here or unregistered (only this
    /// buffer's calls wait for that).
    here: Mutex<Here>,
}

/// The connection, tried once.
enum Conn {
    NotTried,
    Up {
        client: PoolClient,
        devices: DeviceCache,
    },
    Down,
}

/// What a copy hook does with a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Not on a pool buffer: the usual way.
    NotPool,
    /// Done by the service (the bytes have arrived).
    Done,
    /// On a pool buffer, to be forwarded to this process's CUDA; `pinned`: registered here.
    Here { pinned: bool },
}

/// The counters behind [`PoolUseStats`].
#[derive(Default)]
struct Counters {
    buffers: AtomicU64,
    bytes: AtomicU64,
    bytes_now: AtomicU64,
    bytes_peak: AtomicU64,
    alloc_fallbacks: AtomicU64,
    copies: AtomicU64,
    copy_bytes: AtomicU64,
    async_made_sync: AtomicU64,
    buffers_registered_here: AtomicU64,
    buffers_left_pageable: AtomicU64,
    copies_here: AtomicU64,
    ipc_failures: AtomicU64,
    refusals: AtomicU64,
    copies_not_started: AtomicU64,
    copies_stuck: AtomicU64,
    connection_lost: AtomicBool,
    service_clients_max: AtomicU64,
    service_deduplicated_bytes: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// The pool as this process uses it.
pub struct PoolUse {
    socket: PathBuf,
    min_bytes: u64,
    /// The fork generation ([`GENERATION`]) it belongs to: a forked child never uses its
    /// parent's (the connection is the parent's), it makes its own.
    generation: u64,
    conn: Mutex<Conn>,
    /// Why the pool is not used (first reason).
    reason: Mutex<Option<String>>,
    buffers: RwLock<BTreeMap<usize, Arc<Entry>>>,
    /// Live buffers, and the span of addresses they ever had (a copy outside is not
    /// looked up).
    live: AtomicUsize,
    lo: AtomicUsize,
    hi: AtomicUsize,
    c: Counters,
}

/// This process's pool (null: none made yet). A leaked `Box`: never freed (a forked
/// child leaves its parent's alone: its locks may be held by threads the child lacks).
static POOL: AtomicPtr<PoolUse> = AtomicPtr::new(std::ptr::null_mut());
/// The descriptor of the live connection (-1: none), for a forked child to close: the
/// service must see the parent's connection close when the parent does.
static CONN_FD: AtomicI32 = AtomicI32::new(-1);

/// The pool of this process, if made, and of this fork generation.
#[inline]
fn current() -> Option<&'static PoolUse> {
    // SAFETY: a non-null pointer is a leaked `Box<PoolUse>`, valid for the process's life.
    let p = unsafe { POOL.load(Ordering::Acquire).as_ref()? };
    (p.generation == GENERATION.load(Ordering::Acquire)).then_some(p)
}

/// The pool, when `--pool` configured one (made on first use; in a forked child a fresh
/// one, which connects on its own when it needs to).
pub fn get(st: &State) -> Option<&'static PoolUse> {
    if let Some(p) = current() {
        return Some(p);
    }
    let socket = st.config.pool_socket.clone()?;
    let seen = POOL.load(Ordering::Acquire);
    let fresh = Box::into_raw(Box::new(PoolUse {
        socket,
        min_bytes: st.config.pool_min_bytes,
        generation: GENERATION.load(Ordering::Acquire),
        conn: Mutex::new(Conn::NotTried),
        reason: Mutex::new(None),
        buffers: RwLock::new(BTreeMap::new()),
        live: AtomicUsize::new(0),
        lo: AtomicUsize::new(usize::MAX),
        hi: AtomicUsize::new(0),
        c: Counters::default(),
    }));
    if POOL
        .compare_exchange(seen, fresh, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        // Another thread made it first: ours never connected, so it can go.
        // SAFETY: `fresh` came from `Box::into_raw` above and was never shared.
        drop(unsafe { Box::from_raw(fresh) });
    }
    current()
}

/// In a forked child (`pthread_atfork`; async-signal-safe: atomics and `close`): the
/// parent's pool is left alone, leaked, and its connection's descriptor closed here, so
/// that the service sees the connection close when the parent closes it. A child that
/// asks for pinned memory makes its own connection ([`get`]).
pub fn forget_in_child() {
    POOL.store(std::ptr::null_mut(), Ordering::Release);
    let fd = CONN_FD.swap(-1, Ordering::AcqRel);
    if fd >= 0 {
        // SAFETY: the parent's connection, inherited; nothing in the child uses it (the
        // parent's pool is never touched here again).
        unsafe { libc::close(fd) };
    }
}

/// The pool if one exists already and has live buffers (cheap: for the copy hooks; two
/// atomic loads, no system call).
#[inline]
fn with_buffers() -> Option<&'static PoolUse> {
    current().filter(|p| p.live.load(Ordering::Acquire) != 0)
}

/// Whether `[host, host + span)` may touch a pool buffer (one atomic load while none is
/// live).
#[inline]
pub fn touches(host: usize, span: usize) -> bool {
    let Some(p) = with_buffers() else {
        return false;
    };
    host < p.hi.load(Ordering::Acquire)
        && host.saturating_add(span.max(1)) > p.lo.load(Ordering::Acquire)
        && p.entry_at(host, span).is_some()
}

/// The flags the program asked for, if `ptr` lies in a pool buffer.
pub fn flags_of(ptr: usize) -> Option<u32> {
    with_buffers()?.entry_at(ptr, 1).map(|(_, e)| e.flags)
}

/// The start and size of the pool buffer holding `ptr`, as the program asked for it.
pub fn range_of(ptr: usize) -> Option<(usize, usize)> {
    with_buffers()?
        .entry_at(ptr, 1)
        .map(|(start, e)| (start, e.size))
}

impl PoolUse {
    /// The buffer whose mapping overlaps `[host, host + span)`, and its start (the table
    /// is locked only to look it up).
    fn entry_at(&self, host: usize, span: usize) -> Option<(usize, Arc<Entry>)> {
        let end = host.saturating_add(span.max(1));
        let b = self.buffers.read();
        b.range(..end)
            .next_back()
            .filter(|(&start, e)| start + e.buf.len() > host)
            .map(|(&start, e)| (start, e.clone()))
    }

    fn give_up(&self, why: String) {
        self.reason.lock().get_or_insert(why);
    }

    /// The connection lost (or a call timed out): the pool is given up for the rest of the
    /// run. `conn` is the locked connection.
    fn lost(&self, conn: &mut Conn, e: &PoolError) {
        if let Conn::Up { client, devices } = conn {
            // No forked child closes it from now on (it may be closed and its number
            // reused once the buffers are freed).
            CONN_FD.store(-1, Ordering::SeqCst);
            // Shut down first: closing the device openings then fails at once instead of
            // waiting for a service that does not answer.
            client.shutdown();
            devices.clear();
        }
        *conn = Conn::Down;
        self.c.connection_lost.store(true, Ordering::Relaxed);
        self.give_up(format!("the connection was lost: {e}"));
        tracing::warn!("pinwise pool: {e}; falling back to in-process pinning");
    }

    /// Connects if not yet tried; whether the connection is up.
    fn ensure_connected(&self, conn: &mut Conn) -> bool {
        if let Conn::NotTried = conn {
            match PoolClient::connect_with_timeouts(
                &self.socket,
                CONNECT_TIMEOUT,
                Some(CALL_TIMEOUT),
            ) {
                Ok(client) => {
                    client.set_copy_timeouts(Some(COPY_START_TIMEOUT), Some(STARTED_COPY_LIMIT));
                    if let Ok(s) = client.stats() {
                        self.note_service(&s);
                    }
                    CONN_FD.store(client.socket_fd(), Ordering::SeqCst);
                    *conn = Conn::Up {
                        client,
                        devices: DeviceCache::default(),
                    };
                }
                Err(e) => {
                    tracing::info!("pinwise pool: {e}; pinning in-process");
                    self.give_up(e.to_string());
                    *conn = Conn::Down;
                }
            }
        }
        matches!(conn, Conn::Up { .. })
    }

    fn note_service(&self, s: &pinwise_pool::Stats) {
        self.c
            .service_clients_max
            .fetch_max(s.clients, Ordering::Relaxed);
        self.c
            .service_deduplicated_bytes
            .store(s.deduplicated_bytes, Ordering::Relaxed);
    }

    /// A pool buffer for a pinned request the pool [`wants`]; `None`: serve it in-process
    /// (counted).
    fn alloc(&self, size: usize, flags: u32) -> Option<usize> {
        let _inside = Inside::enter();
        let mut conn = self.conn.lock();
        if !self.ensure_connected(&mut conn) {
            bump(&self.c.alloc_fallbacks);
            return None;
        }
        let Conn::Up { client, .. } = &mut *conn else {
            return None;
        };
        let buf = match client.alloc(size) {
            Ok(b) => b,
            Err(e) => {
                bump(&self.c.alloc_fallbacks);
                match e {
                    PoolError::Refused { .. } => {
                        bump(&self.c.refusals);
                        tracing::info!("pinwise pool: {e}; pinning this request in-process");
                    }
                    e => self.lost(&mut conn, &e),
                }
                return None;
            }
        };
        drop(conn);
        let start = buf.as_slice().as_ptr() as usize;
        let len = buf.len();
        // SAFETY: the buffer's own mapping, `len` bytes; DONTFORK changes only what a
        // forked child inherits.
        unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_DONTFORK) };
        let entry = Arc::new(Entry {
            buf,
            size,
            flags,
            here: Mutex::new(Here::No),
        });
        self.buffers.write().insert(start, entry);
        self.lo.fetch_min(start, Ordering::AcqRel);
        self.hi.fetch_max(start + len, Ordering::AcqRel);
        self.live.fetch_add(1, Ordering::AcqRel);
        bump(&self.c.buffers);
        self.c.bytes.fetch_add(len as u64, Ordering::Relaxed);
        let now = self.c.bytes_now.fetch_add(len as u64, Ordering::AcqRel) + len as u64;
        self.c.bytes_peak.fetch_max(now, Ordering::Relaxed);
        Some(start)
    }

    /// Registers pool buffer `e` (at `start`) in this process (fallback): its copies go to
    /// this process's CUDA from now on. Returns whether it is pinned here. Only `e`'s own
    /// lock is held while registering: copies and queries on other buffers go on.
    fn go_here(&self, st: &State, start: usize, e: &Entry) -> bool {
        let mut here = e.here.lock();
        match *here {
            Here::Registered { .. } => return true,
            Here::Pageable | Here::Freed => return false,
            Here::No => {}
        }
        let len = e.buf.len();
        let registered = st.pinning_or_start().and_then(|p| {
            p.before_program_pins(len as u64, &st.stats, &st.recorder);
            // SAFETY: the buffer's own mapping of `len` bytes, mapped while `e` lives and
            // unregistered before the table lets go of it ([`PoolUse::free`], which waits
            // for this lock).
            let rc = unsafe { p.driver.register(start, len) };
            if rc != CUDA_SUCCESS {
                tracing::info!(
                    error = %p.driver.error_text(rc),
                    "pinwise pool: registering a pool buffer here failed; its copies are pageable"
                );
                return None;
            }
            p.outside_locked(start, len);
            Some(p.driver.current_context())
        });
        *here = match registered {
            Some(context) => {
                bump(&self.c.buffers_registered_here);
                Here::Registered { context }
            }
            None => {
                bump(&self.c.buffers_left_pageable);
                Here::Pageable
            }
        };
        registered.is_some()
    }

    /// Frees pool buffer `start` (unregistering it here first if it was registered). The
    /// buffer goes back to the pool when the last call using it lets go.
    fn free(&self, st: &State, start: usize) -> bool {
        let Some(e) = self.buffers.write().remove(&start) else {
            return false;
        };
        let len = e.buf.len();
        {
            // Waits for a registration of this buffer under way.
            let mut here = e.here.lock();
            if let (Here::Registered { context }, Some(p)) = (*here, st.pinning()) {
                let taken = p.outside_releasing(start);
                // SAFETY: registered by `go_here` at this start, unregistered once (the
                // state is `Freed` from now on).
                let rc = unsafe { p.driver.unregister(start, context) };
                p.outside_released(start, taken, rc == CUDA_SUCCESS);
            }
            *here = Here::Freed;
        }
        self.live.fetch_sub(1, Ordering::AcqRel);
        let _ = self
            .c
            .bytes_now
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(len as u64))
            });
        // The last holder's drop unmaps it and sends the free request on the connection
        // (a connection given up fails it at once: the service freed it already).
        let _inside = Inside::enter();
        drop(e);
        true
    }

    /// Routes copy `c` (which [`touches`] a pool buffer).
    fn route(&self, st: &State, c: &HostCopy) -> Route {
        let Some((start, e)) = self.entry_at(c.host, c.span) else {
            return Route::NotPool;
        };
        let r = self.route_on(st, c, start, &e);
        // The last holder of a buffer freed meanwhile unmaps it and tells the service.
        let _inside = Inside::enter();
        drop(e);
        r
    }

    /// Routes copy `c` on pool buffer `e` (at `start`).
    fn route_on(&self, st: &State, c: &HostCopy, start: usize, e: &Entry) -> Route {
        let here = *e.here.lock();
        match here {
            Here::Registered { .. } => return self.here(true),
            Here::Pageable | Here::Freed => return self.here(false),
            Here::No => {}
        }
        if c.direction == Direction::HtoH {
            // Host memory to host memory: nothing for the service or the GPU to do.
            return self.here(false);
        }
        let len = e.buf.len();
        let inside = c.host >= start && c.host + c.span <= start + len;
        let linear = c.bytes == c.span && c.device != 0;
        let dir_ok = matches!(c.direction, Direction::HtoD | Direction::DtoH);
        if !(inside && linear && dir_ok) {
            return self.fall_back(st, start, e);
        }
        let Some(p) = st.pinning_or_start() else {
            return self.fall_back(st, start, e);
        };
        let stream = c.stream.map(|s| {
            if c.per_thread && s == 0 {
                CU_STREAM_PER_THREAD
            } else {
                s
            }
        });
        // The copy must come after the work issued before it. Its own stream is not
        // enough: an operation on the legacy default stream waits for every blocking
        // stream, and a blocking stream (the per-thread default one included) for the
        // legacy stream, so the work the copy is ordered after may be on another stream.
        // The whole context is waited for (the synchronous forms' rule too). A stream being
        // captured cannot be waited for (nor could the copy be captured), and waiting for
        // the context would break a capture open on another stream: registered here
        // instead.
        if let Some(s) = stream {
            if p.driver.capture_of(s) != StreamCapture::None {
                return self.fall_back(st, start, e);
            }
        }
        if !crate::capture::none_open() {
            return self.fall_back(st, start, e);
        }
        let synced = p.driver.relaxed(ctx_synchronize);
        if synced != CUDA_SUCCESS {
            // The program's stream is in error: its own CUDA answers the copy.
            return self.fall_back(st, start, e);
        }
        let _inside = Inside::enter();
        let mut conn = self.conn.lock();
        let Conn::Up { client, devices } = &mut *conn else {
            drop(conn);
            return self.fall_back(st, start, e);
        };
        let offset = c.host - start;
        let done = devices
            .get_with(client, DevicePtr(c.device), describe_device)
            .and_then(|dev| match c.direction {
                Direction::HtoD => {
                    client.copy_to_device(&e.buf, offset, dev, DevicePtr(c.device), c.bytes)
                }
                _ => client.copy_from_device(&e.buf, offset, dev, DevicePtr(c.device), c.bytes),
            });
        match done {
            Ok(()) => {
                drop(conn);
                bump(&self.c.copies);
                self.c
                    .copy_bytes
                    .fetch_add(c.bytes as u64, Ordering::Relaxed);
                if stream.is_some() {
                    bump(&self.c.async_made_sync);
                }
                Route::Done
            }
            Err(err) => {
                // Every failure here leaves no copy of the service's to come: refused or
                // failed (ended), not started by its deadline (never will be: see
                // pinwise_pool::proto), the service gone, or stuck past the limit (see the
                // module documentation). The copy is made here.
                match &err {
                    PoolError::Cuda(_) => bump(&self.c.ipc_failures),
                    PoolError::Refused { .. } => bump(&self.c.refusals),
                    PoolError::NotStarted(_) => {
                        bump(&self.c.copies_not_started);
                        self.lost(&mut conn, &err);
                    }
                    PoolError::Stuck(_) => {
                        bump(&self.c.copies_stuck);
                        self.lost(&mut conn, &err);
                    }
                    _ => self.lost(&mut conn, &err),
                }
                tracing::debug!("pinwise pool: a copy fell back: {err}");
                drop(conn);
                self.fall_back(st, start, e)
            }
        }
    }

    fn here(&self, pinned: bool) -> Route {
        bump(&self.c.copies_here);
        Route::Here { pinned }
    }

    fn fall_back(&self, st: &State, start: usize, e: &Entry) -> Route {
        let pinned = self.go_here(st, start, e);
        self.here(pinned)
    }

    /// The counters, asking the service for its client count if the connection is free.
    fn stats(&self) -> PoolUseStats {
        // Never waits for the connection: another thread may be in a service call (up to
        // the call timeout), and these figures are written at exit and at each flush. When
        // it is busy, the connection is up and the service's own figures are the last ones
        // noted.
        let mut connected = self.c.buffers.load(Ordering::Relaxed) > 0;
        if let Some(mut conn) = self.conn.try_lock() {
            if let Conn::Up { client, .. } = &mut *conn {
                let _inside = Inside::enter();
                // Written at exit too: a hung service must not hold the exit up for long.
                let asked = client
                    .set_call_timeout(Some(STATS_TIMEOUT))
                    .and_then(|()| client.stats())
                    .and_then(|s| client.set_call_timeout(Some(CALL_TIMEOUT)).map(|()| s));
                match asked {
                    Ok(s) => self.note_service(&s),
                    Err(e) => self.lost(&mut conn, &e),
                }
            }
            connected |= matches!(*conn, Conn::Up { .. });
        } else {
            connected = true;
        }
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let c = &self.c;
        PoolUseStats {
            configured: true,
            connected,
            unavailable_reason: self.reason.lock().clone(),
            buffers: r(&c.buffers),
            bytes: r(&c.bytes),
            bytes_peak: r(&c.bytes_peak),
            alloc_fallbacks: r(&c.alloc_fallbacks),
            copies: r(&c.copies),
            copy_bytes: r(&c.copy_bytes),
            async_made_sync: r(&c.async_made_sync),
            buffers_registered_here: r(&c.buffers_registered_here),
            buffers_left_pageable: r(&c.buffers_left_pageable),
            copies_here: r(&c.copies_here),
            ipc_failures: r(&c.ipc_failures),
            refusals: r(&c.refusals),
            copies_not_started: r(&c.copies_not_started),
            copies_stuck: r(&c.copies_stuck),
            connection_lost: c.connection_lost.load(Ordering::Relaxed),
            service_clients_max: r(&c.service_clients_max),
            service_deduplicated_bytes: r(&c.service_deduplicated_bytes),
        }
    }
}

/// A pinned request: a pool buffer if the pool [`wants`] it and can serve it.
pub fn alloc(st: &State, size: usize, flags: u32) -> Option<usize> {
    let p = get(st)?;
    if !wants(size, flags, p.min_bytes) {
        return None;
    }
    p.alloc(size, flags)
}

/// `cuMemFreeHost(ptr)`: whether `ptr` was a pool buffer (now freed).
pub fn free(st: &State, ptr: usize) -> bool {
    with_buffers().is_some_and(|p| p.free(st, ptr))
}

/// Routes a copy whose host side [`touches`] a pool buffer.
pub fn route(st: &State, c: &HostCopy) -> Route {
    match with_buffers() {
        Some(p) => p.route(st, c),
        None => Route::NotPool,
    }
}

/// Before a pointer query about `ptr`: a pool buffer is registered here first, so the
/// driver answers as plain CUDA would about pinned memory (counted as a fallback).
/// (The runtime's own queries inside its copies never get here: `hooks::query` leaves
/// them out.)
pub fn before_query(st: &State, ptr: usize) {
    if let Some(p) = with_buffers() {
        if let Some((start, e)) = p.entry_at(ptr, 1) {
            p.go_here(st, start, &e);
            let _inside = Inside::enter();
            drop(e);
        }
    }
}

/// What the pool did in this process (`None`: no `--pool`, or a forked child that never
/// used it).
pub fn stats() -> Option<PoolUseStats> {
    current().map(PoolUse::stats)
}

/// A driver function of the program's libcuda, resolved once (`0`: absent).
fn resolved(cell: &OnceLock<usize>, name: &std::ffi::CStr) -> usize {
    *cell.get_or_init(|| crate::real::driver_fn(name).unwrap_or(0))
}

/// `cuCtxSynchronize` (the synchronous copies' order: after all prior work).
fn ctx_synchronize() -> CUresult {
    static F: OnceLock<usize> = OnceLock::new();
    let a = resolved(&F, c"cuCtxSynchronize");
    if a == 0 {
        return pinwise_cuda::sys::CUDA_ERROR_NOT_SUPPORTED;
    }
    let _inside = Inside::enter();
    // SAFETY: libcuda's cuCtxSynchronize, of this type (pinwise_cuda::sys::pfn).
    let f: pfn::cuCtxSynchronize = unsafe { std::mem::transmute::<usize, _>(a) };
    // SAFETY: no arguments.
    unsafe { f() }
}

/// A device allocation's start, length and CUDA IPC handle, through the program's libcuda.
fn describe_device(ptr: DevicePtr) -> pinwise_pool::Result<(DevicePtr, usize, IpcMemHandle)> {
    static RANGE: OnceLock<usize> = OnceLock::new();
    static IPC: OnceLock<usize> = OnceLock::new();
    let fail = |call: &'static str, code: CUresult| {
        PoolError::Cuda(pinwise_cuda::CudaError::Driver {
            call,
            code,
            name: None,
            message: None,
        })
    };
    let (range, ipc) = (
        resolved(&RANGE, c"cuMemGetAddressRange_v2"),
        resolved(&IPC, c"cuIpcGetMemHandle"),
    );
    if range == 0 || ipc == 0 {
        return Err(fail(
            "cuIpcGetMemHandle",
            pinwise_cuda::sys::CUDA_ERROR_NOT_SUPPORTED,
        ));
    }
    let _inside = Inside::enter();
    // SAFETY: libcuda's functions of these types (pinwise_cuda::sys::pfn).
    let range: pfn::cuMemGetAddressRange_v2 = unsafe { std::mem::transmute::<usize, _>(range) };
    // SAFETY: as above.
    let ipc: pfn::cuIpcGetMemHandle = unsafe { std::mem::transmute::<usize, _>(ipc) };
    let (mut base, mut len): (CUdeviceptr, usize) = (0, 0);
    // SAFETY: valid out-parameters; the pointer is the program's.
    let rc = unsafe { range(&mut base, &mut len, ptr.0) };
    if rc != CUDA_SUCCESS {
        return Err(fail("cuMemGetAddressRange_v2", rc));
    }
    let mut h = CUipcMemHandle { reserved: [0; 64] };
    // SAFETY: a valid out-parameter and the allocation's start.
    let rc = unsafe { ipc(&mut h, base) };
    if rc != CUDA_SUCCESS {
        return Err(fail("cuIpcGetMemHandle", rc));
    }
    Ok((DevicePtr(base), len, IpcMemHandle(h.reserved)))
}
