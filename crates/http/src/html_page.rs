//! `GET BASE/`: the page, a small feed reader (rendered by [`crate::reader`]). It reads like
//! every other handler, through the core's service as the visitor (`pull`, `feeds`), so it
//! shows what the visitor may read and nothing else.
//!
//! Its query: `feed`, the view's `order`, `author` and `category` (empty ones are none),
//! `before=CURSOR` for the items older than that cursor, and `item=ID` for one item's list
//! element alone (what the page's script asks for when the event stream names a new item).

use crate::actor::Actor;
use crate::errors::ApiError;
use crate::query::FeedQuery;
use crate::reader::{self, Choice, Follow, Reader, Shelf};
use crate::resolve::{Resolved, resolve};
use crate::{HttpState, St};
use axum::Extension;
use axum::extract::RawQuery;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use feed::Position;
use feed::paging::Page;
use feed::ports::Store;
use feed::position::rfc3339;
use feed::service::PullRequest;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use std::sync::Arc;

/// Items per page.
const PAGE_ITEMS: u64 = 20;
/// The most feeds the form lists.
const MAX_LISTED: usize = 1000;

pub async fn index<S: Store>(st: St<S>, Extension(actor): Extension<Actor>, RawQuery(query): RawQuery) -> Response {
    let st = st.0;
    let choice = Choice::parse(query.as_deref());
    let nonce = format!("{:032x}", rand::random::<u128>());
    let now = chrono::Utc::now().timestamp_millis();
    if let (Some(feed), Some(id)) = (&choice.feed, &choice.item) {
        return one_item(&st, &actor, &choice, feed, id, now, &nonce).await;
    }
    let mut status = StatusCode::OK;
    let mut error = None;
    let feeds = match st.svc.feeds(actor.as_str(), None, MAX_LISTED).await {
        Ok(f) => f,
        Err(e) => {
            let e = ApiError::from_feed(e, &actor);
            (status, error) = (e.status, Some(e.text));
            Vec::new()
        }
    };
    let feed = choice.feed.as_deref().or(feeds.first().map(|f| f.name.as_str()));
    let mut shelf = None;
    match feed {
        Some(feed) => match read(&st, &actor, &choice, feed).await {
            Ok(s) => shelf = Some(s),
            Err(e) => (status, error) = (e.status, Some(e.text)),
        },
        None if error.is_none() => error = Some("There is no feed you may read.".into()),
        None => {}
    }
    let body = reader::page(&Reader { nonce: &nonce, now, feeds: &feeds, choice: &choice, feed, shelf, error });
    html(status, body, &nonce, &st.settings.base)
}

/// The view of `choice` in `feed`: a page of its items (the newest, or those older than
/// `before`), and its links.
async fn read<'a, S: Store>(
    st: &'a Arc<HttpState<S>>,
    actor: &Actor,
    choice: &Choice,
    feed: &'a str,
) -> Result<Shelf<'a>, ApiError> {
    let r = view(st, actor, choice, feed)?;
    let desc = r.view.view().order.descending;
    let before = choice.before.as_deref().map(cursor).transpose()?;
    // Older is further on in a newest-first view, and before the page in an oldest-first
    // one (whose newest items are its last page).
    let mut req = PullRequest { max: Some(st.svc.page_size(Some(PAGE_ITEMS))), ..Default::default() };
    if desc {
        req.after = before.clone();
    } else {
        req.before = Some(before.clone().unwrap_or_default());
    }
    let page: Page = st.svc.pull_view(&r.view, req).await.map_err(|e| ApiError::from_feed(e, actor))?;
    let shown = page.items.len() as u64;
    let (older, newest_shown) = match page.first_index {
        Some(first) if desc => {
            ((first + shown < page.count).then(|| page.cursors.last().copied()).flatten(), page.cursors.first())
        }
        Some(first) => ((first > 0).then(|| page.cursors.first().copied()).flatten(), page.cursors.last()),
        None => (None, None),
    };
    let newest = before.is_none();
    // Live from the newest item shown (an empty view: from now), so nothing published since
    // this page was read is missed.
    let stream = newest.then(|| {
        let from = match newest_shown {
            Some(c) => format!("cursor:{c}"),
            None => format!("time:{}", rfc3339(chrono::Utc::now().timestamp_millis())),
        };
        reader::links::with_param(&r.url, &format!("since={}", utf8_percent_encode(&from, NON_ALPHANUMERIC)))
    });
    let title = st.svc.policy().feed(feed).title.as_deref().unwrap_or(feed);
    Ok(Shelf {
        feed,
        title,
        order: r.view.view().order,
        follow: Follow::new(&r.url, &st.settings.hub(), &st.settings.component_jid, &r.node),
        page,
        older,
        newest,
        stream,
    })
}

/// The view `choice` names in `feed`, resolved as a feed URL's query would be.
fn view<S: Store>(st: &HttpState<S>, actor: &Actor, choice: &Choice, feed: &str) -> Result<Resolved, ApiError> {
    let q = FeedQuery { view: choice.view_params(), ..FeedQuery::default() };
    resolve(&st.svc, actor, &st.settings.base, feed, &q)
}

/// `before`'s bare cursor as a position spec.
fn cursor(bare: &str) -> Result<String, ApiError> {
    let spec = format!("cursor:{}", bare.strip_prefix("cursor:").unwrap_or(bare));
    Position::parse(&spec).map_err(|e| ApiError::bad_request(format!("before: {e}")))?;
    Ok(spec)
}

/// `item=ID`: the item's list element alone, or 404 when the view has no such item.
async fn one_item<S: Store>(
    st: &Arc<HttpState<S>>,
    actor: &Actor,
    choice: &Choice,
    feed: &str,
    id: &str,
    now: i64,
    nonce: &str,
) -> Response {
    let read = async {
        let r = view(st, actor, choice, feed)?;
        let req = PullRequest { ids: vec![id.to_string()], ..Default::default() };
        st.svc.pull_view(&r.view, req).await.map_err(|e| ApiError::from_feed(e, actor))
    };
    match read.await {
        Ok(page) => match page.items.first().zip(page.cursors.first()) {
            Some((item, cursor)) => {
                html(StatusCode::OK, reader::item(now, choice, feed, item, cursor), nonce, &st.settings.base)
            }
            None => html(StatusCode::NOT_FOUND, String::new(), nonce, &st.settings.base),
        },
        Err(e) => html(e.status, String::new(), nonce, &st.settings.base),
    }
}

/// An HTML answer. Its policy runs the page's own style and script only (by their nonce),
/// so markup that got into an entry could not run even if it passed the sanitiser.
fn html(status: StatusCode, body: String, nonce: &str, base: &str) -> Response {
    let origin = url::Url::parse(base).map(|u| u.origin().ascii_serialization()).unwrap_or_default();
    let csp = format!(
        "default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; img-src * data:; \
         media-src *; connect-src 'self' {origin}; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    );
    let mut res =
        (status, [(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CACHE_CONTROL, "no-cache")], body)
            .into_response();
    let h = res.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&csp) {
        h.insert(header::CONTENT_SECURITY_POLICY, v);
    }
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    res
}
