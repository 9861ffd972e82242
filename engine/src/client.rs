//! Client for the engine's HTTP surface: `/health`, `/props`, `/metrics`, `/slots`.
//!
//! Speaks to llama.cpp's `llama-server` and Lucebox's `dflash_server` on loopback. Every request has
//! a deadline covering connect, headers and body, and a body-size cap, so a hung (SIGSTOPped) engine
//! yields [`ClientError::Timeout`] instead of blocking its caller. A refused connection (engine not
//! started or exited) is its own error kind, because supervision treats it differently from a hang.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::load::{LoadSignal, TokenRate};
use crate::metrics::{EngineMetrics, MetricsError};
use crate::props::{EngineProps, PropsError};
use crate::slots::{parse_slots, SlotsError};
use crate::SlotLoad;

/// Default deadline of one request. Health probes of a loaded engine answer in about a millisecond.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);
/// Largest body read. `/slots` carries each slot's prompt text, which can be long.
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// Pooled connections are dropped before llama-server's 5 s keep-alive closes them, so a request
/// never races the server's close on a reused socket.
const POOL_IDLE: Duration = Duration::from_secs(2);

/// What `/health` says about a running engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Health {
    /// HTTP 503 `Loading model`: the process is up and still loading weights.
    Loading,
    /// HTTP 200: ready for requests.
    Ready,
}

/// The endpoints this client reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Health,
    Props,
    Metrics,
    Slots,
}

impl Endpoint {
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Health => "/health",
            Endpoint::Props => "/props",
            Endpoint::Metrics => "/metrics",
            Endpoint::Slots => "/slots",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("engine at {addr} refused the connection (not listening: not started yet, or exited)")]
    ConnectionRefused { addr: SocketAddr },
    #[error("{url}: no complete answer within {after:?} (engine hung or overloaded)")]
    Timeout { url: String, after: Duration },
    #[error("{url}: {reason}")]
    Transport { url: String, reason: String },
    #[error("{url}: engine is still loading the model (HTTP 503)")]
    Loading { url: String },
    #[error(
        "{url}: endpoint not offered by this engine (HTTP {status}); llama-server needs --metrics / --slots"
    )]
    NotOffered { url: String, status: u16 },
    #[error("{url}: HTTP {status}: {body}")]
    Status { url: String, status: u16, body: String },
    #[error("{url}: body larger than {limit} bytes")]
    BodyTooLarge { url: String, limit: usize },
    #[error("{url}: body is not UTF-8")]
    NotUtf8 { url: String },
    #[error("{url}: {source}")]
    Metrics { url: String, source: MetricsError },
    #[error("{url}: {source}")]
    Slots { url: String, source: SlotsError },
    #[error("{url}: {source}")]
    Props { url: String, source: PropsError },
    #[error("engine at {addr} offers neither /metrics nor /slots: no load signal")]
    NoLoadSurface { addr: SocketAddr },
}

impl ClientError {
    /// The engine is not listening at all (as opposed to listening but failing or hanging).
    pub fn is_connection_refused(&self) -> bool {
        matches!(self, ClientError::ConnectionRefused { .. })
    }

    pub fn is_timeout(&self) -> bool {
        matches!(self, ClientError::Timeout { .. })
    }
}

/// One engine's HTTP surface. Cheap to share behind an `Arc`; `load()` keeps the previous token tally
/// to turn counters into a rate.
pub struct EngineClient {
    addr: SocketAddr,
    timeout: Duration,
    http: Client<HttpConnector, Empty<Bytes>>,
    rate: Mutex<TokenRate>,
}

impl EngineClient {
    /// A client for the engine listening on `addr`, with [`DEFAULT_TIMEOUT`] per request.
    pub fn new(addr: SocketAddr) -> Self {
        Self::with_timeout(addr, DEFAULT_TIMEOUT)
    }

