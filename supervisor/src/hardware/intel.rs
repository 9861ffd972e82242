//! Intel GPUs on the i915 or xe driver. A discrete Arc card is served by the Vulkan build;
//! integrated Intel graphics share the CPU's memory and bandwidth and are listed only, so the CPU
//! engine serves there. The xe driver publishes each tile's VRAM
//! (`tileN/physical_vram_size_bytes`); mainline i915 publishes none, so a known card's size then
//! comes from our table (as specified, not measured).

use std::path::Path;

use super::pci::PciDevice;
use super::{drm, pci_ids, sysfs, Device, Driver, Host, Memory, Source, SysRoot, Telemetry, Vendor};

/// Most tiles a card may have (Data Center GPU Max has two).
const MAX_TILES: u32 = 4;

pub fn probe(root: &SysRoot, pci: &[&PciDevice], host: &Host) -> Vec<Device> {
    pci.iter().map(|p| build_device(root, p, host)).collect()
}

fn build_device(root: &SysRoot, pci: &PciDevice, host: &Host) -> Device {
    let known = pci_ids::lookup(pci.vendor_id, pci.device_id);
    let dir = root.path(Path::new("/").join(&pci.sysfs_dir));
    let mut warnings = Vec::new();
    let vram = tile_vram_mib(&dir, &mut warnings);
    let mut sources = vec![Source::Pci];
    if vram.is_some() {
        sources.push(Source::XeSysfs);
    }
    let discrete = known.map_or(vram.is_some(), |k| !k.integrated);
    let model = known.map_or_else(|| format!("Intel GPU {}", pci.pci_id()), |k| k.model.to_string());
    let telemetry =
        Telemetry { sysfs_path: Some(pci.sysfs_dir.display().to_string()), ..Telemetry::default() };
    let driver = Driver { name: pci.driver.clone(), version: host.kernel.clone() };
    if !discrete {
        warnings.push(
            "integrated Intel graphics share the CPU's memory bandwidth: the CPU engine serves instead"
                .to_string(),
        );
        return Device {
            pci_id: Some(pci.pci_id()),
            integrated: true,
            driver,
            sources,
            accessible: false,
            warnings,
            telemetry,
            ..Device::new(&pci.address, Vendor::Intel, &model)
        };
    }
    let arch = known.map(|k| k.arch.to_string());
    if arch.is_none() {
        warnings.push("GPU generation unknown: the card is not in our table".to_string());
    }
    let dedicated = vram.or_else(|| known.map(|k| k.memory_mib)).unwrap_or(0);
    if vram.is_none() {
        warnings.push(match known.and_then(|k| k.memory_note) {
            Some(note) => format!("memory {dedicated} MiB is the card's specification, not measured: {note}"),
            None => format!(
                "memory {dedicated} MiB is the card's specification, not measured (the i915 driver \
                 does not publish it; the xe driver does)"
            ),
        });
    }
    let accessible = intel_accessible(root, pci, host, &mut warnings);
    Device {
        pci_id: Some(pci.pci_id()),
        arch,
        memory: Memory::discrete(dedicated, vram.is_some()),
        driver,
        sources,
        accessible,
        warnings,
        telemetry,
        ..Device::new(&pci.address, Vendor::Intel, &model)
    }
}

/// VRAM summed over the card's tiles, where the xe driver publishes it.
fn tile_vram_mib(dir: &Path, warnings: &mut Vec<String>) -> Option<u64> {
    let mut total = None;
    for tile in 0..MAX_TILES {
        let file = dir.join(format!("tile{tile}/physical_vram_size_bytes"));
        if !file.exists() {
            break;
        }
        match sysfs::read_u64(&file) {
            Ok(bytes) => total = Some(total.unwrap_or(0) + sysfs::bytes_to_mib(bytes)),
            Err(e) => warnings.push(format!("xe: {e}")),
        }
    }
    total
}

/// Vulkan needs the card's render node; containers get it only with `--device /dev/dri`.
fn intel_accessible(root: &SysRoot, pci: &PciDevice, host: &Host, warnings: &mut Vec<String>) -> bool {
    match pci.driver.as_deref() {
        Some("i915" | "xe") => {}
        Some(other) => {
            warnings.push(format!(
                "bound to the {other} driver, not i915 or xe: the GPU cannot be used for inference"
            ));
            return false;
        }
        None => {
            warnings.push("no driver bound: load the xe (or i915) kernel module".to_string());
            return false;
        }
    }
    let present = drm::present(root);
    if let Some(warning) = drm::own_node_missing(root, pci, &present) {
        warnings.push(warning);
        return false;
    }
    if !present.is_empty() {
        return true;
    }
    warnings.push(if host.in_container {
        "the GPU is visible on PCI but not usable in this container: run it with `--device /dev/dri`"
            .to_string()
    } else {
        "missing /dev/dri/renderD*: the driver did not create a render node".to_string()
    });
    false
}
