//! AMD GPUs through amdgpu sysfs (memory pools, busy, hwmon) and the KFD topology (exact gfx
//! target), with ROCm SMI (cargo feature `rocm`) filling what sysfs could not give. Integrated
//! GPUs (Strix Halo) report a small VRAM carve-out and a large GTT pool: both are reported, and
//! `usable_mib` counts what a model can really map.

use std::fs;
use std::path::{Path, PathBuf};

use super::pci::PciDevice;
use super::units::{celsius_from_millidegrees, power_limit_w, watts_from_microwatts};
use super::{
    discrete_usable_mib, drm, pci_ids, sysfs, unified_usable_mib, Device, Driver, Host, Memory, Source,
    SysRoot, Telemetry, Vendor,
};

/// Without a table entry, a VRAM pool under this size next to a larger GTT pool means an APU.
const APU_CARVE_OUT_MAX_MIB: u64 = 4096;

/// What a management library (ROCm SMI) reports for one AMD GPU. Each query can fail on its
/// own, so every reading is optional.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LibraryGpu {
    /// Normalised PCI address, `0000:03:00.0`.
    pub address: String,
    pub vram_total_mib: Option<u64>,
    pub gtt_total_mib: Option<u64>,
    pub unique_id: Option<u64>,
    pub temperature_c: Option<f64>,
    pub power_w: Option<f64>,
    pub busy_pct: Option<f64>,
    pub fan_speed_pct: Option<f64>,
}

