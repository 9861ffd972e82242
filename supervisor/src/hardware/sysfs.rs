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

    proptest! {
        // Whatever bytes a sysfs file holds, the parsers answer or decline; they never panic.
        #[test]
        fn parsers_never_panic(text in "\\PC*") {
            let _ = parse_hex(&text);
            let _ = parse_meminfo_total_mib(&text);
            let props = parse_properties(&text);
            let _ = property_u64(&props, "gfx_target_version");
        }

        #[test]
        fn hex_round_trips(value in any::<u32>()) {
            prop_assert_eq!(parse_hex(&format!("0x{value:x}")), Some(value));
        }
    }
}
