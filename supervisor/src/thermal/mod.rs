//! Inference-aware fan control: a thermal model learned online per device, a power forecast from
//! the engine's queue, a model-predictive controller with a safety layer above it, the fan
//! actuators of each supported card, and the simulator and bench that measure it all.

pub mod actuator;
pub mod bench;
pub mod cli;
pub mod controller;
mod daemon;
pub mod fan;
pub mod fit;
pub mod forecast;
pub mod learned;
pub mod model;
pub mod plant;
pub mod priors;
pub mod reset;
pub mod safety;
pub mod sensors;
pub mod sim;
pub mod trace;

pub use daemon::{control_loop, control_loop_with, ControlConfig, FanOverride, FanOverrides};

use std::path::{Path, PathBuf};

/// Errors of the thermal module; each names the file (and key or line) it is about.
#[derive(Debug, thiserror::Error)]
pub enum ThermalError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: {field}: {why}")]
    Invalid { path: PathBuf, field: String, why: String },
}

/// Reads a TOML file of this module (unknown keys are refused where the type says so): errors
/// name the file, and toml's message the line and key.
fn read_toml<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ThermalError> {
    let text =
        std::fs::read_to_string(path).map_err(|source| ThermalError::Io { path: path.into(), source })?;
    parse_toml(&text, path)
}

/// [`read_toml`] for text already read; `path` names it in errors.
fn parse_toml<T: serde::de::DeserializeOwned>(text: &str, path: &Path) -> Result<T, ThermalError> {
    toml::from_str(text).map_err(|e| ThermalError::Invalid {
        path: path.into(),
        field: "toml".into(),
        why: e.to_string(),
    })
}
