//! MAM pages of views as ready bytes (XEP-0313 on a pubsub node, as XEP-0442 names it):
//! each item of the page as the `<forwarded/>` of its pubsub event, with its result id (the
//! item's cursor, `cursor:T_O_C`, as an items page's `<first>`/`<last>` name it), then the
//! `<fin/>`. What they are depends on the request and the feed's items only, so a page is
//! kept with the feed's generation like an items page ([`crate::ready_pages`]); the envelopes
//! that name the requester (its JID, its `queryid`) are written around it on each answer
//! ([`MamReply`]). Each item is written in its event as the items page writes it (the same
//! ready `<item/>`), so a MAM page costs what an items page does and one envelope per item.

use crate::ready_pages::ItemXml;
use crate::stanza_parts::{Part, Parts, ToParts, XmlBuf, Xso, attr, end, head_end, start, to_xml};
use feed::atom::escape as esc;
use feed::caches::Weighed;
use feed::paging::Page;
use feed::position::rfc3339;
use jid::Jid;
use std::io;
use std::sync::Arc;
use xmpp_parsers::mam::Fin;
use xmpp_parsers::ns;
use xmpp_parsers::rsm::SetResult;
use xso::error::Error;
use xso::exports::rxml::xml_ncname;

/// A MAM page: each result's message from its result's `id` attribute on
/// (` id="cursor:…"><forwarded>…</forwarded></result></message>`: all but the head that
/// names the requester), and the `<fin/>`.
#[derive(Debug)]
pub struct MamPage {
    tails: Vec<String>,
    fin: String,
}

impl Weighed for MamPage {
    fn weight(&self) -> u32 {
        let bytes: usize = self.tails.iter().map(|t| t.len() + 32).sum();
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
        let mut tails = Vec::with_capacity(forms.len());
        for (form, cursor) in forms.iter().zip(&page.cursors) {
            let item = form.xml().map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
            let stamp = rfc3339(cursor.t);
            let forwarded = Forwarded { service: service.as_str(), node, stamp: &stamp, item };
            let mut buf = XmlBuf::within(
                &[(ns::COMPONENT, xml_ncname!("message")), (ns::MAM, xml_ncname!("result"))],
                512 + item.len(),
            );
            buf.put(&forwarded)?;
            let xml = std::str::from_utf8(buf.bytes()).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            // A cursor is digits and underscores: nothing to escape.
            tails.push(format!(r#" id="cursor:{cursor}">{xml}</result></message>"#));
        }
        let n = page.items.len() as u64;
        let complete = match (page.first_index, backwards) {
            (None, _) => true,
            (Some(first), false) => first + n >= page.count,
            (Some(first), true) => first == 0,
        };
        let fin = to_xml(&Xso(&Fin { complete, set }))?;
        Ok(MamPage { tails, fin })
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
/// there before the result of the query (where clients stop listening). Each message is
/// one head naming the requester and the query, written once per answer, and the page's
/// kept tail: copies, not encodings.
#[derive(Debug)]
pub struct MamReply {
    from: Jid,
    to: Jid,
    id: String,
    head: String,
    page: Arc<MamPage>,
}

impl MamReply {
    /// The answer from `from` to `to` for the query iq `id` (its `queryid`, if any).
    pub fn new(from: Jid, to: Jid, id: String, queryid: Option<&str>, page: Arc<MamPage>) -> MamReply {
        let mut head =
            format!(r#"<message from="{}" to="{}"><result xmlns="{}""#, esc(from.as_str()), esc(to.as_str()), ns::MAM);
        if let Some(q) = queryid {
            head.push_str(&format!(r#" queryid="{}""#, esc(q)));
        }
        MamReply { from, to, id, head, page }
    }
}

impl ToParts for MamReply {
    fn parts(&self) -> Result<Parts<'_>, Error> {
        let messages = self.page.tails.iter().flat_map(|tail| [Part::Verbatim(&self.head), Part::Verbatim(tail)]);
        let iq = [
            start(ns::COMPONENT, xml_ncname!("iq")),
            attr(xml_ncname!("type"), "result"),
            attr(xml_ncname!("from"), self.from.as_str()),
            attr(xml_ncname!("to"), self.to.as_str()),
            attr(xml_ncname!("id"), &self.id),
            head_end(),
            Part::Verbatim(&self.page.fin),
            end(),
        ];
        Ok(Box::new(messages.chain(iq).map(Ok)))
    }
}
