//! Atom entries as the service handles them: a publish `<item>` is checked to hold exactly one
//! `<entry xmlns="http://www.w3.org/2005/Atom">` and the fields the core filters on are pulled
//! out ([`inspect_item`]); a retracted item's payload is an RFC 6721 tombstone
//! ([`tombstone`]); stored entries come back as elements with [`parse_stored`].
//!
//! Pure functions over minidom: no I/O, no knowledge of feeds or of the face an entry came
//! through. Both faces use them: an XMPP publish `<item>` and an HTTP `PUT` body are checked
//! by the same [`inspect_entry`].

use std::fmt;

use minidom::{Element, Node};
use xso::{AsXml, FromXml};

use crate::Entry;

/// RFC 4287 Atom.
pub const ATOM: &str = "http://www.w3.org/2005/Atom";

/// RFC 6721 Atom tombstones (`<deleted-entry/>`).
pub const TOMBSTONES: &str = "http://purl.org/atompub/tombstones/1.0";
/// smartfeeds' own elements in Atom documents (`fo:total`, `fo:cursor`, …), in the
/// namespace of the Fanout protocol they follow.
pub const FO: &str = "http://fanout.org/protocol/atom";

/// Why an item's payload is not exactly one Atom entry. The `Display` text is meant for the
/// `<text/>` of the `bad-request` + `invalid-payload` error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryError {
    /// The item has no child element.
    Empty,
    /// The item has text (other than whitespace) beside its payload.
    Text,
    /// The item has more than one child element; holds how many.
    TooMany(usize),
    /// The single child is not an Atom `<entry/>`; holds its name and namespace.
    NotAnEntry {
        /// The element's local name.
        name: String,
        /// The element's namespace.
        ns: String,
    },
    /// The entry parses but cannot be written back as XML (minidom's writer refuses, for
    /// instance, a namespace prefix declared again under another namespace).
    Unwritable,
}

impl fmt::Display for EntryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EntryError::Empty => write!(f, "the item has no payload; it must hold one <entry xmlns=\"{ATOM}\">"),
            EntryError::Text => {
                write!(f, "the item holds text beside its payload; it must hold only one <entry xmlns=\"{ATOM}\">")
            }
            EntryError::TooMany(n) => {
                write!(f, "the item holds {n} elements; it must hold exactly one <entry xmlns=\"{ATOM}\">")
            }
            EntryError::NotAnEntry { name, ns } => {
                write!(f, "the item holds <{name} xmlns=\"{ns}\">; it must hold one <entry xmlns=\"{ATOM}\">")
            }
            EntryError::Unwritable => {
                write!(f, "the entry cannot be written back as XML (a namespace prefix declared again?)")
            }
        }
    }
}

impl std::error::Error for EntryError {}

/// Checks that `nodes` (the children of a publish `<item>`) are exactly one Atom `<entry/>`,
/// whitespace text aside, and extracts what the core needs:
///
/// - `atom_id`: the text of the first `atom:id` child, trimmed; `None` when absent or blank;
/// - `author`: the first `atom:author`'s `atom:name`, trimmed; `None` when absent or blank;
/// - `categories`: the `term` of every `atom:category` child that has one, in document
///   order, each term once;
/// - `xml`: the entry serialised (its namespace declared on it, so it stands alone).
pub fn inspect_entry<'a>(nodes: impl IntoIterator<Item = &'a Node>) -> Result<Entry, EntryError> {
    let mut elements = Vec::new();
    for node in nodes {
        match node {
            Node::Element(e) => elements.push(e),
            Node::Text(t) if t.trim().is_empty() => {}
            Node::Text(_) => return Err(EntryError::Text),
        }
    }
    match elements.as_slice() {
        [] => Err(EntryError::Empty),
        [entry] => entry_fields(entry),
        more => Err(EntryError::TooMany(more.len())),
    }
}

/// [`inspect_entry`] over the children of `item`, the raw publish `<item>` element.
pub fn inspect_item(item: &Element) -> Result<Entry, EntryError> {
    inspect_entry(item.nodes())
}

