//! Eligibility: can this engine build run on this device, and can this profile run there?
//! Each check answers with the reason a user reads in `lucebox plan`.

use lucebox_engine::variants::{Backend, EngineKind, Variant};
use lucebox_engine::version;

use super::profile::Profile;
use crate::hardware::{Device, Host, Vendor};

/// Why a variant can run on a device (`Ok`) or cannot (`Err`), in words.
pub fn variant_fits(variant: &Variant, device: &Device, host: &Host) -> Result<String, String> {
    if !device.accessible {
        let why = device.warnings.last().map(String::as_str).unwrap_or("the device is not usable from here");
        return Err(format!("device not usable: {why}"));
    }
    let backend_ok = matches!(
        (variant.backend, device.vendor),
        (Backend::Cuda, Vendor::Nvidia)
            | (Backend::Rocm, Vendor::Amd)
            | (Backend::Vulkan, Vendor::Nvidia | Vendor::Amd | Vendor::Intel)
            | (Backend::Cpu, Vendor::Cpu)
    );
    if !backend_ok {
        return Err(format!(
            "{} build does not drive {} devices",
            variant.backend.as_str(),
            device.vendor.as_str()
        ));
    }
    let arch_note = match device.arch.as_deref() {
        Some(arch) => arch_fits(variant, arch)?,
        // A portable build (Vulkan's SPIR-V) needs no target: a card newer than our table still runs.
        None if variant.archs.iter().any(|a| a == "*") => {
            format!("target unknown; the {} build runs on any", variant.name)
        }
        None => return Err("device target unknown".to_string()),
    };
    if let Some(need) = &variant.min_driver {
        let have = device.driver.version.as_deref().or(host.kernel.as_deref());
        match have.and_then(|h| version::at_least(h, need)) {
            Some(true) => {}
            Some(false) => {
                return Err(format!(
                    "driver {} older than {need} required by the {} build{}",
                    have.unwrap_or("?"),
                    variant.name,
                    variant.toolkit.as_deref().map(|t| format!(" ({t})")).unwrap_or_default()
                ))
            }
            None => {
                return Err(format!(
                    "driver version unknown; the {} build needs {need} or newer",
                    variant.name
                ))
            }
        }
    }
    for flag in &variant.cpu_flags {
        if !host.cpu_flags.iter().any(|f| f == flag) {
            return Err(format!("CPU lacks {flag}, which the {} build needs", variant.name));
        }
    }
    Ok(arch_note)
}

/// Exact target match; a newer NVIDIA target also runs a forward-compatible build from PTX.
fn arch_fits(variant: &Variant, arch: &str) -> Result<String, String> {
    if variant.archs.iter().any(|a| a == "*" || a == arch) {
        return Ok(format!("{arch} in the {} build", variant.name));
    }
    if variant.forward_compatible {
        if let (Some(have), Some(newest)) =
            (sm_number(arch), variant.archs.iter().filter_map(|a| sm_number(a)).max())
        {
            if have > newest {
                return Ok(format!(
                    "{arch} newer than the build's targets: runs from PTX (JIT at first start)"
                ));
            }
        }
    }
    Err(format!("arch {arch} not in {} build ({})", variant.name, variant.archs.join(", ")))
}

/// `sm_86` → 86, `sm_120` → 120.
pub fn sm_number(arch: &str) -> Option<u32> {
    arch.strip_prefix("sm_")?.parse().ok()
}

/// A profile's memory figure counts on its expert offload and KV cache types: an engine with no
/// argument for one of them would drop it and need more memory than the profile says.
pub fn engine_keeps_its_size(
    profile: &Profile,
    variant: &Variant,
    engine: Option<&EngineKind>,
) -> Result<(), String> {
    let Some(engine) = engine else { return Ok(()) };
    let e = &profile.spec.engine;
    let sizing = [
        ("cpu_moe_layers", e.cpu_moe_layers.is_some()),
        ("cache_type_k", e.cache_type_k.is_some()),
        ("cache_type_v", e.cache_type_v.is_some()),
    ];
    let placeholder = |key: &str| format!("{{{key}}}");
    let dropped: Vec<&str> = sizing
        .iter()
        .filter(|(key, set)| {
            *set && !engine.optional.contains_key(*key)
                && !engine.args.iter().any(|a| a.contains(&placeholder(key)))
        })
        .map(|(key, _)| *key)
        .collect();
    if dropped.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{} has no {} setting, which the profile's {} MiB counts on",
        variant.engine,
        dropped.join(" or "),
        profile.spec.requirements.min_usable_mib
    ))
}

/// Why a profile can run with this variant on this device, or cannot.
pub fn profile_fits(profile: &Profile, variant: &Variant, device: &Device) -> Result<(), String> {
    let req = &profile.spec.requirements;
    if !req.backends.contains(&variant.backend) {
        let names: Vec<_> = req.backends.iter().map(|b| b.as_str()).collect();
        return Err(format!("profile runs on {}, not {}", names.join("/"), variant.backend.as_str()));
    }
    if !req.engines.iter().any(|e| e == &variant.engine) {
        return Err(format!(
            "profile needs {}, the {} build is {}",
            req.engines.join(" or "),
            variant.name,
            variant.engine
        ));
    }
    let arch = device.arch.as_deref().unwrap_or("?");
    if !req.archs.is_empty() && !req.archs.iter().any(|a| a == arch) {
        return Err(format!("profile is for {}, device is {arch}", req.archs.join(", ")));
    }
    if let Some(min) = &req.min_compute {
        if device.vendor == crate::hardware::Vendor::Nvidia {
            match (sm_number(arch), sm_number(min)) {
                (Some(have), Some(need)) if have < need => {
                    return Err(format!("profile needs {min} or newer, device is {arch}"))
                }
                (None, _) => return Err(format!("profile needs {min} or newer, device target unknown")),
                _ => {}
            }
        }
    }
    if let Some(unified) = req.unified_memory {
        if unified != device.integrated {
            return Err(if unified {
                "profile needs unified memory (an integrated GPU)".to_string()
            } else {
                "profile is for discrete GPUs".to_string()
            });
        }
    }
    let usable = device.memory.usable_mib;
    if usable < req.min_usable_mib {
        return Err(format!("needs ≥ {} MiB usable, device has {usable}", req.min_usable_mib));
    }
    Ok(())
}