/// Builds one device per AMD PCI function; `library` holds what ROCm SMI said (empty when it
/// was not asked or did not answer).
pub fn probe(
    root: &SysRoot,
    pci: &[&PciDevice],
    library: &[LibraryGpu],
    host: &Host,
    warnings: &mut Vec<String>,
) -> Vec<Device> {
    let kfd = read_kfd_nodes(root, warnings);
    pci.iter()
        .map(|p| {
            // ROCm numbers its GPUs in KFD node order, which need not be PCI order.
            let rocm_index = kfd.iter().position(|n| n.address == p.address);
            let from_kfd = rocm_index.map(|i| &kfd[i]);
            let from_library = library.iter().find(|g| g.address == p.address);
            let mut device = build_device(root, p, from_kfd, from_library, host);
            device.rocm_index = rocm_index.and_then(|i| u32::try_from(i).ok());
            device
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq)]
struct KfdNode {
    address: String,
    gfx_target_version: u64,
    unique_id: Option<u64>,
}

/// GPU nodes of `/sys/class/kfd/kfd/topology/nodes/*/properties` (CPU nodes have no gfx target),
/// in node order: the order ROCm numbers its GPUs in.
fn read_kfd_nodes(root: &SysRoot, warnings: &mut Vec<String>) -> Vec<KfdNode> {
    let dir = root.path("/sys/class/kfd/kfd/topology/nodes");
    let Ok(entries) = fs::read_dir(&dir) else { return Vec::new() };
    let mut entries: Vec<_> = entries.flatten().collect();
    // Numbered folders, read in number order (10 after 9); anything else after them.
    entries
        .sort_by_key(|e| (e.file_name().to_string_lossy().parse::<u32>().unwrap_or(u32::MAX), e.file_name()));
    let mut nodes = Vec::new();
    for entry in entries {
        let path = entry.path().join("properties");
        let text = match sysfs::read_trimmed(&path) {
            Ok(text) => text,
            Err(e) => {
                warnings.push(format!("kfd: {e}"));
                continue;
            }
        };
        let props = sysfs::parse_properties(&text);
        let gfx = sysfs::property_u64(&props, "gfx_target_version").unwrap_or(0);
        if gfx == 0 {
            continue;
        }
        let (Some(domain), Some(location)) =
            (sysfs::property_u64(&props, "domain"), sysfs::property_u64(&props, "location_id"))
        else {
            warnings.push(format!("kfd: {} lacks domain/location_id", path.display()));
            continue;
        };
        nodes.push(KfdNode {
            address: kfd_address(domain, location),
            gfx_target_version: gfx,
            unique_id: sysfs::property_u64(&props, "unique_id"),
        });
    }
    nodes
}

/// KFD `location_id` packs bus, device and function as `bus << 8 | device << 3 | function`
/// (ROCm SMI's BDF id is the same below the domain in its upper 32 bits).
pub(super) fn kfd_address(domain: u64, location_id: u64) -> String {
    let bus = (location_id >> 8) & 0xff;
    let device = (location_id >> 3) & 0x1f;
    let function = location_id & 0x7;
    format!("{domain:04x}:{bus:02x}:{device:02x}.{function:x}")
}

fn build_device(
    root: &SysRoot,
    pci: &PciDevice,
    kfd: Option<&KfdNode>,
    library: Option<&LibraryGpu>,
    host: &Host,
) -> Device {
    let known = pci_ids::lookup(pci.vendor_id, pci.device_id);
    let dir = root.path(Path::new("/").join(&pci.sysfs_dir));
    let mut warnings = Vec::new();
    let mut sources = vec![Source::Pci];

    let read_mib = |file: &str, warnings: &mut Vec<String>| match sysfs::read_u64(&dir.join(file)) {
        Ok(bytes) => Some(sysfs::bytes_to_mib(bytes)),
        Err(e) if dir.join(file).exists() => {
            warnings.push(format!("amdgpu: {e}"));
            None
        }
        Err(_) => None,
    };
    let sysfs_vram = read_mib("mem_info_vram_total", &mut warnings);
    let sysfs_gtt = read_mib("mem_info_gtt_total", &mut warnings);
    if sysfs_vram.is_some() {
        sources.push(Source::AmdgpuSysfs);
    }
    if kfd.is_some() {
        sources.push(Source::Kfd);
    }
    if library.is_some() {
        sources.push(Source::RocmSmi);
    }
    // sysfs first: ROCm SMI reads the same driver files, so it only fills what sysfs lacked.
    let vram = sysfs_vram.or_else(|| library.and_then(|g| g.vram_total_mib));
    let gtt = sysfs_gtt.or_else(|| library.and_then(|g| g.gtt_total_mib));

    let kfd_arch = kfd.and_then(|n| pci_ids::gfx_arch(n.gfx_target_version));
    if let (Some(k), Some(t)) = (&kfd_arch, known) {
        if k != t.arch {
            warnings.push(format!("KFD reports {k} but our table says {} for this id; using {k}", t.arch));
        }
    }
    let arch = kfd_arch.or_else(|| known.map(|k| k.arch.to_string()));
    if arch.is_none() {
        warnings
            .push("gfx target unknown: no KFD topology node for this GPU and it is not in our table".into());
    }

    let integrated = match known {
        Some(k) => k.integrated,
        None => {
            // amdgpu names the VRAM chips' maker only for a card with memory of its own, so a small
            // discrete card (a 4 GB RX 6500 XT) is not taken for an APU's carve-out.
            let own_memory = dir.join("mem_info_vram_vendor").exists();
            let guess = !own_memory
                && matches!((vram, gtt), (Some(v), Some(g)) if v <= APU_CARVE_OUT_MAX_MIB && g > v);
            if guess {
                warnings.push("treated as integrated: small VRAM carve-out next to a larger GTT pool".into());
            }
            guess
        }
    };

    let dedicated = vram.or_else(|| known.filter(|k| !k.integrated).map(|k| k.memory_mib)).unwrap_or(0);
    let shared = if integrated { gtt.unwrap_or(0) } else { 0 };
    let usable = if integrated {
        unified_usable_mib(dedicated, shared, host.memory_mib)
    } else {
        discrete_usable_mib(dedicated)
    };
    if vram.is_none() {
        warnings.push(if dedicated > 0 {
            format!(
                "memory {dedicated} MiB is the card's specification, not measured (amdgpu sysfs unreadable)"
            )
        } else {
            "memory unknown: amdgpu sysfs has no mem_info_vram_total (is the amdgpu driver bound?)"
                .to_string()
        });
    }
    if integrated && host.memory_mib > 0 && shared > 0 && shared * 100 <= host.memory_mib * 55 {
        warnings.push(format!(
            "GTT pool is {shared} MiB, about half the RAM (the kernel default): raise it with the \
             amdgpu.gttsize or ttm.pages_limit kernel parameters so models can use more unified memory"
        ));
    }

    let hwmon = find_hwmon(&dir);
    let telemetry =
        with_library_readings(read_telemetry(root, &dir, hwmon.as_deref(), &pci.sysfs_dir), library);
    let accessible = amd_accessible(root, pci, host, &mut warnings);
    let model = known
        .map(|k| k.model.to_string())
        .or_else(|| sysfs::read_trimmed(&dir.join("product_name")).ok().filter(|n| !n.is_empty()))
        .unwrap_or_else(|| format!("AMD GPU {}", pci.pci_id()));
    let uid = sysfs::read_trimmed(&dir.join("unique_id"))
        .ok()
        .or_else(|| {
            kfd.and_then(|n| n.unique_id)
                .or_else(|| library.and_then(|g| g.unique_id))
                .map(|u| format!("{u:016x}"))
        })
        .map(|u| format!("{}:{u}", pci.address));

    Device {
        id: pci.address.clone(),
        vendor: Vendor::Amd,
        model,
        pci_id: Some(pci.pci_id()),
        arch,
        integrated,
        memory: Memory {
            dedicated_mib: dedicated,
            shared_mib: shared,
            usable_mib: usable,
            measured: vram.is_some(),
        },
        driver: Driver { name: pci.driver.clone(), version: host.drivers.amdgpu.clone() },
        sources,
        accessible,
        warnings,
        uid,
        telemetry,
        // Set by the caller, which knows the KFD node order.
        rocm_index: None,
    }
}

/// Fills the readings hwmon did not give from the library; a fan speed implies one fan.
fn with_library_readings(sysfs: Telemetry, library: Option<&LibraryGpu>) -> Telemetry {
    let Some(gpu) = library else { return sysfs };
    Telemetry {
        temperature_c: sysfs.temperature_c.or(gpu.temperature_c),
        power_w: sysfs.power_w.or(gpu.power_w),
        busy_pct: sysfs.busy_pct.or(gpu.busy_pct),
        fans: sysfs.fans.or(gpu.fan_speed_pct.map(|_| 1)),
        fan_speed_pct: sysfs.fan_speed_pct.or(gpu.fan_speed_pct),
        ..sysfs
    }
}

fn find_hwmon(device_dir: &Path) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> =
        fs::read_dir(device_dir.join("hwmon")).ok()?.flatten().map(|e| e.path()).collect();
    dirs.sort();
    dirs.into_iter().next()
}

