//! End to end, sources (SPEC §13) where no XMPP server is needed: smartfeeds serving HTTP
//! alone (its link keeps retrying meanwhile), a web server of feed documents the test
//! controls on loopback, and the test's own DNS server. A SIGKILL in the middle of a
//! 10,000-entry import, then a restart: every entry exactly once, in order. A source whose
//! name resolves to a loopback address is never connected to unless `allow_private`.
//! `check-config` names what is wrong with a source. A gzip-encoded source is decoded. The
//! subscription to a source's own WebSub hub is renewed before its lease ends. A source's
//! validators and permanent move survive a restart.

use serde_json::Value;
use std::time::{Duration, Instant};
use testkit::dns::Dns;
use testkit::smartfeeds::{assert_accepted, assert_refused, check_config};
use testkit::source_hub::SourceHub;
use testkit::source_server::{Doc, SourceServer};
use testkit::standalone::Standalone;

/// Entries per archived document of the large source.
const PER_DOC: u32 = 500;
/// Its entries.
const TOTAL: u32 = 10_000;

/// The large source: archived documents `/big/1` … `/big/19` and the recent `/big/`, each
/// of 500 entries, newest first, linked by `prev-archive`. Each archive takes `delay`.
fn large_source(web: &SourceServer, delay: Duration) {
    let docs = TOTAL / PER_DOC;
    for k in 1..=docs {
        let entries: String = ((k - 1) * PER_DOC + 1..=k * PER_DOC)
            .rev()
            .map(|n| {
                let t = chrono::DateTime::from_timestamp(1_600_000_000 + i64::from(n), 0).unwrap().to_rfc3339();
                format!(
                    "<entry><id>urn:big:{n}</id><title>e{n}</title><updated>{t}</updated>\
                     <author><name>Writer</name></author><content>entry {n}</content></entry>"
                )
            })
            .collect();
        let prev = if k > 1 { format!("<link rel='prev-archive' href='/big/{}'/>", k - 1) } else { String::new() };
        let body = format!("<feed xmlns='http://www.w3.org/2005/Atom'><title>big</title>{prev}{entries}</feed>");
        let mut doc = Doc::atom(&body);
        doc.delay = delay;
        web.set(&if k == docs { "/big/".to_string() } else { format!("/big/{k}") }, doc);
    }
}

/// Every item id of a view, following `next` links.
async fn all_titles(base: &str, feed: &str) -> Vec<String> {
    let client = reqwest::Client::new();
    let mut url = format!("{base}/feeds/{feed}/?order=created&max=500");
    let mut out = Vec::new();
    loop {
        let doc: Value = client.get(&url).send().await.unwrap().json().await.unwrap();
        let items = doc["items"].as_array().cloned().unwrap_or_default();
        out.extend(items.iter().map(|i| i["title"].as_str().unwrap_or("").to_string()));
        // Asking past the last item would be a long-poll.
        let all = doc["totalItems"].as_u64().unwrap_or(0) as usize;
        match doc["next"].as_str() {
            Some(next) if !items.is_empty() && out.len() < all => url = next.to_string(),
            _ => return out,
        }
    }
}

