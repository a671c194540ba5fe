//! `POST BASE/hub` (and the seed's `BASE/feeds/FEED/hub/`, the same hub): a subscription
//! request (SPEC §10). Everything that can be checked at once is, so a bad request gets a
//! clear 4xx instead of silence: the form, the topic (a feed URL of this service naming a
//! view the requester may read), the callback (form and address), the lease and the
//! secret. Then `202 Accepted`, and the verification of intent runs on its own.

use super::Hub;
use super::callback;
use super::config::HubConfig;
use super::verify::{self, Intent, Mode};
use crate::auth::Actor;
use crate::errors::{ApiError, quote};
use crate::query::FeedQuery;
use crate::resolve::resolve;
use axum::Extension;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use feed::ports::Store;
use feed::service::PullRequest;
use std::collections::HashMap;
use std::sync::Arc;

/// The longest secret accepted (WebSub: under 200 bytes).
const MAX_SECRET: usize = 199;
/// The view parameters a topic may carry, and `format=atom`: the Atom URL of a view, what
/// a subscriber that cannot set `Accept` fetches (Prosody's `mod_pubsub_feeds`) and then
/// subscribes to.
const VIEW_PARAMS: &[&str] = &["order", "author", "category", "format"];

/// The `hub.*` fields of a request form, each at most once.
#[derive(Debug, Default, PartialEq, Eq)]
struct Form {
    fields: HashMap<String, String>,
}

impl Form {
    fn parse(body: &[u8]) -> Result<Form, ApiError> {
        let mut fields = HashMap::new();
        for (k, v) in url::form_urlencoded::parse(body) {
            if !k.starts_with("hub.") {
                continue;
            }
            if fields.insert(k.to_string(), v.to_string()).is_some() {
                return Err(ApiError::bad_request(format!("{} is given more than once", quote(&k))));
            }
        }
        Ok(Form { fields })
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str).filter(|v| !v.is_empty())
    }

    fn required(&self, key: &str) -> Result<&str, ApiError> {
        self.get(key).ok_or_else(|| ApiError::bad_request(format!("{key} is missing")))
    }
}

/// The feed and view parameters of a topic URL: `BASE/feeds/FEED/` and `order`, `author`,
/// `category` only; or one of the feed's archive documents, `BASE/feeds/FEED/archive/` and
/// `archive/K` (SPEC §11), without parameters.
///
/// Every document that advertises the hub names itself as `self`, so each is a topic: an
/// archive document's `self` is the archive (RFC 5005), and a follower that reads the
/// history through the archives subscribes with it. An archive URL names the feed's whole
/// archive series, whose recent document is where every new entry lands: the hub delivers
/// the feed's default view for it, exactly as for `BASE/feeds/FEED/`.
fn topic_parts(base: &str, topic: &str) -> Result<(String, FeedQuery), ApiError> {
    let not_ours = || ApiError::bad_request(format!("hub.topic {:?} is not a feed URL of this service", quote(topic)));
    // The topic goes into every delivery's `Link` header as written: a URL, so ASCII.
    if !topic.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ApiError::bad_request("hub.topic must be a URL (percent-encode spaces and other characters)"));
    }
    let rest = topic.strip_prefix(base).and_then(|r| r.strip_prefix("/feeds/")).ok_or_else(not_ours)?;
    if rest.contains('#') {
        return Err(not_ours());
    }
    let (path, query) = match rest.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (rest, None),
    };
    let (segment, archive) = match path.split_once('/') {
        Some((feed, "archive/")) => (feed, true),
        Some((feed, k)) if k.strip_prefix("archive/").is_some_and(is_archive_number) => (feed, true),
        _ => (path.strip_suffix('/').unwrap_or(path), false),
    };
    if segment.is_empty() || segment.contains('/') || (archive && query.is_some()) {
        return Err(not_ours());
    }
    let feed = crate::bounds::percent_decode(segment).map_err(|_| not_ours())?;
    let q =
        FeedQuery::parse(query, VIEW_PARAMS).map_err(|e| ApiError::bad_request(format!("hub.topic: {}", e.text)))?;
    if q.format.is_some_and(|f| f != crate::formats::Format::Atom) {
        return Err(ApiError::bad_request("hub.topic: deliveries are Atom, so its format can only be atom"));
    }
    Ok((feed, q))
}

