//! End to end, feeds from the web (SPEC §13): the real binary, a real XMPP server, and a web
//! server of feed documents the test controls on loopback (`crates/testkit/src/source_server.rs`;
//! `[sources] allow_private = true` because it is on 127.0.0.1). Atom, RSS 2.0 and JSON Feed
//! sources pulled over both faces; the delta pushed over XMPP, SSE and WebSub, and nothing
//! pushed for unchanged fetches; archives imported on a first fetch and walked back after a
//! burst; pings; bad sources logged, retried or stopped while everything else goes on; a
//! failing source's backoff, doubling from its interval, and its recovery; a loopback source
//! refused without `allow_private`; another smartfeeds' feed followed by its feed URL, its
//! pages and its hub, with the SHIM chain unbroken for the follower's XMPP subscribers.

use serde_json::Value;
use std::time::{Duration, Instant};
use testkit::dns::Dns;
use testkit::http::{BOT, HttpFixture, http_table, put_entry, sse_events};
use testkit::pubsub::{entry, walk};
use testkit::push::{assert_no_message, next_push, subscribe as xmpp_subscribe};
use testkit::smartfeeds::bot_feeds;
use testkit::smartfeeds::{assert_refused, check_config, run_bin};
use testkit::source_server::{Doc, Hit, SourceServer};
use testkit::standalone::Standalone;
use testkit::websub::{Callback, entry_ids, subscribed};
use testkit::{Client, Shared};

struct Sources {
    fx: HttpFixture,
    web: SourceServer,
    /// `[metrics] listen` port.
    metrics: u16,
    /// Another smartfeeds, HTTP only: its feed `up` is the source of the feed `followed`.
    up: Standalone,
}

static SHARED: Shared<Sources> = Shared::new();

/// The interval of the source whose backoff is watched, seconds: the least allowed.
const BACKOFF_INTERVAL: u64 = 30;

/// One source entry: `n` orders them in time (day `n` of 2024), newest first in documents.
struct E<'a> {
    n: u32,
    title: &'a str,
    author: &'a str,
    categories: &'a [&'a str],
}

fn atom_entry(e: &E) -> String {
    let cats: String = e.categories.iter().map(|c| format!("<category term='{c}'/>")).collect();
    format!(
        "<entry><id>urn:src:{}</id><title>{}</title><link href='https://blog.example/{}'/>\
         <published>2024-01-{:02}T10:00:00Z</published><updated>2024-01-{:02}T10:00:00Z</updated>\
         <author><name>{}</name></author>{cats}<content type='html'>&lt;p&gt;{}&lt;/p&gt;</content></entry>",
        e.n, e.title, e.n, e.n, e.n, e.author, e.title
    )
}

/// An Atom document of `entries` (given in any order) with extra feed-level children.
fn atom(entries: &[String], extra: &str) -> String {
    format!(
        "<?xml version='1.0' encoding='utf-8'?>\n<feed xmlns='http://www.w3.org/2005/Atom' \
         xmlns:at='http://purl.org/atompub/tombstones/1.0'><title>Source</title><id>urn:src</id>\
         <updated>2024-02-01T00:00:00Z</updated>{extra}{}</feed>",
        entries.concat()
    )
}

fn rss(entries: &[E]) -> String {
    let items: String = entries
        .iter()
        .map(|e| {
            let cats: String = e.categories.iter().map(|c| format!("<category>{c}</category>")).collect();
            format!(
                "<item><title>{}</title><guid isPermaLink='false'>rss-{}</guid><link>https://blog.example/r{}</link>\
                 <pubDate>{} Jan 2024 10:00:00 GMT</pubDate><dc:creator>{}</dc:creator>{cats}\
                 <description>&lt;p&gt;{}&lt;/p&gt;</description></item>",
                e.title, e.n, e.n, e.n, e.author, e.title
            )
        })
        .collect();
    format!(
        "<?xml version='1.0'?><rss version='2.0' xmlns:dc='http://purl.org/dc/elements/1.1/'><channel>\
         <title>RSS source</title><link>https://blog.example/</link><description>d</description>{items}</channel></rss>"
    )
}

fn json_feed(entries: &[E]) -> String {
    let items: Vec<Value> = entries
        .iter()
        .map(|e| {
            serde_json::json!({
                "id": format!("json-{}", e.n), "title": e.title, "url": format!("https://blog.example/j{}", e.n),
                "content_html": format!("<p>{}</p>", e.title),
                "date_published": format!("2024-01-{:02}T10:00:00Z", e.n),
                "authors": [{"name": e.author}], "tags": e.categories,
            })
        })
        .collect();
    serde_json::json!({"version": "https://jsonfeed.org/version/1.1", "title": "JSON source", "items": items})
        .to_string()
}

