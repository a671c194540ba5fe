//! One push to many subscribers: the push body once, with the recipients as XEP-0033 `bcc`
//! addresses, sent to the multicast service, which routes one copy per address without
//! the list.
//!
//! The address list is written as text when the batch is made (so its size is known
//! exactly and the batcher can keep a message under the server's stanza limit), and the
//! recipients are kept beside it: if the service refuses the message, each recipient's
//! push is sent on its own after all.

use feed::atom::escape;
use std::sync::Arc;

use crate::payloads::addresses::ADDRESS;
use crate::payloads::{Push, PushBody};
use crate::stanza_parts::{Part, Parts, ToParts, end, head_end, start};
use xmpp_parsers::ns;
use xso::error::Error;
use xso::exports::rxml::xml_ncname;

/// A multicast message: `body` for every one of `recipients`, through `service`.
#[derive(Debug, Clone, PartialEq)]
pub struct MulticastPush {
    /// The multicast service's JID: the message's `to`.
    pub service: String,
    /// The stanza id; an error from the service carries it back.
    pub id: String,
    /// The subscribers, in the order their addresses are written.
    pub recipients: Arc<[String]>,
    /// The push every recipient gets.
    pub body: Arc<PushBody>,
    /// `<address type='bcc' jid='…'/>` for each recipient, as written.
    addresses: String,
}

/// `<address type='bcc' jid='` and `'/>`: what each address adds around its JID.
const ADDRESS_OPEN: &str = "<address type='bcc' jid='";
const ADDRESS_CLOSE: &str = "'/>";

impl MulticastPush {
    /// The message carrying `body` to `recipients` through `service`, with stanza id `id`.
    pub fn new(service: String, id: String, recipients: Arc<[String]>, body: Arc<PushBody>) -> MulticastPush {
        let mut addresses = String::with_capacity(recipients.iter().map(|r| Self::address_len(r)).sum());
        for jid in recipients.iter() {
            addresses.push_str(ADDRESS_OPEN);
            addresses.push_str(&escape(jid));
            addresses.push_str(ADDRESS_CLOSE);
        }
        MulticastPush { service, id, recipients, body, addresses }
    }

    /// Bytes one recipient's address adds to the message (at most; exactly, for a JID
    /// without `& < > ' "`).
    pub fn address_len(jid: &str) -> usize {
        ADDRESS_OPEN.len() + escape(jid).len() + ADDRESS_CLOSE.len()
    }

    /// Bytes of the message without any address: the envelope, the body and the empty
    /// `<addresses/>` wrapper. An upper bound: attribute values are counted as if every
    /// character that may be escaped took its longest escape, and the stanza's namespace
    /// as declared on it (as a standalone message would).
    pub fn envelope_len(body: &PushBody, service: &str, id: &str) -> usize {
        let head = "<message xmlns='' from='' to='' type='headline' id=''>".len()
            + ns::DEFAULT_NS.len()
            + escape(&body.from).len()
            + escape(service).len()
            + escape(id).len();
        let addresses = "<addresses xmlns=''>".len() + ADDRESS.len() + "</addresses>".len();
        head + addresses + body.xml().len() + "</message>".len()
    }

    /// The copy the recipient at `index` gets when the service refuses this message: the
    /// same push, addressed directly, with an id derived from this message's.
    pub fn single(&self, index: usize) -> Option<Push> {
        let to = self.recipients.get(index)?.clone();
        Some(Push { to, id: format!("{}-{index}", self.id), body: self.body.clone() })
    }

    /// Every recipient's own copy, in order (see [`single`](Self::single)).
    pub fn singles(&self) -> Vec<Push> {
        (0..self.recipients.len()).filter_map(|i| self.single(i)).collect()
    }
}

impl ToParts for MulticastPush {
    fn parts(&self) -> Result<Parts<'_>, Error> {
        let addresses = [start(ADDRESS, xml_ncname!("addresses")), head_end(), Part::Verbatim(&self.addresses), end()];
        Ok(self.body.headline(&self.service, &self.id, addresses))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::multicast::test_body;
    use crate::payloads::addresses::{AddressType, Addresses};
    use crate::stanza_parts::to_xml;
    use minidom::Element;

    fn body() -> Arc<PushBody> {
        test_body("c?order=modified")
    }

    #[test]
    fn writes_the_body_once_with_bcc_addresses() {
        let recipients: Arc<[String]> = ["alice@localhost".to_string(), "o'brien&co@localhost/r".into()].into();
        let m = MulticastPush::new("multicast.localhost".into(), "mpush-1".into(), recipients, body());
        let xml = to_xml(&m).unwrap();
        let el: Element = xml.parse().unwrap();
        assert_eq!(el.name(), "message");
        assert_eq!(el.attr("from"), Some("feeds.localhost"));
        assert_eq!(el.attr("to"), Some("multicast.localhost"));
        assert_eq!(el.attr("type"), Some("headline"));
        assert_eq!(el.attr("id"), Some("mpush-1"));
        let addresses = Addresses::try_from(el.get_child("addresses", ADDRESS).unwrap().clone()).unwrap();
        assert!(addresses.addresses.iter().all(|a| a.type_ == AddressType::Bcc));
        let jids: Vec<&str> = addresses.addresses.iter().filter_map(|a| a.jid.as_deref()).collect();
        assert_eq!(jids, ["alice@localhost", "o'brien&co@localhost/r"]);
        // The body is the single push's, byte for byte.
        let single = to_xml(&m.single(0).unwrap()).unwrap();
        assert!(single.contains(m.body.xml()) && xml.contains(m.body.xml()));
        assert_eq!(el.children().filter(|c| c.name() == "event").count(), 1);
        // The size estimate is exact for the message standing alone (`'` and `&` take
        // their longest escapes, as counted); inside the stream it is an upper bound.
        let estimate = MulticastPush::envelope_len(&m.body, &m.service, &m.id)
            + m.recipients.iter().map(|r| MulticastPush::address_len(r)).sum::<usize>();
        assert_eq!(xml.len(), estimate);
    }

    #[test]
    fn singles_are_the_same_push_addressed_directly() {
        let recipients: Arc<[String]> = ["a@x".to_string(), "b@x".into()].into();
        let m = MulticastPush::new("mc".into(), "mpush-7".into(), recipients, body());
        let singles = m.singles();
        assert_eq!(singles.len(), 2);
        assert_eq!((singles[1].to.as_str(), singles[1].id.as_str()), ("b@x", "mpush-7-1"));
        assert!(Arc::ptr_eq(&singles[0].body, &m.body));
        assert_eq!(m.single(2), None);
    }
}
