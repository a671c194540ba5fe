//! Publishing over HTTP (SPEC §9): `PUT …/items/ID` publishes or updates that id, `POST` on
//! the feed URL publishes with a generated id (201 + `Location`), `DELETE …/items/ID`
//! retracts (204). A publisher's or admin's token is needed; the answer comes only after the
//! change is durable, and the change reaches XMPP subscribers and held HTTP requests alike.

use super::asked::Asked;
use super::auth::Actor;
use super::bounds::{check_xml, read_body};
use super::errors::{ApiError, quote};
use super::resolve::feed_base;
use super::schemas::{EntryRefusals, FeedPath, ItemPath, Published, Refusals};
use super::{HttpState, St, body_limit};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use feed::ports::Store;
use feed::{Entry, FeedError};
use minidom::{Element, Node};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use std::sync::Arc;

/// Checks the content type, reads the body (bounded in size and time) and parses it as
/// exactly one Atom entry.
async fn read_entry<S: Store>(st: &HttpState<S>, headers: &HeaderMap, body: Body) -> Result<Entry, ApiError> {
    let ctype = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let mime = ctype.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    if !matches!(mime.as_str(), "application/atom+xml" | "application/xml" | "text/xml") {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "the body must be one Atom entry sent as application/atom+xml",
        ));
    }
    let limit = st.svc.policy().limits.max_payload_bytes;
    let bytes = read_body(body, body_limit(&st.svc)).await?;
    entry_from_body(&bytes, limit)
}

/// The check of a published body (read whole, its type checked): no DTD and bounded depth,
/// UTF-8, an optional XML declaration, then exactly one Atom entry of at most `limit` bytes
/// once serialised.
pub fn entry_from_body(bytes: &[u8], limit: usize) -> Result<Entry, ApiError> {
    check_xml(bytes)?;
    let text = std::str::from_utf8(bytes)
        .map_err(|_| ApiError::new(StatusCode::BAD_REQUEST, "invalid-payload", "the body is not UTF-8"))?;
    let text = text.trim_start_matches('\u{feff}');
    let text = match text.trim_start().strip_prefix("<?xml") {
        Some(rest) => rest.split_once("?>").map_or("", |(_, r)| r),
        None => text,
    };
    let element: Element = text.trim().parse().map_err(|e: minidom::Error| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid-payload",
            format!("the body is not XML: {}", quote(&e.to_string())),
        )
    })?;
    let entry = feed::atom::inspect_entry(std::iter::once(&Node::Element(element)))
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid-payload", e.to_string()))?;
    if entry.xml.len() > limit {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload-too-big",
            format!("the entry is larger than {limit} bytes"),
        ));
    }
    Ok(entry)
}

/// Publishes and answers `{"id", "cursor"}` (the cursor in the feed's `modified` order).
async fn publish<S: Store>(
    st: &Arc<HttpState<S>>,
    actor: &Actor,
    feed: &str,
    id: Option<String>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Published, ApiError> {
    if actor.is_anonymous() {
        return Err(ApiError::unauthorized("publishing needs a publisher's bearer token"));
    }
    let err = |e: FeedError| ApiError::from_feed(e, actor);
    if feed.contains('?') {
        return Err(ApiError::bad_request("publish goes to the feed itself"));
    }
    // Authorised before the body is looked at, as over XMPP.
    let target = st.svc.publish_target(actor.as_str(), feed).await.map_err(err)?;
    let entry = read_entry(st, headers, body).await?;
    let done = st.svc.publish_to(target, id, entry).await.map_err(err)?;
    Ok(Published { id: done.item.id, cursor: done.cursor.to_string() })
}

/// `PUT BASE/feeds/FEED/items/ID`.
#[utoipa::path(put, path = "/feeds/{feed}/items/{id}", operation_id = "put_item", tag = "publish", summary = "Publish or update the item with this id",
    params(ItemPath),
    request_body(content = String, content_type = "application/atom+xml", description = "One Atom entry"),
    responses((status = 200, description = "Published", body = Published), Refusals, EntryRefusals),
    security(("bearer" = [])))]
pub async fn put<S: Store>(State(st): St<S>, asked: Asked<(String, String)>, body: Body) -> Result<Response, ApiError> {
    let Asked { actor, path: (feed, id), headers, .. } = asked;
    let doc = publish(&st, &actor, &feed, Some(id), &headers, body).await?;
    Ok(axum::Json(doc).into_response())
}

/// `POST BASE/feeds/FEED/`: a new item with a generated id.
#[utoipa::path(post, path = "/feeds/{feed}/", operation_id = "post_item", tag = "publish", summary = "Publish a new item with a generated id",
    params(FeedPath),
    request_body(content = String, content_type = "application/atom+xml", description = "One Atom entry"),
    responses((status = 201, description = "Published; Location names the item", body = Published), Refusals, EntryRefusals),
    security(("bearer" = [])))]
pub async fn post<S: Store>(State(st): St<S>, asked: Asked<String>, body: Body) -> Result<Response, ApiError> {
    let Asked { actor, path: feed, headers, .. } = asked;
    let doc = publish(&st, &actor, &feed, None, &headers, body).await?;
    let location =
        format!("{}items/{}", feed_base(&st.settings.base, &feed), utf8_percent_encode(&doc.id, NON_ALPHANUMERIC));
    let mut res = (StatusCode::CREATED, axum::Json(doc)).into_response();
    if let Ok(v) = HeaderValue::from_str(&location) {
        res.headers_mut().insert(header::LOCATION, v);
    }
    Ok(res)
}

/// `DELETE BASE/feeds/FEED/items/ID`: a tombstone, 204.
#[utoipa::path(delete, path = "/feeds/{feed}/items/{id}", operation_id = "retract_item", tag = "publish", summary = "Retract an item: it becomes a tombstone",
    params(ItemPath),
    responses((status = 204, description = "Retracted"), Refusals),
    security(("bearer" = [])))]
pub async fn delete<S: Store>(State(st): St<S>, asked: Asked<(String, String)>) -> Result<Response, ApiError> {
    let Asked { actor, path: (feed, id), .. } = asked;
    if actor.is_anonymous() {
        return Err(ApiError::unauthorized("retracting needs a publisher's bearer token"));
    }
    if feed.contains('?') {
        return Err(ApiError::bad_request("retract goes to the feed itself"));
    }
    st.svc.retract(actor.as_str(), &feed, id).await.map_err(|e| ApiError::from_feed(e, &actor))?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
