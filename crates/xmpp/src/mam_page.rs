//! MAM pages of views as ready bytes (XEP-0313 on a pubsub node, as XEP-0442 names it):
//! each item of the page as the `<forwarded/>` of its pubsub event, with its result id (the
//! item's cursor, `cursor:T_O_C`, as an items page's `<first>`/`<last>` name it), then the
//! `<fin/>`. What they are depends on the request and the feed's items only, so a page is
//! kept with the feed's generation like an items page ([`crate::ready`]); the envelopes
//! that name the requester (its JID, its `queryid`) are written around it on each answer
//! ([`MamReply`]). Each item is written in its event as the items page writes it (the same
//! ready `<item/>`), so a MAM page costs what an items page does and one envelope per item.

use crate::ready::ItemXml;
use crate::stanza_parts::{Part, Parts, ToParts, XmlBuf, Xso, attr, end, head_end, start, to_xml};
use feed::paging::Page;
use feed::position::rfc3339;
use feed::ready::Weighed;
use jid::Jid;
use std::io;
use std::sync::Arc;
use xmpp_parsers::mam::Fin;
use xmpp_parsers::ns;
use xmpp_parsers::rsm::SetResult;
use xso::error::Error;
use xso::exports::rxml::xml_ncname;

/// A MAM page: each result's id and `<forwarded/>`, and the `<fin/>`.
#[derive(Debug)]
pub struct MamPage {
    results: Vec<(String, String)>,
    fin: String,
}

impl Weighed for MamPage {
    fn weight(&self) -> u32 {
        let bytes: usize = self.results.iter().map(|(id, f)| id.len() + f.len() + 32).sum();
        u32::try_from(bytes + self.fin.len()).unwrap_or(u32::MAX)
    }
}

impl MamPage {
    /// The page of `node` from `service`: `page` as read, `forms` its items as written,
    /// `set` its RSM result; `backwards` when it was asked with `<before>` alone (so it is
    /// complete when it reaches the view's start, not its end).
    pub fn new(
        service: &Jid,
        node: &str,
        page: &Page,
        forms: &[Arc<ItemXml>],
        set: SetResult,
        backwards: bool,
    ) -> io::Result<MamPage> {
        let mut results = Vec::with_capacity(forms.len());
        for (form, cursor) in forms.iter().zip(&page.cursors) {
            let item = form.xml().map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
            let stamp = rfc3339(cursor.t);
            let forwarded = Forwarded { service: service.as_str(), node, stamp: &stamp, item };
            let mut buf = XmlBuf::within(
                &[(ns::COMPONENT, xml_ncname!("message")), (ns::MAM, xml_ncname!("result"))],
                512 + item.len(),
            );
            buf.put(&forwarded)?;
            let xml =
                String::from_utf8(buf.bytes().to_vec()).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            results.push((format!("cursor:{cursor}"), xml));
        }
        let n = page.items.len() as u64;
        let complete = match (page.first_index, backwards) {
            (None, _) => true,
            (Some(first), false) => first + n >= page.count,
            (Some(first), true) => first == 0,
        };
        let fin = to_xml(&Xso(&Fin { complete, set }))?;
        Ok(MamPage { results, fin })
    }
}

/// `<forwarded><delay/><message><event><items node><item/></items></event></message></forwarded>`:
/// one item as the service's event, stamped with its time in the view.
struct Forwarded<'a> {
    service: &'a str,
    node: &'a str,
    stamp: &'a str,
    /// `<item id>…</item>` as an items page holds it (its namespace is its parent's).
    item: &'a str,
}

impl ToParts for Forwarded<'_> {
    fn parts(&self) -> Result<Parts<'_>, Error> {
        let parts = [
            start(ns::FORWARD, xml_ncname!("forwarded")),
            head_end(),
            start(ns::DELAY, xml_ncname!("delay")),
            attr(xml_ncname!("stamp"), self.stamp),
            head_end(),
            end(),
            start(ns::JABBER_CLIENT, xml_ncname!("message")),
            attr(xml_ncname!("from"), self.service),
            head_end(),
            start(ns::PUBSUB_EVENT, xml_ncname!("event")),
            head_end(),
            start(ns::PUBSUB_EVENT, xml_ncname!("items")),
            attr(xml_ncname!("node"), self.node),
            head_end(),
            Part::Verbatim(self.item),
            end(),
            end(),
            end(),
            end(),
        ];
        Ok(Box::new(parts.into_iter().map(Ok)))
    }
}

/// The answer to a MAM query: one `<message><result/></message>` per item to the
/// requester, then the iq result with the `<fin/>`, in one write, so that every result is
/// there before the result of the query (where clients stop listening).
#[derive(Debug)]
pub struct MamReply {
    pub from: Jid,
    pub to: Jid,
    pub id: String,
    pub queryid: Option<String>,
    pub page: Arc<MamPage>,
}

impl ToParts for MamReply {
    fn parts(&self) -> Result<Parts<'_>, Error> {
        let (from, to) = (self.from.as_str(), self.to.as_str());
        let mut parts = Vec::with_capacity(16 * self.page.results.len() + 8);
        for (id, forwarded) in &self.page.results {
            parts.extend([
                start(ns::COMPONENT, xml_ncname!("message")),
                attr(xml_ncname!("from"), from),
                attr(xml_ncname!("to"), to),
                head_end(),
                start(ns::MAM, xml_ncname!("result")),
            ]);
            if let Some(q) = &self.queryid {
                parts.push(attr(xml_ncname!("queryid"), q));
            }
            parts.extend([attr(xml_ncname!("id"), id), head_end(), Part::Verbatim(forwarded), end(), end()]);
        }
        parts.extend([
            start(ns::COMPONENT, xml_ncname!("iq")),
            attr(xml_ncname!("type"), "result"),
            attr(xml_ncname!("from"), from),
            attr(xml_ncname!("to"), to),
            attr(xml_ncname!("id"), &self.id),
            head_end(),
            Part::Verbatim(&self.page.fin),
            end(),
        ]);
        Ok(Box::new(parts.into_iter().map(Ok)))
    }
}
