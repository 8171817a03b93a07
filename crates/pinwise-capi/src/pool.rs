//! C ABI of the pinned-memory pool's client (`pinwise_pool_*`): connect to a running
//! `pinwise pool serve`, take pinned buffers mapped in this process, and have the service
//! copy between them and this process's device memory (`cuMemAlloc` pointers).
//!
//! ```c
//! PinwisePool *pool = pinwise_pool_connect(NULL, 0);      /* $PINWISE_POOL_SOCKET, GPU 0 */
//! if (!pool) { /* no pool: pin in-process as before */ }
//! PinwisePoolBuffer *b = pinwise_pool_alloc(pool, 64 << 20, "staging");  /* NULL name: private */
//! memcpy(pinwise_pool_buffer_data(b), src, 64 << 20);
//! if (pinwise_pool_copy(pool, b, 0, dptr, 64 << 20, PINWISE_HTOD) != 0) { /* fall back */ }
//! pinwise_pool_free(b);
//! pinwise_pool_disconnect(pool);
//! ```
//!
//! Functions returning `int` return 0 on success and -1 on failure; functions returning a
//! pointer return NULL on failure; `pinwise_pool_last_error()` says why (per thread). Every
//! failure means: do what you would do without the pool. A copy returns once the bytes have
//! arrived; it is not ordered with the program's CUDA streams.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::Mutex;

use pinwise_cuda::{Context, DevicePtr};
use pinwise_pool::{DeviceCache, PoolBuffer, PoolClient};

use crate::alloc::{PINWISE_DTOH, PINWISE_HTOD};
use crate::ffi::{guarded, last_error, opt_path};

/// A connection to the pool (opaque to C).
pub struct PinwisePool {
    client: PoolClient,
    ctx: Context,
    devices: Mutex<DeviceCache>,
}

/// A pinned buffer of the pool, mapped in this process (opaque to C).
pub struct PinwisePoolBuffer {
    buffer: PoolBuffer,
}

/// Connects to the pool at `socket` (NULL: `$PINWISE_POOL_SOCKET`, else
/// `/run/pinwise/pool.sock`) for copies to device memory of CUDA device `device`. NULL when
/// there is no pool, it refuses this user, or CUDA cannot be loaded.
///
/// # Safety
/// `socket` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pinwise_pool_connect(
    socket: *const c_char,
    device: u32,
) -> *mut PinwisePool {
    guarded(std::ptr::null_mut(), || {
        // SAFETY: the caller's contract.
        let path = unsafe { opt_path(socket, "the socket path") }?;
        let client = match path {
            Some(p) => PoolClient::connect(&p),
            None => PoolClient::connect_default(),
        }
        .map_err(|e| e.to_string())?;
        let driver = pinwise_cuda::Driver::shared().map_err(|e| e.to_string())?;
        let ctx = driver
            .device(device as usize)
            .and_then(|d| d.primary_context())
            .map_err(|e| e.to_string())?;
        Ok(Box::into_raw(Box::new(PinwisePool {
            client,
            ctx,
            devices: Mutex::new(DeviceCache::default()),
        })))
    })
}

/// Closes the connection (the pool closes what it opened for it). Buffers stay valid until
/// `pinwise_pool_free`. NULL is ignored.
///
/// # Safety
/// `pool` is NULL or from `pinwise_pool_connect`, not yet disconnected.
#[no_mangle]
pub unsafe extern "C" fn pinwise_pool_disconnect(pool: *mut PinwisePool) {
    if !pool.is_null() {
        // SAFETY: the caller's contract: ours, from Box::into_raw, once.
        drop(unsafe { Box::from_raw(pool) });
    }
}

/// A pinned buffer of at least `len` bytes: private (`name` NULL) or the buffer called
/// `name` of this user, shared with the other processes that ask for it (made by the first).
///
/// # Safety
/// `pool` is from `pinwise_pool_connect`; `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pinwise_pool_alloc(
    pool: *const PinwisePool,
    len: usize,
    name: *const c_char,
) -> *mut PinwisePoolBuffer {
    guarded(std::ptr::null_mut(), || {
        // SAFETY: the caller's contract.
        let pool = unsafe { pool.as_ref() }.ok_or("the pool is NULL")?;
        let buffer = if name.is_null() {
            pool.client.alloc(len)
        } else {
            // SAFETY: the caller's contract.
            let name = unsafe { CStr::from_ptr(name) }
                .to_str()
                .map_err(|_| "the buffer name is not valid UTF-8".to_string())?;
            pool.client.alloc_shared(name, len)
        }
        .map_err(|e| e.to_string())?;
        Ok(Box::into_raw(Box::new(PinwisePoolBuffer { buffer })))
    })
}

