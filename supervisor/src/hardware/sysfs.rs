//! Parsers for the small text files of sysfs and procfs. Each returns a message that names the
//! file on failure; callers turn it into a warning. Kept pure so they can be property-tested.

use std::fs;
use std::path::Path;

pub fn read_trimmed(path: &Path) -> Result<String, String> {
    let raw = fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let text = String::from_utf8(raw).map_err(|_| format!("{}: not UTF-8", path.display()))?;
    Ok(text.trim().to_string())
}

pub fn read_hex_u16(path: &Path) -> Result<u16, String> {
    let text = read_trimmed(path)?;
    parse_hex(&text).and_then(|v| u16::try_from(v).ok()).ok_or_else(|| bad(path, &text, "a 16-bit hex id"))
}

pub fn read_hex_u32(path: &Path) -> Result<u32, String> {
    let text = read_trimmed(path)?;
    parse_hex(&text).ok_or_else(|| bad(path, &text, "a hex number"))
}

pub fn read_u64(path: &Path) -> Result<u64, String> {
    let text = read_trimmed(path)?;
    text.parse::<u64>().map_err(|_| bad(path, &text, "an unsigned integer"))
}

/// `0x10de` or `10de`.
pub fn parse_hex(text: &str) -> Option<u32> {
    let digits = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")).unwrap_or(text);
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    u32::from_str_radix(digits, 16).ok()
}

/// `0x00000000fb000000` (64-bit, as sysfs prints addresses) or without the prefix.
pub fn parse_hex_u64(text: &str) -> Option<u64> {
    let digits = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")).unwrap_or(text);
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

/// Size in bytes of region `bar` from a PCI device's `resource` file, one `start end flags` line
/// of hex per region: 0 for a region the device does not decode (all three zero).
pub fn parse_pci_region_size(text: &str, bar: usize) -> Option<u64> {
    let mut fields = text.lines().nth(bar)?.split_whitespace().map(parse_hex_u64);
    let (start, end, _flags) = (fields.next()??, fields.next()??, fields.next()??);
    if fields.next().is_some() {
        return None;
    }
    if start == 0 && end == 0 {
        return Some(0);
    }
    end.checked_sub(start)?.checked_add(1)
}

/// `key value` lines as in KFD `properties` files; the first value of a key wins.
pub fn parse_properties(text: &str) -> Vec<(&str, &str)> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            Some((parts.next()?, parts.next()?))
        })
        .collect()
}

pub fn property_u64(props: &[(&str, &str)], key: &str) -> Option<u64> {
    props.iter().find(|(k, _)| *k == key).and_then(|(_, v)| v.parse().ok())
}

/// `MemTotal:  131841212 kB` → 128751 (MiB).
pub fn parse_meminfo_total_mib(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut parts = line.split_whitespace().skip(1);
    let value: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") | None => Some(value / 1024),
        _ => None,
    }
}

pub fn bytes_to_mib(bytes: u64) -> u64 {
    bytes / (1024 * 1024)
}

fn bad(path: &Path, text: &str, expected: &str) -> String {
    let shown: String = text.chars().take(40).collect();
    format!("{}: expected {expected}, found {shown:?}", path.display())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_hex_ids() {
        assert_eq!(parse_hex("0x10de"), Some(0x10de));
        assert_eq!(parse_hex("0x030000"), Some(0x030000));
        assert_eq!(parse_hex(""), None);
        assert_eq!(parse_hex("0x"), None);
        assert_eq!(parse_hex("zz"), None);
    }

    #[test]
    fn parses_meminfo() {
        let text = "MemTotal:       131841212 kB\nMemFree:  1 kB\n";
        assert_eq!(parse_meminfo_total_mib(text), Some(128751));
        assert_eq!(parse_meminfo_total_mib("MemFree: 1 kB"), None);
        assert_eq!(parse_meminfo_total_mib("MemTotal: lots kB"), None);
    }

    #[test]
    fn parses_kfd_properties() {
        let props = parse_properties("cpu_cores_count 0\ngfx_target_version 120001\nlocation_id 768\n");
        assert_eq!(property_u64(&props, "gfx_target_version"), Some(120001));
        assert_eq!(property_u64(&props, "missing"), None);
    }

    #[test]
    fn parses_pci_region_sizes() {
        // An Arc A770 16 GB with Resizable BAR: BAR 0 (16 MiB registers), BAR 2 resized to 16 GiB.
        let text = "0x0000000082000000 0x0000000082ffffff 0x0000000000040200\n\
                    0x0000000000000000 0x0000000000000000 0x0000000000000000\n\
                    0x0000006000000000 0x00000063ffffffff 0x000000000014220c\n";
        assert_eq!(parse_pci_region_size(text, 0), Some(16 << 20));
        assert_eq!(parse_pci_region_size(text, 1), Some(0));
        assert_eq!(parse_pci_region_size(text, 2), Some(16 << 30));
        assert_eq!(parse_pci_region_size(text, 3), None, "no such line");
        assert_eq!(parse_pci_region_size("0x10 0x0f 0x0\n", 0), None, "ends before it starts");
        assert_eq!(parse_pci_region_size("0x10 0x1f\n", 0), None, "no flags");
        assert_eq!(parse_pci_region_size("16 GiB\n", 0), None);
    }

    proptest! {
        // Whatever bytes a sysfs file holds, the parsers answer or decline; they never panic.
        #[test]
        fn parsers_never_panic(text in "\\PC*") {
            let _ = parse_hex(&text);
            let _ = parse_meminfo_total_mib(&text);
            let _ = parse_pci_region_size(&text, 2);
            let props = parse_properties(&text);
            let _ = property_u64(&props, "gfx_target_version");
        }

        #[test]
        fn hex_round_trips(value in any::<u32>()) {
            prop_assert_eq!(parse_hex(&format!("0x{value:x}")), Some(value));
        }

        #[test]
        fn region_sizes_round_trip(start in 0u64..1 << 48, size in 1u64..1 << 40) {
            let text = format!("0x{start:016x} 0x{:016x} 0x0000000000040200\n", start + size - 1);
            prop_assert_eq!(parse_pci_region_size(&text, 0), Some(size));
        }
    }
}
