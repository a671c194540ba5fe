//! Dispatch of inbound iqs: parse the payload, ask the service, build the reply. Every
//! `get`/`set` gets exactly one reply, `from` the component; results and errors addressed to
//! us (keepalive pongs, stray replies) get none, as RFC 6120 §8.2.3 wants.

use super::adhoc::{self, COMMAND_LIST};
use super::errors::{
    bad_request, bad_request_app, policy_violation, service_unavailable, to_stanza_error, unsupported,
};
use super::payloads::commands::{COMMANDS, Command};
use super::payloads::subscriptions::{SubscriptionList, SubscriptionState, in_pubsub};
use super::payloads::{
    ItemsQuery, PubSubErrorCondition as App, PublishRequest, SHIM, parse_stored, publish_result, shim::HEADER_FEATURES,
    tombstone,
};
use super::reply::{ItemsReply, Reply};
use crate::feed::page::Page;
use crate::feed::position::rfc3339;
use crate::feed::service::{PullRequest, Service};
use crate::feed::{FeedError, Item, Payload};
use crate::store::{Store, Subscription};
use jid::Jid;
use minidom::Element;
use xmpp_parsers::data_forms::{DataForm, DataFormType, Field};
use xmpp_parsers::disco::{DiscoInfoResult, DiscoItemsQuery, DiscoItemsResult, Identity, Item as DiscoItem};
use xmpp_parsers::iq::Iq;
use xmpp_parsers::ns;
use xmpp_parsers::rsm::{First, SetQuery, SetResult};
use xmpp_parsers::stanza_error::StanzaError;

/// The pubsub features we announce (XEP-0060 §10), without the namespace prefix.
const PUBSUB_FEATURES: [&str; 8] = [
    "retrieve-items",
    "subscribe",
    "retrieve-subscriptions",
    "publish",
    "retract-items",
    "meta-data",
    "rsm",
    "item-ids",
];

/// What a handler answers: a result payload (or none), or a stanza error.
type Outcome = Result<Option<Element>, StanzaError>;

/// What a get answers: a result payload, or a page of items, which is written with its
/// entries as they are stored ([`ItemsReply`]).
enum Answer {
    Payload(Option<Element>),
    Page { node: String, items: Vec<Item>, set: Option<SetResult> },
}

/// Turns iqs into service calls and service outcomes into replies.
#[derive(Clone)]
pub struct Router<S: Store> {
    svc: Service<S>,
    me: Jid,
}

fn fail(e: FeedError) -> StanzaError {
    if let FeedError::Store(inner) = &e {
        tracing::error!(error = %inner, "storage failure while serving a request");
    }
    to_stanza_error(&e)
}

impl<S: Store> Router<S> {
    pub fn new(svc: Service<S>, me: Jid) -> Self {
        Router { svc, me }
    }

    pub fn me(&self) -> &Jid {
        &self.me
    }

    pub fn service(&self) -> &Service<S> {
        &self.svc
    }

    /// The reply to an iq, or `None` for results and errors (which need none) and for
    /// requests without a sender (which cannot be answered; the server always sets one).
    pub async fn handle_iq(&self, iq: Iq) -> Option<Reply> {
        let (from, id, payload, set) = match iq {
            Iq::Get { from, id, payload, .. } => (from?, id, payload, false),
            Iq::Set { from, id, payload, .. } => (from?, id, payload, true),
            Iq::Result { .. } | Iq::Error { .. } => return None,
        };
        let answer =
            if set { self.set(&from, payload).await.map(Answer::Payload) } else { self.get(&from, payload).await };
        let me = self.me.clone();
        Some(match answer {
            Ok(Answer::Payload(payload)) => Reply::Iq(Iq::Result { from: Some(me), to: Some(from), id, payload }),
            Ok(Answer::Page { node, items, set }) => Reply::Items(ItemsReply::new(me, from, id, node, items, set)),
            Err(error) => Reply::Iq(Iq::Error { from: Some(me), to: Some(from), id, error, payload: None }),
        })
    }

