//! The service: owns the pinned segments, registers each with CUDA once, and does its
//! clients' copies into their device memory (opened by CUDA IPC handle).
//!
//! One thread per connection. A client is identified by its connection: it sees only the
//! buffers and devices it created on it, and when the connection closes (the client exited,
//! crashed or was killed) everything it held is released: its IPC mappings closed, its
//! segments unregistered and unmapped, its bytes given back to the ledger.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use pinwise_core::units::monotonic_ns;

use pinwise_cuda::sys::CU_STREAM_NON_BLOCKING;
use pinwise_cuda::{Context, HostRegistration, IpcMapping, IpcMemHandle, Stream};

use crate::ledger::{ClientId, Ledger};
use crate::proto::{self, Direction, ErrorKind, Request, Response, Stats, VERSION};
use crate::shm::Segment;
use crate::wire::{self, Peer};

/// How the service runs.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// The Unix socket clients connect to.
    pub socket: PathBuf,
    /// Bytes of pinned buffers, all clients together.
    pub capacity: u64,
    /// Bytes of pinned buffers one client (connection) may hold.
    pub client_budget: u64,
    /// Users allowed besides the service's own user and root.
    pub allow_uids: Vec<u32>,
    /// Try 2 MiB huge pages (hugetlbfs memfds) before 4 KiB pages.
    pub huge_pages: bool,
    /// The longest a copy may take once started ([`DEFAULT_COPY_LIMIT`]): a copy still
    /// running after it means a GPU that cannot finish it, and the service ends itself
    /// (abort), which ends its CUDA context and the copy with it; its clients see the
    /// connection close and make their copies themselves. A client waits longer than this
    /// for a started copy ([`crate::client::DEFAULT_STARTED_LIMIT`]).
    pub copy_limit: Duration,
}

/// The default of [`ServiceConfig::copy_limit`] (a copy of 64 GiB at 2 GB/s takes 32 s).
pub const DEFAULT_COPY_LIMIT: Duration = Duration::from_secs(60);

/// Errors starting the service.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// Another service answers at the socket path.
    #[error("a pinwise pool already serves at {0}")]
    AlreadyRunning(PathBuf),
    /// Something that is not a socket (or a symbolic link) is at the socket path.
    #[error("{0} exists and is not a socket: not replacing it")]
    NotASocket(PathBuf),
    /// The socket could not be made.
    #[error("cannot listen at {path}: {source}")]
    Listen {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

struct Totals {
    ledger: Ledger,
    clients: u64,
    buffers: u64,
    huge_bytes: u64,
    devices: u64,
    attachments: u64,
}

/// Named buffers by (uid, name): the serial of the live one and a weak reference to it.
type Named = HashMap<(u32, String), (u64, Weak<Buffer>)>;

struct Shared {
    ctx: Context,
    config: ServiceConfig,
    own_uid: u32,
    totals: Mutex<Totals>,
    named: Mutex<Named>,
    creating: Mutex<()>,
    copies: AtomicU64,
    copied_bytes: AtomicU64,
    next_client: AtomicU64,
    /// Copies under way: client, and when each started (`CLOCK_MONOTONIC` ns).
    in_flight: Mutex<HashMap<ClientId, u64>>,
    /// Copies refused because their deadline had passed.
    expired: AtomicU64,
}

impl Shared {
    fn totals(&self) -> MutexGuard<'_, Totals> {
        self.totals.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stats(&self) -> Stats {
        // The buffers are collected under the lock and looked at (and let go of) after it:
        // letting go of the last hold runs `Buffer`'s drop, which takes this lock.
        let named: Vec<(u64, Arc<Buffer>)> = lock(&self.named)
            .values()
            .filter_map(|(_, w)| Some((w.strong_count() as u64, w.upgrade()?)))
            .collect();
        let deduplicated_bytes = named
            .iter()
            .map(|(holders, b)| holders.saturating_sub(1) * b.segment.len() as u64)
            .sum();
        drop(named);
        let t = self.totals();
        Stats {
            clients: t.clients,
            buffers: t.buffers,
            bytes: t.ledger.total(),
            huge_bytes: t.huge_bytes,
            devices: t.devices,
            attachments: t.attachments,
            deduplicated_bytes,
            copies: self.copies.load(Ordering::Relaxed),
            copied_bytes: self.copied_bytes.load(Ordering::Relaxed),
            expired_copies: self.expired.load(Ordering::Relaxed),
            capacity: t.ledger.capacity(),
            client_budget: t.ledger.client_budget(),
        }
    }

    fn allowed(&self, uid: u32) -> bool {
        uid == 0 || uid == self.own_uid || self.config.allow_uids.contains(&uid)
    }
}

/// A bound service, ready to [`Service::run`].
pub struct Service {
    listener: OwnedFd,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("socket", &self.shared.config.socket)
            .finish_non_exhaustive()
    }
}