/// The buffer's first byte (NULL for a NULL buffer).
///
/// # Safety
/// `buffer` is NULL or from `pinwise_pool_alloc`, not yet freed.
#[no_mangle]
pub unsafe extern "C" fn pinwise_pool_buffer_data(buffer: *const PinwisePoolBuffer) -> *mut c_void {
    // SAFETY: the caller's contract.
    match unsafe { buffer.as_ref() } {
        Some(b) => b.buffer.as_slice().as_ptr() as *mut c_void,
        None => std::ptr::null_mut(),
    }
}

/// The buffer's size in bytes (0 for a NULL buffer).
///
/// # Safety
/// `buffer` is NULL or from `pinwise_pool_alloc`, not yet freed.
#[no_mangle]
pub unsafe extern "C" fn pinwise_pool_buffer_size(buffer: *const PinwisePoolBuffer) -> usize {
    // SAFETY: the caller's contract.
    unsafe { buffer.as_ref() }.map_or(0, |b| b.buffer.len())
}

/// Lets go of a buffer (unmapped here; freed in the pool when no process holds it). NULL is
/// ignored.
///
/// # Safety
/// `buffer` is NULL or from `pinwise_pool_alloc`, not yet freed.
#[no_mangle]
pub unsafe extern "C" fn pinwise_pool_free(buffer: *mut PinwisePoolBuffer) {
    if !buffer.is_null() {
        // SAFETY: the caller's contract: ours, from Box::into_raw, once.
        drop(unsafe { Box::from_raw(buffer) });
    }
}

/// Has the pool copy `len` bytes between `buffer` at `buffer_offset` and the device memory
/// at `device_ptr` (inside one `cuMemAlloc` allocation of this process): `PINWISE_HTOD`
/// (buffer to device) or `PINWISE_DTOH`. Returns 0 once the bytes have arrived, -1 on failure
/// (nothing was reported copied; copy in-process instead). `buffer` must come from the
/// same `pool` connection (another connection's buffer is refused).
///
/// The service keeps the device allocation opened (through its CUDA IPC handle) until
/// `pinwise_pool_disconnect`: disconnect before `cuMemFree` of that allocation (CUDA leaves
/// freeing exported memory that another process still has open undefined).
///
/// # Safety
/// `pool` is from `pinwise_pool_connect` and `buffer` from `pinwise_pool_alloc`.
#[no_mangle]
pub unsafe extern "C" fn pinwise_pool_copy(
    pool: *const PinwisePool,
    buffer: *const PinwisePoolBuffer,
    buffer_offset: usize,
    device_ptr: u64,
    len: usize,
    direction: c_int,
) -> c_int {
    guarded(-1, || {
        // SAFETY: the caller's contract.
        let pool = unsafe { pool.as_ref() }.ok_or("the pool is NULL")?;
        // SAFETY: the caller's contract.
        let b = unsafe { buffer.as_ref() }.ok_or("the buffer is NULL")?;
        let mut devices = pool.devices.lock().unwrap_or_else(|e| e.into_inner());
        let ptr = DevicePtr(device_ptr);
        let dev = devices
            .get(&pool.client, &pool.ctx, ptr)
            .map_err(|e| e.to_string())?;
        match direction {
            PINWISE_HTOD => pool
                .client
                .copy_to_device(&b.buffer, buffer_offset, dev, ptr, len),
            PINWISE_DTOH => pool
                .client
                .copy_from_device(&b.buffer, buffer_offset, dev, ptr, len),
            d => {
                return Err(format!(
                    "direction {d} is neither PINWISE_HTOD nor PINWISE_DTOH"
                ))
            }
        }
        .map_err(|e| e.to_string())?;
        Ok(0)
    })
}

/// What the calling thread's last failing `pinwise_pool_*` call said ("" if none).
#[no_mangle]
pub extern "C" fn pinwise_pool_last_error() -> *const c_char {
    last_error()
}
