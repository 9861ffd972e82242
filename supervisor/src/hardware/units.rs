//! The fixed-point units devices report in, converted in one place: hwmon's millidegrees and
//! microwatts (the kernel's `Documentation/hwmon/sysfs-interface.rst`; ROCm SMI passes them on),
//! and NVML's milliwatts.

/// Degrees Celsius from millidegrees.
pub(crate) fn celsius_from_millidegrees(millidegrees: f64) -> f64 {
    millidegrees / 1000.0
}

/// Watts from microwatts.
pub(crate) fn watts_from_microwatts(microwatts: f64) -> f64 {
    microwatts / 1_000_000.0
}

/// Watts from milliwatts.
pub(crate) fn watts_from_milliwatts(milliwatts: f64) -> f64 {
    milliwatts / 1000.0
}

/// A board power limit, where there is one: amdgpu reads 0 where the board has no settable
/// limit (some APUs), as NVML may.
pub(crate) fn power_limit_w(watts: f64) -> Option<f64> {
    (watts > 0.0).then_some(watts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_point_units_become_degrees_and_watts() {
        assert_eq!(celsius_from_millidegrees(91_250.0), 91.25);
        assert_eq!(watts_from_microwatts(300_000_000.0), 300.0);
        assert_eq!(watts_from_milliwatts(450_000.0), 450.0);
        assert_eq!(power_limit_w(0.0), None);
        assert_eq!(power_limit_w(120.0), Some(120.0));
    }
}
