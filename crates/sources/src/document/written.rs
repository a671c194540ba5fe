//! RSS 0.9x/1.0/2.0 and JSON Feed documents (and Atom documents minidom cannot read), read
//! with feed-rs, their entries written as Atom: `id`, `title`, `link`, `published`,
//! `updated`, `author` (`name`, `email`, `uri`), `category/@term`, `summary`, `content`.
//!
//! feed-rs names an RSS `<author>` contact by its role (`author`) and keeps the element's
//! text as its email; `dc:creator` and JSON Feed authors are a name. The text, whichever
//! it is, is read as feed readers read it ([`person`]): `ann@example.com (Ann Lee)`, `Ann
//! Lee <ann@example.com>`, `Ann Lee` or `ann@example.com`.

use super::{Document, ParseError, Parsed, complete::complete, content_key, finish, newest};
use feed::atom::{ATOM, entry_fields};
use feed::service::IncomingChange;
use feed_rs::model::{self, Text};
use minidom::Element;

/// Reads the document with feed-rs. An entry without an id takes its first link as key
/// (feed-rs would otherwise make one up that changes from fetch to fetch), else a digest of
/// the entry. Each entry is given a title and an updated time when it has none (`now` when
/// it has no time at all).
pub fn parse(bytes: &[u8], now: chrono::DateTime<chrono::Utc>) -> Result<Document, ParseError> {
    let parser = feed_rs::parser::Builder::new()
        .id_generator(|links, _, _| links.first().map(|l| l.href.trim().to_string()).unwrap_or_default())
        .build();
    if let Some(at) = find(bytes, ATOM_03.as_bytes())
        && (find(&bytes[..at], b"<feed").is_some() || find(&bytes[at..], b"<entry").is_some())
    {
        return Err(ParseError::NotAFeed(format!("Atom 0.3 ({ATOM_03}), replaced by Atom 1.0 in 2005, is not read")));
    }
    let bytes = understood(bytes);
    let feed = parser.parse(bytes.as_ref()).map_err(|e| ParseError::NotAFeed(e.to_string()))?;
    let mut parsed = Vec::new();
    let mut skipped = 0;
    for e in &feed.entries {
        let mut atom = as_atom(e);
        let key = Some(e.id.trim()).filter(|k| !k.is_empty()).map_or_else(|| content_key(&atom), str::to_string);
        complete(&mut atom, &key, now);
        match entry_fields(&atom) {
            Ok(entry) => parsed.push(Parsed {
                key,
                when: e.published.or(e.updated).map(|t| (t.timestamp_millis(), 0)),
                change: IncomingChange::Entry(entry),
            }),
            Err(_) => skipped += 1,
        }
    }
    let link = |rel: &str| feed.links.iter().find(|l| l.rel.as_deref() == Some(rel)).map(|l| l.href.clone());
    Ok(Document {
        newest: newest(&parsed),
        entries: finish(parsed, Vec::new()),
        skipped,
        prev_archive: link("prev-archive"),
        next: link("next"),
        total: None,
        hub: link("hub"),
        self_link: link("self"),
    })
}

/// The namespace of Atom 0.3.
const ATOM_03: &str = "http://purl.org/atom/ns#";

