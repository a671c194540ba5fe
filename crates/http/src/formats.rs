//! What a pull answer looks like (SPEC §9): the JSON ActivityStreams Collection, the Atom
//! feed document with the `fo:` elements, and JSON-P around either. Stored entries are
//! spliced in verbatim; only `title`, `content` and the author's name are read out of them
//! for JSON, once per item version ([`crate::rendered`]): a document is its envelope and
//! the items' ready forms.

use crate::rendered::Rendered;
use crate::schemas::{AuthorJson, ItemJson, PageJson};
use feed::position::rfc3339;
use feed::{Cursor, Item, Payload};
use minidom::Element;
use serde_json::Value;
use std::sync::Arc;

pub use feed::atom::{ATOM, FO, TOMBSTONES};
pub const HISTORY: &str = "http://purl.org/syndication/history/1.0";

/// The answer formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Atom,
    /// JSON Feed 1.1 ([`crate::json_feed`]).
    JsonFeed,
}

impl Format {
    /// From `Accept`: the first of Atom, JSON Feed and JSON it names, else `default`.
    pub fn from_accept(accept: &str, default: Format) -> Format {
        [
            (accept.find("application/atom+xml"), Format::Atom),
            (accept.find("application/feed+json"), Format::JsonFeed),
            (accept.find("application/json"), Format::Json),
        ]
        .into_iter()
        .filter_map(|(at, f)| Some((at?, f)))
        .min_by_key(|(at, _)| *at)
        .map_or(default, |(_, f)| f)
    }

    /// From the `format` parameter: `json`, `atom` or `json-feed`.
    pub fn from_param(value: &str) -> Option<Format> {
        match value {
            "json" => Some(Format::Json),
            "atom" => Some(Format::Atom),
            "json-feed" => Some(Format::JsonFeed),
            _ => None,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Json => "application/json; charset=utf-8",
            Format::Atom => "application/atom+xml; charset=utf-8",
            Format::JsonFeed => crate::json_feed::CONTENT_TYPE,
        }
    }
}

pub use feed::atom::escape as esc;

/// A typed answer as JSON text (it has no map with non-string keys, so it always
/// serialises).
pub fn to_json<T: serde::Serialize>(answer: &T) -> String {
    serde_json::to_string(answer).unwrap_or_default()
}

/// The RFC 6721 tombstone of a retracted item, standing alone.
pub fn tombstone_xml(atom_ref: &str, when: i64) -> String {
    format!(r#"<deleted-entry xmlns="{TOMBSTONES}" ref="{}" when="{}"/>"#, esc(atom_ref), rfc3339(when))
}

/// One item as JSON, with `cursor` (a bare `T_O_C`) as its cursor.
pub fn item_json(item: &Item, cursor: &str) -> ItemJson {
    item_json_of(item, parsed(item).as_ref(), cursor)
}

/// The stored entry of `item` parsed (none for a tombstone, or an entry that does not parse):
/// what every form of an item is read from, parsed once per version ([`crate::rendered`]).
pub fn parsed(item: &Item) -> Option<Element> {
    match &item.payload {
        Payload::Entry(xml) => xml.parse().ok(),
        Payload::Tombstone { .. } => None,
    }
}

/// [`item_json`] with the entry already [`parsed`].
pub fn item_json_of(item: &Item, parsed: Option<&Element>, cursor: &str) -> ItemJson {
    let dates = item.dates(parsed);
    let mut j = ItemJson {
        id: item.id.clone(),
        cursor: cursor.to_string(),
        published: rfc3339(dates.published),
        updated: rfc3339(dates.updated),
        title: None,
        content: None,
        author: None,
        atom: String::new(),
        deleted: None,
    };
    match &item.payload {
        Payload::Entry(xml) => {
            if let Some(e) = parsed {
                let text = |name: &str| e.get_child(name, ATOM).map(|c| c.text());
                j.title = text("title");
                j.content = text("content");
                j.author = e
                    .get_child("author", ATOM)
                    .and_then(|a| a.get_child("name", ATOM))
                    .map(|n| AuthorJson { display_name: n.text() });
            }
            j.atom = xml.clone();
        }
        Payload::Tombstone { atom_ref, when } => {
            j.deleted = Some(true);
            j.atom = tombstone_xml(atom_ref, *when);
        }
    }
    j
}

/// A page of a view, as the parts every format needs.
pub struct Doc<'a> {
    /// The view's feed URL.
    pub url: &'a str,
    /// The next page's URL, when the page has items.
    pub next: Option<String>,
    pub hub: &'a str,
    pub title: &'a str,
    pub total: u64,
    /// The items' ready forms, in the page's order.
    pub items: &'a [Arc<Rendered>],
    pub cursors: &'a [Cursor],
}

