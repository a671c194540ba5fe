//! JSON Feed 1.1 (<https://jsonfeed.org/version/1.1>), the other format feed readers speak:
//! `Accept: application/feed+json`, or `?format=json-feed` for readers that cannot set
//! headers. A page is one JSON Feed document whose `next_url` is the same next page as the
//! JSON answer's `next`; what JSON Feed has no field for (the cursor of each item, the view's
//! total, the last cursor, tombstones) travels in `_smartfeeds` extension objects, as the
//! format provides for.
//!
//! Every URL in the document keeps `format=json-feed`, so a reader that asked by parameter
//! stays in the format while it follows them.

use super::formats::{ATOM, Doc};
use feed::position::rfc3339;
use feed::{Cursor, Item, Payload};
use minidom::Element;
use serde_json::{Map, Value, json};

pub const CONTENT_TYPE: &str = "application/feed+json; charset=utf-8";
pub const VERSION: &str = "https://jsonfeed.org/version/1.1";

/// `url` with `format=json-feed` added to its query.
pub fn url(url: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}format=json-feed")
}

/// The document of a page. `links` are extra relations (RFC 5005's for archives) kept in
/// the document's `_smartfeeds` object; `next` (when the page has one) becomes `next_url`.
pub fn document(doc: &Doc<'_>, home: &str, links: &[(&str, &str)]) -> Value {
    let items: Vec<Value> = doc.items.iter().zip(doc.cursors).map(|(i, c)| item(i, c)).collect();
    let mut ext = Map::new();
    ext.insert("total".into(), json!(doc.total));
    if let Some(c) = doc.cursors.last() {
        ext.insert("last_cursor".into(), json!(c.to_string()));
    }
    if !links.is_empty() {
        let links: Map<String, Value> = links.iter().map(|(rel, href)| (rel.to_string(), json!(url(href)))).collect();
        ext.insert("links".into(), Value::Object(links));
    }
    let mut o = Map::new();
    o.insert("version".into(), json!(VERSION));
    o.insert("title".into(), json!(doc.title));
    o.insert("home_page_url".into(), json!(home));
    o.insert("feed_url".into(), json!(url(doc.url)));
    if let Some(n) = &doc.next {
        o.insert("next_url".into(), json!(url(n)));
    }
    o.insert("hubs".into(), json!([{ "type": "WebSub", "url": doc.hub }]));
    o.insert("_smartfeeds".into(), Value::Object(ext));
    o.insert("items".into(), Value::Array(items));
    Value::Object(o)
}

/// One item: the Atom entry's fields under JSON Feed's names. An item's `id` is its Atom
/// id when it has one (what a reader de-duplicates by), else the item id.
pub fn item(item: &Item, cursor: &Cursor) -> Value {
    let mut o = Map::new();
    o.insert("id".into(), json!(item.atom_id.clone().unwrap_or_else(|| item.id.clone())));
    o.insert("date_published".into(), json!(rfc3339(item.created.t)));
    o.insert("date_modified".into(), json!(rfc3339(item.modified.t)));
    let mut ext = Map::new();
    ext.insert("id".into(), json!(item.id));
    ext.insert("cursor".into(), json!(cursor.to_string()));
    match &item.payload {
        Payload::Entry(xml) => match xml.parse::<Element>() {
            Ok(e) => entry_fields(&e, &mut o),
            Err(_) => {
                o.insert("content_text".into(), json!(""));
            }
        },
        Payload::Tombstone { .. } => {
            ext.insert("deleted".into(), json!(true));
            o.insert("content_text".into(), json!(""));
        }
    }
    if !item.categories.is_empty() {
        o.insert("tags".into(), json!(item.categories));
    }
    o.insert("_smartfeeds".into(), Value::Object(ext));
    Value::Object(o)
}

/// Title, content (HTML or text, as the entry types it), summary, link, authors.
fn entry_fields(e: &Element, o: &mut Map<String, Value>) {
    let child = |name: &str| e.get_child(name, ATOM);
    if let Some(t) = child("title") {
        o.insert("title".into(), json!(t.text()));
    }
    match child("content") {
        Some(c) => {
            let (key, value) = content(c);
            o.insert(key.into(), json!(value));
        }
        None => {
            o.insert("content_text".into(), json!(""));
        }
    }
    if let Some(s) = child("summary") {
        o.insert("summary".into(), json!(s.text()));
    }
    let alternate = e
        .children()
        .filter(|c| c.is("link", ATOM))
        .find(|l| l.attr("rel").is_none_or(|r| r == "alternate"))
        .and_then(|l| l.attr("href"));
    if let Some(href) = alternate {
        o.insert("url".into(), json!(href));
    }
    let authors: Vec<Value> = e
        .children()
        .filter(|c| c.is("author", ATOM))
        .filter_map(|a| a.get_child("name", ATOM))
        .map(|n| json!({ "name": n.text() }))
        .collect();
    if !authors.is_empty() {
        o.insert("authors".into(), Value::Array(authors));
    }
}

