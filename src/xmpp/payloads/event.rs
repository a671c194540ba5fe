//! The push headline of SPEC §5: a `<message type="headline">` with a pubsub#event payload
//! and SHIM sync headers.
//!
//! xmpp-parsers' [`Event`] already writes exactly
//! `<event xmlns="http://jabber.org/protocol/pubsub#event"><items node="N"><item id="X">ENTRY
//! </item></items></event>` and the retraction form `<items node="N"><retract id="X"/></items>`
//! (the tests below pin that), so we reuse it for the payload.
//!
//! The message itself is a [`Push`]: one change goes to thousands of subscribers with the
//! same event and headers, so those are built once and shared ([`PushBody`]), and each copy
//! adds only its address and stanza id. The body is encoded once, and each copy is written
//! around it ([`ToParts`]), never built as a per-subscriber `Message`.

use std::sync::Arc;

use super::shim::Headers;
use crate::xmpp::parts::{Part, Parts, ToParts, Xso, attr, end, head_end, start, to_xml};
use minidom::Element;
use xmpp_parsers::ns;
use xmpp_parsers::pubsub::event::{Event, Item as EventItem, Payload};
use xmpp_parsers::pubsub::{ItemId, NodeName};
use xso::error::Error;
use xso::exports::rxml::xml_ncname;

/// The event of a published (or updated) item: `<items node><item id>ENTRY</item></items>`.
/// `node` is the node name as the subscriber wrote it.
pub fn item_published(node: &str, id: &str, entry: Element) -> Event {
    Event {
        payload: Payload::Items {
            node: NodeName(node.to_owned()),
            published: vec![EventItem { id: Some(ItemId(id.to_owned())), publisher: None, payload: Some(entry) }],
            retracted: Vec::new(),
        },
    }
}

/// The event of a retracted item: `<items node><retract id/></items>`.
pub fn item_retracted(node: &str, id: &str) -> Event {
    Event {
        payload: Payload::Items {
            node: NodeName(node.to_owned()),
            published: Vec::new(),
            retracted: vec![ItemId(id.to_owned())],
        },
    }
}

/// What every copy of one push shares: the sender (the component's JID, which Prosody
/// requires as `from`), and the `<event/>` and `<headers/>`, encoded once.
#[derive(Debug, Clone, PartialEq)]
pub struct PushBody {
    pub from: String,
    /// `<event xmlns=…>…</event><headers xmlns=…>…</headers>`, each standing alone.
    xml: String,
}

impl PushBody {
    /// The body of pushes from `from` carrying `event` and `headers`.
    pub fn new(from: String, event: &Event, headers: &Headers) -> Result<PushBody, std::io::Error> {
        let xml = to_xml(&Xso(event))? + &to_xml(&Xso(headers))?;
        Ok(PushBody { from, xml })
    }

    /// `<event/><headers/>` as written into every copy (a multicast message carries it
    /// once for all its recipients).
    pub fn xml(&self) -> &str {
        &self.xml
    }
}

/// One copy of a push: the shared body, sent to `to` with stanza id `id`.
#[derive(Debug, Clone, PartialEq)]
pub struct Push {
    pub to: String,
    pub id: String,
    pub body: Arc<PushBody>,
}

impl ToParts for Push {
    fn parts(&self) -> Result<Parts<'_>, Error> {
        let parts = [
            start(ns::DEFAULT_NS, xml_ncname!("message")),
            attr(xml_ncname!("from"), &self.body.from),
            attr(xml_ncname!("to"), &self.to),
            attr(xml_ncname!("type"), "headline"),
            attr(xml_ncname!("id"), &self.id),
            head_end(),
            Part::Verbatim(&self.body.xml),
            end(),
        ];
        Ok(Box::new(parts.into_iter().map(Ok)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xmpp::payloads::shim::SyncHeaders;
    use xmpp_parsers::message::{Message, MessageType};

    const ENTRY: &str = "<entry xmlns='http://www.w3.org/2005/Atom'><id>urn:x</id></entry>";

    #[test]
    fn published_event() {
        let elem: Element = "<event xmlns='http://jabber.org/protocol/pubsub#event'>\
            <items node='comments?order=modified'><item id='14f687b2'>\
            <entry xmlns='http://www.w3.org/2005/Atom'><id>urn:x</id></entry></item></items></event>"
            .parse()
            .unwrap();
        let event = item_published("comments?order=modified", "14f687b2", ENTRY.parse().unwrap());
        assert_eq!(Element::from(event.clone()), elem);
        assert_eq!(Event::try_from(elem).unwrap(), event);
    }

    #[test]
    fn retracted_event() {
        let elem: Element = "<event xmlns='http://jabber.org/protocol/pubsub#event'>\
            <items node='c'><retract id='X'/></items></event>"
            .parse()
            .unwrap();
        let event = item_retracted("c", "X");
        assert_eq!(Element::from(event.clone()), elem);
        match Event::try_from(elem).unwrap().payload {
            Payload::Items { node, published, retracted } => {
                assert_eq!(node.0, "c");
                assert!(published.is_empty());
                assert_eq!(retracted, [ItemId("X".into())]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn headline() {
        let elem: Element = "<message xmlns='jabber:component:accept' from='feeds.example.com' \
            to='alice@example.net/1' type='headline' id='p1'>\
            <event xmlns='http://jabber.org/protocol/pubsub#event'><items node='c'><retract id='X'/></items></event>\
            <headers xmlns='http://jabber.org/protocol/shim'><header name='TotalItems'>427</header>\
            <header name='PreviousCursor'>1_0_1</header><header name='LastCursor'>2_0_2</header></headers>\
            </message>"
            .parse()
            .unwrap();
        let headers: Headers =
            SyncHeaders { total_items: 427, previous_cursor: Some("1_0_1".into()), last_cursor: "2_0_2".into() }.into();
        let body = PushBody::new("feeds.example.com".into(), &item_retracted("c", "X"), &headers).unwrap();
        let push = Push { to: "alice@example.net/1".into(), id: "p1".into(), body: Arc::new(body) };
        let written: Element = to_xml(&push).unwrap().parse().unwrap();
        assert_eq!(written, elem);

        // And back, as a test client reads it.
        let parsed = Message::try_from(elem).unwrap();
        assert_eq!(parsed.type_, MessageType::Headline);
        let headers = parsed.payloads.iter().find_map(|p| Headers::try_from(p.clone()).ok()).unwrap();
        assert_eq!(SyncHeaders::try_from(&headers).unwrap().total_items, 427);
    }

    #[test]
    fn values_are_escaped() {
        let headers = Headers::from(SyncHeaders { total_items: 1, previous_cursor: None, last_cursor: "1_0_1".into() });
        let body = PushBody::new("feeds.example.com".into(), &item_retracted("a&b<'\"", "X"), &headers).unwrap();
        let push = Push { to: "o'brien@example.net".into(), id: "<p>".into(), body: Arc::new(body) };
        let written: Element = to_xml(&push).unwrap().parse().unwrap();
        assert_eq!(written.attr("to"), Some("o'brien@example.net"));
        assert_eq!(written.attr("id"), Some("<p>"));
        let event = Event::try_from(written.get_child("event", ns::PUBSUB_EVENT).unwrap().clone()).unwrap();
        assert!(matches!(event.payload, Payload::Items { node, .. } if node.0 == "a&b<'\""));
    }
}