    pub fn with_timeout(addr: SocketAddr, timeout: Duration) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(timeout));
        let http = Client::builder(TokioExecutor::new()).pool_idle_timeout(POOL_IDLE).build(connector);
        Self { addr, timeout, http, rate: Mutex::new(TokenRate::default()) }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `/health`: 200 is ready, 503 `Loading model` is loading; anything else is an error.
    pub async fn health(&self) -> Result<Health, ClientError> {
        match self.get(Endpoint::Health).await {
            Ok(_) => Ok(Health::Ready),
            Err(ClientError::Loading { .. }) => Ok(Health::Loading),
            Err(e) => Err(e),
        }
    }

    /// `/props`: model path, context, build and slot count, with the raw JSON.
    pub async fn props(&self) -> Result<EngineProps, ClientError> {
        let body = self.get(Endpoint::Props).await?;
        EngineProps::parse(&body)
            .map_err(|source| ClientError::Props { url: self.url(Endpoint::Props), source })
    }

    /// `/metrics` (llama-server started with `--metrics`).
    pub async fn metrics(&self) -> Result<EngineMetrics, ClientError> {
        let url = || self.url(Endpoint::Metrics);
        let body = self.get(Endpoint::Metrics).await?;
        let text = std::str::from_utf8(&body).map_err(|_| ClientError::NotUtf8 { url: url() })?;
        EngineMetrics::parse(text).map_err(|source| ClientError::Metrics { url: url(), source })
    }

    /// `/slots` (llama-server started with `--slots`).
    pub async fn slots(&self) -> Result<Vec<SlotLoad>, ClientError> {
        let body = self.get(Endpoint::Slots).await?;
        parse_slots(&body).map_err(|source| ClientError::Slots { url: self.url(Endpoint::Slots), source })
    }

    /// The load signal: the deferred-queue gauge from `/metrics`, per-slot progress from `/slots`, and the
    /// generation rate since the previous call. An engine that offers only one of the two endpoints
    /// still gives a signal (the other part empty); one that offers neither is an error.
    ///
    /// Metrics are read before slots: a request that finishes between the two reads is missing from
    /// both for this call (rate reads low) and is counted by the next one, never twice.
    pub async fn load(&self) -> Result<LoadSignal, ClientError> {
        let metrics = offered(self.metrics().await)?;
        let slots = offered(self.slots().await)?;
        if metrics.is_none() && slots.is_none() {
            return Err(ClientError::NoLoadSurface { addr: self.addr });
        }
        // Slots are read last and show each request, so their count wins over the gauge (which
        // a request starting between the two reads would contradict).
        let requests_processing = match &slots {
            Some(slots) => slots.iter().filter(|s| s.is_processing).count() as u32,
            None => metrics.as_ref().and_then(|m| m.requests_processing).map_or(0, gauge_u32),
        };
        let slots = slots.unwrap_or_default();
        let metrics = metrics.unwrap_or_default();

        let tokens_per_s = metrics.tokens_predicted_total.and_then(|finished| {
            let in_flight: u64 = slots.iter().filter(|s| s.is_processing).map(|s| s.decoded_tokens).sum();
            // A poisoned lock only means another caller panicked mid-update; the tally is still usable.
            let mut rate = self.rate.lock().unwrap_or_else(|p| p.into_inner());
            rate.observe(Instant::now(), finished + in_flight as f64)
        });

        Ok(LoadSignal {
            at_unix_ms: unix_ms(),
            requests_processing,
            requests_deferred: metrics.requests_deferred.map_or(0, gauge_u32),
            slots,
            tokens_per_s,
        })
    }

    fn url(&self, endpoint: Endpoint) -> String {
        format!("http://{}{}", self.addr, endpoint.path())
    }

    /// GET one endpoint and return its body on 200.
    async fn get(&self, endpoint: Endpoint) -> Result<Bytes, ClientError> {
        let url = self.url(endpoint);
        match tokio::time::timeout(self.timeout, self.fetch(&url)).await {
            Ok(result) => result,
            Err(_) => Err(ClientError::Timeout { url, after: self.timeout }),
        }
    }

    async fn fetch(&self, url: &str) -> Result<Bytes, ClientError> {
        let uri: Uri = url.parse().map_err(|e: hyper::http::uri::InvalidUri| ClientError::Transport {
            url: url.to_owned(),
            reason: e.to_string(),
        })?;
        let request = Request::builder()
            .method(Method::GET)
            .uri(uri)
            .body(Empty::<Bytes>::new())
            .map_err(|e| ClientError::Transport { url: url.to_owned(), reason: e.to_string() })?;
        let response = self.http.request(request).await.map_err(|e| self.transport_error(url, &e))?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_BODY_BYTES).collect().await.map_err(|e| {
            if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() {
                ClientError::BodyTooLarge { url: url.to_owned(), limit: MAX_BODY_BYTES }
            } else {
                ClientError::Transport { url: url.to_owned(), reason: format!("reading body: {e}") }
            }
        })?;
        classify(url, status, body.to_bytes())
    }

    fn transport_error(&self, url: &str, error: &hyper_util::client::legacy::Error) -> ClientError {
        if is_connection_refused(error) {
            ClientError::ConnectionRefused { addr: self.addr }
        } else {
            ClientError::Transport { url: url.to_owned(), reason: error_chain(error) }
        }
    }
}