fn read_telemetry(root: &SysRoot, device_dir: &Path, hwmon: Option<&Path>, sysfs_dir: &Path) -> Telemetry {
    let value = |file: &str| hwmon.and_then(|h| sysfs::read_u64(&h.join(file)).ok());
    // temp2 is the junction (hotspot) on amdgpu; APUs may only have temp1 (edge).
    let temperature_c =
        value("temp2_input").or_else(|| value("temp1_input")).map(|m| celsius_from_millidegrees(m as f64));
    let watts = |uw: u64| watts_from_microwatts(uw as f64);
    let power_w = value("power1_average").or_else(|| value("power1_input")).map(watts);
    let power_cap_w = value("power1_cap").map(watts).and_then(power_limit_w);
    let fan_speed_pct = value("pwm1").map(|p| (p.min(255) as f64) * 100.0 / 255.0);
    let has_fan = hwmon.is_some_and(|h| h.join("fan1_input").exists());
    Telemetry {
        temperature_c,
        power_w,
        power_cap_w,
        busy_pct: sysfs::read_u64(&device_dir.join("gpu_busy_percent")).ok().map(|b| b as f64),
        fans: hwmon.map(|_| u32::from(has_fan)),
        fan_speed_pct,
        sysfs_path: Some(sysfs_dir.display().to_string()),
        hwmon_path: hwmon.and_then(|h| root.relative(h)).map(|p| p.display().to_string()),
    }
}

