//! Pages as ready bytes.
//!
//! A pull used to read its items, then write every `<item/>` of the page through the XML
//! encoder (its start tag, its escaped `id`, the stored entry, its end tag), and the page
//! around them, on every request. Now:
//!
//! - each item's `<item id='…'>ENTRY</item>`, as it is written inside `<items/>`, is made
//!   once per item version ([`feed::caches::ByVersion`], the mechanism the HTTP face keeps its
//!   forms in) and a page's body, `<pubsub>…</pubsub>`, is the concatenation of them between
//!   its `<items/>` tags and its RSM `<set/>`;
//! - that body is a function of the request (node, RSM fields, `max_items`, item ids) and
//!   of the feed's items, which change only with the feed's generation
//!   ([`feed::generations`], the HTTP face's too). So the bodies most asked for are kept
//!   here with the generation they were made at, in a cache bounded by size: a request at
//!   the same generation is answered with them without reading the store, and an answer of
//!   an older generation is never served. What a body is does not depend on who asks: the
//!   policy decides, on every request, whether the requester may have it.
//!
//! The reply is then the iq's start tag, the body and `</iq>` ([`crate::reply::ItemsReply`]):
//! byte for byte what the encoder wrote before.

use crate::mam_page::MamPage;
use crate::stanza_parts::{Part, Parts, ToParts, XmlBuf, attr, end, head_end, items, start};
use feed::atom::DeletedEntry;
use feed::caches::{ByGeneration, ByVersion, Weighed};
use feed::generations::Generations;
use feed::ports::Store;
use feed::position::rfc3339;
use feed::service::{PullRequest, Readable, Service};
use feed::{FeedError, Item, Payload};
use std::io;
use std::sync::Arc;
use xmpp_parsers::ns;
use xmpp_parsers::rsm::SetResult;
use xso::error::Error;
use xso::exports::rxml::{NcNameStr, xml_ncname};

/// Where a page's body is written: in its iq.
fn in_iq() -> [(&'static str, &'static NcNameStr); 1] {
    [(ns::COMPONENT, xml_ncname!("iq"))]
}

/// Where an item is written: in the `<items/>` of the `<pubsub/>` of its iq.
fn in_items() -> [(&'static str, &'static NcNameStr); 3] {
    [(ns::COMPONENT, xml_ncname!("iq")), (ns::PUBSUB, xml_ncname!("pubsub")), (ns::PUBSUB, xml_ncname!("items"))]
}

/// What the cache of item forms may hold, bytes.
const ITEM_BYTES: u64 = 64 << 20;
/// What the cache of page bodies may hold, bytes.
const PAGE_BYTES: u64 = 32 << 20;
/// Bodies larger than this are not kept.
const LARGEST_KEPT: u32 = 4 << 20;

/// An item as a page carries it: `<item id='ID'>ENTRY</item>` (the entry as stored, or its
/// tombstone), written as inside `<items/>`, whose namespace it shares; or why it could not
/// be written.
#[derive(Debug)]
pub struct ItemXml(Result<String, String>);

impl ItemXml {
    /// The `<item/>` as written, or why it could not be.
    pub fn xml(&self) -> Result<&str, &str> {
        self.0.as_deref().map_err(String::as_str)
    }

    /// Writes `item`.
    pub fn of(item: &Item) -> ItemXml {
        let mut buf = XmlBuf::within(&in_items(), 256 + item_len(item));
        ItemXml(buf.put(&PageItem::of(item)).map_err(|e| e.to_string()).and_then(|()| utf8(buf)))
    }
}

impl Weighed for ItemXml {
    fn weight(&self) -> u32 {
        u32::try_from(self.0.as_ref().map_or(64, |s| s.len() + 32)).unwrap_or(u32::MAX)
    }
}

fn item_len(item: &Item) -> usize {
    match &item.payload {
        Payload::Entry(xml) => xml.len() + item.id.len(),
        Payload::Tombstone { atom_ref, .. } => atom_ref.len() + item.id.len() + 128,
    }
}

fn utf8(buf: XmlBuf) -> Result<String, String> {
    String::from_utf8(buf.bytes().to_vec()).map_err(|e| e.to_string())
}

/// `<item id>`, the stored entry as it is (or the tombstone), `</item>`.
struct PageItem<'a> {
    id: &'a str,
    carried: Carried<'a>,
}

enum Carried<'a> {
    /// The entry as stored: standalone XML, its namespace declared on it.
    Stored(&'a str),
    Tombstone(DeletedEntry),
}

impl PageItem<'_> {
    fn of(item: &Item) -> PageItem<'_> {
        let carried = match &item.payload {
            Payload::Entry(xml) => Carried::Stored(xml),
            Payload::Tombstone { atom_ref, when } => {
                Carried::Tombstone(DeletedEntry { atom_ref: atom_ref.clone(), when: rfc3339(*when) })
            }
        };
        PageItem { id: &item.id, carried }
    }
}