/// Maps an answer to a body or the error its status means.
fn classify(url: &str, status: StatusCode, body: Bytes) -> Result<Bytes, ClientError> {
    let text = || String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned();
    match status {
        StatusCode::OK => Ok(body),
        StatusCode::SERVICE_UNAVAILABLE if text().contains("Loading model") => {
            Err(ClientError::Loading { url: url.to_owned() })
        }
        StatusCode::NOT_FOUND | StatusCode::NOT_IMPLEMENTED => {
            Err(ClientError::NotOffered { url: url.to_owned(), status: status.as_u16() })
        }
        other => Err(ClientError::Status { url: url.to_owned(), status: other.as_u16(), body: text() }),
    }
}

/// `Ok(None)` for an endpoint this engine does not serve, so `load()` can use the other one.
fn offered<T>(result: Result<T, ClientError>) -> Result<Option<T>, ClientError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(ClientError::NotOffered { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

fn is_connection_refused(error: &hyper_util::client::legacy::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::ConnectionRefused {
                return true;
            }
        }
        source = cause.source();
    }
    false
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Gauges are floats in Prometheus text; the counts they carry are small non-negative integers.
fn gauge_u32(value: f64) -> u32 {
    if value.is_finite() && value > 0.0 {
        value.round().min(u32::MAX as f64) as u32
    } else {
        0
    }
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loading_503_is_told_apart_from_other_503s() {
        let loading = Bytes::from_static(
            br#"{"error":{"message":"Loading model","type":"unavailable_error","code":503}}"#,
        );
        assert!(matches!(
            classify("u", StatusCode::SERVICE_UNAVAILABLE, loading),
            Err(ClientError::Loading { .. })
        ));
        let other = classify("u", StatusCode::SERVICE_UNAVAILABLE, Bytes::from_static(b"busy"));
        assert!(matches!(other, Err(ClientError::Status { status: 503, .. })));
    }

    #[test]
    fn missing_endpoints_are_not_offered() {
        for status in [StatusCode::NOT_FOUND, StatusCode::NOT_IMPLEMENTED] {
            assert!(matches!(classify("u", status, Bytes::new()), Err(ClientError::NotOffered { .. })));
        }
        assert_eq!(
            offered::<u8>(Err(ClientError::NotOffered { url: "u".into(), status: 404 })).unwrap(),
            None
        );
        assert!(offered::<u8>(Err(ClientError::Loading { url: "u".into() })).is_err());
    }

    #[test]
    fn gauges_round_and_clamp() {
        assert_eq!(gauge_u32(2.0), 2);
        assert_eq!(gauge_u32(-1.0), 0);
        assert_eq!(gauge_u32(f64::NAN), 0);
    }

    #[tokio::test]
    async fn closed_port_is_connection_refused() {
        // Bind then drop a listener: the port is free and nothing listens on it.
        let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let err = EngineClient::new(addr).health().await.unwrap_err();
        assert!(err.is_connection_refused(), "{err}");
    }

    #[tokio::test]
    async fn silent_listener_times_out() {
        // Accepts connections (the kernel does) but never answers, like a SIGSTOPped engine.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = EngineClient::with_timeout(listener.local_addr().unwrap(), Duration::from_millis(200));
        let err = client.health().await.unwrap_err();
        assert!(err.is_timeout(), "{err}");
    }
}
