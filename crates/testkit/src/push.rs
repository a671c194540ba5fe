//! Push (SPEC §5) as a subscriber sees it: subscribe / unsubscribe / subscriptions iqs, the
//! `<subscription/>` replies parsed, and headline pushes parsed into plain values (node, the
//! published item or the retracted id, the SHIM headers `TotalItems`, `PreviousCursor`,
//! `LastCursor`). Parsing is strict: anything that is not exactly one pubsub#event with one
//! `<item/>` or one `<retract/>` panics with the stanza.

use std::time::Duration;

use minidom::Element;

use super::connection::Connection;
use super::pubsub::{DATA_FORMS, DISCO_INFO, PUBSUB, PageItem, SHIM, esc};
use super::server::COMPONENT_DOMAIN;
use super::xml::{stanza_type, to_xml, xml};

pub const PUBSUB_EVENT: &str = "http://jabber.org/protocol/pubsub#event";

/// `<iq type="set"><pubsub><subscribe node jid/></pubsub></iq>`.
pub fn subscribe_iq(node: &str, jid: &str) -> Element {
    xml(&format!(
        r#"<iq type="set" to="{COMPONENT_DOMAIN}"><pubsub xmlns="{PUBSUB}"><subscribe node="{}" jid="{}"/></pubsub></iq>"#,
        esc(node),
        esc(jid)
    ))
}

/// `<iq type="set"><pubsub><unsubscribe node jid/></pubsub></iq>`.
pub fn unsubscribe_iq(node: &str, jid: &str) -> Element {
    xml(&format!(
        r#"<iq type="set" to="{COMPONENT_DOMAIN}"><pubsub xmlns="{PUBSUB}"><unsubscribe node="{}" jid="{}"/></pubsub></iq>"#,
        esc(node),
        esc(jid)
    ))
}

