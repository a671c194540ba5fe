//! Cross-origin access (SPEC §9: CORS on `open` feeds), with tower-http's `CorsLayer`.
//!
//! A browser on another origin may read an open feed's URLs (pull, stream, items, archives)
//! and see their `ETag` and `Link`; its preflight is answered here, before the token gate,
//! since a preflight carries no token. Whitelist feeds and everything else get no CORS
//! headers: their bearer tokens are not meant to live in other sites' pages. Pull answers of
//! open feeds also carry `Access-Control-Allow-Origin: *` for clients that send no `Origin`
//! (`resolve::common_headers`).

use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue, Method, header};
use feed::policy::{Access, Policy};
use std::sync::Arc;
use std::time::Duration;
use tower_http::cors::{AllowOrigin, CorsLayer};

/// The feed a request path names (`/feeds/FEED/…`), percent-decoded.
fn feed_of(path: &str) -> Option<String> {
    let rest = path.strip_prefix("/feeds/")?;
    let segment = rest.split('/').next().filter(|s| !s.is_empty())?;
    super::bounds::percent_decode(segment).ok()
}

/// Whether a browser on any origin may read what `parts` asks for.
fn open_feed(policy: &Policy, parts: &Parts) -> bool {
    feed_of(parts.uri.path()).is_some_and(|f| policy.feed(&f).access == Access::Open)
}

/// The CORS layer of the HTTP face.
pub fn layer(policy: Arc<Policy>) -> CorsLayer {
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(move |_origin: &HeaderValue, parts: &Parts| open_feed(&policy, parts)))
        .allow_methods([Method::GET, Method::HEAD])
        .allow_headers([
            header::ACCEPT,
            header::AUTHORIZATION,
            header::IF_NONE_MATCH,
            HeaderName::from_static("last-event-id"),
        ])
        .expose_headers([header::ETAG, header::LINK, header::RETRY_AFTER])
        .max_age(Duration::from_secs(600))
}

/// What the CORS layer puts on the answer to a request without `Origin` (a GET of a feed
/// URL): asked of the layer itself, so that answers given without it ([`crate::direct`])
/// carry the same.
pub fn added_without_origin(policy: Arc<Policy>) -> Vec<(HeaderName, HeaderValue)> {
    use futures::FutureExt;
    use tower::{Layer, ServiceExt};
    let bare = tower::service_fn(|_| async { Ok::<_, std::convert::Infallible>(axum::http::Response::new(())) });
    let asked = axum::http::Request::get("/feeds/f/").body(()).expect("a request");
    // The layer answers at once: its origin rule is not asked without an `Origin`.
    match layer(policy).layer(bare).oneshot(asked).now_or_never() {
        Some(Ok(res)) => res.headers().iter().map(|(n, v)| (n.clone(), v.clone())).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_feed_is_the_first_segment_after_feeds() {
        assert_eq!(feed_of("/feeds/comments/").as_deref(), Some("comments"));
        assert_eq!(feed_of("/feeds/caf%C3%A9/items/1").as_deref(), Some("café"));
        assert_eq!(feed_of("/feeds/x/archive/3").as_deref(), Some("x"));
        assert_eq!(feed_of("/feeds/"), None);
        assert_eq!(feed_of("/health"), None);
        assert_eq!(feed_of("/feeds/%FF/"), None);
    }
}
