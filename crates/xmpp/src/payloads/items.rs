//! XEP-0060 §6.5 item retrieval, paged with XEP-0059 (SPEC §4).
//!
//! xmpp-parsers' `PubSub::try_from` rejects an RSM `<set/>` beside `<items/>`, so the query
//! and its result get their own `<pubsub/>` types here. The RSM parts themselves are
//! xmpp-parsers' [`SetQuery`] and [`SetResult`], which behave as SPEC §4 needs:
//!
//! - an empty `<before/>` parses as `before: Some("")`: "the last page";
//! - `<max>`/`<index>` are `usize`, so `<max>9223372036854775808</max>` (2^63) parses on
//!   64-bit targets; a non-numeric, negative, space-padded or 2^64 value is a parse error
//!   (`text parse error: invalid digit found in string`), never a panic;
//! - a repeated `<after>` is a parse error; unknown children of `<set/>` are ignored;
//! - [`SetResult`] writes `<first index="i">`, `<last>`, `<count>` in that order and omits
//!   what is `None`, so an empty page is `<set><count>n</count></set>`.

use std::borrow::Cow;
use std::fmt;

use minidom::Element;
use xmpp_parsers::iq::IqGetPayload;
use xmpp_parsers::ns;
use xmpp_parsers::rsm::{SetQuery, SetResult};
use xso::error::Error;
use xso::text::TextCodec;
use xso::{AsXml, FromXml};

/// `<pubsub xmlns="http://jabber.org/protocol/pubsub"><items/><set/>?</pubsub>`, the body of
/// an iq get asking for items.
///
/// Any other child beside `<items/>` and the RSM `<set/>` (say a `<publish/>` as well) is a
/// parse error, so a request that asks for two things is refused rather than half-answered.
/// Use [`ItemsQuery::is_items_query`] to decide whether to parse a `<pubsub/>` with this type
/// or with [`xmpp_parsers::pubsub::PubSub`].
#[derive(FromXml, AsXml, Debug, Clone, PartialEq)]
#[xml(namespace = ns::PUBSUB, name = "pubsub", on_unknown_child = Fail)]
pub struct ItemsQuery {
    /// What to retrieve.
    #[xml(child)]
    pub items: ItemsRequest,

    /// How to page it; `None` when the client sent no `<set/>`.
    #[xml(child(default))]
    pub rsm: Option<SetQuery>,
}

impl IqGetPayload for ItemsQuery {}

impl ItemsQuery {
    /// A query for the first page of `node`, without RSM.
    pub fn new(node: impl Into<String>) -> ItemsQuery {
        ItemsQuery {
            items: ItemsRequest { node: node.into(), max_items: None, subid: None, item_ids: Vec::new() },
            rsm: None,
        }
    }

    /// Whether `elem` is a `<pubsub/>` whose request is `<items/>`: the iq get this type
    /// parses, as opposed to the other pubsub requests `PubSub::try_from` handles.
    pub fn is_items_query(elem: &Element) -> bool {
        elem.is("pubsub", ns::PUBSUB) && elem.has_child("items", ns::PUBSUB)
    }
}

/// `<items node="N" max_items="n"><item id="…"/>…</items>` inside an [`ItemsQuery`].
#[derive(FromXml, AsXml, Debug, Clone, PartialEq)]
#[xml(namespace = ns::PUBSUB, name = "items")]
pub struct ItemsRequest {
    /// The node name as the client wrote it (`FEED` or `FEED?QUERY`).
    #[xml(attribute)]
    pub node: String,

    /// `max_items`: the n most recent items. Anything but a decimal integer in `0..2^64` is a
    /// parse error naming the attribute and the value (see [`InvalidMaxItems`]); `0` parses
    /// and is left to the service to judge.
    #[xml(attribute(name = "max_items", default, codec = MaxItemsCodec))]
    pub max_items: Option<u64>,

    /// The subscription id, when the client names one (XEP-0060 §6.5.3); we have one
    /// subscription per (JID, node) so it carries no meaning for us.
    #[xml(attribute(default))]
    pub subid: Option<String>,

    /// The ids of `<item id="…"/>` children: retrieve those items only. An `<item/>` without
    /// `id` is a parse error.
    #[xml(extract(n = .., name = "item", fields(attribute(name = "id", type_ = String))))]
    pub item_ids: Vec<String>,
}

/// The error of a `max_items` that is not a non-negative decimal integer below 2^64.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidMaxItems {
    /// The offending value, cut to 32 characters.
    pub value: String,
}

impl fmt::Display for InvalidMaxItems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "max_items must be a non-negative integer, got {:?}", self.value)
    }
}

impl std::error::Error for InvalidMaxItems {}