    /// An iq that did not parse (say, a get with no child): `bad-request` saying why; one
    /// over the stream's size or depth limit: `policy-violation`.
    pub fn malformed(&self, to: Jid, id: String, why: &str, over_limit: bool) -> Iq {
        let error = if over_limit {
            policy_violation(&format!("request refused: {why}"))
        } else {
            bad_request(&format!("malformed request: {why}"))
        };
        Iq::Error { from: Some(self.me.clone()), to: Some(to), id, error, payload: None }
    }

    async fn get(&self, from: &Jid, payload: Element) -> Result<Answer, StanzaError> {
        let actor = from.to_bare().to_string();
        if ItemsQuery::is_items_query(&payload) {
            return self.pull(&actor, payload).await;
        }
        let outcome = if payload.is("ping", ns::PING) {
            Ok(None)
        } else if payload.is("query", ns::DISCO_INFO) {
            self.disco_info(&actor, payload.attr("node")).await
        } else if payload.is("query", ns::DISCO_ITEMS) {
            self.disco_items(&actor, payload).await
        } else if payload.is("pubsub", ns::PUBSUB) && payload.has_child("subscriptions", ns::PUBSUB) {
            let node = payload.get_child("subscriptions", ns::PUBSUB).and_then(|s| s.attr("node"));
            let subs = self.svc.subscriptions(&actor, node).await.map_err(fail)?;
            let list =
                SubscriptionList { node: node.map(String::from), subscriptions: subs.iter().map(state).collect() };
            Ok(Some(in_pubsub(list)))
        } else if payload.is("pubsub", ns::PUBSUB) || payload.is("pubsub", ns::PUBSUB_OWNER) {
            Err(not_implemented(&payload))
        } else {
            Err(service_unavailable("this service does not handle that request"))
        };
        outcome.map(Answer::Payload)
    }

    async fn set(&self, from: &Jid, payload: Element) -> Outcome {
        let actor = from.to_bare().to_string();
        if payload.is("command", COMMANDS) {
            let cmd = Command::try_from(payload).map_err(|e| bad_request(&format!("malformed command: {e}")))?;
            return Ok(Some(adhoc::execute(&self.svc, &actor, cmd).await.map_err(fail)?.into()));
        }
        if PublishRequest::is_publish_request(&payload) {
            return self.publish(&actor, payload).await;
        }
        if !payload.is("pubsub", ns::PUBSUB) {
            return if payload.is("pubsub", ns::PUBSUB_OWNER) {
                Err(not_implemented(&payload))
            } else {
                Err(service_unavailable("this service does not handle that request"))
            };
        }
        let Some(op) = payload.children().next() else {
            return Err(bad_request("empty pubsub request"));
        };
        let node = op.attr("node");
        match op.name() {
            "retract" => {
                let node = node.ok_or_else(|| bad_request_app("retract needs a node", App::NodeIdRequired))?;
                let ids: Vec<&str> =
                    op.children().filter(|c| c.is("item", ns::PUBSUB)).filter_map(|c| c.attr("id")).collect();
                let [id] = ids[..] else {
                    return Err(bad_request_app("retract exactly one <item id=…/>", App::ItemRequired));
                };
                self.svc.retract(&actor, node, id.to_string()).await.map_err(fail)?;
                Ok(None)
            }
            "subscribe" => {
                let node = node.ok_or_else(|| bad_request_app("subscribe needs a node", App::NodeIdRequired))?;
                let jid = op.attr("jid").ok_or_else(|| bad_request_app("subscribe needs a jid", App::InvalidJid))?;
                let sub = self.svc.subscribe(&actor, node, jid).await.map_err(fail)?;
                Ok(Some(in_pubsub(state(&sub))))
            }
            "unsubscribe" => {
                let node = node.ok_or_else(|| bad_request_app("unsubscribe needs a node", App::NodeIdRequired))?;
                let jid = op.attr("jid").ok_or_else(|| bad_request_app("unsubscribe needs a jid", App::InvalidJid))?;
                self.svc.unsubscribe(&actor, node, jid).await.map_err(fail)?;
                Ok(None)
            }
            _ => Err(not_implemented(&payload)),
        }
    }

