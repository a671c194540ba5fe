//! End to end, how the HTTP face answers from ready bytes (SPEC §9): an answer's ETag
//! follows its feed's changes and nothing else; every form of an item (JSON, Atom, JSON
//! Feed, event, the item's own URL) shows its current version, also for items stored
//! before smartfeeds started; and an event-stream reader that does not read holds up no
//! other stream, then catches up on its own. smartfeeds alone (no XMPP server), real HTTP
//! clients.

use reqwest::StatusCode;
use serde_json::Value;
use std::io::{Read, Write};
use std::time::{Duration, Instant};
use testkit::http::{BOT, put_entry, sse_events};
use testkit::pubsub::entry;
use testkit::standalone::Standalone;

fn http() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("a client")
}

async fn put(sf: &Standalone, feed: &str, id: &str, entry: &str) {
    let res = put_entry(&http(), &sf.base, feed, id, BOT, entry).await.expect("PUT");
    assert_eq!(res.status(), StatusCode::OK, "PUT {feed}/{id}");
}

/// GETs `path` with `Accept` and an `If-None-Match`: the status, the ETag, the body.
async fn get(sf: &Standalone, path: &str, accept: &str, tag: Option<&str>) -> (StatusCode, String, String) {
    let mut req = http().get(format!("{}{path}", sf.base)).header("accept", accept);
    if let Some(t) = tag {
        req = req.header("if-none-match", t);
    }
    let res = req.send().await.expect("GET");
    let status = res.status();
    let tag = res.headers().get("etag").map(|v| v.to_str().unwrap().to_string()).expect("an ETag");
    (status, tag, res.text().await.unwrap())
}

#[tokio::test]
async fn an_etag_changes_with_its_feed_and_not_with_another() {
    let sf = Standalone::start("", &["news", "other"], "");
    put(&sf, "news", "n1", &entry("urn:n1", "first", Some("ann"), &[])).await;
    let views = ["/feeds/news/", "/feeds/news/?order=modified&timeout=0", "/feeds/news/archive/"];
    let mut tags = Vec::new();
    for path in views {
        let accept = if path.contains("archive") { "application/atom+xml" } else { "application/json" };
        let (status, tag, _) = get(&sf, path, accept, None).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        let (status, again, body) = get(&sf, path, accept, Some(&tag)).await;
        assert_eq!(
            (status, body.as_str(), &again),
            (StatusCode::NOT_MODIFIED, "", &tag),
            "{path}: the copy is current"
        );
        tags.push((path, accept, tag));
    }
    // One URL in two formats: two answers, two ETags.
    let (_, atom_tag, _) = get(&sf, "/feeds/news/", "application/atom+xml", None).await;
    assert_ne!(atom_tag, tags[0].2);
    let (status, _, _) = get(&sf, "/feeds/news/", "application/atom+xml", Some(&tags[0].2)).await;
    assert_eq!(status, StatusCode::OK, "the JSON answer's ETag does not validate the Atom one");

    // A change elsewhere leaves every answer of this feed current.
    put(&sf, "other", "o1", &entry("urn:o1", "elsewhere", None, &[])).await;
    for (path, accept, tag) in &tags {
        let (status, _, _) = get(&sf, path, accept, Some(tag)).await;
        assert_eq!(status, StatusCode::NOT_MODIFIED, "{path} after a change to another feed");
    }
    // A change to the view makes a new ETag, and the answer shows it at once.
    put(&sf, "news", "n2", &entry("urn:n2", "second", Some("ann"), &[])).await;
    for (path, accept, tag) in &tags {
        let (status, new, body) = get(&sf, path, accept, Some(tag)).await;
        assert_eq!(status, StatusCode::OK, "{path} after a change to it");
        assert_ne!(&new, tag);
        assert!(body.contains("second"), "{path} shows the change: {body}");
    }
}

