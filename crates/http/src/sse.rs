//! Server-Sent Events on a feed URL (SPEC §9): every item that enters the view after
//! `Last-Event-ID` (else `since`, else from now), in commit order, one event each with
//! `id: cursor:T_O_C`. Positions are taken in the ascending order of the view's time, so
//! the stream reads the view's ascending twin from its last cursor after every wake-up: a
//! client that reconnects with the last id it saw misses nothing and sees nothing twice.

use super::auth::Actor;
use super::errors::ApiError;
use super::pull::shared_read;
use super::query::FeedQuery;
use super::resolve::{Resolved, common_headers};
use super::serving::{Place, Watch};
use crate::state::HttpState;
use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use bytes::Bytes;
use feed::ports::Store;
use feed::service::{PullRequest, Readable};
use feed::{FeedError, Position};
use futures::StreamExt;
use metrics::HeldGuard;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

/// Items read per step of a stream.
const BATCH: u64 = 100;
/// A comment line at least this often.
const KEEPALIVE: Duration = Duration::from_secs(15);

/// The events of one read: every stream at the same place of the same view sends these
/// very bytes.
pub struct Events {
    bytes: Bytes,
    /// Where the streams that sent these go on from (`cursor:` of the last event), made once
    /// for all of them; `None` when there were no items.
    next: Option<Arc<str>>,
    /// Whether the read found fewer items than it could take: nothing was left after them.
    all: bool,
}

/// Reads of streams shared by the streams at the same place: by actor and view (one string
/// per stream, made once) and position, for a wake-up generation (see
/// [`crate::serving::single_flight`]). Keys are shared strings, so ten thousand streams woken at once
/// copy none.
pub type EventFlights =
    super::serving::single_flight::SingleFlight<(Arc<str>, Option<Arc<str>>), u64, Arc<Events>, FeedError>;

struct Streaming<S: Store> {
    st: Arc<HttpState<S>>,
    /// The ascending twin of the view, named and as read.
    node: String,
    view: Readable,
    /// The actor and the node: the stream's part of its reads' key.
    asker: Arc<str>,
    /// The position after which to read next (`cursor:…`), or the start of the view.
    pos: Option<Arc<str>>,
    /// The wake-up generation of the view as of which the stream has every item: no need to
    /// read again before the next wake-up.
    caught_up: Option<u64>,
    held: Watch,
    _metric: HeldGuard,
    _place: Place,
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
    let asc = r.view.ascending();
    let node = asc.view().canonical();
    let start = match last_event_id.filter(|s| !s.is_empty()).or(q.since) {
        Some(p) => {
            Position::parse(&p).map_err(|e| ApiError::bad_request(format!("Last-Event-ID or since: {e}")))?;
            Some(p)
        }
        None => None,
    };
    // Registered before the first read, so nothing committed from here on is missed. Streams
    // starting on the same view between two of its changes share these reads.
    let place = st.holds.place().map_err(|_| ApiError::held_full())?;
    let held = st.holds.watch(asc.view().clone(), None);
    let pos = match start {
        Some(p) => Some(p),
        None => {
            // From now: after the view's current last item.
            let req =
                PullRequest { node: node.clone(), max: Some(1), before: Some(String::new()), ..Default::default() };
            let asked = Arc::new((actor.as_str().to_string(), req));
            // "Now" is after every write answered before the stream was asked for.
            let err = |e| ApiError::from_feed(e, &actor);
            let seen = Box::pin(st.generations.get(&st.svc, &asc)).await.map_err(err)?;
            let read = Box::pin(shared_read(&st, &asc, &asked, held.generation(), seen)).await.map_err(err)?;
            read.1.last.as_ref().map(|c| format!("cursor:{c}"))
        }
    };
    // Checks access (and the position) before the stream starts.
    let probe = PullRequest { node: node.clone(), max: Some(0), after: pos.clone(), ..Default::default() };
    let probe = Arc::new((actor.as_str().to_string(), probe));
    Box::pin(shared_read(&st, &asc, &probe, held.generation(), 0)).await.map_err(|e| ApiError::from_feed(e, &actor))?;
    let _metric = st.metrics.held("stream");
    let asker = format!("{}\n{node}", actor.as_str()).into();
    let pos = pos.map(Arc::from);
    let state =
        Streaming { st: st.clone(), node, view: asc, asker, pos, caught_up: None, held, _metric, _place: place };
    let events = futures::stream::unfold(state, step).map(Ok::<_, Infallible>);
    let mut res = Response::new(Body::from_stream(events));
    res.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    res.headers_mut().extend(common_headers(&st, feed, &r.url, "no-cache"));
    Ok(res)
}

/// The next bytes of a stream: the events after its position once the view has some, or a
/// keep-alive comment. Streams at the same place share one read and its bytes; a stream
/// behind (a slow reader, a resumed one) reads on its own, from its own position, and
/// delays nobody. A stream that has every item as of the view's last wake-up does not read
/// again until the next.
#[expect(clippy::manual_async_fn, reason = "an async fn keeps its arguments twice")]
fn step<S: Store>(mut s: Streaming<S>) -> impl Future<Output = Option<(Bytes, Streaming<S>)>> + Send {
    // A block, not an `async fn`, which would keep the stream's state twice (see
    // `serving::hold`) for as long as the stream waits.
    async move {
        let mut generation = s.held.generation();
        // A stop wakes every held request (see `serve`); one that registered after sees it here.
        while !s.st.holds.is_closing() {
            if s.caught_up != Some(generation)
                && let Some(events) = read(&mut s, generation).await?
            {
                return Some((events, s));
            }
            tokio::select! {
                g = s.held.changed() => generation = g,
                _ = tokio::time::sleep(KEEPALIVE) => return Some((Bytes::from_static(b":\n\n"), s)),
            }
        }
        None
    }
}

/// Reads the events after the stream's position, shared with every stream at the same place
/// woken by the same wake-up: `None` (the stream ends) if the read fails, `Some(None)` when
/// there are none.
async fn read<S: Store>(s: &mut Streaming<S>, generation: u64) -> Option<Option<Bytes>> {
    // What the read needs is copied only by the stream that starts it.
    let read = || {
        let (st, view) = (s.st.clone(), s.view.clone());
        let pos = s.pos.as_deref().map(str::to_string);
        async move {
            let req = PullRequest { max: Some(BATCH), after: pos, ..Default::default() };
            let page = st.svc.pull_view(&view, req).await?;
            let mut text = String::new();
            for (item, c) in page.items.iter().zip(&page.cursors) {
                st.renders.of(&view.view().feed, item).event(&c.to_string(), &mut text);
            }
            let all = (page.items.len() as u64) < BATCH;
            let next = page.cursors.last().map(|c| Arc::from(format!("cursor:{c}")));
            Ok(Arc::new(Events { bytes: Bytes::from(text), next, all }))
        }
    };
    let group = (s.asker.clone(), s.pos.clone());
    // Boxed for its while: the read's future is larger than what a waiting stream keeps.
    let events = match Box::pin(s.st.events.get(group, generation, read)).await {
        Ok(e) => e,
        Err(e) => {
            tracing::debug!(error = %e, node = %s.node, "event stream ends");
            return None;
        }
    };
    if events.all {
        s.caught_up = Some(generation);
    }
    match &events.next {
        Some(next) => {
            s.pos = Some(next.clone());
            Some(Some(events.bytes.clone()))
        }
        None => Some(None),
    }
}