    async fn publish(&self, actor: &str, payload: Element) -> Outcome {
        let req = PublishRequest::try_from(payload).map_err(|e| bad_request(&format!("malformed publish: {e}")))?;
        let node = req.publish.node;
        let [item] = &req.publish.items[..] else {
            return Err(bad_request_app("publish exactly one <item/>", App::ItemRequired));
        };
        self.svc.publish_target(actor, &node).await.map_err(fail)?;
        let entry = item.entry().map_err(|e| fail(FeedError::InvalidPayload(e.to_string())))?;
        let id = self.svc.publish(actor, &node, item.id.clone(), entry).await.map_err(fail)?;
        Ok(Some(publish_result(&node, &id).into()))
    }

    async fn pull(&self, actor: &str, payload: Element) -> Result<Answer, StanzaError> {
        let q = ItemsQuery::try_from(payload).map_err(|e| bad_request(&format!("malformed items request: {e}")))?;
        let node = q.items.node;
        let rsm = q.rsm.unwrap_or(SetQuery { max: None, after: None, before: None, index: None });
        let lookup = !q.items.item_ids.is_empty();
        let req = PullRequest {
            node: node.clone(),
            max: rsm.max.map(|m| m as u64),
            after: rsm.after,
            before: rsm.before,
            index: rsm.index.map(|i| i as u64),
            max_items: q.items.max_items,
            ids: q.items.item_ids,
        };
        let page = self.svc.pull(actor, req).await.map_err(fail)?;
        let set = (!lookup).then(|| rsm_result(&page));
        Ok(Answer::Page { node, items: page.items, set })
    }

    async fn disco_info(&self, actor: &str, node: Option<&str>) -> Outcome {
        let mut result = DiscoInfoResult {
            node: node.map(String::from),
            identities: Vec::new(),
            features: Default::default(),
            extensions: Vec::new(),
        };
        match node {
            None => {
                result.identities.push(Identity::new("pubsub", "service", "en", "Smart Feeds"));
                for f in [ns::DISCO_INFO, ns::DISCO_ITEMS, ns::PING, ns::PUBSUB, ns::RSM, SHIM, COMMANDS] {
                    result.features.insert(f.to_string());
                }
                for f in PUBSUB_FEATURES {
                    result.features.insert(format!("{}#{f}", ns::PUBSUB));
                }
            }
            Some(SHIM) => {
                result.features.extend(HEADER_FEATURES.iter().map(|f| f.to_string()));
            }
            Some(node) => {
                let info = self.svc.node_info(actor, node).await.map_err(fail)?;
                result.identities.push(Identity::new("pubsub", "leaf", "en", info.title.clone()));
                result.features.insert(ns::PUBSUB.to_string());
                let meta = format!("{}#meta-data", ns::PUBSUB);
                let count = info.count.to_string();
                let subscribers = info.subscribers.to_string();
                result.extensions.push(DataForm::new(
                    DataFormType::Result_,
                    &meta,
                    vec![
                        Field::text_single("pubsub#title", &info.title),
                        Field::text_single("pubsub#description", &info.description),
                        Field::text_single("pubsub#type", super::payloads::ATOM),
                        Field::text_single("pubsub#num_subscribers", &subscribers),
                        Field::text_single("pubsub#num_items", &count),
                    ],
                ));
            }
        }
        Ok(Some(result.into()))
    }

