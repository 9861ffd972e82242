//! NVIDIA GPUs. Sources, best first: NVML (model, memory, driver, compute capability, fans,
//! temperature, power), the CUDA driver (compute capability and memory when NVML is missing),
//! then PCI sysfs plus `/proc/driver/nvidia` with the spec table (memory expected, not measured).
//!
//! Under WSL2 (and Docker Desktop on Windows) a GPU is not on the Linux PCI bus at all: Windows
//! lends it through the paravirtual `/dev/dxg`, and NVML and CUDA (the Windows driver's
//! libraries) are the only ones that know it. Such a GPU is built from NVML alone.

use std::path::PathBuf;

use super::pci::{normalise_address, PciDevice};
use super::units::{power_limit_w, watts_from_milliwatts};
use super::{
    pci_ids, sysfs, DetectOptions, Device, Driver, Host, Memory, Source, SysRoot, Telemetry, Vendor,
};

const NVML_LIBRARY: &str = "libnvidia-ml.so.1";
/// WSL2's GPU paravirtualisation device: present where Windows shares its GPUs with Linux.
pub const WSL_GPU_NODE: &str = "/dev/dxg";

#[derive(Debug, Default)]
pub struct NvidiaFound {
    pub devices: Vec<Device>,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
}

/// What NVML reports for one GPU.
#[derive(Debug, Clone, Default)]
struct NvmlGpu {
    address: String,
    /// `(vendor, device)` from NVML's PCI info.
    pci_id: Option<(u16, u16)>,
    name: Option<String>,
    uuid: Option<String>,
    memory_total_mib: Option<u64>,
    compute_capability: Option<(u32, u32)>,
    temperature_c: Option<f64>,
    power_w: Option<f64>,
    power_cap_w: Option<f64>,
    fans: Option<u32>,
    fan_speed_pct: Option<f64>,
}

impl NvmlGpu {
    /// The readings NVML gave (it has no sysfs or hwmon paths).
    fn telemetry(&self) -> Telemetry {
        Telemetry {
            temperature_c: self.temperature_c,
            power_w: self.power_w,
            power_cap_w: self.power_cap_w,
            fans: self.fans,
            fan_speed_pct: self.fan_speed_pct,
            ..Telemetry::default()
        }
    }
}

#[derive(Debug, Default)]
struct NvmlReport {
    driver_version: Option<String>,
    cuda_version: Option<String>,
    gpus: Vec<NvmlGpu>,
}

/// What the CUDA driver reports for one GPU.
#[derive(Debug, Clone)]
struct CudaGpu {
    address: String,
    name: String,
    memory_total_mib: u64,
    compute_capability: (u32, u32),
}

/// The NVIDIA GPUs on `pci`, and under WSL2 (`under_wsl`: `/dev/dxg` exists) the ones NVML names
/// that are on no PCI bus here.
pub fn probe(
    root: &SysRoot,
    pci: &[&PciDevice],
    under_wsl: bool,
    options: &DetectOptions,
    host: &Host,
    warnings: &mut Vec<String>,
) -> NvidiaFound {
    let library = nvml_library(root, options);
    let library_probed = library.is_some() || root.is_live();
    let nvml = match library {
        Some(lib) => match probe_nvml(&lib) {
            Ok(report) => Some(report),
            Err(e) => {
                warnings.push(format!("nvml: {e}"));
                None
            }
        },
        None => None,
    };
    // The CUDA driver is only consulted on the live machine when NVML gave nothing.
    let cuda = if nvml.is_none() && root.is_live() {
        match probe_cuda() {
            Ok(gpus) => gpus,
            Err(e) => {
                warnings.push(format!("cuda: {e}"));
                Vec::new()
            }
        }
    } else {
        Vec::new()
    };
    let driver_version =
        nvml.as_ref().and_then(|n| n.driver_version.clone()).or_else(|| host.drivers.nvidia.clone());
    let mut devices: Vec<Device> = pci
        .iter()
        .map(|p| {
            let from_nvml = nvml.as_ref().and_then(|n| n.gpus.iter().find(|g| g.address == p.address));
            let from_cuda = cuda.iter().find(|g| g.address == p.address);
            let library = match (from_nvml.is_some() || from_cuda.is_some(), library_probed) {
                (true, _) => Library::Answered,
                (false, true) => Library::Silent,
                (false, false) => Library::NotProbed,
            };
            build_device(root, p, from_nvml, from_cuda, library, driver_version.as_deref(), host)
        })
        .collect();
    if under_wsl {
        let lent = nvml.iter().flat_map(|n| &n.gpus).filter(|g| !pci.iter().any(|p| p.address == g.address));
        devices.extend(lent.map(|g| lent_by_windows(g, driver_version.as_deref())));
    }
    NvidiaFound { devices, driver_version, cuda_version: nvml.and_then(|n| n.cuda_version) }
}

