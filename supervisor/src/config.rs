//! Configuration: built-in defaults < `/etc/lucebox/lucebox.toml` (or `--config`) < pins set
//! through the web API (`<state_dir>/pins.toml`) < `LUCEBOX_*` environment < CLI flags. Validated
//! once at load; unknown keys are errors that name the key.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};

pub const DEFAULT_CONFIG_FILE: &str = "/etc/lucebox/lucebox.toml";
pub const DEFAULT_STATE_DIR: &str = "/var/lib/lucebox";
/// Pins set through the web API, in the state directory; they beat the configuration file's
/// pins (they are the operator's later word) and lose to the environment and CLI flags.
pub const PINS_FILE: &str = "pins.toml";
pub const DEFAULT_ENGINES_DIR: &str = "/usr/lib/lucebox/engines";
/// Where the image installs its built-in profiles and variants manifest.
pub const IMAGE_SHARE_DIR: &str = "/usr/share/lucebox";
/// The source tree's copies, for a supervisor run from a checkout.
const SOURCE_PROFILES_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../profiles");
const SOURCE_VARIANTS_FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../engine/variants.toml");

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    // figment::Error is large; boxed so every Result carrying it stays small.
    #[error("configuration: {0}")]
    Invalid(Box<figment::Error>),
    #[error("configuration: {key}: {message}")]
    Value { key: &'static str, message: String },
}

impl From<figment::Error> for ConfigError {
    fn from(e: figment::Error) -> Self {
        ConfigError::Invalid(Box::new(e))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeMode {
    /// Child process inside a container, Docker containers on a host with a Docker socket.
    #[default]
    Auto,
    Process,
    Docker,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Installed profile sets, learned thermal models, OTA metadata, the API token.
    pub state_dir: PathBuf,
    /// Profiles to plan from; when unset, the OTA-installed set, then the image's built-in set.
    pub profiles_dir: Option<PathBuf>,
    /// Engine variants manifest; when unset, the image's `engine/variants.toml`.
    pub variants_file: Option<PathBuf>,
    /// Where model files live (content-addressed store and plain files named by profiles).
    pub models_dir: Option<PathBuf>,
    /// Where the image keeps its engine builds (`<engines_dir>/<variant binary>`).
    pub engines_dir: PathBuf,
    /// Read every sysfs/procfs path below this directory (a captured tree in tests).
    pub root: Option<PathBuf>,
    pub engine: EngineConfig,
    pub web: WebConfig,
    pub runtime: RuntimeConfig,
    /// Per-device overrides of the plan, keyed by device id (PCI address) or `default`.
    pub pin: BTreeMap<String, Pin>,
    /// Running as the Lucebox appliance (systemd, LAN-facing status page, mDNS).
    pub appliance: bool,
    pub ota: OtaConfig,
    pub hooks: HooksConfig,
}

/// The board's firmware hooks (`firmware-hooks/`): where they are, and what `lucebox run` tells them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HooksConfig {
    /// One folder per board; `lucebox install-appliance` puts the shipped hooks here.
    pub dir: PathBuf,
    /// APU power limits sent to the board's `power-limit` hook when `lucebox run` starts; none:
    /// the firmware's own limits stay.
    pub power_limit: Option<PowerLimit>,
}

/// APU package power limits in watts (Strix Halo boxes: `ryzenadj`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowerLimit {
    /// Sustained (STAPM) limit.
    pub stapm_w: u32,
    /// Short boost limit.
    pub fast_w: u32,
    /// Long boost limit; at most `fast_w`.
    pub slow_w: u32,
}

impl PowerLimit {
    /// The `power-limit` hook event, validated (each limit within what a hook accepts).
    pub fn event(&self) -> Result<crate::hooks::HookEvent, crate::hooks::EventError> {
        let mw = |w: u32| w.saturating_mul(1000);
        crate::hooks::HookEvent::power_limit(mw(self.stapm_w), mw(self.fast_w), mw(self.slow_w))
    }
}