/// The namespaces some RSS 2.0 documents put their elements in, which feed-rs reads as no
/// RSS at all.
const RSS2_NAMESPACES: [&str; 2] =
    ["xmlns=\"http://backend.userland.com/rss2\"", "xmlns=\"http://blogs.law.harvard.edu/tech/rss\""];

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The document as feed-rs understands it: RSS 2.0 without the namespace some write it
/// in (the elements are RSS 2.0's all the same), JSON Feed ids given as numbers as
/// strings (as the JSON Feed specification tells readers to take them), a JSON Feed
/// item's 1.0 `author` dropped beside its 1.1 `authors`.
fn understood(bytes: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if bytes.trim_ascii_start().starts_with(b"{") {
        let Ok(mut doc) = serde_json::from_slice::<serde_json::Value>(bytes) else { return bytes.into() };
        let mut changed = false;
        for item in doc.get_mut("items").and_then(|i| i.as_array_mut()).into_iter().flatten() {
            // JSON Feed 1.1: `authors` replaces 1.0's `author`, which stays for old readers.
            if item.get("authors").is_some()
                && let Some(fields) = item.as_object_mut()
                && fields.remove("author").is_some()
            {
                changed = true;
            }
            if let Some(id) = item.get_mut("id").filter(|id| id.is_number()) {
                *id = serde_json::Value::String(id.to_string());
                changed = true;
            }
        }
        return if changed { serde_json::to_vec(&doc).map_or(bytes.into(), Into::into) } else { bytes.into() };
    }
    for ns in RSS2_NAMESPACES {
        if let Some(at) = find(bytes, ns.as_bytes()) {
            let mut out = bytes[..at].to_vec();
            out.extend_from_slice(&bytes[at + ns.len()..]);
            return out.into();
        }
    }
    bytes.into()
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

/// One feed-rs entry as an Atom entry, without its id.
fn as_atom(e: &model::Entry) -> Element {
    let mut entry = Element::builder("entry", ATOM).build();
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
    for a in &e.authors {
        if let Some(author) = author(a) {
            entry.append_child(author);
        }
    }
    if e.authors.is_empty() {
        // An item's `itunes:author` (feed-rs keeps it as a media credit): its author, as
        // feed readers take it.
        let credits = e.media.iter().flat_map(|m| &m.credits).map(|c| c.entity.trim()).filter(|c| !c.is_empty());
        for name in credits.take(1) {
            entry.append_child(Element::builder("author", ATOM).append(leaf("name", name)).build());
        }
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

/// The role feed-rs names an RSS `<author>` contact by.
const RSS_AUTHOR_ROLE: &str = "author";

/// A feed-rs person as an Atom `author`: its name and address read from whichever field
/// holds the text, the address as its name when it has no other (Atom requires a name).
fn author(p: &model::Person) -> Option<Element> {
    let (name, email) = match p.email.as_deref().map(str::trim).filter(|e| !e.is_empty()) {
        Some(text) => {
            let (name, email) = person(text);
            let role = p.name.trim();
            (name.or_else(|| (!role.is_empty() && role != RSS_AUTHOR_ROLE).then(|| role.to_string())), email)
        }
        None => person(&p.name),
    };
    let name = name.or_else(|| email.clone())?;
    let mut author = Element::builder("author", ATOM).append(leaf("name", &name)).build();
    if let Some(email) = email {
        author.append_child(leaf("email", &email));
    }
    if let Some(uri) = p.uri.as_deref().map(str::trim).filter(|u| !u.is_empty()) {
        author.append_child(leaf("uri", uri));
    }
    Some(author)
}

/// A contact as feeds write it, as a name and an email address, either absent: the first
/// address in the text (a `mailto:` dropped) is the email; what is left, without the
/// brackets or parentheses around it, is the name.
pub fn person(text: &str) -> (Option<String>, Option<String>) {
    let text = text.trim();
    let Some((start, end)) = email_at(text) else {
        return (Some(text.to_string()).filter(|t| !t.is_empty()), None);
    };
    let email = text[start..end].to_string();
    let before = text[..start].strip_suffix("mailto:").unwrap_or(&text[..start]);
    let rest = format!("{before}{}", &text[end..]).replace("()", "").replace("<>", "");
    let name = rest.trim().trim_start_matches(['(', '<', '"']).trim_end_matches([')', '>', '"']).trim();
    (Some(name.to_string()).filter(|n| !n.is_empty()), Some(email))
}

/// Where the first email address of `text` is: an `@` with a local part before it and a
/// dotted domain after it.
fn email_at(text: &str) -> Option<(usize, usize)> {
    let local = |c: char| c.is_alphanumeric() || "._+-".contains(c);
    let domain = |c: char| c.is_alphanumeric() || ".-".contains(c);
    text.match_indices('@').find_map(|(at, _)| {
        let start =
            text[..at].rfind(|c: char| !local(c)).map_or(0, |i| i + text[i..].chars().next().map_or(1, char::len_utf8));
        let end = text[at + 1..].find(|c: char| !domain(c)).map_or(text.len(), |i| at + 1 + i);
        let host = text[at + 1..end].trim_end_matches('.');
        let end = at + 1 + host.len();
        (start < at && host.contains('.') && !host.starts_with('.')).then_some((start, end))
    })
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
</channel></rss>"#;
        let doc = parse(rss.as_bytes(), chrono::Utc::now()).unwrap();
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
        let doc = parse(json.as_bytes(), chrono::Utc::now()).unwrap();
        let (id, first) = entry(&doc, 0);
        assert_eq!(id, crate::item_id("j1"));
        assert!(first.xml.contains("Earlier"));
        let (_, later) = entry(&doc, 1);
        assert_eq!(later.author.as_deref(), Some("Cy"));
        assert_eq!(later.categories, ["a", "b"]);
    }

    #[test]
    fn contacts_are_read_as_a_name_and_an_address() {
        let both = (Some("Ann Lee".to_string()), Some("ann@rss.example".to_string()));
        for text in [
            "ann@rss.example (Ann Lee)",
            "Ann Lee (ann@rss.example)",
            "Ann Lee <mailto:ann@rss.example>",
            " Ann Lee <ann@rss.example> ",
        ] {
            assert_eq!(person(text), both, "{text}");
        }
        assert_eq!(person("ann@rss.example"), (None, Some("ann@rss.example".into())));
        assert_eq!(person("Ann Lee"), (Some("Ann Lee".into()), None));
        assert_eq!(person("@ann (not an address)"), (Some("@ann (not an address)".into()), None));
        assert_eq!(person(""), (None, None));
    }

    fn authors(xml: &str) -> Vec<(String, Option<String>)> {
        let back: Element = xml.parse().unwrap();
        back.children()
            .filter(|c| c.is("author", ATOM))
            .map(|a| (a.get_child("name", ATOM).unwrap().text(), a.get_child("email", ATOM).map(Element::text)))
            .collect()
    }

    #[test]
    fn rss_authors_dc_creators_and_json_feed_authors_keep_their_names_and_addresses() {
        let rss = r#"<rss version="2.0" xmlns:dc="http://purl.org/dc/elements/1.1/"><channel><title>R</title>
<item><guid>a</guid><author>ann@rss.example (Ann Lee)</author></item>
<item><guid>b</guid><author>bob@rss.example</author></item>
<item><guid>c</guid><dc:creator>Cy Young &lt;cy@rss.example&gt;</dc:creator><dc:creator>Di</dc:creator></item>
</channel></rss>"#;
        let doc = parse(rss.as_bytes(), chrono::Utc::now()).unwrap();
        let by_key = |k: &str| {
            let id = crate::item_id(k);
            doc.entries
                .iter()
                .find(|e| e.id == id)
                .map(|e| match &e.change {
                    IncomingChange::Entry(entry) => entry.clone(),
                    IncomingChange::Deleted => panic!(),
                })
                .unwrap()
        };
        let a = by_key("a");
        assert_eq!(authors(&a.xml), [("Ann Lee".to_string(), Some("ann@rss.example".to_string()))]);
        assert_eq!(a.author.as_deref(), Some("Ann Lee"));
        assert_eq!(authors(&by_key("b").xml), [("bob@rss.example".to_string(), Some("bob@rss.example".to_string()))]);
        assert_eq!(
            authors(&by_key("c").xml),
            [("Cy Young".to_string(), Some("cy@rss.example".to_string())), ("Di".to_string(), None)]
        );
        let json = r#"{"version":"https://jsonfeed.org/version/1","title":"J","items":[
          {"id":"j","author":{"name":"Ed Eve","url":"https://ed.example/"}}]}"#;
        let doc = parse(json.as_bytes(), chrono::Utc::now()).unwrap();
        let (_, j) = entry(&doc, 0);
        assert_eq!(authors(&j.xml), [("Ed Eve".to_string(), None)]);
        assert!(j.xml.contains("https://ed.example/"), "{}", j.xml);
    }

    #[test]
    fn items_without_title_date_id_or_link_are_kept_complete() {
        let rss = r#"<rss version="2.0"><channel><title>R</title>
<item><description>&lt;p&gt;A &lt;b&gt;bold&lt;/b&gt; start&lt;/p&gt;</description><pubDate>Mon, 01 Jan 2024 10:00:00 GMT</pubDate></item>
<item><description>No date</description></item>
</channel></rss>"#;
        let now: chrono::DateTime<chrono::Utc> = "2025-06-01T12:00:00Z".parse().unwrap();
        let doc = parse(rss.as_bytes(), now).unwrap();
        assert_eq!(doc.entries.len(), 2, "no entry left out");
        let fields = |n: usize| {
            let (_, e) = entry(&doc, n);
            let back: Element = e.xml.parse().unwrap();
            let text = |name: &str| back.get_child(name, ATOM).map(Element::text).unwrap_or_default();
            (text("id"), text("title"), text("updated"))
        };
        // Reverse document order: an entry has no time.
        let (id, title, updated) = fields(0);
        assert!(id.starts_with("urn:sha256:"), "{id}");
        assert_eq!((title.as_str(), updated.as_str()), ("No date", "2025-06-01T12:00:00Z"));
        let (_, title, updated) = fields(1);
        assert_eq!(title, "A bold start");
        assert!(updated.starts_with("2024-01-01T10:00:00"), "{updated}");
        // The same document read again gives the same keys.
        assert_eq!(parse(rss.as_bytes(), now).unwrap().ids(), doc.ids());
    }

    #[test]
    fn numeric_json_feed_ids_namespaced_rss_and_atom_0_3() {
        let json = r#"{"version":"https://jsonfeed.org/version/1.1","title":"J","items":[{"id":7,"title":"Seven",
            "author":{"name":"Old"},"authors":[{"name":"New"}]}]}"#;
        let doc = parse(json.as_bytes(), chrono::Utc::now()).unwrap();
        assert_eq!(doc.ids(), [crate::item_id("7")]);
        assert_eq!(authors(&entry(&doc, 0).1.xml), [("New".to_string(), None)]);
        let rss = r#"<rss version="2.0" xmlns="http://backend.userland.com/rss2"><channel><title>R</title>
<item><title>In a namespace</title><link>https://example.com/ns</link></item></channel></rss>"#;
        assert_eq!(
            parse(rss.as_bytes(), chrono::Utc::now()).unwrap().ids(),
            [crate::item_id("https://example.com/ns")]
        );
        let atom03 = r#"<feed version="0.3" xmlns="http://purl.org/atom/ns#"><entry><id>x</id></entry></feed>"#;
        let err = super::super::parse(atom03.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("Atom 0.3"), "{err}");
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
