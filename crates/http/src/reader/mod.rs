//! The page at `BASE/`, a small feed reader, rendered on the server so it reads with
//! JavaScript off: a form to choose a feed and a view (order, author, category), the view's
//! items (title, authors, time, categories, content), a link to older items, and the view's
//! feed URLs (Atom, JSON Feed, WebSub, XMPP). A small inline script (`page.js`, no build
//! step) then loads older items in place, brings new ones live through the view's event
//! stream and keeps the times in words fresh; it asks the page itself for each item's HTML,
//! so every item the visitor sees was rendered (and sanitised) here.
//!
//! Pure: the handler ([`crate::html_page`]) reads, this writes. `entry` is what an item
//! shows, `links` the page's query and the URLs it writes.

pub mod entry;
pub mod links;

use crate::formats::esc;
use entry::{ago, exact, shown};
use feed::paging::Page;
use feed::position::rfc3339;
use feed::service::FeedSummary;
use feed::{Cursor, Item, Order, OrderBy};
pub use links::{Choice, Follow};
use std::fmt::Write;

const STYLE: &str = include_str!("page.css");
const SCRIPT: &str = include_str!("page.js");

/// An order's value and its name in the form.
type Choosable = (&'static str, &'static str);

/// The orders a view can have, as the form offers them: by which time, each way.
const ORDERS: [(&str, &str, &[Choosable]); 2] = [
    ("By publication", "created", &[("-created", "Newest first"), ("created", "Oldest first")]),
    ("By last change", "modified", &[("-modified", "Latest change first"), ("modified", "Earliest change first")]),
];

/// A view as the page shows it.
pub struct Shelf<'a> {
    pub feed: &'a str,
    /// The feed's title.
    pub title: &'a str,
    pub order: Order,
    pub follow: Follow,
    /// The items shown, in view order.
    pub page: Page,
    /// The cursor to read older items from, when there are any.
    pub older: Option<Cursor>,
    /// Whether the page shows the newest items (not an older page).
    pub newest: bool,
    /// The event stream that brings new items, from the newest one shown.
    pub stream: Option<String>,
}

/// Everything the page shows.
pub struct Reader<'a> {
    /// The nonce of the page's inline style and script (its `Content-Security-Policy`
    /// allows no other).
    pub nonce: &'a str,
    /// Now, Unix milliseconds, for the times in words.
    pub now: i64,
    /// The feeds the visitor may read.
    pub feeds: &'a [FeedSummary],
    pub choice: &'a Choice,
    /// The feed chosen (asked for, else the first listed).
    pub feed: Option<&'a str>,
    pub shelf: Option<Shelf<'a>>,
    /// Why the view could not be shown.
    pub error: Option<String>,
}

/// The whole page.
pub fn page(r: &Reader<'_>) -> String {
    let mut s = String::with_capacity(16 * 1024);
    let nonce = esc(r.nonce);
    let head_title = match &r.shelf {
        Some(sh) => {
            // The newest item names the tab, so it shows while the page is in the background.
            let newest = if sh.order.descending { sh.page.items.first() } else { sh.page.items.last() };
            match newest.filter(|_| sh.newest) {
                Some(i) => format!("{} · {}", shown(i).title_html, esc(sh.title)),
                None => format!("{} · smartfeeds", esc(sh.title)),
            }
        }
        None => "smartfeeds".into(),
    };
    let _ = write!(
        s,
        r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{head_title}</title>
"#
    );
    if let Some(sh) = &r.shelf {
        let f = &sh.follow;
        let t = esc(sh.title);
        let _ = write!(
            s,
            r#"<link rel="alternate" type="application/atom+xml" title="{t} (Atom)" href="{}">
<link rel="alternate" type="application/feed+json" title="{t} (JSON Feed)" href="{}">
<link rel="hub" href="{}">
"#,
            esc(&f.atom),
            esc(&f.json_feed),
            esc(&f.hub)
        );
    }
    let _ = write!(
        s,
        r##"<style nonce="{nonce}">{STYLE}</style>
</head>
<body>
<a class="skip" href="#items">Skip to the items</a>
<div class="wrap">
<header class="site"><h1><a href="./">smartfeeds</a></h1><p>Feeds you may read, with their newest items live.</p></header>
<main>
"##
    );
    form(&mut s, r);
    if let Some(e) = &r.error {
        let _ = writeln!(s, "<p class=\"error\" role=\"alert\">{}</p>", esc(e));
    }
    if let Some(sh) = &r.shelf {
        shelf(&mut s, r, sh);
    }
    let _ = write!(s, "</main>\n</div>\n<script nonce=\"{nonce}\">{SCRIPT}</script>\n</body>\n</html>\n");
    s
}

