//! Atom documents read with minidom, so that each entry is stored as the source wrote it:
//! minidom keeps every element's namespace, and an entry serialised on its own declares the
//! namespaces it uses, so the stored entry stands alone (its namespaces made
//! self-contained).
//!
//! minidom reads the XML profile of XMPP, which has no comments, processing instructions,
//! document type declarations or CDATA sections, and no text around the root; documents on
//! the web have all of them. So the document is first passed through quick-xml, which drops
//! what carries no content (comments, instructions, the declarations, blanks around the
//! root) and writes CDATA sections as the escaped text they mean ([`restricted`]).

use super::{Document, Parsed, When, complete::complete, content_key, finish, newest};
use feed::atom::{ATOM, FO, TOMBSTONES, entry_fields};
use feed::service::IncomingChange;
use minidom::Element;

/// The document, if it is an Atom feed minidom can read; `None` sends it to feed-rs. Each
/// entry is given what it lacks of an id, a title and an updated time (`now` when it has
/// no time at all), and is otherwise kept as written.
pub fn parse(bytes: &[u8], now: chrono::DateTime<chrono::Utc>) -> Option<Document> {
    let text = std::str::from_utf8(bytes).ok()?;
    let root: Element = restricted(text.trim_start_matches('\u{feff}'))?.parse().ok()?;
    if !root.is("feed", ATOM) {
        return None;
    }
    let mut parsed = Vec::new();
    let mut deleted = Vec::new();
    let mut skipped = 0;
    for child in root.children() {
        if child.is("entry", ATOM) {
            let key = key(child).unwrap_or_else(|| content_key(child));
            let mut entry = child.clone();
            // A smartfeeds source's `fo:id` and `fo:cursor` place the entry in its views,
            // not ours: the entry is kept without them (and ours are added as it is served).
            for name in ["id", "cursor"] {
                while entry.remove_child(name, FO).is_some() {}
            }
            complete(&mut entry, &key, now);
            match entry_fields(&entry) {
                Ok(entry) => parsed.push(Parsed { key, when: when(child), change: IncomingChange::Entry(entry) }),
                Err(_) => skipped += 1,
            }
        } else if child.is("deleted-entry", TOMBSTONES)
            && let Some(r) = child.attr("ref").map(str::trim).filter(|r| !r.is_empty())
        {
            deleted.push(r.to_string());
        }
    }
    Some(Document {
        newest: newest(&parsed),
        entries: finish(parsed, deleted),
        skipped,
        prev_archive: link(&root, "prev-archive"),
        next: link(&root, "next"),
        total: root.get_child("total", FO).and_then(|t| t.text().trim().parse().ok()),
        hub: link(&root, "hub"),
        self_link: link(&root, "self"),
    })
}

/// `text` in the XML profile minidom reads: the same elements, attributes and text, without
/// comments, processing instructions, declarations and blanks around the root, CDATA
/// sections written as escaped text. `None` when quick-xml finds it malformed.
fn restricted(text: &str) -> Option<String> {
    use quick_xml::events::{BytesText, Event};
    let mut reader = quick_xml::Reader::from_str(text);
    let mut writer = quick_xml::Writer::new(Vec::with_capacity(text.len()));
    let mut depth = 0usize;
    loop {
        match reader.read_event().ok()? {
            Event::Eof => break,
            Event::Comment(_) | Event::PI(_) | Event::DocType(_) | Event::Decl(_) => {}
            Event::Text(_) | Event::GeneralRef(_) if depth == 0 => {}
            Event::Start(e) => {
                depth += 1;
                writer.write_event(Event::Start(e)).ok()?;
            }
            Event::End(e) => {
                depth = depth.checked_sub(1)?;
                writer.write_event(Event::End(e)).ok()?;
            }
            Event::CData(c) => {
                let raw = c.into_inner();
                let text = std::str::from_utf8(&raw).ok()?;
                writer.write_event(Event::Text(BytesText::new(text))).ok()?;
            }
            e => writer.write_event(e).ok()?,
        }
    }
    String::from_utf8(writer.into_inner()).ok()
}

fn text_of(e: &Element) -> Option<String> {
    let t = e.text();
    let t = t.trim();
    (!t.is_empty()).then(|| t.to_string())
}

