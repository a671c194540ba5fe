//! End to end, XMPP clients nobody here wrote against the real `smartfeeds` on a real XMPP
//! server (Prosody or ejabberd).
//!
//! Libervia's client (Debian `libervia-cli` with `libervia-backend`, on a private D-Bus
//! session bus; see `crates/testkit/src/libervia.rs`): it finds the feed among the
//! service's nodes, pages a view to its end with its own RSM code (as it decides where to
//! stop: `first@index` + page size reaching `count`), queries it with MAM ordered by
//! modification (XEP-0413 `urn:xmpp:order-by:0`, as Libervia 0.9 sends it), and reads the
//! entries as blog posts with `li blog get`. What it reads must be what a pull of the same
//! view gives, and what was published.
//!
//! A second XMPP library with RSM and MAM code of its own, slixmpp (Debian
//! `python3-slixmpp`; `tests/clients/slixmpp_reader.py`): its RSM iterator pages the view
//! and its MAM iterator queries it, to the ends they find themselves. (Of the other two in
//! Debian, aioxmpp 0.13 has no MAM and no RSM in its pubsub client, and nbxmpp 4.2's MAM
//! query cannot name a node.)
//!
//! Libervia's own subscribe goes through XEP-0376 (Pubsub Account Management) on the
//! user's server, which neither Prosody 0.12 nor ejabberd 23.01 offers; subscriptions and
//! pushes are tested with other clients (`e2e_push`).

use serde_json::{Value, json};
use std::collections::HashSet;
use testkit::Fixture;
use testkit::libervia::Libervia;
use testkit::pubsub::*;
use testkit::server::COMPONENT_DOMAIN;

const TABLES: &str = r#"
[[feeds]]
name = "lib"
title = "Libervia reads this"
publishers = ["bot@localhost"]
"#;
const PASSWORD: &str = "libervia-pw";

/// Entry `n` in its `version`: a blog post Libervia can read (title, content, author,
/// dates).
fn post(n: u32, version: u32) -> String {
    format!(
        "<entry xmlns='{ATOM}'><id>urn:lib:{n}</id><title>Post {n} v{version}</title>\
         <content type='text'>Body of post {n}</content><author><name>Ann Lee</name></author>\
         <published>2024-01-0{n}T00:00:00Z</published><updated>2024-01-0{n}T00:00:00Z</updated></entry>"
    )
}

/// The item ids of a bridge answer's `items` (each an `<item/>` as XML text).
fn item_ids(answer: &Value) -> Vec<String> {
    let items = answer["items"].as_array().unwrap_or_else(|| panic!("items: {answer}"));
    items
        .iter()
        .map(|i| {
            let item: minidom::Element = i.as_str().expect("an item as XML").parse().expect("an item that parses");
            item.attr("id").expect("an item id").to_string()
        })
        .collect()
}

/// Runs blocking work (Libervia's programs) off the test's runtime.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("the blocking work")
}

