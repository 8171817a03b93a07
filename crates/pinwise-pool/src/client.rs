//! The client API: connect to the pool, take pinned buffers (mapped here as shared memory),
//! register device allocations (by CUDA IPC handle), and have the service copy between them.
//!
//! Every failure is a [`PoolError`]: the caller then does what it would have done without a
//! pool (pin in-process). Nothing here retries behind the caller's back, and a copy that
//! failed has not been reported done.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pinwise_core::units::monotonic_ns;

use pinwise_cuda::{Context, CudaError, DevicePtr, IpcMemHandle};

use crate::proto::{self, Direction, ErrorKind, Request, Response, Stats, VERSION};
use crate::shm::Mapping;
use crate::wire;

/// The environment variable naming the pool's socket.
pub const SOCKET_ENV: &str = "PINWISE_POOL_SOCKET";
/// The socket path used when `PINWISE_POOL_SOCKET` is not set.
pub const DEFAULT_SOCKET: &str = "/run/pinwise/pool.sock";

/// The socket path clients and the service use by default: `$PINWISE_POOL_SOCKET`, else
/// [`DEFAULT_SOCKET`].
pub fn default_socket() -> PathBuf {
    std::env::var_os(SOCKET_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET))
}

fn unavailable(path: &Path, e: rustix::io::Errno) -> PoolError {
    PoolError::Unavailable {
        path: path.to_path_buf(),
        reason: if wire::is_absent(e) {
            format!("nothing listens there ({e})")
        } else {
            e.to_string()
        },
    }
}

/// Why the pool cannot serve a request. Every variant means: fall back to in-process pinning.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// No service at the socket (not running, or the path does not exist).
    #[error("no pinwise pool at {path}: {reason}")]
    Unavailable {
        /// The socket path.
        path: PathBuf,
        /// What connecting said.
        reason: String,
    },
    /// The service refused (not allowed, over budget, unknown id, bad offsets, or a CUDA
    /// failure in the service).
    #[error("the pinwise pool refused: {message}")]
    Refused {
        /// The service's reason, by kind.
        kind: ErrorKind,
        /// The service's words.
        message: String,
    },
    /// The connection broke (the service exited or crashed).
    #[error("the connection to the pinwise pool failed: {0}")]
    Connection(String),
    /// The service answered something this client does not understand.
    #[error("the pinwise pool answered unexpectedly: {0}")]
    Protocol(String),
    /// CUDA failed in this process (getting an IPC handle).
    #[error(transparent)]
    Cuda(#[from] CudaError),
    /// The service did not start a copy by its deadline, and never will (see
    /// [`crate::proto`]): the caller may make the copy itself. The connection is out of
    /// step, and shut down: every later call on it fails at once.
    #[error("the pinwise pool did not start the copy within {0:?}; it never will")]
    NotStarted(std::time::Duration),
    /// The service started a copy and neither finished it nor went away within the limit
    /// ([`PoolClient::set_copy_timeouts`]): the bytes are in doubt until the service's own
    /// copy limit ends it (see [`crate::ServiceConfig::copy_limit`]). The connection is shut
    /// down, as for [`PoolError::NotStarted`].
    #[error("the pinwise pool started a copy and did not finish it within {0:?}")]
    Stuck(std::time::Duration),
}

/// How long a client with call timeouts ([`PoolClient::connect_with_timeouts`]) waits for a
/// copy the service has started, by default: longer than the service's default copy limit
/// ([`crate::DEFAULT_COPY_LIMIT`]), after which a service that is still running ends itself
/// (and with it the copy), so that a copy reported stuck here is one of a frozen service.
pub const DEFAULT_STARTED_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Shorthand.
pub type Result<T, E = PoolError> = std::result::Result<T, E>;

#[derive(Debug)]
struct Conn {
    sock: Mutex<OwnedFd>,
    /// How long a copy may wait for the service to start it, ns (0: no limit).
    start_wait_ns: AtomicU64,
    /// How long a started copy may take, ns (0: no limit).
    started_limit_ns: AtomicU64,
}

fn nanos(d: Option<Duration>) -> u64 {
    d.map_or(0, |d| {
        u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
    })
}

fn duration(ns: u64) -> Option<Duration> {
    (ns != 0).then(|| Duration::from_nanos(ns))
}

