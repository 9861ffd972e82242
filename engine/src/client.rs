//! Client for the engine's HTTP surface: `/health`, `/props`, `/metrics`, `/slots`.
//!
//! Speaks to llama.cpp's `llama-server` and Lucebox's `dflash_server` on loopback. Every request has
//! a deadline covering connect, headers and body, and a body-size cap, so a hung (SIGSTOPped) engine
//! yields [`ClientError::Timeout`] instead of blocking its caller. A refused connection (engine not
//! started or exited) is its own error kind, because supervision treats it differently from a hang.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::load::{LoadSignal, LoadSource, TokenRate};
use crate::metrics::{EngineMetrics, MetricsError};
use crate::props::{EngineProps, PropsError};
use crate::slots::{parse_slot_reports, SlotsError};
use crate::SlotLoad;

/// Default deadline of one request. Health probes of a loaded engine answer in about a millisecond.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);
/// Largest body read. `/slots` carries each slot's prompt text, which can be long.
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// Pooled connections are dropped before llama-server's 5 s keep-alive closes them, so a request
/// never races the server's close on a reused socket.
const POOL_IDLE: Duration = Duration::from_secs(2);
/// How long `load()` trusts the served model's name before reading `/props` again. A new profile
/// restarts the engine, and a failed `load()` (the engine down meanwhile) makes the next one read
/// it at once.
const SERVED_MODEL_REFRESH: Duration = Duration::from_secs(60);

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
    Tokenize,
}

