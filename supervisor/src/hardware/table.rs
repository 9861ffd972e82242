//! Human-readable table of a detection.
use super::Detection;
pub fn render(d: &Detection) -> String {
    format!("{} devices\n", d.devices.len())
}
