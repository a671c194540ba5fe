//! Server-Sent Events on a feed URL (SPEC §9): every item that enters the view after
//! `Last-Event-ID` (else `since`, else from now), in commit order, one event each with
//! `id: cursor:T_O_C`. Positions are taken in the ascending order of the view's time, so
//! the stream reads the view's ascending twin from its last cursor after every wake-up: a
//! client that reconnects with the last id it saw misses nothing and sees nothing twice.

use super::HttpState;
use super::auth::Actor;
use super::errors::ApiError;
use super::formats::{item_json, to_json};
use super::longpoll::Held;
use super::query::FeedQuery;
use super::resolve::{Resolved, common_headers};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use feed::Position;
use feed::ports::Store;
use feed::service::PullRequest;
use metrics::HeldGuard;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

/// Items read per step of a stream.
const BATCH: u64 = 100;
/// A comment line at least this often.
const KEEPALIVE: Duration = Duration::from_secs(15);

struct Streaming<S: Store> {
    st: Arc<HttpState<S>>,
    actor: Actor,
    /// The ascending twin of the view.
    node: String,
    /// The position after which to read next (`cursor:…`), or the start of the view.
    pos: Option<String>,
    held: Held,
    _metric: HeldGuard,
}

/// Answers `GET` with `Accept: text/event-stream`.
pub async fn stream<S: Store>(
    st: Arc<HttpState<S>>,
    actor: Actor,
    feed: &str,
    q: FeedQuery,
    r: Resolved,
    last_event_id: Option<String>,
) -> Result<Response, ApiError> {
    if q.until.is_some() || q.callback.is_some() || q.max.is_some() {
        return Err(ApiError::bad_request("an event stream takes no until, max or callback"));
    }
    let mut asc = r.view.clone();
    asc.order.descending = false;
    let node = asc.canonical();
    let start = match last_event_id.filter(|s| !s.is_empty()).or(q.since) {
        Some(p) => {
            Position::parse(&p).map_err(|e| ApiError::bad_request(format!("Last-Event-ID or since: {e}")))?;
            Some(p)
        }
        None => None,
    };
    // Registered before the first read, so nothing committed from here on is missed.
    let held = st.wakeups.hold(asc);
    let pos = match start {
        Some(p) => Some(p),
        None => {
            // From now: after the view's current last item.
            let req =
                PullRequest { node: node.clone(), max: Some(1), before: Some(String::new()), ..Default::default() };
            let page = st.svc.pull(actor.as_str(), req).await.map_err(|e| ApiError::from_feed(e, &actor))?;
            page.last.map(|c| format!("cursor:{c}"))
        }
    };
    // Checks access (and the position) before the stream starts.
    let probe = PullRequest { node: node.clone(), max: Some(0), after: pos.clone(), ..Default::default() };
    st.svc.pull(actor.as_str(), probe).await.map_err(|e| ApiError::from_feed(e, &actor))?;
    let _metric = st.metrics.held("stream");
    let state = Streaming { st: st.clone(), actor, node, pos, held, _metric };
    let events = futures::stream::unfold(state, step).flat_map(futures::stream::iter);
    let mut res = Sse::new(events).keep_alive(KeepAlive::new().interval(KEEPALIVE)).into_response();
    common_headers(&st, feed, &r.url, "no-cache", &mut res);
    Ok(res)
}

use futures::StreamExt;

/// The next events of a stream: waits until the view has items after its position.
async fn step<S: Store>(mut s: Streaming<S>) -> Option<(Vec<Result<Event, Infallible>>, Streaming<S>)> {
    loop {
        let req = PullRequest { node: s.node.clone(), max: Some(BATCH), after: s.pos.clone(), ..Default::default() };
        let page = match s.st.svc.pull(s.actor.as_str(), req).await {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(error = %e, node = %s.node, "event stream ends");
                return None;
            }
        };
        if let Some(last) = page.cursors.last() {
            s.pos = Some(format!("cursor:{last}"));
            let events = page
                .items
                .iter()
                .zip(&page.cursors)
                .map(|(item, c)| {
                    let kind = if item.is_deleted() { "retract" } else { "item" };
                    Ok(Event::default().id(format!("cursor:{c}")).event(kind).data(to_json(&item_json(item, c))))
                })
                .collect();
            return Some((events, s));
        }
        tokio::select! {
            _ = s.held.changed() => {}
            _ = s.st.closed() => return None,
        }
    }
}
