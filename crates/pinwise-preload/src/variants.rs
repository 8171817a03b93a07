//! The driver functions pinwise hooks, under every exported name it hands a wrapper out for.
//!
//! The driver exports several *variants* of one function: a versioned one (`cuMemcpyHtoD`
//! became `cuMemcpyHtoD_v2` in CUDA 3.2) and, for calls with stream semantics, a
//! per-thread-default-stream one (`cuMemcpyHtoD_v2_ptds`, `cuMemcpyHtoDAsync_v2_ptsz`).
//! `cuGetProcAddress` takes a *base* name, the CUDA version the caller was built for and a
//! flag, and answers one variant. pinwise keeps one wrapper and one real pointer per variant
//! ([`Hooked`]), so that a wrapper always forwards to the variant it stands for.
//!
//! Which variant an answer is, is decided by identity first (the answer is the driver's own
//! export of that name) and, only when identity cannot be checked, by the driver's rule
//! ([`by_rule`]: the newest variant not newer than the version asked for; the per-thread
//! one when asked and there is one), for versions up to [`RULES_KNOWN_UP_TO`].

use std::ffi::CStr;

/// Whether a variant has legacy or per-thread default-stream semantics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavour {
    /// The default variant.
    Default,
    /// The per-thread-default-stream variant (`_ptds` / `_ptsz`).
    PerThread,
}

/// One hooked variant: its exported name, its base name, the CUDA version that introduced
/// it, and its flavour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variant {
    /// The exported symbol (`cuMemcpyHtoD_v2`).
    pub symbol: &'static str,
    /// The same, NUL-terminated.
    pub csymbol: &'static CStr,
    /// The base name `cuGetProcAddress` is asked for (`cuMemcpyHtoD`).
    pub base: &'static str,
    /// The CUDA version (1000 × major + 10 × minor) that introduced it.
    pub since: i32,
    /// Default or per-thread default stream.
    pub flavour: Flavour,
}

/// The highest CUDA version whose variants this table knows. Above it, an answer that is
/// not identified by identity is passed through unwrapped (a newer variant may have another
/// signature).
pub const RULES_KNOWN_UP_TO: i32 = 13000;

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
pub const PER_THREAD_FLAG: u64 = 2;

macro_rules! hooked {
    ($( $id:ident = $symbol:literal, $base:literal, $since:literal, $flavour:ident; )*) => {
        /// The hooked variants. `Hooked::X as usize` indexes per-variant tables.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(usize)]
        #[allow(missing_docs)]
        pub enum Hooked { $( $id, )* }

        /// Every variant, indexed by `Hooked as usize`.
        pub const VARIANTS: &[Variant] = &[$(
            Variant {
                symbol: $symbol,
                // SAFETY: a string literal with one NUL, appended here, at its end.
                csymbol: unsafe { CStr::from_bytes_with_nul_unchecked(concat!($symbol, "\0").as_bytes()) },
                base: $base,
                since: $since,
                flavour: Flavour::$flavour,
            },
        )*];

        /// Every `Hooked` value, in table order.
        pub const ALL: &[Hooked] = &[$( Hooked::$id, )*];
    };
}

