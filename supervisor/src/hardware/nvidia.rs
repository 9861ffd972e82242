//! NVIDIA probes (stub until the detection commit).
use super::{pci::PciDevice, DetectOptions, Device, Host, SysRoot};
#[derive(Default)]
pub struct NvidiaFound {
    pub devices: Vec<Device>,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
}
pub fn probe(
    _r: &SysRoot,
    _p: &[&PciDevice],
    _o: &DetectOptions,
    _h: &Host,
    _w: &mut Vec<String>,
) -> NvidiaFound {
    NvidiaFound::default()
}
