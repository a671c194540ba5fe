//! GETs of a feed URL answered without the router and layers ([`serving::Direct`]): the
//! face's most frequent requests, pulls and long-polls asked again after each answer, skip
//! routing, the layers' futures and their boxing, and get what those would have given them:
//! the log of answers, the timeout, the headers CORS puts on a request without `Origin`,
//! the gate (bounds, token, rate, metrics under the feed URL's route), then the pull
//! handler itself. Anything else (another path, a request from a browser on another origin,
//! a feed name that does not decode) goes through the router as before.
//!
//! `tests/e2e_http_hostile.rs` (`feed_gets_answer_the_same_whichever_path_serves_them`) holds
//! the two to the same answers.

use crate::asked::Asked;
use crate::bounds::percent_decode;
use crate::state::HttpState;
use crate::{cors, pull, router, serving};
use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderName, HeaderValue, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use feed::ports::Store;
use futures::future::BoxFuture;
use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The route a feed URL's GET is counted under, as the router names it.
const ROUTE: &str = "/feeds/{feed}/";

/// The face's direct GETs; see the module docs.
pub struct FeedGets<S: Store> {
    st: Arc<HttpState<S>>,
    /// The timeout layer's bound.
    timeout: Duration,
    /// What the CORS layer puts on an answer to a request without `Origin`.
    cors: Arc<[(HeaderName, HeaderValue)]>,
}

impl<S: Store> FeedGets<S> {
    pub fn new(st: Arc<HttpState<S>>) -> FeedGets<S> {
        let timeout = router::timeout(&st.settings);
        let cors = cors::added_without_origin(st.svc.policy().clone()).into();
        FeedGets { st, timeout, cors }
    }
}

/// The feed segment of a GET of `BASE/feeds/FEED/`, if the path is that and nothing more.
fn feed_segment(path: &str) -> Option<&str> {
    let segment = path.strip_prefix("/feeds/")?.strip_suffix('/')?;
    (!segment.is_empty() && !segment.contains('/')).then_some(segment)
}

/// The feed a GET of `BASE/feeds/FEED/` names, if the path is that and nothing more.
fn feed_of(path: &str) -> Option<String> {
    percent_decode(feed_segment(path)?).ok()
}

impl<S: Store> serving::Direct for FeedGets<S> {
    fn takes(&self, req: &Request<Body>) -> bool {
        // Decoded here only when it has something to decode (most names have not).
        let named = |s: &str| !s.contains('%') || percent_decode(s).is_ok();
        !req.headers().contains_key(header::ORIGIN) && feed_segment(req.uri().path()).is_some_and(named)
    }

    fn get(&self, req: Request<Body>) -> BoxFuture<'static, Response> {
        let feed = feed_of(req.uri().path()).unwrap_or_default();
        let (st, timeout, cors) = (self.st.clone(), self.timeout, self.cors.clone());
        let logged = router::log(&req);
        Box::pin(async move {
            let started = logged.started;
            let answer = serving::within((started + timeout).into(), async {
                let (parts, _) = req.into_parts();
                let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
                let mut res = match router::pass(&st, &parts.method, &parts.uri, &parts.headers, peer).await {
                    Ok(actor) => {
                        let query = parts.uri.query().map(str::to_string);
                        let asked = Asked { actor, path: feed, query, headers: parts.headers };
                        pull::feed(State(st.clone()), asked).await.unwrap_or_else(IntoResponse::into_response)
                    }
                    Err(refused) => refused.into_response(),
                };
                router::count(&st, Cow::Borrowed(ROUTE), started, &mut res);
                res
            });
            let mut res = match answer.await {
                Ok(res) => res,
                Err(_) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
            };
            // On the real answer: a held request's stand-in then carries no headers to move.
            serving::observe(&mut res, move |res: &mut Response| {
                serving::settle(cors.iter(), res);
                serving::Observe::answered(logged, res);
            });
            res
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_feed_url_itself_is_taken() {
        assert_eq!(feed_of("/feeds/news/").as_deref(), Some("news"));
        assert_eq!(feed_of("/feeds/caf%C3%A9/").as_deref(), Some("café"));
        for other in ["/feeds/news", "/feeds/", "/feeds//", "/feeds/a/items/1", "/feeds/a/archive/", "/", "/feeds/%FF/"]
        {
            assert_eq!(feed_of(other), None, "{other}");
        }
    }
}