/// The fields of `entry`, which must be an Atom `<entry/>` itself.
pub fn entry_fields(entry: &Element) -> Result<Entry, EntryError> {
    if !entry.is("entry", ATOM) {
        return Err(EntryError::NotAnEntry { name: entry.name().to_owned(), ns: entry.ns() });
    }
    let trimmed = |e: &Element| {
        let text = e.text();
        let text = text.trim();
        (!text.is_empty()).then(|| text.to_owned())
    };
    let atom_id = entry.get_child("id", ATOM).and_then(trimmed);
    let author = entry.get_child("author", ATOM).and_then(|a| a.get_child("name", ATOM)).and_then(trimmed);
    let mut categories: Vec<String> = Vec::new();
    for term in entry.children().filter(|c| c.is("category", ATOM)).filter_map(|c| c.attr("term")) {
        if !categories.iter().any(|t| t == term) {
            categories.push(term.to_owned());
        }
    }
    // minidom parses some documents its writer then panics on (a prefix declared again under
    // another namespace): such an entry is refused, it must not take the request down.
    let xml = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| String::from(entry)))
        .map_err(|_| EntryError::Unwritable)?;
    Ok(Entry { xml, atom_id, author, categories })
}

/// An entry's own `<published>` and `<updated>` times, Unix ms, where it has them as RFC 3339
/// times (Atom's date construct); see [`Item::dates`](crate::Item::dates) for the rule readers
/// get.
pub fn entry_times(entry: &Element) -> (Option<i64>, Option<i64>) {
    let time = |name: &str| {
        let text = entry.get_child(name, ATOM)?.text();
        chrono::DateTime::parse_from_rfc3339(text.trim()).ok().map(|t| t.timestamp_millis())
    };
    (time("published"), time("updated"))
}

/// RFC 6721 `<deleted-entry xmlns="http://purl.org/atompub/tombstones/1.0" ref="…" when="…"/>`.
#[derive(FromXml, AsXml, Debug, Clone, PartialEq, Eq)]
#[xml(namespace = TOMBSTONES, name = "deleted-entry")]
pub struct DeletedEntry {
    /// `ref`: the retracted entry's `atom:id` (or the item id when it had none).
    #[xml(attribute = "ref")]
    pub atom_ref: String,

    /// `when`: the time of the retraction, RFC 3339.
    #[xml(attribute)]
    pub when: String,
}

/// The tombstone payload for `atom_ref` retracted at `when` (an RFC 3339 string; not
/// checked here).
pub fn tombstone(atom_ref: &str, when: &str) -> Element {
    DeletedEntry { atom_ref: atom_ref.to_owned(), when: when.to_owned() }.into()
}

/// A stored entry (the `xml` of an [`Entry`]) back as an element, to put in an `<item>`.
pub fn parse_stored(xml: &str) -> Result<Element, minidom::Error> {
    xml.parse()
}

