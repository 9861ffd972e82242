//! What a device's control loop has learned, kept in the state directory so that a restarted box
//! resumes it instead of relearning from the generic priors: the thermal model and the load
//! forecast (per-phase power, engine rates, prompt sizes, the arrival pattern). Each is a JSON
//! file written atomically. A missing file starts from the prior; an unreadable, corrupt, older
//! or implausible one also does, and the loop reports why, naming the file and field.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::forecast::PowerForecast;
use super::model::ModelParams;
use super::ThermalError;

/// The first implausible value of a loaded state, as (field, why).
type Check<T> = fn(&T) -> Result<(), (&'static str, String)>;

/// Where one device's learned state lives: `<state_dir>/thermal/<pci address>-<uid>.json` (the
/// thermal model) and `<…>.forecast.json` (the load forecast).
#[derive(Debug, Clone)]
pub struct LearnedFiles {
    pub model: PathBuf,
    pub forecast: PathBuf,
}

/// What a restart resumes from, and why any part of it is not.
#[derive(Debug)]
pub struct Resumed {
    /// The learned model; none where it is missing or cannot be used (the caller picks a prior).
    pub params: Option<ModelParams>,
    /// The learned forecast; none where it is missing or cannot be used (the controller starts
    /// from its device's priors).
    pub forecast: Option<PowerForecast>,
    pub errors: Vec<ThermalError>,
}

impl LearnedFiles {
    pub fn for_device(state_dir: &Path, device_id: &str, uid: Option<&str>) -> Self {
        let key = format!("{device_id}-{}", uid.unwrap_or("nouid"));
        let safe: String = key
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' })
            .collect();
        let dir = state_dir.join("thermal");
        Self { model: dir.join(format!("{safe}.json")), forecast: dir.join(format!("{safe}.forecast.json")) }
    }

    /// Loads both parts; each that is missing or cannot be used is left to its prior on its own
    /// (a bad forecast file does not cost the model).
    pub fn load(&self) -> Resumed {
        adopt_legacy(&self.model);
        fn usable<T>(loaded: Result<Option<T>, ThermalError>, errors: &mut Vec<ThermalError>) -> Option<T> {
            loaded.unwrap_or_else(|e| {
                errors.push(e);
                None
            })
        }
        let mut errors = Vec::new();
        let params = usable(read(&self.model, ModelParams::check), &mut errors);
        let forecast = usable(read(&self.forecast, PowerForecast::check), &mut errors);
        Resumed { params, forecast, errors }
    }

    /// Saves both parts (each atomically); the first failure is returned after both were tried.
    pub fn save(&self, params: &ModelParams, forecast: &PowerForecast) -> Result<(), ThermalError> {
        let model = write(&self.model, params);
        let forecast = write(&self.forecast, forecast);
        model.and(forecast)
    }
}

/// Earlier builds of `lucebox run` kept the model one folder deeper (`thermal/thermal/`, where
/// `lucebox thermal control` did not look): move it up once, so an update keeps what the box
/// learned. A file already in the right place wins.
fn adopt_legacy(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else { return };
    let legacy = dir.join("thermal").join(name);
    if !path.exists() && legacy.is_file() {
        if let Err(e) = std::fs::rename(&legacy, path) {
            tracing::warn!("could not move {} to {}: {e}", legacy.display(), path.display());
        }
    }
}

/// Reads a learned state that passes `check`: `None` where the file does not exist.
pub fn read<T: DeserializeOwned>(path: &Path, check: Check<T>) -> Result<Option<T>, ThermalError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(ThermalError::Io { path: path.to_path_buf(), source }),
    };
    let invalid = |field: &str, why: String| ThermalError::Invalid {
        path: path.to_path_buf(),
        field: field.into(),
        why,
    };
    // serde_json names the missing or mistyped field and the line.
    let state: T = serde_json::from_slice(&bytes).map_err(|e| invalid("json", e.to_string()))?;
    check(&state).map_err(|(field, why)| invalid(field, why))?;
    Ok(Some(state))
}