/// The entry's `atom:id`, else the href of its alternate link (else, by the caller, a
/// digest of the entry).
fn key(entry: &Element) -> Option<String> {
    entry.get_child("id", ATOM).and_then(text_of).or_else(|| {
        entry
            .children()
            .filter(|l| l.is("link", ATOM) && matches!(l.attr("rel"), None | Some("alternate")))
            .find_map(|l| l.attr("href").map(str::trim).filter(|h| !h.is_empty()).map(str::to_string))
    })
}

/// The entry's place in time: its smartfeeds `fo:cursor` (`T_O_C`: time, tie order), else
/// its `published`, else `updated`, time.
fn when(entry: &Element) -> Option<When> {
    let cursor = entry.get_child("cursor", FO).map(Element::text).and_then(|c| {
        let mut parts = c.trim().split('_');
        Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
    });
    cursor.or_else(|| {
        ["published", "updated"].iter().find_map(|name| {
            let text = entry.get_child(name, ATOM).and_then(text_of)?;
            chrono::DateTime::parse_from_rfc3339(&text).ok().map(|t| (t.timestamp_millis(), 0))
        })
    })
}

/// The href of the feed's first `link` with this `rel`.
fn link(root: &Element, rel: &str) -> Option<String> {
    root.children()
        .filter(|l| l.is("link", ATOM) && l.attr("rel") == Some(rel))
        .find_map(|l| l.attr("href").map(str::trim).filter(|h| !h.is_empty()).map(str::to_string))
}

#[cfg(test)]
mod tests {
    use super::*;
    use feed::service::Incoming;

    const DOC: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom" xmlns:at="http://purl.org/atompub/tombstones/1.0"
      xmlns:media="http://search.yahoo.com/mrss/">
  <title>Example</title>
  <link rel="self" href="https://example.com/feed.xml"/>
  <link rel="prev-archive" href="archive/3"/>
  <link rel="hub" href="https://hub.example.com/"/>
  <entry>
    <id>urn:uuid:2</id><title>Second</title>
    <updated>2024-01-02T00:00:00Z</updated>
    <author><name>Ann</name></author>
    <category term="rust"/>
    <media:thumbnail url="https://example.com/t.png"/>
    <content type="html">&lt;p&gt;two&lt;/p&gt;</content>
  </entry>
  <entry>
    <id>urn:uuid:1</id><title>First</title>
    <published>2024-01-01T00:00:00Z</published><updated>2024-01-05T00:00:00Z</updated>
  </entry>
  <entry><title>no id</title><link href="https://example.com/3"/><updated>2024-01-03T00:00:00+01:00</updated></entry>
  <entry><summary>Neither id nor link</summary><published>2024-01-04T00:00:00Z</published></entry>
  <at:deleted-entry ref="urn:uuid:0" when="2024-01-04T00:00:00Z"/>
</feed>"#;

    #[test]
    fn entries_are_kept_as_written_in_publishing_order() {
        let doc = parse(DOC.as_bytes(), chrono::Utc::now()).expect("an Atom feed");
        assert_eq!(doc.prev_archive.as_deref(), Some("archive/3"));
        assert_eq!(doc.hub.as_deref(), Some("https://hub.example.com/"));
        assert_eq!(doc.skipped, 0);
        let ids: Vec<&str> = doc.entries.iter().map(|e| e.id.as_str()).collect();
        let id = crate::item_id;
        let Incoming { change: IncomingChange::Entry(neither), .. } = &doc.entries[3] else { panic!() };
        let digest = neither.atom_id.clone().expect("an id given");
        assert!(digest.starts_with("urn:sha256:"), "{digest}");
        assert_eq!(
            ids,
            [id("urn:uuid:1"), id("urn:uuid:2"), id("https://example.com/3"), id(&digest), id("urn:uuid:0")]
        );
        // What an entry lacks is added: an id (its link, else the digest), a title (its
        // summary), an updated time (its published time).
        let Incoming { change: IncomingChange::Entry(no_id), .. } = &doc.entries[2] else { panic!() };
        assert_eq!(no_id.atom_id.as_deref(), Some("https://example.com/3"));
        let neither: Element = neither.xml.parse().unwrap();
        assert_eq!(neither.get_child("title", ATOM).unwrap().text(), "Neither id nor link");
        assert_eq!(neither.get_child("updated", ATOM).unwrap().text(), "2024-01-04T00:00:00Z");
        let Incoming { change: IncomingChange::Entry(second), .. } = &doc.entries[1] else { panic!() };
        assert_eq!(second.author.as_deref(), Some("Ann"));
        assert_eq!(second.categories, ["rust"]);
        // Self-contained: the stored entry parses alone, the foreign element with its namespace.
        let back: Element = second.xml.parse().unwrap();
        assert!(back.is("entry", ATOM));
        assert!(back.has_child("thumbnail", "http://search.yahoo.com/mrss/"), "{}", second.xml);
        assert_eq!(doc.entries[4].change, IncomingChange::Deleted);
    }

