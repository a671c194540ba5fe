//! The one error type of the HTTP face: every refusal is a status and a JSON body
//! `{"error": CONDITION, "text": "…"}` (SPEC §9), with `WWW-Authenticate: Bearer` on 401 and
//! `Retry-After` on 429 and 503. [`ApiError::from_feed`] is the table from the core's errors.

use super::actor::Actor;
use super::schemas::ErrorJson;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use feed::{FeedError, StoreError};

/// A refusal, ready to be written.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub condition: &'static str,
    pub text: String,
    pub retry_after: Option<u64>,
}

/// Seconds a request refused for want of a held place is told to wait.
const HELD_FULL_RETRY: u64 = 5;

/// The most characters of a client's input an error text quotes.
const QUOTE: usize = 64;

/// `s`, cut to [`QUOTE`] characters.
pub fn quote(s: &str) -> String {
    let mut q: String = s.chars().take(QUOTE).collect();
    if q.len() < s.len() {
        q.push('…');
    }
    q
}

impl ApiError {
    pub fn new(status: StatusCode, condition: &'static str, text: impl Into<String>) -> ApiError {
        ApiError { status, condition, text: text.into(), retry_after: None }
    }

    pub fn bad_request(text: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad-request", text)
    }

    pub fn not_found(text: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "item-not-found", text)
    }

    pub fn unauthorized(text: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "not-authorized", text)
    }

    pub fn too_many(retry_after: u64) -> ApiError {
        ApiError {
            retry_after: Some(retry_after),
            ..ApiError::new(StatusCode::TOO_MANY_REQUESTS, "resource-constraint", "too many requests; slow down")
        }
    }

    /// Every place for a held request is taken (`[http] max_held`).
    pub fn held_full() -> ApiError {
        ApiError {
            retry_after: Some(HELD_FULL_RETRY),
            ..ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "resource-constraint",
                "too many long-polls and event streams are held; try again",
            )
        }
    }

    /// The core's refusal, as `actor` sees it: what an anonymous request may not do needs a
    /// token (401); what a known JID may not do is 403.
    pub fn from_feed(e: FeedError, actor: &Actor) -> ApiError {
        let refused = |text: String| {
            if actor.is_anonymous() {
                ApiError::unauthorized(format!("{text}: a bearer token is needed"))
            } else {
                ApiError::new(StatusCode::FORBIDDEN, "forbidden", text)
            }
        };
        match e {
            FeedError::NodeNotFound(t) => ApiError::not_found(t),
            FeedError::ItemNotFound(id) => ApiError::not_found(format!("no item {:?}", quote(&id))),
            FeedError::BadRequest(t) | FeedError::InvalidJid(t) => ApiError::bad_request(t),
            FeedError::InvalidPayload(t) => ApiError::new(StatusCode::BAD_REQUEST, "invalid-payload", t),
            e @ FeedError::PayloadTooBig { .. } => {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "payload-too-big", e.to_string())
            }
            FeedError::Forbidden(t) => refused(t),
            FeedError::ClosedNode => refused("this feed is restricted".into()),
            e @ FeedError::NotSubscribed(_) => ApiError::bad_request(e.to_string()),
            FeedError::PolicyViolation(t) => ApiError::new(StatusCode::BAD_REQUEST, "policy-violation", t),
            FeedError::NotImplemented(t) => ApiError::new(StatusCode::NOT_IMPLEMENTED, "feature-not-implemented", t),
            FeedError::Store(StoreError::Busy(_)) => ApiError {
                retry_after: Some(1),
                ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "resource-constraint", "the store is busy; try again")
            },
            FeedError::Store(e) => {
                tracing::error!(error = %e, "store failure serving an HTTP request");
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "internal-server-error", "the store failed; try again")
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorJson { error: self.condition.to_string(), text: self.text };
        let mut res = (self.status, axum::Json(body)).into_response();
        let h = res.headers_mut();
        if self.status == StatusCode::UNAUTHORIZED {
            h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(s) = self.retry_after {
            h.insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        res
    }
}
