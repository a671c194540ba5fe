//! `GET` on a feed URL: a page of the view (JSON, Atom or JSON-P), held as a long-poll when
//! it would be empty, or an event stream when `text/event-stream` is accepted; `GET` on an
//! item URL; `GET BASE/feeds/`, the feeds the requester may read.

use super::answer_cache::{self, Made};
use super::asked::Asked;
use super::auth::Actor;
use super::errors::{ApiError, quote};
use super::formats::{Doc, Format, jsonp};
use super::prepared::Prepared;
use super::query::FeedQuery;
use super::resolve::{SEGMENT, common_headers, feed_base, resolve};
use super::schemas::{
    ErrorJson, FeedLink, FeedList, FeedPath, ItemJson, ItemPath, JsonFeed, JsonFeedItem, NotModified, PageJson,
    PullParams, Refusals,
};
use super::serving::{AskAgain, Prefetch};
use super::{HttpState, St, json_feed, sse};
use axum::Extension;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use feed::FeedError;
use feed::paging::Page;
use feed::ports::Store;
use feed::service::{PullRequest, Readable};
use futures::future::BoxFuture;
use percent_encoding::utf8_percent_encode;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The parameters a feed URL takes.
pub const PULL_PARAMS: &[&str] =
    &["order", "author", "category", "since", "until", "max", "timeout", "callback", "format"];

fn accept(headers: &HeaderMap) -> &str {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("")
}

/// `GET BASE/feeds/FEED/?…`.
#[utoipa::path(get, path = "/feeds/{feed}/", operation_id = "pull", tag = "pull",
    summary = "A page of a view; held as a long-poll when it would be empty; an event stream for text/event-stream",
    params(FeedPath, PullParams),
    responses(
        (status = 200, description = "The page", content(
            (PageJson = "application/json"),
            (JsonFeed = "application/feed+json"),
            (String = "application/atom+xml"),
            (String = "text/event-stream"),
            (String = "application/javascript"),
        )),
        NotModified, Refusals,
    ),
    security((), ("bearer" = [])))]
pub async fn feed<S: Store>(State(st): St<S>, asked: Asked<String>) -> Result<Response, ApiError> {
    let Asked { actor, path: feed, query, headers } = asked;
    if accept(&headers).contains("text/event-stream") {
        let q = FeedQuery::parse(query.as_deref(), PULL_PARAMS)?;
        let r = resolve(&st.svc, &actor, &st.settings.base, &feed, &q)?;
        let last_event_id = headers.get("last-event-id").and_then(|v| v.to_str().ok()).map(str::to_string);
        return Box::pin(sse::stream(st, actor, &feed, q, r, last_event_id)).await;
    }
    let p = st.pulls.get(&st, &actor, &feed, query.as_deref(), accept(&headers))?;
    // Only the validators are read from here on: the rest is not kept while the request is held.
    let asking = Asking { p, validators: validators(headers) };
    let p = &asking.p;
    let err = |e| ApiError::from_feed(e, &actor);
    let generation = Box::pin(st.generations.get(&st.svc, &p.view)).await.map_err(err)?;
    match p.answer(&st.answers, generation) {
        // A kept empty answer of a request that holds: the request waits like any other.
        Some(a) if !(p.holds && a.empty) => return Ok(asking.respond(&st, &a)),
        _ if !p.holds && answer_cache::matches(&asking.validators, &answer_cache::etag(&p.key, generation)) => {
            // The client's copy is current, and this request is never held: no read at all.
            let mut res = axum::http::StatusCode::NOT_MODIFIED.into_response();
            res.headers_mut().insert(header::ETAG, answer_cache::etag(&p.key, generation));
            return Ok(asking.finish(&st, res));
        }
        _ => {}
    }
    if !p.holds {
        let page = Box::pin(st.svc.pull_view(&p.view, p.read.1.clone())).await.map_err(err)?;
        return Ok(asking.answer(&st, &(generation, page)));
    }
    // Registered before the first read, so a change committed after it is seen.
    let reread = Arc::new(Reread { st: st.clone(), p: p.clone() });
    let watch = st.holds.watch(p.view.view().clone(), Some(reread));
    // A request that may be held reads as a long-poll from the start: requests asked again
    // after the same change (re-armed long-polls) share that first read too. Its tag is the
    // generation the view's counter had when it was registered; it must show at least the
    // feed's `generation` read above (every write answered before this request).
    let read = Box::pin(shared_read(&st, &p.view, &p.read, watch.generation(), generation)).await.map_err(err)?;
    if !read.1.items.is_empty() {
        return Ok(asking.answer(&st, &read));
    }
    let deadline = Instant::now() + Duration::from_secs(p.timeout);
    let poll = LongPoll { st: st.clone(), actor, read, asking };
    st.holds.hold(watch, deadline, poll).map_err(|_| ApiError::held_full())
}

