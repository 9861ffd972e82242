//! ROCm SMI (cargo feature `rocm`): per AMD GPU its PCI address, VRAM and GTT totals, unique id,
//! temperature, power, busy and fan speed. [`super::amd`] merges these into the devices it built
//! from amdgpu sysfs, matched by PCI address.
//!
//! The raw C calls are used, not the crate's safe wrappers: those write past their buffers in the
//! power and fan queries and ignore `rsmi_init`'s status. The crate's build script links
//! `rocm_smi64` at build time, so a binary built with this feature needs `librocm_smi64.so.1` to
//! start at all; what fails at run time is `rsmi_init` (no amdgpu driver, no access to
//! `/dev/kfd`) or a GPU the library does not list, and each becomes a warning. The C calls
//! cannot panic, so there is nothing to contain.

use std::ffi::CStr;
use std::os::raw::c_char;

use rocm_smi_lib::{
    rsmi_dev_busy_percent_get, rsmi_dev_fan_speed_get, rsmi_dev_fan_speed_max_get, rsmi_dev_memory_total_get,
    rsmi_dev_pci_id_get, rsmi_dev_power_ave_get, rsmi_dev_temp_metric_get, rsmi_dev_unique_id_get, rsmi_init,
    rsmi_memory_type_t_RSMI_MEM_TYPE_GTT, rsmi_memory_type_t_RSMI_MEM_TYPE_VRAM, rsmi_num_monitor_devices,
    rsmi_shut_down, rsmi_status_string, rsmi_status_t, rsmi_status_t_RSMI_STATUS_SUCCESS,
    rsmi_temperature_metric_t_RSMI_TEMP_CURRENT, rsmi_temperature_type_t_RSMI_TEMP_TYPE_EDGE,
    rsmi_temperature_type_t_RSMI_TEMP_TYPE_JUNCTION,
};

use super::amd::{kfd_address, LibraryGpu};
use super::sysfs::bytes_to_mib;
use super::units::{celsius_from_millidegrees, watts_from_microwatts};

/// More GPUs than any box holds: bounds the loop over what the library claims.
const MAX_GPUS: u32 = 64;

#[derive(Debug, thiserror::Error)]
enum RocmSmiError {
    #[error("rsmi_init failed ({0})")]
    Init(String),
    #[error("rsmi_num_monitor_devices failed ({0})")]
    Count(String),
}

/// Asks ROCm SMI about every GPU it sees. A failure, or an AMD GPU on PCI (`amd_addresses`) that
/// the library does not list, becomes a warning naming rocm-smi; amdgpu sysfs still answers.
pub fn probe(amd_addresses: &[&str], warnings: &mut Vec<String>) -> Vec<LibraryGpu> {
    let gpus = match Session::open().and_then(|session| session.gpus()) {
        Ok(gpus) => gpus,
        Err(e) => {
            warnings.push(format!("rocm-smi: {e}; AMD GPU facts come from amdgpu sysfs only"));
            return Vec::new();
        }
    };
    for address in amd_addresses.iter().filter(|a| !gpus.iter().any(|g| g.address == **a)) {
        warnings.push(format!(
            "rocm-smi: does not list the AMD GPU at {address}; its facts come from amdgpu sysfs only"
        ));
    }
    gpus
}

/// One `rsmi_init` .. `rsmi_shut_down` span (the library counts the pairs).
struct Session(());

impl Session {
    fn open() -> Result<Self, RocmSmiError> {
        // SAFETY: no pointers; flags 0 asks for AMD GPUs only.
        check(unsafe { rsmi_init(0) }).map_err(RocmSmiError::Init)?;
        Ok(Session(()))
    }

    fn gpus(&self) -> Result<Vec<LibraryGpu>, RocmSmiError> {
        let mut count = 0u32;
        // SAFETY: `count` is a live u32 the call writes once.
        check(unsafe { rsmi_num_monitor_devices(&mut count) }).map_err(RocmSmiError::Count)?;
        Ok((0..count.min(MAX_GPUS)).filter_map(|index| self.gpu(index)).collect())
    }

    /// A GPU without a PCI address cannot be matched to a device, so it is skipped.
    fn gpu(&self, index: u32) -> Option<LibraryGpu> {
        // SAFETY (every call below): the out pointer is a live local of the type the C
        // signature names, and `index` is below the library's own device count.
        let bdf = query(|out| unsafe { rsmi_dev_pci_id_get(index, out) })?;
        let memory_mib =
            |kind| query(|out| unsafe { rsmi_dev_memory_total_get(index, kind, out) }).map(bytes_to_mib);
        let temperature = |sensor| {
            query(|out| unsafe {
                rsmi_dev_temp_metric_get(index, sensor, rsmi_temperature_metric_t_RSMI_TEMP_CURRENT, out)
            })
        };
        // Junction (hotspot) first, as amd.rs reads temp2 before temp1.
        let temperature_millis = temperature(rsmi_temperature_type_t_RSMI_TEMP_TYPE_JUNCTION)
            .or_else(|| temperature(rsmi_temperature_type_t_RSMI_TEMP_TYPE_EDGE));
        let fan_speed = query(|out| unsafe { rsmi_dev_fan_speed_get(index, 0, out) });
        let fan_speed_max = query(|out| unsafe { rsmi_dev_fan_speed_max_get(index, 0, out) });
        Some(LibraryGpu {
            address: bdf_address(bdf),
            vram_total_mib: memory_mib(rsmi_memory_type_t_RSMI_MEM_TYPE_VRAM),
            gtt_total_mib: memory_mib(rsmi_memory_type_t_RSMI_MEM_TYPE_GTT),
            unique_id: query(|out| unsafe { rsmi_dev_unique_id_get(index, out) }),
            temperature_c: temperature_millis.map(|m: i64| celsius_from_millidegrees(m as f64)),
            power_w: query(|out| unsafe { rsmi_dev_power_ave_get(index, 0, out) })
                .map(|microwatts: u64| watts_from_microwatts(microwatts as f64)),
            busy_pct: query(|out| unsafe { rsmi_dev_busy_percent_get(index, out) })
                .map(|p: u32| f64::from(p)),
            fan_speed_pct: fan_percent(fan_speed, fan_speed_max),
        })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // SAFETY: pairs the successful rsmi_init of `open`.
        unsafe { rsmi_shut_down() };
    }
}

