//! Per-card starting points of the learned thermal model, shipped in a profile set as
//! `thermal/priors.toml`: a device that has not learned a model yet starts from its card's values
//! instead of the generic prior, so a new box is quiet sooner. A learned model always wins.
//!
//! ```toml
//! [[card]]                              # the first entry whose match keys all fit the device
//! arch = "gfx1201"                      # match keys, each optional: arch, pci_id, model_contains
//! sink_capacity_j_per_k = 650.0
//! sink_to_air_stopped_k_per_w = 0.6     # fan stopped
//! sink_to_air_full_k_per_w = 0.11       # fan at 100 %
//! junction_to_sink_k_per_w = 0.06
//! ambient_c = 30.0                      # air around the heatsink (inside the case)
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::model::ModelParams;
use super::{parse_toml, read_toml, ThermalError};
use crate::hardware::Device;

/// Where a profile set carries the priors, relative to the set's directory.
pub const PRIORS_FILE: &str = "thermal/priors.toml";

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CardPrior {
    pub arch: Option<String>,
    /// `vendor:device` in lowercase hex, as detection reports it.
    pub pci_id: Option<String>,
    /// A part of the device's model name.
    pub model_contains: Option<String>,
    pub sink_capacity_j_per_k: f64,
    pub sink_to_air_stopped_k_per_w: f64,
    pub sink_to_air_full_k_per_w: f64,
    pub junction_to_sink_k_per_w: f64,
    pub ambient_c: f64,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PriorsFile {
    #[serde(default)]
    card: Vec<CardPrior>,
}

/// The card priors of one file, each with the model it starts a device from (built once, when
/// the file is read and checked).
#[derive(Debug, Clone, Default)]
pub struct CardPriors {
    pub path: PathBuf,
    cards: Vec<(CardPrior, ModelParams)>,
}

impl CardPrior {
    fn fits(&self, device: &Device) -> bool {
        let same = |want: &Option<String>, have: Option<&str>| {
            want.as_deref().is_none_or(|w| have.is_some_and(|h| h.eq_ignore_ascii_case(w)))
        };
        same(&self.arch, device.arch.as_deref())
            && same(&self.pci_id, device.pci_id.as_deref())
            && self
                .model_contains
                .as_deref()
                .is_none_or(|m| device.model.to_ascii_lowercase().contains(&m.to_ascii_lowercase()))
    }

    /// What the entry matches, for messages.
    pub fn describe(&self) -> String {
        let keys = [("arch", &self.arch), ("pci_id", &self.pci_id), ("model_contains", &self.model_contains)];
        let named: Vec<String> =
            keys.iter().filter_map(|(k, v)| v.as_ref().map(|v| format!("{k} = {v:?}"))).collect();
        if named.is_empty() {
            "every device".into()
        } else {
            named.join(", ")
        }
    }

    /// The model this entry starts a device from, or the first key it cannot represent.
    fn params(&self) -> Result<ModelParams, (&'static str, String)> {
        ModelParams::from_card(
            self.sink_capacity_j_per_k,
            self.sink_to_air_stopped_k_per_w,
            self.sink_to_air_full_k_per_w,
            self.junction_to_sink_k_per_w,
            self.ambient_c,
        )
    }
}

impl CardPriors {
    /// Reads a priors file: unknown keys and values the model cannot represent are errors that
    /// name the file, the entry and the key.
    pub fn load(path: &Path) -> Result<Self, ThermalError> {
        Self::build(read_toml(path)?, path)
    }

    /// [`CardPriors::load`] for a file already read (a profile set being published or staged);
    /// `path` names it in errors.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Self, ThermalError> {
        let text = std::str::from_utf8(bytes).map_err(|e| ThermalError::Invalid {
            path: path.into(),
            field: "toml".into(),
            why: format!("not UTF-8 text: {e}"),
        })?;
        Self::build(parse_toml(text, path)?, path)
    }

    fn build(file: PriorsFile, path: &Path) -> Result<Self, ThermalError> {
        let cards = file
            .card
            .into_iter()
            .enumerate()
            .map(|(i, card)| match card.params() {
                Ok(params) => Ok((card, params)),
                Err((key, why)) => {
                    Err(ThermalError::Invalid { path: path.into(), field: format!("card[{i}].{key}"), why })
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { path: path.into(), cards })
    }

    /// The first entry that fits `device`, and the model it starts the device from.
    pub fn for_device(&self, device: &Device) -> Option<(&CardPrior, &ModelParams)> {
        self.cards.iter().find(|(card, _)| card.fits(device)).map(|(card, params)| (card, params))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hardware::Vendor;

    fn device(arch: &str, pci_id: &str, model: &str) -> Device {
        Device {
            pci_id: Some(pci_id.into()),
            arch: Some(arch.into()),
            ..Device::new("0000:03:00.0", Vendor::Amd, model)
        }
    }

    const VALUES: &str = "sink_capacity_j_per_k = 650.0\nsink_to_air_stopped_k_per_w = 0.6\n\
        sink_to_air_full_k_per_w = 0.11\njunction_to_sink_k_per_w = 0.06\nambient_c = 34.0\n";

    fn file(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("priors.toml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn the_first_entry_whose_keys_all_fit_is_the_devices() {
        let text = format!(
            "# per card\n[[card]]\narch = \"gfx1201\"\nmodel_contains = \"ai pro\"\n{VALUES}\n\
             [[card]]\npci_id = \"1002:7550\"\n{}\n[[card]]\n{}",
            VALUES.replace("650.0", "700.0"),
            VALUES.replace("650.0", "400.0")
        );
        let (_dir, path) = file(&text);
        let priors = CardPriors::load(&path).unwrap();
        let capacity = |d: &Device| priors.for_device(d).unwrap().0.sink_capacity_j_per_k;
        assert_eq!(capacity(&device("gfx1201", "1002:7551", "AMD Radeon AI PRO R9700")), 650.0);
        assert_eq!(capacity(&device("gfx1201", "1002:7550", "AMD Radeon RX 9070 XT")), 700.0);
        assert_eq!(
            capacity(&device("gfx1030", "1002:73bf", "RX 6800")),
            400.0,
            "no match keys: every device"
        );
        let r9700 = device("gfx1201", "1002:7551", "AMD Radeon AI PRO R9700");
        assert_eq!(
            priors.for_device(&r9700).unwrap().0.describe(),
            "arch = \"gfx1201\", model_contains = \"ai pro\""
        );

        let (_dir, empty) = file("# no cards yet\n");
        assert!(CardPriors::load(&empty).unwrap().for_device(&device("gfx1201", "1002:7551", "x")).is_none());
    }

    #[test]
    fn a_card_starts_the_model_at_its_own_values() {
        let (_dir, path) = file(&format!("[[card]]\n{VALUES}"));
        let priors = CardPriors::load(&path).unwrap();
        let (_, params) = priors.for_device(&device("gfx1201", "1002:7551", "any")).unwrap();
        let [a, b, c, _] = params.sink;
        assert!((1.0 / a - 650.0).abs() < 1e-9);
        assert!((a / b - 0.6).abs() < 1e-9 && (a / c - 0.11).abs() < 1e-9);
        assert_eq!((params.r_js_k_per_w, params.ambient_c()), (0.06, 34.0));
        assert_eq!(params.check(), Ok(()));
    }

    #[test]
    fn bad_entries_are_named_with_the_file_entry_and_key() {
        let (_dir, path) = file(&format!("[[card]]\n{VALUES}\n[[card]]\n{}", VALUES.replace("0.6", "0.05")));
        let e = CardPriors::load(&path).unwrap_err().to_string();
        assert!(e.contains("priors.toml: card[1].sink_to_air_stopped_k_per_w: 0.05 is outside"), "{e}");

        let (_dir, path) = file(&format!("[[card]]\n{}", VALUES.replace("ambient_c", "ambient")));
        let e = CardPriors::load(&path).unwrap_err().to_string();
        assert!(e.contains("priors.toml: toml:") && e.contains("unknown field `ambient`"), "{e}");

        let (_dir, path) = file(&format!("[[card]]\n{}", VALUES.replace("650.0", "9000.0")));
        let e = CardPriors::load(&path).unwrap_err().to_string();
        assert!(e.contains("card[0].sink_capacity_j_per_k: 9000 is outside 50..=5000"), "{e}");
    }
}
