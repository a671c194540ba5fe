//! Stanzas as the link writes them: xso's XML items, with XML we already hold as text
//! spliced in as it is.
//!
//! Entries are stored as the XML text they were published as (serialised by minidom, with
//! their namespace declared on the entry itself, so each stands alone). Parsing them back
//! into trees only to encode the trees again was most of the CPU a page of 50 items cost,
//! and a push encoded its shared event once more for each of its thousands of copies. So a
//! page writes its entries as stored ([`Part::Verbatim`]), and a push body is encoded once
//! per change and copied.

use std::borrow::Cow;
use std::io;

use rxml::writer::{Encoder, SimpleNamespaces, TrackNamespace};
use rxml::{Namespace, NcNameStr, XmlVersion};
use xmpp_parsers::component::Handshake;
use xmpp_parsers::stanza::Stanza;
use xso::{AsXml, error::Error};

/// The namespace of a stream's own elements (`stream:stream`, `stream:error`).
pub const STREAM_NS: &str = "http://etherx.jabber.org/streams";

/// A piece of a stanza.
#[derive(Debug)]
pub enum Part<'x> {
    /// An XML item (start tag, attribute, text, end tag), encoded and escaped as usual.
    Item(xso::Item<'x>),
    /// Text that already is XML: complete elements, each declaring its own namespace,
    /// written as it is. Only for XML we produced ourselves (a stored entry, an encoded
    /// body), and only where an element may start.
    Verbatim(&'x str),
}

/// The parts of a stanza, in order.
pub type Parts<'x> = Box<dyn Iterator<Item = Result<Part<'x>, Error>> + 'x>;

/// What the link can write.
pub trait ToParts {
    fn parts(&self) -> Result<Parts<'_>, Error>;
}

/// The parts of anything xso writes: its items.
pub fn items<T: AsXml + ?Sized>(x: &T) -> Result<Parts<'_>, Error> {
    Ok(Box::new(x.as_xml_iter()?.map(|item| item.map(Part::Item))))
}

/// Any xso type, written as its items.
pub struct Xso<'a, T: AsXml + ?Sized>(pub &'a T);

impl<T: AsXml + ?Sized> ToParts for Xso<'_, T> {
    fn parts(&self) -> Result<Parts<'_>, Error> {
        items(self.0)
    }
}

impl ToParts for Stanza {
    fn parts(&self) -> Result<Parts<'_>, Error> {
        items(self)
    }
}

impl ToParts for Handshake {
    fn parts(&self) -> Result<Parts<'_>, Error> {
        items(self)
    }
}

/// Parts encoded into bytes.
pub struct XmlBuf {
    encoder: Encoder<SimpleNamespaces>,
    bytes: Vec<u8>,
}

impl Default for XmlBuf {
    fn default() -> Self {
        XmlBuf { encoder: Encoder::new(), bytes: Vec::new() }
    }
}

impl XmlBuf {
    /// For a stream whose header declares these namespaces (prefix, or `None` for the
    /// default, and URI): elements inside then need no declarations of their own.
    pub fn in_stream(declared: &[(Option<&'static NcNameStr>, &'static str)], capacity: usize) -> XmlBuf {
        let mut encoder = Encoder::new();
        for (prefix, uri) in declared {
            encoder.ns_tracker_mut().declare_fixed(*prefix, (*uri).into());
        }
        XmlBuf { encoder, bytes: Vec::with_capacity(capacity) }
    }

    /// For a component stream (XEP-0114): its header declares the `stream` prefix and the
    /// default namespace `jabber:component:accept`, so stanzas carry no xmlns of their own.
    /// The header itself must be the first thing encoded (it carries the declarations).
    pub fn in_component_stream(capacity: usize) -> XmlBuf {
        let declared =
            [(Some(xso::exports::rxml::xml_ncname!("stream")), STREAM_NS), (None, xmpp_parsers::ns::COMPONENT)];
        XmlBuf::in_stream(&declared, capacity)
    }

