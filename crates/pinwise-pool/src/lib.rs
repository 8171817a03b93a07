//! pinwise-pool: pinned host memory shared by the processes of a node, with one GPU mapping.
//!
//! Every process that pins (registers or allocates page-locked) host memory makes the GPU
//! keep page-table entries for it, per process (about 8 bytes per 4 KiB page; see
//! `bench/gpu/pagetable/` for the measured figure). Processes that stage the same kind of
//! data (DataLoader workers, inference replicas, one rank per GPU) pay that, and the pinned
//! RAM, once each. Here one process, the **service** ([`Service`], `pinwise pool serve`),
//! owns the pinned memory and does the other processes' copies:
//!
//! 1. a client connects to the service's Unix socket ([`PoolClient::connect`]); the service
//!    takes its user id from the kernel (`SO_PEERCRED`) and refuses users it does not allow;
//! 2. [`PoolClient::alloc`]: the service makes a segment (a sealed memfd, on 2 MiB huge pages
//!    when reserved), registers it with CUDA once (`cuMemHostRegister`), and passes the memfd
//!    (`SCM_RIGHTS`); the client maps it and fills or reads it like any memory. Each buffer
//!    is its own memfd, so a client can only ever map its own buffers;
//! 3. [`PoolClient::register_device`]: the client sends the CUDA IPC handle of its device
//!    allocation (`cuIpcGetMemHandle`); the service opens it (`cuIpcOpenMemHandle`);
//! 4. [`PoolClient::copy_to_device`] / [`PoolClient::copy_from_device`]: the service copies
//!    between the buffer and the client's device memory and answers when the bytes arrived.
//!    A copy has a deadline to start and two answers (`Started`, then `Done`: see
//!    [`proto`]), so that a client that stopped waiting can never be overtaken by the
//!    service's late copy; a started copy is bounded by the service's copy limit
//!    ([`ServiceConfig::copy_limit`]: past it the service ends itself).
//!
//! Budgets: a capacity for the pool and a budget per client (connection). A client that
//! exits or dies (its socket closes) frees everything it held. The service's absence, a
//! refusal or a broken connection is a [`PoolError`]: the caller pins in-process instead.
//! A copy is reported done only after it completed, so a failure never leaves wrong bytes
//! unreported.
//!
//! Copies are synchronous from the client's view and not ordered with the client's own CUDA
//! streams: the client synchronizes the work that touches the device range first.

mod client;
pub mod ledger;
pub mod proto;
mod service;
pub mod shm;
pub mod wire;

pub use client::{
    default_socket, DeviceCache, PoolBuffer, PoolClient, PoolDevice, PoolError, Result,
    DEFAULT_SOCKET, DEFAULT_STARTED_LIMIT, SOCKET_ENV,
};
pub use proto::{ErrorKind, Stats};
pub use service::{
    Service, ServiceConfig, ServiceError, DEFAULT_COPY_LIMIT, MAX_BUFFERS_PER_CLIENT,
    MAX_DEVICES_PER_CLIENT,
};
