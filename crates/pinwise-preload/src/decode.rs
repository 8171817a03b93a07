//! What a copy entry point's arguments say it copies: direction, host range, bytes, stream.
//!
//! Pure: no driver, no state. Where a side's kind of memory is only known to the driver
//! (unified addresses, `cudaMemcpyDefault`), the caller passes `is_host`, which answers
//! whether an address is host memory (`None`: the copy is not decodable).

use std::ffi::{c_int, c_void};

use pinwise_core::Direction;
use pinwise_cuda::sys::{
    CUmemorytype, CUDA_MEMCPY2D, CUDA_MEMCPY3D, CU_MEMORYTYPE_ARRAY, CU_MEMORYTYPE_DEVICE,
    CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_UNIFIED,
};

/// A copy that touches host memory, as the hooks describe it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostCopy {
    /// Which way.
    pub direction: Direction,
    /// First host byte (0: none, a device-to-device copy).
    pub host: usize,
    /// The device side (0: none).
    pub device: u64,
    /// Bytes moved.
    pub bytes: usize,
    /// Host bytes spanned (more than `bytes` for pitched copies).
    pub span: usize,
    /// The stream, for the asynchronous forms.
    pub stream: Option<usize>,
    /// Whether the entry point has per-thread default-stream semantics.
    pub per_thread: bool,
}

impl HostCopy {
    /// A plain 1D copy.
    pub fn linear(
        direction: Direction,
        host: usize,
        device: u64,
        bytes: usize,
        stream: Option<usize>,
        per_thread: bool,
    ) -> HostCopy {
        HostCopy {
            direction,
            host,
            device,
            bytes,
            span: bytes,
            stream,
            per_thread,
        }
    }
}

/// A 1D copy between `src` and `dst`, each side host memory or not as given.
fn between(
    (src_host, dst_host): (bool, bool),
    dst: u64,
    src: u64,
    bytes: usize,
    stream: Option<usize>,
    per_thread: bool,
) -> HostCopy {
    let (direction, host, device) = match (src_host, dst_host) {
        (true, false) => (Direction::HtoD, src, dst),
        (false, true) => (Direction::DtoH, dst, src),
        (true, true) => (Direction::HtoH, dst, 0),
        (false, false) => (Direction::DtoD, 0, dst),
    };
    HostCopy::linear(direction, host as usize, device, bytes, stream, per_thread)
}

/// Which sides of a copy of `cudaMemcpyKind` `kind` are host memory, as `(src, dst)`
/// (`None`: `cudaMemcpyDefault` or not a kind).
pub fn sides_of_kind(kind: c_int) -> Option<(bool, bool)> {
    match kind {
        0 => Some((true, true)),
        1 => Some((true, false)),
        2 => Some((false, true)),
        3 => Some((false, false)),
        _ => None,
    }
}

/// A unified copy (`cuMemcpy`, `cudaMemcpyDefault`): `kind` is the runtime copy's
/// `cudaMemcpyKind` when one is in progress (0–3 tell the sides), else `is_host` tells each.
pub fn unified(
    dst: u64,
    src: u64,
    bytes: usize,
    stream: Option<usize>,
    per_thread: bool,
    kind: Option<c_int>,
    mut is_host: impl FnMut(u64) -> Option<bool>,
) -> Option<HostCopy> {
    let sides = match kind.and_then(sides_of_kind) {
        Some(s) => s,
        None => {
            let dst_host = is_host(dst)?;
            (is_host(src)?, dst_host)
        }
    };
    Some(between(sides, dst, src, bytes, stream, per_thread))
}

