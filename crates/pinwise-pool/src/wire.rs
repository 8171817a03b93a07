//! `SOCK_SEQPACKET` Unix sockets: one datagram per message, with at most one descriptor
//! (`SCM_RIGHTS`), through rustix (no hand-written `cmsghdr` code), and the peer's
//! credentials (`SO_PEERCRED`).

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::io::Errno;
use rustix::net::{
    self, AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};

use crate::proto::MAX_MESSAGE;

/// The peer of a connection, as the kernel vouches for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// Process id.
    pub pid: u32,
    /// User id.
    pub uid: u32,
}

/// A new `SOCK_SEQPACKET` Unix socket (close-on-exec).
fn socket() -> rustix::io::Result<OwnedFd> {
    net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
}

/// Connects to the socket at `path`.
pub fn connect(path: &Path) -> rustix::io::Result<OwnedFd> {
    let fd = socket()?;
    net::connect(&fd, &SocketAddrUnix::new(path)?)?;
    Ok(fd)
}

/// Connects to the socket at `path`, sends and receives on it timing out after `timeout`
/// (connecting to a full backlog included; change it with [`set_timeouts`]). A receive
/// that times out is `EAGAIN`.
pub fn connect_with_timeout(
    path: &Path,
    timeout: std::time::Duration,
) -> rustix::io::Result<OwnedFd> {
    let fd = socket()?;
    net::sockopt::set_socket_timeout(&fd, net::sockopt::Timeout::Send, Some(timeout))?;
    net::sockopt::set_socket_timeout(&fd, net::sockopt::Timeout::Recv, Some(timeout))?;
    net::connect(&fd, &SocketAddrUnix::new(path)?)?;
    Ok(fd)
}

/// Sets the send and receive timeouts of a connection (`None`: none).
pub fn set_timeouts(fd: BorrowedFd<'_>, io: Option<std::time::Duration>) -> rustix::io::Result<()> {
    net::sockopt::set_socket_timeout(fd, net::sockopt::Timeout::Send, io)?;
    net::sockopt::set_socket_timeout(fd, net::sockopt::Timeout::Recv, io)
}

/// Binds and listens at `path` (which must not exist).
pub fn listen(path: &Path) -> rustix::io::Result<OwnedFd> {
    let fd = socket()?;
    net::bind(&fd, &SocketAddrUnix::new(path)?)?;
    net::listen(&fd, 64)?;
    Ok(fd)
}

/// Accepts one connection (close-on-exec).
pub fn accept(listener: BorrowedFd<'_>) -> rustix::io::Result<OwnedFd> {
    net::accept_with(listener, SocketFlags::CLOEXEC)
}

/// The connected peer's pid and uid (`SO_PEERCRED`).
pub fn peer(fd: BorrowedFd<'_>) -> rustix::io::Result<Peer> {
    let cred = net::sockopt::socket_peercred(fd)?;
    Ok(Peer {
        pid: cred.pid.as_raw_nonzero().get() as u32,
        uid: cred.uid.as_raw(),
    })
}

/// Sends one message, with `fd` attached if given. Never raises `SIGPIPE`.
pub fn send(
    sock: BorrowedFd<'_>,
    bytes: &[u8],
    fd: Option<BorrowedFd<'_>>,
) -> rustix::io::Result<()> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds;
    if let Some(fd) = fd {
        fds = [fd];
        if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err(Errno::NOBUFS);
        }
    }
    let n = net::sendmsg(
        sock,
        &[IoSlice::new(bytes)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    if n != bytes.len() {
        return Err(Errno::MSGSIZE);
    }
    Ok(())
}

/// Receives one message and the descriptor attached to it, if any. `Ok(None)` when the
/// peer has closed the connection. A truncated message is `EMSGSIZE`; descriptors beyond
/// the first are closed.
pub fn recv(sock: BorrowedFd<'_>) -> rustix::io::Result<Option<(Vec<u8>, Option<OwnedFd>)>> {
    recv_with(sock, RecvFlags::empty())
}

/// [`recv`] without waiting: `EAGAIN` when no message is queued.
pub fn try_recv(sock: BorrowedFd<'_>) -> rustix::io::Result<Option<(Vec<u8>, Option<OwnedFd>)>> {
    recv_with(sock, RecvFlags::DONTWAIT)
}

/// Waits until a message (or the peer's close) can be received or `timeout` passed
/// (`None`: no limit); whether one can.
pub fn wait_readable(
    sock: BorrowedFd<'_>,
    timeout: Option<std::time::Duration>,
) -> rustix::io::Result<bool> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let ts = timeout.map(|t| Timespec {
        tv_sec: t.as_secs() as i64,
        tv_nsec: i64::from(t.subsec_nanos()),
    });
    let mut fds = [PollFd::new(&sock, PollFlags::IN)];
    loop {
        match poll(&mut fds, ts.as_ref()) {
            Err(Errno::INTR) => continue,
            Ok(n) => return Ok(n > 0),
            Err(e) => return Err(e),
        }
    }
}

fn recv_with(
    sock: BorrowedFd<'_>,
    flags: RecvFlags,
) -> rustix::io::Result<Option<(Vec<u8>, Option<OwnedFd>)>> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let msg = loop {
        match net::recvmsg(
            sock,
            &mut [IoSliceMut::new(&mut buf)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC | flags,
        ) {
            Err(Errno::INTR) => continue,
            other => break other?,
        }
    };
    let mut received = None;
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = m {
            for fd in fds {
                if received.is_none() {
                    received = Some(fd);
                }
            }
        }
    }
    if msg.bytes == 0 {
        return Ok(None);
    }
    if msg.flags.contains(net::ReturnFlags::TRUNC) || msg.flags.contains(net::ReturnFlags::CTRUNC) {
        return Err(Errno::MSGSIZE);
    }
    buf.truncate(msg.bytes);
    Ok(Some((buf, received)))
}

/// `true` for the errors that mean "nobody serves at that path" (the client falls back).
pub fn is_absent(e: Errno) -> bool {
    matches!(e, Errno::NOENT | Errno::CONNREFUSED | Errno::NOTDIR)
}
