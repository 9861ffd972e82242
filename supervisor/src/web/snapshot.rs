//! The status model as JSON, encoded once per status version and shared by every reader (the
//! API and each SSE stream), so a burst of requests costs one encoding.

use std::sync::Mutex;

use bytes::Bytes;
use tokio::sync::watch;

use crate::status::StatusModel;

pub struct StatusJson {
    status: StatusModel,
    version: watch::Receiver<u64>,
    cached: Mutex<Option<(u64, Bytes)>>,
}

impl StatusJson {
    pub fn new(status: StatusModel) -> Self {
        let version = status.subscribe();
        Self { status, version, cached: Mutex::new(None) }
    }

    pub fn status(&self) -> &StatusModel {
        &self.status
    }

    /// The current status as JSON. Reads the version before the status, so a cached encoding is
    /// never older than the version it is filed under.
    pub fn current(&self) -> Result<Bytes, serde_json::Error> {
        let version = *self.version.borrow();
        if let Some((cached_version, bytes)) = self.cached.lock().unwrap_or_else(|e| e.into_inner()).as_ref()
        {
            if *cached_version == version {
                return Ok(bytes.clone());
            }
        }
        let bytes = Bytes::from(self.status.read(serde_json::to_vec)?);
        *self.cached.lock().unwrap_or_else(|e| e.into_inner()) = Some((version, bytes.clone()));
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_is_seen_by_the_next_read() {
        let model = StatusModel::new();
        let json = StatusJson::new(model.clone());
        let before = json.current().unwrap();
        assert_eq!(json.current().unwrap(), before, "unchanged status reuses the encoding");
        model.update(|s| s.ota.active_set = Some("set-7".into()));
        let after = json.current().unwrap();
        assert!(String::from_utf8_lossy(&after).contains("set-7"));
    }
}
