//! Host facts: CPU, memory, kernel, board identity, driver versions, container or not.
//! On the live machine CPU and memory come from `sysinfo`; below a captured root they are parsed
//! from that tree's procfs (sysinfo reads only the real `/proc`).

use std::collections::BTreeSet;

use super::{sysfs, Board, Device, Drivers, Host, Memory, Source, SysRoot, Vendor};

/// CPU features the CPU engine build cares about (llama.cpp's default x86 build needs AVX2).
const INTERESTING_FLAGS: &[&str] = &["avx", "avx2", "fma", "f16c", "avx512f", "avx512_bf16", "amx_tile"];

pub fn probe(root: &SysRoot, warnings: &mut Vec<String>) -> Host {
    let cpuinfo = sysfs::read_trimmed(&root.path("/proc/cpuinfo"));
    let cpu = match &cpuinfo {
        Ok(text) => parse_cpuinfo(text),
        Err(e) => {
            warnings.push(format!("host: {e}"));
            CpuInfo::default()
        }
    };
    let live = if root.is_live() { live_cpu_and_memory(&cpu) } else { None };
    let (cpu_model, cores, threads, memory_mib) = if let Some(live) = live {
        live
    } else {
        let memory = sysfs::read_trimmed(&root.path("/proc/meminfo"))
            .ok()
            .and_then(|t| sysfs::parse_meminfo_total_mib(&t));
        if memory.is_none() {
            warnings.push("host: /proc/meminfo has no readable MemTotal".to_string());
        }
        (cpu.model.clone(), cpu.cores, cpu.threads, memory.unwrap_or(0))
    };
    Host {
        cpu_model: if cpu_model.is_empty() { "unknown CPU".to_string() } else { cpu_model },
        cores: cores.max(1),
        threads: threads.max(cores).max(1),
        memory_mib,
        in_container: in_container(root),
        kernel: sysfs::read_trimmed(&root.path("/proc/sys/kernel/osrelease")).ok(),
        board: Board {
            vendor: dmi(root, "board_vendor"),
            name: dmi(root, "board_name"),
            product: dmi(root, "product_name"),
        },
        drivers: Drivers {
            nvidia: sysfs::read_trimmed(&root.path("/proc/driver/nvidia/version"))
                .ok()
                .and_then(|t| parse_nvidia_proc_version(&t)),
            amdgpu: amdgpu_version(root),
            cuda: None,
        },
        cpu_arch: cpu.arch,
        cpu_flags: cpu.flags,
    }
}

/// sysinfo's view of the live machine; `None` when it cannot read it (procfs parsing takes over).
fn live_cpu_and_memory(cpu: &CpuInfo) -> Option<(String, u32, u32, u64)> {
    use sysinfo::{CpuRefreshKind, MemoryRefreshKind, RefreshKind, System};
    let system = System::new_with_specifics(
        RefreshKind::nothing()
            .with_cpu(CpuRefreshKind::nothing())
            .with_memory(MemoryRefreshKind::nothing().with_ram()),
    )
    .ok()?;
    let model = system
        .cpus()
        .first()
        .map(|c| c.brand().trim().to_string())
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| cpu.model.clone());
    let threads = system.cpus().len() as u32;
    let cores = System::physical_core_count().map(|c| c as u32).unwrap_or(cpu.cores);
    Some((model, cores, threads, system.total_memory() / (1024 * 1024)))
}

#[derive(Debug, Default, PartialEq)]
pub struct CpuInfo {
    pub model: String,
    pub cores: u32,
    pub threads: u32,
    pub arch: String,
    pub flags: Vec<String>,
}

/// Parses `/proc/cpuinfo` (x86 and Arm layouts).
pub fn parse_cpuinfo(text: &str) -> CpuInfo {
    let mut info = CpuInfo::default();
    let mut cores = BTreeSet::new();
    let mut physical = "0".to_string();
    let mut is_x86 = false;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else { continue };
        let (key, value) = (key.trim(), value.trim());
        match key {
            "processor" => info.threads += 1,
            "model name" if info.model.is_empty() => info.model = value.to_string(),
            "vendor_id" => is_x86 = true,
            "physical id" => physical = value.to_string(),
            "core id" => {
                cores.insert((physical.clone(), value.to_string()));
            }
            "flags" if info.flags.is_empty() => {
                info.flags = value
                    .split_whitespace()
                    .filter(|f| INTERESTING_FLAGS.contains(f))
                    .map(str::to_string)
                    .collect();
            }
            _ => {}
        }
    }
    info.cores = if cores.is_empty() { info.threads } else { cores.len() as u32 };
    info.arch = if is_x86 {
        "x86_64"
    } else if info.threads > 0 {
        "aarch64"
    } else {
        ""
    }
    .to_string();
    info
}