/// `K` of `archive/K`: a document number, 1 or more.
fn is_archive_number(k: &str) -> bool {
    !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()) && k.parse::<u64>().is_ok_and(|n| n >= 1)
}

/// The lease to grant: asked for (clamped to the configured bounds) or the default.
fn lease(asked: Option<&str>, default: u64, min: u64, max: u64) -> Result<u64, ApiError> {
    match asked {
        None => Ok(default),
        Some(s) => match s.parse::<u64>() {
            Ok(n) => Ok(n.clamp(min, max)),
            Err(_) => Err(ApiError::bad_request("hub.lease_seconds is not a number of seconds")),
        },
    }
}

/// What a subscription request form asks for, checked as far as it can be without the
/// store or the network.
#[derive(Debug)]
pub struct Asked {
    pub mode: Mode,
    /// `hub.topic` as written, and the feed and view parameters it names.
    pub topic: String,
    pub feed: String,
    pub query: FeedQuery,
    pub callback: url::Url,
    /// The lease granted (clamped to the configured bounds).
    pub lease: u64,
    pub secret: Option<String>,
}

/// Reads a request form (the body of `POST BASE/hub`) for the hub at `base`: each `hub.*`
/// field at most once, the mode, the topic, the callback's form, the lease and the secret.
/// A 400 naming the field otherwise.
pub fn read_form(body: &[u8], base: &str, config: &HubConfig) -> Result<Asked, ApiError> {
    let form = Form::parse(body)?;
    let mode = match form.required("hub.mode")? {
        "subscribe" => Mode::Subscribe,
        "unsubscribe" => Mode::Unsubscribe,
        other => {
            return Err(ApiError::bad_request(format!(
                "hub.mode {:?} is not subscribe, unsubscribe or publish",
                quote(other)
            )));
        }
    };
    let topic = form.required("hub.topic")?.to_string();
    let (feed, query) = topic_parts(base, &topic)?;
    let callback = callback::parse(form.required("hub.callback")?).map_err(ApiError::bad_request)?;
    let lease = lease(form.get("hub.lease_seconds"), config.default_lease, config.min_lease, config.max_lease)?;
    let secret = form.get("hub.secret").map(str::to_string);
    if secret.as_ref().is_some_and(|s| s.len() > MAX_SECRET) {
        return Err(ApiError::bad_request(format!("hub.secret must be under {} bytes", MAX_SECRET + 1)));
    }
    Ok(Asked { mode, topic, feed, query, callback, lease, secret })
}

/// `POST BASE/hub`: 202 and a verification on its way, or why not.
#[utoipa::path(post, path = "/hub", operation_id = "hub_request", tag = "websub",
    summary = "Subscribe a callback to a view (or unsubscribe it); the intent is verified with a GET to the callback",
    request_body(content = crate::schemas::HubForm, content_type = "application/x-www-form-urlencoded",
        description = "hub.mode, hub.topic (a feed URL of this service with its view parameters), hub.callback, \
            hub.lease_seconds, hub.secret"),
    responses((status = 202, description = "Accepted: the verification of intent follows"),
        (status = 400, description = "A missing or bad field, named in the text", body = crate::schemas::ErrorJson),
        (status = 401, description = "An unknown bearer token", body = crate::schemas::ErrorJson),
        (status = 403, description = "Not allowed to read the topic's feed", body = crate::schemas::ErrorJson),
        (status = 404, description = "No such feed", body = crate::schemas::ErrorJson),
        (status = 415, description = "Not a form", body = crate::schemas::ErrorJson)),
    security((), ("bearer" = [])))]