/// What waiting for a message until a time gave.
enum Got {
    Message(Vec<u8>),
    Closed,
    Nothing,
}

/// Receives one message on `sock`, waiting until `until` (`CLOCK_MONOTONIC` ns; `None`: no
/// limit) has passed on the clock, and then looking once more without waiting.
fn recv_until(sock: BorrowedFd<'_>, until: Option<u64>) -> Result<Got> {
    let gone = |e: rustix::io::Errno| PoolError::Connection(format!("receiving: {e}"));
    loop {
        // Zero once the clock is past `until` (strictly: the service copies at `until`).
        let left = until.map(|u| u.saturating_add(1).saturating_sub(monotonic_ns()));
        if left != Some(0) {
            // Up to the deadline (a wake-up a little early goes round again).
            let wait = left.map(|ns| Duration::from_nanos(ns) + Duration::from_micros(50));
            if !wire::wait_readable(sock, wait).map_err(gone)? {
                continue;
            }
        }
        match wire::try_recv(sock) {
            Ok(Some((bytes, _))) => return Ok(Got::Message(bytes)),
            Ok(None) => return Ok(Got::Closed),
            Err(rustix::io::Errno::AGAIN) if left == Some(0) => return Ok(Got::Nothing),
            Err(rustix::io::Errno::AGAIN) => continue,
            Err(e) => return Err(gone(e)),
        }
    }
}

/// Shuts a connection down both ways: every later call on it fails at once (and the
/// service frees what the client held).
fn out_of_step(sock: BorrowedFd<'_>) {
    let _ = rustix::net::shutdown(sock, rustix::net::Shutdown::Both);
}

fn reply(bytes: &[u8]) -> Result<Response> {
    match proto::decode(bytes).map_err(PoolError::Protocol)? {
        Response::Error { kind, message } => Err(PoolError::Refused { kind, message }),
        r => Ok(r),
    }
}

impl Conn {
    fn new(sock: OwnedFd) -> Conn {
        Conn {
            sock: Mutex::new(sock),
            start_wait_ns: AtomicU64::new(0),
            started_limit_ns: AtomicU64::new(0),
        }
    }

    /// Sends a copy request and waits for its answers (see [`crate::proto`]): `Ok` once
    /// the bytes arrived; [`PoolError::NotStarted`] when the service did not start it by
    /// its deadline (and never will); [`PoolError::Stuck`] when a started copy outlived the
    /// limit; a refusal or failure of a copy that was not made or that ended.
    fn copy_call(&self, req: Request) -> Result<()> {
        let sock = self.sock.lock().unwrap_or_else(|e| e.into_inner());
        let r = Conn::copy_on(
            sock.as_fd(),
            req,
            &self.start_wait_ns,
            &self.started_limit_ns,
        );
        if let Err(PoolError::NotStarted(_) | PoolError::Stuck(_) | PoolError::Connection(_)) = &r {
            // Answers still to come (a late `Started`, `Expired`, `Done`) must never be taken
            // for a later request's: a `Done` read for another copy would be a wrong byte.
            out_of_step(sock.as_fd());
        }
        r
    }

    fn copy_on(
        sock: BorrowedFd<'_>,
        mut req: Request,
        start_wait_ns: &AtomicU64,
        started_limit_ns: &AtomicU64,
    ) -> Result<()> {
        let start_wait = duration(start_wait_ns.load(Ordering::Relaxed));
        let started_limit = duration(started_limit_ns.load(Ordering::Relaxed));
        let deadline = start_wait.map(|w| monotonic_ns().saturating_add(nanos(Some(w))));
        if let Request::Copy { deadline_ns, .. } = &mut req {
            *deadline_ns = deadline;
        }
        wire::send(sock, &proto::encode(&req), None)
            .map_err(|e| PoolError::Connection(format!("sending: {e}")))?;
        let closed = || PoolError::Connection("the pool closed the connection".into());
        match recv_until(sock, deadline)? {
            Got::Message(bytes) => match reply(&bytes)? {
                Response::Started => {}
                other => return Err(PoolError::Protocol(format!("{other:?} to copy"))),
            },
            Got::Closed => return Err(closed()),
            Got::Nothing => return Err(PoolError::NotStarted(start_wait.unwrap_or_default())),
        }
        let until = started_limit.map(|l| monotonic_ns().saturating_add(nanos(Some(l))));
        match recv_until(sock, until)? {
            Got::Message(bytes) => match reply(&bytes)? {
                Response::Done => Ok(()),
                other => Err(PoolError::Protocol(format!("{other:?} to a started copy"))),
            },
            Got::Closed => Err(closed()),
            Got::Nothing => Err(PoolError::Stuck(started_limit.unwrap_or_default())),
        }
    }

