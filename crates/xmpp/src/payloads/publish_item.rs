//! XEP-0060 §7.1 publish (SPEC §6), keeping the item's payload whole.
//!
//! xmpp-parsers' `PubSub::Publish` parses an `<item>` into `payload: Option<Element>`, which
//! keeps the first child element and silently drops any further ones: an item with two
//! entries would look like one. [`PublishItem`] keeps every child element and the item's
//! text, so [`PublishItem::entry`] can refuse anything but exactly one Atom entry
//! (`bad-request` + `invalid-payload`). Retract has no such problem: use
//! `xmpp_parsers::pubsub::PubSub::Retract`.

use minidom::{Element, Node};
use xmpp_parsers::iq::IqSetPayload;
use xmpp_parsers::ns;
use xmpp_parsers::pubsub::pubsub::{Item, PublishOptions};
use xmpp_parsers::pubsub::{ItemId, NodeName, PubSub};
use xso::error::FromElementError;
use xso::{AsXml, FromXml};

use feed::Entry;
use feed::atom::{EntryError, entry_fields};

/// `<pubsub xmlns="http://jabber.org/protocol/pubsub"><publish/><publish-options/>?</pubsub>`,
/// the body of an iq set publishing items. Any other child is a parse error.
#[derive(FromXml, AsXml, Debug, Clone, PartialEq)]
#[xml(namespace = ns::PUBSUB, name = "pubsub", on_unknown_child = Fail)]
pub struct PublishRequest {
    /// The `<publish/>` element.
    #[xml(child)]
    pub publish: Publish,

    /// XEP-0060 §7.1.5 publish options, if any (we have no node configuration to check
    /// them against).
    #[xml(child(default))]
    pub options: Option<PublishOptions>,
}

impl IqSetPayload for PublishRequest {}

impl PublishRequest {
    /// Whether `elem` is a `<pubsub/>` whose request is `<publish/>`.
    pub fn is_publish_request(elem: &Element) -> bool {
        elem.is("pubsub", ns::PUBSUB) && elem.has_child("publish", ns::PUBSUB)
    }

    /// `elem` typed as a publish request. The usual shape (one `<publish node>` of `<item>`s,
    /// nothing else but whitespace) keeps the items' elements as they were read: xso would
    /// turn them back into events and build them again, a twentieth of the component's CPU
    /// per publish. Any other shape goes through xso, which also words the errors; the
    /// result is the same either way (the tests hold the two side by side).
    pub fn from_tree(elem: Element) -> Result<PublishRequest, FromElementError> {
        Self::usual(elem).or_else(PublishRequest::try_from)
    }

    /// The usual shape, or the element back.
    fn usual(mut elem: Element) -> Result<PublishRequest, Element> {
        let only =
            |e: &Element, name: &str| super::blank_between_children(e) && e.children().all(|c| c.is(name, ns::PUBSUB));
        let usual = elem.is("pubsub", ns::PUBSUB)
            && only(&elem, "publish")
            && elem.children().count() == 1
            && elem.children().all(|p| p.attr("node").is_some() && only(p, "item"));
        if !usual {
            return Err(elem);
        }
        let Some(mut publish) = elem.take_nodes().into_iter().find_map(Node::into_element) else {
            unreachable!("one <publish> was seen above")
        };
        let Some(node) = publish.attr("node").map(str::to_owned) else { unreachable!("its node was seen above") };
        let items = publish.take_nodes().into_iter().filter_map(Node::into_element).map(PublishItem::of_tree).collect();
        Ok(PublishRequest { publish: Publish { node, items }, options: None })
    }
}

/// `<publish node="FEED"><item id="X">ENTRY</item></publish>`.
#[derive(FromXml, AsXml, Debug, Clone, PartialEq)]
#[xml(namespace = ns::PUBSUB, name = "publish")]
pub struct Publish {
    /// The node published to, as written (SPEC §6: a name with parameters is refused).
    #[xml(attribute)]
    pub node: String,

    /// The items; XEP-0060 expects exactly one, the service decides what to do otherwise.
    #[xml(child(n = ..))]
    pub items: Vec<PublishItem>,
}

/// A publish `<item id="…">`, with all of its content.
#[derive(FromXml, AsXml, Debug, Clone, PartialEq)]
#[xml(namespace = ns::PUBSUB, name = "item")]
pub struct PublishItem {
    /// The item id; `None` asks the service to make one.
    #[xml(attribute(default))]
    pub id: Option<String>,