/// The `TextCodec` of [`ItemsRequest::max_items`]: `u64` with an error that says what was
/// wrong, instead of a bare "invalid digit found in string".
struct MaxItemsCodec;

impl TextCodec<Option<u64>> for MaxItemsCodec {
    fn decode(&self, s: String) -> Result<Option<u64>, Error> {
        s.parse::<u64>()
            .map(Some)
            .map_err(|_| Error::text_parse_error(InvalidMaxItems { value: s.chars().take(32).collect() }))
    }

    fn encode<'x>(&self, value: &'x Option<u64>) -> Result<Option<Cow<'x, str>>, Error> {
        Ok(value.map(|n| Cow::Owned(n.to_string())))
    }
}

/// `<pubsub><items node="N"><item id="…">PAYLOAD</item>…</items><set/>?</pubsub>`, the body
/// of the iq result to an [`ItemsQuery`], as a client reads it. The service writes it with
/// [`crate::reply::ItemsReply`], entries as stored, without building this.
#[derive(FromXml, Debug, Clone, PartialEq)]
#[xml(namespace = ns::PUBSUB, name = "pubsub")]
pub struct ItemsResult {
    /// The page of items.
    #[xml(child)]
    pub items: ItemsPage,

    /// The RSM result: `<first index>`, `<last>` and `<count>`, or `<count>` only for an
    /// empty page. SPEC §4 always sends one, also without RSM in the query.
    #[xml(child(default))]
    pub rsm: Option<SetResult>,
}

/// `<items node="N">` of an [`ItemsResult`]: the items of one page.
#[derive(FromXml, Debug, Clone, PartialEq)]
#[xml(namespace = ns::PUBSUB, name = "items")]
pub struct ItemsPage {
    /// The node name, echoed as the client wrote it.
    #[xml(attribute)]
    pub node: String,

    /// The items, in the view's order.
    #[xml(child(n = ..))]
    pub items: Vec<PageItem>,
}

/// `<item id="…">PAYLOAD</item>` in an [`ItemsPage`].
#[derive(FromXml, Debug, Clone, PartialEq)]
#[xml(namespace = ns::PUBSUB, name = "item")]
pub struct PageItem {
    /// The item id; every item we send carries one.
    #[xml(attribute)]
    pub id: String,

    /// The payload: an Atom `<entry/>`, or a `<deleted-entry/>` for a tombstone. `None` only
    /// when parsing a result from a service that sends bare item ids.
    #[xml(element(default))]
    pub payload: Option<Element>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use xso::error::FromElementError;

    fn parse(s: &str) -> Element {
        s.parse().unwrap()
    }

    fn parse_error(s: &str) -> String {
        match ItemsQuery::try_from(parse(s)) {
            Err(FromElementError::Invalid(e)) => e.to_string(),
            other => panic!("expected an invalid-element error, got {other:?}"),
        }
    }

    #[test]
    fn query_with_rsm() {
        let xml = "<pubsub xmlns='http://jabber.org/protocol/pubsub'>\
            <items node='comments?order=modified' max_items='5'><item id='a'/><item id='b'/></items>\
            <set xmlns='http://jabber.org/protocol/rsm'><max>10</max><after>cursor:1_0_2</after>\
            <index>3</index></set></pubsub>";
        let elem = parse(xml);
        assert!(ItemsQuery::is_items_query(&elem));
        let q = ItemsQuery::try_from(elem.clone()).unwrap();
        assert_eq!(q.items.node, "comments?order=modified");
        assert_eq!(q.items.max_items, Some(5));
        assert_eq!(q.items.subid, None);
        assert_eq!(q.items.item_ids, ["a", "b"]);
        let rsm = q.rsm.clone().unwrap();
        assert_eq!(rsm.max, Some(10));
        assert_eq!(rsm.after.as_deref(), Some("cursor:1_0_2"));
        assert_eq!(rsm.before, None);
        assert_eq!(rsm.index, Some(3));
        assert_eq!(Element::from(q), elem);
    }

    #[test]
    fn query_without_rsm() {
        let elem = parse("<pubsub xmlns='http://jabber.org/protocol/pubsub'><items node='c'/></pubsub>");
        let q = ItemsQuery::try_from(elem.clone()).unwrap();
        assert_eq!(q, ItemsQuery::new("c"));
        assert_eq!(Element::from(q), elem);
    }

