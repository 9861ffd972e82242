//! Model profiles: one TOML file each under `profiles/` (schema in `profiles/README.md`).
//! The file stem is the profile's name. Unknown keys are errors naming the file and key.

use std::path::{Path, PathBuf};

use lucebox_engine::variants::Backend;
use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("{dir}: cannot list profiles: {source}")]
    List { dir: String, source: std::io::Error },
    #[error("{file}: {source}")]
    Read { file: String, source: std::io::Error },
    #[error("{file}: {message}")]
    Parse { file: String, message: String },
    #[error("{file}: {key}: {message}")]
    Invalid { file: String, key: &'static str, message: String },
    #[error("{dir}: no profiles (*.toml) found")]
    Empty { dir: String },
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Profile {
    /// The file stem, e.g. `qwen3.6-27b-dflash-24g`.
    pub name: String,
    pub path: PathBuf,
    #[serde(flatten)]
    pub spec: ProfileSpec,
}

/// The contents of one profile file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProfileSpec {
    pub description: String,
    /// Higher ranks are preferred among the profiles a device can run.
    pub rank: i32,
    pub model: ModelFile,
    /// Draft model for speculative decoding (DFlash), if any.
    #[serde(default)]
    pub draft: Option<ModelFile>,
    pub requirements: Requirements,
    pub engine: EngineSettings,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModelFile {
    /// File name in the model store.
    pub file: String,
    pub size_mib: u64,
    /// Verified on download and at activation when present.
    #[serde(default)]
    pub sha256: Option<String>,
    #[serde(default)]
    pub quant: Option<String>,
    /// Where OTA fetches it from.
    #[serde(default)]
    pub url: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Requirements {
    /// Engine builds this profile runs on.
    pub backends: Vec<Backend>,
    /// Engine kinds that can serve it (`dflash_server`, `llama-server`).
    pub engines: Vec<String>,
    /// Usable memory needed on each device (MiB): weights, KV cache for `ctx`, runtime.
    pub min_usable_mib: u64,
    /// Only these exact targets, when set.
    #[serde(default)]
    pub archs: Vec<String>,
    /// Oldest NVIDIA target (`sm_75`), when set.
    #[serde(default)]
    pub min_compute: Option<String>,
    /// `true`: only integrated GPUs with unified memory; `false`: only discrete ones.
    #[serde(default)]
    pub unified_memory: Option<bool>,
    #[serde(default = "one")]
    pub devices: u32,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EngineSettings {
    /// Context length in tokens.
    pub ctx: u32,
    #[serde(default = "one")]
    pub parallel: u32,
    #[serde(default)]
    pub cache_type_k: Option<String>,
    #[serde(default)]
    pub cache_type_v: Option<String>,
    /// DDTree verification budget for the draft model.
    #[serde(default)]
    pub draft_budget: Option<u32>,
    /// Load the draft model on first use (saves memory on small cards).
    #[serde(default)]
    pub lazy_draft: bool,
    #[serde(default)]
    pub prefix_cache_slots: Option<u32>,
    #[serde(default)]
    pub think_max_tokens: Option<u32>,
    /// MoE layers whose experts stay in host memory (expert offload).
    #[serde(default)]
    pub cpu_moe_layers: Option<u32>,
    #[serde(default)]
    pub extra_args: Vec<String>,
    /// What changes on a GPU Windows lends to WSL2 (`[engine.wsl]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wsl: Option<WslSettings>,
}

/// `[engine.wsl]`: the smaller context and DDTree budget the Lucebox engine's own entry point runs
/// under WSL2 (`../shared/reference/lucebox-engine.md`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WslSettings {
    #[serde(default)]
    pub ctx: Option<u32>,
    #[serde(default)]
    pub draft_budget: Option<u32>,
}

impl EngineSettings {
    /// The settings to launch with: these, with `[engine.wsl]` over them on a GPU lent to WSL2.
    pub fn for_wsl(&self, lent_to_wsl: bool) -> std::borrow::Cow<'_, EngineSettings> {
        match (&self.wsl, lent_to_wsl) {
            (Some(wsl), true) => std::borrow::Cow::Owned(EngineSettings {
                ctx: wsl.ctx.unwrap_or(self.ctx),
                draft_budget: wsl.draft_budget.or(self.draft_budget),
                ..self.clone()
            }),
            _ => std::borrow::Cow::Borrowed(self),
        }
    }
}

fn one() -> u32 {
    1
}

/// Loads every `*.toml` in `dir`, sorted by name.
pub fn load_dir(dir: &Path) -> Result<Vec<Profile>, ProfileError> {
    let list_err = |source| ProfileError::List { dir: dir.display().to_string(), source };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(list_err)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(ProfileError::Empty { dir: dir.display().to_string() });
    }
    files.iter().map(|f| load_file(f)).collect()
}

pub fn load_file(path: &Path) -> Result<Profile, ProfileError> {
    let file = path.display().to_string();
    let text =
        std::fs::read_to_string(path).map_err(|source| ProfileError::Read { file: file.clone(), source })?;
    let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    parse(&text, &name, path)
}

