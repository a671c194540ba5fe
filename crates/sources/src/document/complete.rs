//! What every imported entry has, whatever its source left out: an `<id>`, a `<title>` and
//! an `<updated>` (Atom requires them, and XMPP clients such as Movim and Libervia drop
//! entries without a title or an updated time). What is missing is added; what is there is
//! kept as written.
//!
//! - `id`: the entry's key (its link, or a digest of its content; see the parsers);
//! - `title`: the text of its summary, else of its content, shortened to [`TITLE_CHARS`]
//!   at a word; else its link; else its key;
//! - `updated`: its `published`, else the time of the fetch.

use chrono::{DateTime, SecondsFormat, Utc};
use feed::atom::ATOM;
use minidom::Element;

/// The longest title made from a summary or content, in characters (an ellipsis added).
pub const TITLE_CHARS: usize = 100;

/// Adds to `entry` (an Atom entry) the `id`, `title` and `updated` it lacks (absent or
/// blank): `key` for the id, `now` (the fetch's time) when it has no `published` either.
pub fn complete(entry: &mut Element, key: &str, now: DateTime<Utc>) {
    if blank(entry, "id") {
        entry.remove_child("id", ATOM);
        entry.append_child(Element::builder("id", ATOM).append(key).build());
    }
    if blank(entry, "title") {
        let title = ["summary", "content"]
            .iter()
            .filter_map(|name| entry.get_child(name, ATOM))
            .map(construct_text)
            .map(|t| shortened(&t))
            .find(|t| !t.is_empty())
            .or_else(|| alternate(entry))
            .unwrap_or_else(|| key.to_string());
        entry.remove_child("title", ATOM);
        entry.append_child(Element::builder("title", ATOM).attr(name("type"), "text").append(title).build());
    }
    if blank(entry, "updated") {
        let published = entry.get_child("published", ATOM).map(|p| p.text().trim().to_string());
        let when = published
            .filter(|p| DateTime::parse_from_rfc3339(p).is_ok())
            .unwrap_or_else(|| now.to_rfc3339_opts(SecondsFormat::Secs, true));
        entry.remove_child("updated", ATOM);
        entry.append_child(Element::builder("updated", ATOM).append(when).build());
    }
}

fn blank(entry: &Element, child: &str) -> bool {
    entry.get_child(child, ATOM).is_none_or(|c| all_text(c).trim().is_empty())
}

fn name(n: &'static str) -> rxml::NcName {
    n.try_into().unwrap_or_else(|_| unreachable!("{n} is a name"))
}

/// The href of the entry's alternate link.
fn alternate(entry: &Element) -> Option<String> {
    entry
        .children()
        .filter(|l| l.is("link", ATOM) && matches!(l.attr("rel"), None | Some("alternate")))
        .find_map(|l| l.attr("href").map(str::trim).filter(|h| !h.is_empty()).map(str::to_string))
}

/// The text an Atom text construct shows: its markup dropped (`html` is escaped markup,
/// `xhtml` is elements), its entities decoded.
fn construct_text(c: &Element) -> String {
    if c.attr("src").is_some() {
        return String::new();
    }
    match c.attr("type") {
        Some("html") => html_text(&c.text()),
        _ => all_text(c),
    }
}

/// The text of `e` and of all its descendants, in order.
fn all_text(e: &Element) -> String {
    let mut out = String::new();
    for node in e.nodes() {
        match node {
            minidom::Node::Text(t) => out.push_str(t),
            minidom::Node::Element(child) => {
                out.push(' ');
                out.push_str(&all_text(child));
            }
        }
    }
    out
}

/// The text of an HTML fragment: tags dropped (each as a space), HTML entities decoded.
pub fn html_text(html: &str) -> String {
    let mut text = String::with_capacity(html.len());
    let mut rest = html;
    while let Some(open) = rest.find('<') {
        text.push_str(&rest[..open]);
        text.push(' ');
        rest = rest[open..].find('>').map_or("", |close| &rest[open + close + 1..]);
    }
    text.push_str(rest);
    use quick_xml::escape::{resolve_html5_entity, unescape_with};
    unescape_with(&text, resolve_html5_entity).map_or(text.clone(), |t| t.into_owned())
}

