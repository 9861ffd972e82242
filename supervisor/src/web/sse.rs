//! `/api/v1/stream`: Server-Sent Events. Each client gets the whole status at once, then again
//! after every change (bursts coalesced), and a keep-alive comment while nothing changes so
//! proxies and the idle timeout keep the stream open.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Frame;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::Response;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::response::Body;
use super::snapshot::StatusJson;

/// Timing of a stream.
#[derive(Debug, Clone, Copy)]
pub struct SseTiming {
    /// Least time between two status events: a burst of updates becomes one event.
    pub min_interval: Duration,
    pub keep_alive: Duration,
}

/// Frames queued per client before the writer waits for the client to read.
const QUEUE: usize = 4;

/// A response body fed by a bounded channel.
struct ChannelBody {
    rx: mpsc::Receiver<Bytes>,
}

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.rx.poll_recv(cx).map(|frame| frame.map(|bytes| Ok(Frame::data(bytes))))
    }
}

pub fn stream(json: Arc<StatusJson>, timing: SseTiming, cancel: CancellationToken) -> Response<Body> {
    let (tx, rx) = mpsc::channel(QUEUE);
    tokio::spawn(feed(json, tx, timing, cancel));
    let mut response = Response::new(ChannelBody { rx }.boxed());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn status_event(json: &StatusJson) -> Bytes {
    match json.current() {
        // Compact JSON has no newlines, so it fits one `data:` line.
        Ok(body) => {
            let mut frame = Vec::with_capacity(body.len() + 24);
            frame.extend_from_slice(b"event: status\ndata: ");
            frame.extend_from_slice(&body);
            frame.extend_from_slice(b"\n\n");
            Bytes::from(frame)
        }
        Err(e) => Bytes::from(format!("event: error\ndata: {{\"message\":\"encoding status: {e}\"}}\n\n")),
    }
}

/// Sends one frame; false when the client is gone or the server stops.
async fn send(tx: &mpsc::Sender<Bytes>, frame: Bytes, cancel: &CancellationToken) -> bool {
    tokio::select! {
        sent = tx.send(frame) => sent.is_ok(),
        _ = cancel.cancelled() => false,
    }
}

async fn feed(json: Arc<StatusJson>, tx: mpsc::Sender<Bytes>, timing: SseTiming, cancel: CancellationToken) {
    let mut changes = json.status().subscribe();
    if !send(&tx, Bytes::from_static(b"retry: 2000\n\n"), &cancel).await {
        return;
    }
    'events: loop {
        changes.borrow_and_update();
        if !send(&tx, status_event(&json), &cancel).await {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(timing.min_interval) => {}
            _ = cancel.cancelled() => return,
        }
        loop {
            tokio::select! {
                changed = changes.changed() => match changed {
                    Ok(()) => continue 'events,
                    Err(_) => return,
                },
                _ = tokio::time::sleep(timing.keep_alive) => {
                    if !send(&tx, Bytes::from_static(b": keep-alive\n\n"), &cancel).await {
                        return;
                    }
                }
                _ = tx.closed() => return,
                _ = cancel.cancelled() => return,
            }
        }
    }
}