/// What a page answer is made of besides the page; what a held long-poll keeps of its request.
struct Asking {
    p: Arc<Prepared>,
    validators: HeaderMap,
}

impl Asking {
    /// The answer for `read` (a page and the feed's generation read just before it): the
    /// kept one made from the same generation (another request woken by the same change
    /// made it already), or made now and kept.
    fn answer<S: Store>(&self, st: &HttpState<S>, read: &(i64, Page)) -> Response {
        let (generation, page, p) = (read.0, &read.1, &self.p);
        let answer = match p.answer(&st.answers, generation) {
            Some(a) => a,
            None => {
                let (ctype, body) = render(st, &p.feed, &p.url, p.max, p.format, p.callback.as_deref(), page);
                let made = Made { content_type: ctype, body, empty: page.items.is_empty(), archived: false };
                p.keep(&st.answers, generation, made)
            }
        };
        self.respond(st, &answer)
    }

    /// `answer` as sent to this request: 304 when the client has it, with a pull's headers.
    fn respond<S: Store>(&self, st: &HttpState<S>, answer: &answer_cache::Answer) -> Response {
        answer.respond(&self.validators, || self.headers(st))
    }

    /// `res` with a pull's headers besides its ETag.
    fn finish<S: Store>(&self, st: &HttpState<S>, mut res: Response) -> Response {
        res.headers_mut().extend(self.headers(st));
        res
    }

    /// A pull's headers besides its type and ETag.
    fn headers<S: Store>(&self, st: &HttpState<S>) -> HeaderMap {
        let p = &self.p;
        let mut h = common_headers(st, &p.feed, &p.url, &format!("max-age={}", st.settings.cache_max_age));
        h.insert(header::VARY, HeaderValue::from_static("Accept, Authorization"));
        if p.callback.is_some() {
            h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
        }
        h
    }
}

/// The request's `If-None-Match` headers, all an answer reads of them once it is chosen.
fn validators(all: HeaderMap) -> HeaderMap {
    let mut kept = HeaderMap::new();
    for v in all.get_all(header::IF_NONE_MATCH) {
        kept.append(header::IF_NONE_MATCH, v.clone());
    }
    kept
}

/// A page in the asked format: its content type and body.
fn render<S: Store>(
    st: &HttpState<S>,
    feed: &str,
    url: &str,
    max: u64,
    format: Format,
    callback: Option<&str>,
    page: &Page,
) -> (&'static str, String) {
    let title = st.svc.policy().feed(feed).title.clone().unwrap_or_else(|| feed.to_string());
    let next = page.cursors.last().map(|c| {
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}since=cursor%3A{c}&max={max}")
    });
    let hub = st.settings.hub();
    let items = st.renders.all(feed, &page.items);
    let doc = Doc { url, next, hub: &hub, title: &title, total: page.count, items: &items, cursors: &page.cursors };
    let body = match format {
        Format::Json => doc.json(),
        Format::JsonFeed => json_feed::document(&doc, &format!("{}/", st.settings.base), &[], false),
        Format::Atom => {
            let mut links = vec![("self", url)];
            if let Some(n) = &doc.next {
                links.push(("next", n.as_str()));
            }
            links.push(("hub", &hub));
            doc.atom(&links, "")
        }
    };
    match callback {
        Some(cb) => ("application/javascript; charset=utf-8", jsonp(cb, &body, format == Format::Atom)),
        None => (format.content_type(), body),
    }
}

