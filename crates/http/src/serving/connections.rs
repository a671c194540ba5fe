//! How the HTTP face takes connections (SPEC §9; README "Bounds"): plain GETs on a path of
//! their own ([`plain_gets`]), everything else on hyper's HTTP/1.1 server:
//!
//! - at most `max_connections` at once. Past that, no more are accepted: new ones wait in
//!   the kernel's listen backlog until one closes (and past the backlog the kernel drops
//!   their connection attempts, which clients retry), so one more client costs nothing;
//! - the head of each request (request line and headers) must arrive within
//!   `header_timeout`, counted from the moment the connection is ready for it: a slow-loris
//!   client, or a kept-alive connection left idle, is closed when it runs out;
//! - at most [`MAX_HEADERS`] headers and [`MAX_HEAD`] bytes of head: 431 past them, 414
//!   for a request line longer than the head's bound (on a connection already handed to
//!   hyper, 431 for that too);
//! - a client that pipelines more than a head's bound behind a request not yet answered is
//!   disconnected (its request ended), since its leaving could no longer be seen;
//! - a 304 carries no `Content-Length` (RFC 9110 §8.6);
//! - hyper refuses odd framing with 400 and closes the connection: `Content-Length`
//!   repeated with different values or not a number, obsolete line folding, a
//!   `Transfer-Encoding` whose last coding is not `chunked`, white space before a colon.
//!   A request framed both by `Content-Length` and `Transfer-Encoding` is read by the
//!   latter and the connection closed after its answer (RFC 9112 §6.1), so whatever the
//!   other framing would have made of the rest is never read as a request.
//!
//! The body is bounded by [`bounds`](crate::bounds), once routed.

use super::{hold, plain_gets, rewind};
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use metrics::Metrics;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Semaphore, watch};
use tower::ServiceExt;

/// The most headers a request may carry.
pub const MAX_HEADERS: usize = 64;
/// The most bytes a request's head (request line and headers) may take.
pub const MAX_HEAD: usize = 16 * 1024;

/// The bounds on connections `[http]` sets.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub header_timeout: Duration,
}

/// Serves `app` on `listener` within `limits` until `stop` resolves; then stops accepting,
/// lets requests in flight finish (held ones end with the face's closing signal) and returns
/// once every connection is closed.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: crate::App,
    direct: Arc<dyn super::Direct>,
    limits: ConnectionLimits,
    metrics: Arc<Metrics>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut http1 = hyper::server::conn::http1::Builder::new();
    http1
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_headers(MAX_HEADERS)
        .max_header_size(MAX_HEAD);
    let http1 = Arc::new(http1);
    // One face for every connection, which clones it per request for as long as the call.
    let app = Arc::new(app);
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let (stopping_tx, stopping) = watch::channel(false);
    let mut stop = std::pin::pin!(stop);
    loop {
        // A free place first, then a connection: past the cap they wait in the backlog.
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => p.expect("the semaphore is never closed"),
            () = &mut stop => break,
        };
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let _ = tcp.set_nodelay(true);
        let mut plain = plain_gets::Plain {
            app: app.clone(),
            direct: direct.clone(),
            peer,
            header_timeout: limits.header_timeout,
            stopping: stopping.clone(),
        };
        // Held from the start, so that a stop waits for this connection on either path.
        let watcher = graceful.watcher();
        let (http1, open) = (http1.clone(), metrics.http_connections.clone());
        open.inc();
        tokio::spawn(async move {
            if let plain_gets::Ended::ToHyper(tcp, read) = plain_gets::serve(tcp, &mut plain).await {
                let app = crate::App::clone(&plain.app);
                let service = app
                    .map_request(move |mut req: axum::http::Request<Incoming>| {
                        req.extensions_mut().insert(ConnectInfo(peer));
                        req.map(axum::body::Body::new)
                    })
                    .and_then(|res| async {
                        let mut res = hold::answer(res).await;
                        if res.status() == axum::http::StatusCode::NOT_MODIFIED {
                            // As on the plain path: the router's zero is not the 200's length.
                            res.headers_mut().remove(axum::http::header::CONTENT_LENGTH);
                        }
                        Ok::<_, std::convert::Infallible>(res)
                    });
                let io = TokioIo::new(rewind::Rewind::new(read, tcp));
                // Boxed: the task keeps only what the plain path needs while it serves.
                let conn = Box::pin(watcher.watch(http1.serve_connection(io, TowerToHyperService::new(service))));
                if let Err(e) = conn.await {
                    tracing::debug!(%peer, error = %e, "HTTP connection ended");
                }
            }
            open.dec();
            drop(permit);
        });
    }
    drop(listener);
    let _ = stopping_tx.send(true);
    graceful.shutdown().await;
    Ok(())
}

/// An accept that failed: a connection reset before it was taken is nothing; anything else
/// (out of file descriptors) is logged and waited out, as a busy loop would not help.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind::*;
    if matches!(e.kind(), ConnectionAborted | ConnectionReset | ConnectionRefused) {
        return;
    }
    tracing::warn!(error = %e, "cannot accept an HTTP connection; trying again in a second");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
