//! The push headline of SPEC §5: a `<message type="headline">` with a pubsub#event payload
//! and SHIM sync headers.
//!
//! xmpp-parsers' [`Event`] already writes exactly
//! `<event xmlns="http://jabber.org/protocol/pubsub#event"><items node="N"><item id="X">ENTRY
//! </item></items></event>` and the retraction form `<items node="N"><retract id="X"/></items>`
//! (the tests below pin that), so we reuse it and only add builders.

use jid::Jid;
use minidom::Element;
use xmpp_parsers::message::{Id, Message};
use xmpp_parsers::pubsub::event::{Event, Item, Payload};
use xmpp_parsers::pubsub::{ItemId, NodeName};

use super::shim::Headers;

/// The event of a published (or updated) item: `<items node><item id>ENTRY</item></items>`.
/// `node` is the node name as the subscriber wrote it.
pub fn item_published(node: &str, id: &str, entry: Element) -> Event {
    Event {
        payload: Payload::Items {
            node: NodeName(node.to_owned()),
            published: vec![Item { id: Some(ItemId(id.to_owned())), publisher: None, payload: Some(entry) }],
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

/// The headline message carrying `event` and `headers` from the component (`from`, which
/// Prosody requires to be the component's JID) to the subscriber `to`, with stanza id `id`.
pub fn push_message(from: Jid, to: Jid, id: String, event: Event, headers: Headers) -> Message {
    let mut message = Message::headline(Some(to)).with_payload(event).with_payload(headers);
    message.from = Some(from);
    message.id = Some(Id(id));
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xmpp::payloads::shim::SyncHeaders;

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
        let message = push_message(
            "feeds.example.com".parse().unwrap(),
            "alice@example.net/1".parse().unwrap(),
            "p1".into(),
            item_retracted("c", "X"),
            SyncHeaders { total_items: 427, previous_cursor: Some("1_0_1".into()), last_cursor: "2_0_2".into() }.into(),
        );
        assert_eq!(Element::from(message.clone()), elem);

        // And back, as a test client reads it.
        let parsed = Message::try_from(elem).unwrap();
        assert_eq!(parsed, message);
        let headers = parsed.payloads.iter().find_map(|p| Headers::try_from(p.clone()).ok()).unwrap();
        assert_eq!(SyncHeaders::try_from(&headers).unwrap().total_items, 427);
    }
}