impl Endpoint {
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Health => "/health",
            Endpoint::Props => "/props",
            Endpoint::Metrics => "/metrics",
            Endpoint::Slots => "/slots",
            Endpoint::Tokenize => "/tokenize",
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
    #[error("{url}: answer is not {{\"tokens\": [...]}}")]
    Tokenize { url: String },
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
/// to turn counters into a rate and the name of the served model, and `slots()` the sizes of prompts
/// being prefilled.
pub struct EngineClient {
    addr: SocketAddr,
    timeout: Duration,
    http: Client<HttpConnector, Full<Bytes>>,
    rate: Mutex<TokenRate>,
    /// Prompt length per (slot, task) for requests still prefilling; pruned to the active ones.
    prompt_sizes: Mutex<HashMap<(u32, i64), u64>>,
    /// The served model's file name (none where `/props` does not say) and when it was read.
    served_model: Mutex<Option<(Option<String>, Instant)>>,
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
        Self {
            addr,
            timeout,
            http,
            rate: Mutex::new(TokenRate::default()),
            prompt_sizes: Mutex::new(HashMap::new()),
            served_model: Mutex::new(None),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `/health`: 200 is ready, 503 is loading; anything else is an error. llama-server says
    /// `Loading model` in its 503; any 503 from `/health` counts as loading so an engine with other
    /// wording (dflash_server) is not taken for a failed one while it loads.
    pub async fn health(&self) -> Result<Health, ClientError> {
        match self.get(Endpoint::Health).await {
            Ok(_) => Ok(Health::Ready),
            Err(ClientError::Loading { .. }) | Err(ClientError::Status { status: 503, .. }) => {
                Ok(Health::Loading)
            }
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
    ///
    /// `/slots` does not show the length of a prompt that is still being prefilled, only the part
    /// done so far; such a prompt is sized once per request with `/tokenize` (answered by the
    /// engine's HTTP thread, not queued behind inference), so `waiting_prompt_tokens()` sees it.
    pub async fn slots(&self) -> Result<Vec<SlotLoad>, ClientError> {
        let body = self.get(Endpoint::Slots).await?;
        let reports = parse_slot_reports(&body)
            .map_err(|source| ClientError::Slots { url: self.url(Endpoint::Slots), source })?;
        let mut active = Vec::new();
        let mut slots = Vec::with_capacity(reports.len());
        for report in reports {
            let mut load = report.load;
            if let (Some(task), Some(prompt)) = (report.task_id, report.pending_prompt) {
                let key = (load.id, task);
                active.push(key);
                let known = self.lock_prompt_sizes().get(&key).copied();
                let total = match known {
                    Some(total) => total,
                    None => {
                        let total = self.count_tokens(&prompt).await?;
                        self.lock_prompt_sizes().insert(key, total);
                        total
                    }
                };
                load.prompt_tokens = load.prompt_tokens.max(total);
            }
            slots.push(load);
        }
        self.lock_prompt_sizes().retain(|key, _| active.contains(key));
        Ok(slots)
    }

    /// Tokens in `text` as this engine's tokenizer counts them (special tokens parsed, none added:
    /// the prompt text `/slots` shows already carries them).
    pub async fn count_tokens(&self, text: &str) -> Result<u64, ClientError> {
        #[derive(serde::Deserialize)]
        struct Tokens {
            tokens: Vec<serde_json::Value>,
        }
        let request = serde_json::json!({ "content": text, "add_special": false, "parse_special": true });
        let body = self.send(Method::POST, Endpoint::Tokenize, Bytes::from(request.to_string())).await?;
        let tokens: Tokens = serde_json::from_slice(&body)
            .map_err(|_| ClientError::Tokenize { url: self.url(Endpoint::Tokenize) })?;
        Ok(tokens.tokens.len() as u64)
    }

    fn lock_prompt_sizes(&self) -> std::sync::MutexGuard<'_, HashMap<(u32, i64), u64>> {
        // A poisoned lock only means another caller panicked mid-update; the sizes are still valid.
        self.prompt_sizes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The load signal: the deferred-queue gauge from `/metrics`, per-slot progress from `/slots`, the
    /// generation rate since the previous call, and the served model's file name from `/props` (read
    /// again after a failed call, else once a minute). An engine that offers only one of `/metrics`
    /// and `/slots` still gives a signal (the other part empty); one that offers neither is an error.
    ///
    /// Metrics are read before slots: a request that finishes between the two reads is missing from
    /// both for this call (rate reads low) and is counted by the next one, never twice.
    pub async fn load(&self) -> Result<LoadSignal, ClientError> {
        match self.queue().await {
            Ok(signal) => Ok(LoadSignal { model: self.served_model().await, ..signal }),
            Err(e) => {
                // The engine may come back with another model.
                *self.lock_served_model() = None;
                Err(e)
            }
        }
    }

    /// The served model's file name, from `/props` where the last read is missing or stale.
    async fn served_model(&self) -> Option<String> {
        let fresh = |(_, at): &(Option<String>, Instant)| at.elapsed() < SERVED_MODEL_REFRESH;
        if let Some((name, _)) = self.lock_served_model().as_ref().filter(|read| fresh(read)) {
            return name.clone();
        }
        let path = self.props().await.ok().and_then(|props| props.model_path);
        let name = path.map(|p| match std::path::Path::new(&p).file_name() {
            Some(file) => file.to_string_lossy().into_owned(),
            None => p,
        });
        *self.lock_served_model() = Some((name.clone(), Instant::now()));
        name
    }

    fn lock_served_model(&self) -> std::sync::MutexGuard<'_, Option<(Option<String>, Instant)>> {
        // A poisoned lock only means another caller panicked mid-update; the name is still valid.
        self.served_model.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The queue part of [`Self::load`]: `/metrics` and `/slots`.
    async fn queue(&self) -> Result<LoadSignal, ClientError> {
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
            model: None,
            source: LoadSource::Queue,
        })
    }

    fn url(&self, endpoint: Endpoint) -> String {
        format!("http://{}{}", self.addr, endpoint.path())
    }

    /// GET one endpoint and return its body on 200.
    async fn get(&self, endpoint: Endpoint) -> Result<Bytes, ClientError> {
        self.send(Method::GET, endpoint, Bytes::new()).await
    }

    /// One request under the deadline; the body on 200.
    async fn send(&self, method: Method, endpoint: Endpoint, body: Bytes) -> Result<Bytes, ClientError> {
        let url = self.url(endpoint);
        match tokio::time::timeout(self.timeout, self.fetch(method, &url, body)).await {
            Ok(result) => result,
            Err(_) => Err(ClientError::Timeout { url, after: self.timeout }),
        }
    }

    async fn fetch(&self, method: Method, url: &str, body: Bytes) -> Result<Bytes, ClientError> {
        let uri: Uri = url.parse().map_err(|e: hyper::http::uri::InvalidUri| ClientError::Transport {
            url: url.to_owned(),
            reason: e.to_string(),
        })?;
        let mut request = Request::builder().method(method).uri(uri);
        if !body.is_empty() {
            request = request.header(hyper::header::CONTENT_TYPE, "application/json");
        }
        let request = request
            .body(Full::new(body))
            .map_err(|e| ClientError::Transport { url: url.to_owned(), reason: e.to_string() })?;
        let response = self.http.request(request).await.map_err(|e| self.transport_error(url, &e))?;
        let status = response.status();
        // A declared length over the cap is refused before reading; `Limited` catches chunked bodies.
        if hyper::body::Body::size_hint(response.body()).lower() > MAX_BODY_BYTES as u64 {
            return Err(ClientError::BodyTooLarge { url: url.to_owned(), limit: MAX_BODY_BYTES });
        }
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

pub(crate) fn unix_ms() -> u64 {
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
    fn client_and_its_futures_can_move_between_tasks() {
        fn send_sync<T: Send + Sync>(_: &T) {}
        fn send<T: Send>(_: T) {}
        let client = EngineClient::new(([127, 0, 0, 1], 9).into());
        send_sync(&client);
        send(client.load());
        send(client.slots());
        send(client.health());
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

    /// A one-connection HTTP server that answers every request with `response`.
    async fn answer_once(response: &'static str) -> SocketAddr {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 4096];
            let _ = socket.read(&mut buf).await;
            let _ = socket.write_all(response.as_bytes()).await;
        });
        addr
    }

    #[tokio::test]
    async fn health_reads_any_503_as_loading_and_500_as_an_error() {
        let loading =
            answer_once("HTTP/1.1 503 Service Unavailable\r\ncontent-length: 7\r\n\r\nwarming").await;
        assert_eq!(EngineClient::new(loading).health().await.unwrap(), Health::Loading);
        let broken = answer_once("HTTP/1.1 500 Internal Server Error\r\ncontent-length: 4\r\n\r\noops").await;
        let err = EngineClient::new(broken).health().await.unwrap_err();
        assert!(matches!(err, ClientError::Status { status: 500, ref body, .. } if body == "oops"), "{err}");
    }

    #[tokio::test]
    async fn oversized_body_is_refused() {
        // Claims a body far over the cap; the client must stop before reading it all.
        let addr = answer_once("HTTP/1.1 200 OK\r\ncontent-length: 99999999\r\n\r\nx").await;
        let err = EngineClient::new(addr).props().await.unwrap_err();
        assert!(matches!(err, ClientError::BodyTooLarge { .. }), "{err}");
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