impl ToParts for PageItem<'_> {
    fn parts(&self) -> Result<Parts<'_>, Error> {
        let head = [start(ns::PUBSUB, xml_ncname!("item")), attr(xml_ncname!("id"), self.id), head_end()];
        let payload: Parts<'_> = match &self.carried {
            Carried::Stored(xml) => Box::new([Ok(Part::Verbatim(xml))].into_iter()),
            Carried::Tombstone(t) => items(t)?,
        };
        Ok(Box::new(head.into_iter().map(Ok).chain(payload).chain([Ok(end())])))
    }
}

/// `<pubsub><items node>ITEMS</items><set/></pubsub>` (XEP-0060 §6.5 with XEP-0059), the
/// items as made by [`ItemXml`].
struct Body<'a> {
    node: &'a str,
    items: &'a [&'a str],
    set: Option<&'a SetResult>,
}

impl ToParts for Body<'_> {
    fn parts(&self) -> Result<Parts<'_>, Error> {
        let mut parts: Vec<Result<Part<'_>, Error>> = Vec::with_capacity(16 + self.items.len());
        parts.extend(
            [
                start(ns::PUBSUB, xml_ncname!("pubsub")),
                head_end(),
                start(ns::PUBSUB, xml_ncname!("items")),
                attr(xml_ncname!("node"), self.node),
                head_end(),
            ]
            .map(Ok),
        );
        parts.extend(self.items.iter().map(|i| Ok(Part::Verbatim(i))));
        parts.push(Ok(end()));
        if let Some(set) = self.set {
            parts.extend(items(set)?);
        }
        parts.push(Ok(end()));
        Ok(Box::new(parts.into_iter()))
    }
}

