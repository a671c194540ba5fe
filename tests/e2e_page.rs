//! End to end, the page at `BASE/` (a small feed reader): the real binary with `[http]`, a
//! real XMPP server beside it, a plain HTTP client for the page as it reads with JavaScript
//! off, and headless Chromium (Debian package `chromium`) driven through the DevTools
//! protocol for the page with its script: content shown and sanitised (markup in an entry
//! never runs), older items reached by links and in place, a new item arriving live, the
//! view's links answering, and screenshots at a phone's and a desktop's width written to
//! `target/page-screenshots/` for review.

use futures::{SinkExt, StreamExt};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use testkit::http::{BOT, HttpFixture, http_table, put_entry};
use testkit::process::free_port;
use testkit::push::{next_push, subscribe};
use testkit::server::COMPONENT_DOMAIN;
use testkit::smartfeeds::{closed_feed, titled_feed};
use testkit::{Client, Shared};
use tokio_tungstenite::tungstenite::Message;

const ATOM: &str = "http://www.w3.org/2005/Atom";
/// What a script that got through would do: rename the tab, add an element, set a global.
const PWN: &str = "document.title='pwned';window.pwned=1;document.body.appendChild(Object.assign(document.createElement('p'),{id:'pwned'}))";

static SHARED: Shared<HttpFixture> = Shared::new();

fn shared() -> &'static HttpFixture {
    SHARED.get_or_start(|| {
        HttpFixture::start(|port| {
            let mut tables = http_table(port, "", &["bot"]) + &closed_feed("secret", &["alice@localhost"]);
            for (name, title) in [
                ("reader", "Reader"),
                ("journal", "Smart feeds journal"),
                ("older", "Older"),
                ("live", "Live"),
                ("hostile", "Hostile"),
                ("links", "Links"),
            ] {
                tables.push_str(&titled_feed(name, title));
            }
            tables
        })
    })
}

fn url(path: &str) -> String {
    shared().url(path)
}

fn http() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("a client")
}

