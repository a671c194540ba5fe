//! A request's feed and view as the face resolves them, and what every answer about a view
//! carries: its URLs, caching, `Link` and CORS headers (its ETag: [`crate::answer_cache`]).

use super::errors::{ApiError, quote};
use super::query::FeedQuery;
use crate::auth::Actor;
use crate::state::HttpState;
use axum::extract::rejection::PathRejection;
use axum::http::{HeaderMap, HeaderValue, header};
use feed::NodeName;
use feed::policy::Access;
use feed::ports::Store;
use feed::service::{Readable, Service};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// What a path segment keeps unencoded.
pub const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');

/// `BASE/feeds/FEED/`.
pub fn feed_base(base: &str, feed: &str) -> String {
    format!("{base}/feeds/{}/", utf8_percent_encode(feed, SEGMENT))
}

pub fn path_error(e: PathRejection) -> ApiError {
    ApiError::bad_request(format!("bad path: {}", quote(&e.body_text())))
}

/// A view as the face resolves it: its node name, the view as its requester may read it,
/// and its feed URL.
pub struct Resolved {
    pub node: String,
    pub view: Readable,
    pub url: String,
}

/// Resolves the feed and view parameters of a request by `actor`, who must be allowed to
/// read the view (the one question to the policy for the request); `base` is the public
/// prefix.
pub fn resolve<S: Store>(
    svc: &Service<S>,
    actor: &Actor,
    base: &str,
    feed: &str,
    q: &FeedQuery,
) -> Result<Resolved, ApiError> {
    let (node, name): (String, NodeName) = q.node(feed)?;
    let view = svc.readable(actor.as_str(), name).map_err(|e| ApiError::from_feed(e, actor))?;
    let url = format!("{}{}", feed_base(base, feed), q.view_query());
    Ok(Resolved { node, view, url })
}

/// Headers every pull answer carries: caching, `Link` (hub and self), CORS on open feeds.
pub fn common_headers<S: Store>(st: &HttpState<S>, feed: &str, url: &str, cache: &str) -> HeaderMap {
    let mut h = HeaderMap::with_capacity(6);
    if let Ok(v) = HeaderValue::from_str(cache) {
        h.insert(header::CACHE_CONTROL, v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!("<{}>; rel=\"hub\", <{url}>; rel=\"self\"", st.settings.hub())) {
        h.insert(header::LINK, v);
    }
    if st.svc.policy().feed(feed).access == Access::Open {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    }
    h
}