/// A server and smartfeeds whose feed `lib` holds seven posts, the third edited; with the
/// ids of its default view (newest first) and of its newest-first modification order, as
/// our own pulls read them.
async fn seeded() -> (Fixture, Vec<String>, Vec<String>) {
    let fx = Fixture::start(TABLES);
    let mut bot = fx.server.login("bot").await;
    for n in 1..=7 {
        publish(&mut bot, "lib", &format!("p{n}"), &post(n, 1)).await;
    }
    // An edit: p3 is the last in modification order, still third by creation.
    publish(&mut bot, "lib", "p3", &post(3, 2)).await;
    let newest_first: Vec<String> =
        pages(&mut bot, Pull::node("lib").max(100)).await.iter().flat_map(|p| p.ids()).collect();
    let by_modification: Vec<String> =
        pages(&mut bot, Pull::node("lib?order=-modified").max(100)).await.iter().flat_map(|p| p.ids()).collect();
    assert_eq!(newest_first.len(), 7);
    bot.close().await;
    (fx, newest_first, by_modification)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libervia_finds_pages_queries_and_reads_a_feed_as_we_serve_it() {
    let (fx, newest_first, by_modification) = seeded().await;
    fx.server.create_user("lib-reader", PASSWORD);
    let port = fx.server.c2s_port();
    let lv = blocking(move || Libervia::start(port, "lib-reader@localhost", PASSWORD)).await;
    let lv = std::sync::Arc::new(lv);

    // The feed among the service's nodes.
    let l = lv.clone();
    let out = blocking(move || l.li_as_user(&["info", "disco", "-t", "items", "-O", "json", COMPONENT_DOMAIN])).await;
    assert!(out.ok, "li info disco: {}{}", out.stderr, out.stdout);
    let listed: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout));
    let nodes: HashSet<&str> =
        listed["items"].as_array().expect("items").iter().filter_map(|i| i.get(1)?.as_str()).collect();
    assert!(nodes.contains("lib"), "the feed is listed: {listed}");

    // Paged to the end with RSM, three at a time, where Libervia's own rule stops.
    let mut ids: Vec<String> = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut extra = json!({"rsm_max": "3"});
        if let Some(a) = &after {
            extra["rsm_after"] = json!(a);
        }
        let l = lv.clone();
        let answer =
            blocking(move || l.items_get(COMPONENT_DOMAIN, "lib", &extra)).await.unwrap_or_else(|e| panic!("{e}"));
        let page = item_ids(&answer);
        let rsm = &answer["rsm"];
        let index: u64 = rsm["index"]
            .as_u64()
            .or_else(|| rsm["index"].as_str()?.parse().ok())
            .unwrap_or_else(|| panic!("an RSM index: {answer}"));
        let count: u64 = rsm["count"]
            .as_u64()
            .or_else(|| rsm["count"].as_str()?.parse().ok())
            .unwrap_or_else(|| panic!("an RSM count: {answer}"));
        assert_eq!(index, ids.len() as u64, "first@index is where the page starts: {answer}");
        ids.extend(page.iter().cloned());
        if index + page.len() as u64 >= count {
            break;
        }
        after = Some(rsm["last"].as_str().unwrap_or_else(|| panic!("an RSM last: {answer}")).to_string());
        assert!(ids.len() <= 7, "paging does not end: {ids:?}");
    }
    assert_eq!(ids, newest_first, "every item once, in the view's order");

    // MAM, ordered by modification (the node's direction: newest first).
    let extra = json!({"rsm_max": "20", "mam_start": "0", "order_by": "modification"});
    let l = lv.clone();
    let answer = blocking(move || l.items_get(COMPONENT_DOMAIN, "lib", &extra)).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(item_ids(&answer), by_modification, "MAM ordered by modification: {answer}\n{}", lv.log());

    // Blog posts: title, content and author as published (the edit's title for p3).
    let l = lv.clone();
    let out =
        blocking(move || l.li_as_user(&["blog", "get", "-s", COMPONENT_DOMAIN, "-n", "lib", "-m", "10", "-O", "json"]))
            .await;
    assert!(out.ok, "li blog get: {}{}", out.stderr, out.stdout);
    let read: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout));
    let posts = read[0].as_array().unwrap_or_else(|| panic!("posts: {read}"));
    let seen: Vec<(String, String, String, String)> = posts
        .iter()
        .map(|p| {
            let s = |k: &str| p[k].as_str().unwrap_or_default().to_string();
            (s("id"), s("title"), s("content"), s("author"))
        })
        .collect();
    let want: Vec<(String, String, String, String)> = newest_first
        .iter()
        .map(|id| {
            let n: u32 = id[1..].parse().unwrap();
            let version = if n == 3 { 2 } else { 1 };
            (id.clone(), format!("Post {n} v{version}"), format!("Body of post {n}"), "Ann Lee".to_string())
        })
        .collect();
    assert_eq!(seen, want, "posts as published, newest first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slixmpp_pages_and_queries_a_feed_with_its_own_rsm_and_mam() {
    let python = std::path::Path::new("/usr/bin/python3");
    let ok =
        std::process::Command::new(python).args(["-c", "import slixmpp"]).output().is_ok_and(|o| o.status.success());
    assert!(ok, "slixmpp is not installed: install the Debian package with `apt-get install python3-slixmpp`");
    let (fx, newest_first, by_creation_then_edits) = seeded().await;
    fx.server.create_user("slix-reader", PASSWORD);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/slixmpp_reader.py");
    let port = fx.server.c2s_port().to_string();
    let out = blocking(move || {
        std::process::Command::new("/usr/bin/python3")
            .args([script, &port, "slix-reader@localhost", PASSWORD, COMPONENT_DOMAIN, "lib", "3"])
            .output()
            .expect("python3 runs")
    })
    .await;
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "slixmpp_reader.py: {stderr}\n{stdout}");
    let got: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    let pages = |key: &str| -> Vec<Vec<String>> { serde_json::from_value(got[key].clone()).unwrap() };
    // RSM: pages of three, to the end the library finds by itself, each item once in order.
    let rsm = pages("rsm");
    assert_eq!(rsm.iter().map(Vec::len).collect::<Vec<_>>(), [3, 3, 1], "{got}");
    assert_eq!(rsm.concat(), newest_first, "RSM pages: every item once, in the view's order: {got}");
    // MAM: the same pages, result ids the RSM cursors, complete on the last page only.
    let mam = pages("mam");
    assert_eq!(mam, rsm, "MAM pages as RSM pages: {got}");
    let ids = pages("mam_ids");
    for (k, page) in ids.iter().enumerate() {
        assert_eq!(
            page.first(),
            got["rsm_sets"][k]["first"].as_str().map(String::from).as_ref(),
            "result ids are cursors: {got}"
        );
        assert_eq!(
            page.last(),
            got["rsm_sets"][k]["last"].as_str().map(String::from).as_ref(),
            "result ids are cursors: {got}"
        );
    }
    assert_eq!(got["complete"], json!([false, false, true]), "{got}");
    assert_ne!(by_creation_then_edits, newest_first, "the edit moved p3 in the modification order");
}