/// A read of a view for held requests (long-polls, event streams as they start), shared by
/// every request asking the same of it after the same wake-up `generation` of the view:
/// the feed's generation read just before the page, and the page. `asked` is who asks
/// and the read asked, the reads' group.
///
/// `seen` is the feed's generation the caller read as it began, so that it sees every write
/// answered before it asked: the wake-up counters are raised by a task after the commit,
/// so a request that comes right after a write's answer can find the view's counter, and
/// hence a read shared under it, from before that write. Such a read is not taken then.
/// A woken caller passes 0: its wake-up's generation already stands for the change.
pub(crate) async fn shared_read<S: Store>(
    st: &Arc<HttpState<S>>,
    view: &Readable,
    asked: &Arc<(String, PullRequest)>,
    generation: u64,
    seen: i64,
) -> Result<Arc<(i64, Page)>, FeedError> {
    let read = {
        let (st, view, asked) = (st.clone(), view.clone(), asked.clone());
        || async move { read_now(&st, &view, &asked.1).await }
    };
    let shared = st.flights.get(asked.clone(), generation, read).await?;
    if shared.0 >= seen {
        return Ok(shared);
    }
    // Rare (a request racing its own write's wake-up): its own read, not shared.
    read_now(st, view, &asked.1).await
}

/// The feed's generation, then the page `asked` of `view`.
async fn read_now<S: Store>(
    st: &HttpState<S>,
    view: &Readable,
    asked: &PullRequest,
) -> Result<Arc<(i64, Page)>, FeedError> {
    let g = st.generations.get(&st.svc, view).await?;
    Ok(Arc::new((g, st.svc.pull_view(view, asked.clone()).await?)))
}

/// What a held long-poll reads when woken, read by the wake-up registry before it wakes
/// the long-polls that hold the same request ([`crate::serving::Prefetch`]): they find it
/// read and answer at once.
struct Reread<S: Store> {
    st: Arc<HttpState<S>>,
    p: Arc<Prepared>,
}

impl<S: Store> Prefetch for Reread<S> {
    fn read(&self, generation: u64) -> BoxFuture<'static, ()> {
        let (st, p) = (self.st.clone(), self.p.clone());
        Box::pin(async move {
            let _ = shared_read(&st, &p.view, &p.read, generation, 0).await;
        })
    }
}

/// A long-poll whose page was empty, held until an item enters the view or its deadline
/// passes (SPEC §9, long-poll): it re-reads the view after each wake-up and answers the
/// last page read, as shared by every request woken with it (not copied: most find their
/// answer made already). What it keeps is all a held long-poll costs besides its wait.
struct LongPoll<S: Store> {
    st: Arc<HttpState<S>>,
    actor: Actor,
    read: Arc<(i64, Page)>,
    asking: Asking,
}

impl<S: Store> AskAgain for LongPoll<S> {
    fn ask(&mut self, generation: u64) -> BoxFuture<'_, Option<Response>> {
        Box::pin(async move {
            let p = &self.asking.p;
            match shared_read(&self.st, &p.view, &p.read, generation, 0).await {
                Ok(read) if read.1.items.is_empty() => {
                    self.read = read;
                    None
                }
                Ok(read) => Some(self.asking.answer(&self.st, &read)),
                Err(e) => Some(ApiError::from_feed(e, &self.actor).into_response()),
            }
        })
    }

    fn last(self: Box<Self>) -> Response {
        self.asking.answer(&self.st, &self.read)
    }
}

