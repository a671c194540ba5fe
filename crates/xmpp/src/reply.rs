//! What the router answers an iq with, as the link writes it.

use jid::Jid;
use xmpp_parsers::iq::Iq;
use xmpp_parsers::ns;
use xmpp_parsers::stanza_error::StanzaError;
use xso::error::Error;
use xso::exports::rxml::xml_ncname;

use super::mam_page::MamReply;
use super::payloads::Push;
use super::stanza_parts::{Part, Parts, ToParts, attr, end, head_end, items, start};
use std::sync::Arc;

/// An answer to an iq.
// Boxing the larger variant would add an allocation to every iq reply; a reply lives in
// the link's queue for a moment only.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Reply {
    /// Any iq reply.
    Iq(Iq),
    /// A page of items, its body ready as bytes (each stored entry in it as it is stored).
    Items(ItemsReply),
    /// A MAM page: its result messages, then the iq result.
    Mam(MamReply),
    /// A push that must follow the reply before it on the wire: the last published item
    /// after a subscription's result.
    Push(Push),
}

impl Reply {
    /// The error, if this is one.
    pub fn error(&self) -> Option<&StanzaError> {
        match self {
            Reply::Iq(Iq::Error { error, .. }) => Some(error),
            _ => None,
        }
    }

    /// As standalone XML (for tests and logs; the link writes it into its stream).
    pub fn to_xml(&self) -> String {
        super::stanza_parts::to_xml(self).unwrap_or_else(|e| format!("<!-- unwritable reply: {e} -->"))
    }
}

impl From<Iq> for Reply {
    fn from(iq: Iq) -> Reply {
        Reply::Iq(iq)
    }
}

impl ToParts for Reply {
    fn parts(&self) -> Result<Parts<'_>, Error> {
        match self {
            Reply::Iq(iq) => items(iq),
            Reply::Items(page) => page.parts(),
            Reply::Mam(mam) => mam.parts(),
            Reply::Push(push) => push.parts(),
        }
    }
}

/// `<iq type="result">BODY</iq>`: a page of items (XEP-0060 §6.5 with XEP-0059), its body
/// `<pubsub>…</pubsub>` ready as [`crate::ready_pages`] made it.
#[derive(Debug)]
pub struct ItemsReply {
    from: Jid,
    to: Jid,
    id: String,
    body: Arc<str>,
}

impl ItemsReply {
    /// The result of `id` from `from` to `to`, with `body` ([`crate::ready_pages::page_body`]).
    pub fn new(from: Jid, to: Jid, id: String, body: Arc<str>) -> ItemsReply {
        ItemsReply { from, to, id, body }
    }

    fn parts(&self) -> Result<Parts<'_>, Error> {
        let parts = [
            start(ns::DEFAULT_NS, xml_ncname!("iq")),
            attr(xml_ncname!("type"), "result"),
            attr(xml_ncname!("from"), self.from.as_str()),
            attr(xml_ncname!("to"), self.to.as_str()),
            attr(xml_ncname!("id"), &self.id),
            head_end(),
            Part::Verbatim(&self.body),
            end(),
        ];
        Ok(Box::new(parts.into_iter().map(Ok)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payloads::{ATOM, ItemsResult};
    use crate::ready_pages::{ItemXml, page_body};
    use feed::{Item, Payload};
    use minidom::Element;
    use xmpp_parsers::rsm::{First, SetResult};

    fn item(id: &str, payload: Payload) -> Item {
        Item::bare(id.into(), 1, payload)
    }

    fn body(node: &str, items: &[Item], set: Option<&SetResult>) -> Arc<str> {
        let forms: Vec<_> = items.iter().map(|i| Arc::new(ItemXml::of(i))).collect();
        page_body(node, &forms, set).unwrap().into()
    }

    #[test]
    fn a_page_is_written_with_its_entries_as_stored() {
        let entry = "<entry xmlns='http://www.w3.org/2005/Atom'><id>urn:1</id><title>a &amp; b</title></entry>";
        let items = vec![
            item("i1", Payload::Entry(entry.into())),
            item("i2", Payload::Tombstone { atom_ref: "urn:2".into(), when: 1_704_067_200_000 }),
        ];
        let set = SetResult {
            first: Some(First { index: Some(4), item: "cursor:1_0_1".into() }),
            last: Some("cursor:2_0_2".into()),
            count: Some(427),
        };
        let from: Jid = "feeds.localhost".parse().unwrap();
        let to: Jid = "a@localhost/r".parse().unwrap();
        let reply = Reply::Items(ItemsReply::new(from, to, "q1".into(), body("c?order=modified", &items, Some(&set))));
        let xml = reply.to_xml();
        assert!(xml.contains(entry), "the stored entry goes out byte for byte: {xml}");
        let expected: Element = "<iq xmlns='jabber:component:accept' type='result' from='feeds.localhost' \
            to='a@localhost/r' id='q1'><pubsub xmlns='http://jabber.org/protocol/pubsub'><items node='c?order=modified'>\
            <item id='i1'><entry xmlns='http://www.w3.org/2005/Atom'><id>urn:1</id><title>a &amp; b</title></entry></item>\
            <item id='i2'><deleted-entry xmlns='http://purl.org/atompub/tombstones/1.0' ref='urn:2' when='2024-01-01T00:00:00.000Z'/></item>\
            </items><set xmlns='http://jabber.org/protocol/rsm'><first index='4'>cursor:1_0_1</first>\
            <last>cursor:2_0_2</last><count>427</count></set></pubsub></iq>"
            .parse()
            .unwrap();
        let written: Element = xml.parse().unwrap();
        assert_eq!(written, expected);

        // A client reads it back with the result payload.
        let iq = Iq::try_from(written).unwrap();
        let Iq::Result { payload: Some(payload), .. } = iq else { panic!("a result with a payload") };
        let page = ItemsResult::try_from(payload).unwrap();
        assert_eq!(page.items.items.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(), ["i1", "i2"]);
        assert!(page.items.items[0].payload.as_ref().unwrap().is("entry", ATOM));
        assert_eq!(page.rsm.unwrap().count, Some(427));
    }

    #[test]
    fn an_empty_page_carries_the_count_only() {
        let set = SetResult { first: None, last: None, count: Some(0) };
        let reply = ItemsReply::new(
            "feeds.localhost".parse().unwrap(),
            "a@localhost".parse().unwrap(),
            "q2".into(),
            body("c", &[], Some(&set)),
        );
        let xml = Reply::Items(reply).to_xml();
        assert!(
            xml.ends_with("<items node='c'></items><set xmlns='http://jabber.org/protocol/rsm'><count>0</count></set></pubsub></iq>"),
            "{xml}"
        );
    }
}