/// `text` with its blanks collapsed, at most [`TITLE_CHARS`] characters: cut at the last
/// blank before the limit (or at the limit, in a long word), an ellipsis added.
pub fn shortened(text: &str) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    let whole = words.join(" ");
    if whole.chars().count() <= TITLE_CHARS {
        return whole;
    }
    let cut: String = whole.chars().take(TITLE_CHARS).collect();
    let cut = match cut.rfind(' ') {
        Some(at) if at > TITLE_CHARS / 2 => &cut[..at],
        _ => cut.as_str(),
    };
    format!("{}…", cut.trim_end_matches(|c: char| c.is_whitespace() || c.is_ascii_punctuation()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(inner: &str) -> Element {
        format!("<entry xmlns='{ATOM}'>{inner}</entry>").parse().unwrap()
    }

    fn child(e: &Element, name: &str) -> String {
        e.get_child(name, ATOM).map(|c| c.text()).unwrap_or_default()
    }

    const NOW: &str = "2025-06-01T12:00:00Z";

    fn now() -> DateTime<Utc> {
        NOW.parse().unwrap()
    }

    #[test]
    fn what_is_there_is_kept() {
        let mut e = entry(
            "<id>x</id><title type='html'>&lt;b&gt;T&lt;/b&gt;</title><updated>2024-01-01T00:00:00+02:00</updated>",
        );
        let before = String::from(&e);
        complete(&mut e, "key", now());
        assert_eq!(String::from(&e), before);
    }

    #[test]
    fn a_missing_title_is_the_summary_text_then_the_content_then_the_link_then_the_key() {
        let mut e = entry(
            "<summary type='html'>&lt;p&gt;Fish &amp;amp; &lt;b&gt;chips&lt;/b&gt;&amp;nbsp;today&lt;/p&gt;</summary>",
        );
        complete(&mut e, "k", now());
        assert_eq!(child(&e, "title"), "Fish & chips today");
        let mut e = entry(
            "<title> </title><content type='xhtml'><div xmlns='http://www.w3.org/1999/xhtml'><p>In <em>xhtml</em></p></div></content>",
        );
        complete(&mut e, "k", now());
        assert_eq!(child(&e, "title"), "In xhtml");
        assert_eq!(e.children().filter(|c| c.name() == "title").count(), 1, "the blank title replaced");
        let mut e = entry("<content src='https://x.example/v.mp4'/><link href='https://x.example/1'/>");
        complete(&mut e, "k", now());
        assert_eq!(child(&e, "title"), "https://x.example/1");
        let mut e = entry("");
        complete(&mut e, "urn:k", now());
        assert_eq!((child(&e, "title"), child(&e, "id")), ("urn:k".into(), "urn:k".into()));
    }

    #[test]
    fn long_text_is_cut_at_a_word_with_an_ellipsis() {
        let long = "word ".repeat(40);
        let t = shortened(&long);
        assert!(t.chars().count() <= TITLE_CHARS + 1 && t.ends_with("word…"), "{t}");
        let t = shortened(&"x".repeat(300));
        assert_eq!(t.chars().count(), TITLE_CHARS + 1);
        assert_eq!(shortened("  two\n\twords "), "two words");
    }

    #[test]
    fn a_missing_updated_is_the_published_time_else_the_fetch_time() {
        let mut e = entry("<published>2024-03-01T10:00:00+01:00</published>");
        complete(&mut e, "k", now());
        assert_eq!(child(&e, "updated"), "2024-03-01T10:00:00+01:00");
        let mut e = entry("<published>March 1st</published>");
        complete(&mut e, "k", now());
        assert_eq!(child(&e, "updated"), NOW);
    }
}
