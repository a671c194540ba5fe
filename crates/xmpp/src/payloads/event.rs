//! The push headline of SPEC §5: a `<message type="headline">` with a pubsub#event payload
//! and SHIM sync headers.
//!
//! The payload is exactly what xmpp-parsers' `xmpp_parsers::pubsub::event::Event` reads:
//! `<event xmlns="http://jabber.org/protocol/pubsub#event"><items node="N"><item id="X">ENTRY
//! </item></items></event>`, or `<items node="N"><retract id="X"/></items>` for a retraction
//! (the tests below read ours back with it).
//!
//! The message itself is a [`Push`]: one change goes to thousands of subscribers with the
//! same event and headers, so those are written once and shared ([`PushBody`]), with the
//! entry spliced in as it is stored (as pages do), and each copy adds only its address and
//! stanza id around the body ([`ToParts`]), never built as a per-subscriber `Message`.

use std::sync::Arc;

use super::shim::Headers;
use crate::stanza_parts::{Part, Parts, ToParts, Xso, attr, end, head_end, start, to_xml};
use xmpp_parsers::ns;
use xso::error::Error;
use xso::exports::rxml::xml_ncname;

use feed::atom::{ATOM, escape, parse_stored};

/// A chat client's line for a stored entry: its title, then its link (the `alternate`
/// one, or the first without `rel`), each when it has one; `None` when it has neither or
/// does not parse.
pub fn headline_text(entry: &str) -> Option<String> {
    let entry = parse_stored(entry).ok()?;
    let title = entry.get_child("title", ATOM).map(|t| t.text().trim().to_string()).filter(|t| !t.is_empty());
    let link = entry
        .children()
        .filter(|l| l.is("link", ATOM))
        .find(|l| matches!(l.attr("rel"), None | Some("alternate")))
        .and_then(|l| l.attr("href"))
        .map(str::to_string);
    match (title, link) {
        (Some(t), Some(l)) => Some(format!("{t}\n{l}")),
        (t, l) => t.or(l),
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

/// The `<event/>` of one change to one node: the stored entry as it is, or a retraction.
struct EventXml<'a> {
    node: &'a str,
    id: &'a str,
    /// The stored entry (standalone XML); `None` for a retraction.
    entry: Option<&'a str>,
}

impl ToParts for EventXml<'_> {
    fn parts(&self) -> Result<Parts<'_>, Error> {
        let mut parts = vec![
            start(ns::PUBSUB_EVENT, xml_ncname!("event")),
            head_end(),
            start(ns::PUBSUB_EVENT, xml_ncname!("items")),
            attr(xml_ncname!("node"), self.node),
            head_end(),
        ];
        match self.entry {
            Some(entry) => parts.extend([
                start(ns::PUBSUB_EVENT, xml_ncname!("item")),
                attr(xml_ncname!("id"), self.id),
                head_end(),
                Part::Verbatim(entry),
                end(),
            ]),
            None => parts.extend([
                start(ns::PUBSUB_EVENT, xml_ncname!("retract")),
                attr(xml_ncname!("id"), self.id),
                head_end(),
                end(),
            ]),
        }
        parts.extend([end(), end()]);
        Ok(Box::new(parts.into_iter().map(Ok)))
    }
}

impl PushBody {
    /// The body of pushes from `from` about item `id` of `node` (as the subscriber wrote
    /// it): the stored `entry`, or a retraction when `None`; with `headers`.
    pub fn new(
        from: String,
        node: &str,
        id: &str,
        entry: Option<&str>,
        headers: &Headers,
    ) -> Result<PushBody, std::io::Error> {
        let xml = to_xml(&EventXml { node, id, entry })? + &to_xml(&Xso(headers))?;
        Ok(PushBody { from, xml })
    }

    /// The body of pushes of `item` on `node` (a retraction for a tombstone), with
    /// `headers`, and a `<body>` of `text` when given.
    pub fn of(
        from: String,
        node: &str,
        item: &feed::Item,
        headers: &Headers,
        text: Option<&str>,
    ) -> Result<PushBody, std::io::Error> {
        let entry = match &item.payload {
            feed::Payload::Entry(xml) => Some(xml.as_str()),
            feed::Payload::Tombstone { .. } => None,
        };
        let body = PushBody::new(from, node, &item.id, entry, headers)?;
        Ok(match text {
            Some(text) => body.with_text(text),
            None => body,
        })
    }

    /// The same with a `<body>` first, `text` escaped: what a chat client shows.
    pub fn with_text(mut self, text: &str) -> PushBody {
        self.xml = format!("<body>{}</body>{}", escape(text), self.xml);
        self
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

impl PushBody {
    /// The headline carrying this body to `to`, with `inner` (already closed elements)
    /// written before the body: the one envelope of every push, single or multicast.
    pub(crate) fn headline<'x, I>(&'x self, to: &'x str, id: &'x str, inner: I) -> Parts<'x>
    where
        I: IntoIterator<Item = Part<'x>>,
        I::IntoIter: 'x,
    {
        let head = [
            start(ns::DEFAULT_NS, xml_ncname!("message")),
            attr(xml_ncname!("from"), &self.from),
            attr(xml_ncname!("to"), to),
            attr(xml_ncname!("type"), "headline"),
            attr(xml_ncname!("id"), id),
            head_end(),
        ];
        let tail = [Part::Verbatim(&self.xml), end()];
        Box::new(head.into_iter().chain(inner).chain(tail).map(Ok))
    }
}

impl ToParts for Push {
    fn parts(&self) -> Result<Parts<'_>, Error> {
        Ok(self.body.headline(&self.to, &self.id, []))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payloads::shim::SyncHeaders;
    use minidom::Element;
    use xmpp_parsers::message::{Message, MessageType};
    use xmpp_parsers::pubsub::ItemId;
    use xmpp_parsers::pubsub::event::{Event, Payload};