/// The fields of the JSON answer's items, by id: title, content, author.
fn json_items(doc: &Value) -> Vec<(String, Value, Value, Value)> {
    doc["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| (i["id"].as_str().unwrap().to_string(), i["title"].clone(), i["content"].clone(), i["author"].clone()))
        .collect()
}

fn with_content(id: &str, title: &str, author: &str, content: &str) -> String {
    entry(&format!("urn:{id}"), title, Some(author), &[])
        .replace("<updated>", &format!("<content>{content}</content><updated>"))
}

#[tokio::test]
async fn every_form_shows_the_current_version_also_of_items_stored_before_the_start() {
    let mut sf = Standalone::start("", &["forms"], "");
    put(&sf, "forms", "a", &with_content("a", "A one", "ann", "first words")).await;
    put(&sf, "forms", "b", &with_content("b", "B one", "bob", "more words")).await;
    // The same database, read by a smartfeeds that did not write it.
    sf.stop_and_start();
    let (_, _, body) = get(&sf, "/feeds/forms/?order=created", "application/json", None).await;
    let doc: Value = serde_json::from_str(&body).unwrap();
    let ann = serde_json::json!({"displayName": "ann"});
    assert_eq!(json_items(&doc)[0], ("a".into(), "A one".into(), "first words".into(), ann.clone()));
    assert_eq!(doc["items"][0]["cursor"].as_str(), doc["items"][0]["cursor"].as_str().filter(|c| c.contains('_')));

    // An update: every form, every view, and the item's URL show the new version only.
    put(&sf, "forms", "a", &with_content("a", "A two", "ann", "new words")).await;
    for path in ["/feeds/forms/?order=created", "/feeds/forms/?order=-modified", "/feeds/forms/items/a"] {
        let (_, _, json) = get(&sf, path, "application/json", None).await;
        let (_, _, atom) = get(&sf, path, "application/atom+xml", None).await;
        let (_, _, feed) = get(&sf, path, "application/feed+json", None).await;
        for body in [&json, &atom, &feed] {
            assert!(body.contains("A two") && body.contains("new words"), "{path}: {body}");
            assert!(!body.contains("A one") && !body.contains("first words"), "{path}: {body}");
        }
        // Each item's cursor is the one of this view, in every form.
        let doc: Value = serde_json::from_str(&json).unwrap();
        let cursors: Vec<&str> = match doc["items"].as_array() {
            Some(items) => items.iter().map(|i| i["cursor"].as_str().unwrap()).collect(),
            None => vec![doc["cursor"].as_str().unwrap()],
        };
        for c in cursors {
            assert!(atom.contains(&format!("<fo:cursor>{c}</fo:cursor>")), "{path}: {c} in {atom}");
            assert!(feed.contains(&format!("\"cursor\":\"{c}\"")), "{path}: {c} in {feed}");
        }
    }
    let feed: Value =
        serde_json::from_str(&get(&sf, "/feeds/forms/?order=-modified", "application/feed+json", None).await.2)
            .unwrap();
    assert_eq!(feed["items"][0]["title"], "A two");
    assert_eq!(feed["items"][0]["content_text"], "new words");
}

#[tokio::test]
async fn a_stream_reader_that_does_not_read_delays_no_other_and_catches_up_on_its_own() {
    let sf = Standalone::start("", &["live"], "");
    put(&sf, "live", "first", &entry("urn:first", "first", None, &[])).await;
    let path = "/feeds/live/?order=created&since=id%3Afirst";
    // The slow reader: a stream opened on a socket that is then not read.
    let port: u16 = sf.base.rsplit(':').next().unwrap().parse().unwrap();
    let mut slow = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(slow, "GET {path} HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n").unwrap();
    let fast = http().get(format!("{}{path}", sf.base)).header("accept", "text/event-stream").send().await.unwrap();
    assert_eq!(fast.status(), StatusCode::OK);

    // Far more than the slow socket's buffers take: 120 entries of 60 KB.
    let n = 120;
    let big = "x".repeat(60_000);
    let started = Instant::now();
    let publishing = {
        let (base, big) = (sf.base.clone(), big.clone());
        tokio::spawn(async move {
            for i in 0..n {
                let body = with_content(&format!("i{i}"), &format!("item {i}"), "ann", &big);
                let res = put_entry(&http(), &base, "live", &format!("i{i:03}"), BOT, &body).await.expect("PUT");
                assert_eq!(res.status(), StatusCode::OK);
            }
        })
    };
    let (mut fast, mut read) = (fast, String::new());
    let got: Vec<String> = tokio::time::timeout(Duration::from_secs(60), sse_events(&mut fast, &mut read, n))
        .await
        .expect("the fast reader is served")
        .into_iter()
        .map(|(id, _, _)| id)
        .collect();
    publishing.await.unwrap();
    assert_eq!(got.len(), n, "every item, once");
    let took = started.elapsed();

    // The slow reader now reads: it gets every event too, in the same order.
    slow.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let (mut raw, mut buf) = (Vec::new(), [0u8; 65536]);
    let want = format!("id: {}\n", got.last().unwrap());
    while !String::from_utf8_lossy(&raw).contains(&want) {
        let k = slow.read(&mut buf).expect("the slow stream goes on");
        assert!(k > 0, "the slow stream was closed");
        raw.extend_from_slice(&buf[..k]);
    }
    let text = String::from_utf8_lossy(&raw);
    let slow_ids: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("id: ")).collect();
    assert_eq!(slow_ids, got, "the slow reader caught up, nothing lost or repeated (fast reader took {took:?})");
}
