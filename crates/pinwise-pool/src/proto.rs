//! The wire protocol: one JSON message per `SOCK_SEQPACKET` datagram, a request from the
//! client and exactly one response from the service, except for a copy. A `Buffer` response
//! carries the buffer's memfd as `SCM_RIGHTS` ancillary data.
//!
//! **A copy has two answers**, so that a client that gives up waiting can never be overtaken
//! by the service's late copy. The request carries a deadline (`CLOCK_MONOTONIC`, one clock
//! for the whole node). The service checks the request; a refusal is its only answer (nothing
//! copied). Otherwise it answers [`Response::Started`] *first*, then reads the clock: past
//! the deadline it answers [`ErrorKind::Expired`] and copies nothing; else it copies and
//! answers [`Response::Done`] (or a failure). The client waits for `Started` until the
//! deadline has passed on the clock, then looks once more without waiting: a `Started`
//! queued by then means the copy may run, and the client waits for the final answer; none
//! means any `Started` still to come was sent after the deadline, so the service's clock
//! check that follows it fails and it will never copy: the client may redo the copy itself
//! (it drops the connection, which is out of step).

use serde::{Deserialize, Serialize};

/// The protocol version both sides must speak.
pub const VERSION: u32 = 2;
/// The largest datagram either side sends or accepts.
pub const MAX_MESSAGE: usize = 16 * 1024;

/// Direction of a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Pool buffer -> client device memory.
    HostToDevice,
    /// Client device memory -> pool buffer.
    DeviceToHost,
}

/// What a client asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// First message: the protocol version the client speaks.
    Hello {
        /// The protocol version.
        version: u32,
    },
    /// A pinned buffer of at least `len` bytes: a new one, or with `name`, the buffer of
    /// that name of the client's user (made on first use, shared by every client of the
    /// user that asks for the name, freed when the last lets go).
    Alloc {
        /// Bytes wanted.
        len: u64,
        /// The shared buffer's name, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// Frees one of this client's buffers.
    Free {
        /// The buffer.
        buffer: u64,
    },
    /// Opens a device allocation of the client by its CUDA IPC handle (64 bytes).
    OpenDevice {
        /// The CUDA IPC memory handle's bytes.
        handle: Vec<u8>,
    },
    /// Closes a device allocation opened by `OpenDevice`.
    CloseDevice {
        /// The device allocation, as `Device` named it.
        device: u64,
    },
    /// Copies `len` bytes between a buffer and an opened device allocation; answered when
    /// the bytes have arrived.
    Copy {
        /// Which way.
        dir: Direction,
        /// The buffer.
        buffer: u64,
        /// Where in the buffer, bytes.
        buffer_offset: u64,
        /// The opened device allocation.
        device: u64,
        /// Where in the device allocation, bytes.
        device_offset: u64,
        /// Bytes to copy.
        len: u64,
        /// The latest `CLOCK_MONOTONIC` time (ns) at which the service may start the copy
        /// (`None`: any time). See the module documentation.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deadline_ns: Option<u64>,
    },
    /// The service's accounting.
    Stats,
}

/// Why the service said no.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The client's user may not use this service.
    NotAllowed,
    /// The client's budget or the service's capacity would be exceeded.
    OverBudget,
    /// No such buffer or device of this client.
    NotFound,
    /// Offsets or lengths out of range, or a malformed request.
    BadRequest,
    /// The protocol versions differ.
    Version,
    /// CUDA or the operating system failed in the service.
    Failed,
    /// A copy's deadline passed before the service could start it: nothing was copied.
    Expired,
}