fn nvml_library(root: &SysRoot, options: &DetectOptions) -> Option<PathBuf> {
    match &options.nvml_lib {
        Some(path) => Some(path.clone()),
        // A captured tree must not be mixed with the real machine's GPUs.
        None if root.is_live() => Some(PathBuf::from(NVML_LIBRARY)),
        None => None,
    }
}

fn probe_nvml(lib: &std::path::Path) -> Result<NvmlReport, String> {
    use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
    use nvml_wrapper::{cuda_driver_version_major, cuda_driver_version_minor, Nvml};

    let nvml = Nvml::builder()
        .lib_path(lib.as_os_str())
        .init()
        .map_err(|e| format!("cannot initialise {} ({e}); GPU facts come from PCI only", lib.display()))?;
    let driver_version = nvml.sys_driver_version().ok();
    let cuda_version = nvml
        .sys_cuda_driver_version()
        .ok()
        .map(|v| format!("{}.{}", cuda_driver_version_major(v), cuda_driver_version_minor(v)));
    let count = nvml.device_count().map_err(|e| format!("device count: {e}"))?;
    let mut gpus = Vec::new();
    for index in 0..count {
        let Ok(device) = nvml.device_by_index(index) else { continue };
        let Ok(pci) = device.pci_info() else { continue };
        let fans = device.num_fans().ok();
        gpus.push(NvmlGpu {
            address: normalise_address(&pci.bus_id),
            // NVML packs the device id above the vendor id.
            pci_id: Some(((pci.pci_device_id & 0xffff) as u16, (pci.pci_device_id >> 16) as u16)),
            name: device.name().ok(),
            uuid: device.uuid().ok(),
            memory_total_mib: device.memory_info().ok().map(|m| sysfs::bytes_to_mib(m.total)),
            compute_capability: device
                .cuda_compute_capability()
                .ok()
                .map(|c| (c.major as u32, c.minor as u32)),
            temperature_c: device.temperature(TemperatureSensor::Gpu).ok().map(f64::from),
            power_w: device.power_usage().ok().map(|mw| watts_from_milliwatts(f64::from(mw))),
            power_cap_w: device
                .enforced_power_limit()
                .ok()
                .and_then(|mw| power_limit_w(watts_from_milliwatts(f64::from(mw)))),
            fans,
            fan_speed_pct: fans.filter(|n| *n > 0).and_then(|_| device.fan_speed(0).ok()).map(f64::from),
        });
    }
    Ok(NvmlReport { driver_version, cuda_version, gpus })
}

/// Asks the CUDA driver through cudarc. cudarc panics when libcuda or a symbol is missing, so
/// presence is checked first and any panic is contained and reported.
fn probe_cuda() -> Result<Vec<CudaGpu>, String> {
    // SAFETY: only tries to dlopen the library by its usual names.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("libcuda.so not found: the NVIDIA driver's CUDA library is not installed".to_string());
    }
    std::panic::catch_unwind(cuda_devices)
        .map_err(|_| "the CUDA driver library is incomplete (a symbol is missing)".to_string())?
}

fn cuda_devices() -> Result<Vec<CudaGpu>, String> {
    use cudarc::driver::result::{device, init};
    use cudarc::driver::sys::CUdevice_attribute as Attr;
    init().map_err(|e| format!("cuInit: {e:?}"))?;
    let count = device::get_count().map_err(|e| format!("device count: {e:?}"))?;
    let mut gpus = Vec::new();
    for ordinal in 0..count {
        let dev = device::get(ordinal).map_err(|e| format!("device {ordinal}: {e:?}"))?;
        // SAFETY: `dev` came from cuDeviceGet above.
        let attr = |a| unsafe { device::get_attribute(dev, a) }.unwrap_or(-1);
        let (domain, bus, slot) = (
            attr(Attr::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
            attr(Attr::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
            attr(Attr::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID),
        );
        gpus.push(CudaGpu {
            address: format!("{domain:04x}:{bus:02x}:{slot:02x}.0"),
            name: device::get_name(dev).unwrap_or_default(),
            // SAFETY: as above.
            memory_total_mib: unsafe { device::total_mem(dev) }
                .map(|b| sysfs::bytes_to_mib(b as u64))
                .unwrap_or(0),
            compute_capability: (
                attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).max(0) as u32,
                attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR).max(0) as u32,
            ),
        });
    }
    Ok(gpus)
}

