//! XEP-0033 Extended Stanza Addressing, which xmpp-parsers 0.23 lacks:
//! `<addresses xmlns="http://jabber.org/protocol/address"><address type="bcc" jid="…"/>…`.
//!
//! smartfeeds only ever sends `bcc` addresses: every subscriber of a view gets the same
//! push, and a `bcc` copy reaches its recipient without the list (XEP-0033 §4.6), so no
//! subscriber learns who else subscribes. The other types are parsed (ejabberd echoes the
//! whole list back in an error) but never written.

use std::borrow::Cow;

use xmpp_parsers::message::MessagePayload;
use xso::error::Error;
use xso::{AsXml, AsXmlText, FromXml, FromXmlText};

/// XEP-0033 Extended Stanza Addressing: the element's namespace, and the disco#info
/// feature of a multicast service.
pub const ADDRESS: &str = "http://jabber.org/protocol/address";

/// `<addresses/>`: the recipients of a multicast stanza.
#[derive(FromXml, AsXml, Debug, Clone, PartialEq, Default)]
#[xml(namespace = ADDRESS, name = "addresses")]
pub struct Addresses {
    /// The addresses, in document order.
    #[xml(child(n = ..))]
    pub addresses: Vec<Address>,
}

impl MessagePayload for Addresses {}

impl Addresses {
    /// `bcc` addresses for these JIDs, in order.
    pub fn bcc<I: IntoIterator<Item = S>, S: Into<String>>(jids: I) -> Addresses {
        Addresses { addresses: jids.into_iter().map(|jid| Address::bcc(jid.into())).collect() }
    }
}

/// `<address type="…" jid="…"/>` (XEP-0033 §4).
#[derive(FromXml, AsXml, Debug, Clone, PartialEq)]
#[xml(namespace = ADDRESS, name = "address")]
pub struct Address {
    /// How the recipient is addressed.
    #[xml(attribute = "type")]
    pub type_: AddressType,

    /// The recipient's JID (absent when the address is a `uri`).
    #[xml(attribute(default))]
    pub jid: Option<String>,

    /// A non-XMPP recipient, as a URI.
    #[xml(attribute(default))]
    pub uri: Option<String>,

    /// A node at `jid`.
    #[xml(attribute(default))]
    pub node: Option<String>,

    /// A human-readable description.
    #[xml(attribute(default))]
    pub desc: Option<String>,

    /// Set by a multicast service on addresses it has already delivered to.
    #[xml(attribute(default))]
    pub delivered: Option<bool>,
}

impl Address {
    /// A blind-copy recipient.
    pub fn bcc(jid: String) -> Address {
        Address { type_: AddressType::Bcc, jid: Some(jid), uri: None, node: None, desc: None, delivered: None }
    }
}

/// The `type` of an address (XEP-0033 §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressType {
    To,
    Cc,
    /// Blind copy: the recipient's copy carries no address list.
    Bcc,
    ReplyTo,
    ReplyRoom,
    NoReply,
    /// The original sender, as a multicast service records it.
    OFrom,
}

impl AddressType {
    fn as_str(self) -> &'static str {
        match self {
            AddressType::To => "to",
            AddressType::Cc => "cc",
            AddressType::Bcc => "bcc",
            AddressType::ReplyTo => "replyto",
            AddressType::ReplyRoom => "replyroom",
            AddressType::NoReply => "noreply",
            AddressType::OFrom => "ofrom",
        }
    }
}

impl FromXmlText for AddressType {
    fn from_xml_text(s: String) -> Result<Self, Error> {
        Ok(match s.as_str() {
            "to" => AddressType::To,
            "cc" => AddressType::Cc,
            "bcc" => AddressType::Bcc,
            "replyto" => AddressType::ReplyTo,
            "replyroom" => AddressType::ReplyRoom,
            "noreply" => AddressType::NoReply,
            "ofrom" => AddressType::OFrom,
            _ => return Err(Error::Other("unknown XEP-0033 address type")),
        })
    }
}

impl AsXmlText for AddressType {
    fn as_xml_text(&self) -> Result<Cow<'_, str>, Error> {
        Ok(Cow::Borrowed(self.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use minidom::Element;

    #[test]
    fn bcc_list_round_trips() {
        let elem: Element = "<addresses xmlns='http://jabber.org/protocol/address'>\
            <address type='bcc' jid='alice@example.net'/><address type='bcc' jid='bob@example.net/r'/>\
            </addresses>"
            .parse()
            .unwrap();
        let parsed = Addresses::try_from(elem.clone()).unwrap();
        assert_eq!(parsed, Addresses::bcc(["alice@example.net", "bob@example.net/r"]));
        assert_eq!(Element::from(parsed), elem);
    }

    #[test]
    fn every_type_and_attribute_parses() {
        let elem: Element = "<addresses xmlns='http://jabber.org/protocol/address'>\
            <address type='to' jid='a@x' node='n' desc='A'/><address type='cc' jid='b@x' delivered='true'/>\
            <address type='replyto' uri='mailto:c@x'/><address type='replyroom' jid='r@muc.x'/>\
            <address type='noreply'/><address type='ofrom' jid='d@x'/></addresses>"
            .parse()
            .unwrap();
        let parsed = Addresses::try_from(elem.clone()).unwrap();
        let types: Vec<AddressType> = parsed.addresses.iter().map(|a| a.type_).collect();
        use AddressType::*;
        assert_eq!(types, [To, Cc, ReplyTo, ReplyRoom, NoReply, OFrom]);
        assert_eq!(parsed.addresses[0].node.as_deref(), Some("n"));
        assert_eq!(parsed.addresses[0].desc.as_deref(), Some("A"));
        assert_eq!(parsed.addresses[1].delivered, Some(true));
        assert_eq!(parsed.addresses[2].uri.as_deref(), Some("mailto:c@x"));
        assert_eq!(parsed.addresses[4].jid, None);
        assert_eq!(Element::from(parsed), elem);
    }

    #[test]
    fn unknown_type_is_an_error() {
        let elem: Element =
            "<addresses xmlns='http://jabber.org/protocol/address'><address type='fax' jid='a@x'/></addresses>"
                .parse()
                .unwrap();
        assert!(Addresses::try_from(elem).is_err());
    }
}
