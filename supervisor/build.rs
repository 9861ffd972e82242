//! Build-time facts compiled into `lucebox`:
//! - provenance for `lucebox version` (git commit and dirty flag, build date honouring
//!   `SOURCE_DATE_EPOCH`, rustc, engine pins from `ci/pins.env` and `engine/recipes/upstream.env`);
//!   a build without `.git` (an image build) takes `LUCEBOX_GIT_COMMIT` / `LUCEBOX_GIT_DIRTY`;
//! - the `firmware-hooks/` tree, embedded so `lucebox install-appliance` needs nothing but the binary.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

/// Pin files whose `KEY=VALUE` lines are engine pins, relative to the repository root.
const PIN_FILES: [&str; 2] = ["ci/pins.env", "engine/recipes/upstream.env"];

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let repo = manifest_dir.parent().expect("supervisor/ lives in the repository").to_path_buf();
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));

    for var in ["SOURCE_DATE_EPOCH", "LUCEBOX_GIT_COMMIT", "LUCEBOX_GIT_DIRTY"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    watch_git(&repo);

    let mut info = String::new();
    let commit = env::var("LUCEBOX_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&repo, &["rev-parse", "HEAD"]));
    let dirty = match env::var("LUCEBOX_GIT_DIRTY").ok().as_deref() {
        Some("true" | "1") => Some(true),
        Some("false" | "0") => Some(false),
        _ => git(&repo, &["status", "--porcelain", "--untracked-files=no"]).map(|s| !s.is_empty()),
    };
    let epoch = build_epoch();
    let rustc = Command::new(env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .arg("-V")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    writeln!(info, "pub const GIT_COMMIT: Option<&str> = {commit:?};").unwrap();
    writeln!(info, "pub const GIT_DIRTY: Option<bool> = {dirty:?};").unwrap();
    writeln!(info, "pub const BUILD_DATE: &str = {:?};", rfc3339(epoch)).unwrap();
    writeln!(info, "pub const RUSTC: &str = {rustc:?};").unwrap();
    writeln!(info, "pub const TARGET: &str = {:?};", env::var("TARGET").unwrap_or_default()).unwrap();
    writeln!(info, "pub const PROFILE: &str = {:?};", env::var("PROFILE").unwrap_or_default()).unwrap();
    let mut pins = Vec::new();
    for file in PIN_FILES {
        let path = repo.join(file);
        watch_existing(&path);
        if let Ok(text) = fs::read_to_string(&path) {
            pins.extend(parse_pins(&text));
        }
    }
    writeln!(info, "pub const ENGINE_PINS: &[(&str, &str)] = &{pins:?};").unwrap();
    fs::write(out_dir.join("build_info.rs"), info).expect("writing build_info.rs");

    let hooks = repo.join("firmware-hooks");
    println!("cargo:rerun-if-changed={}", hooks.display());
    let mut files = Vec::new();
    collect_files(&hooks, &hooks, &mut files);
    files.sort();
    let mut bundle = String::from("pub const HOOK_FILES: &[(&str, &[u8], u32)] = &[\n");
    for (relative, absolute, mode) in files {
        writeln!(bundle, "    ({relative:?}, include_bytes!({absolute:?}), {mode:#o}),").unwrap();
    }
    bundle.push_str("];\n");
    fs::write(out_dir.join("hooks_bundle.rs"), bundle).expect("writing hooks_bundle.rs");
}

fn git(repo: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git").arg("-C").arg(repo).args(args).output().ok()?;
    output.status.success().then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// Reruns the script when HEAD moves, a branch is committed to or the index changes.
fn watch_git(repo: &Path) {
    let Some(git_dir) = git(repo, &["rev-parse", "--absolute-git-dir"]) else { return };
    let common = git(repo, &["rev-parse", "--git-common-dir"]).map(|c| {
        let path = PathBuf::from(c);
        if path.is_absolute() {
            path
        } else {
            repo.join(path)
        }
    });
    let git_dir = PathBuf::from(git_dir);
    for path in [git_dir.join("HEAD"), git_dir.join("index")] {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    if let Some(common) = common {
        // Only the branch HEAD names: other worktrees' commits must not rebuild this one.
        match git(repo, &["symbolic-ref", "-q", "HEAD"]) {
            Some(branch) if common.join(&branch).exists() => watch_existing(&common.join(branch)),
            _ => watch_existing(&common.join("packed-refs")),
        }
    }
}

/// Watches `path`, or while it does not exist the nearest folder above it, so its creation is
/// seen; cargo treats a watched path that does not exist as always changed (a rebuild every time).
fn watch_existing(path: &Path) {
    let watched = path.ancestors().find(|p| p.exists()).unwrap_or(path);
    println!("cargo:rerun-if-changed={}", watched.display());
}

fn build_epoch() -> u64 {
    match env::var("SOURCE_DATE_EPOCH") {
        Ok(value) => value
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("SOURCE_DATE_EPOCH={value:?} is not a number of seconds")),
        Err(_) => SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
    }
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (proleptic Gregorian, UTC).
fn rfc3339(epoch: u64) -> String {
    let days = (epoch / 86_400) as i64;
    let secs = epoch % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", secs / 3600, secs % 3600 / 60, secs % 60)
}

fn parse_pins(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().trim_matches('"').to_string()))
        .collect()
}

fn collect_files(base: &Path, dir: &Path, out: &mut Vec<(String, String, u32)>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = fs::metadata(&path) else { continue };
        if meta.is_dir() {
            collect_files(base, &path, out);
        } else if meta.is_file() {
            let relative = path.strip_prefix(base).expect("walked below base").to_string_lossy().into_owned();
            let mode = if meta.permissions().mode() & 0o111 != 0 { 0o755 } else { 0o644 };
            out.push((relative, path.to_string_lossy().into_owned(), mode));
        }
    }
}