/// A runtime copy of `count` bytes of `cudaMemcpyKind` `kind` (0 HtoH, 1 HtoD, 2 DtoH,
/// 3 DtoD, 4 default: `is_host` tells each side).
pub fn runtime_copy(
    dst: usize,
    src: usize,
    count: usize,
    kind: c_int,
    stream: Option<usize>,
    per_thread: bool,
    is_host: impl FnMut(u64) -> Option<bool>,
) -> Option<HostCopy> {
    match kind {
        0..=3 => unified(
            dst as u64,
            src as u64,
            count,
            stream,
            per_thread,
            Some(kind),
            is_host,
        ),
        4 => unified(
            dst as u64, src as u64, count, stream, per_thread, None, is_host,
        ),
        _ => None,
    }
}

/// A symbol copy (`cudaMemcpyToSymbol`/`FromSymbol`): host memory only on the host side of
/// host-to-device or device-to-host.
pub fn symbol_copy(
    to_symbol: bool,
    host: *const c_void,
    count: usize,
    kind: c_int,
    stream: Option<usize>,
    per_thread: bool,
) -> Option<HostCopy> {
    let direction = match (to_symbol, kind) {
        (true, 1 | 4) => Direction::HtoD,
        (false, 2 | 4) => Direction::DtoH,
        _ => return None,
    };
    Some(HostCopy::linear(
        direction,
        host as usize,
        0,
        count,
        stream,
        per_thread,
    ))
}

/// One side of a pitched (2D/3D) copy, as its descriptor gives it.
#[derive(Debug, Clone, Copy)]
struct PitchedSide {
    memory_type: CUmemorytype,
    host: usize,
    device: u64,
    x_in_bytes: usize,
    y: usize,
    z: usize,
    pitch: usize,
    /// Rows per slice (3D only; unused with one slice).
    height: usize,
}

impl PitchedSide {
    /// First byte and span touched on this side for `width` bytes x `rows` x `slices`.
    fn range(&self, width: usize, rows: usize, slices: usize) -> (usize, usize) {
        let base = if self.host == 0 {
            self.device as usize
        } else {
            self.host
        };
        let first = base + (self.z * self.height + self.y) * self.pitch + self.x_in_bytes;
        let span =
            (slices.saturating_sub(1) * self.height + rows.saturating_sub(1)) * self.pitch + width;
        (first, span)
    }

    /// Whether this side is host memory, from its memory type.
    fn is_host(&self, is_host: &mut impl FnMut(u64) -> Option<bool>) -> Option<bool> {
        match self.memory_type {
            CU_MEMORYTYPE_HOST => Some(true),
            CU_MEMORYTYPE_DEVICE | CU_MEMORYTYPE_ARRAY => Some(false),
            CU_MEMORYTYPE_UNIFIED => is_host(if self.host != 0 {
                self.host as u64
            } else {
                self.device
            }),
            _ => None,
        }
    }
}

/// A pitched copy of `width` bytes x `rows` x `slices` from `src` to `dst`.
fn pitched_copy(
    src: PitchedSide,
    dst: PitchedSide,
    (width, rows, slices): (usize, usize, usize),
    stream: Option<usize>,
    per_thread: bool,
    mut is_host: impl FnMut(u64) -> Option<bool>,
) -> Option<HostCopy> {
    let src_host = src.is_host(&mut is_host)?;
    let dst_host = dst.is_host(&mut is_host)?;
    let bytes = width.checked_mul(rows)?.checked_mul(slices)?;
    let (direction, (host, span), device) = match (src_host, dst_host) {
        (true, false) => (Direction::HtoD, src.range(width, rows, slices), dst.device),
        (false, true) => (Direction::DtoH, dst.range(width, rows, slices), src.device),
        (true, true) => (Direction::HtoH, dst.range(width, rows, slices), 0),
        (false, false) => (Direction::DtoD, (0, 0), dst.device),
    };
    Some(HostCopy {
        direction,
        host,
        device,
        bytes,
        span,
        stream,
        per_thread,
    })
}

