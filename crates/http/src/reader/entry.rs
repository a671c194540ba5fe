//! What the page shows of one item, read out of its stored Atom entry: title, link,
//! authors and content, and its times in words. Everything that comes from an entry is made
//! safe here, on the server: HTML content (`type="html"` or `xhtml`) goes through ammonia
//! (no scripts, no event handlers, no `javascript:` URLs), text is escaped, titles keep
//! their text only.

use crate::formats::{ATOM, esc, xhtml_markup};
use ammonia::{Builder, UrlRelative};
use chrono::DateTime;
use feed::{Item, Payload};
use minidom::Element;
use std::sync::LazyLock;

/// An item as the page shows it. The `…_html` fields are safe to write into the page as they
/// are; the others are plain text, escaped when written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shown {
    /// The title, as text (escaped, tags dropped); the item id when the entry has none.
    pub title_html: String,
    /// The entry's `alternate` link, when it is an `http` or `https` URL.
    pub link: Option<String>,
    /// `atom:author/atom:name`s.
    pub authors: Vec<String>,
    /// The content (else the summary) as a `<div class="content …">`; none when empty.
    pub body_html: Option<String>,
    pub retracted: bool,
    /// When it says it was published and updated (see `feed::Item::dates`).
    pub dates: feed::Dates,
}

/// What HTML content may keep: ammonia's defaults (no script, style, iframe, form or event
/// handler; URLs only of safe schemes), no relative URLs (there is no base to read them
/// against), links that do not pass the page on, images loaded lazily.
static CONTENT: LazyLock<Builder<'static>> = LazyLock::new(|| {
    let mut b = Builder::default();
    b.link_rel(Some("noopener noreferrer nofollow"))
        .url_relative(UrlRelative::Deny)
        .set_tag_attribute_value("img", "loading", "lazy");
    b
});

/// Titles keep their text only.
static TEXT_ONLY: LazyLock<Builder<'static>> = LazyLock::new(Builder::empty);

/// HTML from an entry, made safe to show.
pub fn sanitise(html: &str) -> String {
    CONTENT.clean(html).to_string()
}

/// The text of HTML from an entry, escaped, without its tags.
pub fn text_of_html(html: &str) -> String {
    TEXT_ONLY.clean(html).to_string()
}

pub fn shown(item: &Item) -> Shown {
    let Payload::Entry(xml) = &item.payload else {
        let (title_html, dates) = (esc(&item.id).into_owned(), item.dates(None));
        return Shown { title_html, retracted: true, dates, ..Shown::default() };
    };
    let parsed = xml.parse::<Element>().ok();
    let mut s = Shown { dates: item.dates(parsed.as_ref()), ..Shown::default() };
    if let Some(e) = parsed {
        let child = |name: &str| e.get_child(name, ATOM);
        s.title_html = child("title").map(inline).unwrap_or_default();
        s.link = e
            .children()
            .filter(|c| c.is("link", ATOM))
            .find(|l| l.attr("rel").is_none_or(|r| r == "alternate"))
            .and_then(|l| l.attr("href"))
            .filter(|h| web_url(h))
            .map(str::to_string);
        s.authors = e
            .children()
            .filter(|c| c.is("author", ATOM))
            .filter_map(|a| a.get_child("name", ATOM))
            .map(|n| n.text().trim().to_string())
            .filter(|n| !n.is_empty())
            .collect();
        s.body_html = child("content").and_then(body).or_else(|| child("summary").and_then(body));
    }
    if s.title_html.trim().is_empty() {
        s.title_html = esc(&item.id).into_owned();
    }
    s
}

/// Whether `url` is absolute `http` or `https` (the only links the page makes of an entry's
/// own `href`s).
pub fn web_url(url: &str) -> bool {
    url::Url::parse(url).is_ok_and(|u| matches!(u.scheme(), "http" | "https"))
}

/// An Atom text construct (`title`) as escaped text.
fn inline(t: &Element) -> String {
    match t.attr("type") {
        Some("html") => text_of_html(&t.text()),
        Some("xhtml") => text_of_html(&xhtml_markup(t)),
        _ => esc(t.text().trim()).into_owned(),
    }
}

