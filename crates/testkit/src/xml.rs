//! Small XML helpers for tests: build stanzas from literals, read and set attributes,
//! find stanza error conditions.

use minidom::rxml::{Namespace, NcName};
use minidom::{Element, Node};

/// Namespace of client stanzas: the one tests build and see (see [`xml`]).
pub const NS_CLIENT: &str = "jabber:client";
/// Namespace of stanzas on an XEP-0114 component stream.
pub const NS_COMPONENT: &str = "jabber:component:accept";
/// RFC 6120 stanza error conditions.
pub const NS_STANZAS: &str = "urn:ietf:params:xml:ns:xmpp-stanzas";
/// RFC 6120 stream-level elements (`<stream:error/>`).
pub const NS_STREAMS: &str = "http://etherx.jabber.org/streams";

/// Parses an XML literal. The root and its unprefixed descendants are in `jabber:client`
/// unless they declare another `xmlns`, so stanzas can be written as
/// `xml(r#"<iq type="get" to="feeds.localhost"><query xmlns="…"/></iq>"#)`.
/// Panics with the offending text on malformed XML.
pub fn xml(text: &str) -> Element {
    Element::from_reader_with_prefixes(text.as_bytes(), String::from(NS_CLIENT))
        .unwrap_or_else(|e| panic!("bad XML literal in test ({e}): {text}"))
}

/// Serialises an element (for assertions and panic messages).
pub fn to_xml(el: &Element) -> String {
    let mut out = Vec::new();
    el.write_to(&mut out).expect("serialising to memory cannot fail");
    String::from_utf8(out).expect("minidom writes UTF-8")
}

/// Sets (or replaces) an attribute without a namespace.
pub fn set_attr(el: &mut Element, name: &str, value: &str) {
    let name = NcName::try_from(name).unwrap_or_else(|e| panic!("bad attribute name {name:?}: {e}"));
    el.set_attr(Namespace::NONE, name, value.to_string());
}

/// Returns `el` with the attribute set: `with_attr(xml("<message/>"), "to", jid)`.
pub fn with_attr(mut el: Element, name: &str, value: &str) -> Element {
    set_attr(&mut el, name, value);
    el
}

/// Copies `el`, moving every element in namespace `from` (at any depth) to namespace `to`.
/// Used to translate stanzas between `jabber:client` and `jabber:component:accept`.
pub fn rename_ns(el: &Element, from: &str, to: &str) -> Element {
    let ns = el.ns();
    let mut builder = Element::builder(el.name(), if ns == from { to.to_string() } else { ns });
    for ((attr_ns, name), value) in el.attrs().iter() {
        builder = builder.attr_ns(attr_ns.clone(), name.clone(), value.clone());
    }
    for node in el.nodes() {
        builder = match node {
            Node::Element(child) => builder.append(rename_ns(child, from, to)),
            Node::Text(text) => builder.append(Node::Text(text.clone())),
        };
    }
    builder.build()
}

/// The `type` attribute of a stanza, or `""`.
pub fn stanza_type(el: &Element) -> &str {
    el.attr("type").unwrap_or("")
}

/// For an error stanza, the name of the RFC 6120 defined condition
/// (`item-not-found`, `bad-request`, …).
pub fn error_condition(stanza: &Element) -> Option<String> {
    let error = stanza.children().find(|c| c.name() == "error")?;
    error.children().find(|c| c.ns() == NS_STANZAS && c.name() != "text").map(|c| c.name().to_string())
}

/// For an error stanza, the application-specific condition (any child of `<error/>` outside
/// the RFC 6120 namespace), as `(namespace, name)`; e.g. `pubsub#errors` `invalid-jid`.
pub fn error_app_condition(stanza: &Element) -> Option<(String, String)> {
    let error = stanza.children().find(|c| c.name() == "error")?;
    error.children().find(|c| c.ns() != NS_STANZAS).map(|c| (c.ns(), c.name().to_string()))
}

/// Standard base64 (RFC 4648, with padding), for SASL.
pub fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Lowercase hex.
pub fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}