    async fn disco_items(&self, actor: &str, payload: Element) -> Outcome {
        let q = DiscoItemsQuery::try_from(payload).map_err(|e| bad_request(&format!("malformed disco#items: {e}")))?;
        if q.node.as_deref() == Some(COMMANDS) {
            // Only admins may run the commands, so only admins see them.
            let visible = self.svc.config().admins.iter().any(|a| a == actor);
            let items = COMMAND_LIST
                .iter()
                .filter(|_| visible)
                .map(|(node, name)| DiscoItem {
                    jid: self.me.clone(),
                    node: Some(node.to_string()),
                    name: Some(name.to_string()),
                })
                .collect();
            return Ok(Some(DiscoItemsResult { node: q.node, items, rsm: None }.into()));
        }
        if let Some(node) = q.node {
            // A leaf node's items are its item ids, first page of the view.
            let page =
                self.svc.pull(actor, PullRequest { node: node.clone(), ..Default::default() }).await.map_err(fail)?;
            let items = page
                .items
                .iter()
                .map(|i| DiscoItem { jid: self.me.clone(), node: None, name: Some(i.id.clone()) })
                .collect();
            return Ok(Some(DiscoItemsResult { node: Some(node), items, rsm: None }.into()));
        }
        let rsm = q.rsm.unwrap_or(SetQuery { max: None, after: None, before: None, index: None });
        let max = rsm.max.unwrap_or(100).min(self.svc.config().limits.max_page as usize);
        let feeds = self.svc.feeds(actor, rsm.after, max).await.map_err(fail)?;
        let set = match (feeds.first(), feeds.last()) {
            (Some(f), Some(l)) => Some(SetResult {
                first: Some(First { index: None, item: f.name.clone() }),
                last: Some(l.name.clone()),
                count: None,
            }),
            _ => None,
        };
        let items = feeds
            .into_iter()
            .map(|f| DiscoItem { jid: self.me.clone(), node: Some(f.name), name: Some(f.title) })
            .collect();
        Ok(Some(DiscoItemsResult { node: None, items, rsm: set }.into()))
    }
}

/// What kind of request an iq is, for metrics and logs.
pub fn request_kind(iq: &Iq) -> &'static str {
    let (Iq::Get { payload, .. } | Iq::Set { payload, .. }) = iq else { return "reply" };
    match (payload.ns().as_str(), payload.name()) {
        (ns::PING, _) => "ping",
        (ns::DISCO_INFO, _) => "disco_info",
        (ns::DISCO_ITEMS, _) => "disco_items",
        (ns::PUBSUB, _) => match payload.children().find(|c| c.name() != "set").map(|c| c.name()) {
            Some("items") => "items",
            Some("publish") => "publish",
            Some("retract") => "retract",
            Some("subscribe") => "subscribe",
            Some("unsubscribe") => "unsubscribe",
            Some("subscriptions") => "subscriptions",
            _ => "pubsub_other",
        },
        _ => "other",
    }
}

/// A stored subscription as XEP-0060 shows it.
fn state(s: &Subscription) -> SubscriptionState {
    SubscriptionState {
        node: s.node.clone(),
        jid: s.jid.clone(),
        subid: s.subid.clone(),
        subscription: "subscribed".into(),
    }
}

/// The RSM `<set/>` of a page: cursors for first and last, the first's index, the count.
pub fn rsm_result(page: &Page) -> SetResult {
    SetResult {
        first: page.first.map(|c| First { index: page.first_index.map(|i| i as usize), item: format!("cursor:{c}") }),
        last: page.last.map(|c| format!("cursor:{c}")),
        count: Some(page.count as usize),
    }
}

/// The element an item carries: its entry, or its `<deleted-entry/>`.
pub fn payload_element(item: &Item) -> Result<Element, FeedError> {
    match &item.payload {
        Payload::Entry(xml) => parse_stored(xml).map_err(|e| {
            FeedError::Store(crate::store::StoreError::Backend(format!("stored entry {} does not parse: {e}", item.id)))
        }),
        Payload::Tombstone { atom_ref, when } => Ok(tombstone(atom_ref, &rfc3339(*when))),
    }
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