/// An Atom `content` or `summary` as the page shows it, or none when it is empty.
fn body(c: &Element) -> Option<String> {
    if let Some(src) = c.attr("src") {
        return web_url(src).then(|| {
            format!(
                r#"<p class="content"><a href="{}" rel="noopener noreferrer nofollow">The content, elsewhere</a></p>"#,
                esc(src)
            )
        });
    }
    let (class, html) = match c.attr("type").unwrap_or("text") {
        "html" => ("html", sanitise(&c.text())),
        "xhtml" => ("html", sanitise(&xhtml_markup(c))),
        t if t == "text" || t.starts_with("text/") => ("text", esc(c.text().trim()).into_owned()),
        other => ("note", format!("Content of type {} (not shown here).", esc(other))),
    };
    (!html.trim().is_empty()).then(|| format!(r#"<div class="content {class}">{html}</div>"#))
}

/// How long ago `t` was at `now` (Unix milliseconds), in words: "just now", "3 minutes ago",
/// "1 day ago"… (a time ahead of `now` is "just now"). The page's script says the same.
pub fn ago(now: i64, t: i64) -> String {
    let s = (now - t) / 1000;
    const UNITS: [(i64, &str); 5] =
        [(365 * 86_400, "year"), (30 * 86_400, "month"), (86_400, "day"), (3_600, "hour"), (60, "minute")];
    match UNITS.iter().find(|(len, _)| s >= *len) {
        Some((len, unit)) => {
            let n = s / len;
            format!("{n} {unit}{} ago", if n == 1 { "" } else { "s" })
        }
        None => "just now".into(),
    }
}

/// The exact time, for a hover: `2026-03-01 12:34:56 UTC`.
pub fn exact(t: i64) -> String {
    DateTime::from_timestamp_millis(t).unwrap_or_default().format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(entry: &str) -> Item {
        crate::test_item("k<1>", Payload::Entry(format!(r#"<entry xmlns="{ATOM}">{entry}</entry>"#)))
    }

    #[test]
    fn html_content_loses_scripts_handlers_and_bad_urls() {
        let dirty = r#"<p onclick="x()">Hi <b>there</b></p><script>document.title='pwned'</script>
            <img src="x" onerror="document.title='pwned'"><img src="https://img.example/a.png" onerror="y()">
            <a href="javascript:alert(1)">js</a><a href="https://ok.example/">ok</a>
            <iframe src="https://evil.example/"></iframe><style>body{display:none}</style>
            <svg><script>alert(1)</script></svg><form action="https://evil.example/"><input name="q"></form>"#;
        let clean = sanitise(dirty);
        for gone in
            ["<script", "onerror", "onclick", "javascript:", "<iframe", "<style", "<form", "<input", "pwned", "alert"]
        {
            assert!(!clean.contains(gone), "{gone} is left in {clean}");
        }
        assert!(clean.contains("<p>Hi <b>there</b></p>"), "{clean}");
        assert!(clean.contains(r#"<img src="https://img.example/a.png" loading="lazy">"#), "{clean}");
        assert!(
            clean.contains(r#"<a href="https://ok.example/" rel="noopener noreferrer nofollow">ok</a>"#),
            "{clean}"
        );
    }

    #[test]
    fn entries_are_shown_by_their_content_type() {
        let html = shown(&item(
            r#"<title type="html">A &lt;b&gt;bold&lt;/b&gt; &amp;amp; title&lt;script&gt;x()&lt;/script&gt;</title>
               <content type="html">&lt;p&gt;para&lt;/p&gt;&lt;script&gt;alert(1)&lt;/script&gt;</content>
               <author><name> ann </name></author><author><name>bob</name></author>
               <link rel="alternate" href="https://example.com/post"/>"#,
        ));
        assert_eq!(html.title_html, "A bold &amp; title");
        assert_eq!(html.body_html.as_deref(), Some(r#"<div class="content html"><p>para</p></div>"#));
        assert_eq!(html.authors, ["ann", "bob"]);
        assert_eq!(html.link.as_deref(), Some("https://example.com/post"));
        assert!(!html.retracted);

        let xhtml = shown(&item(
            r#"<title>T &lt;i&gt;</title><content type="xhtml"><div xmlns="http://www.w3.org/1999/xhtml"><p>x &amp; <em>y</em></p><script>alert(1)</script><img src="z" onerror="alert(1)"/></div></content>
               <link href="javascript:alert(1)"/>"#,
        ));
        assert_eq!(xhtml.title_html, "T &lt;i&gt;");
        assert_eq!(
            xhtml.body_html.as_deref(),
            Some(r#"<div class="content html"><p>x &amp; <em>y</em></p><img loading="lazy"></div>"#)
        );
        assert_eq!(xhtml.link, None);

        let text = shown(&item(r#"<content>&lt;script&gt;alert(1)&lt;/script&gt; &amp; more</content>"#));
        assert_eq!(
            text.body_html.as_deref(),
            Some(r#"<div class="content text">&lt;script&gt;alert(1)&lt;/script&gt; &amp; more</div>"#)
        );
        // No title: the item id, escaped.
        assert_eq!(text.title_html, "k&lt;1&gt;");

        let summary = shown(&item(r#"<summary type="html">&lt;em&gt;s&lt;/em&gt;</summary>"#));
        assert_eq!(summary.body_html.as_deref(), Some(r#"<div class="content html"><em>s</em></div>"#));
        let elsewhere = shown(&item(r#"<content type="text/html" src="https://x.example/a?b=1&amp;c"/>"#));
        assert!(elsewhere.body_html.unwrap().contains(r#"href="https://x.example/a?b=1&amp;c""#));
        assert_eq!(shown(&item(r#"<content src="javascript:alert(1)"/>"#)).body_html, None);
        assert_eq!(shown(&item(r#"<content type="html">  </content>"#)).body_html, None);
        let binary = shown(&item(r#"<content type="image/png">AAAA</content>"#));
        assert!(binary.body_html.unwrap().contains("image/png"));

        let gone = Item { payload: Payload::Tombstone { atom_ref: "urn:x".into(), when: 5 }, ..item("") };
        let g = shown(&gone);
        assert!(g.retracted && g.body_html.is_none());
        assert_eq!(g.title_html, "k&lt;1&gt;");
    }

    #[test]
    fn times_in_words() {
        let now = 1_700_000_000_000;
        let s = 1000;
        for (back, words) in [
            (0, "just now"),
            (-5 * s, "just now"),
            (59 * s, "just now"),
            (60 * s, "1 minute ago"),
            (3 * 60 * s + 5 * s, "3 minutes ago"),
            (3_600 * s, "1 hour ago"),
            (47 * 3_600 * s, "1 day ago"),
            (48 * 3_600 * s, "2 days ago"),
            (30 * 86_400 * s, "1 month ago"),
            (364 * 86_400 * s, "12 months ago"),
            (3 * 365 * 86_400 * s, "3 years ago"),
        ] {
            assert_eq!(ago(now, now - back), words, "{back} ms back");
        }
        assert_eq!(exact(1_700_000_000_123), "2023-11-14 22:13:20 UTC");
    }
}
