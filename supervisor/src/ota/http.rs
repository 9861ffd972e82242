//! A small HTTP/1 GET client over hyper, for `http://` and `https://` (rustls): used as the TUF
//! transport and for model downloads. Every wait is bounded (connect + TLS + headers, then each
//! body chunk) so a stalled server cannot hang an update; bodies arrive through a bounded channel.
//!
//! HTTPS trusts the Mozilla roots bundled in the binary (webpki-roots), plus the certificates of
//! `ota.ca_file` when set (a private update server). TUF signatures already protect integrity;
//! TLS adds privacy and keeps a box from talking to an impostor at all.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::StatusCode;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use tokio::sync::mpsc;
use url::Url;

/// Chunks buffered between the connection task and the reader.
const BODY_QUEUE: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("{url}: unsupported URL scheme (http or https; use a file path for local repositories)")]
    UnsupportedScheme { url: String },
    #[error("CA file {path}: {message}")]
    CaFile { path: PathBuf, message: String },
    #[error("TLS setup: {0}")]
    TlsSetup(String),
    #[error("{url}: TLS: server certificate not trusted ({message}); if the server uses a private CA, name its certificate in ota.ca_file")]
    Untrusted { url: String, message: String },
    #[error("{url}: TLS: {message}")]
    Tls { url: String, message: String },
    #[error("{url}: {message}")]
    Request { url: String, message: String },
    #[error("{url}: not found")]
    NotFound { url: String },
    #[error("{url}: HTTP status {status}")]
    Status { url: String, status: u16 },
    #[error("{url}: no data for {timeout:?}")]
    Stalled { url: String, timeout: Duration },
    #[error("{url}: connection closed mid-body: {message}")]
    Body { url: String, message: String },
}

#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// Connect and receive the response headers.
    pub response: Duration,
    /// Longest gap between two body chunks.
    pub chunk: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self { response: Duration::from_secs(30), chunk: Duration::from_secs(30) }
    }
}

#[derive(Debug, Clone)]
pub struct HttpClient {
    client: Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
    timeouts: Timeouts,
}

/// A response being received: whether the server honoured the range, and the body chunks.
#[derive(Debug)]
pub struct Download {
    /// 206: the body starts at the requested offset; 200: it starts at byte 0.
    pub partial: bool,
    /// Content-Length of this body, when the server sent one.
    pub length: Option<u64>,
    pub body: mpsc::Receiver<Result<Bytes, HttpError>>,
}

impl HttpClient {
    /// A client whose HTTPS trusts the bundled Mozilla roots and, when given, every certificate
    /// in the PEM file `ca_file`.
    pub fn new(timeouts: Timeouts, ca_file: Option<&Path>) -> Result<Self, HttpError> {
        let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
        if let Some(path) = ca_file {
            for cert in load_ca_file(path)? {
                roots
                    .add(cert)
                    .map_err(|e| HttpError::CaFile { path: path.into(), message: e.to_string() })?;
            }
        }
        // The provider is named, not taken from the process default, so the choice never
        // depends on which rustls features other crates switch on.
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| HttpError::TlsSetup(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(Self { client, timeouts })
    }

    /// The client `lucebox.toml` asks for: default timeouts, `ota.ca_file` trusted.
    pub fn for_config(ota: &crate::config::OtaConfig) -> Result<Self, HttpError> {
        Self::new(Timeouts::default(), ota.ca_file.as_deref())
    }

    /// GETs `url`, asking for bytes from `offset` on when it is not 0.
    pub async fn get(&self, url: &Url, offset: u64) -> Result<Download, HttpError> {
        let text = url.to_string();
        if url.scheme() != "http" && url.scheme() != "https" {
            return Err(HttpError::UnsupportedScheme { url: text });
        }
        let request_err = |message: String| HttpError::Request { url: text.clone(), message };
        let mut request = hyper::Request::get(url.as_str());
        if offset > 0 {
            request = request.header(hyper::header::RANGE, format!("bytes={offset}-"));
        }
        let request = request.body(Empty::new()).map_err(|e| request_err(e.to_string()))?;
        let response = tokio::time::timeout(self.timeouts.response, self.client.request(request))
            .await
            .map_err(|_| HttpError::Stalled { url: text.clone(), timeout: self.timeouts.response })?
            .map_err(|e| request_error(&text, &e))?;
        let status = response.status();
        if status == StatusCode::NOT_FOUND {
            return Err(HttpError::NotFound { url: text });
        }
        if status != StatusCode::OK && status != StatusCode::PARTIAL_CONTENT {
            return Err(HttpError::Status { url: text, status: status.as_u16() });
        }
        let length = response
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let (tx, rx) = mpsc::channel(BODY_QUEUE);
        tokio::spawn(pump_body(response.into_body(), tx, text, self.timeouts.chunk));
        Ok(Download { partial: status == StatusCode::PARTIAL_CONTENT, length, body: rx })
    }
}

/// Every certificate in a PEM file; an error (naming the file) when it has none or cannot be read.
pub fn load_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, HttpError> {
    let err = |message: String| HttpError::CaFile { path: path.into(), message };
    let data = std::fs::read(path).map_err(|e| err(e.to_string()))?;
    let certs = CertificateDer::pem_slice_iter(&data)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(format!("not PEM: {e}")))?;
    if certs.is_empty() {
        return Err(err("no CERTIFICATE block in the file".into()));
    }
    Ok(certs)
}

/// A failed request as an error that says what went wrong: hyper's own text ("client error
/// (Connect)") hides the cause, and a refused certificate deserves its own words.
fn request_error(url: &str, e: &(dyn std::error::Error + 'static)) -> HttpError {
    let message = super::repo::chain(e);
    match find_tls_error(e) {
        Some(rustls::Error::InvalidCertificate(reason @ rustls::CertificateError::UnknownIssuer)) => {
            HttpError::Untrusted { url: url.into(), message: reason.to_string() }
        }
        Some(rustls::Error::InvalidCertificate(reason)) => {
            HttpError::Tls { url: url.into(), message: format!("server certificate rejected: {reason}") }
        }
        Some(tls) => HttpError::Tls { url: url.into(), message: tls.to_string() },
        None => HttpError::Request { url: url.into(), message },
    }
}

/// The rustls error behind a connection failure. tokio-rustls and hyper-rustls wrap it in
/// `io::Error`s, whose `source()` skips the wrapped error itself, so those are opened by hand.
fn find_tls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut current = Some(e);
    while let Some(err) = current {
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(inner) = err.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
            let inner: &(dyn std::error::Error + 'static) = inner;
            if let Some(tls) = find_tls_error(inner) {
                return Some(tls);
            }
        }
        current = err.source();
    }
    None
}

/// Moves body chunks into `tx` until the body ends, fails, stalls or the reader goes away.
async fn pump_body(
    mut body: hyper::body::Incoming,
    tx: mpsc::Sender<Result<Bytes, HttpError>>,
    url: String,
    chunk_timeout: Duration,
) {
    loop {
        let frame = match tokio::time::timeout(chunk_timeout, body.frame()).await {
            Err(_) => Err(HttpError::Stalled { url: url.clone(), timeout: chunk_timeout }),
            Ok(None) => return,
            Ok(Some(Err(e))) => Err(HttpError::Body { url: url.clone(), message: e.to_string() }),
            Ok(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => Ok(data),
                Err(_) => continue, // trailers carry no payload
            },
        };
        let failed = frame.is_err();
        if tx.send(frame).await.is_err() || failed {
            return;
        }
    }
}