/// Where signed profile updates come from.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OtaConfig {
    /// `http(s)://host/path` or a local directory (USB stick) holding `metadata/` and `targets/`.
    pub repository: Option<String>,
    /// The root of trust shipped with the box; default `<state_dir>/ota/root.json`.
    pub trusted_root: Option<PathBuf>,
    /// PEM file of extra CA certificates HTTPS sources may chain to (beside the bundled Mozilla
    /// roots), for an update server with a private CA.
    pub ca_file: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineConfig {
    /// Port of the first engine's OpenAI-compatible API; a second engine gets the next port.
    pub port: u16,
    pub host: IpAddr,
    /// Threads for CPU engines; 0 lets the engine choose.
    pub threads: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebConfig {
    pub port: u16,
    /// 127.0.0.1 off-appliance; the appliance config sets 0.0.0.0.
    pub bind: IpAddr,
    pub mdns: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeConfig {
    pub mode: RuntimeMode,
    pub docker_socket: PathBuf,
    /// Image the Docker runtime starts engines from.
    pub engine_image: String,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pin {
    pub profile: Option<String>,
    pub variant: Option<String>,
}

/// `<state_dir>/pins.toml`: `[pin."<device id>|default"]` tables with `profile` and `variant`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinsFile {
    #[serde(default)]
    pub pin: BTreeMap<String, Pin>,
}

impl PinsFile {
    /// `None` when the file does not exist; a malformed file is an error naming it and the key.
    pub fn load(path: &Path) -> Result<Option<Self>, ConfigError> {
        let invalid = |message: String| ConfigError::Value { key: "pin", message };
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(invalid(format!("{}: {e}", path.display()))),
        };
        toml::from_str(&text).map(Some).map_err(|e| invalid(format!("{}: {e}", path.display())))
    }

    /// Records `pin` for `device` in the file at `path`, keeping its other pins; written atomically.
    pub fn record(path: &Path, device: &str, pin: Pin) -> Result<(), ConfigError> {
        let mut file = Self::load(path)?.unwrap_or_default();
        file.pin.insert(device.to_string(), pin);
        file.save(path)
            .map_err(|e| ConfigError::Value { key: "pin", message: format!("{}: {e}", path.display()) })
    }

    /// Written atomically, so a crash leaves the old pins or the new ones.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let text = toml::to_string(self).map_err(std::io::Error::other)?;
        let header = "# Pins set through the web API (POST /api/v1/pin); written by lucebox run.\n";
        crate::fsutil::write_atomic(path, format!("{header}{text}").as_bytes())
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            profiles_dir: None,
            variants_file: None,
            models_dir: None,
            engines_dir: PathBuf::from(DEFAULT_ENGINES_DIR),
            root: None,
            engine: EngineConfig::default(),
            web: WebConfig::default(),
            runtime: RuntimeConfig::default(),
            pin: BTreeMap::new(),
            appliance: false,
            ota: OtaConfig::default(),
            hooks: HooksConfig::default(),
        }
    }
}

impl Default for HooksConfig {
    fn default() -> Self {
        Self { dir: PathBuf::from(crate::hooks::DEFAULT_HOOKS_DIR), power_limit: None }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self { port: 8080, host: IpAddr::from([127, 0, 0, 1]), threads: 0 }
    }
}

impl Default for WebConfig {
    fn default() -> Self {
        Self { port: 8090, bind: IpAddr::from([127, 0, 0, 1]), mdns: false }
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            mode: RuntimeMode::Auto,
            docker_socket: PathBuf::from("/var/run/docker.sock"),
            engine_image: "lucebox/engine-cpu:test".to_string(),
        }
    }
}

