//! Loading the driver library and the calls that need no device or context.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use libloading::Library;

use crate::api::DriverApi;
use crate::device::Device;
use crate::error::{dl_reason, CudaError, Result};
use crate::sys::*;

/// The environment variable that names the driver library to load instead of `libcuda.so.1`.
pub const LIBCUDA_ENV: &str = "PINWISE_LIBCUDA";
/// The library loaded when `PINWISE_LIBCUDA` is not set (found by the dynamic loader).
pub const DEFAULT_LIBCUDA: &str = "libcuda.so.1";

/// A loaded CUDA driver library and its function table.
///
/// The library is never unloaded (libcuda does not support being unloaded while its threads
/// run), so the function pointers of [`Driver::api`] stay valid for the life of the process.
pub struct Driver {
    api: DriverApi,
    path: String,
    library: ManuallyDrop<Library>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Where `cuGetProcAddress` found a symbol, or why not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcAddress {
    /// Found at this address.
    Found(*mut c_void),
    /// No function of that name.
    SymbolNotFound,
    /// The function exists only in versions newer than the one asked for.
    VersionNotSufficient,
}

impl Driver {
    /// Loads `$PINWISE_LIBCUDA` if set, else `libcuda.so.1`. Does not call `cuInit`.
    pub fn load() -> Result<Driver> {
        match std::env::var_os(LIBCUDA_ENV).filter(|v| !v.is_empty()) {
            Some(path) => Driver::load_from(Path::new(&path)),
            None => Driver::load_from(Path::new(DEFAULT_LIBCUDA)),
        }
    }

    /// Loads the driver library at `path` (a bare name is searched like `dlopen` does).
    /// Does not call `cuInit`.
    pub fn load_from(path: &Path) -> Result<Driver> {
        let shown = path.display().to_string();
        // SAFETY: loading a shared library runs its initializers; libcuda's (and the
        // stand-in's) are safe to run in any process.
        let library = unsafe { Library::new(path) }.map_err(|e| CudaError::LibraryNotFound {
            path: shown.clone(),
            reason: dl_reason(&e),
        })?;
        let api = DriverApi::load(&library, &shown)?;
        Ok(Driver {
            api,
            path: shown,
            library: ManuallyDrop::new(library),
        })
    }

    /// The process-wide driver: loaded (as [`Driver::load`]) and initialized (`cuInit(0)`)
    /// on first use, shared afterwards. A failure is returned and retried next time.
    pub fn shared() -> Result<Arc<Driver>> {
        static SHARED: OnceLock<Arc<Driver>> = OnceLock::new();
        if let Some(driver) = SHARED.get() {
            return Ok(driver.clone());
        }
        let driver = Driver::load()?;
        driver.init()?;
        Ok(SHARED.get_or_init(|| Arc::new(driver)).clone())
    }

    /// The path or name the library was loaded from.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The file the dynamic loader actually mapped for this library, as `/proc/self/maps`
    /// names it (symbolic links resolved): for `libcuda.so.1` found through the loader's
    /// search path, e.g. `/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06`. `None` when the
    /// mapping cannot be read.
    pub fn loaded_file(&self) -> Option<PathBuf> {
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        file_at(&maps, self.api.cuInit as usize)
    }

    /// The raw function table, for hot paths. Every call through it is `unsafe` and must
    /// follow CUDA's contract; the pointers live as long as the process.
    pub fn api(&self) -> &DriverApi {
        &self.api
    }