/// The service's accounting, as `Stats` answers it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Connected clients.
    pub clients: u64,
    /// Live buffers, all clients.
    pub buffers: u64,
    /// Bytes of live buffers (pinned), all clients.
    pub bytes: u64,
    /// Of those, bytes on 2 MiB huge pages.
    pub huge_bytes: u64,
    /// Open device allocations (IPC mappings), all clients.
    pub devices: u64,
    /// Clients' holds on buffers (a named buffer held by 3 clients counts 3).
    pub attachments: u64,
    /// Bytes held through named buffers beyond each buffer's first holder: what those
    /// clients would otherwise pin (and map on the GPU) again, each on its own.
    #[serde(default)]
    pub deduplicated_bytes: u64,
    /// Copies done since start.
    pub copies: u64,
    /// Bytes copied since start.
    pub copied_bytes: u64,
    /// Copies not made because their deadline had passed when the service came to them
    /// (the client made them itself).
    #[serde(default)]
    pub expired_copies: u64,
    /// The service's capacity (bytes, all clients).
    pub capacity: u64,
    /// Each client's budget (bytes).
    pub client_budget: u64,
}

/// What the service answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Response {
    /// Welcome: the service's version and this client's budget.
    Hello {
        /// The service's protocol version.
        version: u32,
        /// This client's budget, bytes.
        client_budget: u64,
    },
    /// A buffer (its memfd travels with this message).
    Buffer {
        /// The buffer's number.
        buffer: u64,
        /// Its length, bytes (at least the length asked for).
        len: u64,
        /// Whether it is backed by huge pages.
        huge: bool,
        /// Made by this request (false: an existing named buffer).
        created: bool,
    },
    /// An opened device allocation and its size.
    Device {
        /// The device allocation's number.
        device: u64,
        /// Its size, bytes.
        len: u64,
    },
    /// A copy passed the service's checks and will be made unless its deadline has passed
    /// (the final answer follows).
    Started,
    /// Done.
    Done,
    /// Accounting.
    Stats(Stats),
    /// Refused or failed.
    Error {
        /// What kind of refusal.
        kind: ErrorKind,
        /// What went wrong, for a person.
        message: String,
    },
}

/// Encodes a message.
pub fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    serde_json::to_vec(msg).expect("protocol messages always serialize")
}

/// Decodes a message; the error names what is wrong.
pub fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("malformed pool message: {e}"))
}

impl Stats {
    /// Estimated GPU page-table memory the pool saves: [`Stats::deduplicated_bytes`] at
    /// `pinwise_core::pagetable`'s figure (an estimate, not a measurement).
    pub fn estimated_gpu_pagetable_bytes_saved(&self) -> u64 {
        pinwise_core::pagetable::estimated_gpu_bytes(self.deduplicated_bytes, 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_responses_round_trip() {
        let reqs = [
            Request::Hello { version: VERSION },
            Request::Alloc {
                len: 1 << 30,
                name: None,
            },
            Request::Alloc {
                len: 8,
                name: Some("weights".into()),
            },
            Request::OpenDevice {
                handle: vec![7; 64],
            },
            Request::Copy {
                dir: Direction::DeviceToHost,
                buffer: 3,
                buffer_offset: 4096,
                device: 1,
                device_offset: 8,
                len: 99,
                deadline_ns: Some(12345),
            },
        ];
        for r in reqs {
            let bytes = encode(&r);
            assert!(bytes.len() < MAX_MESSAGE);
            assert_eq!(decode::<Request>(&bytes).unwrap(), r);
        }
        let e = Response::Error {
            kind: ErrorKind::OverBudget,
            message: "x".into(),
        };
        assert_eq!(decode::<Response>(&encode(&e)).unwrap(), e);
    }

    #[test]
    fn the_saving_estimate_is_8_bytes_per_4_kib_page() {
        let s = Stats {
            deduplicated_bytes: 3 << 30,
            ..Stats::default()
        };
        assert_eq!(s.estimated_gpu_pagetable_bytes_saved(), 6 << 20);
    }

    #[test]
    fn garbage_is_a_named_error() {
        let err = decode::<Request>(b"{\"op\":\"launch_missiles\"}").unwrap_err();
        assert!(err.contains("malformed pool message"), "{err}");
    }
}
