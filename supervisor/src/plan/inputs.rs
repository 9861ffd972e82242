//! Loading what the planner reads from disk (manifest, profiles) and deriving its settings from
//! the configuration, shared by `lucebox plan` and `lucebox run`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use lucebox_engine::variants::{Manifest, ManifestError};

use super::profile::{self, Profile, ProfileError};
use super::smoke::SmokeSettings;
use super::PlanSettings;
use crate::config::Config;

#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error(transparent)]
    Profile(#[from] ProfileError),
}

/// The smoke start's watchdog: enough for a small model on a cold disk.
const SMOKE_WATCHDOG: Duration = Duration::from_secs(60);

pub struct PlanInputs {
    pub manifest: Manifest,
    pub profiles: Vec<Profile>,
}

impl PlanInputs {
    /// Loads the manifest and profiles; explicit paths beat the configuration's.
    pub fn load(
        config: &Config,
        profiles_dir: Option<&Path>,
        variants: Option<&Path>,
    ) -> Result<Self, InputError> {
        let variants = variants.map(Path::to_path_buf).unwrap_or_else(|| config.variants_file());
        let profiles_dir = profiles_dir.map(Path::to_path_buf).unwrap_or_else(|| config.profiles_dir());
        Ok(Self { manifest: Manifest::load(&variants)?, profiles: profile::load_dir(&profiles_dir)? })
    }

    /// Models are checked on the live machine (in `models`, else the configured store), and in a
    /// captured tree only when a directory is named.
    pub fn settings(&self, config: &Config, models: Option<PathBuf>, live: bool) -> PlanSettings {
        PlanSettings {
            engines_dir: config.engines_dir.clone(),
            check_models: live || models.is_some(),
            models_dir: models.unwrap_or_else(|| config.models_dir()),
            host: config.engine.host.to_string(),
            first_port: config.engine.port,
            threads: config.engine.threads,
            pins: config.pin.clone(),
        }
    }

    pub fn smoke_settings(&self, config: &Config) -> SmokeSettings {
        let tiny = config.models_dir().join("tiny-llama.gguf");
        SmokeSettings {
            cache_file: config.state_dir.join("smoke-cache.json"),
            image_build: format!("{}+{}", env!("CARGO_PKG_VERSION"), config.engines_dir.display()),
            smoke_model: tiny.exists().then_some(tiny),
            watchdog: SMOKE_WATCHDOG,
        }
    }
}
