//! What is in the box: GPUs (NVIDIA, AMD discrete and integrated), the host CPU and memory, and
//! whether we run in a container. Every probe that fails becomes a warning; detection always
//! returns what it found.
//!
//! Sources, best first: NVML and the CUDA driver for NVIDIA; KFD topology and amdgpu sysfs for
//! AMD, plus ROCm SMI with the cargo feature `rocm`; the xe driver's sysfs for Intel; PCI sysfs
//! (with a table of known cards) for everything. All file reads go through a
//! [`SysRoot`], so a captured tree under `--root` stands in for a real machine.

mod amd;
mod drm;
mod host;
mod intel;
mod nvidia;
mod pci;
mod pci_ids;
#[cfg(feature = "rocm")]
mod rocm_smi;
mod root;
mod sysfs;
pub mod table;
pub(crate) mod units;

use serde::{Deserialize, Serialize};

pub use root::SysRoot;

/// MiB kept back on a discrete card for the runtime context, display and fragmentation.
const DISCRETE_RESERVE_BASE_MIB: u64 = 256;
/// Memory an integrated GPU leaves to the OS, the supervisor and the engine's host side.
const UNIFIED_OS_RESERVE_MIB: u64 = 4096;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Detection {
    pub host: Host,
    pub devices: Vec<Device>,
    /// Problems not tied to one device (a library missing, a file unreadable).
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Host {
    pub cpu_model: String,
    /// Physical cores where known, else logical CPUs.
    pub cores: u32,
    pub threads: u32,
    pub memory_mib: u64,
    pub in_container: bool,
    pub kernel: Option<String>,
    /// DMI board identity, used to pick firmware hooks.
    pub board: Board,
    pub drivers: Drivers,
    /// `x86_64` or `aarch64`.
    pub cpu_arch: String,
    /// CPU features the CPU engine build depends on (avx2, avx512f, ...).
    pub cpu_flags: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Board {
    pub vendor: Option<String>,
    pub name: Option<String>,
    pub product: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Drivers {
    pub nvidia: Option<String>,
    pub amdgpu: Option<String>,
    pub cuda: Option<String>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    Nvidia,
    Amd,
    Intel,
    Cpu,
}

impl Vendor {
    pub fn as_str(self) -> &'static str {
        match self {
            Vendor::Nvidia => "nvidia",
            Vendor::Amd => "amd",
            Vendor::Intel => "intel",
            Vendor::Cpu => "cpu",
        }
    }
}

/// Which probe contributed to a device's facts.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    Pci,
    Nvml,
    Cuda,
    ProcNvidia,
    AmdgpuSysfs,
    Kfd,
    RocmSmi,
    /// The xe driver's per-tile VRAM (Intel).
    XeSysfs,
    Procfs,
    /// Lent by Windows to WSL2 through `/dev/dxg`: not on the Linux PCI bus.
    WslDxg,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Device {
    /// PCI address (`0000:01:00.0`), or `cpu`.
    pub id: String,
    pub vendor: Vendor,
    pub model: String,
    /// `vendor:device` in lowercase hex, e.g. `10de:2204`.
    pub pci_id: Option<String>,
    /// Exact target: `sm_86`, `gfx1201`, `gfx1151`, or `x86_64` for the CPU.
    pub arch: Option<String>,
    pub integrated: bool,
    pub memory: Memory,
    pub driver: Driver,
    pub sources: Vec<Source>,
    /// Whether the engine can use this device from where we run (device nodes, driver library).
    pub accessible: bool,
    pub warnings: Vec<String>,
    /// Stable identity for per-device state (NVML UUID, or PCI address plus serial).
    pub uid: Option<String>,
    pub telemetry: Telemetry,
    /// AMD: the GPU's place among the GPU nodes of the KFD topology, which is how ROCm (and so
    /// `ROCR_VISIBLE_DEVICES`) numbers GPUs; not necessarily PCI order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rocm_index: Option<u32>,
}

impl Device {
    /// A GPU Windows lends to WSL2 through `/dev/dxg` (not on Linux's PCI bus).
    pub fn lent_to_wsl(&self) -> bool {
        self.sources.contains(&Source::WslDxg)
    }

    /// A usable device known by its address, vendor and model only; the rest is filled in by
    /// whoever knows more (detection, the `thermal control` CLI, tests).
    pub fn new(id: &str, vendor: Vendor, model: &str) -> Self {
        Self {
            id: id.into(),
            vendor,
            model: model.into(),
            pci_id: None,
            arch: None,
            integrated: false,
            memory: Memory::default(),
            driver: Driver::default(),
            sources: Vec::new(),
            accessible: true,
            warnings: Vec::new(),
            uid: None,
            telemetry: Telemetry::default(),
            rocm_index: None,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Memory {
    /// On-card memory (VRAM), or the carve-out of an integrated GPU.
    pub dedicated_mib: u64,
    /// System memory the GPU can map (GTT on amdgpu).
    pub shared_mib: u64,
    /// What a model can really use: dedicated plus reachable shared memory, less reserves.
    pub usable_mib: u64,
    /// False when the size comes from the card's spec table, not from the driver.
    pub measured: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Driver {
    pub name: Option<String>,
    pub version: Option<String>,
}

impl Memory {
    /// A discrete card's: all of it on the card, less the runtime's reserve.
    pub fn discrete(dedicated_mib: u64, measured: bool) -> Self {
        Self { dedicated_mib, shared_mib: 0, usable_mib: discrete_usable_mib(dedicated_mib), measured }
    }
}

/// Live readings where a probe gives them; absent values were not readable.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Telemetry {
    pub temperature_c: Option<f64>,
    pub power_w: Option<f64>,
    /// The board power limit in force now (hwmon `power1_cap`, NVML's enforced limit): what a
    /// prompt's prefill, which is compute-bound, draws until the device has shown it.
    #[serde(default)]
    pub power_cap_w: Option<f64>,
    pub busy_pct: Option<f64>,
    pub fans: Option<u32>,
    pub fan_speed_pct: Option<f64>,
    /// Directory of the device in sysfs, relative to the root (for thermal actuators).
    pub sysfs_path: Option<String>,
    /// hwmon directory of the device, relative to the root.
    pub hwmon_path: Option<String>,
}

impl Detection {
    /// Nothing found (used when a probe task itself failed).
    pub fn empty() -> Self {
        Detection {
            host: Host {
                cpu_model: "unknown CPU".into(),
                cores: 1,
                threads: 1,
                memory_mib: 0,
                in_container: false,
                kernel: None,
                board: Board::default(),
                drivers: Drivers::default(),
                cpu_arch: String::new(),
                cpu_flags: Vec::new(),
            },
            devices: Vec::new(),
            warnings: vec!["detection failed".into()],
        }
    }
}

/// Options for one detection run.
#[derive(Debug, Clone, Default)]
pub struct DetectOptions {
    /// Explicit NVML library path (a fake in tests). Without it NVML is probed from the
    /// system's library only when reading the real machine (`root` is `/`).
    pub nvml_lib: Option<std::path::PathBuf>,
    /// Ask ROCm SMI (cargo feature `rocm`) for a captured tree too. It always reports the real
    /// machine, so without this it is asked only when reading the real machine.
    pub force_rocm_smi: bool,
}

/// Detects the devices and host facts below `root`.
pub fn detect(root: &SysRoot, options: &DetectOptions) -> Detection {
    let mut warnings = Vec::new();
    let host = host::probe(root, &mut warnings);
    let pci_devices = pci::scan_display_devices(root, &mut warnings);

    let mut devices = Vec::new();
    let nvidia_pci: Vec<_> = pci_devices.iter().filter(|d| d.vendor_id == pci::NVIDIA).collect();
    let mut drivers = host.drivers.clone();
    let under_wsl = root.path(nvidia::WSL_GPU_NODE).exists();
    if !nvidia_pci.is_empty() || under_wsl {
        let found = nvidia::probe(root, &nvidia_pci, under_wsl, options, &host, &mut warnings);
        drivers.nvidia = found.driver_version.clone().or(drivers.nvidia);
        drivers.cuda = found.cuda_version.clone().or(drivers.cuda);
        devices.extend(found.devices);
    }
    let amd_pci: Vec<_> = pci_devices.iter().filter(|d| d.vendor_id == pci::AMD).collect();
    if !amd_pci.is_empty() {
        let library = amd_library(root, options, &amd_pci, &mut warnings);
        devices.extend(amd::probe(root, &amd_pci, &library, &host, &mut warnings));
    }
    let intel_pci: Vec<_> = pci_devices.iter().filter(|d| d.vendor_id == pci::INTEL).collect();
    devices.extend(intel::probe(root, &intel_pci, &host));
    let lent_by_windows = devices.iter().any(Device::lent_to_wsl);
    let probed = [pci::NVIDIA, pci::AMD, pci::INTEL];
    for other in pci_devices.iter().filter(|d| !probed.contains(&d.vendor_id)) {
        // WSL2 shows each lent GPU as Microsoft's paravirtual adapter too; once NVML has named
        // the GPUs behind it, listing the adapter would count them twice.
        if other.vendor_id == pci::MICROSOFT && lent_by_windows {
            continue;
        }
        devices.push(pci::generic_device(other));
    }
    devices.sort_by(|a, b| a.id.cmp(&b.id));
    devices.push(host::cpu_device(&host));
    let host = Host { drivers, ..host };
    Detection { host, devices, warnings }
}

/// What ROCm SMI reports for the AMD GPUs, when the build has it and it may be asked.
#[cfg(feature = "rocm")]
fn amd_library(
    root: &SysRoot,
    options: &DetectOptions,
    amd_pci: &[&pci::PciDevice],
    warnings: &mut Vec<String>,
) -> Vec<amd::LibraryGpu> {
    if !root.is_live() && !options.force_rocm_smi {
        return Vec::new();
    }
    let addresses: Vec<&str> = amd_pci.iter().map(|p| p.address.as_str()).collect();
    rocm_smi::probe(&addresses, warnings)
}

/// Built without the `rocm` feature: amdgpu sysfs and KFD are the only AMD sources.
#[cfg(not(feature = "rocm"))]
fn amd_library(
    _root: &SysRoot,
    _options: &DetectOptions,
    _amd_pci: &[&pci::PciDevice],
    _warnings: &mut Vec<String>,
) -> Vec<amd::LibraryGpu> {
    Vec::new()
}

/// Usable memory of a discrete card: total less a fixed and a proportional reserve.
pub(crate) fn discrete_usable_mib(dedicated_mib: u64) -> u64 {
    dedicated_mib.saturating_sub(DISCRETE_RESERVE_BASE_MIB + dedicated_mib / 100)
}

/// Usable memory of an integrated GPU: carve-out plus the GTT pool it may map, but never more
/// than the host has once the OS keeps its share.
pub(crate) fn unified_usable_mib(dedicated_mib: u64, shared_mib: u64, host_memory_mib: u64) -> u64 {
    let reachable = dedicated_mib + shared_mib;
    let host_cap = (dedicated_mib + host_memory_mib).saturating_sub(UNIFIED_OS_RESERVE_MIB);
    reachable.min(host_cap).saturating_sub(DISCRETE_RESERVE_BASE_MIB)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discrete_reserve_is_small_and_monotonic() {
        assert_eq!(discrete_usable_mib(0), 0);
        assert_eq!(discrete_usable_mib(24576), 24576 - 256 - 245);
        assert!(discrete_usable_mib(32607) > discrete_usable_mib(24576));
    }

    #[test]
    fn unified_memory_is_capped_by_the_host() {
        // 512 MiB carve-out, 120 GiB GTT on a box whose OS sees 127.5 GiB.
        let usable = unified_usable_mib(512, 122_880, 130_560);
        assert_eq!(usable, 512 + 122_880 - 256);
        // A GTT pool larger than RAM (misconfigured) is capped by what the host has.
        let capped = unified_usable_mib(512, 200_000, 130_560);
        assert_eq!(capped, 512 + 130_560 - 4096 - 256);
    }
}
