//! Shared by the web tests: an in-process server on a free port and a raw HTTP/1.1 client, so
//! tests control every byte on the wire (malformed requests, slow clients).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use lucebox::status::StatusModel;
use lucebox::web::{serve_on, Actions, AllowedHosts, ApiToken, Limits, WebError, WebSettings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub struct TestServer {
    pub addr: SocketAddr,
    pub token: String,
    pub status: StatusModel,
    pub cancel: CancellationToken,
    pub handle: JoinHandle<Result<(), WebError>>,
    _state: tempfile::TempDir,
}

impl TestServer {
    pub async fn start(actions: Arc<dyn Actions>, limits: Limits) -> Self {
        Self::start_with(StatusModel::new(), actions, limits).await
    }

    pub async fn start_with(status: StatusModel, actions: Arc<dyn Actions>, limits: Limits) -> Self {
        let state = tempfile::tempdir().unwrap();
        let (token, created) = ApiToken::load_or_create(state.path()).unwrap();
        assert!(created);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let settings = WebSettings {
            token: token.clone(),
            limits,
            allowed_hosts: AllowedHosts::new(["localhost".to_string(), "lucebox.local".to_string()]),
            mdns: false,
        };
        let cancel = CancellationToken::new();
        let handle = tokio::spawn(serve_on(listener, settings, status.clone(), actions, cancel.clone()));
        Self { addr, token: token.secret().to_string(), status, cancel, handle, _state: state }
    }

    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    pub async fn get(&self, path: &str) -> Reply {
        send(self.addr, &format!("GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", self.host()))
            .await
    }

    /// POST with the right Host and the given extra header lines (each ending in \r\n).
    pub async fn post(&self, path: &str, extra_headers: &str, body: &str) -> Reply {
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\n{extra_headers}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.host(),
            body.len()
        );
        send(self.addr, &request).await
    }

    pub fn bearer(&self) -> String {
        format!("Authorization: Bearer {}\r\n", self.token)
    }
}

#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (k, v) = line.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// Writes `raw` and reads until the server closes (requests say `Connection: close`).
pub async fn send(addr: SocketAddr, raw: &str) -> Reply {
    send_within(addr, raw, Duration::from_secs(10)).await
}

/// Like [`send`]; stops at the end of the body when the reply has a Content-Length (some peers
/// keep the connection open anyway).
pub async fn send_within(addr: SocketAddr, raw: &str, within: Duration) -> Reply {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(raw.as_bytes()).await.unwrap();
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 16384];
    let read = tokio::time::timeout(within, async {
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            }
            if body_complete(&bytes) {
                return;
            }
        }
    });
    read.await.expect("no complete reply in time");
    parse(&bytes)
}

fn body_complete(bytes: &[u8]) -> bool {
    let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else { return false };
    let head = parse(&bytes[..end + 4]);
    match head.header("content-length").and_then(|v| v.parse::<usize>().ok()) {
        Some(length) => bytes.len() >= end + 4 + length,
        None => false,
    }
}

pub fn parse(bytes: &[u8]) -> Reply {
    let text = String::from_utf8_lossy(bytes).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Reply { status, head: head.to_string(), body: body.to_string() }
}