/// `GET BASE/feeds/FEED/items/ID`: one item, JSON or an Atom entry.
#[utoipa::path(get, path = "/feeds/{feed}/items/{id}", operation_id = "pull_item", tag = "pull", summary = "One item",
    params(ItemPath, ("callback" = Option<String>, Query, description = "JSON-P: wrap the answer in this function call")),
    responses(
        (status = 200, description = "The item", content(
            (ItemJson = "application/json"),
            (JsonFeedItem = "application/feed+json"),
            (String = "application/atom+xml"),
            (String = "application/javascript"),
        )),
        NotModified, Refusals,
    ),
    security((), ("bearer" = [])))]
pub async fn item<S: Store>(State(st): St<S>, asked: Asked<(String, String)>) -> Result<Response, ApiError> {
    let Asked { actor, path: (feed, id), query, headers } = asked;
    let q = FeedQuery::parse(query.as_deref(), &["callback"])?;
    let r = resolve(&st.svc, &actor, &st.settings.base, &feed, &FeedQuery::default())?;
    let format = Format::from_accept(accept(&headers), Format::Json);
    let url = format!("{}items/{}", feed_base(&st.settings.base, &feed), utf8_percent_encode(&id, SEGMENT));
    let key = format!("item\n{url}\n{format:?}\n{:?}", q.callback);
    let err = |e| ApiError::from_feed(e, &actor);
    let generation = Box::pin(st.generations.get(&st.svc, &r.view)).await.map_err(err)?;
    let answer = match st.answers.get(&key, generation) {
        Some(a) => a,
        None => {
            let req = PullRequest { ids: vec![id.clone()], ..PullRequest::default() };
            let page = st.svc.pull_view(&r.view, req).await.map_err(err)?;
            let (Some(item), Some(cursor)) = (page.items.first(), page.cursors.first()) else {
                return Err(ApiError::not_found(format!("no item {:?} in {:?}", quote(&id), quote(&feed))));
            };
            let (rendered, cursor) = (st.renders.of(&feed, item), cursor.to_string());
            let body = match format {
                Format::Json => rendered.json.with(&cursor),
                // A single JSON Feed item (the document format has no one-item form).
                Format::JsonFeed => rendered.json_feed.with(&cursor),
                Format::Atom => {
                    // Standing alone, the entry declares the prefixes it uses.
                    rendered.atom.with(&cursor).replacen(
                        ">",
                        &format!(r#" xmlns:fo="{}" xmlns:at="{}">"#, super::formats::FO, super::formats::TOMBSTONES),
                        1,
                    )
                }
            };
            let ctype = match format {
                Format::Atom => "application/atom+xml; type=entry; charset=utf-8",
                other => other.content_type(),
            };
            let (ctype, body) = match &q.callback {
                Some(cb) => ("application/javascript; charset=utf-8", jsonp(cb, &body, format == Format::Atom)),
                None => (ctype, body),
            };
            st.answers.put(key, generation, Made { content_type: ctype, body, empty: false, archived: false })
        }
    };
    let cache = format!("max-age={}", st.settings.cache_max_age);
    Ok(answer.respond(&headers, || common_headers(&st, &feed, &url, &cache)))
}

/// `GET BASE/feeds/`: `{"feeds": [{"name", "title", "url"}]}` for the feeds the requester
/// may read.
#[utoipa::path(get, path = "/feeds/", operation_id = "list_feeds", tag = "pull", summary = "The feeds the requester may read",
    responses((status = 200, description = "The feeds", body = FeedList), (status = 401, description = "An unknown bearer token", body = ErrorJson)),
    security((), ("bearer" = [])))]
pub async fn list<S: Store>(st: St<S>, Extension(actor): Extension<Actor>) -> Result<Response, ApiError> {
    let st = st.0;
    let feeds = st.svc.feeds(actor.as_str(), None, 10_000).await.map_err(|e| ApiError::from_feed(e, &actor))?;
    let feeds = feeds
        .into_iter()
        .map(|f| FeedLink { url: feed_base(&st.settings.base, &f.name), name: f.name, title: f.title })
        .collect();
    let mut res = axum::Json(FeedList { feeds }).into_response();
    res.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(res)
}
