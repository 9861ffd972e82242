//! Cards we know by PCI id: marketing name, exact compute target and memory as specified.
//! Used when no driver probe answers (the NVIDIA driver missing, a container without the GPU),
//! and to name cards consistently. gfx1200 and gfx1201 are different targets: map by id, never
//! by family.

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KnownCard {
    pub vendor: u16,
    pub device: u16,
    pub model: &'static str,
    pub arch: &'static str,
    /// Memory as the driver reports it on this card (MiB), or the carve-out of an APU; where one
    /// id covers two memory sizes, the smaller.
    pub memory_mib: u64,
    pub integrated: bool,
    /// The larger version's memory (MiB) where one id covers two sizes (the Arc A770: 8 or 16 GB).
    pub larger_memory_mib: Option<u64>,
}

const fn card(
    vendor: u16,
    device: u16,
    model: &'static str,
    arch: &'static str,
    memory_mib: u64,
) -> KnownCard {
    KnownCard { vendor, device, model, arch, memory_mib, integrated: false, larger_memory_mib: None }
}

const fn apu(device: u16, model: &'static str, arch: &'static str) -> KnownCard {
    KnownCard {
        vendor: 0x1002,
        device,
        model,
        arch,
        memory_mib: 0,
        integrated: true,
        larger_memory_mib: None,
    }
}

/// An Intel Arc card sold in two memory sizes under one id.
const fn card_of_two_sizes(
    device: u16,
    model: &'static str,
    arch: &'static str,
    smaller_mib: u64,
    larger_mib: u64,
) -> KnownCard {
    KnownCard {
        vendor: 0x8086,
        device,
        model,
        arch,
        memory_mib: smaller_mib,
        integrated: false,
        larger_memory_mib: Some(larger_mib),
    }
}

pub const KNOWN_CARDS: &[KnownCard] = &[
    // NVIDIA Turing
    card(0x10de, 0x1e04, "RTX 2080 Ti", "sm_75", 11264),
    card(0x10de, 0x1e07, "RTX 2080 Ti", "sm_75", 11264),
    card(0x10de, 0x1e90, "RTX 2080 Laptop GPU", "sm_75", 8192),
    card(0x10de, 0x1ed0, "RTX 2080 Super Laptop GPU", "sm_75", 8192),
    // NVIDIA Ampere
    card(0x10de, 0x2204, "RTX 3090", "sm_86", 24576),
    card(0x10de, 0x2203, "RTX 3090 Ti", "sm_86", 24564),
    card(0x10de, 0x2420, "RTX 3080 Ti Laptop GPU", "sm_86", 16384),
    // NVIDIA Ada
    card(0x10de, 0x2684, "RTX 4090", "sm_89", 24564),
    card(0x10de, 0x2717, "RTX 4090 Laptop GPU", "sm_89", 16376),
    card(0x10de, 0x2757, "RTX 4090 Laptop GPU", "sm_89", 16376),
    // NVIDIA Blackwell
    card(0x10de, 0x2b85, "RTX 5090", "sm_120", 32607),
    card(0x10de, 0x2c58, "RTX 5090 Laptop GPU", "sm_120", 24463),
    // AMD RDNA4 (Navi 48 = gfx1201, Navi 44 = gfx1200)
    card(0x1002, 0x7551, "Radeon AI PRO R9700", "gfx1201", 32624),
    card(0x1002, 0x7550, "Radeon RX 9070 XT", "gfx1201", 16304),
    card(0x1002, 0x7590, "Radeon RX 9060 XT", "gfx1200", 16304),
    // AMD RDNA3
    card(0x1002, 0x744c, "Radeon RX 7900 XTX", "gfx1100", 24560),
    // Intel Arc: Alchemist (DG2, Xe-HPG) and Battlemage (Xe2-HPG), served by the Vulkan build
    card_of_two_sizes(0x56a0, "Arc A770", "xe-hpg", 8192, 16384),
    card(0x8086, 0x56a1, "Arc A750", "xe-hpg", 8192),
    card(0x8086, 0x56a5, "Arc A380", "xe-hpg", 6144),
    card(0x8086, 0xe20b, "Arc B580", "xe2-hpg", 12288),
    card(0x8086, 0xe20c, "Arc B570", "xe2-hpg", 10240),
    card(0x8086, 0xe211, "Arc Pro B60", "xe2-hpg", 24576),
    card(0x8086, 0xe212, "Arc Pro B50", "xe2-hpg", 16384),
    // AMD APUs: memory is a BIOS carve-out plus GTT, measured at run time.
    apu(0x1586, "Radeon 8060S", "gfx1151"),
    apu(0x150e, "Radeon 890M", "gfx1150"),
];

pub fn lookup(vendor: u16, device: u16) -> Option<&'static KnownCard> {
    KNOWN_CARDS.iter().find(|c| c.vendor == vendor && c.device == device)
}

/// NVIDIA compute capability → target name (`8.6` → `sm_86`).
pub fn sm_arch(major: u32, minor: u32) -> String {
    format!("sm_{major}{minor}")
}

/// KFD `gfx_target_version` (major*10000 + minor*100 + stepping) → `gfx1201`. Minor and stepping
/// are hex digits in the target name (90010 → gfx90a).
pub fn gfx_arch(version: u64) -> Option<String> {
    let major = version / 10000;
    let minor = (version / 100) % 100;
    let stepping = version % 100;
    if major == 0 || minor > 15 || stepping > 15 {
        return None;
    }
    Some(format!("gfx{major}{minor:x}{stepping:x}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_gfx_targets() {
        assert_eq!(gfx_arch(120001).as_deref(), Some("gfx1201"));
        assert_eq!(gfx_arch(120000).as_deref(), Some("gfx1200"));
        assert_eq!(gfx_arch(110501).as_deref(), Some("gfx1151"));
        assert_eq!(gfx_arch(90010).as_deref(), Some("gfx90a"));
        assert_eq!(gfx_arch(0), None);
        assert_eq!(gfx_arch(120099), None);
    }

    #[test]
    fn navi48_and_navi44_are_different_targets() {
        assert_eq!(lookup(0x1002, 0x7551).unwrap().arch, "gfx1201");
        assert_eq!(lookup(0x1002, 0x7590).unwrap().arch, "gfx1200");
    }

    #[test]
    fn table_has_no_duplicate_ids() {
        for (i, a) in KNOWN_CARDS.iter().enumerate() {
            for b in &KNOWN_CARDS[i + 1..] {
                assert!(!(a.vendor == b.vendor && a.device == b.device), "{a:?} twice");
            }
        }
    }
}