    /// Sends a request and waits for its reply (one at a time per connection).
    fn call(&self, req: &Request) -> Result<(Response, Option<OwnedFd>)> {
        let sock = self.sock.lock().unwrap_or_else(|e| e.into_inner());
        wire::send(sock.as_fd(), &proto::encode(req), None)
            .map_err(|e| PoolError::Connection(format!("sending: {e}")))?;
        let (bytes, fd) = wire::recv(sock.as_fd())
            .map_err(|e| {
                // Timed out or broken: the reply may still come, and would be taken for the
                // next request's.
                out_of_step(sock.as_fd());
                PoolError::Connection(format!("receiving: {e}"))
            })?
            .ok_or_else(|| PoolError::Connection("the pool closed the connection".into()))?;
        let reply: Response = proto::decode(&bytes).map_err(PoolError::Protocol)?;
        match reply {
            Response::Error { kind, message } => Err(PoolError::Refused { kind, message }),
            r => Ok((r, fd)),
        }
    }
}

/// A connection to the pool.
#[derive(Debug, Clone)]
pub struct PoolClient {
    conn: Arc<Conn>,
    client_budget: u64,
}

/// A pinned buffer of the pool, mapped in this process. Freed in the pool on drop.
#[derive(Debug)]
pub struct PoolBuffer {
    conn: Arc<Conn>,
    id: u64,
    map: Mapping,
    huge: bool,
    created: bool,
}

/// A device allocation of this process that the pool has opened (by IPC handle).
/// Closed in the pool on drop.
#[derive(Debug)]
pub struct PoolDevice {
    conn: Arc<Conn>,
    id: u64,
    base: DevicePtr,
    len: usize,
    handle: IpcMemHandle,
}

/// The device allocations a client has let the pool open, by start address, for callers
/// that copy to raw device pointers (the C API). Each lookup asks CUDA for the allocation's
/// range and IPC handle again: an allocation freed and another made at the same address has
/// another handle, so a stale opening is replaced, never copied into.
#[derive(Debug, Default)]
pub struct DeviceCache {
    devices: std::collections::HashMap<u64, PoolDevice>,
}

impl DeviceCache {
    /// The opened allocation that holds `ptr`, opening it (or reopening it) as needed.
    pub fn get(&mut self, pool: &PoolClient, ctx: &Context, ptr: DevicePtr) -> Result<&PoolDevice> {
        self.get_with(pool, ptr, |ptr| {
            let (base, len) = ctx.address_range(ptr)?;
            Ok((base, len, ctx.ipc_handle(base)?))
        })
    }

    /// [`DeviceCache::get`] for callers that ask CUDA themselves (the preload, through the
    /// program's libcuda): `describe(ptr)` gives the allocation's start, length and IPC
    /// handle (`cuMemGetAddressRange`, `cuIpcGetMemHandle`).
    pub fn get_with(
        &mut self,
        pool: &PoolClient,
        ptr: DevicePtr,
        describe: impl FnOnce(DevicePtr) -> Result<(DevicePtr, usize, IpcMemHandle)>,
    ) -> Result<&PoolDevice> {
        let (base, len, handle) = describe(ptr)?;
        let fresh = self
            .devices
            .get(&base.0)
            .is_some_and(|d| d.handle == handle && d.len == len);
        if !fresh {
            // Drop (close) a stale opening before opening the new allocation.
            self.devices.remove(&base.0);
            let d = pool.open_device(base, len, handle)?;
            self.devices.insert(base.0, d);
        }
        Ok(&self.devices[&base.0])
    }

    /// Closes every opened allocation.
    pub fn clear(&mut self) {
        self.devices.clear();
    }
}