/// ROCm needs `/dev/kfd` and a render node; containers get them only with explicit devices.
fn amd_accessible(root: &SysRoot, pci: &PciDevice, host: &Host, warnings: &mut Vec<String>) -> bool {
    if pci.driver.as_deref() != Some("amdgpu") {
        warnings.push(match pci.driver.as_deref() {
            Some(other) => {
                format!("bound to the {other} driver, not amdgpu: the GPU cannot be used for inference")
            }
            None => "no driver bound: load the amdgpu kernel module".to_string(),
        });
        return false;
    }
    let kfd = root.path("/dev/kfd").exists();
    let present = drm::present(root);
    if let Some(warning) = drm::own_node_missing(root, pci, &present).filter(|_| kfd) {
        warnings.push(warning);
        return false;
    }
    if kfd && !present.is_empty() {
        return true;
    }
    warnings.push(if host.in_container {
        "the GPU is visible on PCI but not usable in this container: run it with \
         `--device /dev/kfd --device /dev/dri`"
            .to_string()
    } else {
        format!(
            "missing {}: the amdgpu driver did not create the compute device nodes",
            if kfd { "/dev/dri/renderD*" } else { "/dev/kfd" }
        )
    });
    false
}

#[cfg(test)]
mod tests {
    use super::super::Detection;
    use super::*;

    const ADDRESS: &str = "0000:03:00.0";

    /// An amdgpu-bound card with an id our table lacks, so memory can only come from a source.
    fn bare_card(root: &Path) -> PciDevice {
        let sysfs_dir = PathBuf::from("sys/devices/pci0000:00/0000:03:00.0");
        fs::create_dir_all(root.join(&sysfs_dir)).unwrap();
        PciDevice {
            address: ADDRESS.into(),
            vendor_id: 0x1002,
            device_id: 0x7fff,
            class: 0x030000,
            driver: Some("amdgpu".into()),
            sysfs_dir,
        }
    }

    fn library_gpu(address: &str) -> LibraryGpu {
        LibraryGpu {
            address: address.into(),
            vram_total_mib: Some(32624),
            gtt_total_mib: Some(64000),
            unique_id: Some(0xabc),
            temperature_c: Some(55.0),
            power_w: Some(120.5),
            busy_pct: Some(7.0),
            fan_speed_pct: Some(40.0),
        }
    }

    fn host() -> Host {
        Host { memory_mib: 65536, ..Detection::empty().host }
    }

    #[test]
    fn the_library_fills_what_sysfs_lacks() {
        let dir = tempfile::tempdir().unwrap();
        let pci = bare_card(dir.path());
        let devices =
            probe(&SysRoot::new(dir.path()), &[&pci], &[library_gpu(ADDRESS)], &host(), &mut Vec::new());
        let device = &devices[0];
        assert_eq!(device.memory.dedicated_mib, 32624);
        assert_eq!(device.memory.usable_mib, discrete_usable_mib(32624));
        assert!(device.memory.measured);
        assert!(!device.integrated, "a large VRAM pool is a discrete card");
        assert_eq!(device.memory.shared_mib, 0, "GTT counts only on integrated GPUs");
        assert_eq!(device.sources, vec![Source::Pci, Source::RocmSmi]);
        assert!(device.warnings.iter().all(|w| !w.contains("memory")), "{:?}", device.warnings);
        assert_eq!(device.uid.as_deref(), Some("0000:03:00.0:0000000000000abc"));
        let t = &device.telemetry;
        assert_eq!(
            (t.temperature_c, t.power_w, t.busy_pct, t.fans, t.fan_speed_pct),
            (Some(55.0), Some(120.5), Some(7.0), Some(1), Some(40.0))
        );
    }