hooked! {
    MemHostAlloc = "cuMemHostAlloc", "cuMemHostAlloc", 2020, Default;
    MemAllocHostV2 = "cuMemAllocHost_v2", "cuMemAllocHost", 3020, Default;
    MemFreeHost = "cuMemFreeHost", "cuMemFreeHost", 2000, Default;
    MemHostRegister = "cuMemHostRegister", "cuMemHostRegister", 4000, Default;
    MemHostRegisterV2 = "cuMemHostRegister_v2", "cuMemHostRegister", 6050, Default;
    MemHostUnregister = "cuMemHostUnregister", "cuMemHostUnregister", 4000, Default;
    MemHostGetDevicePointerV2 = "cuMemHostGetDevicePointer_v2", "cuMemHostGetDevicePointer", 3020, Default;
    MemHostGetFlags = "cuMemHostGetFlags", "cuMemHostGetFlags", 2030, Default;
    PointerGetAttribute = "cuPointerGetAttribute", "cuPointerGetAttribute", 4000, Default;
    PointerGetAttributes = "cuPointerGetAttributes", "cuPointerGetAttributes", 7000, Default;
    Memcpy = "cuMemcpy", "cuMemcpy", 4000, Default;
    MemcpyPtds = "cuMemcpy_ptds", "cuMemcpy", 7000, PerThread;
    MemcpyAsync = "cuMemcpyAsync", "cuMemcpyAsync", 4000, Default;
    MemcpyAsyncPtsz = "cuMemcpyAsync_ptsz", "cuMemcpyAsync", 7000, PerThread;
    MemcpyHtoD = "cuMemcpyHtoD_v2", "cuMemcpyHtoD", 3020, Default;
    MemcpyHtoDPtds = "cuMemcpyHtoD_v2_ptds", "cuMemcpyHtoD", 7000, PerThread;
    MemcpyDtoH = "cuMemcpyDtoH_v2", "cuMemcpyDtoH", 3020, Default;
    MemcpyDtoHPtds = "cuMemcpyDtoH_v2_ptds", "cuMemcpyDtoH", 7000, PerThread;
    MemcpyHtoDAsync = "cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync", 3020, Default;
    MemcpyHtoDAsyncPtsz = "cuMemcpyHtoDAsync_v2_ptsz", "cuMemcpyHtoDAsync", 7000, PerThread;
    MemcpyDtoHAsync = "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync", 3020, Default;
    MemcpyDtoHAsyncPtsz = "cuMemcpyDtoHAsync_v2_ptsz", "cuMemcpyDtoHAsync", 7000, PerThread;
    Memcpy2D = "cuMemcpy2D_v2", "cuMemcpy2D", 3020, Default;
    Memcpy2DPtds = "cuMemcpy2D_v2_ptds", "cuMemcpy2D", 7000, PerThread;
    Memcpy2DUnaligned = "cuMemcpy2DUnaligned_v2", "cuMemcpy2DUnaligned", 3020, Default;
    Memcpy2DUnalignedPtds = "cuMemcpy2DUnaligned_v2_ptds", "cuMemcpy2DUnaligned", 7000, PerThread;
    Memcpy3D = "cuMemcpy3D_v2", "cuMemcpy3D", 3020, Default;
    Memcpy3DPtds = "cuMemcpy3D_v2_ptds", "cuMemcpy3D", 7000, PerThread;
    Memcpy2DAsync = "cuMemcpy2DAsync_v2", "cuMemcpy2DAsync", 3020, Default;
    Memcpy2DAsyncPtsz = "cuMemcpy2DAsync_v2_ptsz", "cuMemcpy2DAsync", 7000, PerThread;
    Memcpy3DAsync = "cuMemcpy3DAsync_v2", "cuMemcpy3DAsync", 3020, Default;
    Memcpy3DAsyncPtsz = "cuMemcpy3DAsync_v2_ptsz", "cuMemcpy3DAsync", 7000, PerThread;
    GetProcAddress = "cuGetProcAddress", "cuGetProcAddress", 11030, Default;
    GetProcAddressV2 = "cuGetProcAddress_v2", "cuGetProcAddress", 12000, Default;
    StreamDestroy = "cuStreamDestroy", "cuStreamDestroy", 2000, Default;
    StreamDestroyV2 = "cuStreamDestroy_v2", "cuStreamDestroy", 4000, Default;
    CtxDestroy = "cuCtxDestroy", "cuCtxDestroy", 2000, Default;
    CtxDestroyV2 = "cuCtxDestroy_v2", "cuCtxDestroy", 4000, Default;
    PrimaryCtxRelease = "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease", 7000, Default;
    PrimaryCtxReleaseV2 = "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease", 11000, Default;
    PrimaryCtxReset = "cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxReset", 7000, Default;
    PrimaryCtxResetV2 = "cuDevicePrimaryCtxReset_v2", "cuDevicePrimaryCtxReset", 11000, Default;
    StreamBeginCapture = "cuStreamBeginCapture", "cuStreamBeginCapture", 10000, Default;
    StreamBeginCapturePtsz = "cuStreamBeginCapture_ptsz", "cuStreamBeginCapture", 10000, PerThread;
    StreamBeginCaptureV2 = "cuStreamBeginCapture_v2", "cuStreamBeginCapture", 10010, Default;
    StreamBeginCaptureV2Ptsz = "cuStreamBeginCapture_v2_ptsz", "cuStreamBeginCapture", 10010, PerThread;
    StreamBeginCaptureToGraph = "cuStreamBeginCaptureToGraph", "cuStreamBeginCaptureToGraph", 12030, Default;
    StreamBeginCaptureToGraphPtsz = "cuStreamBeginCaptureToGraph_ptsz", "cuStreamBeginCaptureToGraph", 12030, PerThread;
    StreamEndCapture = "cuStreamEndCapture", "cuStreamEndCapture", 10000, Default;
    StreamEndCapturePtsz = "cuStreamEndCapture_ptsz", "cuStreamEndCapture", 10000, PerThread;
}

/// Number of hooked variants.
pub const COUNT: usize = VARIANTS.len();

impl Hooked {
    /// Its table entry.
    pub fn variant(self) -> &'static Variant {
        &VARIANTS[self as usize]
    }

    /// Its exported name.
    pub fn symbol(self) -> &'static str {
        self.variant().symbol
    }

    /// Its exported name as a C string.
    pub fn csymbol(self) -> &'static CStr {
        self.variant().csymbol
    }

    /// Whether it is a per-thread-default-stream variant (a stream argument of 0 then means
    /// the calling thread's default stream).
    pub fn per_thread(self) -> bool {
        self.variant().flavour == Flavour::PerThread
    }
}