/// A driver 2D copy from its descriptor (a pitched copy of one slice).
pub fn copy_2d(
    d: &CUDA_MEMCPY2D,
    stream: Option<usize>,
    per_thread: bool,
    is_host: impl FnMut(u64) -> Option<bool>,
) -> Option<HostCopy> {
    let src = PitchedSide {
        memory_type: d.srcMemoryType,
        host: d.srcHost as usize,
        device: d.srcDevice,
        x_in_bytes: d.srcXInBytes,
        y: d.srcY,
        z: 0,
        pitch: d.srcPitch,
        height: 0,
    };
    let dst = PitchedSide {
        memory_type: d.dstMemoryType,
        host: d.dstHost as usize,
        device: d.dstDevice,
        x_in_bytes: d.dstXInBytes,
        y: d.dstY,
        z: 0,
        pitch: d.dstPitch,
        height: 0,
    };
    let dims = (d.WidthInBytes, d.Height, 1);
    pitched_copy(src, dst, dims, stream, per_thread, is_host)
}

/// A driver 3D copy from its descriptor.
pub fn copy_3d(
    d: &CUDA_MEMCPY3D,
    stream: Option<usize>,
    per_thread: bool,
    is_host: impl FnMut(u64) -> Option<bool>,
) -> Option<HostCopy> {
    let src = PitchedSide {
        memory_type: d.srcMemoryType,
        host: d.srcHost as usize,
        device: d.srcDevice,
        x_in_bytes: d.srcXInBytes,
        y: d.srcY,
        z: d.srcZ,
        pitch: d.srcPitch,
        height: d.srcHeight,
    };
    let dst = PitchedSide {
        memory_type: d.dstMemoryType,
        host: d.dstHost as usize,
        device: d.dstDevice,
        x_in_bytes: d.dstXInBytes,
        y: d.dstY,
        z: d.dstZ,
        pitch: d.dstPitch,
        height: d.dstHeight,
    };
    let dims = (d.WidthInBytes, d.Height, d.Depth);
    pitched_copy(src, dst, dims, stream, per_thread, is_host)
}

/// A runtime 2D copy (`cudaMemcpy2D*`) from its arguments: `width` bytes x `height` rows,
/// each side with its own pitch.
#[allow(clippy::too_many_arguments)]
pub fn runtime_copy_2d(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: c_int,
    stream: Option<usize>,
    per_thread: bool,
) -> Option<HostCopy> {
    let (direction, host, pitch, device) = match kind {
        1 => (Direction::HtoD, src as usize, spitch, dst as u64),
        2 => (Direction::DtoH, dst as usize, dpitch, src as u64),
        0 => (Direction::HtoH, dst as usize, dpitch, 0),
        _ => return None,
    };
    Some(HostCopy {
        direction,
        host,
        device,
        bytes: width.checked_mul(height)?,
        span: height.saturating_sub(1) * pitch + width,
        stream,
        per_thread,
    })
}

/// `cudaPitchedPtr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PitchedPtr {
    /// First byte.
    pub ptr: *mut c_void,
    /// Bytes per row.
    pub pitch: usize,
    /// Logical width in elements.
    pub xsize: usize,
    /// Rows per slice.
    pub ysize: usize,
}

/// `cudaMemcpy3DParms`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Memcpy3DParms {
    /// Source array (NULL: linear memory in `src_ptr`).
    pub src_array: *mut c_void,
    /// Source position: bytes, rows, slices.
    pub src_pos: [usize; 3],
    /// Source linear memory.
    pub src_ptr: PitchedPtr,
    /// Destination array (NULL: linear memory in `dst_ptr`).
    pub dst_array: *mut c_void,
    /// Destination position.
    pub dst_pos: [usize; 3],
    /// Destination linear memory.
    pub dst_ptr: PitchedPtr,
    /// Width in bytes, rows, slices.
    pub extent: [usize; 3],
    /// `cudaMemcpyKind`.
    pub kind: c_int,
}

