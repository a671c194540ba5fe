//! The JSON bodies the face answers with, as types. Handlers serialise these very types,
//! and the OpenAPI description ([`crate::openapi`]) is generated from them, so the two
//! cannot drift apart.

use serde::Serialize;
use utoipa::{IntoParams, IntoResponses, ToSchema};

/// A page of a view (SPEC §9): an ActivityStreams-like collection.
#[derive(Debug, Serialize, ToSchema)]
pub struct PageJson {
    /// Items in this page.
    pub count: usize,
    /// Items in the whole view.
    #[serde(rename = "totalItems")]
    pub total_items: u64,
    /// The view's feed URL.
    pub url: String,
    /// The cursor of the page's last item.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_cursor: Option<String>,
    /// The next page's URL (items after this page's last).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    pub items: Vec<ItemJson>,
}

/// One item.
#[derive(Debug, Serialize, ToSchema)]
pub struct ItemJson {
    pub id: String,
    /// Its T+O+C cursor in the view (`since=cursor:CURSOR` pages after it).
    pub cursor: String,
    /// RFC 3339.
    pub published: String,
    /// RFC 3339.
    pub updated: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub author: Option<AuthorJson>,
    /// The stored Atom entry, or the RFC 6721 tombstone of a retracted item.
    pub atom: String,
    /// Present (true) on a retracted item.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deleted: Option<bool>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AuthorJson {
    #[serde(rename = "displayName")]
    pub display_name: String,
}

/// `GET BASE/feeds/`: the feeds the requester may read.
#[derive(Debug, Serialize, ToSchema)]
pub struct FeedList {
    pub feeds: Vec<FeedLink>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct FeedLink {
    pub name: String,
    /// The configured title, else the name.
    pub title: String,
    /// `BASE/feeds/NAME/`.
    pub url: String,
}

/// A publish's answer: the item's id and its bare cursor in the feed's `modified` order,
/// where every change lands.
#[derive(Debug, Serialize, ToSchema)]
pub struct Published {
    pub id: String,
    pub cursor: String,
}

/// Every error: a condition named after XEP-0060's and a text for humans.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorJson {
    /// e.g. `item-not-found`, `forbidden`, `bad-request`, `not-authorized`.
    pub error: String,
    pub text: String,
}

/// `GET BASE/health`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok`.
    pub status: String,
}

/// A JSON Feed 1.1 document ([`crate::json_feed`]).
#[derive(Debug, Serialize, ToSchema)]
pub struct JsonFeed {
    /// `https://jsonfeed.org/version/1.1`.
    pub version: String,
    pub title: String,
    pub home_page_url: String,
    pub feed_url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_url: Option<String>,
    pub hubs: Vec<JsonFeedHub>,
    #[serde(rename = "_smartfeeds")]
    pub smartfeeds: JsonFeedExtension,
    pub items: Vec<JsonFeedItem>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct JsonFeedHub {
    /// `WebSub`.
    #[serde(rename = "type")]
    pub kind: String,
    pub url: String,
}

/// What JSON Feed has no field for: the view's total, the last cursor, archive links.
#[derive(Debug, Serialize, ToSchema)]
pub struct JsonFeedExtension {
    pub total: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_cursor: Option<String>,
    /// RFC 5005's relations of an archive document (`self`, `current`, `prev-archive`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub links: Option<std::collections::BTreeMap<String, String>>,
    /// Present (true) on an archived document, which never changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub archive: Option<bool>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct JsonFeedItem {
    /// The Atom id when the entry has one, else the item id.
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_html: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    pub date_published: String,
    pub date_modified: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub authors: Vec<JsonFeedAuthor>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(rename = "_smartfeeds")]
    pub smartfeeds: JsonFeedItemExtension,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct JsonFeedAuthor {
    pub name: String,
}

/// The item's own id and cursor, and whether it was retracted.
#[derive(Debug, Serialize, ToSchema)]
pub struct JsonFeedItemExtension {
    pub id: String,
    pub cursor: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deleted: Option<bool>,
}

/// The client's copy (`If-None-Match`) is current.
#[derive(IntoResponses)]
#[response(status = 304)]
pub struct NotModified;

/// Why a request about a feed is not served.
#[derive(IntoResponses)]
pub enum Refusals {
    /// A malformed parameter or entry, or a view where the feed is meant, named in the text.
    #[response(status = 400)]
    BadRequest(ErrorJson),
    /// An unknown bearer token, or none where a publisher's is needed.
    #[response(status = 401)]
    NotAuthorized(ErrorJson),
    /// Not allowed to read, or to publish to, this feed.
    #[response(status = 403)]
    Forbidden(ErrorJson),
    /// No such feed, view or item.
    #[response(status = 404)]
    NotFound(ErrorJson),
    /// Over the requester's rate (`Retry-After` says when to come back).
    #[response(status = 429)]
    TooMany(ErrorJson),
}

/// Why a published entry is refused before it is read.
#[derive(IntoResponses)]
pub enum EntryRefusals {
    /// The entry is over the size limit.
    #[response(status = 413)]
    TooLarge(ErrorJson),
    /// Not `application/atom+xml`.
    #[response(status = 415)]
    Unsupported(ErrorJson),
}

/// A feed's URL.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct FeedPath {
    /// The feed's name.
    pub feed: String,
}