impl Config {
    /// Loads the layered configuration. `file` replaces the default file path; a missing default
    /// file is fine, a missing named file is an error. `overrides` are the CLI flags, applied last.
    pub fn load(file: Option<&Path>, overrides: Figment) -> Result<Self, ConfigError> {
        // The pins file lives in the state directory, which the other layers decide: a first pass
        // finds it, a second merges it between the file and the environment.
        let config = Self::layered(file, None, overrides.clone())?;
        let pins_path = config.state_dir.join(PINS_FILE);
        let config = match PinsFile::load(&pins_path)? {
            Some(pins) => Self::layered(file, Some(pins), overrides)?,
            None => config,
        };
        config.validate()?;
        Ok(config)
    }

    fn layered(file: Option<&Path>, pins: Option<PinsFile>, overrides: Figment) -> Result<Self, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        match file {
            Some(path) => {
                if !path.exists() {
                    return Err(ConfigError::Value {
                        key: "--config",
                        message: format!("{} does not exist", path.display()),
                    });
                }
                figment = figment.merge(Toml::file_exact(path));
            }
            None => figment = figment.merge(Toml::file(DEFAULT_CONFIG_FILE)),
        }
        if let Some(pins) = pins {
            figment = figment.merge(Serialized::defaults(pins));
        }
        Ok(figment
            .merge(Env::prefixed("LUCEBOX_").filter(|key| is_config_key(key.as_str())).split("__"))
            .merge(overrides)
            .extract()?)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.engine.port == 0 {
            return Err(ConfigError::Value { key: "engine.port", message: "must not be 0".into() });
        }
        if self.web.port == 0 {
            return Err(ConfigError::Value { key: "web.port", message: "must not be 0".into() });
        }
        if self.web.port == self.engine.port {
            return Err(ConfigError::Value {
                key: "web.port",
                message: format!("{} is also engine.port", self.web.port),
            });
        }
        if let Some(path) = &self.ota.ca_file {
            crate::ota::http::load_ca_file(path)
                .map_err(|e| ConfigError::Value { key: "ota.ca_file", message: e.to_string() })?;
        }
        if let Some(limit) = &self.hooks.power_limit {
            limit
                .event()
                .map_err(|e| ConfigError::Value { key: "hooks.power_limit", message: e.to_string() })?;
        }
        Ok(())
    }

    /// The OTA-installed profile set, when one is active.
    pub fn active_set_dir(&self) -> PathBuf {
        self.state_dir.join("sets/current")
    }

    /// Profiles to plan from: configured, else the active OTA set, else the image's, else the
    /// source tree's.
    pub fn profiles_dir(&self) -> PathBuf {
        first_existing([
            self.profiles_dir.clone(),
            Some(self.active_set_dir().join("profiles")),
            Some(Path::new(IMAGE_SHARE_DIR).join("profiles")),
        ])
        .unwrap_or_else(|| PathBuf::from(SOURCE_PROFILES_DIR))
    }

    /// Variants manifest: configured, else the active OTA set's pins, else the image's, else the
    /// source tree's.
    pub fn variants_file(&self) -> PathBuf {
        first_existing([
            self.variants_file.clone(),
            Some(self.active_set_dir().join("variants.toml")),
            Some(Path::new(IMAGE_SHARE_DIR).join("variants.toml")),
        ])
        .unwrap_or_else(|| PathBuf::from(SOURCE_VARIANTS_FILE))
    }

    pub fn models_dir(&self) -> PathBuf {
        self.models_dir.clone().unwrap_or_else(|| self.state_dir.join("models"))
    }
}

/// Top-level keys of [`Config`]: only `LUCEBOX_<KEY>` variables naming one of these configure the
/// supervisor; others (`LUCEBOX_LOG`, `LUCEBOX_CONFIG`, tool variables) are left alone.
const CONFIG_KEYS: &[&str] = &[
    "state_dir",
    "profiles_dir",
    "variants_file",
    "models_dir",
    "engines_dir",
    "root",
    "engine",
    "web",
    "runtime",
    "pin",
    "appliance",
    "ota",
    "hooks",
];

