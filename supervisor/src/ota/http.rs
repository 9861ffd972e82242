//! A small HTTP/1 GET client over hyper: used as the TUF transport and for model downloads.
//! Every wait is bounded (connect + headers, then each body chunk) so a stalled server cannot
//! hang an update; bodies arrive through a bounded channel.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::StatusCode;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::mpsc;
use url::Url;

/// Chunks buffered between the connection task and the reader.
const BODY_QUEUE: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("{url}: unsupported URL scheme (http only; use a file path for local repositories)")]
    UnsupportedScheme { url: String },
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
    client: Client<HttpConnector, Empty<Bytes>>,
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
    pub fn new(timeouts: Timeouts) -> Self {
        let client = Client::builder(TokioExecutor::new()).build_http();
        Self { client, timeouts }
    }

    /// GETs `url`, asking for bytes from `offset` on when it is not 0.
    pub async fn get(&self, url: &Url, offset: u64) -> Result<Download, HttpError> {
        let text = url.to_string();
        if url.scheme() != "http" {
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
            .map_err(|e| request_err(e.to_string()))?;
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