/// `typed`'s JSON text with the ready `items` (each written by `write`) as the members of
/// its last field, an array serialised empty: the envelope keeps its one typed definition
/// (which the OpenAPI description is made from), and items are copied, not serialised.
pub fn with_items<T: serde::Serialize>(typed: &T, items: impl Iterator<Item = impl Fn(&mut String)>) -> String {
    let envelope = to_json(typed);
    let open = envelope.strip_suffix("]}").unwrap_or(&envelope);
    let mut s = String::with_capacity(open.len() + 1024);
    s.push_str(open);
    for (i, write) in items.enumerate() {
        if i > 0 {
            s.push(',');
        }
        write(&mut s);
    }
    s.push_str("]}");
    s
}

impl Doc<'_> {
    /// The items with their cursors as text.
    pub fn entries(&self) -> impl Iterator<Item = (&Arc<Rendered>, String)> {
        self.items.iter().zip(self.cursors.iter().map(Cursor::to_string))
    }

    /// The JSON document.
    pub fn json(&self) -> String {
        let envelope = PageJson {
            count: self.items.len(),
            total_items: self.total,
            url: self.url.to_string(),
            last_cursor: self.cursors.last().map(Cursor::to_string),
            next: self.next.clone(),
            items: Vec::new(),
        };
        with_items(&envelope, self.entries().map(|(r, c)| move |s: &mut String| r.json.write(s, &c)))
    }

    /// The Atom document; `extra` is written after the links (archive elements).
    pub fn atom(&self, links: &[(&str, &str)], extra: &str) -> String {
        let mut s = String::with_capacity(512 + self.items.len() * 1024);
        s.push_str(r#"<?xml version="1.0" encoding="utf-8"?>"#);
        s.push_str(&format!(r#"<feed xmlns="{ATOM}" xmlns:fo="{FO}" xmlns:at="{TOMBSTONES}" xmlns:fh="{HISTORY}">"#));
        let updated = self.items.iter().map(|i| i.modified).max().unwrap_or(0);
        s.push_str(&format!(
            "<id>{}</id><title>{}</title><updated>{}</updated>",
            esc(self.url),
            esc(self.title),
            rfc3339(updated)
        ));
        for (rel, href) in links {
            s.push_str(&format!(r#"<link rel="{rel}" type="application/atom+xml" href="{}"/>"#, esc(href)));
        }
        s.push_str(extra);
        s.push_str(&format!("<fo:total>{}</fo:total>", self.total));
        if let Some(c) = self.cursors.last() {
            s.push_str(&format!("<fo:last_cursor>{c}</fo:last_cursor>"));
        }
        for (r, c) in self.entries() {
            r.atom.write(&mut s, &c);
        }
        s.push_str("</feed>");
        s
    }
}

/// The markup inside an Atom `xhtml` construct's `<div>`, serialised as HTML: what a JSON
/// Feed's `content_html` and the page show of it.
pub fn xhtml_markup(c: &Element) -> String {
    let mut html = String::new();
    let Some(div) = c.children().next() else { return html };
    for node in div.nodes() {
        match node {
            minidom::Node::Text(t) => html.push_str(&esc(t)),
            minidom::Node::Element(e) => {
                let mut buf = Vec::new();
                if e.write_to(&mut buf).is_ok() {
                    html.push_str(&String::from_utf8_lossy(&buf));
                }
            }
        }
    }
    html
}

/// An item as a child of an Atom feed: the stored entry with `<fo:id>` and `<fo:cursor>`
/// added, or an `<at:deleted-entry>` with the same. An entry without the `<updated>` Atom
/// requires gets the one [`Item::dates`] gives it.
pub fn entry_atom(item: &Item, cursor: &str) -> String {
    entry_atom_of(item, parsed(item).as_ref(), cursor)
}

/// [`entry_atom`] with the entry already [`parsed`].
pub fn entry_atom_of(item: &Item, parsed: Option<&Element>, cursor: &str) -> String {
    let mut fo = format!("<fo:id>{}</fo:id><fo:cursor>{cursor}</fo:cursor>", esc(&item.id));
    match &item.payload {
        Payload::Entry(xml) => {
            if let Some(e) = parsed
                && e.get_child("updated", ATOM).is_none()
            {
                fo.insert_str(0, &format!("<updated>{}</updated>", rfc3339(item.dates(Some(e)).updated)));
            }
            let xml = xml.trim_end();
            if let Some(at) = xml.rfind("</") {
                format!("{}{fo}{}", &xml[..at], &xml[at..])
            } else if let Some(open) = xml.strip_suffix("/>") {
                // `<entry …/>`: an empty entry (the core keeps what was published).
                let name_end = open.find(|c: char| c.is_whitespace() || c == '>').unwrap_or(open.len());
                format!("{open}>{fo}</{}>", &open[1..name_end])
            } else {
                xml.to_string()
            }
        }
        Payload::Tombstone { atom_ref, when } => {
            format!(r#"<at:deleted-entry ref="{}" when="{}">{fo}</at:deleted-entry>"#, esc(atom_ref), rfc3339(*when))
        }
    }
}

/// `/**/NAME(DOC);` where DOC is the JSON document or the Atom document as a JSON string.
pub fn jsonp(callback: &str, doc: &str, atom: bool) -> String {
    if atom {
        format!("/**/{callback}({});", Value::String(doc.to_string()))
    } else {
        format!("/**/{callback}({doc});")
    }
}

/// Whether an `If-None-Match` value matches `etag`.
pub fn none_match(header: &str, etag: &str) -> bool {
    header.split(',').map(str::trim).any(|t| t == "*" || t == etag || t.strip_prefix("W/") == Some(etag))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(payload: Payload) -> Item {
        crate::test_item("a&b", payload)
    }

    #[test]
    fn entries_get_their_fo_elements_and_json_fields() {
        let c = "1_0_7";
        let e = item(Payload::Entry(format!(
            r#"<entry xmlns="{ATOM}"><title>T</title><content>C</content><author><name>ann</name></author></entry>"#
        )));
        let a = entry_atom(&e, c);
        assert!(a.ends_with("</updated><fo:id>a&amp;b</fo:id><fo:cursor>1_0_7</fo:cursor></entry>"), "{a}");
        let j = item_json(&e, c);
        let j = serde_json::to_value(j).unwrap();
        assert_eq!(j["title"], "T");
        assert_eq!(j["content"], "C");
        assert_eq!(j["author"]["displayName"], "ann");
        assert_eq!(j["cursor"], "1_0_7");
        assert!(j.get("deleted").is_none());
        let t = item(Payload::Tombstone { atom_ref: "urn:x".into(), when: 5 });
        assert!(entry_atom(&t, c).starts_with("<at:deleted-entry ref=\"urn:x\""));
        assert_eq!(item_json(&t, c).deleted, Some(true));
        let empty = item(Payload::Entry(format!(r#"<entry xmlns="{ATOM}"/>"#)));
        let a = entry_atom(&empty, c);
        assert!(a.ends_with("</fo:cursor></entry>"), "{a}");
        assert!(a.contains(&format!("><updated>{}</updated><fo:id>", rfc3339(empty.modified.t))), "{a}");
        let dated = format!(r#"<entry xmlns="{ATOM}"><published>2001-02-03T04:05:06Z</published></entry>"#);
        let a = entry_atom(&item(Payload::Entry(dated)), c);
        assert!(a.contains("<updated>2001-02-03T04:05:06.000Z</updated><fo:id>"), "the entry's own date: {a}");
    }

    #[test]
    fn accept_and_etags() {
        assert_eq!(Format::from_accept("application/atom+xml", Format::Json), Format::Atom);
        assert_eq!(Format::from_accept("*/*", Format::Json), Format::Json);
        assert_eq!(Format::from_accept("*/*", Format::Atom), Format::Atom);
        assert_eq!(Format::from_accept("application/json, application/atom+xml", Format::Json), Format::Json);
        assert_eq!(Format::from_accept("application/feed+json, application/json", Format::Json), Format::JsonFeed);
        assert_eq!(Format::from_param("json-feed"), Some(Format::JsonFeed));
        assert_eq!(Format::from_param("rss"), None);
        let t = "\"x\"";
        assert!(none_match(&format!("\"zz\", {t}"), t) && !none_match("\"zz\"", t));
        assert_eq!(jsonp("cb", "{}", false), "/**/cb({});");
        assert_eq!(jsonp("cb", "<a>\"</a>", true), r#"/**/cb("<a>\"</a>");"#);
    }
}
