//! Dotted version numbers as drivers print them: `570.124.04`, `6.11.0-19-generic`,
//! `in-kernel 6.15.0-lucebox`. Only the leading numeric components count.

/// The numeric components, or `None` when the text holds no version.
pub fn parse(text: &str) -> Option<Vec<u64>> {
    let start = text.find(|c: char| c.is_ascii_digit())?;
    let parts: Vec<u64> =
        text[start..].split(['.', '-', '+', ' ', '_']).map_while(|p| p.parse::<u64>().ok()).collect();
    (!parts.is_empty()).then_some(parts)
}

/// Whether `have` is at least `need` (missing components count as 0).
pub fn at_least(have: &str, need: &str) -> Option<bool> {
    let (have, need) = (parse(have)?, parse(need)?);
    let len = have.len().max(need.len());
    let pad = |v: &[u64]| (0..len).map(|i| v.get(i).copied().unwrap_or(0)).collect::<Vec<_>>();
    Some(pad(&have) >= pad(&need))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_driver_versions() {
        assert_eq!(at_least("570.124.04", "570.26"), Some(true));
        assert_eq!(at_least("550.144.03", "570.26"), Some(false));
        assert_eq!(at_least("in-kernel 6.15.0-lucebox", "6.8"), Some(true));
        assert_eq!(at_least("6.11.0-19-generic", "6.11"), Some(true));
        assert_eq!(at_least("6.2", "6.11"), Some(false));
        assert_eq!(at_least("garbage", "1"), None);
    }
}
