//! `lucebox install-appliance`: puts the appliance's systemd unit, firmware hooks, default config
//! and this binary in place below a prefix (`/` on a Lucebox, a temp dir in tests). Everything it
//! writes is embedded in the binary at build time, so the binary alone is the installer.

use std::io;
use std::path::{Path, PathBuf};

use crate::fsutil::write_atomic_with_mode;

mod bundle {
    include!(concat!(env!("OUT_DIR"), "/hooks_bundle.rs"));
}

/// Where the unit's `ExecStart` runs the supervisor from.
pub const BINARY_PATH: &str = "/usr/local/bin/lucebox";
pub const UNIT_PATH: &str = "/etc/systemd/system/lucebox.service";
pub const CONFIG_PATH: &str = crate::config::DEFAULT_CONFIG_FILE;
/// The systemd units live in the bundle under this folder; they are installed as units, not hooks.
const UNITS_DIR: &str = "systemd/";

/// Appliance defaults: the status page on the LAN and appliance mode on. Written only when no
/// config exists, so an owner's edits survive reinstalls.
const DEFAULT_CONFIG: &str =
    "# Written by `lucebox install-appliance`; edit freely, reinstalling keeps it.\n\
appliance = true\n\n[web]\nbind = \"0.0.0.0\"\nmdns = true\n\n\
# APU power limits in watts, sent to the board's `power-limit` hook at start (Strix Halo boxes):\n\
# [hooks]\n\
# power_limit = { stapm_w = 85, fast_w = 120, slow_w = 100 }\n";

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("{path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("reading this binary {path}: {source}")]
    ReadBinary { path: PathBuf, source: io::Error },
    #[error("the build embedded no {0}; firmware-hooks/ was missing at build time")]
    MissingFromBundle(&'static str),
}

/// What an install wrote (paths below the prefix).
#[derive(Debug, Default, serde::Serialize)]
pub struct InstallReport {
    pub written: Vec<PathBuf>,
    /// Existing files left alone (the config).
    pub kept: Vec<PathBuf>,
}

/// Where the hooks go on the target system (below the prefix).
pub fn hooks_dir() -> &'static Path {
    Path::new(crate::hooks::DEFAULT_HOOKS_DIR)
}

/// Installs below `prefix`: `binary` to [`BINARY_PATH`], the unit to [`UNIT_PATH`], the hooks
/// under [`hooks_dir`], and the default config unless one exists.
pub fn install(prefix: &Path, binary: &Path) -> Result<InstallReport, InstallError> {
    let mut report = InstallReport::default();
    let mut unit_found = false;
    for (relative, contents, mode) in bundle::HOOK_FILES {
        let target = match relative.strip_prefix(UNITS_DIR) {
            Some(unit) => {
                unit_found |= unit == "lucebox.service";
                Path::new("/etc/systemd/system").join(unit)
            }
            None => hooks_dir().join(relative),
        };
        write(prefix, &target, contents, *mode, &mut report)?;
    }
    if !unit_found {
        return Err(InstallError::MissingFromBundle("systemd/lucebox.service"));
    }

    let exe = std::fs::read(binary)
        .map_err(|source| InstallError::ReadBinary { path: binary.to_path_buf(), source })?;
    write(prefix, Path::new(BINARY_PATH), &exe, 0o755, &mut report)?;

    let config = below(prefix, Path::new(CONFIG_PATH));
    if config.exists() {
        report.kept.push(config);
    } else {
        write(prefix, Path::new(CONFIG_PATH), DEFAULT_CONFIG.as_bytes(), 0o644, &mut report)?;
    }
    Ok(report)
}

fn write(
    prefix: &Path,
    target: &Path,
    contents: &[u8],
    mode: u32,
    report: &mut InstallReport,
) -> Result<(), InstallError> {
    let path = below(prefix, target);
    write_atomic_with_mode(&path, contents, Some(mode))
        .map_err(|source| InstallError::Write { path: path.clone(), source })?;
    // The umask may have narrowed the mode at creation; hooks must be executable.
    set_mode(&path, mode).map_err(|source| InstallError::Write { path: path.clone(), source })?;
    report.written.push(path);
    Ok(())
}

fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

fn below(prefix: &Path, absolute: &Path) -> PathBuf {
    prefix.join(absolute.strip_prefix("/").unwrap_or(absolute))
}

#[cfg(test)]
// figment::Jail's closures must return figment::Error, which is large by design.
#[allow(clippy::result_large_err)]
mod tests {
    use super::*;

    #[test]
    fn the_default_config_loads_and_so_does_its_example() {
        // In a jail: other tests set `LUCEBOX_*` variables, which the configuration reads.
        figment::Jail::expect_with(|jail| {
            let load = |text: &str| {
                std::fs::write(jail.directory().join("lucebox.toml"), text).map_err(|e| e.to_string())?;
                crate::config::Config::load(Some(Path::new("lucebox.toml")), figment::Figment::new())
                    .map_err(|e| figment::Error::from(e.to_string()))
            };
            let config = load(DEFAULT_CONFIG)?;
            assert!(config.appliance && config.web.mdns);
            assert_eq!(config.hooks.power_limit, None);
            let example =
                DEFAULT_CONFIG.replace("# [hooks]", "[hooks]").replace("# power_limit", "power_limit");
            let limit = load(&example)?.hooks.power_limit.expect("the example sets a limit");
            assert_eq!((limit.stapm_w, limit.fast_w, limit.slow_w), (85, 120, 100));
            Ok(())
        });
    }
}
