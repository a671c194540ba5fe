//! `BASE/sources/KEY`: the callbacks of smartfeeds' own subscriptions to the hubs of its
//! sources (SPEC §13, WebSub's subscriber side). The hub only passes what arrives on to
//! whoever subscribed ([`SourceCallbacks`], set by the wiring), so the HTTP face knows
//! nothing of sources: a verification of intent is echoed when the subscriber recognises it
//! (else `404`), and a delivery is handed over as it came and answered `202` whatever its
//! signature, as WebSub asks (a bad one is ignored by the subscriber).

use super::Hub;
use crate::errors::ApiError;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use feed::ports::Store;
use std::collections::HashMap;
use std::sync::Arc;

/// The subscriber side of smartfeeds' subscriptions to its sources' hubs.
pub trait SourceCallbacks: Send + Sync {
    /// Whether the subscription behind `key` wants this verification (`hub.mode`,
    /// `hub.topic`, `hub.lease_seconds`); it takes effect when true.
    fn verify(&self, key: &str, mode: &str, topic: &str, lease: Option<u64>) -> bool;
    /// A delivery to `key`: its `X-Hub-Signature` and body.
    fn deliver(&self, key: &str, signature: Option<&str>, body: &[u8]);
    /// The largest delivery read.
    fn max_bytes(&self) -> usize;
}

/// `GET BASE/sources/KEY`: a verification of intent.
pub async fn verify<S: Store>(
    State(hub): State<Arc<Hub<S>>>,
    Path(key): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let field = |k: &str| q.get(k).map(String::as_str).unwrap_or("");
    let lease = q.get("hub.lease_seconds").and_then(|l| l.parse().ok());
    match hub.sources.get() {
        Some(s) if s.verify(&key, field("hub.mode"), field("hub.topic"), lease) => {
            field("hub.challenge").to_string().into_response()
        }
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

/// `POST BASE/sources/KEY`: a delivery.
pub async fn deliver<S: Store>(
    State(hub): State<Arc<Hub<S>>>,
    Path(key): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let Some(sources) = hub.sources.get() else { return Ok(StatusCode::NOT_FOUND.into_response()) };
    let body = crate::bounds::read_body(body, sources.max_bytes()).await?;
    let signature = headers.get("x-hub-signature").and_then(|v| v.to_str().ok());
    sources.deliver(&key, signature, &body);
    Ok(StatusCode::ACCEPTED.into_response())
}
