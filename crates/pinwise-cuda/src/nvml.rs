//! Optional NVML (`libnvidia-ml.so.1`): per-device name, PCI bus id and PCIe link generation
//! and width, for `pinwise doctor`. A machine without NVML gets [`NvmlError::NotAvailable`],
//! a value to report, not a failure.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::mem::ManuallyDrop;
use std::path::Path;

use libloading::Library;

use crate::error::dl_reason;

/// Environment variable naming the NVML library to load instead of `libnvidia-ml.so.1`.
pub const LIBNVML_ENV: &str = "PINWISE_LIBNVML";
/// The library loaded when `PINWISE_LIBNVML` is not set.
pub const DEFAULT_LIBNVML: &str = "libnvidia-ml.so.1";

type nvmlReturn_t = c_int;
type nvmlDevice_t = *mut c_void;

const NVML_SUCCESS: nvmlReturn_t = 0;
const NVML_DEVICE_NAME_V2_BUFFER_SIZE: usize = 96;
const NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE: usize = 80;

/// `nvmlPciInfo_t` (as filled by `nvmlDeviceGetPciInfo_v3`).
#[repr(C)]
struct nvmlPciInfo_t {
    bus_id_legacy: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    bus_id: [c_char; 32],
}

/// Why NVML gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NvmlError {
    /// No usable NVML on this machine (library absent, symbols missing, or `nvmlInit` failed):
    /// not an error for the user, just nothing to report.
    #[error("NVML not available ({path}): {reason}")]
    NotAvailable {
        /// The library tried.
        path: String,
        /// Why it is unusable.
        reason: String,
    },
    /// An NVML call failed.
    #[error("{call} failed: NVML error {code}: {message}")]
    Call {
        /// The NVML function.
        call: &'static str,
        /// NVML's return code.
        code: c_int,
        /// `nvmlErrorString`'s text.
        message: String,
    },
}

/// PCIe link of a device: current and maximum generation and width (lanes). `None` where
/// the driver does not report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PcieLink {
    /// Current link generation (a GPU at rest may run below its maximum).
    pub current_generation: Option<u32>,
    /// Maximum generation of the link.
    pub max_generation: Option<u32>,
    /// Current link width in lanes.
    pub current_width: Option<u32>,
    /// Maximum link width in lanes.
    pub max_width: Option<u32>,
}

/// What NVML says about one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmlDevice {
    /// NVML's index.
    pub index: u32,
    /// Product name (`NVIDIA H200`).
    pub name: Option<String>,
    /// PCI bus id (`00000000:18:00.0`), to match CUDA devices.
    pub pci_bus_id: Option<String>,
    /// The PCIe link.
    pub pcie: PcieLink,
}

macro_rules! nvml_fns {
    ($( $name:ident : fn($($arg:ty),*) -> $ret:ty; )*) => {
        #[allow(non_snake_case)]
        struct Functions { $( $name: unsafe extern "C" fn($($arg),*) -> $ret, )* }

        impl Functions {
            fn load(lib: &Library, path: &str) -> Result<Functions, NvmlError> {
                Ok(Functions { $( $name: {
                    // SAFETY: the symbol, if present, is the NVML function of that name with
                    // the signature declared here (nvml.h).
                    let symbol = unsafe {
                        lib.get::<unsafe extern "C" fn($($arg),*) -> $ret>(stringify!($name))
                    };
                    *symbol.map_err(|e| NvmlError::NotAvailable {
                        path: path.to_string(),
                        reason: format!("no symbol {}: {}", stringify!($name), dl_reason(&e)),
                    })?
                }, )* })
            }
        }
    };
}

