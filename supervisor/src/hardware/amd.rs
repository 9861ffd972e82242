//! AMD probes (stub until the detection commit).
use super::{pci::PciDevice, Device, Host, SysRoot};
pub fn probe(_r: &SysRoot, _p: &[&PciDevice], _h: &Host, _w: &mut Vec<String>) -> Vec<Device> {
    Vec::new()
}