    const ENTRY: &str = "<entry xmlns='http://www.w3.org/2005/Atom'><id>urn:x</id></entry>";

    fn headers() -> Headers {
        SyncHeaders { total_items: 427, previous_cursor: Some("1_0_1".into()), last_cursor: "2_0_2".into() }.into()
    }

    /// The message a push writes, parsed back.
    fn written(node: &str, entry: Option<&str>) -> Element {
        let body = PushBody::new("feeds.example.com".into(), node, "14f687b2", entry, &headers()).unwrap();
        let push = Push { to: "alice@example.net/1".into(), id: "p1".into(), body: Arc::new(body) };
        to_xml(&push).unwrap().parse().unwrap()
    }

    #[test]
    fn a_published_item_carries_the_stored_entry_as_it_is() {
        let body = PushBody::new("f".into(), "c", "i", Some(ENTRY), &headers()).unwrap();
        assert!(body.xml.contains(ENTRY), "spliced in byte for byte: {}", body.xml);
        let elem = written("comments?order=modified", Some(ENTRY));
        let event: Element = "<event xmlns='http://jabber.org/protocol/pubsub#event'>\
            <items node='comments?order=modified'><item id='14f687b2'>\
            <entry xmlns='http://www.w3.org/2005/Atom'><id>urn:x</id></entry></item></items></event>"
            .parse()
            .unwrap();
        assert_eq!(elem.get_child("event", ns::PUBSUB_EVENT), Some(&event));
        assert!(Event::try_from(event).is_ok());
    }

    #[test]
    fn headline() {
        let elem: Element = "<message xmlns='jabber:component:accept' from='feeds.example.com' \
            to='alice@example.net/1' type='headline' id='p1'>\
            <event xmlns='http://jabber.org/protocol/pubsub#event'><items node='c'><retract id='14f687b2'/></items></event>\
            <headers xmlns='http://jabber.org/protocol/shim'><header name='TotalItems'>427</header>\
            <header name='PreviousCursor'>1_0_1</header><header name='LastCursor'>2_0_2</header></headers>\
            </message>"
            .parse()
            .unwrap();
        assert_eq!(written("c", None), elem);

        // And back, as a test client reads it.
        let parsed = Message::try_from(elem).unwrap();
        assert_eq!(parsed.type_, MessageType::Headline);
        let headers = parsed.payloads.iter().find_map(|p| Headers::try_from(p.clone()).ok()).unwrap();
        assert_eq!(SyncHeaders::try_from(&headers).unwrap().total_items, 427);
        let event = parsed.payloads.iter().find_map(|p| Event::try_from(p.clone()).ok()).unwrap();
        match event.payload {
            Payload::Items { node, published, retracted } => {
                assert_eq!(node.0, "c");
                assert!(published.is_empty());
                assert_eq!(retracted, [ItemId("14f687b2".into())]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn values_are_escaped() {
        let headers = Headers::from(SyncHeaders { total_items: 1, previous_cursor: None, last_cursor: "1_0_1".into() });
        let body = PushBody::new("feeds.example.com".into(), "a&b<'\"", "X", None, &headers).unwrap();
        let push = Push { to: "o'brien@example.net".into(), id: "<p>".into(), body: Arc::new(body) };
        let written: Element = to_xml(&push).unwrap().parse().unwrap();
        assert_eq!(written.attr("to"), Some("o'brien@example.net"));
        assert_eq!(written.attr("id"), Some("<p>"));
        let event = Event::try_from(written.get_child("event", ns::PUBSUB_EVENT).unwrap().clone()).unwrap();
        assert!(matches!(event.payload, Payload::Items { node, .. } if node.0 == "a&b<'\""));
    }

    #[test]
    fn headline_text_is_the_title_then_the_link() {
        let e = |inner: &str| format!("<entry xmlns='http://www.w3.org/2005/Atom'><id>urn:x</id>{inner}</entry>");
        let both = e("<title> Hi &amp; all </title><link rel='self' href='s'/><link href='https://x/1'/>");
        assert_eq!(headline_text(&both).as_deref(), Some("Hi & all\nhttps://x/1"));
        let alternate = e("<link rel='alternate' href='https://x/2'/>");
        assert_eq!(headline_text(&alternate).as_deref(), Some("https://x/2"));
        assert_eq!(headline_text(&e("<title>Only</title>")).as_deref(), Some("Only"));
        assert_eq!(headline_text(&e("<title> </title><link rel='self' href='s'/>")), None);
        assert_eq!(headline_text("not xml"), None);
    }

    #[test]
    fn a_body_is_a_message_body_beside_the_event() {
        let body = PushBody::new("f".into(), "c", "i", Some(ENTRY), &headers()).unwrap().with_text("a < b\nhttps://x");
        let push = Push { to: "alice@example.net/1".into(), id: "p1".into(), body: Arc::new(body) };
        let elem: Element = to_xml(&push).unwrap().parse().unwrap();
        let parsed = Message::try_from(elem.clone()).unwrap();
        assert_eq!(parsed.bodies.get("").map(|b| b.as_str()), Some("a < b\nhttps://x"));
        assert!(
            elem.get_child("event", ns::PUBSUB_EVENT).is_some()
                && elem.get_child("headers", crate::payloads::SHIM).is_some()
        );
    }
}