impl PoolClient {
    /// Connects to the pool at [`default_socket`].
    pub fn connect_default() -> Result<PoolClient> {
        PoolClient::connect(&default_socket())
    }

    /// Connects to the pool at `path` and checks that it speaks this protocol.
    pub fn connect(path: &Path) -> Result<PoolClient> {
        let sock = wire::connect(path).map_err(|e| unavailable(path, e))?;
        PoolClient::hello(sock)
    }

    /// [`PoolClient::connect`], never waiting longer than `connect` for connecting and the
    /// service's welcome, and then no longer than `call` for any answer (`None`: as long as
    /// it takes). A call that timed out is a [`PoolError::Connection`], and the connection
    /// is then out of step: drop it. For callers that must not hang (the preload).
    pub fn connect_with_timeouts(
        path: &Path,
        connect: std::time::Duration,
        call: Option<std::time::Duration>,
    ) -> Result<PoolClient> {
        let sock = wire::connect_with_timeout(path, connect).map_err(|e| unavailable(path, e))?;
        let client = PoolClient::hello(sock)?;
        {
            let sock = client.conn.sock.lock().unwrap_or_else(|e| e.into_inner());
            wire::set_timeouts(sock.as_fd(), call)
                .map_err(|e| PoolError::Connection(format!("setting timeouts: {e}")))?;
        }
        if call.is_some() {
            client.set_copy_timeouts(call, Some(DEFAULT_STARTED_LIMIT));
        }
        Ok(client)
    }

    fn hello(sock: OwnedFd) -> Result<PoolClient> {
        let conn = Arc::new(Conn::new(sock));
        match conn.call(&Request::Hello { version: VERSION })? {
            (Response::Hello { client_budget, .. }, _) => Ok(PoolClient {
                conn,
                client_budget,
            }),
            (other, _) => Err(PoolError::Protocol(format!("{other:?} to hello"))),
        }
    }

    /// Shuts the connection down both ways (for a caller that gave the pool up): every
    /// later call on it, a buffer's free included, fails at once instead of waiting. The
    /// service then frees what this client held; mapped buffers stay readable and
    /// writable here.
    pub fn shutdown(&self) {
        let sock = self.conn.sock.lock().unwrap_or_else(|e| e.into_inner());
        let _ = rustix::net::shutdown(&*sock, rustix::net::Shutdown::Both);
    }

    /// Changes how long each later call waits for the service's answer (`None`: as long as
    /// it takes). A call that times out leaves the connection out of step: drop it.
    pub fn set_call_timeout(&self, timeout: Option<std::time::Duration>) -> Result<()> {
        let sock = self.conn.sock.lock().unwrap_or_else(|e| e.into_inner());
        wire::set_timeouts(sock.as_fd(), timeout)
            .map_err(|e| PoolError::Connection(format!("setting timeouts: {e}")))
    }

    /// How long each later copy waits for the service to start it (`start`: the copy's
    /// deadline is now plus this) and, once started, for it to finish (`started`); `None`:
    /// no limit. A copy not started in time is [`PoolError::NotStarted`] (the service will
    /// never make it: safe to make it another way); one started and unfinished in time is
    /// [`PoolError::Stuck`]. [`PoolClient::connect_with_timeouts`] sets the call timeout
    /// and [`DEFAULT_STARTED_LIMIT`]; [`PoolClient::connect`] none.
    pub fn set_copy_timeouts(&self, start: Option<Duration>, started: Option<Duration>) {
        self.conn
            .start_wait_ns
            .store(nanos(start), Ordering::Relaxed);
        self.conn
            .started_limit_ns
            .store(nanos(started), Ordering::Relaxed);
    }

