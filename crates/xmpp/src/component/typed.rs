//! A read element typed as a stanza.
//!
//! xmpp-parsers types an element by turning it back into parser events and building the
//! payload again from them. For a `get` or `set`, nearly everything a server routes to us,
//! that rebuild of the whole payload was a tenth of the component's CPU per publish, spent on
//! the link's one task, where every request read after it waits its turn. A well-formed
//! request is typed here instead by keeping the element's own payload; the result is the
//! one xmpp-parsers gives (the tests hold the two side by side). Anything else, and any
//! request this does not take as well formed, goes to xmpp-parsers, which also words errors.

use super::stream::Header;
use jid::Jid;
use minidom::{Element, Node};
use xmpp_parsers::iq::Iq;
use xmpp_parsers::ns;
use xmpp_parsers::stanza::Stanza;
use xso::error::FromElementError;

/// `el` as a stanza (see the module doc), or why not with the header of what it was.
pub fn stanza(el: Element) -> Result<Stanza, Box<(Header, FromElementError)>> {
    let el = match request(el) {
        Ok(iq) => return Ok(Stanza::Iq(iq)),
        Err(el) => el,
    };
    let header = Header::of_element(&el);
    Stanza::try_from(el).map_err(|e| Box::new((header, e)))
}

/// A `get` or `set` iq with its first child element as payload (what xmpp-parsers keeps of
/// several), or the element back when it is not one that types without a doubt.
fn request(mut el: Element) -> Result<Iq, Element> {
    if !el.is("iq", ns::DEFAULT_NS) {
        return Err(el);
    }
    let set = match el.attr("type") {
        Some("get") => false,
        Some("set") => true,
        _ => return Err(el),
    };
    let jid = |name: &str| el.attr(name).map(Jid::new).transpose();
    let (Some(id), Ok(from), Ok(to)) = (el.attr("id").map(str::to_owned), jid("from"), jid("to")) else {
        return Err(el);
    };
    if !crate::payloads::blank_between_children(&el) || el.children().next().is_none() {
        return Err(el);
    }
    let Some(payload) = el.take_nodes().into_iter().find_map(Node::into_element) else {
        unreachable!("an element child was seen above")
    };
    Ok(match set {
        true => Iq::Set { from, to, id, payload },
        false => Iq::Get { from, to, id, payload },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Both typings of `xml` (an iq in the component namespace unless it names its own).
    fn both(xml: &str) -> (Result<Stanza, String>, Result<Stanza, String>) {
        let xml = match xml.find([' ', '>', '/']) {
            Some(at) if !xml[..xml.find('>').unwrap_or(0)].contains("xmlns=") => {
                format!("{} xmlns='jabber:component:accept'{}", &xml[..at], &xml[at..])
            }
            _ => xml.to_string(),
        };
        let el: Element = xml.parse().unwrap_or_else(|e| panic!("{xml}: {e}"));
        let ours = stanza(el.clone()).map_err(|b| b.1.to_string());
        let theirs = Stanza::try_from(el).map_err(|e| e.to_string());
        (ours, theirs)
    }

    #[test]
    fn a_request_types_as_xmpp_parsers_types_it() {
        for xml in [
            "<iq type='set' id='a' from='u@h/r' to='feeds.h' xml:lang='en'><pubsub xmlns='http://jabber.org/protocol/pubsub'><publish node='n'><item id='i'><entry xmlns='http://www.w3.org/2005/Atom'><title>t</title></entry></item></publish></pubsub></iq>",
            "<iq type='get' id='' to='feeds.h'><query xmlns='http://jabber.org/protocol/disco#info'/></iq>",
            "<iq type='set' id='a' foo='bar'><p xmlns='x'/></iq>",
            "<iq type='set' id='a'>  <p xmlns='x'/>\n</iq>",
            "<iq type='set' id='a'><p xmlns='x'/><q xmlns='x'/></iq>",
            "<iq type='set' id='a' xmlns:ps='http://jabber.org/protocol/pubsub'><ps:pubsub><ps:publish node='n'/></ps:pubsub></iq>",
            "<iq type='get' id='a'><p/></iq>",
            // Refused by both, with the same words.
            "<iq type='set' id='a'>text<p xmlns='x'/></iq>",
            "<iq type='set' id='a'></iq>",
            "<iq type='set' id='a'>  </iq>",
            "<iq type='set'><p xmlns='x'/></iq>",
            "<iq type='set' id='a' from='@@'><p xmlns='x'/></iq>",
            "<iq type='get' id='a' to=''><p xmlns='x'/></iq>",
            "<iq type='bogus' id='a'><p xmlns='x'/></iq>",
            "<iq id='a'><p xmlns='x'/></iq>",
            // Not requests: typed by xmpp-parsers alone.
            "<iq type='result' id='a'/>",
            "<iq type='error' id='a'><error type='cancel'><item-not-found xmlns='urn:ietf:params:xml:ns:xmpp-stanzas'/></error></iq>",
            "<message to='feeds.h'><body>hi</body></message>",
            "<presence/>",
            "<iq xmlns='jabber:client' type='get' id='a'><p xmlns='x'/></iq>",
            "<handshake xmlns='jabber:component:accept'/>",
        ] {
            let (ours, theirs) = both(xml);
            assert_eq!(ours, theirs, "{xml}");
        }
    }

    #[test]
    fn the_payload_is_the_element_sent_not_a_copy_rebuilt() {
        let (ours, _) = both("<iq type='set' id='a'><p xmlns='x' xmlns:y='urn:y'><y:q y:a='1'/></p></iq>");
        let Ok(Stanza::Iq(Iq::Set { payload, .. })) = ours else { panic!("{ours:?}") };
        // The sender's prefix is still there: xmpp-parsers' rebuild would name its own.
        assert_eq!(String::from(&payload), "<p xmlns='x' xmlns:y='urn:y'><y:q y:a='1'/></p>");
    }

    proptest! {
        #[test]
        fn any_iq_types_as_xmpp_parsers_types_it(
            kind in prop::sample::select(vec![None, Some("get"), Some("set"), Some("result"), Some("error"), Some("GET")]),
            id in prop::option::of("[a-z ]{0,3}"),
            from in prop::option::of(prop::sample::select(vec!["u@h/r", "h", "", "@", "a@b@c", "u@h/", "é@h"])),
            to in prop::option::of(prop::sample::select(vec!["feeds.h", "", "x/"])),
            before in prop::sample::select(vec!["", " ", "\n\t ", "x", "\u{a0}"]),
            children in 0usize..3,
            after in prop::sample::select(vec!["", "  ", "y"]),
        ) {
            let mut xml = String::from("<iq");
            for (name, v) in [("type", kind), ("id", id.as_deref()), ("from", from), ("to", to)] {
                if let Some(v) = v {
                    xml.push_str(&format!(" {name}='{v}'"));
                }
            }
            xml.push('>');
            xml.push_str(before);
            for i in 0..children {
                xml.push_str(&format!("<c{i} xmlns='urn:c'><d/></c{i}>"));
            }
            xml.push_str(after);
            xml.push_str("</iq>");
            let (ours, theirs) = both(&xml);
            prop_assert_eq!(ours, theirs, "{}", xml);
        }
    }
}