    /// For XML written inside a component stream's stanza, in the elements `open` (namespace
    /// and name of each, outermost first, the stanza included): the stream's header and
    /// their start tags are encoded, then dropped, so what is encoded next is written
    /// exactly as inside them (namespaces declared only where they change).
    pub fn within(open: &[(&'static str, &'static NcNameStr)], capacity: usize) -> XmlBuf {
        let mut buf = XmlBuf::in_component_stream(capacity);
        let header = [start(STREAM_NS, xso::exports::rxml::xml_ncname!("stream")), head_end()];
        let opened = open.iter().flat_map(|&(ns, name)| [start(ns, name), head_end()]);
        for part in header.into_iter().chain(opened) {
            // Start tags of known names in known namespaces always encode.
            buf.put_part(part).expect("a start tag encodes");
        }
        buf.bytes.clear();
        buf
    }

    /// Encodes `x` at the end. On error nothing of it stays.
    pub fn put<T: ToParts + ?Sized>(&mut self, x: &T) -> io::Result<()> {
        let before = self.bytes.len();
        let result = x
            .parts()
            .map_err(invalid)
            .and_then(|parts| parts.into_iter().try_for_each(|p| self.put_part(p.map_err(invalid)?)));
        if result.is_err() {
            self.bytes.truncate(before);
        }
        result
    }

    /// Encodes one part.
    pub fn put_part(&mut self, part: Part<'_>) -> io::Result<()> {
        match part {
            Part::Item(item) => self.encoder.encode(item.as_rxml_item(), &mut self.bytes).map_err(invalid),
            Part::Verbatim(text) => {
                self.bytes.extend_from_slice(text.as_bytes());
                Ok(())
            }
        }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn clear(&mut self) {
        self.bytes.clear();
    }
}

/// An encoding error, as the writer's I/O error.
fn invalid(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, e.to_string())
}

/// `x` as standalone XML: every namespace declared where it is first used.
pub fn to_xml<T: ToParts + ?Sized>(x: &T) -> Result<String, io::Error> {
    let mut buf = XmlBuf::default();
    buf.put(x)?;
    String::from_utf8(buf.bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// `<name xmlns=ns` (the namespace is declared only where it changes).
pub fn start<'x>(ns: &'x str, name: &'static NcNameStr) -> Part<'x> {
    Part::Item(xso::Item::ElementHeadStart(Namespace::from_str(ns), Cow::Borrowed(name)))
}

/// ` name='value'` (escaped).
pub fn attr<'x>(name: &'static NcNameStr, value: &'x str) -> Part<'x> {
    Part::Item(xso::Item::Attribute(Namespace::NONE, Cow::Borrowed(name), Cow::Borrowed(value)))
}

/// The `>` that ends a start tag.
pub fn head_end() -> Part<'static> {
    Part::Item(xso::Item::ElementHeadEnd)
}

/// The end tag of the innermost open element.
pub fn end() -> Part<'static> {
    Part::Item(xso::Item::ElementFoot)
}

/// The XML declaration that starts a stream.
pub fn declaration() -> Part<'static> {
    Part::Item(xso::Item::XmlDeclaration(XmlVersion::V1_0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use xmpp_parsers::iq::Iq;
    use xso::exports::rxml::xml_ncname;

    /// `<x xmlns='urn:x'>` + the verbatim text + `</x>`.
    struct Wrapped(&'static str);

    impl ToParts for Wrapped {
        fn parts(&self) -> Result<Parts<'_>, Error> {
            let parts = vec![
                start("urn:x", xml_ncname!("x")),
                attr(xml_ncname!("a"), "<'&"),
                head_end(),
                Part::Verbatim(self.0),
                end(),
            ];
            Ok(Box::new(parts.into_iter().map(Ok)))
        }
    }

    #[test]
    fn verbatim_text_goes_in_as_it_is_and_items_are_escaped() {
        let xml = to_xml(&Wrapped("<entry xmlns='urn:e'><t>a &amp; b</t></entry>")).unwrap();
        assert_eq!(xml, "<x xmlns='urn:x' a='&lt;&#39;&amp;'><entry xmlns='urn:e'><t>a &amp; b</t></entry></x>");
        let el: minidom::Element = xml.parse().unwrap();
        assert_eq!(el.get_child("entry", "urn:e").unwrap().get_child("t", "urn:e").unwrap().text(), "a & b");
    }

    #[test]
    fn standalone_xml_declares_the_stanza_namespace() {
        let iq = Iq::Result { from: None, to: None, id: "r1".into(), payload: None };
        assert_eq!(
            to_xml(&Stanza::from(iq)).unwrap(),
            "<iq xmlns='jabber:component:accept' type='result' id='r1'></iq>"
        );
    }
}