/// The form that chooses the feed and the view. A plain `GET` of the page: it works without
/// the script.
fn form(s: &mut String, r: &Reader<'_>) {
    let c = r.choice;
    s.push_str("<form class=\"choose\" method=\"get\" action=\"./\" aria-label=\"Choose a feed and a view\">\n");
    s.push_str("<div class=\"field\"><label for=\"feed\">Feed</label><select id=\"feed\" name=\"feed\">");
    let mut listed = false;
    for f in r.feeds {
        let on = r.feed == Some(f.name.as_str());
        listed |= on;
        let _ = write!(s, "<option value=\"{}\"{}>{}</option>", esc(&f.name), selected(on), esc(&f.title));
    }
    if let (Some(feed), false) = (r.feed, listed) {
        // Asked for by name but not listed (not readable, or not there): still the choice.
        let _ = write!(s, "<option value=\"{0}\" selected>{0}</option>", esc(feed));
    }
    s.push_str("</select></div>\n");
    let order = r.shelf.as_ref().map(|sh| sh.order.to_string()).or_else(|| c.order.clone());
    s.push_str("<div class=\"field\"><label for=\"order\">Order</label><select id=\"order\" name=\"order\">");
    for (group, _, options) in ORDERS {
        let _ = write!(s, "<optgroup label=\"{group}\">");
        for (value, label) in options {
            let _ =
                write!(s, "<option value=\"{value}\"{}>{label}</option>", selected(order.as_deref() == Some(value)));
        }
        s.push_str("</optgroup>");
    }
    s.push_str("</select></div>\n");
    // What the shown items offer, as suggestions.
    let (mut authors, mut categories) = (Vec::new(), Vec::new());
    for i in r.shelf.iter().flat_map(|sh| &sh.page.items) {
        authors.extend(i.author.iter().cloned());
        categories.extend(i.categories.iter().cloned());
    }
    for (name, label, hint, value, list) in [
        ("author", "Author", "anyone", &c.author, &mut authors),
        ("category", "Category", "any", &c.category, &mut categories),
    ] {
        let _ = write!(
            s,
            "<div class=\"field\"><label for=\"{name}\">{label}</label><input id=\"{name}\" name=\"{name}\" list=\"{name}-seen\" value=\"{}\" placeholder=\"{hint}\" autocomplete=\"off\"><datalist id=\"{name}-seen\">",
            esc(value.as_deref().unwrap_or(""))
        );
        list.sort();
        list.dedup();
        for v in list.iter() {
            let _ = write!(s, "<option value=\"{}\"></option>", esc(v));
        }
        s.push_str("</datalist></div>\n");
    }
    s.push_str("<div class=\"field\"><button type=\"submit\">Show</button></div>\n</form>\n");
}

fn selected(on: bool) -> &'static str {
    if on { " selected" } else { "" }
}

