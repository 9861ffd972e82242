//! A small private HTTP/1 GET for the engine's `/health`, kept beside
//! `lucebox_engine::EngineClient::health()` on purpose: supervision wants a fresh connection per
//! probe (the client pools keep-alive connections, and a reused socket can answer for an engine
//! whose accept loop is wedged), and a cheap refused connect during the 2 ms startup polls.
//! The load sampler (`load.rs`) uses the shared client.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Bodies above this are refused (`/metrics` and `/slots` of a busy engine stay far below).
pub const MAX_BODY: usize = 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("{addr}: connect: {source}")]
    Connect { addr: SocketAddr, source: std::io::Error },
    #[error("{addr}{path}: {message}")]
    Http { addr: SocketAddr, path: String, message: String },
    #[error("{addr}{path}: no answer within {timeout:?}")]
    Timeout { addr: SocketAddr, path: String, timeout: Duration },
    #[error("host {0:?} is not an IP address")]
    Host(String),
}

/// What `/health` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// 200: model loaded, serving.
    Ready,
    /// 503: up, still loading the model.
    Loading,
    /// Anything else: not listening, wrong answer, too slow.
    Down(String),
}

/// The address to reach an engine listening on `host:port` from this machine (a wildcard bind
/// is reached over loopback).
pub fn engine_addr(host: &str, port: u16) -> Result<SocketAddr, ProbeError> {
    let ip: IpAddr = if host.is_empty() {
        Ipv4Addr::LOCALHOST.into()
    } else {
        host.parse().map_err(|_| ProbeError::Host(host.to_string()))?
    };
    let ip = if ip.is_unspecified() { IpAddr::from(Ipv4Addr::LOCALHOST) } else { ip };
    Ok(SocketAddr::new(ip, port))
}

pub async fn health(addr: SocketAddr, timeout: Duration) -> Health {
    match get(addr, "/health", timeout).await {
        Ok((200, _)) => Health::Ready,
        Ok((503, _)) => Health::Loading,
        Ok((code, _)) => Health::Down(format!("/health answered {code}")),
        Err(err) => Health::Down(err.to_string()),
    }
}

/// GET `path`; returns status code and body. One connection per call: probes are rare and a
/// fresh connection is what proves the engine still accepts them.
pub async fn get(addr: SocketAddr, path: &str, timeout: Duration) -> Result<(u16, Bytes), ProbeError> {
    let timed_out = || ProbeError::Timeout { addr, path: path.to_string(), timeout };
    tokio::time::timeout(timeout, get_inner(addr, path)).await.map_err(|_| timed_out())?
}

async fn get_inner(addr: SocketAddr, path: &str) -> Result<(u16, Bytes), ProbeError> {
    let http = |message: String| ProbeError::Http { addr, path: path.to_string(), message };
    let stream = TcpStream::connect(addr).await.map_err(|source| ProbeError::Connect { addr, source })?;
    let _ = stream.set_nodelay(true);
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| http(e.to_string()))?;
    // The connection task ends with the request (or with the timeout dropping `sender`).
    let driver = tokio::spawn(connection);
    let request = hyper::Request::get(path)
        .header(hyper::header::HOST, addr.to_string())
        .body(Empty::<Bytes>::new())
        .map_err(|e| http(e.to_string()))?;
    let response = sender.send_request(request).await.map_err(|e| http(e.to_string()))?;
    let code = response.status().as_u16();
    let body =
        Limited::new(response.into_body(), MAX_BODY).collect().await.map_err(|e| http(e.to_string()))?;
    driver.abort();
    Ok((code, body.to_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A one-shot HTTP server answering `reply` verbatim (or never, when `None`).
    async fn serve_once(reply: Option<&'static str>) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = socket.read(&mut buf).await;
            match reply {
                Some(reply) => socket.write_all(reply.as_bytes()).await.unwrap(),
                None => tokio::time::sleep(Duration::from_secs(5)).await,
            }
        });
        addr
    }

    #[tokio::test]
    async fn health_maps_status_codes() {
        let ok = serve_once(Some("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")).await;
        assert_eq!(health(ok, Duration::from_secs(1)).await, Health::Ready);
        let loading = serve_once(Some("HTTP/1.1 503 Unavailable\r\ncontent-length: 0\r\n\r\n")).await;
        assert_eq!(health(loading, Duration::from_secs(1)).await, Health::Loading);
        let hung = serve_once(None).await;
        let started = std::time::Instant::now();
        assert!(
            matches!(health(hung, Duration::from_millis(200)).await, Health::Down(m) if m.contains("no answer"))
        );
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[tokio::test]
    async fn refused_connection_is_down() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        assert!(matches!(health(addr, Duration::from_secs(1)).await, Health::Down(_)));
    }

    #[test]
    fn wildcard_binds_are_probed_on_loopback() {
        assert_eq!(engine_addr("0.0.0.0", 8080).unwrap(), "127.0.0.1:8080".parse().unwrap());
        assert_eq!(engine_addr("::1", 8080).unwrap(), "[::1]:8080".parse().unwrap());
        assert!(engine_addr("localhost", 1).is_err());
    }
}