fn build_device(
    root: &SysRoot,
    pci: &PciDevice,
    nvml: Option<&NvmlGpu>,
    cuda: Option<&CudaGpu>,
    library: Library,
    driver_version: Option<&str>,
    host: &Host,
) -> Device {
    let known = pci_ids::lookup(pci.vendor_id, pci.device_id);
    let proc_info = read_proc_information(root, &pci.address);
    let mut sources = vec![Source::Pci];
    let mut warnings = Vec::new();
    if proc_info.is_some() {
        sources.push(Source::ProcNvidia);
    }
    if nvml.is_some() {
        sources.push(Source::Nvml);
    }
    if cuda.is_some() {
        sources.push(Source::Cuda);
    }

    // Our table's short names keep model names stable across driver versions.
    let model = known
        .map(|k| k.model.to_string())
        .or_else(|| nvml.and_then(|g| g.name.clone()).map(short_name))
        .or_else(|| cuda.map(|g| short_name(g.name.clone())))
        .or_else(|| proc_info.as_ref().and_then(|i| i.model.clone()).map(short_name))
        .unwrap_or_else(|| format!("NVIDIA GPU {}", pci.pci_id()));
    let capability = nvml.and_then(|g| g.compute_capability).or_else(|| cuda.map(|g| g.compute_capability));
    let arch = capability
        .map(|(major, minor)| pci_ids::sm_arch(major, minor))
        .or_else(|| known.map(|k| k.arch.to_string()));
    if arch.is_none() {
        warnings.push(
            "compute capability unknown: no NVML or CUDA driver answered and the card is not in our table"
                .into(),
        );
    }
    let measured = nvml.and_then(|g| g.memory_total_mib).or_else(|| cuda.map(|g| g.memory_total_mib));
    let dedicated = measured.or_else(|| known.map(|k| k.memory_mib)).unwrap_or(0);
    if measured.is_none() {
        warnings.push(if dedicated > 0 {
            format!("memory {dedicated} MiB is the card's specification, not measured (NVML unavailable)")
        } else {
            "memory unknown (NVML unavailable and the card is not in our table)".to_string()
        });
    }
    let accessible = nvidia_accessible(root, pci, library, host, &mut warnings);
    Device {
        id: pci.address.clone(),
        vendor: Vendor::Nvidia,
        model,
        pci_id: Some(pci.pci_id()),
        arch,
        integrated: false,
        memory: Memory::discrete(dedicated, measured.is_some()),
        driver: Driver {
            name: pci.driver.clone().or_else(|| Some("nvidia".to_string())),
            version: driver_version.map(str::to_string),
        },
        sources,
        accessible,
        warnings,
        uid: nvml.and_then(|g| g.uuid.clone()).or_else(|| proc_info.and_then(|i| i.uuid)),
        telemetry: Telemetry {
            sysfs_path: Some(pci.sysfs_dir.display().to_string()),
            ..nvml.map(NvmlGpu::telemetry).unwrap_or_default()
        },
        rocm_index: None,
    }
}