/// The body of an items result: `items` (each as [`ItemXml`] made it) of `node` in the
/// view's order, and the paging result `set`, as written inside a component stream's iq.
pub fn page_body(node: &str, items: &[Arc<ItemXml>], set: Option<&SetResult>) -> io::Result<String> {
    let written = items
        .iter()
        .map(|i| i.0.as_deref().map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.clone())))
        .collect::<io::Result<Vec<&str>>>()?;
    let size = written.iter().map(|i| i.len()).sum::<usize>() + node.len() + 512;
    let mut buf = XmlBuf::within(&in_iq(), size);
    buf.put(&Body { node, items: &written, set })?;
    utf8(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// The item forms and the kept page bodies; see the module docs.
pub struct Ready {
    items: ByVersion<ItemXml>,
    pages: ByGeneration<PullRequest, str>,
    /// MAM pages, kept the same way ([`crate::mam_page`]).
    mam: ByGeneration<PullRequest, MamPage>,
    generations: Arc<Generations>,
}

impl Ready {
    /// Kept by the feeds' `generations`, which the store's change sink must keep up to date.
    pub fn new(generations: Arc<Generations>) -> Ready {
        let pages = ByGeneration::new(PAGE_BYTES, LARGEST_KEPT, |k: &PullRequest| {
            u32::try_from(k.node.len()).unwrap_or(u32::MAX)
        });
        let mam = ByGeneration::new(PAGE_BYTES, LARGEST_KEPT, |k: &PullRequest| {
            u32::try_from(k.node.len()).unwrap_or(u32::MAX)
        });
        Ready { items: ByVersion::new(ITEM_BYTES), pages, mam, generations }
    }

    /// The generation of `view`'s feed.
    pub async fn generation<S: Store>(&self, svc: &Service<S>, view: &Readable) -> Result<i64, FeedError> {
        self.generations.get(svc, view).await
    }

    /// The body kept for `req` at `generation`, if any.
    pub fn kept(&self, req: &PullRequest, generation: i64) -> Option<Arc<str>> {
        self.pages.get(req, generation)
    }

    /// Keeps `body`, made for `req` at `generation` (unless a body of a later generation is
    /// kept already).
    pub fn keep(&self, req: PullRequest, generation: i64, body: Arc<str>) {
        self.pages.keep(req, generation, body);
    }

    /// The body of a page of `node` (of `feed`) holding `items`, with `set`.
    pub fn body(&self, feed: &str, node: &str, items: &[Item], set: Option<&SetResult>) -> io::Result<Arc<str>> {
        page_body(node, &self.forms(feed, items), set).map(Arc::from)
    }

    /// The `<item/>` of each of `items` (of `feed`), as pages write them.
    pub fn forms(&self, feed: &str, items: &[Item]) -> Vec<Arc<ItemXml>> {
        items.iter().map(|i| self.items.of(feed, i, ItemXml::of)).collect()
    }

    /// The MAM page kept for `req` at `generation`, if any.
    pub fn kept_mam(&self, req: &PullRequest, generation: i64) -> Option<Arc<MamPage>> {
        self.mam.get(req, generation)
    }

    /// Keeps `page`, made for `req` at `generation`.
    pub fn keep_mam(&self, req: PullRequest, generation: i64, page: Arc<MamPage>) {
        self.mam.keep(req, generation, page);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xmpp_parsers::rsm::First;

    fn item(id: &str, seq: i64, payload: Payload) -> Item {
        let mut i = Item::bare(id.into(), 1, payload);
        i.modified.seq = seq;
        i
    }

    /// The page as the link's writer encoded it before: the stream header, then the iq and
    /// every part of the page with one encoder; what follows the iq's start tag.
    fn encoded(node: &str, page: &[Item], set: Option<&SetResult>) -> Vec<u8> {
        let mut buf = XmlBuf::in_component_stream(1024);
        for p in [
            start(crate::stanza_parts::STREAM_NS, xml_ncname!("stream")),
            attr(xml_ncname!("to"), "localhost"),
            head_end(),
            start(ns::COMPONENT, xml_ncname!("iq")),
            attr(xml_ncname!("type"), "result"),
            head_end(),
        ] {
            buf.put_part(p).unwrap();
        }
        let at = buf.len();
        for p in [
            start(ns::PUBSUB, xml_ncname!("pubsub")),
            head_end(),
            start(ns::PUBSUB, xml_ncname!("items")),
            attr(xml_ncname!("node"), node),
            head_end(),
        ] {
            buf.put_part(p).unwrap();
        }
        for i in page {
            buf.put(&PageItem::of(i)).unwrap();
        }
        buf.put_part(end()).unwrap();
        if let Some(set) = set {
            buf.put(&crate::stanza_parts::Xso(set)).unwrap();
        }
        buf.put_part(end()).unwrap();
        buf.bytes()[at..].to_vec()
    }

    #[test]
    fn a_body_of_ready_items_is_what_the_encoder_writes_in_one_go() {
        let entry = "<entry xmlns='http://www.w3.org/2005/Atom'><id>urn:1</id><title>a &amp; b</title></entry>";
        let page = vec![
            item("i1", 1, Payload::Entry(entry.into())),
            item("<'\"&>\u{e9}", 2, Payload::Entry(entry.into())),
            item("i2", 3, Payload::Tombstone { atom_ref: "urn:2&<".into(), when: 1_704_067_200_000 }),
        ];
        let set = SetResult {
            first: Some(First { index: Some(4), item: "cursor:1_0_1".into() }),
            last: Some("cursor:2_0_2".into()),
            count: Some(427),
        };
        let ready = Ready::new(Generations::local());
        for set in [Some(&set), None] {
            let body = ready.body("f", "c?order=modified&x='<'", &page, set).unwrap();
            assert_eq!(body.as_bytes(), encoded("c?order=modified&x='<'", &page, set));
        }
        let tomb = ready.body("f", "c", &page[2..], None).unwrap();
        assert_eq!(
            &*tomb,
            "<pubsub xmlns='http://jabber.org/protocol/pubsub'><items node='c'><item id='i2'>\
             <deleted-entry xmlns='http://purl.org/atompub/tombstones/1.0' ref='urn:2&amp;&lt;' \
             when='2024-01-01T00:00:00.000Z'></deleted-entry></item></items></pubsub>"
        );
        let empty = ready.body("f", "c", &[], Some(&SetResult { first: None, last: None, count: Some(0) })).unwrap();
        assert_eq!(
            &*empty,
            "<pubsub xmlns='http://jabber.org/protocol/pubsub'><items node='c'></items>\
             <set xmlns='http://jabber.org/protocol/rsm'><count>0</count></set></pubsub>"
        );
    }

    #[test]
    fn a_body_is_kept_for_its_generation_only() {
        let ready = Ready::new(Generations::local());
        let req = PullRequest { node: "n".into(), max: Some(5), ..PullRequest::default() };
        ready.keep(req.clone(), 3, Arc::from("three"));
        assert_eq!(ready.kept(&req, 3).as_deref(), Some("three"));
        assert_eq!(ready.kept(&req, 4), None, "a later generation reads again");
        ready.keep(req.clone(), 5, Arc::from("five"));
        ready.keep(req.clone(), 4, Arc::from("four"));
        assert_eq!(ready.kept(&req, 5).as_deref(), Some("five"), "an older body does not replace a newer one");
        let other = PullRequest { after: Some("cursor:1".into()), ..req.clone() };
        assert_eq!(ready.kept(&other, 5), None);
    }
}