pub async fn post<S: Store>(
    State(hub): State<Arc<Hub<S>>>,
    Extension(actor): Extension<Actor>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let ctype = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !ctype.trim_start().to_ascii_lowercase().starts_with("application/x-www-form-urlencoded") {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "a subscription request is a form sent as application/x-www-form-urlencoded",
        ));
    }
    let body = crate::bounds::read_body(body, crate::body_limit(&hub.svc)).await?;
    if super::pings::is_ping(&body) {
        return super::pings::answer(&body, hub.pinged.get());
    }
    let asked = read_form(&body, &hub.base, hub.config())?;
    // The requester may read the view (a whitelist feed needs the token of an allowed
    // JID), and the feed exists: exactly what a pull of it would require.
    let r = resolve(&hub.svc, &actor, &hub.base, &asked.feed, &asked.query)?;
    let probe = PullRequest { max: Some(0), ..PullRequest::default() };
    hub.svc.pull_view(&r.view, probe).await.map_err(|e| ApiError::from_feed(e, &actor))?;
    if let Err(refused) = hub.client.guard().check(&asked.callback).await {
        return Err(ApiError::bad_request(format!("hub.callback {refused}")));
    }
    let Asked { mode, feed, topic, callback, lease, secret, .. } = asked;
    let intent = Intent {
        mode,
        actor: actor.as_str().to_string(),
        feed,
        view: r.view.view().canonical(),
        topic,
        callback,
        lease,
        secret,
    };
    tokio::spawn(verify::verify(hub.clone(), intent));
    Ok(StatusCode::ACCEPTED.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_are_feed_urls_with_view_parameters_only() {
        let base = "http://h:1";
        let (feed, q) = topic_parts(base, "http://h:1/feeds/com%20ments/?order=modified&author=ann").unwrap();
        assert_eq!(feed, "com ments");
        assert_eq!(q.view_query(), "?order=modified&author=ann");
        assert_eq!(topic_parts(base, "http://h:1/feeds/c").unwrap().0, "c");
        let (_, atom) = topic_parts(base, "http://h:1/feeds/c/?order=modified&format=atom").unwrap();
        assert_eq!(atom.view_query(), "?order=modified", "the same view as without format");
        for archive in ["http://h:1/feeds/c/archive/", "http://h:1/feeds/c/archive/1", "http://h:1/feeds/c/archive/12"]
        {
            let (feed, q) = topic_parts(base, archive).unwrap();
            assert_eq!((feed.as_str(), q.view_query().as_str()), ("c", ""), "{archive}");
        }
        for bad in [
            "http://other/feeds/c/",
            "http://h:1/feeds/",
            "http://h:1/feeds/c/items/x",
            "http://h:1/feeds/c/?since=cursor:1_0_1",
            "http://h:1/feeds/c/#x",
            "http://h:1/feeds/c/?author=Zoë",
            "http://h:1/feeds/c/?author=a b",
            "http://h:1/feeds/c/?format=json",
            "http://h:1/feeds/c/archive",
            "http://h:1/feeds/c/archive/0",
            "http://h:1/feeds/c/archive/x",
            "http://h:1/feeds/c/archive/1/",
            "http://h:1/feeds/c/archive/?order=modified",
            "http://h:1/feeds//archive/",
        ] {
            assert!(topic_parts(base, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn forms_and_leases() {
        let f = Form::parse(b"hub.mode=subscribe&hub.topic=t%26u&other=1").unwrap();
        assert_eq!((f.get("hub.mode"), f.get("hub.topic"), f.get("other")), (Some("subscribe"), Some("t&u"), None));
        assert!(Form::parse(b"hub.mode=a&hub.mode=b").is_err(), "repeated");
        assert!(f.required("hub.callback").is_err());
        assert_eq!(lease(None, 10, 5, 20).unwrap(), 10);
        assert_eq!(lease(Some("1"), 10, 5, 20).unwrap(), 5);
        assert_eq!(lease(Some("99"), 10, 5, 20).unwrap(), 20);
        assert!(lease(Some("-1"), 10, 5, 20).is_err());
    }
}