/// `NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 ...` → `550.54.14`.
/// The open modules (the default since 560) put the architecture after the name:
/// `NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ...`.
pub fn parse_nvidia_proc_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    let after = line.split("Kernel Module").nth(1)?;
    let is_version = |w: &&str| w.contains('.') && w.chars().all(|c| c.is_ascii_digit() || c == '.');
    after.split_whitespace().find(is_version).map(str::to_string)
}

fn amdgpu_version(root: &SysRoot) -> Option<String> {
    // An out-of-tree (DKMS) amdgpu has a module version; the in-kernel driver is the kernel's.
    if let Ok(version) = sysfs::read_trimmed(&root.path("/sys/module/amdgpu/version")) {
        return Some(version);
    }
    if root.path("/sys/module/amdgpu").is_dir() {
        return sysfs::read_trimmed(&root.path("/proc/sys/kernel/osrelease"))
            .ok()
            .map(|k| format!("in-kernel {k}"));
    }
    None
}

fn dmi(root: &SysRoot, key: &str) -> Option<String> {
    sysfs::read_trimmed(&root.path(format!("/sys/class/dmi/id/{key}"))).ok().filter(|v| !v.is_empty())
}

/// Docker leaves `/.dockerenv`, Podman `/run/.containerenv`; cgroup v1 paths name the runtime.
fn in_container(root: &SysRoot) -> bool {
    if root.path("/.dockerenv").exists() || root.path("/run/.containerenv").exists() {
        return true;
    }
    sysfs::read_trimmed(&root.path("/proc/1/cgroup"))
        .map(|t| ["docker", "kubepods", "containerd", "libpod", "lxc"].iter().any(|k| t.contains(k)))
        .unwrap_or(false)
}

/// The CPU as a device: the fallback every box has.
pub fn cpu_device(host: &Host) -> Device {
    let mut warnings = Vec::new();
    if host.cpu_arch == "x86_64" && !host.cpu_flags.iter().any(|f| f == "avx2") {
        warnings.push("CPU lacks AVX2: the CPU engine build will run slowly or not at all".to_string());
    }
    let usable = host.memory_mib.saturating_sub(super::UNIFIED_OS_RESERVE_MIB).max(host.memory_mib / 2);
    Device {
        arch: (!host.cpu_arch.is_empty()).then(|| host.cpu_arch.clone()),
        integrated: true,
        memory: Memory { dedicated_mib: 0, shared_mib: host.memory_mib, usable_mib: usable, measured: true },
        sources: vec![Source::Procfs],
        warnings,
        ..Device::new("cpu", Vendor::Cpu, &host.cpu_model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_x86_cpuinfo() {
        let text = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD Ryzen 9 7950X\nphysical id\t: 0\ncore id\t: 0\nflags\t\t: fpu avx avx2 fma\n\nprocessor\t: 1\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD Ryzen 9 7950X\nphysical id\t: 0\ncore id\t: 0\n\nprocessor\t: 2\nphysical id\t: 0\ncore id\t: 1\n";
        let info = parse_cpuinfo(text);
        assert_eq!(info.model, "AMD Ryzen 9 7950X");
        assert_eq!(info.threads, 3);
        assert_eq!(info.cores, 2);
        assert_eq!(info.arch, "x86_64");
        assert_eq!(info.flags, vec!["avx", "avx2", "fma"]);
    }

    #[test]
    fn parses_nvidia_driver_version() {
        let text = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\nGCC version:  gcc version 12.2.0";
        assert_eq!(parse_nvidia_proc_version(text).as_deref(), Some("550.54.14"));
        // As an H200 with the open module showed it (tests/fixtures/hosts/h200-vm).
        let open = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)  \nGCC version:  gcc version 15.3.0 (GCC)";
        assert_eq!(parse_nvidia_proc_version(open).as_deref(), Some("580.159.04"));
        assert_eq!(parse_nvidia_proc_version("garbage"), None);
        assert_eq!(parse_nvidia_proc_version("NVRM version: NVIDIA UNIX Kernel Module  <bad>"), None);
    }
}