/// Removes a stale socket at `path` (nobody answers), refuses to touch anything else.
fn clear_stale(path: &Path) -> Result<(), ServiceError> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Err(_) => Ok(()),
        Ok(m) if m.file_type().is_socket() => {
            if wire::connect(path).is_ok() {
                return Err(ServiceError::AlreadyRunning(path.to_path_buf()));
            }
            std::fs::remove_file(path).map_err(|source| ServiceError::Listen {
                path: path.to_path_buf(),
                source,
            })
        }
        Ok(_) => Err(ServiceError::NotASocket(path.to_path_buf())),
    }
}

/// Raises the soft limit of open descriptors to the hard one: the service keeps one memfd
/// per buffer.
fn raise_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut l = getrlimit(Resource::Nofile);
    if l.current < l.maximum {
        l.current = l.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, l) {
            tracing::debug!("cannot raise the descriptor limit: {e}");
        }
    }
}

impl Service {
    /// Binds the socket (mode 0666: the credential check, not the file mode, decides who
    /// may use the pool) for device memory of `ctx`'s device.
    pub fn bind(config: ServiceConfig, ctx: Context) -> Result<Service, ServiceError> {
        use std::os::unix::fs::PermissionsExt;
        let path = config.socket.clone();
        let io = |source: std::io::Error| ServiceError::Listen {
            path: path.clone(),
            source,
        };
        clear_stale(&path)?;
        raise_file_limit();
        let listener = wire::listen(&path).map_err(|e| io(e.into()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).map_err(io)?;
        let ledger = Ledger::new(config.capacity, config.client_budget);
        Ok(Service {
            listener,
            shared: Arc::new(Shared {
                ctx,
                own_uid: rustix::process::geteuid().as_raw(),
                config,
                totals: Mutex::new(Totals {
                    ledger,
                    clients: 0,
                    buffers: 0,
                    huge_bytes: 0,
                    devices: 0,
                    attachments: 0,
                }),
                named: Mutex::new(HashMap::new()),
                creating: Mutex::new(()),
                copies: AtomicU64::new(0),
                copied_bytes: AtomicU64::new(0),
                next_client: AtomicU64::new(1),
                in_flight: Mutex::new(HashMap::new()),
                expired: AtomicU64::new(0),
            }),
        })
    }

    /// The accounting now.
    pub fn stats(&self) -> Stats {
        self.shared.stats()
    }

    /// Serves connections until accepting fails (a thread per connection, and a watchdog
    /// over the copies: [`ServiceConfig::copy_limit`]).
    pub fn run(self) -> std::io::Result<()> {
        let shared = self.shared.clone();
        std::thread::Builder::new()
            .name("pinwise-pool-watchdog".into())
            .spawn(move || watchdog(&shared))?;
        loop {
            let sock = match wire::accept(self.listener.as_fd()) {
                Ok(s) => s,
                Err(rustix::io::Errno::INTR | rustix::io::Errno::CONNABORTED) => continue,
                Err(e) => return Err(e.into()),
            };
            let shared = self.shared.clone();
            let spawned = std::thread::Builder::new()
                .name("pinwise-pool-client".into())
                .spawn(move || serve_client(shared, sock));
            if let Err(e) = spawned {
                tracing::warn!("cannot start a thread for a pool client: {e}");
            }
        }
    }
}

/// Ends the service when a copy has run past the copy limit (see
/// [`ServiceConfig::copy_limit`]): the copy cannot be cancelled otherwise, and a client
/// must never be left to wonder whether its bytes will still change.
fn watchdog(shared: &Shared) {
    let limit = shared.config.copy_limit;
    let limit_ns = u64::try_from(limit.as_nanos()).unwrap_or(u64::MAX);
    let tick = (limit / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
    loop {
        std::thread::sleep(tick);
        let now = monotonic_ns();
        let stuck = lock(&shared.in_flight)
            .iter()
            .find(|(_, &t0)| now.saturating_sub(t0) > limit_ns)
            .map(|(&c, _)| c);
        if let Some(client) = stuck {
            tracing::error!(
                "pool: a copy for client {client} has run for more than {limit:?}; the GPU \
                 cannot finish it: ending the service (its clients make their copies themselves)"
            );
            eprintln!("pinwise pool: a copy ran past the copy limit ({limit:?}); aborting");
            std::process::abort();
        }
    }
}

/// A pinned buffer: its segment, registered with CUDA once. Held (`Arc`) by the sessions
/// attached to it (one, or several for a named buffer); when the last lets go it is
/// unregistered, unmapped, and its bytes are given back to the pool.
struct Buffer {
    // Field order: the registration ends before the segment is unmapped.
    registration: HostRegistration<'static>,
    segment: Segment,
    serial: u64,
    key: Option<(u32, String)>,
    shared: Arc<Shared>,
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let real = self.segment.len() as u64;
        {
            let mut t = self.shared.totals();
            t.ledger.release_total(real);
            t.buffers -= 1;
            if self.segment.is_huge() {
                t.huge_bytes -= real;
            }
        }
        if let Some(key) = &self.key {
            let mut named = lock(&self.shared.named);
            if named
                .get(key)
                .is_some_and(|(serial, _)| *serial == self.serial)
            {
                named.remove(key);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One connection's state.
struct Session {
    shared: Arc<Shared>,
    id: ClientId,
    peer: Peer,
    buffers: HashMap<u64, Arc<Buffer>>,
    devices: HashMap<u64, IpcMapping>,
    next: u64,
    stream: Option<Stream>,
}

/// Most buffers one connection may hold (each is a memfd, a mapping and a registration in
/// the service), and most device allocations it may have opened. Past the service's
/// descriptor limit (raised to the hard limit at start) an allocation fails cleanly.
pub const MAX_BUFFERS_PER_CLIENT: usize = 256;
/// See [`MAX_BUFFERS_PER_CLIENT`].
pub const MAX_DEVICES_PER_CLIENT: usize = 1024;

fn error(kind: ErrorKind, message: impl Into<String>) -> Response {
    Response::Error {
        kind,
        message: message.into(),
    }
}

/// Whether the process `pid` shares the service's time namespace (where `/proc` says;
/// assumed when it cannot be read: kernels without time namespaces, a hidden `/proc`).
fn same_time_namespace(pid: u32) -> bool {
    let theirs = std::fs::read_link(format!("/proc/{pid}/ns/time"));
    let ours = std::fs::read_link("/proc/self/ns/time");
    match (theirs, ours) {
        (Ok(t), Ok(o)) => t == o,
        _ => true,
    }
}

fn serve_client(shared: Arc<Shared>, sock: OwnedFd) {
    let peer = match wire::peer(sock.as_fd()) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!("pool client without credentials: {e}");
            return;
        }
    };
    let refusal = if !shared.allowed(peer.uid) {
        Some(format!("uid {} may not use this pool", peer.uid))
    } else if !same_time_namespace(peer.pid) {
        // Copy deadlines are CLOCK_MONOTONIC readings of the client's: another time
        // namespace's clock is offset, and a late copy could be started.
        Some(format!(
            "pid {} is in another time namespace than the pool's (copy deadlines compare the two processes' CLOCK_MONOTONIC)",
            peer.pid
        ))
    } else {
        None
    };
    if let Some(why) = refusal {
        tracing::info!("pool: refused pid {} (uid {}): {why}", peer.pid, peer.uid);
        // Read the client's hello first: closing with unread data would reset the
        // connection, and the client would see a broken connection instead of the refusal.
        let _ = rustix::net::sockopt::set_socket_timeout(
            &sock,
            rustix::net::sockopt::Timeout::Recv,
            Some(std::time::Duration::from_secs(2)),
        );
        let _ = wire::recv(sock.as_fd());
        let _ = wire::send(
            sock.as_fd(),
            &proto::encode(&error(ErrorKind::NotAllowed, why)),
            None,
        );
        return;
    }
    let id = shared.next_client.fetch_add(1, Ordering::Relaxed);
    shared.totals().clients += 1;
    let mut session = Session {
        shared: shared.clone(),
        id,
        peer,
        buffers: HashMap::new(),
        devices: HashMap::new(),
        next: 1,
        stream: None,
    };
    let mut greeted = false;
    loop {
        let (bytes, _ignored_fd) = match wire::recv(sock.as_fd()) {
            Ok(Some(m)) => m,
            Ok(None) => break,
            Err(e) => {
                tracing::debug!("pool client {} (pid {}): {e}", id, peer.pid);
                break;
            }
        };
        let (reply, fd) = match proto::decode::<Request>(&bytes) {
            Err(msg) => (error(ErrorKind::BadRequest, msg), None),
            Ok(Request::Hello { version }) if version == VERSION => {
                greeted = true;
                let budget = shared.totals().ledger.client_budget();
                (
                    Response::Hello {
                        version: VERSION,
                        client_budget: budget,
                    },
                    None,
                )
            }
            Ok(Request::Hello { version }) => (
                error(
                    ErrorKind::Version,
                    format!("the pool speaks protocol {VERSION}, the client {version}"),
                ),
                None,
            ),
            Ok(_) if !greeted => (error(ErrorKind::BadRequest, "say hello first"), None),
            Ok(req) => session.handle(req, sock.as_fd()),
        };
        let fd_ref = fd
            .and_then(|b| session.buffers.get(&b))
            .map(|b| b.segment.fd());
        if let Err(e) = wire::send(sock.as_fd(), &proto::encode(&reply), fd_ref) {
            tracing::debug!("pool client {} (pid {}) gone: {e}", id, peer.pid);
            break;
        }
    }
    drop(session);
    shared.totals().clients -= 1;
}

impl Session {
    /// Answers one request; the second value names a buffer whose memfd goes with the reply.
    /// A copy's first answer (`Started`) is sent on `sock` from here.
    fn handle(&mut self, req: Request, sock: BorrowedFd<'_>) -> (Response, Option<u64>) {
        match req {
            Request::Hello { .. } => (Response::Done, None),
            Request::Stats => (Response::Stats(self.shared.stats()), None),
            Request::Alloc { len, name } => match self.alloc(len, name) {
                Ok((id, b, created)) => (
                    Response::Buffer {
                        buffer: id,
                        len: b.segment.len() as u64,
                        huge: b.segment.is_huge(),
                        created,
                    },
                    Some(id),
                ),
                Err(r) => (r, None),
            },
            Request::Free { buffer } => match self.buffers.remove(&buffer) {
                Some(b) => {
                    self.release(b);
                    (Response::Done, None)
                }
                None => (not_found("buffer", buffer), None),
            },
            Request::OpenDevice { handle } => (self.open_device(handle), None),
            Request::CloseDevice { device } => match self.devices.remove(&device) {
                Some(m) => {
                    drop(m);
                    self.shared.totals().devices -= 1;
                    (Response::Done, None)
                }
                None => (not_found("device", device), None),
            },
            Request::Copy {
                dir,
                buffer,
                buffer_offset,
                device,
                device_offset,
                len,
                deadline_ns,
            } => {
                let copy = CopyRequest {
                    dir,
                    buffer,
                    buffer_offset,
                    device,
                    device_offset,
                    len,
                    deadline_ns,
                };
                (self.copy(&copy, sock), None)
            }
        }
    }

    fn alloc(
        &mut self,
        len: u64,
        name: Option<String>,
    ) -> Result<(u64, Arc<Buffer>, bool), Response> {
        if len == 0 {
            return Err(error(ErrorKind::BadRequest, "a buffer of 0 bytes"));
        }
        if self.buffers.len() >= MAX_BUFFERS_PER_CLIENT {
            return Err(error(
                ErrorKind::OverBudget,
                format!("a client may hold at most {MAX_BUFFERS_PER_CLIENT} buffers"),
            ));
        }
        let want = usize::try_from(len)
            .map_err(|_| error(ErrorKind::BadRequest, format!("{len} bytes is too large")))?;
        let over = |r: crate::ledger::Refusal| error(ErrorKind::OverBudget, r.to_string());
        // Named buffers: looked up and created under one lock, so that two clients asking
        // for the same name at once get the same buffer.
        let shared = self.shared.clone();
        let _creating = name.as_ref().map(|_| lock(&shared.creating));
        let key = name.map(|n| (self.peer.uid, n));
        if let Some(key) = &key {
            let existing = lock(&self.shared.named)
                .get(key)
                .and_then(|(_, w)| w.upgrade());
            if let Some(b) = existing {
                let real = b.segment.len() as u64;
                if real < len {
                    return Err(error(
                        ErrorKind::BadRequest,
                        format!("the named buffer {:?} has {real} bytes, not {len}", key.1),
                    ));
                }
                self.shared
                    .totals()
                    .ledger
                    .charge_client(self.id, real)
                    .map_err(over)?;
                return Ok((self.attach(b.clone()), b, false));
            }
        }
        // Charge the requested size first (rounding may add up to a huge page; the
        // difference is charged once the segment's real size is known).
        self.shared
            .totals()
            .ledger
            .charge(self.id, len)
            .map_err(over)?;
        let uncharge = |bytes: u64| {
            let mut t = self.shared.totals();
            t.ledger.release_client(self.id, bytes);
            t.ledger.release_total(bytes);
        };
        let segment = match Segment::new(want, self.shared.config.huge_pages) {
            Ok(s) => s,
            Err(e) => {
                uncharge(len);
                return Err(error(
                    ErrorKind::Failed,
                    format!("shared memory of {len} bytes: {e}"),
                ));
            }
        };
        let real = segment.len() as u64;
        if real > len {
            if let Err(r) = self.shared.totals().ledger.charge(self.id, real - len) {
                uncharge(len);
                return Err(error(
                    ErrorKind::OverBudget,
                    format!("rounded up to pages: {r}"),
                ));
            }
        }
        let ptr = NonNull::new(segment.mapping().as_ptr()).expect("a mapping is never null");
        // SAFETY: the segment's mapping stays mapped until the registration ends: `Buffer`
        // drops the registration before the segment. No reference to the bytes is made that
        // outlives a copy.
        let registration =
            match unsafe { HostRegistration::from_raw(&self.shared.ctx, ptr, segment.len(), 0) } {
                Ok(r) => r,
                Err(e) => {
                    uncharge(real);
                    return Err(error(
                        ErrorKind::Failed,
                        format!("pinning {real} bytes: {e}"),
                    ));
                }
            };
        let huge = segment.is_huge();
        {
            let mut t = self.shared.totals();
            t.buffers += 1;
            if huge {
                t.huge_bytes += real;
            }
        }
        let serial = self.shared.next_client.fetch_add(1, Ordering::Relaxed);
        let b = Arc::new(Buffer {
            registration,
            segment,
            serial,
            key: key.clone(),
            shared: self.shared.clone(),
        });
        if let Some(key) = key {
            lock(&self.shared.named).insert(key, (serial, Arc::downgrade(&b)));
        }
        tracing::debug!(
            "pool client {} (pid {}): new buffer, {real} bytes{}",
            self.id,
            self.peer.pid,
            if huge { ", huge pages" } else { "" }
        );
        Ok((self.attach(b.clone()), b, true))
    }

    /// Adds a buffer (already charged to this client) to the session; its id.
    fn attach(&mut self, b: Arc<Buffer>) -> u64 {
        let id = self.next;
        self.next += 1;
        self.buffers.insert(id, b);
        self.shared.totals().attachments += 1;
        id
    }

    /// Lets go of one of the session's buffers: this client's charge ends; the buffer
    /// itself goes when its last client lets go (`Buffer`'s drop).
    fn release(&self, b: Arc<Buffer>) {
        let real = b.segment.len() as u64;
        {
            let mut t = self.shared.totals();
            t.ledger.release_client(self.id, real);
            t.attachments -= 1;
        }
        drop(b);
    }

    fn open_device(&mut self, handle: Vec<u8>) -> Response {
        if self.devices.len() >= MAX_DEVICES_PER_CLIENT {
            return error(
                ErrorKind::OverBudget,
                format!(
                    "a client may have at most {MAX_DEVICES_PER_CLIENT} device allocations open"
                ),
            );
        }
        let Ok(bytes) = <[u8; 64]>::try_from(handle.as_slice()) else {
            return error(
                ErrorKind::BadRequest,
                format!("an IPC handle is 64 bytes, not {}", handle.len()),
            );
        };
        match self.shared.ctx.open_ipc_handle(IpcMemHandle(bytes)) {
            Ok(m) => {
                let id = self.next;
                self.next += 1;
                let len = m.len() as u64;
                self.devices.insert(id, m);
                self.shared.totals().devices += 1;
                Response::Device { device: id, len }
            }
            Err(e) => error(ErrorKind::Failed, format!("opening the IPC handle: {e}")),
        }
    }

    /// A copy (see [`crate::proto`]): checked; `Started` sent; refused past its deadline;
    /// else made, and its final answer returned.
    fn copy(&mut self, r: &CopyRequest, sock: BorrowedFd<'_>) -> Response {
        let len = r.len;
        let Some(b) = self.buffers.get(&r.buffer) else {
            return not_found("buffer", r.buffer);
        };
        let Some(d) = self.devices.get(&r.device) else {
            return not_found("device", r.device);
        };
        let fits =
            |off: u64, size: usize| off.checked_add(len).is_some_and(|end| end <= size as u64);
        if len == 0 || !fits(r.buffer_offset, b.segment.len()) || !fits(r.device_offset, d.len()) {
            return error(
                ErrorKind::BadRequest,
                format!(
                    "copy of {len} bytes at buffer offset {} (buffer {} bytes), device offset \
                     {} (allocation {} bytes)",
                    r.buffer_offset,
                    b.segment.len(),
                    r.device_offset,
                    d.len()
                ),
            );
        }
        if self.stream.is_none() {
            match Stream::with_flags(&self.shared.ctx, CU_STREAM_NON_BLOCKING) {
                Ok(s) => self.stream = Some(s),
                Err(e) => return error(ErrorKind::Failed, format!("creating a stream: {e}")),
            }
        }
        // `Started` first, the clock after: a client that looked for `Started` after its
        // deadline and found none can rely on this check failing.
        let sent = wire::send(sock, &proto::encode(&Response::Started), None);
        let now = monotonic_ns();
        let late = r.deadline_ns.filter(|&d| now > d);
        if let Err(e) = sent {
            // The client is gone (or gave up and shut the connection down): no copy.
            if late.is_some() {
                self.shared.expired.fetch_add(1, Ordering::Relaxed);
            }
            return error(ErrorKind::Failed, format!("answering: {e}"));
        }
        if let Some(deadline) = late {
            self.shared.expired.fetch_add(1, Ordering::Relaxed);
            return error(
                ErrorKind::Expired,
                format!(
                    "the copy's deadline passed {} us before it could start: not copied",
                    (now - deadline) / 1000
                ),
            );
        }
        let stream = self.stream.as_ref().expect("created above");
        // SAFETY: in bounds (checked above): the host range is this client's registered
        // segment, mapped while `b` lives; the device range is inside the client's allocation
        // opened in our context. The stream is synchronized before either can go away.
        let host = unsafe { b.registration.as_mut_ptr().add(r.buffer_offset as usize) };
        let dev = d.ptr().offset(r.device_offset as usize);
        let len_us = len as usize;
        let ctx = &self.shared.ctx;
        lock(&self.shared.in_flight).insert(self.id, now);
        // SAFETY: see above; the copy completes (synchronize) before this returns.
        let queued = unsafe {
            match r.dir {
                Direction::HostToDevice => ctx.copy_htod_async(dev, host, len_us, stream),
                Direction::DeviceToHost => ctx.copy_dtoh_async(host, dev, len_us, stream),
            }
        };
        let done = queued.and_then(|()| stream.synchronize());
        lock(&self.shared.in_flight).remove(&self.id);
        match done {
            Ok(()) => {
                self.shared.copies.fetch_add(1, Ordering::Relaxed);
                self.shared.copied_bytes.fetch_add(len, Ordering::Relaxed);
                Response::Done
            }
            Err(e) => error(ErrorKind::Failed, format!("copy: {e}")),
        }
    }
}

/// A copy request's fields.
struct CopyRequest {
    dir: Direction,
    buffer: u64,
    buffer_offset: u64,
    device: u64,
    device_offset: u64,
    len: u64,
    deadline_ns: Option<u64>,
}

fn not_found(what: &str, id: u64) -> Response {
    error(
        ErrorKind::NotFound,
        format!("this client has no {what} {id}"),
    )
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(s) = &self.stream {
            let _ = s.synchronize();
        }
        let n = self.devices.len() as u64;
        self.devices.clear();
        self.shared.totals().devices -= n;
        let buffers: Vec<Arc<Buffer>> = self.buffers.drain().map(|(_, b)| b).collect();
        for b in buffers {
            self.release(b);
        }
        tracing::debug!("pool client {} (pid {}) released", self.id, self.peer.pid);
    }
}
