//! Publisher pings (SPEC §13, the PubSubHubbub publisher side): `POST BASE/hub` with
//! `hub.mode=publish` and `hub.url` (or `hub.topic`, either repeatable) naming configured
//! sources. The hub only passes the URLs on to whoever fetches sources ([`Pinged`], set by
//! the wiring), so the HTTP face knows nothing of fetching: `204` when at least one URL is
//! a configured source, `404` when none is.

use crate::errors::ApiError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// Told the URLs of a ping; answers whether any names a configured source (whose fetch it
/// then starts, or queues behind the one in flight).
pub type Pinged = Arc<dyn Fn(&[String]) -> bool + Send + Sync>;

/// Whether a request form is a ping (`hub.mode=publish`).
pub fn is_ping(body: &[u8]) -> bool {
    url::form_urlencoded::parse(body).any(|(k, v)| k == "hub.mode" && v == "publish")
}

/// Answers a ping: the URLs of its `hub.url` and `hub.topic` fields, handed to `pinged`.
pub fn answer(body: &[u8], pinged: Option<&Pinged>) -> Result<Response, ApiError> {
    let urls: Vec<String> = url::form_urlencoded::parse(body)
        .filter(|(k, v)| (k == "hub.url" || k == "hub.topic") && !v.is_empty())
        .map(|(_, v)| v.into_owned())
        .collect();
    if urls.is_empty() {
        return Err(ApiError::bad_request("hub.url is missing"));
    }
    match pinged {
        Some(pinged) if pinged(&urls) => Ok(StatusCode::NO_CONTENT.into_response()),
        _ => Err(ApiError::new(StatusCode::NOT_FOUND, "item-not-found", "no configured source has this URL")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pings_name_sources_by_url() {
        assert!(is_ping(b"hub.mode=publish&hub.url=x"));
        assert!(!is_ping(b"hub.mode=subscribe&hub.url=x"));
        let known: Pinged = Arc::new(|urls: &[String]| urls.iter().any(|u| u == "http://a/feed"));
        let status = |body: &[u8]| match answer(body, Some(&known)) {
            Ok(r) => r.status(),
            Err(e) => e.into_response().status(),
        };
        assert_eq!(status(b"hub.mode=publish&hub.url=http%3A%2F%2Fa%2Ffeed"), StatusCode::NO_CONTENT);
        assert_eq!(status(b"hub.mode=publish&hub.topic=x&hub.topic=http://a/feed"), StatusCode::NO_CONTENT);
        assert_eq!(status(b"hub.mode=publish&hub.url=http://b/"), StatusCode::NOT_FOUND);
        assert_eq!(status(b"hub.mode=publish"), StatusCode::BAD_REQUEST);
        assert_eq!(
            answer(b"hub.mode=publish&hub.url=x", None).unwrap_err().into_response().status(),
            StatusCode::NOT_FOUND
        );
    }
}