nvml_fns! {
    nvmlInit_v2: fn() -> nvmlReturn_t;
    nvmlShutdown: fn() -> nvmlReturn_t;
    nvmlErrorString: fn(nvmlReturn_t) -> *const c_char;
    nvmlSystemGetDriverVersion: fn(*mut c_char, c_uint) -> nvmlReturn_t;
    nvmlDeviceGetCount_v2: fn(*mut c_uint) -> nvmlReturn_t;
    nvmlDeviceGetHandleByIndex_v2: fn(c_uint, *mut nvmlDevice_t) -> nvmlReturn_t;
    nvmlDeviceGetName: fn(nvmlDevice_t, *mut c_char, c_uint) -> nvmlReturn_t;
    nvmlDeviceGetPciInfo_v3: fn(nvmlDevice_t, *mut nvmlPciInfo_t) -> nvmlReturn_t;
    nvmlDeviceGetCurrPcieLinkGeneration: fn(nvmlDevice_t, *mut c_uint) -> nvmlReturn_t;
    nvmlDeviceGetMaxPcieLinkGeneration: fn(nvmlDevice_t, *mut c_uint) -> nvmlReturn_t;
    nvmlDeviceGetCurrPcieLinkWidth: fn(nvmlDevice_t, *mut c_uint) -> nvmlReturn_t;
    nvmlDeviceGetMaxPcieLinkWidth: fn(nvmlDevice_t, *mut c_uint) -> nvmlReturn_t;
}

/// An initialized NVML (shut down on drop; the library itself stays loaded).
pub struct Nvml {
    f: Functions,
    path: String,
    _library: ManuallyDrop<Library>,
}

impl std::fmt::Debug for Nvml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvml")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Nvml {
    /// Loads `$PINWISE_LIBNVML` if set, else `libnvidia-ml.so.1`, and initializes it.
    pub fn load() -> Result<Nvml, NvmlError> {
        match std::env::var_os(LIBNVML_ENV).filter(|v| !v.is_empty()) {
            Some(path) => Nvml::load_from(Path::new(&path)),
            None => Nvml::load_from(Path::new(DEFAULT_LIBNVML)),
        }
    }

    /// Loads and initializes the NVML library at `path`.
    pub fn load_from(path: &Path) -> Result<Nvml, NvmlError> {
        let shown = path.display().to_string();
        // SAFETY: loading NVML runs its initializers, which are safe in any process.
        let library = unsafe { Library::new(path) }.map_err(|e| NvmlError::NotAvailable {
            path: shown.clone(),
            reason: dl_reason(&e),
        })?;
        let f = Functions::load(&library, &shown)?;
        // SAFETY: no arguments.
        let rc = unsafe { (f.nvmlInit_v2)() };
        let nvml = Nvml {
            f,
            path: shown,
            _library: ManuallyDrop::new(library),
        };
        if rc != NVML_SUCCESS {
            let reason = format!("nvmlInit_v2: {}", nvml.message(rc));
            // Not initialized: make Drop skip nvmlShutdown.
            std::mem::forget(nvml);
            return Err(NvmlError::NotAvailable {
                path: path.display().to_string(),
                reason,
            });
        }
        Ok(nvml)
    }

    /// The library's path or name.
    pub fn path(&self) -> &str {
        &self.path
    }

    fn message(&self, rc: nvmlReturn_t) -> String {
        // SAFETY: nvmlErrorString returns a static C string (or NULL).
        let s = unsafe { (self.f.nvmlErrorString)(rc) };
        if s.is_null() {
            format!("NVML error {rc}")
        } else {
            // SAFETY: non-null static C string.
            unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
        }
    }

    fn check(&self, call: &'static str, rc: nvmlReturn_t) -> Result<(), NvmlError> {
        if rc == NVML_SUCCESS {
            Ok(())
        } else {
            Err(NvmlError::Call {
                call,
                code: rc,
                message: self.message(rc),
            })
        }
    }

    /// `nvmlSystemGetDriverVersion` (e.g. `580.65.06`).
    pub fn driver_version(&self) -> Result<String, NvmlError> {
        let mut buf = [0 as c_char; NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
        // SAFETY: the buffer holds the length passed.
        self.check("nvmlSystemGetDriverVersion", unsafe {
            (self.f.nvmlSystemGetDriverVersion)(buf.as_mut_ptr(), buf.len() as c_uint)
        })?;
        Ok(c_text(&mut buf))
    }

    /// Every device NVML sees, with what it reports about each (a field NVML cannot give is
    /// `None`).
    pub fn devices(&self) -> Result<Vec<NvmlDevice>, NvmlError> {
        let mut count: c_uint = 0;
        // SAFETY: valid out-parameter.
        self.check("nvmlDeviceGetCount_v2", unsafe {
            (self.f.nvmlDeviceGetCount_v2)(&mut count)
        })?;
        (0..count).map(|i| self.device(i)).collect()
    }

    fn device(&self, index: u32) -> Result<NvmlDevice, NvmlError> {
        let mut dev: nvmlDevice_t = std::ptr::null_mut();
        // SAFETY: valid out-parameter.
        self.check("nvmlDeviceGetHandleByIndex_v2", unsafe {
            (self.f.nvmlDeviceGetHandleByIndex_v2)(index, &mut dev)
        })?;
        let mut name = [0 as c_char; NVML_DEVICE_NAME_V2_BUFFER_SIZE];
        // SAFETY: the buffer holds the length passed; `dev` came from NVML.
        let name =
            (unsafe { (self.f.nvmlDeviceGetName)(dev, name.as_mut_ptr(), name.len() as c_uint) }
                == NVML_SUCCESS)
                .then(|| c_text(&mut name));
        // SAFETY: all-zero is a valid `nvmlPciInfo_t` (integers and byte arrays).
        let mut pci: nvmlPciInfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid out-parameter; `dev` came from NVML.
        let pci_bus_id = (unsafe { (self.f.nvmlDeviceGetPciInfo_v3)(dev, &mut pci) }
            == NVML_SUCCESS)
            .then(|| c_text(&mut pci.bus_id));
        let read = |f: unsafe extern "C" fn(nvmlDevice_t, *mut c_uint) -> nvmlReturn_t| {
            let mut v: c_uint = 0;
            // SAFETY: valid out-parameter; `dev` came from NVML.
            (unsafe { f(dev, &mut v) } == NVML_SUCCESS).then_some(v)
        };
        Ok(NvmlDevice {
            index,
            name,
            pci_bus_id,
            pcie: PcieLink {
                current_generation: read(self.f.nvmlDeviceGetCurrPcieLinkGeneration),
                max_generation: read(self.f.nvmlDeviceGetMaxPcieLinkGeneration),
                current_width: read(self.f.nvmlDeviceGetCurrPcieLinkWidth),
                max_width: read(self.f.nvmlDeviceGetMaxPcieLinkWidth),
            },
        })
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        // SAFETY: NVML was initialized in `load_from`.
        unsafe { (self.f.nvmlShutdown)() };
    }
}