    #[test]
    fn comments_instructions_doctypes_and_cdata_are_read_as_the_content_they_carry() {
        let doc = "\u{feff}<?xml version='1.0'?>\n<!DOCTYPE feed>\n<!-- generated -->\n<?xml-stylesheet href='s.xsl'?>\n\
                   <feed xmlns='http://www.w3.org/2005/Atom'><!-- c --><entry><id>urn:x</id>\
                   <title>a &amp; b</title><content type='html'><![CDATA[<p>x & y</p>]]></content></entry></feed>\n";
        let doc = parse(doc.as_bytes(), chrono::Utc::now()).expect("an Atom feed");
        let Incoming { change: IncomingChange::Entry(e), .. } = &doc.entries[0] else { panic!() };
        let back: Element = e.xml.parse().unwrap();
        assert_eq!(back.get_child("title", ATOM).unwrap().text(), "a & b");
        assert_eq!(back.get_child("content", ATOM).unwrap().text(), "<p>x & y</p>");
    }

    #[test]
    fn a_smartfeeds_page_is_in_its_cursors_order_and_its_entries_are_kept_without_them() {
        // An oldest-first view, every entry of the same date: the cursors say the order.
        let entry = |n: u32, t: i64| {
            format!(
                "<entry><id>urn:{n}</id><title>{n}</title><updated>2024-01-01T00:00:00Z</updated>\
                 <fo:id>{n}</fo:id><fo:cursor>{t}_0_1</fo:cursor></entry>"
            )
        };
        let doc = format!(
            "<feed xmlns='http://www.w3.org/2005/Atom' xmlns:fo='{FO}'><fo:total>9</fo:total>\
             <link rel='next' href='?since=cursor%3A3_0_1'/>{}{}</feed>",
            entry(1, 2),
            entry(2, 3)
        );
        let doc = parse(doc.as_bytes(), chrono::Utc::now()).expect("an Atom feed");
        assert_eq!(
            (doc.total, doc.next.as_deref(), doc.newest),
            (Some(9), Some("?since=cursor%3A3_0_1"), Some((3, 0)))
        );
        let ids: Vec<&str> = doc.entries.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, [crate::item_id("urn:1"), crate::item_id("urn:2")]);
        let Incoming { change: IncomingChange::Entry(e), .. } = &doc.entries[0] else { panic!() };
        assert!(!e.xml.contains(FO), "{}", e.xml);
    }

    #[test]
    fn other_documents_are_not_atom() {
        assert!(parse(b"<rss version='2.0'><channel/></rss>", chrono::Utc::now()).is_none());
        assert!(parse(b"<feed><unclosed>", chrono::Utc::now()).is_none());
        assert!(parse(&[0xff, 0xfe, 0x00], chrono::Utc::now()).is_none());
    }
}

#[cfg(test)]
mod demo {
    use feed::service::IncomingChange;

    #[test]
    fn the_demo_source_reads_as_its_twelve_entries_oldest_first() {
        let doc =
            super::parse(include_bytes!("../../../../demo/comments.atom"), chrono::Utc::now()).expect("an Atom feed");
        assert_eq!(doc.entries.len(), 12);
        let titles: Vec<String> = doc
            .entries
            .iter()
            .map(|e| match &e.change {
                IncomingChange::Entry(entry) => {
                    let el: minidom::Element = entry.xml.parse().unwrap();
                    assert!(entry.author.is_some() && !entry.categories.is_empty(), "{}", entry.xml);
                    el.get_child("title", feed::atom::ATOM).unwrap().text()
                }
                IncomingChange::Deleted => panic!("no deletions in the demo"),
            })
            .collect();
        assert_eq!(titles[0], "Welcome to the comments");
    }
}
