//! Routing: which handler answers which method and path. Static assets are matched by exact
//! name from a fixed table, so no request path ever reaches the file system.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::CONTENT_LENGTH;
use hyper::{Method, Request, Response, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::actions::{Actions, FanMode, OtaApplyRequest, PinRequest};
use super::guard::{check_bearer, check_host_and_origin};
use super::history::History;
use super::response::{bytes_response, json, ApiError, Body, JSON};
use super::snapshot::StatusJson;
use super::sse::{self, SseTiming};
use super::{metrics, WebSettings};
use crate::status::{EngineState, StatusModel};

const API: &str = "/api/v1/";

/// The embedded page: (path, content type, contents).
const ASSETS: &[(&str, &str, &str)] = &[
    ("/", "text/html; charset=utf-8", include_str!("page/index.html")),
    ("/app.js", "text/javascript; charset=utf-8", include_str!("page/app.js")),
    ("/style.css", "text/css; charset=utf-8", include_str!("page/style.css")),
];

/// Everything a request handler may use.
pub struct App {
    json: Arc<StatusJson>,
    actions: Arc<dyn Actions>,
    settings: WebSettings,
    history: History,
    /// Fires when the server stops, ending SSE streams.
    streams: CancellationToken,
}

#[derive(Serialize)]
struct Version {
    name: &'static str,
    version: &'static str,
    commit: Option<&'static str>,
    profile_set: Option<String>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FanModeRequest {
    mode: FanMode,
}

impl App {
    pub fn new(
        status: StatusModel,
        actions: Arc<dyn Actions>,
        settings: WebSettings,
        history: History,
    ) -> Self {
        Self {
            json: Arc::new(StatusJson::new(status)),
            actions,
            settings,
            history,
            streams: CancellationToken::new(),
        }
    }

    pub fn stop_streams(&self) {
        self.streams.cancel();
    }

    fn status(&self) -> &StatusModel {
        self.json.status()
    }

    pub async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        let result = if request.method() == Method::POST {
            self.change(request).await
        } else if request.method() == Method::GET || request.method() == Method::HEAD {
            self.read(request.uri().path())
        } else {
            Err(ApiError::method_not_allowed(format!("{} is not served here", request.method())))
        };
        result.unwrap_or_else(ApiError::into_response)
    }

    /// GET routes: the page, the read API, metrics and probes.
    fn read(&self, path: &str) -> Result<Response<Body>, ApiError> {
        if let Some((_, content_type, body)) = ASSETS.iter().find(|(p, _, _)| *p == path) {
            return Ok(bytes_response(StatusCode::OK, content_type, Bytes::from_static(body.as_bytes())));
        }
        match path {
            "/healthz" => return Ok(json(StatusCode::OK, &serde_json::json!({ "ok": true }))),
            "/readyz" => return Ok(self.readiness()),
            "/metrics" => {
                let text =
                    self.status().read(metrics::render).map_err(|e| ApiError::internal(e.to_string()))?;
                return Ok(bytes_response(StatusCode::OK, metrics::CONTENT_TYPE, text));
            }
            _ => {}
        }
        let Some(route) = path.strip_prefix(API) else {
            return Err(ApiError::not_found(format!("{path}: no such page")));
        };
        let encode = |e: serde_json::Error| ApiError::internal(format!("encoding: {e}"));
        match route {
            "status" => Ok(bytes_response(StatusCode::OK, JSON, self.json.current().map_err(encode)?)),
            "devices" => Ok(json(StatusCode::OK, &self.status().read(|s| s.hardware.clone()))),
            "plan" => Ok(json(StatusCode::OK, &self.status().read(|s| s.plan.clone()))),
            "engines" => Ok(json(StatusCode::OK, &self.status().read(|s| s.engines.clone()))),
            "thermal" => Ok(json(StatusCode::OK, &self.status().read(|s| s.thermal.clone()))),
            "ota" => Ok(json(StatusCode::OK, &self.status().read(|s| s.ota.clone()))),
            "events" => Ok(json(StatusCode::OK, &self.status().read(|s| s.events.clone()))),
            "history" => Ok(bytes_response(StatusCode::OK, JSON, self.history.to_json().map_err(encode)?)),
            "version" => Ok(json(StatusCode::OK, &self.version())),
            "stream" => {
                Ok(sse::stream(self.json.clone(), self.settings.limits.sse_timing(), self.streams.clone()))
            }
            _ => Err(ApiError::not_found(format!("{path}: no such API route"))),
        }
    }

    fn version(&self) -> Version {
        Version {
            name: "lucebox",
            version: env!("CARGO_PKG_VERSION"),
            commit: crate::version::GIT_COMMIT,
            profile_set: self.status().read(|s| s.ota.active_set.clone()),
        }
    }

    /// Ready once any engine serves; until then 503 with what the engines are doing.
    fn readiness(&self) -> Response<Body> {
        let engines = self
            .status()
            .read(|s| s.engines.iter().map(|(name, e)| (name.clone(), e.state.clone())).collect::<Vec<_>>());
        if engines.iter().any(|(_, state)| *state == EngineState::Ready) {
            return json(StatusCode::OK, &serde_json::json!({ "ready": true }));
        }
        let message = if engines.is_empty() { "no engine planned yet" } else { "no engine is ready" };
        let engines: Vec<_> =
            engines.iter().map(|(name, state)| serde_json::json!({ "name": name, "state": state })).collect();
        let body = serde_json::json!({ "ready": false, "error": "not-ready", "message": message, "engines": engines });
        json(StatusCode::SERVICE_UNAVAILABLE, &body)
    }

    /// POST routes: each checks Host/Origin, then the token, then reads a bounded body.
    async fn change(&self, request: Request<Incoming>) -> Result<Response<Body>, ApiError> {
        check_host_and_origin(request.headers(), &self.settings.allowed_hosts)?;
        check_bearer(request.headers(), &self.settings.token)?;
        let path = request.uri().path().to_string();
        let route = path.strip_prefix(API).unwrap_or_default();
        let segments: Vec<&str> = route.split('/').collect();
        let actions = &self.actions;
        let outcome = match segments.as_slice() {
            ["engines", name, "restart"] if !name.is_empty() => {
                actions.restart_engine(name.to_string()).await
            }
            ["pin"] => {
                let pin: PinRequest = self.body(request).await?;
                actions.switch_profile(pin).await
            }
            ["ota", "apply"] => {
                let OtaApplyRequest { force } = self.body_or_default(request).await?;
                actions.ota_apply(force).await
            }
            ["ota", "rollback"] => actions.ota_rollback().await,
            ["thermal", device, "fan-mode"] if !device.is_empty() => {
                let FanModeRequest { mode } = self.body(request).await?;
                actions.set_fan_mode(device.to_string(), mode).await
            }
            _ => return Err(ApiError::not_found(format!("{path}: no such action"))),
        };
        let accepted = outcome.map_err(ApiError::from)?;
        Ok(json(StatusCode::ACCEPTED, &serde_json::json!({ "accepted": true, "message": accepted.message })))
    }

    /// Reads and parses a JSON body of at most `limits.max_body_bytes`.
    async fn body<T: DeserializeOwned>(&self, request: Request<Incoming>) -> Result<T, ApiError> {
        let bytes = self.body_bytes(request).await?;
        serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON for this action: {e}")))
    }

    /// Like [`Self::body`], where an empty body means the defaults.
    async fn body_or_default<T: DeserializeOwned + Default>(
        &self,
        request: Request<Incoming>,
    ) -> Result<T, ApiError> {
        let bytes = self.body_bytes(request).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(T::default());
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON for this action: {e}")))
    }

    async fn body_bytes(&self, request: Request<Incoming>) -> Result<Bytes, ApiError> {
        let limit = self.settings.limits.max_body_bytes;
        let too_large = || ApiError::too_large(format!("request bodies are limited to {limit} bytes"));
        let declared =
            request.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
        if declared.is_some_and(|n| n > limit) {
            return Err(too_large());
        }
        let timeout = self.settings.limits.body_read_timeout;
        let read = tokio::time::timeout(timeout, Limited::new(request.into_body(), limit).collect()).await;
        let bytes = match read {
            Err(_) => {
                return Err(ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "timeout",
                    "the request body came too slowly",
                ))
            }
            Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => return Err(too_large()),
            Ok(Err(e)) => return Err(ApiError::bad_request(format!("reading the body: {e}"))),
            Ok(Ok(collected)) => collected.to_bytes(),
        };
        Ok(bytes)
    }
}

impl super::server::Limits {
    fn sse_timing(&self) -> SseTiming {
        SseTiming { min_interval: self.sse_min_interval, keep_alive: self.sse_keep_alive }
    }
}
