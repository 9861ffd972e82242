//! The accept loop and per-connection handling: a bounded number of connections, HTTP/1 with
//! header size and read-time limits, an idle timeout, graceful stop on cancellation.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::router::App;
use super::WebError;

/// Limits that keep one client (or a slow one) from taking the server down.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Open connections at once; more wait in the kernel's backlog.
    pub max_connections: usize,
    /// The whole request head must arrive within this (slowloris).
    pub header_read_timeout: Duration,
    /// Request head size, bytes.
    pub max_header_bytes: usize,
    pub max_body_bytes: usize,
    pub body_read_timeout: Duration,
    /// A connection with no bytes moving either way for this long is closed.
    pub idle_timeout: Duration,
    /// How long connections may finish their requests once the server stops.
    pub shutdown_grace: Duration,
    pub sse_min_interval: Duration,
    pub sse_keep_alive: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 512,
            header_read_timeout: Duration::from_secs(5),
            max_header_bytes: 16 * 1024,
            max_body_bytes: 16 * 1024,
            body_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(3),
            sse_min_interval: Duration::from_millis(250),
            sse_keep_alive: Duration::from_secs(15),
        }
    }
}

/// How long to wait before accepting again after an accept error (e.g. out of descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

pub async fn run(
    listener: TcpListener,
    app: Arc<App>,
    limits: Limits,
    cancel: CancellationToken,
) -> Result<(), WebError> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut connections = JoinSet::new();
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "status page and API listening");
    }
    loop {
        let permit = tokio::select! {
            _ = cancel.cancelled() => break,
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            _ = cancel.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) if is_transient(&e) => {
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
                Err(e) => return Err(WebError::Accept(e)),
            },
        };
        let (app, cancel) = (app.clone(), cancel.clone());
        connections.spawn(async move {
            serve_connection(stream, app, limits, cancel).await;
            drop(permit);
        });
        // Reap finished connections so the set stays as large as the open connections.
        while connections.try_join_next().is_some() {}
    }
    app.stop_streams();
    let drained = tokio::time::timeout(limits.shutdown_grace, async {
        while connections.join_next().await.is_some() {}
    });
    if drained.await.is_err() {
        connections.abort_all();
    }
    Ok(())
}

fn is_transient(e: &io::Error) -> bool {
    !matches!(e.kind(), io::ErrorKind::InvalidInput | io::ErrorKind::PermissionDenied)
}

async fn serve_connection(stream: TcpStream, app: Arc<App>, limits: Limits, cancel: CancellationToken) {
    let _ = stream.set_nodelay(true);
    let activity = Activity::new();
    let io = TokioIo::new(ActivityIo { inner: stream, activity: activity.clone() });
    let service = service_fn(move |request| {
        let app = app.clone();
        async move { Ok::<_, std::convert::Infallible>(app.handle(request).await) }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_header_size(limits.max_header_bytes)
        .keep_alive(true);
    let connection = builder.serve_connection(io, service);
    tokio::pin!(connection);
    let mut stopping = false;
    loop {
        let idle_deadline = activity.last() + limits.idle_timeout;
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!("connection ended: {e}");
                }
                return;
            }
            _ = tokio::time::sleep_until(idle_deadline.into()) => {
                if activity.last() + limits.idle_timeout <= Instant::now() {
                    tracing::debug!("closing idle connection");
                    return;
                }
            }
            _ = cancel.cancelled(), if !stopping => {
                stopping = true;
                connection.as_mut().graceful_shutdown();
            }
        }
    }
}

/// When bytes last moved on a connection, in ms since it opened.
#[derive(Clone)]
struct Activity {
    opened: Instant,
    last_ms: Arc<AtomicU64>,
}

impl Activity {
    fn new() -> Self {
        Self { opened: Instant::now(), last_ms: Arc::new(AtomicU64::new(0)) }
    }
    fn touch(&self) {
        self.last_ms.store(self.opened.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
    fn last(&self) -> Instant {
        self.opened + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

/// A stream that records when bytes last moved, for the idle timeout.
struct ActivityIo {
    inner: TcpStream,
    activity: Activity,
}

impl AsyncRead for ActivityIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        result
    }
}

impl AsyncWrite for ActivityIo {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        result
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        result
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