    /// Turns a driver status into a `Result`, naming the call and using the driver's own
    /// name and message for the code.
    pub fn check(&self, call: &'static str, code: CUresult) -> Result<()> {
        if code == CUDA_SUCCESS {
            return Ok(());
        }
        let text = |f: unsafe extern "C" fn(CUresult, *mut *const c_char) -> CUresult| {
            let mut s: *const c_char = std::ptr::null();
            // SAFETY: valid out-parameter; the driver returns a static C string or NULL.
            let rc = unsafe { f(code, &mut s) };
            (rc == CUDA_SUCCESS && !s.is_null())
                // SAFETY: non-null static C string from the driver.
                .then(|| unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
        };
        Err(CudaError::Driver {
            call,
            code,
            name: text(self.api.cuGetErrorName),
            message: text(self.api.cuGetErrorString),
        })
    }

    /// CUDA's name for a status code (`CUDA_ERROR_INVALID_VALUE`), if the driver knows it.
    pub fn error_name(&self, code: CUresult) -> Option<String> {
        self.check("cuGetErrorName", code)
            .err()
            .and_then(|e| e.cuda_name().map(str::to_string))
    }

    /// `cuInit(0)`.
    pub fn init(&self) -> Result<()> {
        // SAFETY: cuInit with flags 0, as documented.
        self.check("cuInit", unsafe { (self.api.cuInit)(0) })
    }

    /// `cuDriverGetVersion`: e.g. 13000 for CUDA 13.0.
    pub fn version(&self) -> Result<i32> {
        let mut v: c_int = 0;
        // SAFETY: valid out-parameter.
        self.check("cuDriverGetVersion", unsafe {
            (self.api.cuDriverGetVersion)(&mut v)
        })?;
        Ok(v)
    }

    /// `cuDeviceGetCount` (needs [`Driver::init`]).
    pub fn device_count(&self) -> Result<usize> {
        let mut n: c_int = 0;
        // SAFETY: valid out-parameter.
        self.check("cuDeviceGetCount", unsafe {
            (self.api.cuDeviceGetCount)(&mut n)
        })?;
        Ok(n.max(0) as usize)
    }

    /// The device with this ordinal (`cuDeviceGet`).
    pub fn device(self: &Arc<Self>, ordinal: usize) -> Result<Device> {
        Device::get(self, ordinal)
    }

    /// All devices.
    pub fn devices(self: &Arc<Self>) -> Result<Vec<Device>> {
        (0..self.device_count()?).map(|i| self.device(i)).collect()
    }

    /// `cuGetProcAddress_v2`: what the driver hands out for a base name (`cuMemcpyHtoD`) at a
    /// CUDA version (`13000`) with `flags` (`CU_GET_PROC_ADDRESS_*`). `Ok(None)` when this
    /// driver has no `cuGetProcAddress_v2` (older than CUDA 12).
    pub fn get_proc_address(
        &self,
        name: &str,
        cuda_version: i32,
        flags: u64,
    ) -> Result<Option<ProcAddress>> {
        let Some(f) = self.api.cuGetProcAddress_v2 else {
            return Ok(None);
        };
        let symbol = CString::new(name).map_err(|_| CudaError::InvalidArgument {
            call: "cuGetProcAddress_v2",
            reason: format!("symbol name {name:?} contains a NUL byte"),
        })?;
        let mut pfn: *mut c_void = std::ptr::null_mut();
        let mut status: CUdriverProcAddressQueryResult = -1;
        // SAFETY: C string and out-parameters are valid for the call.
        let rc = unsafe { f(symbol.as_ptr(), &mut pfn, cuda_version, flags, &mut status) };
        match (rc, status) {
            (CUDA_SUCCESS, _) => Ok(Some(ProcAddress::Found(pfn))),
            (_, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND) => Ok(Some(ProcAddress::SymbolNotFound)),
            (_, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT) => {
                Ok(Some(ProcAddress::VersionNotSufficient))
            }
            _ => self.check("cuGetProcAddress_v2", rc).map(|_| None),
        }
    }

    /// The address of any exported symbol of the library (`dlsym`), e.g. to compare with
    /// what `cuGetProcAddress` hands out.
    pub fn symbol_address(&self, name: &str) -> Option<*mut c_void> {
        // SAFETY: a data symbol's `Symbol<*mut c_void>` derefs to the symbol's address; it is
        // only read as an address here, never called or dereferenced.
        let symbol = unsafe { self.library.get::<*mut c_void>(name) }.ok()?;
        Some(*symbol).filter(|p| !p.is_null())
    }

    /// When the library is pinwise's CPU stand-in (a TEST FIXTURE, not a GPU), what it says
    /// about itself (its `pinwise_standin_fixture` string); `None` for a real driver.
    pub fn standin_marker(&self) -> Option<String> {
        let p = self.symbol_address("pinwise_standin_fixture")?;
        // SAFETY: the stand-in exports this symbol as a NUL-terminated byte array.
        Some(
            unsafe { CStr::from_ptr(p as *const c_char) }
                .to_string_lossy()
                .into_owned(),
        )
    }
}

/// The file mapped at `address` in the text of a maps file (as the kernel names it, with
/// ` (deleted)` for a removed file); `None` for anonymous memory or no mapping. Lines are
/// parsed with `procfs-core`, except those naming `/SYSV...` (System V shared memory, never
/// a library; procfs-core reads such a path at fixed offsets and may panic on an odd one).
fn file_at(maps: &str, address: usize) -> Option<PathBuf> {
    use procfs_core::process::{MMapPath, MemoryMaps};
    use procfs_core::FromBufRead;

    let address = address as u64;
    maps.lines().find_map(|line| {
        let path = line.splitn(6, ' ').nth(5)?.trim_start();
        if !path.starts_with('/') || path.starts_with("/SYSV") {
            return None;
        }
        let m = MemoryMaps::from_buf_read(line.as_bytes()).ok()?.0.pop()?;
        if !(m.address.0..m.address.1).contains(&address) {
            return None;
        }
        match m.pathname {
            MMapPath::Path(p) => Some(p),
            _ => None,
        }
    })
}

#[cfg(test)]
mod maps_tests {
    use super::*;

    #[test]
    fn the_file_at_an_address_is_read_from_maps_text() {
        let maps = "\
7f0000000000-7f0000100000 r--p 00000000 fe:01 12                         /usr/lib/libcuda.so.580.65.06
7f0000100000-7f0000200000 r-xp 00100000 fe:01 12                         /usr/lib/libcuda.so.580.65.06
7f0000200000-7f0000300000 rw-p 00000000 00:00 0
7f0000300000-7f0000400000 r-xp 00000000 fe:01 13                         /opt/my cuda/lib/libcuda.so.1 (deleted)
7f0000400000-7f0000500000 rw-p 00000000 00:00 0                          [heap]
";
        assert_eq!(
            file_at(maps, 0x7f0000100010),
            Some(PathBuf::from("/usr/lib/libcuda.so.580.65.06"))
        );
        assert_eq!(
            file_at(maps, 0x7f0000300000),
            Some(PathBuf::from("/opt/my cuda/lib/libcuda.so.1 (deleted)"))
        );
        assert_eq!(file_at(maps, 0x7f0000200010), None, "anonymous");
        assert_eq!(file_at(maps, 0x7f0000400010), None, "[heap]");
        assert_eq!(file_at(maps, 0x7f0000500000), None, "past the end");
        assert_eq!(file_at("", 0x1000), None);
    }
}