/// An Atom `<content>` as JSON Feed's `content_html` or `content_text`: `html` is escaped
/// HTML (its text is the markup), `xhtml` is a `<div>` whose children are the markup.
fn content(c: &Element) -> (&'static str, String) {
    match c.attr("type") {
        Some("html") => ("content_html", c.text()),
        Some("xhtml") => {
            let div = c.children().next();
            let mut html = String::new();
            for node in div.map(|d| d.nodes().collect::<Vec<_>>()).unwrap_or_default() {
                match node {
                    minidom::Node::Text(t) => html.push_str(&super::formats::esc(t)),
                    minidom::Node::Element(e) => {
                        let mut buf = Vec::new();
                        if e.write_to(&mut buf).is_ok() {
                            html.push_str(&String::from_utf8_lossy(&buf));
                        }
                    }
                }
            }
            ("content_html", html)
        }
        _ => ("content_text", c.text()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use feed::Key;

    fn entry(xml: &str) -> Item {
        Item {
            id: "k1".into(),
            created: Key { t: 1_700_000_000_000, seq: 1 },
            modified: Key { t: 1_700_000_000_500, seq: 2 },
            author: None,
            categories: vec!["rust".into()],
            atom_id: Some("urn:x:1".into()),
            payload: Payload::Entry(xml.into()),
        }
    }

    #[test]
    fn an_entry_becomes_a_json_feed_item() {
        let c = Cursor { t: 1, o: 0, c: 7 };
        let i = entry(&format!(
            r#"<entry xmlns="{ATOM}"><id>urn:x:1</id><title>T</title><content type="html">&lt;p&gt;hi&lt;/p&gt;</content><summary>S</summary><link href="http://e/1"/><author><name>ann</name></author></entry>"#
        ));
        let j = item(&i, &c);
        assert_eq!(j["id"], "urn:x:1");
        assert_eq!(j["title"], "T");
        assert_eq!(j["content_html"], "<p>hi</p>");
        assert_eq!(j["summary"], "S");
        assert_eq!(j["url"], "http://e/1");
        assert_eq!(j["authors"][0]["name"], "ann");
        assert_eq!(j["tags"][0], "rust");
        assert_eq!(j["_smartfeeds"]["cursor"], "1_0_7");
        assert_eq!(j["_smartfeeds"]["id"], "k1");
        let text = item(&entry(&format!(r#"<entry xmlns="{ATOM}"><content>a &lt; b</content></entry>"#)), &c);
        assert_eq!(text["content_text"], "a < b");
        let xhtml = item(
            &entry(&format!(
                r#"<entry xmlns="{ATOM}"><content type="xhtml"><div xmlns="http://www.w3.org/1999/xhtml"><p>x</p></div></content></entry>"#
            )),
            &c,
        );
        assert!(xhtml["content_html"].as_str().unwrap().contains("<p"), "{xhtml}");
        let gone = Item { payload: Payload::Tombstone { atom_ref: "urn:x:1".into(), when: 5 }, ..entry("") };
        let g = item(&gone, &c);
        assert_eq!(g["_smartfeeds"]["deleted"], true);
        assert_eq!(g["content_text"], "");
    }

    #[test]
    fn a_page_keeps_its_next_link_and_the_format() {
        let c = [Cursor { t: 1, o: 0, c: 7 }];
        let items = [entry("<entry/>")];
        let doc = Doc {
            url: "http://h/feeds/f/",
            next: Some("http://h/feeds/f/?since=cursor%3A1_0_7&max=50".into()),
            hub: "http://h/hub",
            title: "F",
            total: 9,
            items: &items,
            cursors: &c,
        };
        let d = document(&doc, "http://h/", &[]);
        assert_eq!(d["version"], VERSION);
        assert_eq!(d["feed_url"], "http://h/feeds/f/?format=json-feed");
        assert_eq!(d["next_url"], "http://h/feeds/f/?since=cursor%3A1_0_7&max=50&format=json-feed");
        assert_eq!(d["hubs"][0]["url"], "http://h/hub");
        assert_eq!(d["_smartfeeds"]["total"], 9);
        assert_eq!(d["_smartfeeds"]["last_cursor"], "1_0_7");
        assert_eq!(d["items"].as_array().unwrap().len(), 1);
    }
}