    /// The connection's descriptor, for a forked child to close (a child must never use
    /// its parent's connection, and the service sees the connection close only when
    /// every process holding it has closed it). Not for sending or receiving.
    pub fn socket_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.conn
            .sock
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_raw_fd()
    }

    /// The most bytes this client may hold in pinned buffers.
    pub fn client_budget(&self) -> u64 {
        self.client_budget
    }

    /// A new pinned buffer of at least `len` bytes (rounded up to whole pages), private to
    /// this client.
    pub fn alloc(&self, len: usize) -> Result<PoolBuffer> {
        self.alloc_request(len, None)
    }

    /// The buffer called `name` of this user: made (at least `len` bytes) by the first
    /// client that asks, the same memory for every client of the same user that asks for
    /// the name afterwards (one copy in RAM, one GPU mapping), freed when the last lets go.
    /// [`PoolBuffer::created`] says whether this call made it.
    pub fn alloc_shared(&self, name: &str, len: usize) -> Result<PoolBuffer> {
        self.alloc_request(len, Some(name.to_string()))
    }

    fn alloc_request(&self, len: usize, name: Option<String>) -> Result<PoolBuffer> {
        match self.conn.call(&Request::Alloc {
            len: len as u64,
            name,
        })? {
            (
                Response::Buffer {
                    buffer,
                    len,
                    huge,
                    created,
                },
                Some(fd),
            ) => {
                let len = usize::try_from(len)
                    .map_err(|_| PoolError::Protocol(format!("buffer of {len} bytes")))?;
                let map = check_shared_file(fd.as_fd(), len).and_then(|()| {
                    Mapping::new(fd.as_fd(), len)
                        .map_err(|e| PoolError::Connection(format!("mapping the buffer: {e}")))
                });
                // The descriptor is closed here; the mapping keeps the memory.
                drop(fd);
                let map = match map {
                    Ok(m) => m,
                    Err(e) => {
                        let _ = self.conn.call(&Request::Free { buffer });
                        return Err(e);
                    }
                };
                Ok(PoolBuffer {
                    conn: self.conn.clone(),
                    id: buffer,
                    map,
                    huge,
                    created,
                })
            }
            (Response::Buffer { .. }, None) => Err(PoolError::Protocol(
                "a buffer without its descriptor".into(),
            )),
            (other, _) => Err(PoolError::Protocol(format!("{other:?} to alloc"))),
        }
    }

    /// Lets the pool copy into and out of the device allocation that holds `ptr` (made by
    /// `cuMemAlloc` in `ctx`): sends its CUDA IPC handle.
    pub fn register_device(&self, ctx: &Context, ptr: DevicePtr) -> Result<PoolDevice> {
        let (base, len) = ctx.address_range(ptr)?;
        let handle = ctx.ipc_handle(base)?;
        self.open_device(base, len, handle)
    }

    fn open_device(&self, base: DevicePtr, len: usize, handle: IpcMemHandle) -> Result<PoolDevice> {
        match self.conn.call(&Request::OpenDevice {
            handle: handle.0.to_vec(),
        })? {
            (Response::Device { device, len: seen }, _) if seen as usize >= len => Ok(PoolDevice {
                conn: self.conn.clone(),
                id: device,
                base,
                len,
                handle,
            }),
            (Response::Device { device, len: seen }, _) => {
                let _ = self.conn.call(&Request::CloseDevice { device });
                Err(PoolError::Protocol(format!(
                    "the pool sees {seen} bytes of an allocation of {len}"
                )))
            }
            (other, _) => Err(PoolError::Protocol(format!("{other:?} to open_device"))),
        }
    }

    /// Copies `len` bytes from `buffer` at `buffer_offset` to the device at `dst`
    /// (inside `device`'s allocation); returns once they have arrived.
    pub fn copy_to_device(
        &self,
        buffer: &PoolBuffer,
        buffer_offset: usize,
        device: &PoolDevice,
        dst: DevicePtr,
        len: usize,
    ) -> Result<()> {
        self.copy(
            Direction::HostToDevice,
            buffer,
            buffer_offset,
            device,
            dst,
            len,
        )
    }

    /// Copies `len` bytes from the device at `src` (inside `device`'s allocation) into
    /// `buffer` at `buffer_offset`; returns once they have arrived.
    pub fn copy_from_device(
        &self,
        buffer: &PoolBuffer,
        buffer_offset: usize,
        device: &PoolDevice,
        src: DevicePtr,
        len: usize,
    ) -> Result<()> {
        self.copy(
            Direction::DeviceToHost,
            buffer,
            buffer_offset,
            device,
            src,
            len,
        )
    }

    fn copy(
        &self,
        dir: Direction,
        buffer: &PoolBuffer,
        buffer_offset: usize,
        device: &PoolDevice,
        at: DevicePtr,
        len: usize,
    ) -> Result<()> {
        // Ids are per connection: another connection's buffer or device would name
        // whatever has the same id on this one.
        if !Arc::ptr_eq(&buffer.conn, &self.conn) || !Arc::ptr_eq(&device.conn, &self.conn) {
            return Err(PoolError::Refused {
                kind: ErrorKind::BadRequest,
                message: "the buffer or the device allocation belongs to another connection".into(),
            });
        }
        let device_offset =
            at.0.checked_sub(device.base.0)
                .filter(|off| {
                    off.checked_add(len as u64)
                        .is_some_and(|e| e <= device.len as u64)
                })
                .ok_or_else(|| PoolError::Refused {
                    kind: ErrorKind::BadRequest,
                    message: format!(
                        "{len} bytes at {:#x} are not inside the registered allocation {:#x}+{}",
                        at.0, device.base.0, device.len
                    ),
                })?;
        self.conn.copy_call(Request::Copy {
            dir,
            buffer: buffer.id,
            buffer_offset: buffer_offset as u64,
            device: device.id,
            device_offset,
            len: len as u64,
            deadline_ns: None,
        })
    }

    /// The pool's accounting (all clients).
    pub fn stats(&self) -> Result<Stats> {
        match self.conn.call(&Request::Stats)? {
            (Response::Stats(s), _) => Ok(s),
            (other, _) => Err(PoolError::Protocol(format!("{other:?} to stats"))),
        }
    }
}