/// Three entries, written newest first except one, as feeds in the wild are.
const THREE: [E<'static>; 3] = [
    E { n: 3, title: "Third post", author: "Carol", categories: &["rust", "web"] },
    E { n: 1, title: "First post", author: "Alice", categories: &["news"] },
    E { n: 2, title: "Second post", author: "Bob", categories: &[] },
];

fn sources() -> &'static Sources {
    SHARED.get_or_start(|| {
        let up = upstream();
        let web = SourceServer::start();
        web.set("/atom.xml", Doc::atom(&atom(&THREE.iter().map(atom_entry).collect::<Vec<_>>(), "")));
        web.set("/rss.xml", Doc::typed("application/rss+xml", &rss(&THREE)));
        web.set("/feed.json", Doc::typed("application/feed+json", &json_feed(&THREE)));
        let two: Vec<String> = THREE[1..].iter().map(atom_entry).collect();
        web.set("/delta.xml", Doc::atom(&atom(&two, "")));
        web.set("/pinged.xml", Doc::atom(&atom(&two, "")));
        web.set("/burst.xml", Doc::atom(&atom(&[atom_entry(&E { n: 1, title: "b1", author: "A", categories: &[] })], "")));
        history(&web);
        bad_sources(&web);
        let configured = [
            ("atom", "/atom.xml"),
            ("rss", "/rss.xml"),
            ("json", "/feed.json"),
            ("delta", "/delta.xml"),
            ("pinged", "/pinged.xml"),
            ("history", "/history/"),
            ("burst", "/burst.xml"),
            ("b404", "/missing.xml"),
            ("b500", "/broken.xml"),
            ("bslow", "/slow.xml"),
            ("bmalformed", "/malformed.xml"),
            ("bbig", "/big.xml"),
            ("bloop", "/loop1"),
            ("bgone", "/gone.xml"),
            ("moved", "/old.xml"),
        ];
        let mut feeds: String = configured
            .iter()
            .map(|(name, path)| {
                format!("[[feeds]]\nname = \"{name}\"\nsource = \"{}\"\nsource_interval = 3600\n", web.url(path))
            })
            .collect();
        // The source whose backoff is watched: the shortest interval allowed.
        feeds.push_str(&format!(
            "[[feeds]]\nname = \"backoff\"\nsource = \"{}\"\nsource_interval = {BACKOFF_INTERVAL}\n",
            web.url("/backoff.xml")
        ));
        feeds.push_str(&format!(
            "[[feeds]]\nname = \"followed\"\nsource = \"{}/feeds/up/\"\nsource_interval = 3600\n",
            up.base
        ));
        let (fx, metrics) = HttpFixture::start_with_metrics(|port, metrics| {
            format!(
                "{}[metrics]\nlisten = \"127.0.0.1:{metrics}\"\n[hub]\nallow_private_callbacks = true\n[sources]\nallow_private = true\ntimeout = 2\n\
                 max_bytes = 200000\n{feeds}{}",
                // Its own address, for the callback URL it gives the hub of `followed`'s source.
                http_table(port, &format!("base_url = \"http://127.0.0.1:{port}\"\n"), &["bot", "alice"]),
                bot_feeds(&["plain"])
            )
        });
        Sources { fx, web, metrics, up }
    })
}

/// Another smartfeeds (HTTP only) whose feed `up` holds the five entries `old1` to `old5`,
/// served in pages of two, its hub delivering to loopback callbacks.
fn upstream() -> Standalone {
    let up = Standalone::start("", &["up"], "[hub]\nallow_private_callbacks = true\n[limits]\ndefault_page = 2\n");
    let base = up.base.clone();
    // The fixture starts outside any test's runtime: a runtime of its own for the writes.
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        rt.block_on(async {
            for n in 1..=5 {
                put_upstream(&base, &format!("old{n}")).await;
            }
        })
    })
    .join()
    .expect("the upstream entries written");
    up
}

/// Publishes the entry `id` (titled `id`) to the upstream feed `up`.
async fn put_upstream(base: &str, id: &str) {
    let e = entry(&format!("urn:up:{id}"), id, Some("Upstream"), &[]);
    let res = put_entry(&http(), base, "up", id, BOT, &e).await.unwrap();
    assert_eq!(res.status(), 200, "upstream publish of {id}");
}

fn url(path: &str) -> String {
    sources().fx.url(path)
}

fn http() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("a client")
}