/// The view: its title, what it is, where to follow it, its items and the way to older ones.
fn shelf(s: &mut String, r: &Reader<'_>, sh: &Shelf<'_>) {
    let c = r.choice;
    let f = &sh.follow;
    let order = ORDERS
        .iter()
        .flat_map(|(_, by, options)| options.iter().map(move |(v, label)| (*v, *by, *label)))
        .find(|(v, ..)| *v == sh.order.to_string())
        .map_or(String::new(), |(_, by, label)| {
            format!("{label} (by {})", if by == "created" { "publication" } else { "last change" })
        });
    let _ = write!(
        s,
        "<section class=\"view\" aria-labelledby=\"view-title\">\n<h2 id=\"view-title\">{}</h2>\n",
        esc(sh.title)
    );
    let mut about = vec![format!("{} item{}", sh.page.count, if sh.page.count == 1 { "" } else { "s" }), order];
    if let Some(a) = &c.author {
        about.push(format!("by {}", esc(a)));
    }
    if let Some(k) = &c.category {
        about.push(format!("in {}", esc(k)));
    }
    let _ = writeln!(s, "<p class=\"about\">{}</p>", about.join(" · "));
    let _ = write!(
        s,
        r#"<nav class="follow" aria-label="Follow this view">
<span class="label">Follow:</span> <a href="{}" type="application/atom+xml">Atom</a> <a href="{}" type="application/feed+json">JSON Feed</a> <a href="{}" class="xmpp">XMPP</a>
<details><summary>WebSub and XMPP details</summary>
<dl>
<dt>WebSub hub</dt><dd><code>{}</code></dd>
<dt>Topic</dt><dd><code>{}</code></dd>
<dt>XMPP service</dt><dd><code>{}</code></dd>
<dt>Node</dt><dd><code>{}</code></dd>
</dl>
</details>
</nav>
"#,
        esc(&f.atom),
        esc(&f.json_feed),
        esc(&f.xmpp),
        esc(&f.hub),
        esc(&f.url),
        esc(&f.jid),
        esc(&f.node),
    );
    let status = if sh.newest { "" } else { "Older items of this view: new ones arrive on its newest page." };
    let _ = writeln!(s, "<p id=\"status\" role=\"status\" aria-live=\"polite\">{status}</p>");
    // Newest first: older items below; oldest first: older items above.
    let older_above = !sh.order.descending;
    if older_above {
        paging(s, r, sh);
    }
    let _ = write!(
        s,
        "<ol id=\"items\" class=\"items\" data-newest=\"{}\" data-by=\"{}\" data-title=\"{}\" data-item=\"{}\"",
        if sh.order.descending { "top" } else { "bottom" },
        if sh.order.by == OrderBy::Modified { "modified" } else { "created" },
        esc(sh.title),
        esc(&format!("{}&item=", c.href(sh.feed, |_| {}))),
    );
    if let Some(stream) = &sh.stream {
        let _ = write!(s, " data-stream=\"{}\"", esc(stream));
    }
    s.push_str(">\n");
    for (i, cursor) in sh.page.items.iter().zip(&sh.page.cursors) {
        s.push_str(&item(r.now, c, sh.feed, i, cursor));
    }
    s.push_str("</ol>\n");
    if sh.page.items.is_empty() {
        s.push_str("<p class=\"empty\">No items in this view yet.</p>\n");
    }
    if !older_above {
        paging(s, r, sh);
    }
    s.push_str("</section>\n");
}

/// The way to older items (a plain link the script takes over), and back to the newest.
fn paging(s: &mut String, r: &Reader<'_>, sh: &Shelf<'_>) {
    let c = r.choice;
    s.push_str("<nav class=\"paging\" aria-label=\"More items\">");
    match &sh.older {
        Some(cursor) => {
            let href = c.href(sh.feed, |c| c.before = Some(cursor.to_string()));
            let _ = write!(s, "<a class=\"older\" href=\"{}\">Older items</a>", esc(&href));
        }
        None if !sh.page.items.is_empty() => {
            s.push_str("<span class=\"end\">The first item of this view is shown.</span>")
        }
        None => {}
    }
    if !sh.newest {
        let _ = write!(s, " <a class=\"newest\" href=\"{}\">Newest items</a>", esc(&c.href(sh.feed, |_| {})));
    }
    s.push_str("</nav>\n");
}