    #[test]
    fn empty_before_is_last_page() {
        let elem = parse(
            "<pubsub xmlns='http://jabber.org/protocol/pubsub'><items node='c'/>\
             <set xmlns='http://jabber.org/protocol/rsm'><max>2</max><before/></set></pubsub>",
        );
        let q = ItemsQuery::try_from(elem).unwrap();
        let rsm = q.rsm.clone().unwrap();
        assert_eq!(rsm.before.as_deref(), Some(""));
        assert_eq!(rsm.max, Some(2));
        // minidom tells `<before/>` from `<before></before>`, so compare round trips by value.
        assert_eq!(ItemsQuery::try_from(Element::from(q.clone())).unwrap(), q);
    }

    #[cfg(target_pointer_width = "64")]
    #[test]
    fn huge_max_parses() {
        let q = ItemsQuery::try_from(parse(
            "<pubsub xmlns='http://jabber.org/protocol/pubsub'><items node='c'/>\
             <set xmlns='http://jabber.org/protocol/rsm'><max>9223372036854775808</max></set></pubsub>",
        ))
        .unwrap();
        assert_eq!(q.rsm.unwrap().max, Some(1usize << 63));
    }

    #[test]
    fn hostile_numbers_are_errors() {
        assert_eq!(
            parse_error("<pubsub xmlns='http://jabber.org/protocol/pubsub'><items node='c' max_items='ten'/></pubsub>"),
            "text parse error: max_items must be a non-negative integer, got \"ten\""
        );
        assert!(
            parse_error("<pubsub xmlns='http://jabber.org/protocol/pubsub'><items node='c' max_items='-1'/></pubsub>")
                .contains("max_items")
        );
        assert!(
            parse_error(
                "<pubsub xmlns='http://jabber.org/protocol/pubsub'><items node='c' max_items='18446744073709551616'/></pubsub>"
            )
            .contains("max_items")
        );
        assert_eq!(
            parse_error(
                "<pubsub xmlns='http://jabber.org/protocol/pubsub'><items node='c'/>\
                 <set xmlns='http://jabber.org/protocol/rsm'><max>lots</max></set></pubsub>"
            ),
            "text parse error: invalid digit found in string"
        );
        assert_eq!(
            parse_error(
                "<pubsub xmlns='http://jabber.org/protocol/pubsub'><items node='c'/>\
                 <set xmlns='http://jabber.org/protocol/rsm'><max>18446744073709551616</max></set></pubsub>"
            ),
            "text parse error: number too large to fit in target type"
        );
        parse_error(
            "<pubsub xmlns='http://jabber.org/protocol/pubsub'><items node='c'/>\
             <set xmlns='http://jabber.org/protocol/rsm'><index>x</index></set></pubsub>",
        );
    }

    #[test]
    fn malformed_requests_are_errors() {
        // No node.
        parse_error("<pubsub xmlns='http://jabber.org/protocol/pubsub'><items/></pubsub>");
        // An item without id.
        parse_error("<pubsub xmlns='http://jabber.org/protocol/pubsub'><items node='c'><item/></items></pubsub>");
        // Two requests in one.
        let two = "<pubsub xmlns='http://jabber.org/protocol/pubsub'><items node='c'/><publish node='c'/></pubsub>";
        assert!(ItemsQuery::is_items_query(&parse(two)));
        parse_error(two);
        // Not an items query at all: a mismatch, and `is_items_query` says so first.
        let publish = parse("<pubsub xmlns='http://jabber.org/protocol/pubsub'><publish node='c'/></pubsub>");
        assert!(!ItemsQuery::is_items_query(&publish));
    }

    #[test]
    fn result_page() {
        let xml = "<pubsub xmlns='http://jabber.org/protocol/pubsub'><items node='c'>\
            <item id='i1'><entry xmlns='http://www.w3.org/2005/Atom'><id>urn:1</id></entry></item>\
            <item id='i2'><deleted-entry xmlns='http://purl.org/atompub/tombstones/1.0' ref='urn:2' when='2024-01-01T00:00:00Z'/></item>\
            </items><set xmlns='http://jabber.org/protocol/rsm'><first index='4'>cursor:1_0_1</first>\
            <last>cursor:2_0_2</last><count>427</count></set></pubsub>";
        let elem = parse(xml);
        let r = ItemsResult::try_from(elem.clone()).unwrap();
        assert_eq!(r.items.node, "c");
        assert_eq!(r.items.items.len(), 2);
        assert_eq!(r.items.items[0].id, "i1");
        assert!(r.items.items[0].payload.as_ref().unwrap().is("entry", crate::payloads::ATOM));
        let rsm = r.rsm.clone().unwrap();
        assert_eq!(rsm.first.as_ref().unwrap().index, Some(4));
        assert_eq!(rsm.first.as_ref().unwrap().item, "cursor:1_0_1");
        assert_eq!(rsm.last.as_deref(), Some("cursor:2_0_2"));
        assert_eq!(rsm.count, Some(427));
    }
}
