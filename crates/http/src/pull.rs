//! `GET` on a feed URL: a page of the view (JSON, Atom or JSON-P), held as a long-poll when
//! it would be empty, or an event stream when `text/event-stream` is accepted; `GET` on an
//! item URL; `GET BASE/feeds/`, the feeds the requester may read.

use super::answers::{
    ErrorJson, FeedLink, FeedList, FeedPath, ItemJson, ItemPath, JsonFeed, JsonFeedItem, NotModified, PageJson,
    PullParams, Refusals,
};
use super::asked::Asked;
use super::auth::Actor;
use super::errors::{ApiError, quote};
use super::formats::{Doc, Format, entry_atom, item_json, jsonp, to_json};
use super::query::FeedQuery;
use super::resolve::{SEGMENT, common_headers, feed_base, resolve, with_etag};
use super::{HttpState, St, json_feed, sse};
use axum::Extension;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use feed::View;
use feed::paging::Page;
use feed::ports::Store;
use feed::service::PullRequest;
use percent_encoding::utf8_percent_encode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The parameters a feed URL takes.
pub const PULL_PARAMS: &[&str] =
    &["order", "author", "category", "since", "until", "max", "timeout", "callback", "format"];
/// The default long-poll, seconds (SPEC §9).
const DEFAULT_TIMEOUT: u64 = 55;

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
    let q = FeedQuery::parse(query.as_deref(), PULL_PARAMS)?;
    let r = resolve(&st.svc, &st.settings.base, &feed, &q)?;
    if accept(&headers).contains("text/event-stream") {
        let last_event_id = headers.get("last-event-id").and_then(|v| v.to_str().ok()).map(str::to_string);
        return sse::stream(st, actor, &feed, q, r, last_event_id).await;
    }
    let max = st.svc.page_size(q.max);
    let req = PullRequest {
        node: r.node.clone(),
        max: Some(max),
        after: q.since.clone(),
        before: q.until.clone(),
        ..PullRequest::default()
    };
    let mut page = st.svc.pull(actor.as_str(), req.clone()).await.map_err(|e| ApiError::from_feed(e, &actor))?;
    let timeout = q.timeout.unwrap_or(DEFAULT_TIMEOUT).min(st.settings.max_timeout);
    if page.items.is_empty() && !r.view.order.descending && q.until.is_none() && max > 0 && timeout > 0 {
        page = long_poll(&st, &actor, &r.view, req, Duration::from_secs(timeout)).await?;
    }
    let format = q.format.unwrap_or_else(|| Format::from_accept(accept(&headers), Format::Json));
    let title = st.svc.policy().feed(&feed).title.clone().unwrap_or_else(|| feed.clone());
    let next = page.cursors.last().map(|c| {
        let sep = if r.url.contains('?') { '&' } else { '?' };
        format!("{}{sep}since=cursor%3A{c}&max={max}", r.url)
    });
    let hub = st.settings.hub();
    let doc = Doc {
        url: &r.url,
        next,
        hub: &hub,
        title: &title,
        total: page.count,
        items: &page.items,
        cursors: &page.cursors,
    };
    let body = match format {
        Format::Json => to_json(&doc.json()),
        Format::JsonFeed => to_json(&json_feed::document(&doc, &format!("{}/", st.settings.base), &[])),
        Format::Atom => {
            let mut links = vec![("self", r.url.as_str())];
            if let Some(n) = &doc.next {
                links.push(("next", n.as_str()));
            }
            links.push(("hub", &hub));
            doc.atom(&links, "")
        }
    };
    let (ctype, body) = match &q.callback {
        Some(cb) => ("application/javascript; charset=utf-8", jsonp(cb, &body, format == Format::Atom)),
        None => (format.content_type(), body),
    };
    let mut res = with_etag(&headers, ctype, body);
    common_headers(&st, &feed, &r.url, &format!("max-age={}", st.settings.cache_max_age), &mut res);
    res.headers_mut().insert(header::VARY, HeaderValue::from_static("Accept, Authorization"));
    if q.callback.is_some() {
        res.headers_mut().insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    }
    Ok(res)
}

/// Holds an empty answer until an item enters the view or `timeout` passes, re-reading the
/// view after each wake-up (SPEC §9, long-poll).
async fn long_poll<S: Store>(
    st: &Arc<HttpState<S>>,
    actor: &Actor,
    view: &View,
    req: PullRequest,
    timeout: Duration,
) -> Result<Page, ApiError> {
    let deadline = Instant::now() + timeout;
    let _held_metric = st.metrics.held("longpoll");
    // Registered before the re-read, so a change committed after the first read is seen.
    let mut held = st.wakeups.hold(view.clone());
    let mut woken_by = None;
    loop {
        let page = match woken_by {
            None => st.svc.pull(actor.as_str(), req.clone()).await,
            // Every request woken by the same wake-up shares one read.
            Some(generation) => {
                let (svc, who, asked) = (st.svc.clone(), actor.as_str().to_string(), req.clone());
                let read = || async move { svc.pull(&who, asked).await };
                st.flights.get((actor.as_str().to_string(), req.clone()), generation, read).await
            }
        };
        let page = page.map_err(|e| ApiError::from_feed(e, actor))?;
        if !page.items.is_empty() {
            return Ok(page);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        tokio::select! {
            generation = held.changed() => woken_by = Some(generation),
            _ = tokio::time::sleep(left) => return Ok(page),
            _ = st.closed() => return Ok(page),
        }
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
    let r = resolve(&st.svc, &st.settings.base, &feed, &FeedQuery::default())?;
    let req = PullRequest { node: r.node, ids: vec![id.clone()], ..PullRequest::default() };
    let page = st.svc.pull(actor.as_str(), req).await.map_err(|e| ApiError::from_feed(e, &actor))?;
    let (Some(item), Some(cursor)) = (page.items.first(), page.cursors.first()) else {
        return Err(ApiError::not_found(format!("no item {:?} in {:?}", quote(&id), quote(&feed))));
    };
    let format = Format::from_accept(accept(&headers), Format::Json);
    let body = match format {
        Format::Json => to_json(&item_json(item, cursor)),
        // A single JSON Feed item (the document format has no one-item form).
        Format::JsonFeed => to_json(&json_feed::item(item, cursor)),
        Format::Atom => {
            let e = entry_atom(item, cursor);
            // Standing alone, the entry declares the prefixes it uses.
            e.replacen(
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
    let url = format!("{}items/{}", feed_base(&st.settings.base, &feed), utf8_percent_encode(&id, SEGMENT));
    let mut res = with_etag(&headers, ctype, body);
    common_headers(&st, &feed, &url, &format!("max-age={}", st.settings.cache_max_age), &mut res);
    Ok(res)
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
