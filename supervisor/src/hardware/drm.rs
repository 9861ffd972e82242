//! DRM render nodes: the `/dev/dri/renderD*` a process here can open, and the ones sysfs names
//! for a device. A container given one GPU of two (a Kubernetes device plugin,
//! `--device /dev/dri/renderD128`) still sees both on PCI; only the nodes tell them apart.

use std::fs;
use std::path::Path;

use super::pci::PciDevice;
use super::SysRoot;

/// `renderD*` names in `dir`.
fn render_nodes(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("renderD"))
                .collect()
        })
        .unwrap_or_default()
}

/// The render nodes in `/dev/dri` here.
pub fn present(root: &SysRoot) -> Vec<String> {
    render_nodes(&root.path("/dev/dri"))
}

/// The device's own render node when sysfs names one that is not among `present` (while some
/// other is): this container was given another GPU's node. The warning says so.
pub fn own_node_missing(root: &SysRoot, pci: &PciDevice, present: &[String]) -> Option<String> {
    if present.is_empty() {
        return None;
    }
    let own = render_nodes(&root.path(Path::new("/").join(&pci.sysfs_dir).join("drm")));
    own.into_iter().find(|n| !present.contains(n)).map(|missing| {
        format!(
            "its render node /dev/dri/{missing} is not here (this container was given another GPU's): \
             the GPU cannot be used from here"
        )
    })
}