async fn total(base: &str, feed: &str) -> u64 {
    let doc: Value = reqwest::get(format!("{base}/feeds/{feed}/?max=0")).await.unwrap().json().await.unwrap();
    doc["totalItems"].as_u64().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_during_a_10000_entry_import_loses_and_repeats_nothing() {
    let web = SourceServer::start();
    large_source(&web, Duration::from_millis(30));
    let tables = format!(
        "[sources]\nallow_private = true\n[[feeds]]\nname = \"big\"\nsource = \"{}\"\nsource_interval = 3600\n",
        web.url("/big/")
    );
    let mut sf = Standalone::start("", &[], &tables);
    // The walk back reaches the oldest archive; the import (one transaction) follows it.
    web.wait_hits("/big/1", 1);
    std::thread::sleep(Duration::from_millis(150));
    sf.kill();
    let before = {
        sf.restart();
        // Right after the restart, whatever the killed process committed is there: all of
        // it or none of it.
        total(&sf.base, "big").await
    };
    assert!(before == 0 || before == u64::from(TOTAL), "a partial import survived the crash: {before}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while total(&sf.base, "big").await < u64::from(TOTAL) {
        assert!(Instant::now() < deadline, "the import did not finish after the restart:\n{}", sf.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let titles = all_titles(&sf.base, "big").await;
    let want: Vec<String> = (1..=TOTAL).map(|n| format!("e{n}")).collect();
    assert_eq!(titles.len(), want.len());
    assert!(titles == want, "every entry exactly once, oldest first");
    assert!(sf.log().contains("source imported"), "{}", sf.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_whose_name_resolves_to_loopback_is_never_fetched_without_allow_private() {
    let dns = Dns::start().await;
    dns.answer("feeds.example", &["127.0.0.1"]);
    let web = SourceServer::start();
    web.set("/feed.xml", Doc::atom("<feed xmlns='http://www.w3.org/2005/Atom'><title>x</title></feed>"));
    let port = web.base.rsplit(':').next().unwrap().to_string();
    let tables = format!(
        "[outbound]\nnameservers = [\"{}\"]\n[[feeds]]\nname = \"private\"\nsource = \"http://feeds.example:{port}/feed.xml\"\n",
        dns.addr
    );
    let sf = Standalone::start("", &[], &tables);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sf.log().contains("source fetch failed") {
        assert!(Instant::now() < deadline, "no refusal logged:\n{}", sf.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(sf.log().contains("resolves to a private"), "{}", sf.log());
    assert!(web.hits("/feed.xml").is_empty(), "the loopback server was reached");
    assert_eq!(dns.answered("feeds.example"), ["127.0.0.1"], "resolved by the configured name server");
}

#[test]
fn check_config_names_what_is_wrong_with_a_source() {
    let base = "[component]\njid = \"feeds.localhost\"\nsecret = \"s\"\n";
    let with = |feed: &str| format!("{base}[[feeds]]\nname = \"planet\"\n{feed}");
    let (out, _dir) =
        check_config(&with("source = \"https://blog.example.com/feed.xml\"\nsource_interval = 60\n"), &[]);
    assert_accepted(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 with a source"));
    let (out, _dir) = check_config(&with("source = \"http://10.1.2.3/feed.xml\"\n"), &[]);
    assert_refused(&out, &["feeds.planet", "allow_private"]);
    let (out, _dir) = check_config(&with("source = \"https://x.example/f\"\nsource_interval = 5\n"), &[]);
    assert_refused(&out, &["source_interval 5 is below 30"]);
    let (out, _dir) = check_config(&format!("{}[sources]\nmax_bytes = 1\n", with("")), &[]);
    assert_refused(&out, &["sources.max_bytes"]);
    let (out, _dir) = check_config(&with("source = \"feed.xml\"\n"), &[]);
    assert_accepted(&out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_feed_comes_from_its_source_document() {
    // The demo configuration's feed, its source the document shipped in demo/.
    let example = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/smartfeeds.example.toml")).unwrap();
    assert!(example.contains("source = \"demo/comments.atom\""), "the demo feed has the shipped source");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/demo/comments.atom");
    let tables = format!("[[feeds]]\nname = \"comments\"\nsource = \"{path}\"\n");
    let sf = Standalone::start("", &[], &tables);
    let deadline = Instant::now() + Duration::from_secs(10);
    while total(&sf.base, "comments").await < 12 {
        assert!(Instant::now() < deadline, "the demo entries were not imported:\n{}", sf.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let doc: Value =
        reqwest::get(format!("{}/feeds/comments/?order=created&max=12", sf.base)).await.unwrap().json().await.unwrap();
    let items = doc["items"].as_array().unwrap();
    assert_eq!(items[0]["title"], "Welcome to the comments");
    assert_eq!(items[0]["author"]["displayName"], "Ana Lima");
    assert!(items.iter().all(|i| i["content"].as_str().is_some_and(|c| !c.is_empty())));
    // Stored as the document wrote it: the entry's link is there.
    assert!(items[0]["atom"].as_str().unwrap().contains("https://example.org/comments/welcome"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_whose_hub_is_another_smartfeeds_delivers_new_entries_within_a_second_without_polling() {
    // Upstream: a smartfeeds feed, its hub at UP/hub (callbacks on loopback allowed).
    let up = Standalone::start("", &["up"], "[hub]\nallow_private_callbacks = true\n");
    let client = reqwest::Client::new();
    let put = |id: &'static str| {
        let (client, base) = (client.clone(), up.base.clone());
        async move {
            let entry = testkit::pubsub::entry(&format!("urn:up:{id}"), id, Some("Upstream"), &["live"]);
            let res = testkit::http::put_entry(&client, &base, "up", id, testkit::http::BOT, &entry).await.unwrap();
            assert_eq!(res.status(), 200);
        }
    };
    put("first").await;
    // Downstream: the upstream feed URL as its source.
    let down = follower(&up, "feeds/up/").await;
    assert_eq!(total(&down.base, "down").await, 1, "the first fetch imported the first entry");
    // A new entry upstream arrives downstream through the hub, well before any poll.
    for (n, id) in ["second", "third"].into_iter().enumerate() {
        let t = Instant::now();
        put(id).await;
        while total(&down.base, "down").await < n as u64 + 2 {
            assert!(t.elapsed() < Duration::from_secs(1), "{id} not delivered within a second:\n{}", down.log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let doc: Value =
        reqwest::get(format!("{}/feeds/down/?order=created", down.base)).await.unwrap().json().await.unwrap();
    let titles: Vec<&str> = doc["items"].as_array().unwrap().iter().map(|i| i["title"].as_str().unwrap()).collect();
    assert_eq!(titles, ["first", "second", "third"]);
    assert_eq!(doc["items"][2]["author"]["displayName"], "Upstream");
    // A delivery that is not signed by the hub (here: to no subscription of ours) is
    // answered 2xx, as WebSub asks, and imports nothing.
    let forged =
        "<feed xmlns='http://www.w3.org/2005/Atom'><entry><id>urn:forged</id><title>forged</title></entry></feed>";
    let res = client
        .post(format!("{}/sources/0123456789abcdef0123456789abcdef", down.base))
        .header("x-hub-signature", "sha256=00")
        .body(forged)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(total(&down.base, "down").await, 3, "the forged entry is not imported");
}

/// A smartfeeds whose feed `down` has `up`'s document at `path` as its source, polled only
/// hourly, with a public prefix so that it may subscribe to the hub the source names;
/// returned once it has.
async fn follower(up: &Standalone, path: &str) -> Standalone {
    let tables = format!(
        "[sources]\nallow_private = true\n[[feeds]]\nname = \"down\"\nsource = \"{}/{path}\"\nsource_interval = 3600\n",
        up.base
    );
    let down = Standalone::start_public("", &[], &tables);
    let deadline = Instant::now() + Duration::from_secs(15);
    while !down.log().contains("subscribed to the source's hub") {
        assert!(Instant::now() < deadline, "no subscription to the upstream hub:\n{}\n---\n{}", down.log(), up.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    down
}

/// Publishes the entry `id` (titled `id`, by "Upstream") to `up`'s feed `up`.
async fn put_upstream(up: &Standalone, id: String) {
    let entry = testkit::pubsub::entry(&format!("urn:up:{id}"), &id, Some("Upstream"), &["live"]);
    let res = testkit::http::put_entry(&reqwest::Client::new(), &up.base, "up", &id, testkit::http::BOT, &entry)
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
}

fn two_entries(prefix: &str) -> String {
    format!(
        "<feed xmlns='http://www.w3.org/2005/Atom'><title>{prefix}</title>\
         <entry><id>urn:{prefix}:2</id><title>{prefix} two</title><updated>2024-01-02T00:00:00Z</updated></entry>\
         <entry><id>urn:{prefix}:1</id><title>{prefix} one</title><updated>2024-01-01T00:00:00Z</updated></entry></feed>"
    )
}

async fn until_total(sf: &Standalone, feed: &str, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while total(&sf.base, feed).await < n {
        assert!(Instant::now() < deadline, "{feed} did not reach {n} items:\n{}", sf.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gzip_encoded_source_is_decoded_and_imported() {
    let web = SourceServer::start();
    let body = two_entries("zipped");
    let mut doc = Doc::atom(&body);
    doc.gzip = true;
    web.set("/zipped.xml", doc);
    let tables = format!(
        "[sources]\nallow_private = true\n[[feeds]]\nname = \"zipped\"\nsource = \"{}\"\nsource_interval = 3600\n",
        web.url("/zipped.xml")
    );
    let sf = Standalone::start("", &[], &tables);
    until_total(&sf, "zipped", 2).await;
    let hit = &web.hits("/zipped.xml")[0];
    let accepted = hit.headers.get("accept-encoding").and_then(|v| v.to_str().ok()).unwrap_or("");
    assert!(accepted.contains("gzip"), "smartfeeds asks for gzip: {accepted:?}");
    assert!(hit.gzipped, "the document was sent compressed");
    let doc: Value =
        reqwest::get(format!("{}/feeds/zipped/?order=created", sf.base)).await.unwrap().json().await.unwrap();
    let titles: Vec<&str> = doc["items"].as_array().unwrap().iter().map(|i| i["title"].as_str().unwrap()).collect();
    assert_eq!(titles, ["zipped one", "zipped two"]);
    // The server compresses only for a request that allows it: a request for the identity
    // encoding gets the document as is.
    let plain =
        reqwest::Client::new().get(web.url("/zipped.xml")).header("accept-encoding", "identity").send().await.unwrap();
    assert!(plain.headers().get("content-encoding").is_none());
    assert_eq!(plain.text().await.unwrap(), body);
    assert!(!web.hits("/zipped.xml").last().unwrap().gzipped);
}

/// Waits until `hub` has had `n` subscription requests (`limit` at most); returns them.
fn requests_within(
    hub: &SourceHub,
    n: usize,
    limit: Duration,
    sf: &Standalone,
) -> Vec<testkit::source_hub::SubRequest> {
    let deadline = Instant::now() + limit;
    loop {
        let requests = hub.requests();
        if requests.len() >= n {
            return requests;
        }
        assert!(Instant::now() < deadline, "{n} requests not within {limit:?}: {requests:?}\n{}", sf.log());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_subscription_to_a_sources_hub_is_renewed_before_its_lease_ends_and_never_within_ten_seconds() {
    // Two sources, each naming a hub of its own: one grants 12-second leases, the other
    // 2-second ones (shorter than the soonest renewal).
    let (hub, hasty) = (SourceHub::start(12), SourceHub::start(2));
    let web = SourceServer::start();
    for (path, hub) in [("/hubbed.xml", &hub), ("/hasty.xml", &hasty)] {
        let mut doc = Doc::atom(&two_entries(&path[1..path.len() - 4]));
        doc.headers.push(("link".into(), format!("<{}>; rel=\"hub\"", hub.url)));
        web.set(path, doc);
    }
    let tables = format!(
        "[sources]\nallow_private = true\n\
         [[feeds]]\nname = \"hubbed\"\nsource = \"{}\"\nsource_interval = 3600\n\
         [[feeds]]\nname = \"hasty\"\nsource = \"{}\"\nsource_interval = 3600\n",
        web.url("/hubbed.xml"),
        web.url("/hasty.xml")
    );
    let sf = Standalone::start_public("", &[], &tables);
    let first = hub.wait_verified(1, Duration::from_secs(15))[0].clone();
    assert_eq!((first.mode.as_str(), first.topic.as_str()), ("subscribe", web.url("/hubbed.xml").as_str()));
    let verified = first.verified.unwrap();
    let hasty_verified = hasty.wait_verified(1, Duration::from_secs(15))[0].verified.unwrap();

    // The 12-second lease: asked again before it ends, with a fresh callback and secret,
    // and verified again.
    let lease_end = verified + Duration::from_secs(12);
    let second = requests_within(&hub, 2, Duration::from_secs(15), &sf)[1].clone();
    assert!(
        second.at < lease_end,
        "renewed {:?} after the verification of a 12 s lease",
        second.at.duration_since(verified)
    );
    assert!(second.at > verified + Duration::from_secs(8), "renewed at once, not as the lease runs out");
    assert_ne!(second.callback, first.callback);
    assert_ne!(second.secret, first.secret);
    hub.wait_verified(2, Duration::from_secs(5));

    // The 2-second lease: not asked again and again, but once ten seconds after it was
    // granted (it lapsed meanwhile: logged).
    let requests = requests_within(&hasty, 2, Duration::from_secs(15), &sf);
    let gap = requests[1].at.duration_since(hasty_verified);
    assert!(gap > Duration::from_secs(8) && gap < Duration::from_secs(12), "renewed {gap:?} after verification");
    assert_eq!(hasty.requests().len(), 2, "one renewal: {:?}", hasty.requests());
    assert!(sf.log().contains("shorter than the soonest renewal"), "{}", sf.log());
    // Renewals are not fetches.
    assert_eq!(web.hits("/hubbed.xml").len(), 1);
    assert_eq!(web.hits("/hasty.xml").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_the_sources_validators_and_its_permanent_move() {
    let web = SourceServer::start();
    web.set("/old.xml", Doc::redirect(301, "/moved.xml"));
    let mut doc = Doc::atom(&two_entries("kept"));
    doc.headers.push(("last-modified".into(), "Mon, 01 Jan 2024 00:00:00 GMT".into()));
    let etag = doc.etag.clone().unwrap();
    web.set("/moved.xml", doc);
    let tables = format!(
        "[sources]\nallow_private = true\n[[feeds]]\nname = \"kept\"\nsource = \"{}\"\nsource_interval = 3600\n",
        web.url("/old.xml")
    );
    let mut sf = Standalone::start("", &[], &tables);
    until_total(&sf, "kept", 2).await;
    // A ping: the fetch after the first one (whose state is saved by then) is conditional.
    let form = [("hub.mode", "publish"), ("hub.url", &web.url("/old.xml"))];
    let ping = reqwest::Client::new().post(format!("{}/hub", sf.base)).form(&form).send().await.unwrap();
    assert_eq!(ping.status(), 204);
    assert_eq!(web.wait_hits("/moved.xml", 2)[1].status, 304);

    sf.stop_and_start();
    // The first fetch after the restart goes to the new URL, conditionally.
    let hits = web.wait_hits("/moved.xml", 3);
    let header = |name: &str| hits[2].headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    assert_eq!(header("if-none-match"), etag);
    assert_eq!(header("if-modified-since"), "Mon, 01 Jan 2024 00:00:00 GMT");
    assert_eq!(hits[2].status, 304);
    assert_eq!(web.hits("/old.xml").len(), 1, "the old URL is not asked again after the restart");
    assert!(sf.log().contains("source fetched from where it moved permanently"), "{}", sf.log());
    assert_eq!(total(&sf.base, "kept").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_a_source_with_a_hub_is_read_whole_once_and_subscribed_to_again() {
    let hub = SourceHub::start(3600);
    let web = SourceServer::start();
    let mut doc = Doc::atom(&two_entries("again"));
    doc.headers.push(("link".into(), format!("<{}>; rel=\"hub\"", hub.url)));
    web.set("/again.xml", doc);
    let tables = format!(
        "[sources]\nallow_private = true\n[[feeds]]\nname = \"again\"\nsource = \"{}\"\nsource_interval = 3600\n",
        web.url("/again.xml")
    );
    let mut sf = Standalone::start_public("", &[], &tables);
    hub.wait_verified(1, Duration::from_secs(15));
    sf.stop_and_start();
    // The saved validators would make the first fetch a 304, which names no hub: it asks
    // for the whole document, and subscribes again from the new process.
    let requests = hub.wait_verified(2, Duration::from_secs(15));
    assert_ne!(requests[1].callback, requests[0].callback);
    let hits = web.hits("/again.xml");
    assert_eq!(hits.len(), 2);
    assert!(hits[1].headers.get("if-none-match").is_none() && hits[1].status == 200, "{:?}", hits[1]);
    assert_eq!(total(&sf.base, "again").await, 2, "nothing imported twice");
}

/// Another smartfeeds' feed named by its `archive/` URL: the follower gets the whole history
/// through the archives (several documents: two entries each upstream) and, since the
/// archive document advertises the hub with itself as `self` and the hub takes it as a
/// topic, every later entry through the hub within a second, without polling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_named_by_its_archive_gives_the_whole_history_and_then_pushes() {
    let up = Standalone::start("archive_page = 2\n", &["up"], "[hub]\nallow_private_callbacks = true\n");
    let put = |id: String| put_upstream(&up, id);
    for n in 1..=7 {
        put(format!("old{n}")).await;
    }
    let down = follower(&up, "feeds/up/archive/").await;
    until_total(&down, "down", 7).await;
    let t = Instant::now();
    put("new".into()).await;
    while total(&down.base, "down").await < 8 {
        assert!(t.elapsed() < Duration::from_secs(1), "the new entry not delivered within a second:\n{}", down.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let doc: Value =
        reqwest::get(format!("{}/feeds/down/?order=created", down.base)).await.unwrap().json().await.unwrap();
    let titles: Vec<&str> = doc["items"].as_array().unwrap().iter().map(|i| i["title"].as_str().unwrap()).collect();
    assert_eq!(titles, ["old1", "old2", "old3", "old4", "old5", "old6", "old7", "new"], "each once, in order");
}

/// Another smartfeeds' view in ascending order (`?order=created`, pages of two) as the
/// source: its pages go forward in time and the last one is followed by none (a page past
/// the end would be a long-poll): the follower still gets the whole history at once, oldest
/// first, and the next entry through the hub.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_named_by_an_oldest_first_view_gives_the_whole_history_in_order() {
    let up = Standalone::start("", &["up"], "[hub]\nallow_private_callbacks = true\n[limits]\ndefault_page = 2\n");
    let put = |id: String| put_upstream(&up, id);
    for n in 1..=5 {
        put(format!("old{n}")).await;
    }
    let t = Instant::now();
    let down = follower(&up, "feeds/up/?order=created").await;
    until_total(&down, "down", 5).await;
    assert!(t.elapsed() < Duration::from_secs(10), "the history walk waited on a long-poll: {:?}", t.elapsed());
    put("new".into()).await;
    until_total(&down, "down", 6).await;
    let doc: Value =
        reqwest::get(format!("{}/feeds/down/?order=created", down.base)).await.unwrap().json().await.unwrap();
    let titles: Vec<&str> = doc["items"].as_array().unwrap().iter().map(|i| i["title"].as_str().unwrap()).collect();
    assert_eq!(titles, ["old1", "old2", "old3", "old4", "old5", "new"], "each once, in order");
}