/// `s` escaped for XML text and attribute values (either quote), borrowed when nothing
/// needs escaping: minidom's escaping, for the places that write XML as text (documents,
/// multicast address lists).
pub fn escape(s: &str) -> std::borrow::Cow<'_, str> {
    match minidom::element::escape(s.as_bytes()) {
        std::borrow::Cow::Borrowed(_) => std::borrow::Cow::Borrowed(s),
        // Only ASCII characters were replaced, by ASCII: still UTF-8.
        std::borrow::Cow::Owned(v) => std::borrow::Cow::Owned(String::from_utf8(v).unwrap_or_default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_minidom_cannot_write_back_is_refused_not_a_panic() {
        // The prefix `a` declared again, under another namespace, inside the entry.
        let xml = r#"<a:entry xmlns:a="http://www.w3.org/2005/Atom"><a:id>x</a:id><a:content type="xhtml"><div xmlns="urn:x"><a:b xmlns:a="urn:other"/></div></a:content></a:entry>"#;
        let element: Element = xml.parse().expect("minidom parses it");
        assert_eq!(entry_fields(&element), Err(EntryError::Unwritable));
    }

    #[test]
    fn escaping_replaces_the_five_specials_and_borrows_otherwise() {
        assert_eq!(escape("a<b>&'\"é"), "a&lt;b&gt;&amp;&apos;&quot;é");
        assert!(matches!(escape("plain é"), std::borrow::Cow::Borrowed(_)));
    }

    fn item(xml: &str) -> Element {
        xml.parse().unwrap()
    }

    #[test]
    fn full_entry() {
        let it = item(
            "<item xmlns='http://jabber.org/protocol/pubsub' id='x'>\n  \
             <entry xmlns='http://www.w3.org/2005/Atom'>\
             <id> urn:uuid:1 </id><title>t</title>\
             <author><name>Alice</name><email>a@x</email></author>\
             <author><name>Bob</name></author>\
             <category term='news'/><category term='rust' label='Rust'/><category term='news'/><category/>\
             <content type='xhtml'><div xmlns='http://www.w3.org/1999/xhtml'>hi</div></content>\
             </entry>\n</item>",
        );
        let entry = inspect_item(&it).unwrap();
        assert_eq!(entry.atom_id.as_deref(), Some("urn:uuid:1"));
        assert_eq!(entry.author.as_deref(), Some("Alice"));
        assert_eq!(entry.categories, ["news", "rust"]);
        // The serialised entry stands alone and equals the original.
        let back = parse_stored(&entry.xml).unwrap();
        assert_eq!(&back, it.get_child("entry", ATOM).unwrap());
        assert!(entry.xml.starts_with("<entry xmlns='http://www.w3.org/2005/Atom'>"));
    }

    #[test]
    fn prefixed_entry() {
        let it = item(
            "<item xmlns='http://jabber.org/protocol/pubsub'>\
             <a:entry xmlns:a='http://www.w3.org/2005/Atom'><a:id>urn:2</a:id></a:entry></item>",
        );
        let entry = inspect_item(&it).unwrap();
        assert_eq!(entry.atom_id.as_deref(), Some("urn:2"));
        assert_eq!(entry.author, None);
        assert!(entry.categories.is_empty());
        let back = parse_stored(&entry.xml).unwrap();
        assert!(back.is("entry", ATOM));
        assert_eq!(back.get_child("id", ATOM).unwrap().text(), "urn:2");
    }

    #[test]
    fn minimal_entry() {
        let it = item(
            "<item xmlns='http://jabber.org/protocol/pubsub'><entry xmlns='http://www.w3.org/2005/Atom'>\
             <id>  </id><author><name/></author></entry></item>",
        );
        let entry = inspect_item(&it).unwrap();
        assert_eq!(entry.atom_id, None);
        assert_eq!(entry.author, None);
    }

    #[test]
    fn not_one_entry() {
        let cases = [
            ("<item xmlns='http://jabber.org/protocol/pubsub' id='x'/>", EntryError::Empty),
            ("<item xmlns='http://jabber.org/protocol/pubsub' id='x'>  \n </item>", EntryError::Empty),
            (
                "<item xmlns='http://jabber.org/protocol/pubsub'>hello<entry xmlns='http://www.w3.org/2005/Atom'/></item>",
                EntryError::Text,
            ),
            (
                "<item xmlns='http://jabber.org/protocol/pubsub'><entry xmlns='http://www.w3.org/2005/Atom'/>\
                 <entry xmlns='http://www.w3.org/2005/Atom'/></item>",
                EntryError::TooMany(2),
            ),
            (
                "<item xmlns='http://jabber.org/protocol/pubsub'><entry/></item>",
                EntryError::NotAnEntry { name: "entry".into(), ns: "http://jabber.org/protocol/pubsub".into() },
            ),
            (
                "<item xmlns='http://jabber.org/protocol/pubsub'><feed xmlns='http://www.w3.org/2005/Atom'/></item>",
                EntryError::NotAnEntry { name: "feed".into(), ns: ATOM.into() },
            ),
        ];
        for (xml, expected) in cases {
            assert_eq!(inspect_item(&item(xml)), Err(expected), "{xml}");
        }
        assert_eq!(
            EntryError::TooMany(2).to_string(),
            "the item holds 2 elements; it must hold exactly one <entry xmlns=\"http://www.w3.org/2005/Atom\">"
        );
    }

    #[test]
    fn tombstone_round_trip() {
        let elem: Element = "<deleted-entry xmlns='http://purl.org/atompub/tombstones/1.0' \
            ref='urn:uuid:1' when='2024-05-01T12:00:00.123Z'/>"
            .parse()
            .unwrap();
        let parsed = DeletedEntry::try_from(elem.clone()).unwrap();
        assert_eq!(parsed.atom_ref, "urn:uuid:1");
        assert_eq!(parsed.when, "2024-05-01T12:00:00.123Z");
        assert_eq!(tombstone("urn:uuid:1", "2024-05-01T12:00:00.123Z"), elem);
        assert_eq!(Element::from(parsed), elem);
    }

    #[test]
    fn bad_stored_xml() {
        assert!(parse_stored("<entry").is_err());
        assert!(parse_stored("").is_err());
    }
}