impl PoolBuffer {
    /// The pool's id of this buffer (meaningful only on this connection).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether it is empty (never).
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Whether the pool put it on 2 MiB huge pages.
    pub fn is_huge(&self) -> bool {
        self.huge
    }

    /// Whether the request that returned it made it (always for [`PoolClient::alloc`];
    /// for [`PoolClient::alloc_shared`], false when another client had made it).
    pub fn created(&self) -> bool {
        self.created
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        self.map.as_slice()
    }

    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.map.as_mut_slice()
    }
}

impl Drop for PoolBuffer {
    fn drop(&mut self) {
        // A lost connection has freed it already (the service frees a closed client's buffers).
        let _ = self.conn.call(&Request::Free { buffer: self.id });
    }
}

impl PoolDevice {
    /// The pool's id of this allocation (meaningful only on this connection).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The allocation's start in this process.
    pub fn base(&self) -> DevicePtr {
        self.base
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty (never).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for PoolDevice {
    fn drop(&mut self) {
        let _ = self.conn.call(&Request::CloseDevice { device: self.id });
    }
}

/// A buffer's file from the service is mapped only if it holds `len` bytes and is sealed
/// against shrinking: a shorter file, or one shrunk later, would raise SIGBUS in the
/// program when it touches the mapping.
fn check_shared_file(fd: std::os::fd::BorrowedFd<'_>, len: usize) -> Result<()> {
    let st = rustix::fs::fstat(fd)
        .map_err(|e| PoolError::Protocol(format!("the buffer's file: {e}")))?;
    if (st.st_size as u64) < len as u64 {
        return Err(PoolError::Protocol(format!(
            "the buffer's file holds {} bytes, not {len}",
            st.st_size
        )));
    }
    let seals = rustix::fs::fcntl_get_seals(fd)
        .map_err(|e| PoolError::Protocol(format!("the buffer's file seals: {e}")))?;
    if !seals.contains(rustix::fs::SealFlags::SHRINK) {
        return Err(PoolError::Protocol(
            "the buffer's file is not sealed against shrinking".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// A connection whose other end is a scripted service (`script` gets the socket after
    /// reading the copy request).
    fn scripted(script: impl FnOnce(OwnedFd, Request) + Send + 'static) -> Conn {
        let (a, b) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        std::thread::spawn(move || {
            let (bytes, _) = wire::recv(b.as_fd()).unwrap().unwrap();
            let req: Request = proto::decode(&bytes).unwrap();
            script(b, req)
        });
        Conn::new(a)
    }

    fn answer(sock: &OwnedFd, r: &Response) {
        wire::send(sock.as_fd(), &proto::encode(r), None).unwrap();
    }

    fn copy() -> Request {
        Request::Copy {
            dir: Direction::HostToDevice,
            buffer: 1,
            buffer_offset: 0,
            device: 2,
            device_offset: 0,
            len: 8,
            deadline_ns: None,
        }
    }

    fn timeouts(c: &Conn, start: Duration, started: Duration) {
        c.start_wait_ns.store(nanos(Some(start)), Ordering::Relaxed);
        c.started_limit_ns
            .store(nanos(Some(started)), Ordering::Relaxed);
    }

    #[test]
    fn a_started_copy_is_waited_for_past_the_start_deadline() {
        // The copy takes longer than the wait for its start: the client must not give up
        // (and make the copy itself) while the service's copy may still land.
        let c = scripted(|s, req| {
            let Request::Copy { deadline_ns, .. } = req else {
                panic!("{req:?}")
            };
            assert!(
                deadline_ns.is_some_and(|d| d > monotonic_ns()),
                "a deadline to come"
            );
            answer(&s, &Response::Started);
            std::thread::sleep(Duration::from_millis(400));
            answer(&s, &Response::Done);
        });
        timeouts(&c, Duration::from_millis(100), Duration::from_secs(10));
        let t0 = Instant::now();
        c.copy_call(copy()).expect("done");
        assert!(t0.elapsed() >= Duration::from_millis(400));
    }

    #[test]
    fn no_start_by_the_deadline_is_not_started_and_bounded() {
        let c = scripted(|s, _| {
            std::thread::sleep(Duration::from_millis(800));
            // What a service would send after the deadline (then `Expired`, no copy).
            let _ = wire::send(s.as_fd(), &proto::encode(&Response::Started), None);
        });
        timeouts(&c, Duration::from_millis(100), Duration::from_secs(10));
        let t0 = Instant::now();
        let err = c.copy_call(copy()).unwrap_err();
        assert!(matches!(err, PoolError::NotStarted(_)), "{err}");
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(100) && took < Duration::from_millis(800),
            "{took:?}"
        );
    }

    #[test]
    fn after_a_copy_not_started_the_late_answers_are_never_taken_for_another_copys() {
        let c = scripted(|s, _| {
            std::thread::sleep(Duration::from_millis(300));
            let _ = wire::send(s.as_fd(), &proto::encode(&Response::Started), None);
            let _ = wire::send(s.as_fd(), &proto::encode(&Response::Done), None);
            std::thread::sleep(Duration::from_secs(2));
        });
        timeouts(&c, Duration::from_millis(100), Duration::from_secs(10));
        let err = c.copy_call(copy()).unwrap_err();
        assert!(matches!(err, PoolError::NotStarted(_)), "{err}");
        std::thread::sleep(Duration::from_millis(400));
        // The late `Started` and `Done` were for the first copy: this one was never made.
        let err = c.copy_call(copy()).unwrap_err();
        assert!(matches!(err, PoolError::Connection(_)), "{err}");
    }

    #[test]
    fn a_refusal_before_the_start_is_the_answer_and_a_started_copy_is_bounded() {
        let c = scripted(|s, _| {
            answer(
                &s,
                &Response::Error {
                    kind: ErrorKind::NotFound,
                    message: "no buffer 1".into(),
                },
            )
        });
        timeouts(&c, Duration::from_secs(5), Duration::from_secs(5));
        let err = c.copy_call(copy()).unwrap_err();
        assert!(
            matches!(
                err,
                PoolError::Refused {
                    kind: ErrorKind::NotFound,
                    ..
                }
            ),
            "{err}"
        );
        // Started, then silence: given up at the limit, as stuck.
        let c = scripted(|s, _| {
            answer(&s, &Response::Started);
            std::thread::sleep(Duration::from_secs(2));
            drop(s);
        });
        timeouts(&c, Duration::from_secs(5), Duration::from_millis(200));
        let err = c.copy_call(copy()).unwrap_err();
        assert!(matches!(err, PoolError::Stuck(_)), "{err}");
        // Started, then the service dies: the connection closed.
        let c = scripted(|s, _| {
            answer(&s, &Response::Started);
            drop(s);
        });
        timeouts(&c, Duration::from_secs(5), Duration::from_secs(5));
        let err = c.copy_call(copy()).unwrap_err();
        assert!(matches!(err, PoolError::Connection(_)), "{err}");
    }
}
