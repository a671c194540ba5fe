//! JSON Feed 1.1 (<https://jsonfeed.org/version/1.1>), the other format feed readers speak:
//! `Accept: application/feed+json`, or `?format=json-feed` for readers that cannot set
//! headers. A page is one JSON Feed document whose `next_url` is the same next page as the
//! JSON answer's `next`; what JSON Feed has no field for (the cursor of each item, the view's
//! total, the last cursor, tombstones) travels in `_smartfeeds` extension objects, as the
//! format provides for.
//!
//! Every URL in the document keeps `format=json-feed`, so a reader that asked by parameter
//! stays in the format while it follows them.

use super::formats::{ATOM, Doc, with_items};
use crate::schemas::{JsonFeed, JsonFeedAuthor, JsonFeedExtension, JsonFeedHub, JsonFeedItem, JsonFeedItemExtension};
use feed::position::rfc3339;
use feed::{Cursor, Item, Payload};
use minidom::Element;

pub const CONTENT_TYPE: &str = "application/feed+json; charset=utf-8";
pub const VERSION: &str = "https://jsonfeed.org/version/1.1";

/// `url` with `format=json-feed` added to its query.
pub fn url(url: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}format=json-feed")
}

/// The document of a page. `links` are extra relations (RFC 5005's for archives) kept in
/// the document's `_smartfeeds` object; `next` (when the page has one) becomes `next_url`;
/// `archive`: an archived document, which never changes.
pub fn document(doc: &Doc<'_>, home: &str, links: &[(&str, &str)], archive: bool) -> String {
    let links = (!links.is_empty()).then(|| links.iter().map(|(rel, href)| (rel.to_string(), url(href))).collect());
    let envelope = JsonFeed {
        version: VERSION.into(),
        title: doc.title.into(),
        home_page_url: home.into(),
        feed_url: url(doc.url),
        next_url: doc.next.as_deref().map(url),
        hubs: vec![JsonFeedHub { kind: "WebSub".into(), url: doc.hub.into() }],
        smartfeeds: JsonFeedExtension {
            total: doc.total,
            last_cursor: doc.cursors.last().map(Cursor::to_string),
            links,
            archive: archive.then_some(true),
        },
        items: Vec::new(),
    };
    with_items(&envelope, doc.entries().map(|(r, c)| move |s: &mut String| r.json_feed.write(s, &c)))
}

/// One item: the Atom entry's fields under JSON Feed's names. An item's `id` is its Atom
/// id when it has one (what a reader de-duplicates by), else the item id.
pub fn item(item: &Item, cursor: &str) -> JsonFeedItem {
    item_of(item, crate::formats::parsed(item).as_ref(), cursor)
}

/// [`item`] with the entry already [`parsed`](crate::formats::parsed).
pub fn item_of(item: &Item, parsed: Option<&Element>, cursor: &str) -> JsonFeedItem {
    let dates = item.dates(parsed);
    let mut j = JsonFeedItem {
        id: item.atom_id.clone().unwrap_or_else(|| item.id.clone()),
        url: None,
        title: None,
        content_html: None,
        content_text: None,
        summary: None,
        date_published: rfc3339(dates.published),
        date_modified: rfc3339(dates.updated),
        authors: Vec::new(),
        tags: item.categories.clone(),
        smartfeeds: JsonFeedItemExtension { id: item.id.clone(), cursor: cursor.to_string(), deleted: None },
    };
    match (&item.payload, parsed) {
        (_, Some(e)) => entry_fields(e, &mut j),
        (Payload::Tombstone { .. }, _) => j.smartfeeds.deleted = Some(true),
        (Payload::Entry(_), None) => {}
    }
    // JSON Feed: every item has content of one kind or the other.
    if j.content_html.is_none() && j.content_text.is_none() {
        j.content_text = Some(String::new());
    }
    j
}

/// Title, content (HTML or text, as the entry types it), summary, link, authors.
fn entry_fields(e: &Element, j: &mut JsonFeedItem) {
    let child = |name: &str| e.get_child(name, ATOM);
    j.title = child("title").map(Element::text);
    match child("content").map(content) {
        Some(Content::Html(h)) => j.content_html = Some(h),
        Some(Content::Text(t)) => j.content_text = Some(t),
        None => {}
    }
    j.summary = child("summary").map(Element::text);
    j.url = e
        .children()
        .filter(|c| c.is("link", ATOM))
        .find(|l| l.attr("rel").is_none_or(|r| r == "alternate"))
        .and_then(|l| l.attr("href"))
        .map(str::to_string);
    j.authors = e
        .children()
        .filter(|c| c.is("author", ATOM))
        .filter_map(|a| a.get_child("name", ATOM))
        .map(|n| JsonFeedAuthor { name: n.text() })
        .collect();
}