    /// Every child element of the item, in order.
    #[xml(element(n = ..))]
    pub payload: Vec<Element>,

    /// The item's text content outside its children, concatenated (whitespace, usually).
    #[xml(text)]
    pub text: String,
}

impl PublishItem {
    /// An `<item>` read from the tree: its elements as they are, its text joined.
    fn of_tree(mut item: Element) -> PublishItem {
        let id = item.attr("id").map(str::to_owned);
        let (mut payload, mut text) = (Vec::new(), String::new());
        for node in item.take_nodes() {
            match node {
                Node::Element(e) => payload.push(e),
                Node::Text(t) => text.push_str(&t),
            }
        }
        PublishItem { id, payload, text }
    }

    /// The item's payload as an [`Entry`], if it is exactly one Atom `<entry/>` (whitespace
    /// text aside); see [`feed::atom::inspect_entry`] for what is extracted.
    pub fn entry(&self) -> Result<Entry, EntryError> {
        if !self.text.trim().is_empty() {
            return Err(EntryError::Text);
        }
        match self.payload.as_slice() {
            [] => Err(EntryError::Empty),
            [entry] => entry_fields(entry),
            more => Err(EntryError::TooMany(more.len())),
        }
    }
}

/// The body of the iq result to a publish: `<pubsub><publish node="FEED"><item id="X"/>
/// </publish></pubsub>`, telling the publisher the item id (which the service may have made).
pub fn publish_result(node: &str, item_id: &str) -> PubSub {
    PubSub::Publish {
        publish: xmpp_parsers::pubsub::pubsub::Publish {
            node: NodeName(node.to_owned()),
            items: vec![Item { id: Some(ItemId(item_id.to_owned())), publisher: None, payload: None }],
        },
        publish_options: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payloads::ATOM;

    #[test]
    fn publish_one_entry() {
        let elem: Element = "<pubsub xmlns='http://jabber.org/protocol/pubsub'><publish node='comments'>\
            <item id='X'><entry xmlns='http://www.w3.org/2005/Atom'><id>urn:1</id>\
            <author><name>Alice</name></author><category term='t'/></entry></item></publish></pubsub>"
            .parse()
            .unwrap();
        assert!(PublishRequest::is_publish_request(&elem));
        let req = PublishRequest::try_from(elem.clone()).unwrap();
        assert_eq!(req.publish.node, "comments");
        assert_eq!(req.options, None);
        let item = &req.publish.items[0];
        assert_eq!(item.id.as_deref(), Some("X"));
        let entry = item.entry().unwrap();
        assert_eq!(entry.atom_id.as_deref(), Some("urn:1"));
        assert_eq!(entry.author.as_deref(), Some("Alice"));
        assert_eq!(entry.categories, ["t"]);
        assert!(item.payload[0].is("entry", ATOM));
        // `text` serialises as an empty text node, so compare the round trip by value.
        assert_eq!(PublishRequest::try_from(Element::from(req.clone())).unwrap(), req);
    }

    #[test]
    fn publish_without_id_and_with_whitespace() {
        let elem: Element = "<pubsub xmlns='http://jabber.org/protocol/pubsub'><publish node='c'>\
            <item>\n  <entry xmlns='http://www.w3.org/2005/Atom'/>\n</item></publish></pubsub>"
            .parse()
            .unwrap();
        let req = PublishRequest::try_from(elem).unwrap();
        assert_eq!(req.publish.items[0].id, None);
        assert!(req.publish.items[0].entry().is_ok());
    }

    #[test]
    fn two_entries_are_refused() {
        // xmpp-parsers would keep the first entry and drop the second without a word.
        let elem: Element = "<pubsub xmlns='http://jabber.org/protocol/pubsub'><publish node='c'>\
            <item id='X'><entry xmlns='http://www.w3.org/2005/Atom'/><entry xmlns='http://www.w3.org/2005/Atom'/></item>\
            </publish></pubsub>"
            .parse()
            .unwrap();
        let PubSub::Publish { publish, .. } = PubSub::try_from(elem.clone()).unwrap() else {
            panic!("not a publish");
        };
        assert!(publish.items[0].payload.is_some());
        let req = PublishRequest::try_from(elem).unwrap();
        assert_eq!(req.publish.items[0].entry(), Err(EntryError::TooMany(2)));
    }

    #[test]
    fn text_and_empty_items_are_refused() {
        let elem: Element = "<pubsub xmlns='http://jabber.org/protocol/pubsub'><publish node='c'>\
            <item id='a'>hi<entry xmlns='http://www.w3.org/2005/Atom'/></item><item id='b'/></publish></pubsub>"
            .parse()
            .unwrap();
        let req = PublishRequest::try_from(elem).unwrap();
        assert_eq!(req.publish.items[0].entry(), Err(EntryError::Text));
        assert_eq!(req.publish.items[1].entry(), Err(EntryError::Empty));
    }

    #[test]
    fn publish_options_and_strictness() {
        let elem: Element = "<pubsub xmlns='http://jabber.org/protocol/pubsub'><publish node='c'/>\
            <publish-options/></pubsub>"
            .parse()
            .unwrap();
        let req = PublishRequest::try_from(elem).unwrap();
        assert!(req.options.is_some());
        assert!(req.publish.items.is_empty());

        let elem: Element = "<pubsub xmlns='http://jabber.org/protocol/pubsub'><publish node='c'/>\
            <retract node='c'/></pubsub>"
            .parse()
            .unwrap();
        assert!(PublishRequest::try_from(elem).is_err());
    }

    /// Both typings of `xml`, errors as text.
    fn both(xml: &str) -> (Result<PublishRequest, String>, Result<PublishRequest, String>) {
        let elem: Element = xml.parse().unwrap_or_else(|e| panic!("{xml}: {e}"));
        let ours = PublishRequest::from_tree(elem.clone()).map_err(|e| e.to_string());
        (ours, PublishRequest::try_from(elem).map_err(|e| e.to_string()))
    }

    #[test]
    fn the_usual_publish_keeps_the_elements_read() {
        let xml = "<pubsub xmlns='http://jabber.org/protocol/pubsub'><publish node='c'><item id='X'>\
            <e xmlns='urn:x' xmlns:y='urn:y'><y:f/></e></item></publish></pubsub>";
        let (ours, theirs) = both(xml);
        assert_eq!(ours, theirs);
        // The sender's prefix is still there: xso's rebuild would name its own.
        let req = ours.unwrap();
        assert_eq!(String::from(&req.publish.items[0].payload[0]), "<e xmlns='urn:x' xmlns:y='urn:y'><y:f/></e>");
    }

    proptest::proptest! {
        #[test]
        fn any_publish_types_as_xso_types_it(
            outer in proptest::sample::select(vec!["", " ", "t"]),
            extra in proptest::sample::select(vec!["", "<publish-options/>", "<retract node='c'/>", "<x xmlns='urn:x'/>", "<publish node='d'/>"]),
            node in proptest::option::of(proptest::sample::select(vec!["c", ""])),
            inner in proptest::sample::select(vec!["", "\n", "u", "<other/>", "<x xmlns='urn:x'/>"]),
            items in proptest::collection::vec(
                (proptest::option::of("[a-z]{0,2}"), 0usize..3, proptest::sample::select(vec!["", " ", "w"])),
                0..3,
            ),
        ) {
            let mut xml = format!("<pubsub xmlns='http://jabber.org/protocol/pubsub'>{outer}<publish");
            if let Some(node) = node {
                xml.push_str(&format!(" node='{node}'"));
            }
            xml.push_str(&format!(" a='1'>{inner}"));
            for (id, children, text) in &items {
                xml.push_str("<item");
                if let Some(id) = id {
                    xml.push_str(&format!(" id='{id}'"));
                }
                xml.push_str(&format!(" publisher='p'>{text}"));
                for i in 0..*children {
                    xml.push_str(&format!("<entry xmlns='http://www.w3.org/2005/Atom'><id>{i}</id></entry>{text}"));
                }
                xml.push_str("</item>");
            }
            xml.push_str(&format!("</publish>{extra}{outer}</pubsub>"));
            let (ours, theirs) = both(&xml);
            proptest::prop_assert_eq!(ours, theirs, "{}", xml);
        }
    }

    #[test]
    fn result() {
        let elem: Element = "<pubsub xmlns='http://jabber.org/protocol/pubsub'><publish node='c'>\
            <item id='gen-1'/></publish></pubsub>"
            .parse()
            .unwrap();
        assert_eq!(Element::from(publish_result("c", "gen-1")), elem);
    }
}