/// One item, as a list item of the page (also what the page answers for `item=ID`).
pub fn item(now: i64, c: &Choice, feed: &str, item: &Item, cursor: &Cursor) -> String {
    let e = shown(item);
    let mut s = String::with_capacity(1024);
    let _ = write!(
        s,
        "<li class=\"item{}\" data-id=\"{}\" data-cursor=\"{cursor}\"><article>",
        if e.retracted { " retracted" } else { "" },
        esc(&item.id)
    );
    let time = |t: i64| format!("<time datetime=\"{}\" title=\"{}\">{}</time>", rfc3339(t), exact(t), ago(now, t));
    if e.retracted {
        let _ = write!(
            s,
            "<h3>Retracted: <span class=\"id\">{}</span></h3><p class=\"meta\">retracted {}</p>",
            e.title_html,
            time(item.modified.t)
        );
        s.push_str("</article></li>\n");
        return s;
    }
    match &e.link {
        Some(href) => {
            let _ = write!(
                s,
                "<h3><a href=\"{}\" rel=\"noopener noreferrer nofollow\">{}</a></h3>",
                esc(href),
                e.title_html
            );
        }
        None => {
            let _ = write!(s, "<h3>{}</h3>", e.title_html);
        }
    }
    let mut meta = Vec::new();
    if !e.authors.is_empty() {
        let names: Vec<String> = e
            .authors
            .iter()
            .map(|a| match &item.author {
                // The author a view filters by.
                Some(by) if by == a => {
                    let href = c.href(feed, |c| c.author = Some(a.clone()));
                    format!("<a href=\"{}\">{}</a>", esc(&href), esc(a))
                }
                _ => esc(a).into_owned(),
            })
            .collect();
        meta.push(format!("<span class=\"by\">by {}</span>", names.join(", ")));
    }
    meta.push(time(e.dates.published));
    if e.dates.updated - e.dates.published >= 1000 {
        meta.push(format!("updated {}", time(e.dates.updated)));
    }
    let _ = write!(s, "<p class=\"meta\">{}</p>", meta.join(" · "));
    if !item.categories.is_empty() {
        s.push_str("<ul class=\"tags\" aria-label=\"Categories\">");
        for k in &item.categories {
            let href = c.href(feed, |c| c.category = Some(k.clone()));
            let _ = write!(s, "<li><a href=\"{}\">{}</a></li>", esc(&href), esc(k));
        }
        s.push_str("</ul>");
    }
    if let Some(body) = &e.body_html {
        s.push_str(body);
    }
    s.push_str("</article></li>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use feed::{Key, Payload};

    fn entry(id: &str, body: &str) -> Item {
        Item {
            id: id.into(),
            created: Key { t: 1_700_000_000_000, seq: 1 },
            modified: Key { t: 1_700_000_090_000, seq: 2 },
            author: Some("ann".into()),
            categories: vec!["rust".into(), "a&b".into()],
            atom_id: None,
            payload: Payload::Entry(format!(r#"<entry xmlns="http://www.w3.org/2005/Atom">{body}</entry>"#)),
        }
    }

    #[test]
    fn an_item_shows_its_parts_and_links_to_filtered_views() {
        let c = Choice { order: Some("-modified".into()), ..Choice::default() };
        let i = entry(
            "i\"1",
            r#"<title>Hello</title><author><name>ann</name></author><author><name>bob</name></author><content type="html">&lt;p onclick="x()"&gt;Hi&lt;/p&gt;</content>"#,
        );
        let now = 1_700_000_000_000 + 3 * 60_000;
        let li = item(now, &c, "f", &i, &Cursor { t: 1, o: 0, c: 2 });
        assert!(
            li.starts_with(r#"<li class="item" data-id="i&quot;1" data-cursor="1_0_2"><article><h3>Hello</h3>"#),
            "{li}"
        );
        assert!(li.contains(r#"by <a href="?feed=f&amp;order=-modified&amp;author=ann">ann</a>, bob"#), "{li}");
        assert!(
            li.contains(
                r#"<time datetime="2023-11-14T22:13:20.000Z" title="2023-11-14 22:13:20 UTC">3 minutes ago</time>"#
            ),
            "{li}"
        );
        assert!(li.contains("updated <time datetime=\"2023-11-14T22:14:50.000Z\""), "{li}");
        assert!(
            li.contains(r#"<li><a href="?feed=f&amp;order=-modified&amp;category=a%26b">a&amp;b</a></li>"#),
            "{li}"
        );
        assert!(li.contains(r#"<div class="content html"><p>Hi</p></div>"#), "{li}");
        let gone = Item { payload: Payload::Tombstone { atom_ref: "urn:x".into(), when: 5 }, ..i };
        let li = item(now, &c, "f", &gone, &Cursor { t: 1, o: 0, c: 2 });
        assert!(
            li.contains("class=\"item retracted\"") && li.contains("Retracted: <span class=\"id\">i&quot;1</span>")
        );
    }

    fn reader_with<'a>(choice: &'a Choice, feeds: &'a [FeedSummary], shelf: Option<Shelf<'a>>) -> String {
        page(&Reader { nonce: "n0nce", now: 1_700_000_000_000, feeds, choice, feed: Some("f"), shelf, error: None })
    }

    #[test]
    fn the_page_has_the_form_the_links_and_paging() {
        let feeds = [
            FeedSummary { name: "f".into(), title: "The <F>".into() },
            FeedSummary { name: "g".into(), title: "G".into() },
        ];
        let c = Choice { feed: Some("f".into()), author: Some("ann".into()), ..Choice::default() };
        let items = vec![entry("new", "<title>Newest</title>"), entry("old", "<title>Older</title>")];
        let cursors = vec![Cursor { t: 2, o: 0, c: 1 }, Cursor { t: 1, o: 0, c: 1 }];
        let shelf = |order: Order, older: Option<Cursor>, newest: bool| Shelf {
            feed: "f",
            title: "The <F>",
            order,
            follow: Follow::new("http://h/feeds/f/?author=ann", "http://h/hub", "feeds.h", "f?author=ann"),
            page: Page { items: items.clone(), cursors: cursors.clone(), count: 7, ..Page::default() },
            older,
            newest,
            stream: Some("http://h/feeds/f/?author=ann&since=cursor%3A2_0_1".into()),
        };
        let html = reader_with(&c, &feeds, Some(shelf(Order::NEWEST_FIRST, Some(cursors[1]), true)));
        assert!(html.contains("<title>Newest · The &lt;F&gt;</title>"), "{html}");
        assert!(html.contains(r#"<option value="f" selected>The &lt;F&gt;</option><option value="g">G</option>"#));
        assert!(html.contains(r#"<option value="-created" selected>Newest first</option>"#));
        assert!(html.contains(
            r#"<label for="author">Author</label><input id="author" name="author" list="author-seen" value="ann""#
        ));
        assert!(html.contains(
            r#"<datalist id="category-seen"><option value="a&amp;b"></option><option value="rust"></option>"#
        ));
        assert!(html.contains(
            r#"<a href="http://h/feeds/f/?author=ann&amp;format=atom" type="application/atom+xml">Atom</a>"#
        ));
        assert!(html.contains(r#"href="http://h/feeds/f/?author=ann&amp;format=json-feed""#));
        assert!(
            html.contains(
                r#"<a href="xmpp:feeds.h?pubsub;action=subscribe;node=f%3Fauthor%3Dann" class="xmpp">XMPP</a>"#
            )
        );
        assert!(html.contains(r#"<p class="about">7 items · Newest first (by publication) · by ann</p>"#), "{html}");
        assert!(html.contains(r#"data-stream="http://h/feeds/f/?author=ann&amp;since=cursor%3A2_0_1""#));
        assert!(html.contains(r#"data-item="?feed=f&amp;author=ann&amp;item=""#));
        assert!(html.contains(r#"<style nonce="n0nce">"#) && html.contains(r#"<script nonce="n0nce">"#));
        // Newest first: the older link follows the list and carries the oldest item's cursor.
        let older = r#"<a class="older" href="?feed=f&amp;author=ann&amp;before=1_0_1">Older items</a>"#;
        assert!(html.find(older).unwrap() > html.find("</ol>").unwrap(), "{html}");
        assert!(!html.contains("class=\"newest\""));
        // Oldest first: above it; an older page links back to the newest items and names no item in its title.
        let html = reader_with(&c, &feeds, Some(shelf(Order::CREATED, None, false)));
        assert!(html.find("class=\"paging\"").unwrap() < html.find("<ol").unwrap());
        assert!(
            html.contains("The first item of this view is shown.")
                && html.contains(r#"<a class="newest" href="?feed=f&amp;author=ann">"#)
        );
        assert!(html.contains("<title>The &lt;F&gt; · smartfeeds</title>"));
        // No view: the form alone.
        let html = reader_with(&c, &[], None);
        assert!(html.contains(r#"<option value="f" selected>f</option>"#) && !html.contains("<ol"));
    }
}
