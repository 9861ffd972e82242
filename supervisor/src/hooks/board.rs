//! Which board this is, from DMI (`/sys/class/dmi/id`), and the hooks folder it maps to.

use std::fs;

use serde::Serialize;

use crate::hardware::SysRoot;

/// The DMI strings that identify a board (empty when the kernel does not expose one).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Dmi {
    pub board_vendor: String,
    pub board_name: String,
    pub product_name: String,
}

impl Dmi {
    /// Reads the DMI identity below `root`; a missing or unreadable file reads as empty.
    pub fn read(root: &SysRoot) -> Self {
        let field = |name: &str| {
            fs::read_to_string(root.path(format!("/sys/class/dmi/id/{name}")))
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        Self {
            board_vendor: field("board_vendor"),
            board_name: field("board_name"),
            product_name: field("product_name"),
        }
    }
}

/// Boards with firmware hooks. Every other board has none and keeps its firmware's fan control.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Board {
    /// Framework Desktop (Strix Halo): the EC owns the fans, driven by `framework_tool`.
    FrameworkDesktop,
    /// Sixunited AXB35-02 boards (GMKtec EVO-X2 and others): the `ec_su_axb35` module.
    SixunitedAxb35,
}

impl Board {
    pub const ALL: [Board; 2] = [Board::FrameworkDesktop, Board::SixunitedAxb35];

    /// Matches a DMI identity; `None` for boards without hooks.
    pub fn from_dmi(dmi: &Dmi) -> Option<Board> {
        let vendor = dmi.board_vendor.to_ascii_lowercase();
        let board = dmi.board_name.to_ascii_uppercase();
        let product = dmi.product_name.to_ascii_lowercase();
        if vendor.starts_with("framework") && product.contains("desktop") {
            return Some(Board::FrameworkDesktop);
        }
        // Resellers rename the product but keep Sixunited's board name.
        if board.starts_with("AXB35") || vendor.starts_with("sixunited") || product.contains("evo-x2") {
            return Some(Board::SixunitedAxb35);
        }
        None
    }

    /// Detects the board below `root`.
    pub fn detect(root: &SysRoot) -> Option<Board> {
        Board::from_dmi(&Dmi::read(root))
    }

    /// The folder under `firmware-hooks/` that holds this board's hooks.
    pub fn dir_name(self) -> &'static str {
        match self {
            Board::FrameworkDesktop => "framework-desktop",
            Board::SixunitedAxb35 => "sixunited-axb35",
        }
    }

    pub fn display_name(self) -> &'static str {
        match self {
            Board::FrameworkDesktop => "Framework Desktop",
            Board::SixunitedAxb35 => "Sixunited AXB35",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dmi(vendor: &str, board: &str, product: &str) -> Dmi {
        Dmi { board_vendor: vendor.into(), board_name: board.into(), product_name: product.into() }
    }

    #[test]
    fn matches_known_boards_and_nothing_else() {
        let framework = dmi("Framework", "FRANMFCP06", "Desktop (AMD Ryzen AI Max 300 Series)");
        assert_eq!(Board::from_dmi(&framework), Some(Board::FrameworkDesktop));
        assert_eq!(Board::from_dmi(&dmi("GMKtec", "AXB35-02", "NucBox EVO-X2")), Some(Board::SixunitedAxb35));
        assert_eq!(Board::from_dmi(&dmi("SIXUNITED", "", "")), Some(Board::SixunitedAxb35));
        // A Framework laptop has no desktop EC hooks.
        assert_eq!(
            Board::from_dmi(&dmi("Framework", "FRANMDCP07", "Laptop 13 (AMD Ryzen 7040Series)")),
            None
        );
        assert_eq!(Board::from_dmi(&dmi("ASUSTeK COMPUTER INC.", "ROG STRIX X670E-E", "")), None);
        assert_eq!(Board::from_dmi(&Dmi::default()), None);
    }
}
