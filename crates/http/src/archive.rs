//! Archives (SPEC §11, RFC 5005 and Simplefeed): `BASE/feeds/FEED/archive/` is the recent
//! document, `archive/K` the K-th. Items are numbered by creation (1 = oldest); document K
//! holds items `(K-1)·P+1 … K·P`, newest first. Every document is one keyset read at a known
//! creation index, so the oldest document of a huge feed costs what the newest does.

use super::answers::{ArchiveParams, FeedPath, JsonFeed, NotModified, Refusals};
use super::asked::Asked;
use super::auth::Actor;
use super::errors::{ApiError, quote};
use super::formats::{Doc, Format};
use super::json_feed;
use super::query::FeedQuery;
use super::resolve::{common_headers, feed_base, with_etag};
use super::{HttpState, St};
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::Response;
use feed::ports::Store;
use feed::service::PullRequest;
use std::sync::Arc;

/// `GET BASE/feeds/FEED/archive/`.
#[utoipa::path(get, path = "/feeds/{feed}/archive/", operation_id = "archive_current", tag = "archives",
    summary = "The newest archive document (RFC 5005): its items oldest first, links to the archived ones",
    params(FeedPath, ArchiveParams),
    responses(
        (status = 200, description = "The document", content((String = "application/atom+xml"), (JsonFeed = "application/feed+json"))),
        NotModified, Refusals,
    ),
    security((), ("bearer" = [])))]
pub async fn recent<S: Store>(State(st): St<S>, asked: Asked<String>) -> Result<Response, ApiError> {
    let q = FeedQuery::parse(asked.query.as_deref(), ARCHIVE_PARAMS)?;
    document(&st, &asked.actor, &asked.path, None, format(&q, &asked.headers)).await
}

/// `GET BASE/feeds/FEED/archive/K`.
#[utoipa::path(get, path = "/feeds/{feed}/archive/{k}", operation_id = "archive_numbered", tag = "archives",
    summary = "Archive document K (from 1, oldest); an archived one never changes",
    params(FeedPath, ("k" = u64, Path, description = "The document's number, from 1"), ArchiveParams),
    responses(
        (status = 200, description = "The document", content((String = "application/atom+xml"), (JsonFeed = "application/feed+json"))),
        NotModified, Refusals,
    ),
    security((), ("bearer" = [])))]
pub async fn numbered<S: Store>(State(st): St<S>, asked: Asked<(String, String)>) -> Result<Response, ApiError> {
    let Asked { actor, path: (feed, k), query, headers } = asked;
    let q = FeedQuery::parse(query.as_deref(), ARCHIVE_PARAMS)?;
    let k = match k.parse::<u64>() {
        Ok(k) if k >= 1 => k,
        _ => return Err(ApiError::not_found(format!("no archive document {:?}", quote(&k)))),
    };
    document(&st, &actor, &feed, Some(k), format(&q, &headers)).await
}

/// The parameters an archive URL takes.
const ARCHIVE_PARAMS: &[&str] = &["format"];

/// Archives are Atom unless JSON Feed is asked for (by `format` or `Accept`).
fn format<'h>(q: &FeedQuery, headers: &'h HeaderMap) -> (Format, &'h HeaderMap) {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    let format = match q.format.unwrap_or_else(|| Format::from_accept(accept, Format::Atom)) {
        Format::JsonFeed => Format::JsonFeed,
        _ => Format::Atom,
    };
    (format, headers)
}

async fn document<S: Store>(
    st: &Arc<HttpState<S>>,
    actor: &Actor,
    feed: &str,
    k: Option<u64>,
    (format, headers): (Format, &HeaderMap),
) -> Result<Response, ApiError> {
    let err = |e| ApiError::from_feed(e, actor);
    let (_, name) = FeedQuery::default().node(feed)?;
    let node = format!("{}?order=created", name.feed);
    let count_req = PullRequest { node: node.clone(), max: Some(0), ..Default::default() };
    let n = st.svc.pull(actor.as_str(), count_req).await.map_err(err)?.count;
    let per = st.settings.archive_page;
    let newest = n.div_ceil(per).max(1);
    let k_doc = k.unwrap_or(newest);
    if k_doc > newest {
        return Err(ApiError::not_found(format!("archive document {k_doc} is past the last ({newest})")));
    }
    let req = PullRequest { node, max: Some(per), index: Some((k_doc - 1) * per), ..Default::default() };
    let mut page = st.svc.pull(actor.as_str(), req).await.map_err(err)?;
    page.items.reverse();
    page.cursors.reverse();
    let base = format!("{}archive/", feed_base(&st.settings.base, feed));
    let numbered = |i: u64| format!("{base}{i}");
    let this = if k.is_some() { numbered(k_doc) } else { base.clone() };
    let via = numbered(k_doc);
    let prev = numbered(k_doc.saturating_sub(1));
    let next = numbered(k_doc + 1);
    let hub = st.settings.hub();
    let mut links: Vec<(&str, &str)> = vec![("self", &this), ("current", &base)];
    if k.is_none() {
        links.push(("via", &via));
    }
    if k_doc > 1 {
        links.push(("prev-archive", &prev));
    }
    if k_doc < newest {
        links.push(("next-archive", &next));
    }
    links.push(("hub", &hub));
    let archived = k_doc < newest;
    let title = st.svc.policy().feed(feed).title.clone().unwrap_or_else(|| feed.to_string());
    let doc =
        Doc { url: &this, next: None, hub: &hub, title: &title, total: n, items: &page.items, cursors: &page.cursors };
    let body = match format {
        Format::JsonFeed => {
            let home = format!("{}/", st.settings.base);
            let mut doc = json_feed::document(&doc, &home, &links);
            doc.smartfeeds.archive = archived.then_some(true);
            super::formats::to_json(&doc)
        }
        _ => doc.atom(&links, if archived { "<fh:archive/>" } else { "" }),
    };
    let cache = if archived {
        format!("public, max-age={}", st.settings.archive_max_age)
    } else {
        format!("max-age={}", st.settings.cache_max_age)
    };
    let mut res = with_etag(headers, format.content_type(), body);
    common_headers(st, feed, &this, &cache, &mut res);
    Ok(res)
}