/// An item's URL.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ItemPath {
    /// The feed's name.
    pub feed: String,
    /// The item's id.
    pub id: String,
}

/// A view and a page of it (SPEC §9). Every parameter is given at most once, never empty.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PullParams {
    /// `created`, `-created`, `modified` or `-modified`.
    #[param(pattern = r"^-?(created|modified)$")]
    pub order: Option<String>,
    /// Only items by this author name.
    #[param(min_length = 1)]
    pub author: Option<String>,
    /// Only items with this category term.
    #[param(min_length = 1)]
    pub category: Option<String>,
    /// Items after this position (`cursor:T_O_C`, `id:ITEM`, `time:RFC3339`).
    #[param(pattern = r"^(cursor|id|time):.+$")]
    pub since: Option<String>,
    /// Items before this position.
    #[param(pattern = r"^(cursor|id|time):.+$")]
    pub until: Option<String>,
    /// Items in the page (clamped to the service's largest).
    pub max: Option<u64>,
    /// Seconds to hold an empty answer (0: answer at once; clamped to the service's longest).
    pub timeout: Option<u64>,
    /// JSON-P: wrap the answer in this function call.
    #[param(pattern = r"^[A-Za-z_$][A-Za-z0-9_$.]{0,63}$")]
    pub callback: Option<String>,
    /// `json`, `atom` or `json-feed`, for clients that cannot set `Accept`.
    #[param(pattern = r"^(json|atom|json-feed)$")]
    pub format: Option<String>,
}

/// An archive document's format.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ArchiveParams {
    /// `json-feed` for JSON Feed; Atom otherwise (`atom`, or no `format`).
    #[param(pattern = r"^(json|atom|json-feed)$")]
    pub format: Option<String>,
}

/// A WebSub subscription request, sent as a form.
#[derive(ToSchema)]
#[allow(dead_code)] // described, not built: the hub reads the form itself
pub struct HubForm {
    #[schema(rename = "hub.mode")]
    pub mode: HubMode,
    /// A feed URL of this service, `BASE/feeds/FEED/`, with view parameters only.
    #[schema(rename = "hub.topic", format = "uri")]
    pub topic: String,
    /// Where the verification and the deliveries go: an `http` or `https` URL.
    #[schema(rename = "hub.callback", format = "uri")]
    pub callback: String,
    /// The lease asked for, seconds (clamped to the hub's bounds).
    #[schema(rename = "hub.lease_seconds", nullable = false)]
    pub lease_seconds: Option<u64>,
    /// Signs deliveries (`X-Hub-Signature`); under 200 bytes.
    #[schema(rename = "hub.secret", max_length = 199, nullable = false)]
    pub secret: Option<String>,
    /// Accepted and ignored: verification is always asynchronous.
    #[schema(rename = "hub.verify", nullable = false)]
    pub verify: Option<String>,
}

/// `hub.mode`.
#[derive(ToSchema)]
#[allow(dead_code)]
#[schema(rename_all = "lowercase")]
pub enum HubMode {
    Subscribe,
    Unsubscribe,
}