/// An Atom entry written now: a title, authors, categories and the `<content>` (or nothing)
/// as written. The page shows an entry's own `updated`, so "just now".
fn atom(title: &str, authors: &[&str], categories: &[&str], content: &str) -> String {
    let mut s = format!("<entry xmlns=\"{ATOM}\"><title>{}</title>", esc(title));
    for a in authors {
        s.push_str(&format!("<author><name>{}</name></author>", esc(a)));
    }
    for c in categories {
        s.push_str(&format!("<category term=\"{}\"/>", esc(c)));
    }
    s.push_str(content);
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    s.push_str(&format!("<updated>{now}</updated></entry>"));
    s
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// An HTML attribute's value, as written into the page, read back.
fn unesc(s: &str) -> String {
    s.replace("&quot;", "\"").replace("&apos;", "'").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
}

async fn put(feed: &str, id: &str, entry: &str) {
    let res = put_entry(&http(), &shared().base, feed, id, BOT, entry).await.expect("PUT");
    assert_eq!(res.status(), StatusCode::OK, "PUT {feed}/{id}: {}", res.text().await.unwrap_or_default());
}

/// The page at `path_and_query`, as a browser without JavaScript gets it: status and HTML.
async fn page(path_and_query: &str) -> (StatusCode, String) {
    let res = http().get(url(path_and_query)).header("accept", "text/html").send().await.expect("GET the page");
    let status = res.status();
    if status == StatusCode::OK {
        let ctype = res.headers()["content-type"].to_str().unwrap().to_string();
        assert_eq!(ctype, "text/html; charset=utf-8");
        let csp = res.headers()["content-security-policy"].to_str().unwrap().to_string();
        assert!(csp.contains("script-src 'nonce-") && csp.contains("default-src 'none'"), "{csp}");
    }
    (status, res.text().await.unwrap())
}

/// Every value of `attr="…"` in `html`, in order.
fn attrs(html: &str, attr: &str) -> Vec<String> {
    let needle = format!(" {attr}=\"");
    html.match_indices(&needle)
        .map(|(at, _)| {
            let rest = &html[at + needle.len()..];
            unesc(&rest[..rest.find('"').unwrap()])
        })
        .collect()
}

/// The `href` of the first `<a>` whose opening tag contains `marker`.
fn href(html: &str, marker: &str) -> Option<String> {
    html.match_indices("<a ")
        .map(|(at, _)| &html[at..at + html[at..].find('>').unwrap()])
        .find(|tag| tag.contains(marker))
        .map(|tag| {
            let rest = &tag[tag.find("href=\"").unwrap() + 6..];
            unesc(&rest[..rest.find('"').unwrap()])
        })
}

/// The ids of the items a page shows, in order.
fn item_ids(html: &str) -> Vec<String> {
    attrs(html, "data-id")
}

#[tokio::test]
async fn the_page_reads_with_javascript_off_and_sanitises_html() {
    shared();
    put(
        "reader",
        "text",
        &atom("Plain words", &["ann"], &["notes"], "<content>if a &lt; b &amp;&amp; c then &lt;script&gt;</content>"),
    )
    .await;
    let dirty = format!(
        "<p>Hello <b>bold</b> <a href=\"https://example.com/x\">link</a> <a href=\"javascript:{PWN}\">js</a></p>\
         <script>{PWN}</script><img src=\"x\" onerror=\"{PWN}\"><iframe src=\"https://example.com/\"></iframe>"
    );
    let entry =
        atom("HTML content", &["bob"], &["rust", "web"], &format!("<content type=\"html\">{}</content>", esc(&dirty)));
    put("reader", "html", &entry).await;
    let xhtml = format!(
        "<content type=\"xhtml\"><div xmlns=\"http://www.w3.org/1999/xhtml\"><p>An <em>xhtml</em> body</p>\
         <script>{PWN}</script><p onclick=\"{PWN}\">click</p></div></content>"
    );
    put("reader", "xhtml", &atom("XHTML content", &["ann"], &[], &xhtml)).await;

    let (status, html) = page("/?feed=reader").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(item_ids(&html), ["xhtml", "html", "text"], "newest first");
    // Title, author, time (in words, exact on hover), categories, content.
    assert!(html.contains("<h3>HTML content</h3>"), "{html}");
    assert!(html.contains(r#"by <a href="?feed=reader&amp;author=bob">bob</a>"#), "{html}");
    assert!(html.contains(r#"<time datetime=""#) && html.contains(r#" UTC">just now</time>"#), "{html}");
    assert!(html.contains(r#"<a href="?feed=reader&amp;category=rust">rust</a>"#), "{html}");
    assert!(html.contains("<p>Hello <b>bold</b>"), "{html}");
    assert!(html.contains(r#"<a href="https://example.com/x" rel="noopener noreferrer nofollow">link</a>"#), "{html}");
    assert!(html.contains("<p>An <em>xhtml</em> body</p>"), "{html}");
    // Text is text: its markup is shown, escaped.
    assert!(html.contains("if a &lt; b &amp;&amp; c then &lt;script&gt;"), "{html}");
    // Nothing of the markup that could run is left: one script, the page's own, after the items.
    assert_eq!(html.matches("<script").count(), 1, "{html}");
    let shown = &html[..html.find("<script nonce=").expect("the page's script")];
    for gone in ["onerror", "onclick", "javascript:", "<iframe", "pwned"] {
        assert!(!shown.contains(gone), "{gone} reached the page");
    }
    // The form: the feeds to pick from and the view's parameters, labelled.
    for field in ["feed", "order", "author", "category"] {
        assert!(
            html.contains(&format!(r#"<label for="{field}">"#))
                && html.contains(&format!(r#" id="{field}" name="{field}""#))
        );
    }
    assert!(html.contains(r#"<option value="reader" selected>Reader</option>"#));
    assert!(!html.contains(r#"<option value="secret""#), "anonymous visitors are not offered the whitelist feed");

    // A view chosen through the form (its empty fields are no filter).
    let (status, html) = page("/?feed=reader&order=created&author=ann&category=").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(item_ids(&html), ["text", "xhtml"], "oldest first, ann's only");
    assert!(html.contains(r#"<option value="created" selected>Oldest first</option>"#));

    // What cannot be shown says why, on the page.
    for (query, status, text) in [
        ("/?feed=nothing-here", StatusCode::NOT_FOUND, "no such feed"),
        ("/?feed=reader&order=sideways", StatusCode::BAD_REQUEST, "order"),
        ("/?feed=reader&before=nope", StatusCode::BAD_REQUEST, "before"),
        ("/?feed=secret", StatusCode::UNAUTHORIZED, "token"),
    ] {
        let (s, html) = page(query).await;
        assert_eq!(s, status, "{query}");
        assert!(html.contains("role=\"alert\"") && html.contains(text), "{query}: {html}");
        assert!(html.contains("<form class=\"choose\""), "{query}: the form is still there");
    }
}

/// Follows the server-rendered "Older items" links from the first page of `query` to the
/// end; returns every id seen, in page order.
async fn walk_older(query: &str) -> Vec<String> {
    let mut seen = Vec::new();
    let mut next = Some(query.to_string());
    let mut pages = 0;
    while let Some(q) = next {
        pages += 1;
        assert!(pages < 20, "too many pages for {query}");
        let (status, html) = page(&format!("/{q}")).await;
        assert_eq!(status, StatusCode::OK, "{q}: {html}");
        let ids = item_ids(&html);
        assert!(!ids.is_empty(), "{q}: an older page with no items");
        assert!(ids.len() <= 20, "{q}: {} items on a page", ids.len());
        next = href(&html, "class=\"older\"");
        match &next {
            Some(n) => assert!(n.starts_with("?feed=older") && n.contains("&before="), "{n}"),
            None => assert!(html.contains("The first item of this view is shown."), "{q}: {html}"),
        }
        if pages > 1 {
            assert!(href(&html, "class=\"newest\"").is_some(), "an older page links back to the newest items");
        }
        // Oldest first: an older page is above, so it comes first.
        if q.contains("order=created") || q.contains("order=modified") {
            seen.splice(0..0, ids);
        } else {
            seen.extend(ids);
        }
    }
    seen
}

const OLDER: usize = 45;

async fn fill_older() {
    static FILLED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    FILLED
        .get_or_init(|| async {
            for k in 0..OLDER {
                let author = if k % 3 == 0 { "ann" } else { "bob" };
                put(
                    "older",
                    &format!("e{k:03}"),
                    &atom(&format!("Entry {k}"), &[author], &[], "<content>body</content>"),
                )
                .await;
            }
            // A change moves e005 to the end of the modified order.
            put("older", "e005", &atom("Entry 5, changed", &["bob"], &[], "")).await;
        })
        .await;
}

#[tokio::test]
async fn older_links_reach_the_first_item_with_javascript_off() {
    shared();
    fill_older().await;
    let created: Vec<String> = (0..OLDER).map(|k| format!("e{k:03}")).collect();
    let newest_first: Vec<String> = created.iter().rev().cloned().collect();
    assert_eq!(walk_older("?feed=older").await, newest_first);
    assert_eq!(walk_older("?feed=older&order=-created").await, newest_first);
    assert_eq!(walk_older("?feed=older&order=created").await, created);
    let mut modified: Vec<String> = created.iter().filter(|i| *i != "e005").cloned().collect();
    modified.push("e005".into());
    assert_eq!(walk_older("?feed=older&order=modified").await, modified);
    let anns: Vec<String> = (0..OLDER).rev().filter(|k| k % 3 == 0).map(|k| format!("e{k:03}")).collect();
    assert_eq!(walk_older("?feed=older&author=ann").await, anns);
}

#[tokio::test]
async fn older_items_load_in_place_with_javascript_until_the_first() {
    shared();
    fill_older().await;
    let browser = Browser::start();
    let mut tab = browser.tab().await;
    for (query, first_shown) in [("?feed=older", "e044"), ("?feed=older&order=created", "e025")] {
        tab.goto(&url(&format!("/{query}"))).await;
        let first: String =
            serde_json::from_value(tab.eval("document.querySelector('#items > li').dataset.id").await).unwrap();
        assert_eq!(first, first_shown, "{query}: the page starts at the newest end");
        let mut presses = 0;
        while tab.eval("!document.querySelector('li[data-id=\"e000\"]')").await == json!(true) {
            presses += 1;
            assert!(presses <= 5, "{query}: the first item never appeared");
            let before = tab.eval("document.querySelectorAll('#items > li').length").await;
            // Keyboard only: focus the link, press Enter.
            tab.eval("document.querySelector('a.older').focus(); document.activeElement.className").await;
            tab.press_enter().await;
            tab.wait_for(&format!("document.querySelectorAll('#items > li').length > {before}"), "older items loaded")
                .await;
        }
        assert_eq!(presses, 2, "{query}: 45 items, 20 a page");
        let ids: Vec<String> = serde_json::from_value(
            tab.eval("[...document.querySelectorAll('#items > li')].map((li) => li.dataset.id)").await,
        )
        .unwrap();
        let mut expected: Vec<String> = (0..OLDER).map(|k| format!("e{k:03}")).collect();
        if !query.contains("order=created") {
            expected.reverse();
        }
        assert_eq!(ids, expected, "{query}: every item once, in view order");
        // In place: the page's address did not change, no older link is left, and the
        // keyboard's focus is on the first item loaded.
        assert_eq!(tab.eval("location.search").await, json!(query));
        assert_eq!(tab.eval("document.querySelectorAll('a.older').length").await, json!(0));
        let focused = tab.eval("document.activeElement.closest('li').dataset.id").await;
        assert_eq!(focused, json!("e004"), "{query}: focus on the last page's item nearest the ones shown before");
        assert!(tab.eval("document.getElementById('status').textContent").await.as_str().unwrap().contains("loaded"));
    }
}

#[tokio::test]
async fn a_new_item_arrives_live_and_markup_in_it_never_runs() {
    shared();
    put("live", "first", &atom("Already there", &["ann"], &[], "<content>old</content>")).await;
    // An HTML title keeps its text only; HTML content loses what could run.
    let h1 = format!(
        "<entry xmlns=\"{ATOM}\"><title type=\"html\">{}</title><content type=\"html\">{}</content></entry>",
        esc(&format!("<script>{PWN}</script>Hostile <i>title</i>")),
        esc(&format!("<img src=x onerror=\"{PWN}\"><script>{PWN}</script><b>kept</b>"))
    );
    put("hostile", "h1", &h1).await;
    let browser = Browser::start();
    let mut tab = browser.tab().await;

    // Live: the view's event stream brings the item, the server renders it, it goes on top.
    tab.goto(&url("/?feed=live&order=-modified")).await;
    tab.wait_for("document.documentElement.dataset.live === 'open'", "the event stream open").await;
    let content = format!("<content type=\"html\">{}</content>", esc("<p>Fresh <b>news</b></p>"));
    put("live", "fresh", &atom("Arrived while watching", &["ann"], &["now"], &content)).await;
    tab.wait_for("document.querySelector('#items > li').dataset.id === 'fresh'", "the live item on top").await;
    assert_eq!(tab.eval("document.querySelector('#items > li .content b').textContent").await, json!("news"));
    assert_eq!(tab.eval("document.querySelector('#items > li time').textContent").await, json!("just now"));
    assert!(tab.eval("document.title").await.as_str().unwrap().starts_with("Arrived while watching"));
    // A retraction is a change: in the order of changes it moves to the top, as a tombstone.
    let res = http().delete(url("/feeds/live/items/first")).bearer_auth(BOT).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    tab.wait_for("document.querySelector('#items > li').classList.contains('retracted')", "the retraction").await;
    let ids = tab.eval("[...document.querySelectorAll('#items > li')].map((li) => li.dataset.id).join()").await;
    assert_eq!(ids, json!("first,fresh"));

    // Hostile markup, in the first render and in a live item: shown as text or dropped.
    tab.goto(&url("/?feed=hostile")).await;
    tab.wait_for("document.documentElement.dataset.live === 'open'", "the event stream open").await;
    put(
        "hostile",
        "h2",
        &atom(
            "Second",
            &[],
            &[],
            &format!(
                "<content type=\"xhtml\"><div xmlns=\"http://www.w3.org/1999/xhtml\"><svg><script>{PWN}</script></svg>\
                 <a href=\"javascript:{PWN}\">x</a><img src=\"https://127.0.0.1:9/\" onerror=\"{PWN}\"/><b>also kept</b></div></content>"
            ),
        ),
    )
    .await;
    tab.wait_for("document.querySelector('#items > li').dataset.id === 'h2'", "the live hostile item").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(tab.eval("typeof window.pwned").await, json!("undefined"), "a script ran");
    assert_eq!(tab.eval("document.getElementById('pwned')").await, json!(null), "a script ran");
    assert!(!tab.eval("document.title").await.as_str().unwrap().contains("pwned"));
    let left = tab.eval("document.querySelectorAll('#items script, #items [onerror], #items [onclick], #items a[href^=\"javascript\"]').length").await;
    assert_eq!(left, json!(0), "markup that could run is in the page");
    assert_eq!(
        tab.eval("[...document.querySelectorAll('#items b')].map((b) => b.textContent).join()").await,
        json!("also kept,kept")
    );
    assert_eq!(tab.eval("document.querySelector('li[data-id=\"h1\"] h3').textContent").await, json!("Hostile title"));
}

#[tokio::test]
async fn the_view_links_answer_in_their_formats_and_name_the_node() {
    let sh = shared();
    put("links", "l1", &atom("One", &["ann"], &["x y"], "<content>one</content>")).await;
    let (status, html) = page("/?feed=links&order=-modified&author=ann&category=x+y").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(item_ids(&html), ["l1"]);
    let feed_url = url("/feeds/links/?order=-modified&author=ann&category=x%20y");
    let atom_url = href(&html, "type=\"application/atom+xml\"").expect("an Atom link");
    assert_eq!(atom_url, format!("{feed_url}&format=atom"));
    let json_url = href(&html, "type=\"application/feed+json\"").expect("a JSON Feed link");
    assert_eq!(json_url, format!("{feed_url}&format=json-feed"));
    for (link, ctype) in [(&atom_url, "application/atom+xml"), (&json_url, "application/feed+json")] {
        let res = http().get(link).send().await.unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{link}");
        assert!(res.headers()["content-type"].to_str().unwrap().starts_with(ctype), "{link}");
        assert!(res.text().await.unwrap().contains("One"), "{link}: the view's item");
    }
    assert!(html.contains(&format!(
        r#"<link rel="alternate" type="application/atom+xml" title="Links (Atom)" href="{}">"#,
        esc(&atom_url)
    )));
    assert!(html.contains(&format!("<dt>WebSub hub</dt><dd><code>{}</code></dd>", url("/hub"))));
    assert!(html.contains(&format!("<dt>Topic</dt><dd><code>{}</code></dd>", esc(&feed_url))));
    let xmpp = href(&html, "class=\"xmpp\"").expect("an XMPP link");
    assert_eq!(
        xmpp,
        format!(
            "xmpp:{COMPONENT_DOMAIN}?pubsub;action=subscribe;node=links%3Forder%3D-modified%26author%3Dann%26category%3Dx%2520y"
        )
    );
    // The node the URI names is the view: a subscription to it gets the view's next change.
    let node = xmpp.split_once(";node=").unwrap().1;
    // (Percent-decoded; the value has no '+'.)
    let node = url::form_urlencoded::parse(format!("n={node}").as_bytes()).next().unwrap().1.into_owned();
    let mut alice: Client = sh.fx.server.login("alice").await;
    let me = alice.bare_jid().to_string();
    subscribe(&mut alice, &node, &me).await;
    put("links", "l2", &atom("Two", &["ann"], &["x y"], "")).await;
    assert_eq!(next_push(&mut alice, Duration::from_secs(5)).await.item_id(), "l2");
    alice.close().await;
}

#[tokio::test]
async fn screenshots_at_a_phone_and_a_desktop_width() {
    shared();
    let html = |h: &str| format!("<content type=\"html\">{}</content>", esc(h));
    put(
        "journal",
        "cursors",
        &atom(
            "Why cursors survive restarts",
            &["bob"],
            &["design"],
            "<content>A cursor names a time, an offset and a checksum of the ids at that time.\n\
             Nothing in it depends on the process that handed it out.</content>",
        ),
    )
    .await;
    put(
        "journal",
        "live",
        &atom(
            "Live updates over XMPP and the web",
            &["ann"],
            &["xmpp", "websub"],
            &html(
                "<p>Every change reaches XMPP subscribers, WebSub callbacks and open event streams in commit order.</p>\
                 <blockquote>One store, two faces, the same rules.</blockquote>",
            ),
        ),
    )
    .await;
    put(
        "journal",
        "reader",
        &atom(
            "Release notes: pages, cursors and a reader",
            &["ann"],
            &["release", "http"],
            &html(
                "<p>The page at <code>BASE/</code> is now a <b>small feed reader</b>: choose a feed and a view, \
                 read its items, page back through its history, and see new items arrive live.</p>\
                 <ul><li>Atom and JSON Feed links</li><li>WebSub and XMPP subscriptions</li></ul>",
            ),
        ),
    )
    .await;
    let dir = target_dir().join("page-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, size) in [("phone", "390,844"), ("desktop", "1280,900")] {
        let path = dir.join(format!("{name}.png"));
        let _ = std::fs::remove_file(&path);
        let profile = tempfile::tempdir().unwrap();
        let out = Command::new(chromium())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--hide-scrollbars",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(format!("--screenshot={}", path.display()))
            .arg(format!("--window-size={size}"))
            .arg(url("/?feed=journal"))
            .output()
            .expect("chromium runs");
        let png = std::fs::read(&path).unwrap_or_else(|_| {
            panic!("no screenshot at {}: {}", path.display(), String::from_utf8_lossy(&out.stderr))
        });
        assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "{}: {} bytes", path.display(), png.len());
        eprintln!("screenshot: {}", path.display());
    }
}

/// Where cargo builds: `CARGO_TARGET_DIR`, else `target/` in the workspace.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"))
}

/// The browser's executable; panics naming the Debian package when there is none.
fn chromium() -> &'static str {
    ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success()))
        .expect("chromium is not installed: install the Debian package `chromium` (apt-get install chromium)")
}

/// Headless Chromium with its DevTools port open; killed on drop.
struct Browser {
    child: Child,
    port: u16,
    _profile: tempfile::TempDir,
}

impl Browser {
    fn start() -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let port = free_port();
        let child = Command::new(chromium())
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"])
            .args(["--window-size=1280,900", "--remote-allow-origins=*"])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(format!("--remote-debugging-port={port}"))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromium starts");
        Browser { child, port, _profile: profile }
    }

    /// The browser's page, driven over its DevTools websocket.
    async fn tab(&self) -> Tab {
        let deadline = Instant::now() + Duration::from_secs(20);
        let ws = loop {
            assert!(Instant::now() < deadline, "chromium's DevTools never listed a page");
            let list = http().get(format!("http://127.0.0.1:{}/json/list", self.port)).send().await;
            if let Ok(res) = list
                && let Ok(pages) = res.json::<Value>().await
                && let Some(ws) = pages
                    .as_array()
                    .and_then(|p| p.iter().find(|p| p["type"] == "page"))
                    .and_then(|p| p["webSocketDebuggerUrl"].as_str())
            {
                break ws.to_string();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let (ws, _) = tokio_tungstenite::connect_async(ws.as_str()).await.expect("the DevTools websocket");
        Tab { ws, id: 0 }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Tab {
    ws: tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
    id: u64,
}

impl Tab {
    /// One DevTools command; its result.
    async fn call(&mut self, method: &str, params: Value) -> Value {
        self.id += 1;
        let id = self.id;
        let msg = json!({ "id": id, "method": method, "params": params }).to_string();
        self.ws.send(Message::Text(msg.into())).await.expect("send to DevTools");
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(30), self.ws.next())
                .await
                .unwrap_or_else(|_| panic!("DevTools did not answer {method}"))
                .expect("the DevTools websocket is open")
                .expect("a DevTools message");
            let Message::Text(text) = msg else { continue };
            let v: Value = serde_json::from_str(&text).expect("DevTools JSON");
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    /// The value of a JavaScript expression in the page (promises awaited).
    async fn eval(&mut self, expr: &str) -> Value {
        let r = self
            .call("Runtime.evaluate", json!({ "expression": expr, "returnByValue": true, "awaitPromise": true }))
            .await;
        assert!(r.get("exceptionDetails").is_none(), "{expr}: {r}");
        r["result"].get("value").cloned().unwrap_or(Value::Null)
    }

    /// Loads `url` and waits until its document is complete.
    async fn goto(&mut self, url: &str) {
        // The old document has the mark, the new one not.
        self.eval("window.__leaving = true").await;
        self.call("Page.navigate", json!({ "url": url })).await;
        self.wait_for("!window.__leaving && document.readyState === 'complete'", url).await;
    }

    /// Waits until `expr` is true in the page (20 s at most).
    async fn wait_for(&mut self, expr: &str, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if self.eval(&format!("(() => {{ try {{ return !!({expr}); }} catch (e) {{ return false; }} }})()")).await
                == json!(true)
            {
                return;
            }
            if Instant::now() > deadline {
                let shown = self.eval("document.body ? document.body.innerText.slice(0, 2000) : ''").await;
                panic!("never {what} ({expr}); the page shows: {shown}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Enter, as a keyboard presses it, on whatever has the focus.
    async fn press_enter(&mut self) {
        for kind in ["keyDown", "keyUp"] {
            let mut params = json!({ "type": kind, "key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13 });
            if kind == "keyDown" {
                params["text"] = json!("\r");
            }
            self.call("Input.dispatchKeyEvent", params).await;
        }
    }
}
