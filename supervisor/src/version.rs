//! Build provenance: what this binary was built from (compiled in by `build.rs`) and, inside the
//! image, what the image was built from (the JSON file the image build writes beside the labels).
//! `lucebox version --json` serves [`Provenance`]; `/api/v1/version` its short form (version,
//! [`GIT_COMMIT`], active profile set).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod build_info {
    include!(concat!(env!("OUT_DIR"), "/build_info.rs"));
}

/// The commit this binary was built from: git's at build time, else `LUCEBOX_GIT_COMMIT` (an
/// image build without `.git`); `None` when neither was there.
pub const GIT_COMMIT: Option<&str> = build_info::GIT_COMMIT;

/// Where the image build writes its provenance (the same values as its OCI labels).
pub const DEFAULT_IMAGE_PROVENANCE: &str = "/usr/share/lucebox/provenance.json";

#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    #[error("{path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("{path}: {source}")]
    Parse { path: PathBuf, source: serde_json::Error },
}

/// Everything `lucebox version` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Provenance {
    pub version: String,
    /// Full commit hash; `None` when built outside git without `LUCEBOX_GIT_COMMIT`.
    pub git_commit: Option<String>,
    /// Tracked files differed from the commit (as of the last index change seen by the build).
    pub git_dirty: Option<bool>,
    /// RFC 3339 UTC; `SOURCE_DATE_EPOCH` when set, for reproducible builds.
    pub build_date: String,
    pub rustc: String,
    pub target: String,
    pub profile: String,
    /// Engine source pins the build saw (`ci/pins.env`, `engine/recipes/pins.env`).
    pub engine_pins: BTreeMap<String, String>,
    /// Present inside a Lucebox image.
    pub image: Option<ImageProvenance>,
}

/// What the image build recorded; mirrors the image's `org.opencontainers.image.*` and
/// `dev.lucebox.*` labels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageProvenance {
    pub title: String,
    pub version: String,
    pub revision: String,
    pub created: String,
    /// Engine variants the image carries (`cuda`, `rocm`, `vulkan`, `cpu`).
    pub variants: Vec<String>,
    /// Upstream engine commits by engine name.
    #[serde(default)]
    pub engine_commits: BTreeMap<String, String>,
    #[serde(default)]
    pub cuda_version: Option<String>,
    #[serde(default)]
    pub cuda_archs: Option<String>,
    #[serde(default)]
    pub rocm_version: Option<String>,
    #[serde(default)]
    pub rocm_targets: Option<String>,
}

impl Provenance {
    /// What was compiled into this binary, without image facts.
    pub fn of_binary() -> Self {
        Self {
            version: env!("CARGO_PKG_VERSION").to_string(),
            git_commit: build_info::GIT_COMMIT.map(str::to_string),
            git_dirty: build_info::GIT_DIRTY,
            build_date: build_info::BUILD_DATE.to_string(),
            rustc: build_info::RUSTC.to_string(),
            target: build_info::TARGET.to_string(),
            profile: build_info::PROFILE.to_string(),
            engine_pins: build_info::ENGINE_PINS
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect(),
            image: None,
        }
    }

    /// The binary's provenance plus the image's, read from `image_file` when it exists.
    pub fn load(image_file: &Path) -> Result<Self, VersionError> {
        let mut provenance = Self::of_binary();
        provenance.image = ImageProvenance::read(image_file)?;
        Ok(provenance)
    }

    /// Short human form, one fact per line.
    pub fn render(&self) -> String {
        let commit = self.git_commit.as_deref().unwrap_or("unknown");
        let dirty = if self.git_dirty == Some(true) { " (dirty)" } else { "" };
        let mut out = format!(
            "lucebox {}\ncommit      {commit}{dirty}\nbuilt       {}\nrustc       {}\ntarget      {} ({})\n",
            self.version, self.build_date, self.rustc, self.target, self.profile
        );
        for (key, value) in &self.engine_pins {
            out.push_str(&format!("pin         {key}={value}\n"));
        }
        if let Some(image) = &self.image {
            out.push_str(&format!(
                "image       {} {} ({}, created {})\nvariants    {}\n",
                image.title,
                image.version,
                image.revision,
                image.created,
                image.variants.join(", ")
            ));
            for (engine, commit) in &image.engine_commits {
                out.push_str(&format!("engine      {engine} {commit}\n"));
            }
            if let Some(cuda) = &image.cuda_version {
                out.push_str(&format!(
                    "cuda        {cuda} [{}]\n",
                    image.cuda_archs.as_deref().unwrap_or("")
                ));
            }
            if let Some(rocm) = &image.rocm_version {
                out.push_str(&format!(
                    "rocm        {rocm} [{}]\n",
                    image.rocm_targets.as_deref().unwrap_or("")
                ));
            }
        }
        out
    }
}

impl ImageProvenance {
    /// `None` when the file does not exist (not running from an image).
    pub fn read(path: &Path) -> Result<Option<Self>, VersionError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(VersionError::Read { path: path.to_path_buf(), source }),
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|source| VersionError::Parse { path: path.to_path_buf(), source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_provenance_carries_the_build_facts() {
        let p = Provenance::of_binary();
        assert_eq!(p.version, env!("CARGO_PKG_VERSION"));
        assert!(p.build_date.ends_with('Z') && p.build_date.len() == 20, "{}", p.build_date);
        assert!(p.rustc.starts_with("rustc "), "{}", p.rustc);
        // ci/pins.env is part of the repository, so its pins are always compiled in.
        assert!(p.engine_pins.contains_key("LLAMA_CPP_COMMIT"), "{:?}", p.engine_pins);
    }

    #[test]
    fn image_file_is_optional_but_must_parse_when_present() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none.json");
        assert_eq!(Provenance::load(&missing).unwrap().image, None);
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, r#"{"title":"x","surprise":1}"#).unwrap();
        let err = Provenance::load(&bad).unwrap_err().to_string();
        assert!(err.contains("bad.json"), "{err}");
    }
}
