//! Devices: name, memory, attributes, PCI identity, primary context.

use std::ffi::{c_char, c_int, CStr};
use std::sync::Arc;

use crate::context::Context;
use crate::driver::Driver;
use crate::error::{CudaError, Result};
use crate::sys::*;

/// A CUDA device (an ordinal of a loaded driver).
#[derive(Debug, Clone)]
pub struct Device {
    driver: Arc<Driver>,
    ordinal: CUdevice,
}

/// Where a device sits on the PCI bus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PciIds {
    /// PCI domain.
    pub domain: i32,
    /// PCI bus.
    pub bus: i32,
    /// PCI device.
    pub device: i32,
}

impl Device {
    /// `cuDeviceGet`.
    pub(crate) fn get(driver: &Arc<Driver>, ordinal: usize) -> Result<Device> {
        let ordinal = c_int::try_from(ordinal).map_err(|_| CudaError::InvalidArgument {
            call: "cuDeviceGet",
            reason: format!("device ordinal {ordinal} is out of range"),
        })?;
        let mut dev: CUdevice = 0;
        // SAFETY: valid out-parameter.
        driver.check("cuDeviceGet", unsafe {
            (driver.api().cuDeviceGet)(&mut dev, ordinal)
        })?;
        Ok(Device {
            driver: driver.clone(),
            ordinal: dev,
        })
    }

    /// The driver this device belongs to.
    pub fn driver(&self) -> &Arc<Driver> {
        &self.driver
    }

    /// The device ordinal (`CUdevice`).
    pub fn ordinal(&self) -> CUdevice {
        self.ordinal
    }

    fn text(
        &self,
        call: &'static str,
        f: unsafe extern "C" fn(*mut c_char, c_int, CUdevice) -> CUresult,
    ) -> Result<String> {
        let mut buf = [0 as c_char; 256];
        // SAFETY: the buffer holds `buf.len()` bytes, as passed.
        self.driver.check(call, unsafe {
            f(buf.as_mut_ptr(), buf.len() as c_int, self.ordinal)
        })?;
        // Make sure it is terminated even if the driver filled the buffer.
        buf[buf.len() - 1] = 0;
        // SAFETY: NUL-terminated above.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    /// `cuDeviceGetName`.
    pub fn name(&self) -> Result<String> {
        self.text("cuDeviceGetName", self.driver.api().cuDeviceGetName)
    }

    /// `cuDeviceGetPCIBusId`: `domain:bus:device.function`, e.g. `0000:18:00.0`.
    pub fn pci_bus_id(&self) -> Result<String> {
        self.text("cuDeviceGetPCIBusId", self.driver.api().cuDeviceGetPCIBusId)
    }

    /// `cuDeviceTotalMem_v2`: bytes of device memory.
    pub fn total_memory(&self) -> Result<usize> {
        let mut bytes = 0usize;
        // SAFETY: valid out-parameter.
        self.driver.check("cuDeviceTotalMem_v2", unsafe {
            (self.driver.api().cuDeviceTotalMem_v2)(&mut bytes, self.ordinal)
        })?;
        Ok(bytes)
    }

    /// `cuDeviceGetAttribute` (`CU_DEVICE_ATTRIBUTE_*` from [`crate::sys`]).
    pub fn attribute(&self, attribute: CUdevice_attribute) -> Result<i32> {
        let mut value: c_int = 0;
        // SAFETY: valid out-parameter.
        self.driver.check("cuDeviceGetAttribute", unsafe {
            (self.driver.api().cuDeviceGetAttribute)(&mut value, attribute, self.ordinal)
        })?;
        Ok(value)
    }

    /// The device's UUID as `nvidia-smi` prints it (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`),
    /// from `cuDeviceGetUuid_v2` (or `cuDeviceGetUuid`); `None` when the driver has
    /// neither.
    pub fn uuid(&self) -> Result<Option<String>> {
        let api = self.driver.api();
        let Some((call, f)) = api
            .cuDeviceGetUuid_v2
            .map(|f| ("cuDeviceGetUuid_v2", f))
            .or(api.cuDeviceGetUuid.map(|f| ("cuDeviceGetUuid", f)))
        else {
            return Ok(None);
        };
        let mut id = CUuuid::default();
        // SAFETY: valid out-parameter of 16 bytes.
        self.driver
            .check(call, unsafe { f(&mut id, self.ordinal) })?;
        Ok(Some(format_uuid(&id.bytes)))
    }

    /// The PCI domain, bus and device ids.
    pub fn pci_ids(&self) -> Result<PciIds> {
        Ok(PciIds {
            domain: self.attribute(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
            bus: self.attribute(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
            device: self.attribute(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?,
        })
    }

    /// Compute capability (major, minor).
    pub fn compute_capability(&self) -> Result<(i32, i32)> {
        Ok((
            self.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            self.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ))
    }

    /// Retains the device's primary context (released when the last clone is dropped).
    pub fn primary_context(&self) -> Result<Context> {
        Context::retain_primary(self)
    }
}

/// `GPU-` and the 16 bytes in the 8-4-4-4-12 grouping of `nvidia-smi -L`.
pub fn format_uuid(b: &[u8; 16]) -> String {
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod uuid_tests {
    #[test]
    fn uuids_print_as_nvidia_smi_does() {
        let b: [u8; 16] = std::array::from_fn(|i| (i * 17) as u8);
        assert_eq!(
            super::format_uuid(&b),
            "GPU-00112233-4455-6677-8899-aabbccddeeff"
        );
    }
}