async fn get_json(path: &str) -> Value {
    let res = http().get(url(path)).header("accept", "application/json").send().await.expect("GET");
    assert_eq!(res.status(), 200, "GET {path}");
    res.json().await.expect("JSON")
}

/// Waits until the view at `path` holds `n` items; returns its JSON.
async fn until_items(path: &str, n: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let doc = get_json(path).await;
        if doc["totalItems"].as_u64() == Some(n) {
            return doc;
        }
        assert!(Instant::now() < deadline, "{path} did not reach {n} items: {doc}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn field<'a>(items: &'a Value, key: &str) -> Vec<&'a str> {
    items["items"].as_array().expect("items").iter().map(|i| i[key].as_str().unwrap_or("")).collect()
}

/// `POST BASE/hub` with `hub.mode=publish` and each of `urls` as `hub.url`.
async fn ping(urls: &[&str]) -> u16 {
    let mut form = url::form_urlencoded::Serializer::new(String::new());
    form.append_pair("hub.mode", "publish");
    for u in urls {
        form.append_pair("hub.url", u);
    }
    let res = http()
        .post(url("/hub"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form.finish())
        .send()
        .await
        .expect("POST /hub");
    res.status().as_u16()
}

/// Polls until `f` holds (20 s at most).
async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "not within 20 s: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn log() -> String {
    std::fs::read_to_string(sources().fx.fx.feeds.log_path()).unwrap_or_default()
}

#[tokio::test]
async fn atom_rss_and_json_sources_are_pulled_over_http_and_xmpp_in_the_sources_chronology() {
    let sh = sources();
    let mut alice: Client = sh.fx.fx.server.login("alice").await;
    for feed in ["atom", "rss", "json"] {
        let doc = until_items(&format!("/feeds/{feed}/?order=created"), 3).await;
        assert_eq!(field(&doc, "title"), ["First post", "Second post", "Third post"], "{feed}: oldest first");
        let authors: Vec<&str> = doc["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["author"]["displayName"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(authors, ["Alice", "Bob", "Carol"], "{feed}");
        let atom = field(&doc, "atom");
        assert!(atom[0].contains("term=\"news\"") || atom[0].contains("term='news'"), "{feed}: {}", atom[0]);
        assert!(atom[2].contains("rust") && atom[2].contains("web"), "{feed}: {}", atom[2]);
        // The category view finds them: the core read the categories.
        let rust = get_json(&format!("/feeds/{feed}/?category=rust")).await;
        assert_eq!(field(&rust, "title"), ["Third post"], "{feed}");
        // The source's own times are in the stored entries.
        assert!(atom[0].contains("2024-01-01T10:00:00") && atom[2].contains("2024-01-03T10:00:00"), "{feed}: {atom:?}");
        // The same over XMPP.
        let items = walk(&mut alice, &format!("{feed}?order=created"), 2).await;
        let titles: Vec<String> = items.iter().map(|i| i.title().unwrap_or_default()).collect();
        assert_eq!(titles, ["First post", "Second post", "Third post"], "{feed} over XMPP");
        // Item ids are the same whichever face: derived from the source's ids.
        assert_eq!(items.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(), field(&doc, "id"));
    }
    // The Atom source's entries are stored as written: its link and content kept.
    let doc = get_json("/feeds/atom/?order=created").await;
    assert!(field(&doc, "atom")[0].contains("https://blog.example/1"));
    assert!(sh.web.hits("/atom.xml")[0].headers["user-agent"].to_str().unwrap().starts_with("smartfeeds/"));
    alice.close().await;
}

#[tokio::test]
async fn the_delta_is_pushed_once_over_xmpp_sse_and_websub_and_unchanged_fetches_push_nothing() {
    let sh = sources();
    let path = "/delta.xml";
    until_items("/feeds/delta/", 2).await;
    let mut alice: Client = sh.fx.fx.server.login("alice").await;
    let me = alice.bare_jid().to_string();
    // The modified view: where new, edited and deleted entries all arrive.
    xmpp_subscribe(&mut alice, "delta?order=modified", &me).await;
    let cb = Callback::start().await;
    subscribed(&url("/hub"), &url("/feeds/delta/?order=modified"), &cb, &[]).await;
    let mut stream =
        http().get(url("/feeds/delta/?order=modified")).header("accept", "text/event-stream").send().await.unwrap();
    let mut buf = String::new();
    tokio::time::sleep(Duration::from_millis(300)).await;

    // A new entry: pushed once on every face.
    let fourth = E { n: 4, title: "Fourth post", author: "Dan", categories: &["news"] };
    let mut entries: Vec<String> = [&fourth, &THREE[1], &THREE[2]].iter().map(|e| atom_entry(e)).collect();
    sh.web.set(path, Doc::atom(&atom(&entries, "")));
    let before = sh.web.hits(path).len();
    assert_eq!(ping(&[&sh.web.url(path)]).await, 204);
    let push = next_push(&mut alice, Duration::from_secs(10)).await;
    assert_eq!(push.title().as_deref(), Some("Fourth post"));
    let names: Vec<&str> = push.headers.iter().map(|(k, _)| k.as_str()).collect();
    assert!(names.contains(&"TotalItems") && names.contains(&"LastCursor"), "SHIM headers: {names:?}");
    assert_eq!(push.total, Some(3));
    let events = sse_events(&mut stream, &mut buf, 1).await;
    assert_eq!((events[0].1.as_str(), events[0].2["title"].as_str()), ("item", Some("Fourth post")));
    let docs = cb.wait_deliveries(1).await;
    assert_eq!(entry_ids(&docs), [push.item_id().to_string()]);

    // The same document again (a 304 to our If-None-Match), then the same body with a new
    // ETag (a 200): nothing pushed.
    assert_eq!(ping(&[&sh.web.url(path)]).await, 204);
    let hits = sh.web.wait_hits(path, before + 2);
    assert_eq!(hits.last().unwrap().status, 304, "a conditional GET");
    let mut same = Doc::atom(&atom(&entries, ""));
    same.etag = Some("\"another\"".into());
    sh.web.set(path, same);
    assert_eq!(ping(&[&sh.web.url(path)]).await, 204);
    let hits = sh.web.wait_hits(path, before + 3);
    assert_eq!(hits.last().unwrap().status, 200);
    assert_no_message(&mut alice, Duration::from_secs(1), "an unchanged fetch pushes nothing").await;
    assert_eq!(cb.posts().len(), 1, "no WebSub delivery for unchanged fetches");

    // An edited entry is updated: it moves to the end of the modified view.
    let edited = E { title: "First post, edited", ..THREE[1] };
    entries[1] = atom_entry(&edited);
    sh.web.set(path, Doc::atom(&atom(&entries, "")));
    assert_eq!(ping(&[&sh.web.url(path)]).await, 204);
    let push = next_push(&mut alice, Duration::from_secs(10)).await;
    assert_eq!(push.title().as_deref(), Some("First post, edited"));
    let modified = get_json("/feeds/delta/?order=modified").await;
    assert_eq!(field(&modified, "title").last(), Some(&"First post, edited"));
    let created = get_json("/feeds/delta/?order=created").await;
    assert_eq!(field(&created, "title"), ["First post, edited", "Second post", "Fourth post"], "created order kept");
    let events = sse_events(&mut stream, &mut buf, 1).await;
    assert_eq!(events[0].2["title"].as_str(), Some("First post, edited"));

    // An at:deleted-entry retracts: a tombstone.
    let tomb = "<at:deleted-entry ref='urn:src:2' when='2024-01-20T00:00:00Z'/>";
    sh.web.set(path, Doc::atom(&atom(&entries[..2], tomb)));
    assert_eq!(ping(&[&sh.web.url(path)]).await, 204);
    let push = next_push(&mut alice, Duration::from_secs(10)).await;
    assert!(push.is_retract(), "{}", push.raw);
    let events = sse_events(&mut stream, &mut buf, 1).await;
    assert_eq!(events[0].1, "retract");
    let created = get_json("/feeds/delta/?order=created").await;
    let deleted: Vec<bool> = created["items"].as_array().unwrap().iter().map(|i| i["deleted"] == true).collect();
    assert_eq!(deleted, [false, true, false], "the second post is a tombstone");
    let docs = cb.wait_deliveries(3).await;
    assert_eq!(docs.len(), 3, "one WebSub document per change");
    assert_no_message(&mut alice, Duration::from_millis(500), "each change pushed once").await;
    alice.close().await;
}

/// A source of 1,000 entries: a recent document of 100 and nine archived ones before it,
/// linked by `prev-archive`, as RFC 5005 writes them.
fn history(web: &SourceServer) {
    let entry = |n: u32| {
        format!(
            "<entry><id>urn:h:{n}</id><title>h{n}</title><updated>{}</updated></entry>",
            chrono::DateTime::from_timestamp(1_700_000_000 + i64::from(n) * 60, 0).unwrap().to_rfc3339()
        )
    };
    for k in 1..=10u32 {
        let entries: Vec<String> = ((k - 1) * 100 + 1..=k * 100).rev().map(entry).collect();
        let prev = if k > 1 { format!("<link rel='prev-archive' href='/history/{}'/>", k - 1) } else { String::new() };
        let path = if k == 10 { "/history/".to_string() } else { format!("/history/{k}") };
        let archived = if k < 10 { "<fh:archive xmlns:fh='http://purl.org/syndication/history/1.0'/>" } else { "" };
        web.set(&path, Doc::atom(&atom(&entries, &format!("{prev}{archived}"))));
    }
}

#[tokio::test]
async fn a_first_fetch_imports_the_whole_archived_history_oldest_first() {
    let sh = sources();
    let doc = until_items("/feeds/history/?order=created&max=0", 1000).await;
    assert_eq!(doc["totalItems"], 1000);
    let mut alice: Client = sh.fx.fx.server.login("alice").await;
    let items = walk(&mut alice, "history?order=created", 500).await;
    let titles: Vec<String> = items.iter().map(|i| i.title().unwrap_or_default()).collect();
    let want: Vec<String> = (1..=1000).map(|n| format!("h{n}")).collect();
    assert_eq!(titles, want, "every archived entry once, oldest first");
    for k in 1..=9 {
        assert_eq!(sh.web.hits(&format!("/history/{k}")).len(), 1, "archive {k} fetched once");
    }
    alice.close().await;
}

#[tokio::test]
async fn a_burst_that_pushes_the_last_imported_entry_out_is_imported_through_the_walk_back() {
    let sh = sources();
    until_items("/feeds/burst/", 1).await;
    let e = |n: u32| atom_entry(&E { n, title: &format!("b{n}"), author: "A", categories: &[] });
    // Eleven new entries: the recent document holds 10..14, archives 5..9 and 1..4.
    sh.web.set("/burst/1", Doc::atom(&atom(&(1..=4).rev().map(e).collect::<Vec<_>>(), "")));
    let second = atom(&(5..=9).rev().map(e).collect::<Vec<_>>(), "<link rel='prev-archive' href='/burst/1'/>");
    sh.web.set("/burst/2", Doc::atom(&second));
    let recent = atom(&(10..=14).rev().map(e).collect::<Vec<_>>(), "<link rel='prev-archive' href='burst/2'/>");
    sh.web.set("/burst.xml", Doc::atom(&recent));
    assert_eq!(ping(&[&sh.web.url("/burst.xml")]).await, 204);
    let doc = until_items("/feeds/burst/?order=created&max=50", 14).await;
    let want: Vec<String> = (1..=14).map(|n| format!("b{n}")).collect();
    assert_eq!(field(&doc, "title"), want.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(sh.web.hits("/burst/1").len(), 1, "the walk stopped at the document holding b1");
}

#[tokio::test]
async fn a_ping_fetches_at_once_and_pings_during_a_fetch_make_one_more() {
    let sh = sources();
    let path = "/pinged.xml";
    until_items("/feeds/pinged/", 2).await;
    sh.web.wait_hits(path, 1);
    assert_eq!(ping(&["http://nowhere.example/feed"]).await, 404, "an unknown URL");
    let mut slow = Doc::atom(&atom(&THREE.iter().map(atom_entry).collect::<Vec<_>>(), ""));
    slow.delay = Duration::from_millis(1500);
    sh.web.set(path, slow);
    let before = sh.web.hits(path).len();
    let asked = Instant::now();
    assert_eq!(ping(&[&sh.web.url(path)]).await, 204);
    let hits = sh.web.wait_hits(path, before + 1);
    assert!(hits[before].at.duration_since(asked) < Duration::from_millis(500), "fetched at once");
    // Ten pings while that fetch is answered slowly: one more fetch, not ten.
    for _ in 0..10 {
        assert_eq!(ping(&[&sh.web.url(path)]).await, 204);
    }
    sh.web.wait_hits(path, before + 2);
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(sh.web.hits(path).len(), before + 2, "pings during a fetch coalesce into one more fetch");
    until_items("/feeds/pinged/", 3).await;
}

fn bad_sources(web: &SourceServer) {
    web.set("/broken.xml", Doc::status(500));
    let mut slow = Doc::atom(&atom(&[], ""));
    slow.delay = Duration::from_secs(5);
    web.set("/slow.xml", slow);
    web.set("/malformed.xml", Doc::atom("<feed xmlns='http://www.w3.org/2005/Atom'><entry>"));
    let big = format!("<entry><id>urn:big</id><content>{}</content></entry>", "x".repeat(300_000));
    web.set("/big.xml", Doc::atom(&atom(&[big], "")));
    web.set("/loop1", Doc::redirect(302, "/loop2"));
    web.set("/loop2", Doc::redirect(302, "/loop1"));
    web.set("/gone.xml", Doc::status(410));
    web.set("/backoff.xml", Doc::status(500));
    web.set("/old.xml", Doc::redirect(301, "/new.xml"));
    web.set("/new.xml", Doc::atom(&atom(&[atom_entry(&THREE[0])], "")));
}

#[tokio::test]
async fn bad_sources_are_logged_retried_or_stopped_and_nothing_else_waits_for_them() {
    let sh = sources();
    let wait_log = |needle: String| async move {
        until(&needle, || log().contains(&needle)).await;
    };
    for (feed, why) in [
        ("b404", "answered 404"),
        ("b500", "answered 500"),
        ("bslow", "timed out"),
        ("bmalformed", "not well-formed XML"),
        ("bbig", "larger than sources.max_bytes"),
        ("bloop", "more than 5 redirects"),
    ] {
        wait_log(format!("feed={feed}")).await;
        let line =
            log().lines().find(|l| l.contains(&format!("feed={feed}")) && l.contains("failed")).map(str::to_string);
        assert!(line.as_deref().is_some_and(|l| l.contains(why)), "{feed}: {line:?}");
    }
    // Failing again the same way is not logged again; the feeds stay empty.
    assert_eq!(ping(&[&sh.web.url("/broken.xml")]).await, 204);
    sh.web.wait_hits("/broken.xml", 2);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let failures = log().lines().filter(|l| l.contains("feed=b500") && l.contains("failed")).count();
    assert_eq!(failures, 1, "logged once per change of state");
    assert_eq!(sh.web.hits("/loop1").len(), 3, "the loop is followed 5 redirects, then given up");
    for feed in ["b404", "b500", "bslow", "bmalformed", "bbig", "bloop"] {
        assert_eq!(get_json(&format!("/feeds/{feed}/?max=0")).await["totalItems"], 0, "{feed}");
    }
    // 410 stops fetching: a ping fetches nothing more.
    wait_log("feed=bgone".into()).await;
    assert!(log().contains("410 Gone"));
    assert_eq!(ping(&[&sh.web.url("/gone.xml")]).await, 204);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(sh.web.hits("/gone.xml").len(), 1, "no fetch after 410");
    // 301 moves the source: the next fetch goes to the new URL directly.
    until_items("/feeds/moved/", 1).await;
    assert!(log().contains("source moved permanently"));
    assert_eq!(ping(&[&sh.web.url("/old.xml")]).await, 204);
    sh.web.wait_hits("/new.xml", 2);
    assert_eq!(sh.web.hits("/old.xml").len(), 1, "the old URL is not asked again");

    // Meanwhile (the slow source is being answered right now) a publish and a pull answer
    // at once, and a good source is fetched at once.
    assert_eq!(ping(&[&sh.web.url("/slow.xml")]).await, 204);
    let t = Instant::now();
    let res = put_entry(&http(), &sh.fx.base, "plain", "p1", BOT, &entry("urn:p1", "plain", None, &[])).await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(get_json("/feeds/plain/?max=0").await["totalItems"], 1);
    assert!(t.elapsed() < Duration::from_secs(1), "a publish and a pull took {:?}", t.elapsed());
}

#[tokio::test]
async fn list_feeds_and_metrics_show_each_sources_state() {
    let sh = sources();
    until_items("/feeds/atom/", 3).await;
    until("b500's failure", || log().contains("feed=b500")).await;
    let mut admin: Client = sh.fx.fx.server.login("admin").await;
    let reply = admin.iq(testkit::adhoc::command("list-feeds", None)).await;
    let rows = testkit::adhoc::values(&reply, "feeds");
    let row = |feed: &str| rows.iter().find(|r| r.starts_with(&format!("{feed}:"))).cloned().unwrap_or_default();
    assert!(row("atom").contains("last success 20") && row("atom").contains("next fetch 20"), "{}", row("atom"));
    assert!(
        row("b500").contains("last success never") && row("b500").contains("last error: answered 500"),
        "{}",
        row("b500")
    );
    until("bgone stopped", || log().contains("feed=bgone")).await;
    let reply = admin.iq(testkit::adhoc::command("list-feeds", None)).await;
    let rows = testkit::adhoc::values(&reply, "feeds");
    let gone = rows.iter().find(|r| r.starts_with("bgone:")).cloned().unwrap_or_default();
    assert!(gone.contains("not fetched: the source answered 410 Gone"), "{gone}");
    assert!(!rows.iter().any(|r| r.starts_with("plain:") && r.contains("source")), "{rows:?}");
    admin.close().await;
    // The slow source's fetch ends by the 2 s timeout.
    until("bslow's failure", || log().contains("feed=bslow")).await;
    let text = testkit::smartfeeds::scrape_metrics(sh.metrics);
    let value = |name: &str| testkit::smartfeeds::metric(&text, name).unwrap_or(0.0);
    assert!(value("smartfeeds_source_fetches_total{outcome=\"ok\"}") >= 3.0, "{text}");
    assert!(value("smartfeeds_source_fetches_total{outcome=\"error\"}") >= 6.0, "{text}");
    assert!(value("smartfeeds_source_fetches_total{outcome=\"gone\"}") == 1.0, "{text}");
    assert!(value("smartfeeds_source_entries_total{change=\"published\"}") >= 9.0, "{text}");
    let atom_success = value("smartfeeds_source_last_success_timestamp_seconds{feed=\"atom\"}");
    assert!(atom_success > 1.7e9, "{text}");
    assert_eq!(value("smartfeeds_source_last_success_timestamp_seconds{feed=\"b500\"}"), 0.0);
}

/// `feed`'s row in `list-feeds`, asked as the admin.
async fn list_feeds_row(admin: &mut Client, feed: &str) -> String {
    let reply = admin.iq(testkit::adhoc::command("list-feeds", None)).await;
    let rows = testkit::adhoc::values(&reply, "feeds");
    rows.iter().find(|r| r.starts_with(&format!("{feed}:"))).cloned().unwrap_or_default()
}

/// The "next fetch" time of a `list-feeds` row.
fn next_fetch(row: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    let at = row.find("next fetch ")? + "next fetch ".len();
    let text = row.get(at..at + 20)?;
    chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%SZ").ok().map(|t| t.and_utc())
}

/// When a request arrived, by the wall clock.
fn wall(hit: &Hit) -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now() - chrono::Duration::from_std(hit.at.elapsed()).unwrap()
}

/// Waits until `feed`'s row says its next fetch is `after` a fetch at `hit`, to the second
/// (10 s at most: the row changes once that fetch has ended); returns the row.
async fn next_fetch_after(admin: &mut Client, feed: &str, hit: &Hit, after: Duration) -> String {
    let want = wall(hit) + chrono::Duration::from_std(after).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let row = list_feeds_row(admin, feed).await;
        if next_fetch(&row).is_some_and(|next| (next - want).num_milliseconds().abs() <= 2000) {
            return row;
        }
        assert!(Instant::now() < deadline, "the next fetch of {feed} is not {after:?} after {hit:?}, {want}: {row}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_failing_source_backs_off_doubling_from_its_interval_logs_once_and_recovers() {
    let sh = sources();
    let path = "/backoff.xml";
    let interval = Duration::from_secs(BACKOFF_INTERVAL);
    // The first failure, then the first retry an interval later (nothing pings it).
    let first = sh.web.wait_hits(path, 1)[0].clone();
    let hits = sh.web.wait_hits_within(path, 2, interval + Duration::from_secs(15));
    let gap = hits[1].at.duration_since(first.at);
    assert!(gap >= interval - Duration::from_millis(500) && gap < interval + Duration::from_secs(5), "{gap:?}");
    assert_eq!(hits[1].status, 500);
    // After the second failure the next fetch is two intervals away; list-feeds says why.
    let mut admin: Client = sh.fx.fx.server.login("admin").await;
    let row = next_fetch_after(&mut admin, "backoff", &hits[1], 2 * interval).await;
    assert!(row.contains("last success never") && row.contains("last error: answered 500"), "{row}");
    // A ping fetches at once; after the third failure the next fetch is four intervals away.
    assert_eq!(ping(&[&sh.web.url(path)]).await, 204);
    let hits = sh.web.wait_hits(path, 3);
    next_fetch_after(&mut admin, "backoff", &hits[2], 4 * interval).await;
    // Three failures, one log line: it is logged once per change of state.
    let failed = log().lines().filter(|l| l.contains("feed=backoff") && l.contains("source fetch failed")).count();
    assert_eq!(failed, 1, "{}", log());

    // The source answers again: its entries are imported, the error is cleared, and the
    // next fetch is an interval away again.
    sh.web.set(path, Doc::atom(&atom(&THREE[1..].iter().map(atom_entry).collect::<Vec<_>>(), "")));
    assert_eq!(ping(&[&sh.web.url(path)]).await, 204);
    until_items("/feeds/backoff/", 2).await;
    let hits = sh.web.wait_hits(path, 4);
    assert_eq!(hits[3].status, 200);
    let row = next_fetch_after(&mut admin, "backoff", &hits[3], interval).await;
    assert!(row.contains("last success 20") && !row.contains("last error"), "{row}");
    let recovered = log().lines().filter(|l| l.contains("feed=backoff") && l.contains("fetched again")).count();
    assert_eq!(recovered, 1, "{}", log());
    admin.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_source_is_refused_without_allow_private() {
    let web = SourceServer::start();
    web.set("/private.xml", Doc::atom(&atom(&[atom_entry(&THREE[0])], "")));
    // Written as 127.0.0.1: check-config names the feed and why, and smartfeeds does not
    // start on such a configuration.
    let config = format!(
        "[component]\njid = \"feeds.localhost\"\nsecret = \"s\"\n[[feeds]]\nname = \"private\"\nsource = \"{}\"\n",
        web.url("/private.xml")
    );
    let (out, dir) = check_config(&config, &[]);
    assert_refused(&out, &["feeds.private", "loopback", "allow_private"]);
    let out = run_bin(dir.path(), &["--config", "smartfeeds.toml"], &[]);
    assert_refused(&out, &["feeds.private", "allow_private"]);

    // Through a name that resolves to 127.0.0.1: smartfeeds runs, refuses the address when
    // it connects, logs why, and list-feeds shows it.
    let dns = Dns::start().await;
    dns.answer("private.example", &["127.0.0.1"]);
    let web_port = web.base.rsplit(':').next().unwrap().to_string();
    let fx = HttpFixture::start(|port| {
        format!(
            "{}[outbound]\nnameservers = [\"{}\"]\n[[feeds]]\nname = \"private\"\n\
             source = \"http://private.example:{web_port}/private.xml\"\nsource_interval = 3600\n",
            http_table(port, "", &["bot"]),
            dns.addr
        )
    });
    let log = || std::fs::read_to_string(fx.fx.feeds.log_path()).unwrap_or_default();
    until("the refusal logged", || log().contains("source fetch failed")).await;
    let line = log().lines().find(|l| l.contains("source fetch failed")).unwrap_or_default().to_string();
    assert!(line.contains("feed=private") && line.contains("resolves to a private"), "{line}");
    let mut admin: Client = fx.fx.server.login("admin").await;
    let row = list_feeds_row(&mut admin, "private").await;
    assert!(
        row.contains("last success never") && row.contains("last error: ") && row.contains("resolves to a private"),
        "{row}"
    );
    admin.close().await;
    assert!(!dns.answered("private.example").is_empty(), "the name was resolved");
    assert!(web.hits("/private.xml").is_empty(), "the loopback server was reached");
}

/// Another smartfeeds' feed named by its feed URL (newest first, pages of two): the first
/// fetch imports the whole history through the pages' `next` links, oldest first; later
/// entries arrive through the hub the feed advertises, without polling, and the follower's
/// XMPP subscribers get each in a push whose `PreviousCursor` is the `LastCursor` before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_smartfeeds_feed_followed_by_its_feed_url_gives_its_history_then_pushes_with_an_unbroken_chain() {
    let sh = sources();
    let doc = until_items("/feeds/followed/?order=created", 5).await;
    assert_eq!(field(&doc, "title"), ["old1", "old2", "old3", "old4", "old5"], "the whole history, in order");
    let mut previous = doc["last_cursor"].as_str().expect("a last cursor").to_string();
    until("the follower subscribed to the upstream hub", || {
        log().lines().any(|l| l.contains("subscribed to the source's hub") && l.contains("followed"))
    })
    .await;
    let mut alice: Client = sh.fx.fx.server.login("alice").await;
    let me = alice.bare_jid().to_string();
    xmpp_subscribe(&mut alice, "followed?order=created", &me).await;
    for n in 1..=3 {
        let id = format!("new{n}");
        put_upstream(&sh.up.base, &id).await;
        let push = next_push(&mut alice, Duration::from_secs(5)).await;
        assert_eq!(push.title().as_deref(), Some(id.as_str()), "{}", push.raw);
        assert_eq!(push.previous.as_deref(), Some(previous.as_str()), "the chain holds: {}", push.raw);
        assert_eq!(push.total, Some(5 + n), "{}", push.raw);
        previous = push.last.clone().expect("a LastCursor");
    }
    let doc = get_json("/feeds/followed/?order=created").await;
    let titles = field(&doc, "title");
    assert_eq!(titles, ["old1", "old2", "old3", "old4", "old5", "new1", "new2", "new3"], "each once, in order");
    alice.close().await;
}
