//! Archives (SPEC §11, RFC 5005 and Simplefeed): `BASE/feeds/FEED/archive/` is the recent
//! document, `archive/K` the K-th. Items are numbered by creation (1 = oldest); document K
//! holds items `(K-1)·P+1 … K·P`, newest first. Every document is one keyset read at a known
//! creation index, so the oldest document of a huge feed costs what the newest does.

use super::answer_cache::Made;
use super::asked::Asked;
use super::auth::Actor;
use super::errors::{ApiError, quote};
use super::formats::{Doc, Format};
use super::json_feed;
use super::query::FeedQuery;
use super::resolve::{common_headers, feed_base};
use super::schemas::{ArchiveParams, FeedPath, JsonFeed, NotModified, Refusals};
use super::{HttpState, St};
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::Response;
use feed::ports::Store;
use feed::service::{PullRequest, Readable};
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
    let view = st.svc.readable_node(actor.as_str(), &format!("{}?order=created", name.feed)).map_err(err)?;
    let key = format!("archive\n{feed}\n{k:?}\n{format:?}");
    let generation = st.generations.get(&st.svc, &view).await.map_err(err)?;
    let base = format!("{}archive/", feed_base(&st.settings.base, feed));
    let this = match k {
        Some(k) => format!("{base}{k}"),
        None => base.clone(),
    };
    let answer = match st.answers.get(&key, generation) {
        Some(a) => a,
        None => {
            let (body, archived) = make(st, (actor, &view), feed, k, (&base, &this)).await?;
            let made = Made { content_type: format.content_type(), body: body(format), empty: false, archived };
            st.answers.put(key, generation, made)
        }
    };
    let cache = if answer.archived {
        format!("public, max-age={}", st.settings.archive_max_age)
    } else {
        format!("max-age={}", st.settings.cache_max_age)
    };
    Ok(answer.respond(headers, || common_headers(st, feed, &this, &cache)))
}

/// Reads and renders document `k` (the recent one for `None`) of `feed`: a function from
/// the format to the body, and whether the document is archived (full).
async fn make<S: Store>(
    st: &Arc<HttpState<S>>,
    (actor, view): (&Actor, &Readable),
    feed: &str,
    k: Option<u64>,
    (base, this): (&str, &str),
) -> Result<(impl FnOnce(Format) -> String, bool), ApiError> {
    let err = |e| ApiError::from_feed(e, actor);
    let count_req = PullRequest { max: Some(0), ..Default::default() };
    let n = st.svc.pull_view(view, count_req).await.map_err(err)?.count;
    let per = st.settings.archive_page;
    let newest = n.div_ceil(per).max(1);
    let k_doc = k.unwrap_or(newest);
    if k_doc > newest {
        return Err(ApiError::not_found(format!("archive document {k_doc} is past the last ({newest})")));
    }
    let req = PullRequest { max: Some(per), index: Some((k_doc - 1) * per), ..Default::default() };
    let mut page = st.svc.pull_view(view, req).await.map_err(err)?;
    page.items.reverse();
    page.cursors.reverse();
    let items = st.renders.all(feed, &page.items);
    let archived = k_doc < newest;
    let numbered = |i: u64| format!("{base}{i}");
    let (via, prev, next) = (numbered(k_doc), numbered(k_doc.saturating_sub(1)), numbered(k_doc + 1));
    let (hub, home) = (st.settings.hub(), format!("{}/", st.settings.base));
    let title = st.svc.policy().feed(feed).title.clone().unwrap_or_else(|| feed.to_string());
    let (this, base) = (this.to_string(), base.to_string());
    let body = move |format: Format| {
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
        let doc =
            Doc { url: &this, next: None, hub: &hub, title: &title, total: n, items: &items, cursors: &page.cursors };
        match format {
            Format::JsonFeed => json_feed::document(&doc, &home, &links, archived),
            _ => doc.atom(&links, if archived { "<fh:archive/>" } else { "" }),
        }
    };
    Ok((body, archived))
}
