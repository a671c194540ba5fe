//! RSS 0.9x/1.0/2.0 and JSON Feed documents (and Atom documents minidom cannot read), read
//! with feed-rs, their entries written as Atom: `id`, `title`, `link`, `published`,
//! `updated`, `author/name`, `category/@term`, `summary`, `content`.

use super::{Document, ParseError, Parsed, finish};
use feed::atom::{ATOM, entry_fields};
use feed::service::IncomingChange;
use feed_rs::model::{self, Text};
use minidom::Element;

/// Reads the document with feed-rs. An entry without an id takes its first link as key
/// (feed-rs would otherwise make one up that changes from fetch to fetch).
pub fn parse(bytes: &[u8]) -> Result<Document, ParseError> {
    let parser = feed_rs::parser::Builder::new()
        .id_generator(|links, _, _| links.first().map(|l| l.href.trim().to_string()).unwrap_or_default())
        .build();
    let feed = parser.parse(bytes).map_err(|e| ParseError::NotAFeed(e.to_string()))?;
    let mut parsed = Vec::new();
    let mut skipped = 0;
    for e in &feed.entries {
        let key = e.id.trim();
        if key.is_empty() {
            skipped += 1;
            continue;
        }
        match entry_fields(&as_atom(key, e)) {
            Ok(entry) => parsed.push(Parsed {
                key: key.to_string(),
                when: e.published.or(e.updated).map(|t| t.timestamp_millis()),
                change: IncomingChange::Entry(entry),
            }),
            Err(_) => skipped += 1,
        }
    }
    let link = |rel: &str| feed.links.iter().find(|l| l.rel.as_deref() == Some(rel)).map(|l| l.href.clone());
    Ok(Document {
        entries: finish(parsed, Vec::new()),
        skipped,
        prev_archive: link("prev-archive"),
        hub: link("hub"),
        self_link: link("self"),
    })
}

/// An attribute name (all of them are written here, and valid).
fn attr_name(n: &'static str) -> rxml::NcName {
    n.try_into().unwrap_or_else(|_| unreachable!("{n} is a name"))
}

fn leaf(name: &str, text: &str) -> Element {
    Element::builder(name, ATOM).append(text).build()
}

/// A text construct: `type="html"` when feed-rs says the text is HTML.
fn text(name: &str, t: &Text) -> Element {
    let kind = if t.content_type.to_string().contains("html") { "html" } else { "text" };
    Element::builder(name, ATOM).attr(attr_name("type"), kind).append(t.content.as_str()).build()
}

/// One feed-rs entry as an Atom entry.
fn as_atom(key: &str, e: &model::Entry) -> Element {
    let mut entry = Element::builder("entry", ATOM).append(leaf("id", key)).build();
    if let Some(t) = &e.title {
        entry.append_child(text("title", t));
    }
    if let Some(l) = e.links.iter().find(|l| matches!(l.rel.as_deref(), None | Some("alternate"))) {
        entry.append_child(
            Element::builder("link", ATOM)
                .attr(attr_name("rel"), "alternate")
                .attr(attr_name("href"), l.href.as_str())
                .build(),
        );
    }
    if let Some(t) = e.published {
        entry.append_child(leaf("published", &t.to_rfc3339()));
    }
    if let Some(t) = e.updated.or(e.published) {
        entry.append_child(leaf("updated", &t.to_rfc3339()));
    }
    for a in e.authors.iter().filter(|a| !a.name.trim().is_empty()) {
        entry.append_child(Element::builder("author", ATOM).append(leaf("name", a.name.trim())).build());
    }
    for c in e.categories.iter().filter(|c| !c.term.trim().is_empty()) {
        entry.append_child(Element::builder("category", ATOM).attr(attr_name("term"), c.term.trim()).build());
    }
    if let Some(s) = &e.summary {
        entry.append_child(text("summary", s));
    }
    if let Some(body) = e.content.as_ref().and_then(|c| c.body.as_deref()) {
        let kind = e
            .content
            .as_ref()
            .map_or("html", |c| if c.content_type.to_string().starts_with("text/plain") { "text" } else { "html" });
        entry.append_child(Element::builder("content", ATOM).attr(attr_name("type"), kind).append(body).build());
    }
    entry
}

#[cfg(test)]
mod tests {
    use super::*;
    use feed::service::Incoming;

    fn entry(doc: &Document, n: usize) -> (&str, &feed::Entry) {
        match &doc.entries[n] {
            Incoming { id, change: IncomingChange::Entry(e) } => (id, e),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn rss_items_become_atom_entries_oldest_first() {
        let rss = r#"<?xml version="1.0"?>
<rss version="2.0"><channel><title>R</title><link>https://example.com/</link>
<item><title>Two</title><guid>g2</guid><link>https://example.com/2</link>
  <pubDate>Tue, 02 Jan 2024 10:00:00 GMT</pubDate><author>bob@example.com (Bob)</author>
  <category>news</category><description>&lt;b&gt;two&lt;/b&gt;</description></item>
<item><title>One</title><link>https://example.com/1</link><pubDate>Mon, 01 Jan 2024 10:00:00 GMT</pubDate></item>
<item><title>Nothing to key on</title></item>
</channel></rss>"#;
        let doc = parse(rss.as_bytes()).unwrap();
        assert_eq!(doc.entries.len(), 2, "{doc:?}");
        let (id, one) = entry(&doc, 0);
        assert_eq!(id, crate::item_id("https://example.com/1"));
        assert!(
            one.xml.contains("<title type=\"text\">One</title>") || one.xml.contains("<title type='text'>One</title>"),
            "{}",
            one.xml
        );
        let (id, two) = entry(&doc, 1);
        assert_eq!(id, crate::item_id("g2"));
        assert_eq!(two.atom_id.as_deref(), Some("g2"));
        assert_eq!(two.categories, ["news"]);
        assert!(two.author.is_some());
        let back: Element = two.xml.parse().unwrap();
        assert!(back.is("entry", ATOM));
        assert!(back.get_child("published", ATOM).unwrap().text().starts_with("2024-01-02T10:00:00"));
    }

    #[test]
    fn json_feed_items_become_atom_entries() {
        let json = r#"{"version":"https://jsonfeed.org/version/1.1","title":"J","items":[
          {"id":"j2","title":"Later","content_html":"<p>x</p>","date_published":"2024-02-02T00:00:00Z",
           "authors":[{"name":"Cy"}],"tags":["a","b"]},
          {"id":"j1","title":"Earlier","content_text":"y","date_published":"2024-02-01T00:00:00Z"}]}"#;
        let doc = parse(json.as_bytes()).unwrap();
        let (id, first) = entry(&doc, 0);
        assert_eq!(id, crate::item_id("j1"));
        assert!(first.xml.contains("Earlier"));
        let (_, later) = entry(&doc, 1);
        assert_eq!(later.author.as_deref(), Some("Cy"));
        assert_eq!(later.categories, ["a", "b"]);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bad in [
            &b""[..],
            b"hello",
            b"<html><body/></html>",
            b"{\"a\":",
            b"<rss version='2.0'><channel>",
            b"<feed xmlns='http://www.w3.org/2005/Atom'><entry>",
        ] {
            assert!(super::super::parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
