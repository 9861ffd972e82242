//! The captured AMD card of `tests/fixtures/thermal/`, as the device the fan control loop drives.

use lucebox::hardware::{Device, Telemetry, Vendor};

/// The card's folder below the captured root.
pub const DEV: &str = "sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:00.0/0000:03:00.0";

/// The card at `0000:03:00.0` of target `arch`, its fan behind `hwmon_rel` (relative to the root).
pub fn amd_hwmon_device(arch: &str, hwmon_rel: &str) -> Device {
    Device {
        id: "0000:03:00.0".into(),
        vendor: Vendor::Amd,
        model: "test".into(),
        pci_id: None,
        arch: Some(arch.into()),
        integrated: false,
        memory: Default::default(),
        driver: Default::default(),
        sources: Vec::new(),
        accessible: true,
        warnings: Vec::new(),
        uid: Some("serial1".into()),
        telemetry: Telemetry {
            sysfs_path: Some(DEV.into()),
            hwmon_path: Some(hwmon_rel.into()),
            ..Default::default()
        },
    }
}