    #[test]
    fn sysfs_wins_over_the_library_and_other_addresses_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let pci = bare_card(dir.path());
        let card = dir.path().join(&pci.sysfs_dir);
        fs::write(card.join("mem_info_vram_total"), format!("{}\n", 16384u64 << 20)).unwrap();
        fs::create_dir_all(card.join("hwmon/hwmon3")).unwrap();
        fs::write(card.join("hwmon/hwmon3/temp2_input"), "61000\n").unwrap();
        let root = SysRoot::new(dir.path());

        let devices = probe(&root, &[&pci], &[library_gpu(ADDRESS)], &host(), &mut Vec::new());
        let device = &devices[0];
        assert_eq!(device.memory.dedicated_mib, 16384);
        assert_eq!(device.telemetry.temperature_c, Some(61.0));
        assert_eq!(device.telemetry.power_w, Some(120.5), "hwmon has no power file");
        assert_eq!(device.sources, vec![Source::Pci, Source::AmdgpuSysfs, Source::RocmSmi]);

        let elsewhere = probe(&root, &[&pci], &[library_gpu("0000:04:00.0")], &host(), &mut Vec::new());
        assert!(!elsewhere[0].sources.contains(&Source::RocmSmi));
        assert_eq!(elsewhere[0].telemetry.power_w, None);
    }

    /// The board's power limit comes from hwmon's `power1_cap` (microwatts); amdgpu's 0 (no
    /// settable limit, as on some APUs) is no limit at all.
    #[test]
    fn the_power_cap_is_read_in_watts_and_zero_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let pci = bare_card(dir.path());
        let hwmon = dir.path().join(&pci.sysfs_dir).join("hwmon/hwmon2");
        fs::create_dir_all(&hwmon).unwrap();
        let root = SysRoot::new(dir.path());
        let cap = |microwatts: &str| {
            fs::write(hwmon.join("power1_cap"), microwatts).unwrap();
            probe(&root, &[&pci], &[], &host(), &mut Vec::new())[0].telemetry.power_cap_w
        };
        assert_eq!(cap("300000000\n"), Some(300.0));
        assert_eq!(cap("0\n"), None);
        assert_eq!(cap("garbage\n"), None);
    }

    /// A card missing from our table with a small VRAM pool beside a larger GTT pool looks like
    /// an APU, unless amdgpu names its VRAM's maker, which it does only for memory of its own.
    #[test]
    fn a_small_card_with_memory_of_its_own_is_discrete() {
        let dir = tempfile::tempdir().unwrap();
        let pci = bare_card(dir.path());
        let card = dir.path().join(&pci.sysfs_dir);
        fs::write(card.join("mem_info_vram_total"), format!("{}\n", 4096u64 << 20)).unwrap();
        fs::write(card.join("mem_info_gtt_total"), format!("{}\n", 16384u64 << 20)).unwrap();
        let root = SysRoot::new(dir.path());
        let carve_out = &probe(&root, &[&pci], &[], &host(), &mut Vec::new())[0];
        assert!(carve_out.integrated, "without the maker, 4 GB beside 16 GB of GTT reads as an APU");

        fs::write(card.join("mem_info_vram_vendor"), "samsung\n").unwrap();
        let own = &probe(&root, &[&pci], &[], &host(), &mut Vec::new())[0];
        assert!(!own.integrated, "{:?}", own.warnings);
        assert_eq!((own.memory.shared_mib, own.memory.usable_mib), (0, discrete_usable_mib(4096)));
    }

    #[test]
    fn kfd_location_decodes_to_a_pci_address() {
        // bus 0x03, device 0, function 0
        assert_eq!(kfd_address(0, 0x300), "0000:03:00.0");
        // bus 0xc3, device 0, function 0 (a typical APU iGPU)
        assert_eq!(kfd_address(0, 0xc300), "0000:c3:00.0");
        assert_eq!(kfd_address(1, (0x05 << 8) | (0x02 << 3) | 1), "0001:05:02.1");
    }
}