/// An Atom `<content>` as JSON Feed takes it.
enum Content {
    Html(String),
    Text(String),
}

/// An Atom `<content>` as JSON Feed's `content_html` or `content_text`: `html` is escaped
/// HTML (its text is the markup), `xhtml` is a `<div>` whose children are the markup.
fn content(c: &Element) -> Content {
    match c.attr("type") {
        Some("html") => Content::Html(c.text()),
        Some("xhtml") => Content::Html(super::formats::xhtml_markup(c)),
        _ => Content::Text(c.text()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(xml: &str) -> Item {
        let item = crate::test_item("k1", Payload::Entry(xml.into()));
        Item { categories: vec!["rust".into()], atom_id: Some("urn:x:1".into()), ..item }
    }

    #[test]
    fn an_entry_becomes_a_json_feed_item() {
        let c = "1_0_7";
        let i = entry(&format!(
            r#"<entry xmlns="{ATOM}"><id>urn:x:1</id><title>T</title><content type="html">&lt;p&gt;hi&lt;/p&gt;</content><summary>S</summary><link href="http://e/1"/><author><name>ann</name></author></entry>"#
        ));
        let j = serde_json::to_value(item(&i, c)).unwrap();
        assert_eq!(j["id"], "urn:x:1");
        assert_eq!(j["title"], "T");
        assert_eq!(j["content_html"], "<p>hi</p>");
        assert_eq!(j["summary"], "S");
        assert_eq!(j["url"], "http://e/1");
        assert_eq!(j["authors"][0]["name"], "ann");
        assert_eq!(j["tags"][0], "rust");
        assert_eq!(j["_smartfeeds"]["cursor"], "1_0_7");
        assert_eq!(j["_smartfeeds"]["id"], "k1");
        let text = serde_json::to_value(item(
            &entry(&format!(r#"<entry xmlns="{ATOM}"><content>a &lt; b</content></entry>"#)),
            c,
        ))
        .unwrap();
        assert_eq!(text["content_text"], "a < b");
        let xhtml = serde_json::to_value(item(
            &entry(&format!(
                r#"<entry xmlns="{ATOM}"><content type="xhtml"><div xmlns="http://www.w3.org/1999/xhtml"><p>x</p></div></content></entry>"#
            )),
            c,
        ))
        .unwrap();
        assert!(xhtml["content_html"].as_str().unwrap().contains("<p"), "{xhtml}");
        let gone = Item { payload: Payload::Tombstone { atom_ref: "urn:x:1".into(), when: 5 }, ..entry("") };
        let g = serde_json::to_value(item(&gone, c)).unwrap();
        assert_eq!(g["_smartfeeds"]["deleted"], true);
        assert_eq!(g["content_text"], "");
    }

    #[test]
    fn a_page_keeps_its_next_link_and_the_format() {
        let c = [Cursor { t: 1, o: 0, c: 7 }];
        let items = [std::sync::Arc::new(crate::rendered::Rendered::of(&entry("<entry/>")))];
        let doc = Doc {
            url: "http://h/feeds/f/",
            next: Some("http://h/feeds/f/?since=cursor%3A1_0_7&max=50".into()),
            hub: "http://h/hub",
            title: "F",
            total: 9,
            items: &items,
            cursors: &c,
        };
        let d: serde_json::Value = serde_json::from_str(&document(&doc, "http://h/", &[], false)).unwrap();
        assert_eq!(d["version"], VERSION);
        assert_eq!(d["feed_url"], "http://h/feeds/f/?format=json-feed");
        assert_eq!(d["next_url"], "http://h/feeds/f/?since=cursor%3A1_0_7&max=50&format=json-feed");
        assert_eq!(d["hubs"][0]["url"], "http://h/hub");
        assert_eq!(d["_smartfeeds"]["total"], 9);
        assert_eq!(d["_smartfeeds"]["last_cursor"], "1_0_7");
        assert_eq!(d["items"].as_array().unwrap().len(), 1);
    }
}
