//! Inbound iqs as typed requests: each `get`/`set` payload is parsed once into a
//! [`Request`], and each kind lives in its own file with its parse, its apply (ask the
//! service) and its reply, as mini-redis does per command. The router only dispatches.

// A request's error is its reply: built once, moved once into the iq. Boxing it would
// only add an allocation to every refusal.
#![allow(clippy::result_large_err)]

mod command;
mod disco_info;
mod disco_items;
mod mam;
mod publish;
mod pull;
mod retract;
mod subscribe;
mod subscriptions;

pub use pull::rsm_result;

use super::errors::{bad_request, service_unavailable, to_stanza_error, unsupported};
use super::payloads::commands::COMMANDS;
use super::payloads::{ItemsQuery, PublishRequest};
use super::ready_pages::Ready;
use feed::FeedError;
use feed::ports::Store;
use feed::service::Service;
use jid::Jid;
use minidom::Element;
use std::sync::Arc;
use xmpp_parsers::ns;
use xmpp_parsers::stanza_error::StanzaError;

/// What a request needs to be applied: the service, the ready pages and who it comes from.
pub struct Ctx<'a, S: Store> {
    pub svc: &'a Service<S>,
    pub ready: &'a Ready,
    /// The component's own JID (disco items name it).
    pub me: &'a Jid,
    /// The sender's bare JID: the actor every decision is about.
    pub actor: String,
}

/// What a request answers: a result payload (or none), or the body of a page of items,
/// ready as bytes; or a result followed by a push to the sender (a subscription and the
/// view's last published item).
pub enum Answer {
    Payload(Option<Element>),
    Page(Arc<str>),
    Then(Option<Element>, crate::payloads::Push),
    /// A MAM page: its results and `<fin/>`, for the query `queryid`.
    Mam {
        queryid: Option<String>,
        page: Arc<crate::mam_page::MamPage>,
    },
}

impl From<Option<Element>> for Answer {
    fn from(payload: Option<Element>) -> Answer {
        Answer::Payload(payload)
    }
}

/// One inbound `get` or `set`, parsed.
pub enum Request {
    Ping,
    DiscoInfo(disco_info::DiscoInfo),
    DiscoItems(disco_items::DiscoItems),
    Pull(pull::Pull),
    Subscriptions(subscriptions::Subscriptions),
    Publish(publish::Publish),
    Retract(retract::Retract),
    Subscribe(subscribe::Subscribe),
    Unsubscribe(subscribe::Unsubscribe),
    Command(command::Run),
    Mam(mam::Mam),
    MamFields(mam::MamFields),
    /// A request refused as it was parsed (malformed, unsupported, not ours); `kind` names
    /// what it looked like, for metrics.
    Refused {
        kind: &'static str,
        error: StanzaError,
    },
}

impl Request {
    /// Parses the payload of a `get` (`set` false) or `set`. What does not parse is a
    /// [`Request::Refused`] carrying its answer.
    pub fn parse(payload: Element, set: bool) -> Request {
        let (kind, parsed) = Self::classify(payload, set);
        parsed.unwrap_or_else(|error| Request::Refused { kind, error })
    }

    /// The kind a payload looks like, and the request it parses to.
    fn classify(payload: Element, set: bool) -> (&'static str, Result<Request, StanzaError>) {
        let pubsub = payload.is("pubsub", ns::PUBSUB);
        let op = payload.children().find(|c| c.name() != "set" && c.name() != "order").map(|c| c.name().to_owned());
        let kind = match (payload.ns().as_str(), op.as_deref()) {
            (ns::PING, _) => "ping",
            (ns::DISCO_INFO, _) => "disco_info",
            (ns::DISCO_ITEMS, _) => "disco_items",
            (COMMANDS, _) => "command",
            (ns::MAM, _) => "mam",
            (
                ns::PUBSUB,
                Some(op @ ("items" | "publish" | "retract" | "subscribe" | "unsubscribe" | "subscriptions")),
            ) => kind_of(op),
            (ns::PUBSUB | ns::PUBSUB_OWNER, _) => "pubsub_other",
            _ => "other",
        };
        let parsed = if !set {
            if ItemsQuery::is_items_query(&payload) {
                pull::Pull::parse(payload).map(Request::Pull)
            } else if payload.is("query", ns::MAM) {
                Ok(Request::MamFields(mam::MamFields::parse(&payload)))
            } else if payload.is("ping", ns::PING) {
                Ok(Request::Ping)
            } else if payload.is("query", ns::DISCO_INFO) {
                Ok(Request::DiscoInfo(disco_info::DiscoInfo::parse(&payload)))
            } else if payload.is("query", ns::DISCO_ITEMS) {
                disco_items::DiscoItems::parse(payload).map(Request::DiscoItems)
            } else if let Some(subs) = payload.get_child("subscriptions", ns::PUBSUB).filter(|_| pubsub) {
                Ok(Request::Subscriptions(subscriptions::Subscriptions::parse(subs)))
            } else if pubsub || payload.is("pubsub", ns::PUBSUB_OWNER) {
                Err(not_implemented(&payload))
            } else {
                Err(service_unavailable("this service does not handle that request"))
            }
        } else if payload.is("command", COMMANDS) {
            command::Run::parse(payload).map(Request::Command)
        } else if payload.is("query", ns::MAM) {
            mam::Mam::parse(payload).map(Request::Mam)
        } else if PublishRequest::is_publish_request(&payload) {
            publish::Publish::parse(payload).map(Request::Publish)
        } else if payload.is("pubsub", ns::PUBSUB_OWNER) {
            Err(not_implemented(&payload))
        } else if !pubsub {
            Err(service_unavailable("this service does not handle that request"))
        } else {
            match payload.children().next() {
                None => Err(bad_request("empty pubsub request")),
                Some(op) if op.name() == "retract" => retract::Retract::parse(op).map(Request::Retract),
                Some(op) if op.name() == "subscribe" => subscribe::Subscribe::parse(op).map(Request::Subscribe),
                Some(op) if op.name() == "unsubscribe" => subscribe::Unsubscribe::parse(op).map(Request::Unsubscribe),
                Some(_) => Err(not_implemented(&payload)),
            }
        };
        (kind, parsed)
    }