/// A runtime 3D copy's host side (linear memory only; arrays are device memory).
pub fn runtime_copy_3d(
    d: &Memcpy3DParms,
    stream: Option<usize>,
    per_thread: bool,
) -> Option<HostCopy> {
    let [w, h, depth] = d.extent;
    let place = |pp: &PitchedPtr, pos: &[usize; 3]| {
        let first = pp.ptr as usize + (pos[2] * pp.ysize + pos[1]) * pp.pitch + pos[0];
        let span = (depth.saturating_sub(1) * pp.ysize + h.saturating_sub(1)) * pp.pitch + w;
        (first, span)
    };
    let ((host, span), direction, device) = match d.kind {
        1 if d.src_array.is_null() => (
            place(&d.src_ptr, &d.src_pos),
            Direction::HtoD,
            d.dst_ptr.ptr as u64,
        ),
        2 if d.dst_array.is_null() => (
            place(&d.dst_ptr, &d.dst_pos),
            Direction::DtoH,
            d.src_ptr.ptr as u64,
        ),
        0 if d.dst_array.is_null() => (place(&d.dst_ptr, &d.dst_pos), Direction::HtoH, 0),
        _ => return None,
    };
    Some(HostCopy {
        direction,
        host,
        device,
        bytes: w.checked_mul(h)?.checked_mul(depth)?,
        span,
        stream,
        per_thread,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn never(_: u64) -> Option<bool> {
        panic!("the driver must not be asked")
    }

    #[test]
    fn unified_with_a_runtime_kind_does_not_ask_the_driver() {
        let c = unified(0xd000, 0x1000, 64, None, false, Some(1), never).unwrap();
        assert_eq!(
            c,
            HostCopy::linear(Direction::HtoD, 0x1000, 0xd000, 64, None, false)
        );
        let c = unified(0x2000, 0xd000, 64, Some(7), true, Some(2), never).unwrap();
        assert_eq!(
            c,
            HostCopy::linear(Direction::DtoH, 0x2000, 0xd000, 64, Some(7), true)
        );
        let c = unified(0x2000, 0x1000, 8, None, false, Some(0), never).unwrap();
        assert_eq!(
            (c.direction, c.host, c.device),
            (Direction::HtoH, 0x2000, 0)
        );
        let c = unified(0xd000, 0xe000, 8, None, false, Some(3), never).unwrap();
        assert_eq!(
            (c.direction, c.host, c.device),
            (Direction::DtoD, 0, 0xd000)
        );
    }

    #[test]
    fn unified_asks_the_driver_for_each_side_and_gives_up_when_it_cannot_tell() {
        let host_below_8000 = |p: u64| Some(p < 0x8000);
        let c = unified(0xd000, 0x1000, 64, None, false, None, host_below_8000).unwrap();
        assert_eq!(
            (c.direction, c.host, c.device),
            (Direction::HtoD, 0x1000, 0xd000)
        );
        // cudaMemcpyDefault (4) is not a kind that tells the sides.
        let c = unified(0x1000, 0xd000, 64, None, false, Some(4), host_below_8000).unwrap();
        assert_eq!(
            (c.direction, c.host, c.device),
            (Direction::DtoH, 0x1000, 0xd000)
        );
        assert_eq!(unified(1, 2, 3, None, false, None, |_| None), None);
    }

    #[test]
    fn runtime_copy_decodes_each_kind_and_refuses_others() {
        let c = runtime_copy(0xd000, 0x1000, 32, 1, None, false, never).unwrap();
        assert_eq!(
            (c.direction, c.host, c.device, c.bytes),
            (Direction::HtoD, 0x1000, 0xd000, 32)
        );
        let c = runtime_copy(0x1000, 0xd000, 32, 4, Some(3), true, |p| Some(p < 0x8000)).unwrap();
        assert_eq!(
            c,
            HostCopy::linear(Direction::DtoH, 0x1000, 0xd000, 32, Some(3), true)
        );
        assert_eq!(runtime_copy(1, 2, 3, 5, None, false, never), None);
        assert_eq!(runtime_copy(1, 2, 3, -1, None, false, never), None);
    }

    #[test]
    fn symbol_copies_have_host_memory_only_toward_or_from_the_symbol() {
        let h = 0x1000 as *const c_void;
        let c = symbol_copy(true, h, 16, 1, None, false).unwrap();
        assert_eq!(
            (c.direction, c.host, c.device, c.span),
            (Direction::HtoD, 0x1000, 0, 16)
        );
        assert_eq!(
            symbol_copy(true, h, 16, 4, Some(2), true)
                .unwrap()
                .direction,
            Direction::HtoD
        );
        assert_eq!(
            symbol_copy(false, h, 16, 2, None, false).unwrap().direction,
            Direction::DtoH
        );
        assert_eq!(symbol_copy(true, h, 16, 2, None, false), None);
        assert_eq!(symbol_copy(false, h, 16, 1, None, false), None);
        assert_eq!(symbol_copy(true, h, 16, 3, None, false), None);
    }

    fn desc_2d_htod() -> CUDA_MEMCPY2D {
        CUDA_MEMCPY2D {
            srcMemoryType: CU_MEMORYTYPE_HOST,
            srcHost: 0x10_000 as *const c_void,
            srcXInBytes: 8,
            srcY: 2,
            srcPitch: 256,
            dstMemoryType: CU_MEMORYTYPE_DEVICE,
            dstDevice: 0xd0_000,
            dstPitch: 128,
            WidthInBytes: 100,
            Height: 4,
            ..CUDA_MEMCPY2D::default()
        }
    }

    #[test]
    fn a_2d_copy_spans_its_rows_at_the_host_sides_pitch() {
        let c = copy_2d(&desc_2d_htod(), Some(5), false, never).unwrap();
        // First byte: base + y * pitch + x; span: (rows - 1) * pitch + width.
        assert_eq!(c.direction, Direction::HtoD);
        assert_eq!(c.host, 0x10_000 + 2 * 256 + 8);
        assert_eq!(c.span, 3 * 256 + 100);
        assert_eq!(c.bytes, 400);
        assert_eq!(c.device, 0xd0_000);
        assert_eq!(c.stream, Some(5));
    }

    #[test]
    fn a_2d_copy_to_the_host_uses_the_destination_side() {
        let mut d = desc_2d_htod();
        std::mem::swap(&mut d.srcMemoryType, &mut d.dstMemoryType);
        d.srcDevice = 0xd0_000;
        d.srcHost = std::ptr::null();
        d.dstHost = 0x20_000 as *mut c_void;
        d.dstXInBytes = 0;
        d.dstY = 1;
        d.dstPitch = 512;
        let c = copy_2d(&d, None, true, never).unwrap();
        assert_eq!(c.direction, Direction::DtoH);
        assert_eq!(c.host, 0x20_000 + 512);
        assert_eq!(c.span, 3 * 512 + 100);
        assert_eq!(c.device, 0xd0_000);
        assert!(c.per_thread);
    }

    #[test]
    fn a_2d_copy_with_unified_sides_asks_the_driver_and_rejects_unknown_types() {
        let mut d = desc_2d_htod();
        d.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
        let mut asked = Vec::new();
        let c = copy_2d(&d, None, false, |p| {
            asked.push(p);
            Some(true)
        })
        .unwrap();
        assert_eq!(asked, vec![0x10_000]);
        assert_eq!(c.direction, Direction::HtoD);
        assert_eq!(copy_2d(&d, None, false, |_| None), None);
        d.srcMemoryType = 9;
        assert_eq!(copy_2d(&d, None, false, never), None);
        // Arrays are device memory: array to device is device to device.
        d.srcMemoryType = CU_MEMORYTYPE_ARRAY;
        let c = copy_2d(&d, None, false, never).unwrap();
        assert_eq!((c.direction, c.host, c.span), (Direction::DtoD, 0, 0));
    }

    #[test]
    fn a_2d_copy_whose_size_overflows_is_not_decoded() {
        let mut d = desc_2d_htod();
        d.WidthInBytes = usize::MAX;
        d.Height = 2;
        assert_eq!(copy_2d(&d, None, false, never), None);
    }

    #[test]
    fn a_3d_copy_spans_slices_at_the_host_sides_height_and_pitch() {
        let d = CUDA_MEMCPY3D {
            srcMemoryType: CU_MEMORYTYPE_DEVICE,
            srcDevice: 0xd0_000,
            dstMemoryType: CU_MEMORYTYPE_HOST,
            dstHost: 0x40_000 as *mut c_void,
            dstXInBytes: 4,
            dstY: 1,
            dstZ: 2,
            dstPitch: 64,
            dstHeight: 10,
            WidthInBytes: 32,
            Height: 3,
            Depth: 2,
            ..CUDA_MEMCPY3D::default()
        };
        let c = copy_3d(&d, None, false, never).unwrap();
        assert_eq!(c.direction, Direction::DtoH);
        // base + (z * height + y) * pitch + x; span ((slices-1) * height + rows-1) * pitch + w.
        assert_eq!(c.host, 0x40_000 + (2 * 10 + 1) * 64 + 4);
        assert_eq!(c.span, (10 + 2) * 64 + 32);
        assert_eq!(c.bytes, 32 * 3 * 2);
        assert_eq!(c.device, 0xd0_000);
    }

    #[test]
    fn a_runtime_2d_copy_uses_the_host_sides_pitch() {
        let dst = 0xd000 as *mut c_void;
        let src = 0x1000 as *const c_void;
        let c = runtime_copy_2d(dst, 64, src, 256, 10, 3, 1, None, false).unwrap();
        assert_eq!(
            (c.direction, c.host, c.device),
            (Direction::HtoD, 0x1000, 0xd000)
        );
        assert_eq!((c.bytes, c.span), (30, 2 * 256 + 10));
        let c = runtime_copy_2d(dst, 64, src, 256, 10, 3, 2, Some(1), true).unwrap();
        assert_eq!(
            (c.direction, c.host, c.span),
            (Direction::DtoH, 0xd000, 2 * 64 + 10)
        );
        assert_eq!(
            runtime_copy_2d(dst, 64, src, 256, 10, 3, 3, None, false),
            None
        );
        assert_eq!(
            runtime_copy_2d(dst, 64, src, 256, usize::MAX, 3, 1, None, false),
            None
        );
    }

    #[test]
    fn a_runtime_3d_copy_decodes_linear_memory_and_leaves_arrays() {
        let pitched = |ptr: usize, pitch, ysize| PitchedPtr {
            ptr: ptr as *mut c_void,
            pitch,
            xsize: 0,
            ysize,
        };
        let mut d = Memcpy3DParms {
            src_array: std::ptr::null_mut(),
            src_pos: [2, 1, 1],
            src_ptr: pitched(0x10_000, 128, 8),
            dst_array: std::ptr::null_mut(),
            dst_pos: [0, 0, 0],
            dst_ptr: pitched(0xd0_000, 64, 4),
            extent: [16, 2, 3],
            kind: 1,
        };
        let c = runtime_copy_3d(&d, None, false).unwrap();
        assert_eq!(c.direction, Direction::HtoD);
        assert_eq!(c.host, 0x10_000 + (8 + 1) * 128 + 2);
        assert_eq!(c.span, (2 * 8 + 1) * 128 + 16);
        assert_eq!((c.bytes, c.device), (16 * 2 * 3, 0xd0_000));
        d.src_array = std::ptr::NonNull::<c_void>::dangling().as_ptr();
        assert_eq!(runtime_copy_3d(&d, None, false), None);
        d.kind = 2;
        let c = runtime_copy_3d(&d, None, false).unwrap();
        assert_eq!((c.direction, c.host), (Direction::DtoH, 0xd0_000));
        d.kind = 3;
        assert_eq!(runtime_copy_3d(&d, None, false), None);
    }
}