/// Writes a learned state atomically (temp file, fsync, rename): a crash leaves the old one.
pub fn write<T: Serialize>(path: &Path, state: &T) -> Result<(), ThermalError> {
    let json = serde_json::to_vec_pretty(state).map_err(|e| ThermalError::Invalid {
        path: path.to_path_buf(),
        field: "json".into(),
        why: e.to_string(),
    })?;
    crate::fsutil::write_atomic(path, &json)
        .map_err(|source| ThermalError::Io { path: path.to_path_buf(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_safe_and_per_device() {
        let files = LearnedFiles::for_device(Path::new("/s"), "0000:03:00.0", Some("abc/def"));
        assert_eq!(files.model, Path::new("/s/thermal/0000_03_00.0-abc_def.json"));
        assert_eq!(files.forecast, Path::new("/s/thermal/0000_03_00.0-abc_def.forecast.json"));
        let other = LearnedFiles::for_device(Path::new("/s"), "0000:04:00.0", None);
        assert_eq!(other.model, Path::new("/s/thermal/0000_04_00.0-nouid.json"));
    }

    #[test]
    fn missing_files_resume_the_priors_without_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let resumed = LearnedFiles::for_device(dir.path(), "0000:03:00.0", None).load();
        assert!(resumed.errors.is_empty(), "{:?}", resumed.errors);
        assert_eq!(resumed.params, None);
        assert!(resumed.forecast.is_none());
    }

    #[test]
    fn saved_state_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let files = LearnedFiles::for_device(dir.path(), "0000:03:00.0", Some("GPU-1"));
        let mut params = ModelParams::prior();
        params.r_js_k_per_w = 0.11;
        let mut forecast = PowerForecast::new();
        let idle = lucebox_engine::LoadSignal::default();
        for _ in 0..20 {
            forecast.observe(&idle, 42.0, 1.0);
        }
        files.save(&params, &forecast).unwrap();
        let resumed = files.load();
        assert!(resumed.errors.is_empty(), "{:?}", resumed.errors);
        assert_eq!(resumed.params, Some(params));
        let resumed_idle_w = resumed.forecast.map(|f| f.idle_w());
        assert_eq!(resumed_idle_w, Some(forecast.idle_w()));
        assert!((forecast.idle_w() - 42.0).abs() < 0.5, "{}", forecast.idle_w());
    }

    #[test]
    fn a_model_in_the_old_nested_folder_is_adopted() {
        let dir = tempfile::tempdir().unwrap();
        let files = LearnedFiles::for_device(dir.path(), "0000:03:00.0", None);
        let legacy = dir.path().join("thermal/thermal/0000_03_00.0-nouid.json");
        let mut params = ModelParams::prior();
        params.r_js_k_per_w = 0.11;
        write(&legacy, &params).unwrap();
        let resumed = files.load();
        assert!(resumed.errors.is_empty(), "{:?}", resumed.errors);
        assert_eq!(resumed.params, Some(params));
        assert!(files.model.is_file() && !legacy.exists());
    }

    /// Each bad file costs only its own part and is reported with the file and field.
    #[test]
    fn a_bad_file_falls_back_to_its_prior_and_names_the_file_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let files = LearnedFiles::for_device(dir.path(), "0000:03:00.0", None);
        let mut params = ModelParams::prior();
        params.r_js_k_per_w = 0.11;
        files.save(&params, &PowerForecast::new()).unwrap();

        let saved = std::fs::read_to_string(&files.forecast).unwrap();
        let mut json: serde_json::Value = serde_json::from_str(&saved).unwrap();
        json["busy_share"] = serde_json::json!(3.0);
        std::fs::write(&files.forecast, json.to_string()).unwrap();
        let resumed = files.load();
        assert_eq!(resumed.params, Some(params.clone()), "the model survives a bad forecast file");
        let [e] = &resumed.errors[..] else { panic!("{:?}", resumed.errors) };
        let message = e.to_string();
        assert!(message.contains("forecast.json") && message.contains("busy_share"), "{message}");

        std::fs::write(&files.model, b"{not json").unwrap();
        std::fs::write(&files.forecast, saved.replace("\"prefill_w\"", "\"prefill\"")).unwrap();
        let resumed = files.load();
        assert_eq!(resumed.params, None);
        let messages: Vec<String> = resumed.errors.iter().map(ToString::to_string).collect();
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert!(messages[0].contains("-nouid.json: json:"), "{messages:?}");
        assert!(messages[1].contains("missing field `prefill_w`"), "{messages:?}");

        let mut older = params.clone();
        older.version = 2;
        write(&files.model, &older).unwrap();
        let e = read(&files.model, ModelParams::check).unwrap_err().to_string();
        assert!(e.contains("version: format 2, this build reads 3"), "{e}");

        let mut hot = params.clone();
        hot.firmware_stops_below_c = Some(500.0);
        write(&files.model, &hot).unwrap();
        let e = read(&files.model, ModelParams::check).unwrap_err().to_string();
        assert!(e.contains("firmware_stops_below_c: 500 is outside"), "{e}");
    }
}
