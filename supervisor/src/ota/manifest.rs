//! `manifest.toml` of a profile set: its version and the model files its profiles need.

use std::path::Path;

use serde::{Deserialize, Serialize};
use url::Url;

pub const MANIFEST_FILE: &str = "manifest.toml";

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{file}: {message}")]
    Parse { file: String, message: String },
    #[error("{file}: {field}: {message}")]
    Field { file: String, field: String, message: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Monotonic set version; an update must carry a higher one than the committed set.
    pub version: u64,
    #[serde(default)]
    pub models: Vec<ModelFile>,
}

/// A model file named by content: where to fetch it, how long it is, what it hashes to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFile {
    /// The file name profiles refer to (e.g. `qwen3-8b-q4_k_m.gguf`).
    pub name: String,
    pub url: String,
    pub size: u64,
    pub sha256: String,
}

impl Manifest {
    /// Parses and validates `text`; `file` names the source in errors.
    pub fn parse(text: &str, file: &str) -> Result<Self, ManifestError> {
        let manifest: Manifest = toml::from_str(text)
            .map_err(|e| ManifestError::Parse { file: file.into(), message: e.to_string() })?;
        manifest.validate(file)?;
        Ok(manifest)
    }

    pub fn load(path: &Path) -> Result<Self, ManifestError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ManifestError::Parse { file: file.clone(), message: e.to_string() })?;
        Self::parse(&text, &file)
    }

    fn validate(&self, file: &str) -> Result<(), ManifestError> {
        let err = |field: String, message: &str| ManifestError::Field {
            file: file.into(),
            field,
            message: message.into(),
        };
        if self.version == 0 {
            return Err(err("version".into(), "must be at least 1"));
        }
        for (i, model) in self.models.iter().enumerate() {
            let field = |name: &str| format!("models[{i}].{name}");
            let plain_name = !model.name.is_empty()
                && !model.name.contains('/')
                && model.name != "."
                && model.name != "..";
            if !plain_name {
                return Err(err(field("name"), "must be a plain file name"));
            }
            if model.size == 0 {
                return Err(err(field("size"), "must be greater than 0"));
            }
            if !is_sha256_hex(&model.sha256) {
                return Err(err(field("sha256"), "must be 64 lowercase hex digits"));
            }
            match Url::parse(&model.url) {
                Ok(url) if matches!(url.scheme(), "http" | "https" | "file") => {}
                Ok(_) => return Err(err(field("url"), "scheme must be http, https or file")),
                Err(_) => return Err(err(field("url"), "not a URL")),
            }
        }
        Ok(())
    }
}

pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn parses_a_valid_manifest() {
        let text = format!(
            "version = 3\n[[models]]\nname = \"tiny.gguf\"\nurl = \"http://127.0.0.1:1/tiny.gguf\"\nsize = 4\nsha256 = \"{SHA}\"\n"
        );
        let m = Manifest::parse(&text, "manifest.toml").unwrap();
        assert_eq!(m.version, 3);
        assert_eq!(m.models[0].size, 4);
    }

    #[test]
    fn errors_name_file_and_field() {
        let text = "version = 1\n[[models]]\nname = \"a\"\nurl = \"ftp://x/a\"\nsize = 1\nsha256 = \"ab\"\n";
        let err = Manifest::parse(text, "set/manifest.toml").unwrap_err().to_string();
        assert!(err.contains("set/manifest.toml") && err.contains("models[0].sha256"), "{err}");
        let err = Manifest::parse("version = 1\nextra = 2\n", "m.toml").unwrap_err().to_string();
        assert!(err.contains("extra"), "{err}");
        let err = Manifest::parse("version = 0\n", "m.toml").unwrap_err().to_string();
        assert!(err.contains("version"), "{err}");
    }
}