pub fn parse(text: &str, name: &str, path: &Path) -> Result<Profile, ProfileError> {
    let file = path.display().to_string();
    let spec: ProfileSpec = toml::from_str(text)
        .map_err(|e| ProfileError::Parse { file: file.clone(), message: e.to_string() })?;
    validate(&spec, &file)?;
    Ok(Profile { name: name.to_string(), path: path.to_path_buf(), spec })
}

fn validate(spec: &ProfileSpec, file: &str) -> Result<(), ProfileError> {
    let invalid = |key, message: String| Err(ProfileError::Invalid { file: file.to_string(), key, message });
    if spec.requirements.backends.is_empty() {
        return invalid("requirements.backends", "must name at least one backend".into());
    }
    if spec.requirements.engines.is_empty() {
        return invalid("requirements.engines", "must name at least one engine kind".into());
    }
    if spec.requirements.devices == 0 {
        return invalid("requirements.devices", "must be at least 1".into());
    }
    if spec.engine.ctx == 0 {
        return invalid("engine.ctx", "must be at least 1".into());
    }
    if spec.engine.parallel == 0 {
        return invalid("engine.parallel", "must be at least 1".into());
    }
    if spec.engine.wsl.as_ref().is_some_and(|w| w.ctx == Some(0)) {
        return invalid("engine.wsl.ctx", "must be at least 1".into());
    }
    for (key, model) in [("model", Some(&spec.model)), ("draft", spec.draft.as_ref())] {
        let Some(model) = model else { continue };
        if model.file.is_empty() || model.file.contains('/') {
            return invalid(
                if key == "model" { "model.file" } else { "draft.file" },
                format!("{:?} must be a plain file name", model.file),
            );
        }
        if model.size_mib == 0 {
            return invalid(
                if key == "model" { "model.size_mib" } else { "draft.size_mib" },
                "must be at least 1".into(),
            );
        }
        if let Some(sha) = &model.sha256 {
            if sha.len() != 64 || !sha.chars().all(|c| c.is_ascii_hexdigit()) {
                return invalid(
                    if key == "model" { "model.sha256" } else { "draft.sha256" },
                    format!("{sha:?} is not 64 hex digits"),
                );
            }
        }
    }
    if let Some(min) = &spec.requirements.min_compute {
        if super::select::sm_number(min).is_none() {
            return invalid("requirements.min_compute", format!("{min:?} is not an sm_NN target"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_profiles_load() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles");
        let profiles = load_dir(&dir).unwrap();
        assert!(profiles.len() >= 8, "{}", profiles.len());
        assert!(profiles.iter().any(|p| p.name == "tiny-cpu-test"));
    }

    #[test]
    fn unknown_key_names_file_and_key() {
        let text = "description = \"x\"\nrank = 1\n[model]\nfile = \"m.gguf\"\nsize_mib = 1\n[requirements]\nbackends = [\"cpu\"]\nengines = [\"llama-server\"]\nmin_usable_mib = 1\n[engine]\nctx = 256\ncontex = 5\n";
        let err = parse(text, "p", Path::new("profiles/p.toml")).unwrap_err().to_string();
        assert!(err.contains("profiles/p.toml") && err.contains("contex"), "{err}");
    }

    #[test]
    fn bad_values_name_the_key() {
        let base = "description = \"x\"\nrank = 1\n[model]\nfile = \"m.gguf\"\nsize_mib = 1\nsha256 = \"abc\"\n[requirements]\nbackends = [\"cpu\"]\nengines = [\"llama-server\"]\nmin_usable_mib = 1\n[engine]\nctx = 256\n";
        let err = parse(base, "p", Path::new("p.toml")).unwrap_err().to_string();
        assert!(err.contains("model.sha256"), "{err}");
        let err =
            parse(&base.replace("\"cpu\"", "\"tpu\""), "p", Path::new("p.toml")).unwrap_err().to_string();
        assert!(err.contains("tpu"), "{err}");
        let good = base.replace("sha256 = \"abc\"\n", "");
        let err = parse(&format!("{good}[engine.wsl]\nctx = 0\n"), "p", Path::new("p.toml")).unwrap_err();
        assert!(err.to_string().contains("engine.wsl.ctx"), "{err}");
        let err =
            parse(&format!("{good}[engine.wsl]\nparallel = 2\n"), "p", Path::new("p.toml")).unwrap_err();
        assert!(err.to_string().contains("parallel"), "only ctx and draft_budget change under WSL2: {err}");
    }

    #[test]
    fn wsl_settings_apply_only_to_a_gpu_lent_to_wsl2() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles");
        let profile = load_file(&dir.join("qwen3.6-27b-dflash-24g.toml")).unwrap();
        let native = profile.spec.engine.for_wsl(false);
        assert_eq!((native.ctx, native.draft_budget), (98304, Some(22)));
        let wsl = profile.spec.engine.for_wsl(true);
        assert_eq!((wsl.ctx, wsl.draft_budget), (65536, Some(16)), "the engine's own WSL2 tier");
        assert_eq!(wsl.prefix_cache_slots, native.prefix_cache_slots, "the rest is kept");
    }
}