/// A PCI bus id in one spelling, so that CUDA's (`0000:18:00.0`) and NVML's
/// (`00000000:18:00.0`) compare equal: lowercase, domain without leading zeros beyond four
/// digits. Returns the input lowercased when it is not `domain:bus:device.function`.
pub fn normalize_pci_bus_id(id: &str) -> String {
    let id = id.trim().to_ascii_lowercase();
    if let Some((domain, rest)) = id.split_once(':') {
        if let Ok(domain) = u32::from_str_radix(domain, 16) {
            return format!("{domain:04x}:{rest}");
        }
    }
    id
}

/// A NUL-terminated (or full) C buffer as a `String`.
fn c_text(buf: &mut [c_char]) -> String {
    if let Some(last) = buf.last_mut() {
        *last = 0;
    }
    // SAFETY: terminated just above.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::normalize_pci_bus_id;

    #[test]
    fn cuda_and_nvml_bus_ids_compare_equal() {
        assert_eq!(normalize_pci_bus_id("00000000:18:00.0"), "0000:18:00.0");
        assert_eq!(normalize_pci_bus_id("0000:1A:00.0"), "0000:1a:00.0");
        assert_eq!(
            normalize_pci_bus_id("00000001:18:00.0"),
            normalize_pci_bus_id("0001:18:00.0")
        );
        assert_eq!(normalize_pci_bus_id("garbage"), "garbage");
    }
}