/// `<iq type="get"><pubsub><subscriptions [node]/></pubsub></iq>`.
pub fn subscriptions_iq(node: Option<&str>) -> Element {
    let node = node.map(|n| format!(r#" node="{}""#, esc(n))).unwrap_or_default();
    xml(&format!(
        r#"<iq type="get" to="{COMPONENT_DOMAIN}"><pubsub xmlns="{PUBSUB}"><subscriptions{node}/></pubsub></iq>"#
    ))
}

/// `<iq type="get"><query xmlns="disco#info" node/></iq>`.
pub fn disco_info_iq(node: &str) -> Element {
    xml(&format!(r#"<iq type="get" to="{COMPONENT_DOMAIN}"><query xmlns="{DISCO_INFO}" node="{}"/></iq>"#, esc(node)))
}

/// A `<subscription/>` element.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubState {
    pub node: String,
    pub jid: String,
    pub subid: Option<String>,
    pub subscription: Option<String>,
}

fn sub_state(el: &Element) -> SubState {
    SubState {
        node: el.attr("node").unwrap_or_else(|| panic!("<subscription/> without node: {}", to_xml(el))).to_string(),
        jid: el.attr("jid").unwrap_or_else(|| panic!("<subscription/> without jid: {}", to_xml(el))).to_string(),
        subid: el.attr("subid").map(String::from),
        subscription: el.attr("subscription").map(String::from),
    }
}

/// The `<pubsub><subscription/></pubsub>` of a subscribe result.
#[track_caller]
pub fn parse_subscription(reply: &Element) -> SubState {
    let raw = to_xml(reply);
    assert_eq!(stanza_type(reply), "result", "expected a subscribe result: {raw}");
    assert_eq!(reply.attr("from"), Some(COMPONENT_DOMAIN), "{raw}");
    let pubsub = reply.get_child("pubsub", PUBSUB).unwrap_or_else(|| panic!("no <pubsub/> in {raw}"));
    let children: Vec<&Element> = pubsub.children().collect();
    assert_eq!(children.len(), 1, "one child in <pubsub/>: {raw}");
    assert!(children[0].is("subscription", PUBSUB), "a <subscription/>: {raw}");
    sub_state(children[0])
}

/// The `<subscription/>`s of a subscriptions result.
#[track_caller]
pub fn parse_subscriptions(reply: &Element) -> Vec<SubState> {
    let raw = to_xml(reply);
    assert_eq!(stanza_type(reply), "result", "expected a subscriptions result: {raw}");
    let list = reply
        .get_child("pubsub", PUBSUB)
        .and_then(|p| p.get_child("subscriptions", PUBSUB))
        .unwrap_or_else(|| panic!("no <pubsub><subscriptions/> in {raw}"));
    list.children()
        .map(|c| {
            assert!(c.is("subscription", PUBSUB), "only <subscription/>s in the list: {raw}");
            sub_state(c)
        })
        .collect()
}

/// Asks for the sender's subscriptions (optionally to one node) and parses them.
pub async fn subscriptions(conn: &mut Connection, node: Option<&str>) -> Vec<SubState> {
    let reply = conn.iq(subscriptions_iq(node)).await;
    parse_subscriptions(&reply)
}

/// Subscribes `jid` to `node` and checks the reply is a `<subscription/>` for exactly that
/// node and JID, `subscription="subscribed"`, with a subid.
pub async fn subscribe(conn: &mut Connection, node: &str, jid: &str) -> SubState {
    let reply = conn.iq(subscribe_iq(node, jid)).await;
    let sub = parse_subscription(&reply);
    let raw = to_xml(&reply);
    assert_eq!(sub.node, node, "the reply names the node as written: {raw}");
    assert_eq!(sub.jid, jid, "the reply names the subscribed JID: {raw}");
    assert_eq!(sub.subscription.as_deref(), Some("subscribed"), "{raw}");
    assert!(sub.subid.as_deref().is_some_and(|s| !s.is_empty()), "a subid: {raw}");
    sub
}

/// The value of a field of the disco#info `pubsub#meta-data` form.
#[track_caller]
pub fn meta_field(reply: &Element, var: &str) -> Option<String> {
    let raw = to_xml(reply);
    assert_eq!(stanza_type(reply), "result", "expected a disco#info result: {raw}");
    let query = reply.get_child("query", DISCO_INFO).unwrap_or_else(|| panic!("no <query/> in {raw}"));
    let form = query
        .children()
        .filter(|c| c.is("x", DATA_FORMS))
        .find(|x| {
            x.children().any(|f| {
                f.attr("var") == Some("FORM_TYPE")
                    && f.get_child("value", DATA_FORMS)
                        .is_some_and(|v| v.text() == "http://jabber.org/protocol/pubsub#meta-data")
            })
        })
        .unwrap_or_else(|| panic!("no pubsub#meta-data form in {raw}"));
    form.children()
        .find(|f| f.attr("var") == Some(var))
        .and_then(|f| f.get_child("value", DATA_FORMS))
        .map(|v| v.text())
}

/// What a push carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// `<item id>PAYLOAD</item>`: a new or updated item.
    Item { id: String, payload: Element },
    /// `<retract id/>`.
    Retract { id: String },
}

/// A parsed push headline.
#[derive(Clone, Debug)]
pub struct Push {
    pub from: String,
    pub to: String,
    /// The `type` attribute.
    pub kind: String,
    pub id: Option<String>,
    /// The `node` of `<items/>`.
    pub node: String,
    pub event: Event,
    /// `TotalItems`, parsed.
    pub total: Option<u64>,
    /// `PreviousCursor` (cursor value, no `cursor:` prefix).
    pub previous: Option<String>,
    /// `LastCursor`.
    pub last: Option<String>,
    /// Every header, in order.
    pub headers: Vec<(String, String)>,
    pub raw: String,
}

impl Push {
    /// The id of the pushed or retracted item.
    pub fn item_id(&self) -> &str {
        match &self.event {
            Event::Item { id, .. } | Event::Retract { id } => id,
        }
    }

    pub fn is_retract(&self) -> bool {
        matches!(self.event, Event::Retract { .. })
    }

    /// The entry's `<title/>`, for an item push.
    pub fn title(&self) -> Option<String> {
        match &self.event {
            Event::Item { id, payload } => PageItem { id: id.clone(), payload: Some(payload.clone()) }.title(),
            Event::Retract { .. } => None,
        }
    }

    /// `LastCursor`, which every push must carry.
    #[track_caller]
    pub fn last_cursor(&self) -> &str {
        self.last.as_deref().unwrap_or_else(|| panic!("no LastCursor header in {}", self.raw))
    }
}

/// Parses a push headline; panics (with the stanza) when it is not exactly one pubsub event
/// with one item or retraction.
#[track_caller]
pub fn parse_push(msg: &Element) -> Push {
    let raw = to_xml(msg);
    assert_eq!(msg.name(), "message", "a push is a <message/>: {raw}");
    let events: Vec<&Element> = msg.children().filter(|c| c.is("event", PUBSUB_EVENT)).collect();
    assert_eq!(events.len(), 1, "exactly one pubsub#event <event/> in {raw}");
    let items: Vec<&Element> = events[0].children().collect();
    assert_eq!(items.len(), 1, "exactly one child of <event/> in {raw}");
    assert!(items[0].is("items", PUBSUB_EVENT), "<event><items/> in {raw}");
    let node = items[0].attr("node").unwrap_or_else(|| panic!("<items/> without node in {raw}")).to_string();
    let children: Vec<&Element> = items[0].children().collect();
    assert_eq!(children.len(), 1, "exactly one <item/> or <retract/> in <items/>: {raw}");
    let child = children[0];
    let id = child.attr("id").unwrap_or_else(|| panic!("<{}/> without id in {raw}", child.name())).to_string();
    let event = if child.is("item", PUBSUB_EVENT) {
        let payloads: Vec<&Element> = child.children().collect();
        assert_eq!(payloads.len(), 1, "exactly one payload in <item/>: {raw}");
        Event::Item { id, payload: payloads[0].clone() }
    } else if child.is("retract", PUBSUB_EVENT) {
        assert_eq!(child.children().count(), 0, "an empty <retract/>: {raw}");
        Event::Retract { id }
    } else {
        panic!("unexpected <{}/> in <items/>: {raw}", child.name());
    };
    let mut headers = Vec::new();
    for h in msg.children().filter(|c| c.is("headers", SHIM)) {
        for header in h.children() {
            assert!(header.is("header", SHIM), "only <header/>s in <headers/>: {raw}");
            let name = header.attr("name").unwrap_or_else(|| panic!("<header/> without name in {raw}"));
            headers.push((name.to_string(), header.text()));
        }
    }
    let one = |name: &str| {
        let values: Vec<&String> = headers.iter().filter(|(n, _)| n == name).map(|(_, v)| v).collect();
        assert!(values.len() <= 1, "header {name} at most once in {raw}");
        values.first().map(|v| v.to_string())
    };
    let total = one("TotalItems").map(|t| t.parse::<u64>().unwrap_or_else(|_| panic!("TotalItems {t:?} in {raw}")));
    let previous = one("PreviousCursor");
    let last = one("LastCursor");
    Push {
        from: msg.attr("from").unwrap_or_default().to_string(),
        to: msg.attr("to").unwrap_or_default().to_string(),
        kind: stanza_type(msg).to_string(),
        id: msg.attr("id").map(String::from),
        node,
        event,
        total,
        previous,
        last,
        headers,
        raw,
    }
}

/// The next message, parsed as a push; panics if none arrives within `timeout`.
pub async fn next_push(conn: &mut Connection, timeout: Duration) -> Push {
    match conn.next_message(timeout).await {
        Some(m) => parse_push(&m),
        None => panic!("{}: no push within {timeout:?}", conn.label()),
    }
}

/// Waits `wait` and panics if any message arrives meanwhile (or is already queued).
pub async fn assert_no_message(conn: &mut Connection, wait: Duration, context: &str) {
    if let Some(m) = conn.next_message(wait).await {
        panic!("{}: no more messages expected ({context}), got {}", conn.label(), to_xml(&m));
    }
}