/// The hooked variant exported under `symbol`, if any. Cheap for names that are not CUDA
/// driver names (the first two bytes decide), since every `dlsym` in the process asks.
pub fn by_symbol(symbol: &[u8]) -> Option<Hooked> {
    if symbol.len() < 3 || &symbol[..2] != b"cu" {
        return None;
    }
    ALL.iter()
        .copied()
        .find(|h| h.symbol().as_bytes() == symbol)
}

/// The hooked variants `cuGetProcAddress` may answer for base name `base`.
pub fn by_base(base: &[u8]) -> impl Iterator<Item = Hooked> + '_ {
    let relevant = base.len() >= 3 && &base[..2] == b"cu";
    ALL.iter()
        .copied()
        .filter(move |h| relevant && h.variant().base.as_bytes() == base)
}

/// The driver's rule: for `base` at `cuda_version` with `flags`, the newest hooked variant
/// introduced at or before that version, per-thread when the flag asks for it and one
/// exists. `None` when the version is older than every hooked variant (the driver then
/// answers an older variant pinwise does not hook), or newer than [`RULES_KNOWN_UP_TO`].
pub fn by_rule(base: &[u8], cuda_version: i32, flags: u64) -> Option<Hooked> {
    if cuda_version > RULES_KNOWN_UP_TO {
        return None;
    }
    let newest = |flavour: Flavour| {
        by_base(base)
            .filter(|h| h.variant().flavour == flavour && h.variant().since <= cuda_version)
            .max_by_key(|h| h.variant().since)
    };
    if flags & PER_THREAD_FLAG != 0 {
        newest(Flavour::PerThread).or_else(|| newest(Flavour::Default))
    } else {
        newest(Flavour::Default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbols_are_unique_and_found() {
        for (i, v) in VARIANTS.iter().enumerate() {
            assert_eq!(by_symbol(v.symbol.as_bytes()).map(|h| h as usize), Some(i));
            assert!(
                VARIANTS[i + 1..].iter().all(|w| w.symbol != v.symbol),
                "{} twice",
                v.symbol
            );
            assert_eq!(ALL[i] as usize, i);
        }
        assert_eq!(by_symbol(b"cuInit"), None);
        assert_eq!(by_symbol(b"malloc"), None);
        assert_eq!(by_symbol(b"cu"), None);
        assert_eq!(by_symbol(b""), None);
    }

    #[test]
    fn rule_picks_versioned_and_per_thread_variants() {
        use Hooked::*;
        assert_eq!(by_rule(b"cuMemcpyHtoD", 13000, 0), Some(MemcpyHtoD));
        assert_eq!(by_rule(b"cuMemcpyHtoD", 13000, 2), Some(MemcpyHtoDPtds));
        assert_eq!(by_rule(b"cuMemcpyHtoD", 6050, 2), Some(MemcpyHtoD));
        assert_eq!(
            by_rule(b"cuMemcpyHtoD", 3000, 0),
            None,
            "32-bit v1: not hooked"
        );
        assert_eq!(
            by_rule(b"cuMemcpyHtoDAsync", 12000, 2),
            Some(MemcpyHtoDAsyncPtsz)
        );
        assert_eq!(
            by_rule(b"cuMemHostRegister", 6050, 0),
            Some(MemHostRegisterV2)
        );
        assert_eq!(
            by_rule(b"cuMemHostRegister", 6000, 0),
            Some(MemHostRegister)
        );
        assert_eq!(
            by_rule(b"cuMemHostRegister", 13000, 2),
            Some(MemHostRegisterV2)
        );
        assert_eq!(
            by_rule(b"cuGetProcAddress", 12000, 0),
            Some(GetProcAddressV2)
        );
        assert_eq!(by_rule(b"cuGetProcAddress", 11080, 0), Some(GetProcAddress));
        assert_eq!(by_rule(b"cuMemcpy", 13000, 2), Some(MemcpyPtds));
        assert_eq!(by_rule(b"cuMemFreeHost", 13000, 2), Some(MemFreeHost));
        assert_eq!(
            by_rule(b"cuMemcpyHtoD", 13010, 0),
            None,
            "newer than the table"
        );
        assert_eq!(by_rule(b"cuInit", 13000, 0), None);
    }

    #[test]
    fn per_thread_variants_are_marked() {
        assert!(Hooked::MemcpyAsyncPtsz.per_thread());
        assert!(!Hooked::MemcpyAsync.per_thread());
        assert_eq!(by_base(b"cuMemcpy3DAsync").count(), 2);
        assert_eq!(by_base(b"cuMemcpyDtoD").count(), 0);
    }
}
