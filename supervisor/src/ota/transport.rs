//! `tough::Transport` for the two sources a box updates from: an HTTP server (over our hyper
//! client) and a local directory or USB stick (`file://`, re-verified offline like any mirror).

use futures_util::stream;
use tough::{FilesystemTransport, Transport, TransportError, TransportErrorKind, TransportStream};
use url::Url;

use super::http::{HttpClient, HttpError};

#[derive(Debug, Clone)]
pub struct OtaTransport {
    http: HttpClient,
}

impl OtaTransport {
    pub fn new(http: HttpClient) -> Self {
        Self { http }
    }
}

#[tough::async_trait]
impl Transport for OtaTransport {
    async fn fetch(&self, url: Url) -> Result<TransportStream, TransportError> {
        if url.scheme() == "file" {
            return FilesystemTransport.fetch(url).await;
        }
        let download = self.http.get(&url, 0).await.map_err(|e| {
            let kind = match e {
                HttpError::NotFound { .. } => TransportErrorKind::FileNotFound,
                HttpError::UnsupportedScheme { .. } => TransportErrorKind::UnsupportedUrlScheme,
                _ => TransportErrorKind::Other,
            };
            TransportError::new_with_cause(kind, url.as_str(), e)
        })?;
        let chunks = stream::unfold((download.body, url), |(mut body, url)| async move {
            let item = body.recv().await?;
            let item =
                item.map_err(|e| TransportError::new_with_cause(TransportErrorKind::Other, url.as_str(), e));
            Some((item, (body, url)))
        });
        Ok(Box::pin(chunks))
    }
}
