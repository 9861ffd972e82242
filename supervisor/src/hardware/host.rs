//! Host facts (stub until the detection commit).
use super::{Board, Device, Drivers, Host, SysRoot};
pub fn probe(_root: &SysRoot, _warnings: &mut Vec<String>) -> Host {
    Host {
        cpu_model: String::new(),
        cores: 1,
        threads: 1,
        memory_mib: 0,
        in_container: false,
        kernel: None,
        board: Board::default(),
        drivers: Drivers::default(),
    }
}
pub fn cpu_device(_host: &Host) -> Device {
    unimplemented!()
}
