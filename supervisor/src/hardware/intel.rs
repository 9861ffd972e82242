//! Intel GPUs on the i915 or xe driver. A discrete Arc card is served by the Vulkan build;
//! integrated Intel graphics share the CPU's memory and bandwidth and are listed only, so the CPU
//! engine serves there. The xe driver publishes each tile's VRAM
//! (`tileN/physical_vram_size_bytes`); mainline i915 publishes none, so a known card's size then
//! comes from our table (as specified, not measured), and where one id covers two sizes the
//! card's memory window tells them apart.

use std::path::Path;

use super::pci::PciDevice;
use super::pci_ids::KnownCard;
use super::{drm, pci_ids, sysfs, Device, Driver, Host, Memory, Source, SysRoot, Telemetry, Vendor};

/// Most tiles a card may have (Data Center GPU Max has two).
const MAX_TILES: u32 = 4;
/// PCI region 2 of an Arc card is the CPU's window onto its memory. At probe i915 and xe grow it
/// to the memory rounded up to a power of two where the platform allows (Resizable BAR);
/// otherwise the firmware's 256 MiB stays.
const MEMORY_WINDOW_REGION: usize = 2;
/// A window at least this large was grown to the card's memory.
const GROWN_WINDOW_MIB: u64 = 1024;

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
        warnings.push(
            "GPU generation unknown: the card is not in our table (the portable Vulkan build still runs on it)"
                .to_string(),
        );
    }
    let window = memory_window_mib(&dir, &mut warnings);
    let dedicated = match (vram, known) {
        (Some(measured), _) => measured,
        (None, Some(card)) => specified_mib(card, window, &mut warnings),
        (None, None) => 0,
    };
    if let Some(window) = window.filter(|&w| w < GROWN_WINDOW_MIB) {
        warnings.push(format!(
            "Resizable BAR is off: the CPU's window onto the card's memory (PCI region 2) is {window} MiB; \
             Intel requires Resizable BAR for Arc cards (enable it, with Above 4G decoding, in the \
             firmware setup)"
        ));
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

/// The card's memory where the driver publishes none (i915): the table's, as specified. Where one
/// id covers two sizes, a window grown to the memory tells them apart; without one the smaller
/// counts, so a plan never counts on memory the card may not have.
fn specified_mib(card: &KnownCard, window_mib: Option<u64>, warnings: &mut Vec<String>) -> u64 {
    let unmeasured = "not measured (the i915 driver does not publish it; the xe driver does)";
    let Some(larger) = card.larger_memory_mib else {
        warnings.push(format!("memory {} MiB is the card's specification, {unmeasured}", card.memory_mib));
        return card.memory_mib;
    };
    let (smaller, gb) = (card.memory_mib, |mib: u64| mib / 1024);
    let Some(size) = [smaller, larger].into_iter().find(|size| window_mib == Some(size.next_power_of_two()))
    else {
        warnings.push(format!(
            "memory {smaller} MiB is the card's specification, {unmeasured}: the {} ships with {} or {} GB \
             under one id, and only a memory window grown by Resizable BAR tells them apart",
            card.model,
            gb(smaller),
            gb(larger)
        ));
        return smaller;
    };
    warnings.push(format!(
        "memory {size} MiB is the specification of the {} GB {}, told from the {} GB one by its {size} \
         MiB memory window (PCI region 2); {unmeasured}",
        gb(size),
        card.model,
        gb(if size == larger { smaller } else { larger })
    ));
    size
}

/// The size of the card's memory window (PCI region 2) from its `resource` file; none where the
/// file is missing (a tree captured before it was) or unreadable (with a warning naming it).
fn memory_window_mib(dir: &Path, warnings: &mut Vec<String>) -> Option<u64> {
    let file = dir.join("resource");
    if !file.exists() {
        return None;
    }
    let text = match sysfs::read_trimmed(&file) {
        Ok(text) => text,
        Err(e) => {
            warnings.push(e);
            return None;
        }
    };
    let size = sysfs::parse_pci_region_size(&text, MEMORY_WINDOW_REGION);
    if size.is_none() {
        warnings.push(format!(
            "{}: expected `start end flags` in hex for region {MEMORY_WINDOW_REGION}, found {:?}",
            file.display(),
            text.lines().nth(MEMORY_WINDOW_REGION).unwrap_or("").chars().take(60).collect::<String>()
        ));
    }
    size.map(sysfs::bytes_to_mib).filter(|&mib| mib > 0)
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
