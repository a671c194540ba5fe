//! End to end, what real feed readers make of the documents smartfeeds serves: the real
//! binary with `[http]` and a hub, a real XMPP server beside it, and
//!
//! - `newsboat` (Debian package `newsboat`), run headless on an Atom view, listing every
//!   entry with its title and its own date (read back from its SQLite cache);
//! - `feedparser` (Debian package `python3-feedparser`, through `tests/readers/bozo.py`)
//!   reading Atom pulls, archive documents and hub deliveries without
//!   setting its bozo flag;
//! - JSON Feed answers valid against the JSON Feed 1.1 schema (`tests/readers/jsonfeed-1.1.schema.json`,
//!   written from the specification's text).

use reqwest::StatusCode;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use testkit::Shared;
use testkit::http::{BOT, HttpFixture, http_table, put_entry};
use testkit::smartfeeds::titled_feed;
use testkit::websub::{Callback, subscribed};

const ATOM: &str = "http://www.w3.org/2005/Atom";

/// Hub settings: loopback callbacks allowed, quick retries.
const HUB: &str = "[hub]\nallow_private_callbacks = true\nretry_initial = 0.2\nretry_max = 0.5\n";

static SHARED: Shared<HttpFixture> = Shared::new();

fn shared() -> &'static HttpFixture {
    SHARED.get_or_start(|| {
        HttpFixture::start(|port| {
            let mut tables = http_table(port, "archive_page = 2\n", &["bot"]) + HUB;
            for (name, title) in [("newsboat", "Newsboat"), ("bozo", "Bozo"), ("schema", "Schema")] {
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

/// An entry with its own dates (either may be left out), a title, an author and HTML content.
fn dated(id: &str, title: &str, published: Option<&str>, updated: Option<&str>) -> String {
    let mut s = format!(
        "<entry xmlns=\"{ATOM}\"><id>urn:readers:{id}</id><title>{title}</title><author><name>ann</name></author>\
         <link href=\"https://example.com/{id}\"/><content type=\"html\">&lt;p&gt;Hello &amp;amp; welcome&lt;/p&gt;</content>"
    );
    if let Some(p) = published {
        s.push_str(&format!("<published>{p}</published>"));
    }
    if let Some(u) = updated {
        s.push_str(&format!("<updated>{u}</updated>"));
    }
    s + "</entry>"
}

async fn put(feed: &str, id: &str, entry: &str) {
    let res = put_entry(&http(), &shared().base, feed, id, BOT, entry).await.expect("PUT");
    assert_eq!(res.status(), StatusCode::OK, "PUT {feed}/{id}: {}", res.text().await.unwrap_or_default());
}

/// The body of `path`, answered 200.
async fn get(path: &str, accept: &str) -> String {
    let res = http().get(url(path)).header("accept", accept).send().await.expect("GET");
    assert_eq!(res.status(), StatusCode::OK, "GET {path}");
    res.text().await.expect("a body")
}

/// A Debian program's path, or a failure naming the package to install.
fn program(path: &str, package: &str) -> PathBuf {
    let p = PathBuf::from(path);
    assert!(p.exists(), "{path} is missing: install the Debian package {package} (apt-get install {package})");
    p
}

/// The entries' titles and dates (Unix seconds) in newsboat's cache, by title.
fn newsboat_items(cache: &Path) -> Vec<(String, i64)> {
    let db = rusqlite::Connection::open(cache).expect("newsboat's cache opens");
    let mut q = db.prepare("SELECT title, pubDate FROM rss_item ORDER BY title").expect("newsboat's rss_item table");
    let rows = q.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).expect("rows");
    rows.collect::<Result<_, _>>().expect("rows read")
}

#[tokio::test]
async fn newsboat_lists_every_entry_with_its_title_and_its_own_date() {
    let newsboat = program("/usr/bin/newsboat", "newsboat");
    shared();
    let dates = [("n1", "2019-05-01T10:00:00Z"), ("n2", "2020-06-02T11:30:00Z"), ("n3", "2021-07-03T12:45:30Z")];
    for (id, date) in dates {
        put("newsboat", id, &dated(id, &format!("Entry {id}"), Some(date), Some(date))).await;
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let urls = dir.path().join("urls");
    std::fs::write(&urls, format!("{}\n", url("/feeds/newsboat/?format=atom"))).unwrap();
    let config = dir.path().join("config");
    std::fs::write(&config, "").unwrap();
    let cache = dir.path().join("cache.db");
    let out = Command::new(newsboat)
        .arg("-x")
        .arg("reload")
        .arg("-u")
        .arg(&urls)
        .arg("-c")
        .arg(&cache)
        .arg("-C")
        .arg(&config)
        .env("HOME", dir.path())
        .output()
        .expect("newsboat runs");
    assert!(
        out.status.success(),
        "newsboat: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let expected: Vec<(String, i64)> = dates
        .iter()
        .map(|(id, date)| (format!("Entry {id}"), chrono::DateTime::parse_from_rfc3339(date).unwrap().timestamp()))
        .collect();
    assert_eq!(newsboat_items(&cache), expected);
}

/// Runs `tests/readers/bozo.py` on `docs` (URLs or files); fails with what feedparser said
/// when any is bozo. Returns feedparser's reading of each.
fn feedparser(docs: &[String]) -> Vec<Value> {
    let python = program("/usr/bin/python3", "python3-feedparser");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/readers/bozo.py");
    let out = Command::new(python).arg(script).args(docs).output().expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("No module named 'feedparser'"), "install the Debian package python3-feedparser");
    assert!(out.status.success(), "feedparser finds a document bozo:\n{stdout}{stderr}");
    stdout.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect()
}

#[tokio::test]
async fn feedparser_reads_every_document_served_without_a_bozo_flag() {
    shared();
    let cb = Callback::start().await;
    subscribed(&url("/hub"), &url("/feeds/bozo/"), &cb, &[]).await;
    for k in 1..=5 {
        let id = format!("b{k}");
        let date = format!("2022-0{k}-01T00:00:00Z");
        put("bozo", &id, &dated(&id, &format!("Bozo {k} &amp; co"), Some(&date), None)).await;
    }
    put("bozo", "bare", &dated("bare", "No dates", None, None)).await;
    // The hub may carry several queued changes in one document: wait for the entries.
    let deliveries = cb.wait_ids(&["b1", "b2", "b3", "b4", "b5", "bare"]).await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    // Debian's feedparser (6.0) reads no JSON Feed: JSON Feed answers are checked against
    // the JSON Feed 1.1 schema instead (below).
    let mut docs: Vec<String> = ["?format=atom", "?order=modified&format=atom", "archive/", "archive/1", "archive/2"]
        .iter()
        .map(|q| url(&format!("/feeds/bozo/{q}")))
        .collect();
    for (i, d) in deliveries.iter().enumerate() {
        let path = dir.path().join(format!("delivery-{i}.xml"));
        std::fs::write(&path, &d.body).unwrap();
        docs.push(path.display().to_string());
    }
    let read = feedparser(&docs);
    let atom = &read[0];
    assert_eq!(atom["version"], "atom10");
    let titles: Vec<&str> = atom["entries"].as_array().unwrap().iter().filter_map(|e| e["title"].as_str()).collect();
    assert_eq!(titles, ["No dates", "Bozo 5 & co", "Bozo 4 & co", "Bozo 3 & co", "Bozo 2 & co", "Bozo 1 & co"]);
    assert_eq!(atom["entries"][1]["published"], "2022-05-01T00:00:00Z", "the entry's own date");
    assert!(atom["entries"][0]["updated"].is_string(), "an entry without dates of its own gets the feed's: {atom}");
}

/// The JSON Feed 1.1 schema, formats checked.
fn json_feed_schema() -> jsonschema::Validator {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/readers/jsonfeed-1.1.schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).expect("the schema is JSON");
    jsonschema::draft202012::options().should_validate_formats(true).build(&schema).expect("a valid schema")
}

#[tokio::test]
async fn json_feed_answers_validate_against_the_json_feed_1_1_schema() {
    shared();
    let schema = json_feed_schema();
    put("schema", "s1", &dated("s1", "Dated", Some("2020-01-01T00:00:00Z"), None)).await;
    put("schema", "s2", &dated("s2", "Undated", None, None)).await;
    put("schema", "s3", &format!("<entry xmlns=\"{ATOM}\"><title>Text only</title><content>plain</content></entry>"))
        .await;
    let gone = http().delete(url("/feeds/schema/items/s2")).bearer_auth(BOT).send().await.expect("DELETE");
    assert!(gone.status().is_success(), "the retraction: {}", gone.status());
    for path in [
        "/feeds/schema/?format=json-feed",
        "/feeds/schema/archive/1?format=json-feed",
        "/feeds/schema/archive/?format=json-feed",
    ] {
        let doc: Value = serde_json::from_str(&get(path, "*/*").await).expect("JSON");
        let errors: Vec<String> = schema.iter_errors(&doc).map(|e| format!("{} at {}", e, e.instance_path())).collect();
        assert!(errors.is_empty(), "{path} is not JSON Feed 1.1: {errors:#?}\n{doc:#}");
        assert!(!doc["items"].as_array().unwrap().is_empty(), "{path} has items");
    }
    // The schema does refuse what is not JSON Feed.
    let bad = serde_json::json!({"version": "https://jsonfeed.org/version/1.1", "title": "t", "items": [{"id": "1", "date_published": "yesterday"}]});
    assert!(!schema.is_valid(&bad));
}
