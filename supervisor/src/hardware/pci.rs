//! PCI sysfs: every display controller below `/sys/bus/pci/devices`, with vendor, device and
//! class ids, bound driver and resolved device directory.

use std::fs;
use std::path::{Path, PathBuf};

use super::{pci_ids, sysfs, Device, Driver, Memory, Source, SysRoot, Telemetry, Vendor};

pub const NVIDIA: u16 = 0x10de;
pub const AMD: u16 = 0x1002;
pub const INTEL: u16 = 0x8086;
/// WSL2's paravirtual GPU adapter (`1414:008e`, "Basic Render Driver").
pub const MICROSOFT: u16 = 0x1414;

/// PCI base class 0x03: display controller (VGA 0x0300, 3D 0x0302, other 0x0380).
const DISPLAY_CLASS: u32 = 0x03;

#[derive(Debug, Clone, PartialEq)]
pub struct PciDevice {
    /// Normalised address, `0000:01:00.0`.
    pub address: String,
    pub vendor_id: u16,
    pub device_id: u16,
    pub class: u32,
    /// Bound kernel driver (`nvidia`, `amdgpu`, `vfio-pci`...), if any.
    pub driver: Option<String>,
    /// The device's real directory, relative to the root (`sys/devices/pci0000:00/...`).
    pub sysfs_dir: PathBuf,
}

impl PciDevice {
    pub fn pci_id(&self) -> String {
        format!("{:04x}:{:04x}", self.vendor_id, self.device_id)
    }
}

/// Lists display controllers. Unreadable entries become warnings.
pub fn scan_display_devices(root: &SysRoot, warnings: &mut Vec<String>) -> Vec<PciDevice> {
    let bus = root.path("/sys/bus/pci/devices");
    let entries = match fs::read_dir(&bus) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            warnings.push(format!("pci: cannot list {}: {e}", bus.display()));
            return Vec::new();
        }
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let link = entry.path();
        let address = entry.file_name().to_string_lossy().into_owned();
        match read_pci_device(root, &link, &address) {
            Ok(Some(device)) => found.push(device),
            Ok(None) => {}
            Err(message) => warnings.push(format!("pci {address}: {message}")),
        }
    }
    found.sort_by(|a, b| a.address.cmp(&b.address));
    found
}

fn read_pci_device(root: &SysRoot, link: &Path, address: &str) -> Result<Option<PciDevice>, String> {
    let class = sysfs::read_hex_u32(&link.join("class"))?;
    if class >> 16 != DISPLAY_CLASS {
        return Ok(None);
    }
    let vendor_id = sysfs::read_hex_u16(&link.join("vendor"))?;
    let device_id = sysfs::read_hex_u16(&link.join("device"))?;
    let driver = fs::read_link(link.join("driver"))
        .ok()
        .and_then(|target| target.file_name().map(|n| n.to_string_lossy().into_owned()));
    // The bus entry is a relative symlink into /sys/devices; keep the resolved directory so
    // later reads (hwmon, drm) follow the same path a real kernel exposes.
    let resolved = fs::canonicalize(link).map_err(|e| format!("cannot resolve {}: {e}", link.display()))?;
    let sysfs_dir = root.relative(&resolved).unwrap_or_else(|| resolved.clone());
    Ok(Some(PciDevice {
        address: normalise_address(address),
        vendor_id,
        device_id,
        class,
        driver,
        sysfs_dir,
    }))
}

/// `00000000:01:00.0` (NVML) and `0000:01:00.0` (sysfs) name the same device.
pub fn normalise_address(address: &str) -> String {
    let address = address.trim().to_ascii_lowercase();
    match address.split_once(':') {
        Some((domain, rest)) if domain.len() > 4 => {
            let domain = u32::from_str_radix(domain, 16).unwrap_or(0);
            format!("{domain:04x}:{rest}")
        }
        _ => address,
    }
}

/// A display device of a vendor we have no deep probe for: PCI facts only.
pub fn generic_device(pci: &PciDevice) -> Device {
    let known = pci_ids::lookup(pci.vendor_id, pci.device_id);
    Device {
        id: pci.address.clone(),
        // No engine build drives it; it is listed, never planned.
        vendor: Vendor::Cpu,
        model: match known {
            Some(k) => k.model.to_string(),
            None if pci.vendor_id == MICROSOFT => "WSL2 paravirtual GPU adapter".to_string(),
            None => format!("PCI display {}", pci.pci_id()),
        },
        pci_id: Some(pci.pci_id()),
        arch: known.map(|k| k.arch.to_string()),
        integrated: known.map(|k| k.integrated).unwrap_or(false),
        memory: Memory::default(),
        driver: Driver { name: pci.driver.clone(), version: None },
        sources: vec![Source::Pci],
        accessible: false,
        warnings: vec![if pci.vendor_id == MICROSOFT {
            "WSL2's paravirtual GPU adapter, and NVML names no GPU behind it: only NVIDIA GPUs are \
             used from WSL2 (install the NVIDIA driver on Windows and run the container with `--gpus all`)"
                .to_string()
        } else {
            "no engine build supports this vendor's GPU; it is listed only".to_string()
        }],
        uid: None,
        telemetry: Telemetry {
            sysfs_path: Some(pci.sysfs_dir.display().to_string()),
            ..Telemetry::default()
        },
        rocm_index: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvml_and_sysfs_addresses_agree() {
        assert_eq!(normalise_address("00000000:01:00.0"), "0000:01:00.0");
        assert_eq!(normalise_address("0000:C3:00.0"), "0000:c3:00.0");
        assert_eq!(normalise_address("00000001:02:00.0"), "0001:02:00.0");
    }
}