/// The pins `LUCEBOX_PIN__<device>__{PROFILE,VARIANT}` set, by device (or `default`). They beat
/// pins set through the API, which therefore cannot change them.
pub fn pins_from_environment() -> BTreeMap<String, Pin> {
    let env = Env::prefixed("LUCEBOX_").filter(|key| key.as_str().to_ascii_lowercase().starts_with("pin__"));
    Figment::from(env.split("__")).extract_inner("pin").unwrap_or_default()
}

fn is_config_key(env_key: &str) -> bool {
    let top = env_key.split("__").next().unwrap_or_default().to_ascii_lowercase();
    CONFIG_KEYS.contains(&top.as_str())
}

/// The first candidate that exists; an explicitly configured path is returned even when missing,
/// so the error names it instead of silently using another.
fn first_existing<const N: usize>(candidates: [Option<PathBuf>; N]) -> Option<PathBuf> {
    let mut iter = candidates.into_iter();
    if let Some(Some(configured)) = iter.next() {
        return Some(configured);
    }
    iter.flatten().find(|p| p.exists())
}

#[cfg(test)]
// figment::Jail's closures must return figment::Error, which is large by design.
#[allow(clippy::result_large_err)]
mod tests {
    use super::*;

    #[test]
    fn layers_apply_in_order() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("lucebox.toml", "[web]\nport = 9000\n[engine]\nport = 9100\n")?;
            jail.set_env("LUCEBOX_WEB__PORT", "9001");
            let config =
                Config::load(Some(Path::new("lucebox.toml")), Figment::new()).map_err(|e| e.to_string())?;
            assert_eq!(config.web.port, 9001, "env beats file");
            assert_eq!(config.engine.port, 9100, "file beats default");
            let flags = Figment::from(Serialized::default("web.port", 9002));
            let config = Config::load(Some(Path::new("lucebox.toml")), flags).map_err(|e| e.to_string())?;
            assert_eq!(config.web.port, 9002, "flags beat env");
            Ok(())
        });
    }

    #[test]
    fn unrelated_environment_is_ignored_but_config_keys_are_strict() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("LUCEBOX_LLAMA_SERVER", "/usr/bin/llama-server");
            jail.set_env("LUCEBOX_ENGINE__PORT", "9300");
            let config = Config::load(None, Figment::new()).map_err(|e| e.to_string())?;
            assert_eq!(config.engine.port, 9300);
            jail.set_env("LUCEBOX_ENGINE__PROT", "1");
            let err = Config::load(None, Figment::new()).unwrap_err();
            assert!(err.to_string().contains("prot"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn config_keys_list_matches_the_struct() {
        let value = serde_json::to_value(Config::default()).unwrap();
        let mut keys: Vec<&str> = value.as_object().unwrap().keys().map(String::as_str).collect();
        let mut listed = CONFIG_KEYS.to_vec();
        keys.sort();
        listed.sort();
        assert_eq!(keys, listed);
    }

    #[test]
    fn unknown_key_is_named() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("lucebox.toml", "[web]\nprot = 9000\n")?;
            let err = Config::load(Some(Path::new("lucebox.toml")), Figment::new()).unwrap_err();
            assert!(err.to_string().contains("prot"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn state_pins_beat_the_file_and_lose_to_the_environment() {
        figment::Jail::expect_with(|jail| {
            let state = jail.directory().join("state");
            jail.create_file(
                "lucebox.toml",
                &format!(
                    "state_dir = {:?}\n[pin.cpu]\nprofile = \"from-file\"\n[pin.default]\nprofile = \"d\"\n",
                    state
                ),
            )?;
            let mut pins = PinsFile::default();
            pins.pin.insert("cpu".into(), Pin { profile: Some("from-api".into()), variant: None });
            pins.save(&state.join(PINS_FILE)).map_err(|e| e.to_string())?;
            let config =
                Config::load(Some(Path::new("lucebox.toml")), Figment::new()).map_err(|e| e.to_string())?;
            assert_eq!(config.pin["cpu"].profile.as_deref(), Some("from-api"));
            assert_eq!(config.pin["default"].profile.as_deref(), Some("d"), "other file pins stay");
            jail.set_env("LUCEBOX_PIN__CPU__PROFILE", "from-env");
            let config =
                Config::load(Some(Path::new("lucebox.toml")), Figment::new()).map_err(|e| e.to_string())?;
            assert_eq!(config.pin["cpu"].profile.as_deref(), Some("from-env"));
            std::fs::write(state.join(PINS_FILE), "[pin.cpu]\nprofle = \"x\"\n")
                .map_err(|e| e.to_string())?;
            let err = Config::load(Some(Path::new("lucebox.toml")), Figment::new()).unwrap_err().to_string();
            assert!(err.contains("pins.toml") && err.contains("profle"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn the_environments_pins_are_known_apart() {
        figment::Jail::expect_with(|jail| {
            assert!(pins_from_environment().is_empty());
            jail.set_env("LUCEBOX_PIN__CPU__PROFILE", "tiny");
            jail.set_env("LUCEBOX_WEB__PORT", "9001");
            let pins = pins_from_environment();
            assert_eq!(pins.keys().collect::<Vec<_>>(), ["cpu"]);
            assert_eq!(pins["cpu"].profile.as_deref(), Some("tiny"));
            Ok(())
        });
    }

    #[test]
    fn a_bad_ota_ca_file_is_named() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("not-a-cert.pem", "hello\n")?;
            jail.create_file("lucebox.toml", "[ota]\nca_file = \"not-a-cert.pem\"\n")?;
            let err = Config::load(Some(Path::new("lucebox.toml")), Figment::new()).unwrap_err().to_string();
            assert!(err.contains("ota.ca_file") && err.contains("not-a-cert.pem"), "{err}");
            jail.set_env("LUCEBOX_OTA__CA_FILE", "missing.pem");
            let err = Config::load(Some(Path::new("lucebox.toml")), Figment::new()).unwrap_err().to_string();
            assert!(err.contains("ota.ca_file") && err.contains("missing.pem"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn a_power_limit_a_hook_would_refuse_is_named() {
        figment::Jail::expect_with(|jail| {
            let limit = "[hooks.power_limit]\nstapm_w = 85\nfast_w = 120\n";
            jail.create_file("lucebox.toml", &format!("{limit}slow_w = 100\n"))?;
            let config =
                Config::load(Some(Path::new("lucebox.toml")), Figment::new()).map_err(|e| e.to_string())?;
            let event = config.hooks.power_limit.map(|l| l.event());
            let expected = crate::hooks::HookEvent::power_limit(85_000, 120_000, 100_000);
            assert_eq!(event, Some(expected));
            jail.create_file("lucebox.toml", &format!("{limit}slow_w = 130\n"))?;
            let err = Config::load(Some(Path::new("lucebox.toml")), Figment::new()).unwrap_err().to_string();
            assert!(err.contains("hooks.power_limit") && err.contains("slow_mw 130000"), "{err}");
            jail.create_file("lucebox.toml", &format!("{limit}slow_w = 0\n"))?;
            let err = Config::load(Some(Path::new("lucebox.toml")), Figment::new()).unwrap_err().to_string();
            assert!(err.contains("hooks.power_limit") && err.contains("slow_mw = 0"), "{err}");
            jail.create_file("lucebox.toml", "[hooks.power_limit]\nstapm_w = 85\n")?;
            let err = Config::load(Some(Path::new("lucebox.toml")), Figment::new()).unwrap_err().to_string();
            assert!(err.contains("fast_w"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn clashing_ports_are_rejected() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("lucebox.toml", "[web]\nport = 8080\n")?;
            let err = Config::load(Some(Path::new("lucebox.toml")), Figment::new()).unwrap_err();
            assert!(err.to_string().contains("web.port"), "{err}");
            Ok(())
        });
    }
}