/// A GPU Windows lends to WSL2 through `/dev/dxg`: what NVML says is all there is. Its id is
/// the bus address Windows gives it; the engine reaches it through CUDA by its UUID. Its fans
/// and clocks stay with the Windows driver, so no fan loop drives it.
fn lent_by_windows(gpu: &NvmlGpu, driver_version: Option<&str>) -> Device {
    let known = gpu.pci_id.and_then(|(vendor, device)| pci_ids::lookup(vendor, device));
    let model = known
        .map(|k| k.model.to_string())
        .or_else(|| gpu.name.clone().map(short_name))
        .unwrap_or_else(|| "NVIDIA GPU".to_string());
    let arch = gpu
        .compute_capability
        .map(|(major, minor)| pci_ids::sm_arch(major, minor))
        .or_else(|| known.map(|k| k.arch.to_string()));
    let dedicated = gpu.memory_total_mib.or_else(|| known.map(|k| k.memory_mib)).unwrap_or(0);
    Device {
        id: gpu.address.clone(),
        vendor: Vendor::Nvidia,
        model,
        pci_id: gpu.pci_id.map(|(vendor, device)| format!("{vendor:04x}:{device:04x}")),
        arch,
        integrated: false,
        memory: Memory::discrete(dedicated, gpu.memory_total_mib.is_some()),
        driver: Driver { name: Some("dxgkrnl".to_string()), version: driver_version.map(str::to_string) },
        sources: vec![Source::Nvml, Source::WslDxg],
        accessible: true,
        warnings: vec![format!(
            "lent by Windows through {WSL_GPU_NODE} (WSL2): the Windows driver keeps its fans and clocks"
        )],
        uid: gpu.uuid.clone(),
        telemetry: gpu.telemetry(),
        rocm_index: None,
    }
}

/// Whether a driver library (NVML or CUDA) told us about a GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Library {
    Answered,
    /// Asked, and it failed or did not list this GPU.
    Silent,
    /// Not asked: a captured tree without a library to pair it with.
    NotProbed,
}

/// The engine can use the GPU only with the driver bound, the device nodes present and a
/// driver library answering. Inside a container the usual cause is a missing `--gpus all`.
fn nvidia_accessible(
    root: &SysRoot,
    pci: &PciDevice,
    library: Library,
    host: &Host,
    warnings: &mut Vec<String>,
) -> bool {
    if pci.driver.as_deref().is_some_and(|d| d != "nvidia") {
        warnings.push(format!(
            "bound to the {} driver, not nvidia: the GPU cannot be used for inference",
            pci.driver.as_deref().unwrap_or("?")
        ));
        return false;
    }
    let nodes = root.path("/dev/nvidiactl").exists();
    if nodes && library != Library::Silent {
        return true;
    }
    warnings.push(if host.in_container {
        "the GPU is visible on PCI but not usable in this container: run it with `--gpus all` \
         (needs the NVIDIA Container Toolkit on the host)"
            .to_string()
    } else if !nodes {
        "no /dev/nvidia* device nodes: the NVIDIA driver is not loaded (install the nvidia driver)"
            .to_string()
    } else {
        "the NVIDIA driver library (libnvidia-ml / libcuda) did not answer: install the NVIDIA driver \
         userspace matching the kernel module"
            .to_string()
    });
    false
}

#[derive(Debug, Default)]
struct ProcInformation {
    model: Option<String>,
    uuid: Option<String>,
}

/// `/proc/driver/nvidia/gpus/<address>/information`: `Model:  NVIDIA GeForce RTX 3090`, ...
fn read_proc_information(root: &SysRoot, address: &str) -> Option<ProcInformation> {
    let text =
        sysfs::read_trimmed(&root.path(format!("/proc/driver/nvidia/gpus/{address}/information"))).ok()?;
    Some(parse_proc_information(&text))
}

fn parse_proc_information(text: &str) -> ProcInformation {
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.trim_start_matches(':').trim().to_string())
            .filter(|v| !v.is_empty())
    };
    ProcInformation { model: field("Model"), uuid: field("GPU UUID") }
}

/// `NVIDIA GeForce RTX 3090` → `RTX 3090`.
fn short_name(name: String) -> String {
    let trimmed = name.trim();
    let trimmed = trimmed.strip_prefix("NVIDIA ").unwrap_or(trimmed);
    trimmed.strip_prefix("GeForce ").unwrap_or(trimmed).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names() {
        assert_eq!(short_name("NVIDIA GeForce RTX 3090".into()), "RTX 3090");
        assert_eq!(short_name("NVIDIA RTX A6000".into()), "RTX A6000");
        assert_eq!(short_name("Tesla T4".into()), "Tesla T4");
    }

    #[test]
    fn parses_proc_information() {
        let info = parse_proc_information(
            "Model: \t\t NVIDIA GeForce RTX 3090\nIRQ:   130\nGPU UUID: \t GPU-1234\n",
        );
        assert_eq!(info.model.as_deref(), Some("NVIDIA GeForce RTX 3090"));
        assert_eq!(info.uuid.as_deref(), Some("GPU-1234"));
    }
}