/// Runs one query that writes its answer through `out`; `None` unless it reports success.
fn query<T: Default>(call: impl FnOnce(*mut T) -> rsmi_status_t) -> Option<T> {
    let mut value = T::default();
    (call(&mut value) == rsmi_status_t_RSMI_STATUS_SUCCESS).then_some(value)
}

fn check(status: rsmi_status_t) -> Result<(), String> {
    if status == rsmi_status_t_RSMI_STATUS_SUCCESS {
        return Ok(());
    }
    let mut text: *const c_char = std::ptr::null();
    // SAFETY: the library points `text` at a static string, or leaves it null on failure.
    let described = unsafe { rsmi_status_string(status, &mut text) } == rsmi_status_t_RSMI_STATUS_SUCCESS;
    if described && !text.is_null() {
        // SAFETY: non-null and NUL-terminated, owned by the library for the process lifetime.
        return Err(unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned());
    }
    Err(format!("status {status}"))
}

/// ROCm SMI's BDF id: domain in the upper 32 bits, then `bus << 8 | device << 3 | function`.
fn bdf_address(bdf: u64) -> String {
    kfd_address(bdf >> 32, bdf & 0xffff)
}

/// Fan speed as a share of the fan's maximum (the library reports both in raw PWM units).
fn fan_percent(speed: Option<i64>, max: Option<u64>) -> Option<f64> {
    match (speed, max) {
        (Some(speed), Some(max)) if max > 0 && speed >= 0 => {
            Some((speed as f64 * 100.0 / max as f64).min(100.0))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{detect, DetectOptions, Source, SysRoot, Vendor};
    use super::*;

    #[test]
    fn bdf_ids_decode_to_pci_addresses() {
        assert_eq!(bdf_address(0x0300), "0000:03:00.0");
        assert_eq!(bdf_address((1 << 32) | (0xc3 << 8) | (2 << 3) | 1), "0001:c3:02.1");
    }

    #[test]
    fn fan_speed_is_a_share_of_the_maximum() {
        assert_eq!(fan_percent(Some(51), Some(255)), Some(20.0));
        assert_eq!(fan_percent(Some(300), Some(255)), Some(100.0));
        assert_eq!(fan_percent(Some(51), Some(0)), None);
        assert_eq!(fan_percent(Some(-1), Some(255)), None);
        assert_eq!(fan_percent(None, Some(255)), None);
    }

    /// Against the real library: no machine has a GPU at this address, so whether the library
    /// fails to initialise (no amdgpu, as on CI) or lists other GPUs, the result is a warning
    /// naming rocm-smi, never a panic.
    #[test]
    fn an_amd_gpu_the_library_does_not_list_is_a_warning() {
        let mut warnings = Vec::new();
        let gpus = probe(&["ffff:ff:1f.7"], &mut warnings);
        assert!(gpus.iter().all(|g| g.address != "ffff:ff:1f.7"));
        assert!(warnings.iter().any(|w| w.starts_with("rocm-smi: ")), "warnings: {warnings:?}");
    }

    /// The captured R9700 host, with ROCm SMI asked although the tree is not this machine: the
    /// card is still found with its sysfs facts, and the library's silence is a warning naming
    /// rocm-smi, not a failure.
    #[test]
    fn the_r9700_fixture_is_detected_with_rocm_smi_asked() {
        let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/hosts/r9700");
        let options = DetectOptions { force_rocm_smi: true, ..DetectOptions::default() };
        let detection = detect(&SysRoot::new(fixture), &options);
        let card = detection.devices.iter().find(|d| d.id == "0000:03:00.0").expect("the R9700");
        assert_eq!((card.vendor, card.model.as_str()), (Vendor::Amd, "Radeon AI PRO R9700"));
        assert_eq!((card.arch.as_deref(), card.memory.dedicated_mib), (Some("gfx1201"), 32624));
        assert!(card.memory.measured && card.accessible);
        assert!(card.sources.contains(&Source::AmdgpuSysfs));
        // Only a box with its own GPU at this address (a real R9700 host) gets an answer.
        let warned =
            detection.warnings.iter().any(|w| w.starts_with("rocm-smi: ") && w.contains("amdgpu sysfs"));
        assert!(warned || card.sources.contains(&Source::RocmSmi), "warnings: {:?}", detection.warnings);

        let unasked = detect(&SysRoot::new(fixture), &DetectOptions::default());
        assert!(
            unasked.warnings.iter().all(|w| !w.contains("rocm-smi")),
            "a captured tree is not this machine"
        );
    }

    #[test]
    fn without_amd_gpus_rocm_smi_is_not_asked() {
        let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/hosts/rtx3090-desktop");
        let options = DetectOptions { force_rocm_smi: true, ..DetectOptions::default() };
        let detection = detect(&SysRoot::new(fixture), &options);
        assert!(detection.devices.iter().any(|d| d.vendor == Vendor::Nvidia));
        assert!(detection.warnings.iter().all(|w| !w.contains("rocm-smi")), "{:?}", detection.warnings);
    }
}
