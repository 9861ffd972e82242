//! The variants manifest (`engine/variants.toml`): the engine builds the fat image carries, which
//! exact targets each was compiled for, the oldest driver it runs on, and how to launch it.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{file}: {source}")]
    Read { file: String, source: std::io::Error },
    #[error("{file}: {message}")]
    Parse { file: String, message: String },
    #[error("{file}: {key}: {message}")]
    Invalid { file: String, key: String, message: String },
}

/// The whole manifest.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub schema: u32,
    /// Launch templates per engine kind (`llama-server`, `dflash_server`).
    pub engine: BTreeMap<String, EngineKind>,
    /// Variants in ladder order: the planner tries them first to last.
    pub variant: Vec<Variant>,
}

/// How to launch one engine kind. `args` always apply; an `optional` group applies only when
/// the profile sets every placeholder it uses.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EngineKind {
    pub args: Vec<String>,
    #[serde(default)]
    pub optional: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    pub name: String,
    /// `cuda`, `rocm`, `vulkan` or `cpu`.
    pub backend: Backend,
    /// Engine kind, a key of `[engine]`.
    pub engine: String,
    /// Binary path, relative to the engines directory of the image.
    pub binary: String,
    /// Exact targets the build carries code for (`sm_86`, `gfx1201`, `x86_64`); `*` means any
    /// GPU the backend's driver can drive (Vulkan).
    pub archs: Vec<String>,
    /// PTX (or similar) carried for targets newer than the newest in `archs`.
    #[serde(default)]
    pub forward_compatible: bool,
    /// Oldest driver the build runs on (NVIDIA driver, or kernel for amdgpu).
    #[serde(default)]
    pub min_driver: Option<String>,
    /// CPU features the build needs (`avx2`).
    #[serde(default)]
    pub cpu_flags: Vec<String>,
    /// Toolkit the build used, recorded for provenance (`CUDA 12.8.1`, `ROCm 6.4.1`).
    #[serde(default)]
    pub toolkit: Option<String>,
    /// Arguments appended to the engine's template for this build (e.g. `-ngl 999`).
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment for every launch of this variant.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// Placeholders a launch template may use; the planner fills them from the profile and config.
pub const PLACEHOLDERS: &[&str] = &[
    "model",
    "host",
    "port",
    "name",
    "ctx",
    "parallel",
    "threads",
    "cache_type_k",
    "cache_type_v",
    "draft",
    "draft_budget",
    "lazy_draft",
    "prefix_cache_slots",
    "think_max_tokens",
    "cpu_moe_layers",
];

/// The `{name}` placeholders in one template argument.
pub fn placeholders(arg: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut rest = arg;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else { break };
        found.push(&rest[open + 1..open + close]);
        rest = &rest[open + close + 1..];
    }
    found
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Cuda,
    Rocm,
    Vulkan,
    Cpu,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Cuda => "cuda",
            Backend::Rocm => "rocm",
            Backend::Vulkan => "vulkan",
            Backend::Cpu => "cpu",
        }
    }
}

impl Manifest {
    pub fn load(path: &Path) -> Result<Self, ManifestError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|source| ManifestError::Read { file: file.clone(), source })?;
        Self::parse(&text, &file)
    }

    pub fn parse(text: &str, file: &str) -> Result<Self, ManifestError> {
        let manifest: Manifest = toml::from_str(text)
            .map_err(|e| ManifestError::Parse { file: file.to_string(), message: e.to_string() })?;
        manifest.validate(file)?;
        Ok(manifest)
    }

    fn validate(&self, file: &str) -> Result<(), ManifestError> {
        let invalid =
            |key: String, message: String| ManifestError::Invalid { file: file.to_string(), key, message };
        if self.schema != 1 {
            return Err(invalid(
                "schema".into(),
                format!("version {} is not supported (expected 1)", self.schema),
            ));
        }
        for (kind, engine) in &self.engine {
            for (group, args) in std::iter::once(("args", &engine.args))
                .chain(engine.optional.iter().map(|(k, v)| (k.as_str(), v)))
            {
                for arg in args {
                    for placeholder in placeholders(arg) {
                        if !PLACEHOLDERS.contains(&placeholder) {
                            return Err(invalid(
                                format!("engine.{kind}.{group}"),
                                format!(
                                    "unknown placeholder {{{placeholder}}} (known: {})",
                                    PLACEHOLDERS.join(", ")
                                ),
                            ));
                        }
                    }
                }
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, v) in self.variant.iter().enumerate() {
            let key = |field: &str| format!("variant[{i}].{field}");
            if !seen.insert(v.name.as_str()) {
                return Err(invalid(key("name"), format!("{} appears twice", v.name)));
            }
            if !self.engine.contains_key(&v.engine) {
                return Err(invalid(
                    key("engine"),
                    format!("{} has no [engine.{}] section", v.engine, v.engine),
                ));
            }
            if v.archs.is_empty() {
                return Err(invalid(key("archs"), "must list at least one target".into()));
            }
            if let Some(min) = &v.min_driver {
                if crate::version::parse(min).is_none() {
                    return Err(invalid(key("min_driver"), format!("{min:?} is not a version")));
                }
            }
        }
        Ok(())
    }

    pub fn variant(&self, name: &str) -> Option<&Variant> {
        self.variant.iter().find(|v| v.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_manifest_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("variants.toml");
        let manifest = Manifest::load(&path).unwrap();
        let names: Vec<_> = manifest.variant.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["cuda", "rocm", "vulkan", "cpu"]);
        let rocm = manifest.variant("rocm").unwrap();
        assert!(rocm.archs.contains(&"gfx1201".to_string()) && !rocm.archs.contains(&"gfx1200".to_string()));
    }

    #[test]
    fn unknown_placeholders_are_rejected() {
        let text = "schema = 1\n[engine.llama-server]\nargs = [\"{modle}\"]\n[[variant]]\nname = \"cpu\"\nbackend = \"cpu\"\nengine = \"llama-server\"\nbinary = \"x\"\narchs = [\"x86_64\"]\n";
        let err = Manifest::parse(text, "v.toml").unwrap_err().to_string();
        assert!(err.contains("engine.llama-server.args") && err.contains("{modle}"), "{err}");
        assert_eq!(placeholders("--x={a}:{b}"), ["a", "b"]);
    }

    #[test]
    fn unknown_keys_and_bad_references_are_named() {
        let err =
            Manifest::parse("schema = 1\nengin = {}\nvariant = []\n", "v.toml").unwrap_err().to_string();
        assert!(err.contains("v.toml") && err.contains("engin"), "{err}");
        let text = "schema = 1\n[engine.llama-server]\nargs = []\n[[variant]]\nname = \"cpu\"\nbackend = \"cpu\"\nengine = \"nope\"\nbinary = \"x\"\narchs = [\"x86_64\"]\n";
        let err = Manifest::parse(text, "v.toml").unwrap_err().to_string();
        assert!(err.contains("variant[0].engine"), "{err}");
    }
}
