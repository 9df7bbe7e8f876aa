//! The listener: accepts connections and serves each over HTTP/1.1 with hyper, with the limits
//! `axum::serve` does not let one set, so that a client cannot hold a connection for ever by
//! sending slowly or saying nothing (slowloris):
//!
//! ```text
//!   accepted ──head──> request ──body──> handler ──response──> idle ──head──> request ...
//!   |<-header_timeout->|       |<-body_timeout->|                |<-header_timeout->|
//! ```
//!
//! - `header_timeout` is hyper's header read timeout. It runs from the moment the server starts
//!   waiting for a request's head: on a new connection and after each response on a kept-alive
//!   one. So it is also the idle-connection timeout; hyper has one timer for both.
//! - `body_timeout` bounds the whole body, counted from the end of the head ([`body_deadline`]):
//!   a body sent a byte at a time gets no more time than one that stops.
//!
//! HTTP/1.1 only: every client (workers, the CLI, nginx upstreams, browsers over a proxy) speaks
//! it, and hyper's header timeout does not apply to HTTP/2 nor to the protocol sniffing that
//! serving both needs (a silent connection would wait there for ever).

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use futures_util::StreamExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::AppState;

/// Reading a request body took longer than the body timeout.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {}", humantime::format_duration(*.0))]
pub struct BodyTimedOut(pub Duration);

/// Accepts and serves connections until `shutdown` fires, then lets the requests in flight
/// finish (idle connections are closed at once).
pub(super) async fn run(
    listener: TcpListener,
    app: Router,
    header_timeout: Duration,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(header_timeout);
    let graceful = GracefulShutdown::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    on_accept_error(e).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let conn = graceful.watch(http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone())));
        tokio::spawn(async move {
            // a timeout or a client gone mid-request: the connection's own business
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "connection closed");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// An error of one connection (reset before it was accepted) is skipped; any other (out of file
/// descriptors) is logged and accepting pauses a moment rather than spinning (as axum::serve).
async fn on_accept_error(e: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(e.kind(), ConnectionRefused | ConnectionAborted | ConnectionReset) {
        return;
    }
    tracing::error!(error = %e, "accepting a connection failed");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Middleware: the request body must arrive whole within the body timeout, counted from here
/// (the head has been read); past it, reading the body fails with [`BodyTimedOut`], which the
/// handlers answer 408, and hyper closes the connection, since the rest of the body is unread.
pub(super) async fn body_deadline(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let limit = state.body_timeout;
    let deadline = tokio::time::Instant::now() + limit;
    let (parts, body) = request.into_parts();
    let chunks = futures_util::stream::unfold(Some(body.into_data_stream()), move |chunks| async move {
        let mut chunks = chunks?;
        match tokio::time::timeout_at(deadline, chunks.next()).await {
            Ok(Some(chunk)) => Some((chunk.map_err(axum::BoxError::from), Some(chunks))),
            Ok(None) => None,
            Err(_) => Some((Err(BodyTimedOut(limit).into()), None)),
        }
    });
    next.run(Request::from_parts(parts, Body::from_stream(chunks))).await
}