    /// What kind of request this is, for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Request::Ping => "ping",
            Request::DiscoInfo(_) => "disco_info",
            Request::DiscoItems(_) => "disco_items",
            Request::Pull(_) => "items",
            Request::Mam(_) => "mam",
            Request::MamFields(_) => "mam_fields",
            Request::Subscriptions(_) => "subscriptions",
            Request::Publish(_) => "publish",
            Request::Retract(_) => "retract",
            Request::Subscribe(_) => "subscribe",
            Request::Unsubscribe(_) => "unsubscribe",
            Request::Command(_) => "command",
            Request::Refused { kind, .. } => kind,
        }
    }

    /// The node the request is about, if any, for logs.
    pub fn node(&self) -> Option<&str> {
        match self {
            Request::DiscoInfo(r) => r.node(),
            Request::DiscoItems(r) => r.node(),
            Request::Pull(r) => Some(r.node()),
            Request::Mam(r) => Some(r.node()),
            Request::MamFields(r) => r.node(),
            Request::Subscriptions(r) => r.node(),
            Request::Publish(r) => Some(r.node()),
            Request::Retract(r) => Some(&r.node),
            Request::Subscribe(r) => Some(&r.node),
            Request::Unsubscribe(r) => Some(&r.node),
            Request::Command(r) => Some(r.node()),
            Request::Ping | Request::Refused { .. } => None,
        }
    }

    /// Serves the request.
    pub async fn apply<S: Store>(self, ctx: &Ctx<'_, S>) -> Result<Answer, StanzaError> {
        match self {
            Request::Ping => Ok(None.into()),
            Request::DiscoInfo(r) => r.apply(ctx).await.map(Answer::from),
            Request::DiscoItems(r) => r.apply(ctx).await.map(Answer::from),
            Request::Pull(r) => r.apply(ctx).await,
            Request::Mam(r) => r.apply(ctx).await,
            Request::MamFields(r) => r.apply(ctx).await.map(Answer::from),
            Request::Subscriptions(r) => r.apply(ctx).await.map(Answer::from),
            Request::Publish(r) => r.apply(ctx).await.map(Answer::from),
            Request::Retract(r) => r.apply(ctx).await.map(Answer::from),
            Request::Subscribe(r) => r.apply(ctx).await,
            Request::Unsubscribe(r) => r.apply(ctx).await.map(Answer::from),
            Request::Command(r) => r.apply(ctx).await.map(Answer::from),
            Request::Refused { error, .. } => Err(error),
        }
    }
}

/// A pubsub operation's name as a `'static` kind.
fn kind_of(op: &str) -> &'static str {
    match op {
        "items" => "items",
        "publish" => "publish",
        "retract" => "retract",
        "subscribe" => "subscribe",
        "unsubscribe" => "unsubscribe",
        _ => "subscriptions",
    }
}

/// A core error as a stanza error; storage failures are logged here (their details are
/// not sent).
pub fn fail(e: FeedError) -> StanzaError {
    if let FeedError::Store(inner) = &e {
        tracing::error!(error = %inner, "storage failure while serving a request");
    }
    to_stanza_error(&e)
}

/// `feature-not-implemented` naming the XEP-0060 feature a request needs.
fn not_implemented(payload: &Element) -> StanzaError {
    let op = payload.children().next().map(|c| c.name()).unwrap_or("");
    let feature = match op {
        "purge" => "purge-nodes",
        "delete" => "delete-nodes",
        "create" => "create-nodes",
        "configure" | "default" => "config-node",
        "affiliations" => "retrieve-affiliations",
        "options" => "subscription-options",
        _ => "",
    };
    if feature.is_empty() {
        return bad_request("unknown pubsub request");
    }
    unsupported(feature, &format!("{op} is not supported: feeds are configured, and items are never removed"))
}
