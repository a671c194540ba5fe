//! End to end, several smartfeeds processes on one PostgreSQL database (SPEC §12): a private
//! PostgreSQL server, the XMPP server `SMARTFEEDS_TEST_SERVER` selects, and two instances of
//! the real binary with the same configuration. Publishes through both are read once and in
//! order through either, a write acknowledged by one is read through the other, and when
//! one instance is killed the other serves (on Prosody, which takes one connection per
//! component domain, it waited as a hot standby until then).

use reqwest::StatusCode;
use serde_json::Value;
use std::collections::HashSet;
use std::time::{Duration, Instant};
use testkit::instances::{Received, collect, fresh_database, http_ready, instance, put_shared};
use testkit::postgres_server::TempServer;
use testkit::process::free_port;
use testkit::pubsub::*;
use testkit::push::{next_push, subscribe};
use testkit::{Smartfeeds, TestServer, stanza_type, start_selected};

/// The XMPP server, and two instances on a fresh database with their HTTP ports.
async fn two_instances() -> (TestServer, (Smartfeeds, u16), (Smartfeeds, u16)) {
    let host = start_selected();
    let url = fresh_database().await;
    let (pa, pb) = (free_port(), free_port());
    let a = instance(&host, &url, pa).await;
    let b = instance(&host, &url, pb).await;
    (host, (a, pa), (b, pb))
}

/// PUTs an entry through the instance on `port`.
async fn put(port: u16, id: &str) {
    let result = put_shared(&reqwest::Client::new(), port, id).await;
    assert_eq!(result, Ok(()), "PUT {id} on {port}");
}

/// A page of the `modified` view after `since` (a bare cursor), through the instance on `port`.
async fn page_after(port: u16, since: Option<&str>) -> (Vec<String>, Option<String>) {
    let since = since.map_or(String::new(), |c| format!("&since=cursor:{c}"));
    let url = format!("http://127.0.0.1:{port}/feeds/shared/?order=modified&max=7&timeout=0{since}");
    let doc: Value = reqwest::get(url).await.expect("GET").json().await.expect("JSON");
    let ids = doc["items"].as_array().expect("items").iter().map(|i| i["id"].as_str().unwrap().to_string()).collect();
    (ids, doc["last_cursor"].as_str().map(str::to_string))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_through_both_instances_are_read_once_in_order_through_either() {
    let (_host, (a, pa), (b, pb)) = two_instances().await;

    // Two publishers, one per instance; each write acknowledged by one is read through the
    // other at once.
    let publisher = |mine: u16, other: u16, prefix: &'static str| async move {
        for i in 0..60 {
            let id = format!("{prefix}{i}");
            put(mine, &id).await;
            let res = reqwest::get(format!("http://127.0.0.1:{other}/feeds/shared/items/{id}")).await.unwrap();
            assert_eq!(res.status(), StatusCode::OK, "{id}, acknowledged by {mine}, is read through {other}");
        }
    };
    let writers = tokio::spawn(async move {
        tokio::join!(publisher(pa, pb, "a"), publisher(pb, pa, "b"));
    });
    // Meanwhile a reader pages forward through both instances in turn, and on until a page
    // comes back empty after the writers are done.
    let mut seen: Vec<String> = Vec::new();
    let mut last: Option<String> = None;
    let mut turn = 0;
    loop {
        let done = writers.is_finished();
        let (ids, next) = page_after(if turn % 2 == 0 { pa } else { pb }, last.as_deref()).await;
        turn += 1;
        if ids.is_empty() {
            if done {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        seen.extend(ids);
        last = next;
    }
    writers.await.expect("the writers");
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no item read twice: {seen:?}");
    let want: HashSet<String> = (0..60).flat_map(|i| [format!("a{i}"), format!("b{i}")]).collect();
    assert_eq!(unique, want.iter().collect(), "every acknowledged item read once");
    // Each publisher's own items come in the order it wrote them (commit order is cursor order).
    for prefix in ["a", "b"] {
        let mine: Vec<u32> = seen.iter().filter_map(|id| id.strip_prefix(prefix)?.parse().ok()).collect();
        assert!(mine.windows(2).all(|w| w[0] < w[1]), "{prefix}: {mine:?}");
    }
    assert!(turn > 10, "the reader paged through both instances during the run");
    drop((a, b));
}

/// Logs in and asks for the shared feed's items until the service answers, for at most `limit`.
async fn served_within(host: &TestServer, limit: Duration) -> Page {
    let started = Instant::now();
    loop {
        if let Ok(mut c) = testkit::Client::try_connect(host.c2s_port(), "carol@localhost", "password").await {
            let q = Pull::node("shared?order=created").max(100);
            if let Ok(reply) = c.try_iq(q.iq(), Duration::from_secs(2)).await
                && stanza_type(&reply) == "result"
            {
                return parse_page(&reply);
            }
        }
        assert!(started.elapsed() < limit, "not served within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_one_instance_is_killed_the_other_serves_and_pushes() {
    let host = start_selected();
    host.create_user("carol", "password");
    let url = fresh_database().await;
    let mut a = instance(&host, &url, free_port()).await;
    let b = instance(&host, &url, free_port()).await;
    let standby = host.kind() == testkit::Kind::Prosody;
    if standby {
        // Prosody takes one connection per component domain: the second waits.
        let started = Instant::now();
        while !std::fs::read_to_string(b.log_path()).unwrap_or_default().contains("standing by") {
            assert!(started.elapsed() < Duration::from_secs(10), "b stands by:\n{}", b.log_tail(20));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // Both tried the dead address first, then the server.
    for sf in [&a, &b] {
        let log = std::fs::read_to_string(sf.log_path()).unwrap();
        assert!(log.contains("cannot connect to the server"), "{}", sf.log_tail(20));
    }
    if !standby {
        // ejabberd routes answers for the domain to either instance: each still learns of
        // the multicast service, asking again until its own answer reaches it.
        for sf in [&a, &b] {
            let started = Instant::now();
            while !std::fs::read_to_string(sf.log_path()).unwrap_or_default().contains("multicast service found") {
                assert!(started.elapsed() < Duration::from_secs(30), "no multicast service:\n{}", sf.log_tail(20));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    let mut alice = host.login("alice").await;
    subscribe(&mut alice, "shared", "alice@localhost").await;
    let mut bot = host.login("bot").await;
    for i in 0..5 {
        let r = bot.iq(publish_iq("shared", Some(&format!("k{i}")), &entry("urn:k", "before", None, &[]))).await;
        assert_eq!(stanza_type(&r), "result");
    }
    let mut last = None;
    for _ in 0..5 {
        last = Some(next_push(&mut alice, Duration::from_secs(5)).await.last_cursor().to_string());
    }

    // The active instance (on ejabberd: one of two) dies.
    let killed = Instant::now();
    a.kill();
    let page = served_within(&host, Duration::from_secs(15)).await;
    eprintln!("served again {:?} after the kill", killed.elapsed());
    let mut ids = page.ids();
    ids.sort();
    assert_eq!(ids, ["k0", "k1", "k2", "k3", "k4"], "every acknowledged item is there");
    if standby {
        let log = std::fs::read_to_string(b.log_path()).unwrap();
        assert!(log.contains("connected"), "the standby took over:\n{}", b.log_tail(20));
    }
    // The subscription lives in the database: the survivor pushes the next change, and its
    // chain continues from the last push alice got. What the dead instance had in flight
    // (pushed, not yet deleted from the log) may come again first.
    let mut bot = host.login("bot").await;
    let r = bot.iq(publish_iq("shared", Some("k5"), &entry("urn:k", "after", None, &[]))).await;
    assert_eq!(stanza_type(&r), "result");
    let mut push = next_push(&mut alice, Duration::from_secs(10)).await;
    while push.item_id() != "k5" {
        assert!(["k0", "k1", "k2", "k3", "k4"].contains(&push.item_id()), "a repeat of an earlier push: {}", push.raw);
        push = next_push(&mut alice, Duration::from_secs(10)).await;
    }
    assert_eq!(push.previous, last, "the chain is unbroken across the takeover");
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_across_a_postgresql_restart_get_answers_and_none_acknowledged_is_lost() {
    let host = start_selected();
    // A server of its own, durable, that the test restarts.
    let pg = std::sync::Arc::new(TempServer::start().unwrap_or_else(|e| panic!("{e}")));
    let url = pg.create_database().await.unwrap_or_else(|e| panic!("{e}"));
    let sf = instance(&host, &url, free_port()).await;
    let mut bot = host.login("bot").await;

    // Publishes one at a time while PostgreSQL goes down for 2 s and comes back.
    let restart = {
        let pg = pg.clone();
        tokio::task::spawn_blocking(move || {
            std::thread::sleep(Duration::from_millis(700));
            pg.restart(Duration::from_secs(2))
        })
    };
    let (mut acked, mut refused, mut after_restart) = (Vec::new(), 0, 0);
    let mut i = 0;
    loop {
        let back = restart.is_finished();
        if back && after_restart >= 10 {
            break;
        }
        let id = format!("r{i}");
        i += 1;
        let reply = bot
            .try_iq(publish_iq("shared", Some(&id), &entry("urn:r", "r", None, &[])), Duration::from_secs(15))
            .await
            .unwrap_or_else(|e| panic!("publish {id} got no answer (a hang): {e}\n{}", sf.log_tail(30)));
        match stanza_type(&reply) {
            "result" => {
                acked.push(id);
                after_restart += usize::from(back);
            }
            _ => {
                let error = reply.get_child("error", "jabber:client").map(|e| e.attr("type").unwrap_or("").to_string());
                assert_eq!(error.as_deref(), Some("wait"), "a wait-type error: {}", testkit::to_xml(&reply));
                refused += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        assert!(i < 5000, "publishing did not resume after the restart:\n{}", sf.log_tail(30));
    }
    restart.await.unwrap().unwrap_or_else(|e| panic!("restarting PostgreSQL: {e}"));
    eprintln!("{} acknowledged, {refused} refused with a wait-type error", acked.len());
    assert!(refused > 0, "some publishes met PostgreSQL down (else the test did not test the gap)");

    // Every acknowledged publish is there.
    let mut have: HashSet<String> = HashSet::new();
    let mut after: Option<String> = None;
    loop {
        let mut q = Pull::node("shared?order=created").max(200);
        if let Some(a) = &after {
            q = q.after(a);
        }
        let page = pull(&mut bot, &q).await;
        have.extend(page.ids());
        if page.items.len() < 200 {
            break;
        }
        after = page.last.clone();
    }
    let lost: Vec<&String> = acked.iter().filter(|id| !have.contains(*id)).collect();
    assert!(lost.is_empty(), "acknowledged but lost: {lost:?}");
}

/// Publishes `PREFIX-0`, `PREFIX-1`, … in turn through the instance on `port`; the ids
/// acknowledged. Refused or unanswered ones (the instance is down) are left out.
async fn publish_all(port: u16, prefix: String, range: std::ops::Range<u32>) -> Vec<String> {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    let mut acked = Vec::new();
    for i in range {
        let id = format!("{prefix}-{i}");
        match put_shared(&client, port, &id).await {
            Ok(()) => acked.push(id),
            Err(e) => eprintln!("PUT {id} on {port}: {e}"),
        }
    }
    acked
}

/// `PUBLISHERS` publishers on each port at once, each its own prefix; every id acknowledged.
async fn publish_through(ports: &[(u16, &str)], range: std::ops::Range<u32>) -> Vec<String> {
    let mut runs = Vec::new();
    for &(port, name) in ports {
        for k in 0..PUBLISHERS {
            runs.push(tokio::spawn(publish_all(port, format!("{name}{k}"), range.clone())));
        }
    }
    let mut acked = Vec::new();
    for run in runs {
        acked.extend(run.await.expect("a publisher"));
    }
    acked
}

/// Concurrent publishers per instance: commits of the two instances interleave tightly.
const PUBLISHERS: u32 = 3;

/// Asserts that each publisher's items (`PREFIX-N`), at their first arrival, come in the
/// order it wrote them: its commit order.
fn in_order_per_publisher(label: &str, ids: &[&str]) {
    let mut firsts: std::collections::HashMap<&str, Vec<u32>> = Default::default();
    let mut once = HashSet::new();
    for id in ids {
        let (prefix, n) = id.rsplit_once('-').expect("PREFIX-N");
        if once.insert(*id) {
            firsts.entry(prefix).or_default().push(n.parse().expect("N"));
        }
    }
    for (prefix, ns) in &firsts {
        assert!(ns.windows(2).all(|w| w[0] < w[1]), "{label}: {prefix} in commit order: {ns:?}");
    }
}

/// Checks one subscription's pushes as its subscriber would: each acknowledged item once,
/// each publisher's items in the order it wrote them, and each push's `PreviousCursor` the
/// `LastCursor` of the one before. The only exception allowed is what a crash costs (the
/// changes in flight in the killed instance, pushed twice), and it must show as a break in
/// the chain. Nothing acknowledged is missing.
fn check(label: &str, got: &Received, acked: &HashSet<String>) {
    let ids: Vec<&str> = got.iter().map(|(i, _, _)| i.as_str()).collect();
    let mut seen = HashSet::new();
    let duplicates = ids.iter().filter(|i| !seen.insert(**i)).count();
    let missing: Vec<&String> = acked.iter().filter(|i| !seen.contains(i.as_str())).collect();
    let batch = store_postgres::push_shards::BATCH;
    assert!(duplicates <= batch && missing.is_empty(), "{label}: {duplicates} twice, missing {missing:?}");
    in_order_per_publisher(label, &ids);
    let breaks: Vec<&str> =
        got.windows(2).filter(|w| w[1].1.as_deref() != Some(w[0].2.as_str())).map(|w| w[1].0.as_str()).collect();
    if !breaks.is_empty() || duplicates > 0 || !missing.is_empty() {
        eprintln!("{label}: chain breaks at {breaks:?}, {duplicates} pushed twice, missing {missing:?}");
    }
    let crash = duplicates > 0 || !missing.is_empty();
    assert!(
        breaks.is_empty() || (crash && breaks.len() <= 2),
        "{label}: the chain breaks at {breaks:?} though nothing was lost or repeated (pushes out of commit order)"
    );
    assert!(!crash || !breaks.is_empty(), "{label}: a loss or repeat the chain hides");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_get_each_change_once_in_order_while_an_instance_is_killed_and_restarted() {
    let (host, (mut a, pa), (b, pb)) = two_instances().await;
    // Two subscribers, each on two views.
    let alice_nodes = ["shared?order=created", "shared?order=modified"];
    let bob_nodes = ["shared?order=modified", "shared?order=created"];
    let mut alice = host.login("alice").await;
    let mut bob = host.login("bob").await;
    for n in alice_nodes {
        subscribe(&mut alice, n, "alice@localhost").await;
    }
    for n in bob_nodes {
        subscribe(&mut bob, n, "bob@localhost").await;
    }

    // Both instances take publishes at once; then one is killed while the other goes on;
    // then it comes back and both take publishes again.
    let mut acked = publish_through(&[(pa, "a"), (pb, "b")], 0..20).await;
    let during = tokio::spawn(async move { publish_through(&[(pb, "b")], 20..40).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    a.kill();
    acked.extend(during.await.unwrap());
    a.restart();
    http_ready(&a, pa).await;
    acked.extend(publish_through(&[(pa, "a"), (pb, "b")], 40..60).await);
    assert_eq!(acked.len() as u32, PUBLISHERS * 100, "every publish acknowledged");
    let acked: HashSet<String> = acked.into_iter().collect();

    let quiet = Duration::from_secs(5);
    let (got_alice, got_bob) =
        tokio::join!(collect(&mut alice, &alice_nodes, &acked, quiet), collect(&mut bob, &bob_nodes, &acked, quiet));
    for (nodes, got, who) in [(&alice_nodes, &got_alice, "alice"), (&bob_nodes, &got_bob, "bob")] {
        for (node, got) in nodes.iter().zip(got) {
            check(&format!("{who} on {node}"), got, &acked);
        }
    }
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websub_documents_come_once_in_order_from_whichever_instance_holds_the_feed() {
    use testkit::websub::{Callback, entry_ids, subscribed};
    let (_host, (mut a, pa), (b, pb)) = two_instances().await;
    // Subscribed through one instance; documents of changes committed through either.
    let cb = Callback::start().await;
    let topic = format!("http://127.0.0.1:{pa}/feeds/shared/");
    subscribed(&format!("http://127.0.0.1:{pa}/hub"), &topic, &cb, &[]).await;
    let mut acked = publish_through(&[(pa, "a"), (pb, "b")], 0..10).await;
    let delivered = |n: usize| {
        let cb = cb.clone();
        async move {
            let started = Instant::now();
            loop {
                let ids = entry_ids(&cb.accepted());
                if ids.iter().collect::<HashSet<_>>().len() >= n {
                    return ids;
                }
                assert!(started.elapsed() < Duration::from_secs(20), "{} of {n} delivered: {ids:?}", ids.len());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let ids = delivered(acked.len()).await;
    assert_eq!(ids.len(), acked.len(), "each document once, by one instance: {ids:?}");

    // The instance the subscription was made through dies; the other delivers what follows.
    a.kill();
    acked.extend(publish_through(&[(pb, "b")], 10..20).await);
    let ids = delivered(acked.len()).await;
    let unique: HashSet<&String> = ids.iter().collect();
    assert_eq!(unique, acked.iter().collect(), "every acknowledged change delivered");
    // At least once: a crash may repeat the documents in flight, never reorder them.
    assert!(ids.len() - unique.len() <= store_postgres::push_shards::BATCH, "{ids:?}");
    in_order_per_publisher("the callback", &ids.iter().map(String::as_str).collect::<Vec<_>>());
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_held_by_one_instance_wakes_for_a_publish_through_another() {
    let (_host, (a, pa), (b, pb)) = two_instances().await;
    let held = |port: u16, q: String| {
        tokio::spawn(async move {
            let res = reqwest::get(format!("http://127.0.0.1:{port}/feeds/shared/?{q}")).await.expect("GET");
            let doc: Value = res.json().await.expect("JSON");
            let ids: Vec<String> =
                doc["items"].as_array().unwrap().iter().map(|i| i["id"].as_str().unwrap().to_string()).collect();
            (Instant::now(), ids)
        })
    };
    // Each round waits after the item of the one before (the feed starts empty).
    let mut since = String::new();
    for (first, second) in [(pa, pb), (pb, pa)] {
        // Held on the other instance, and on the publishing one.
        let q = format!("order=modified&timeout=20&max=1{since}");
        let (other, own) = (held(second, q.clone()), held(first, q));
        tokio::time::sleep(Duration::from_millis(500)).await;
        let id = format!("lp{first}");
        let published = Instant::now();
        put(first, &id).await;
        for h in [other, own] {
            let (at, ids) = h.await.unwrap();
            assert_eq!(ids, std::slice::from_ref(&id));
            assert!(at.duration_since(published) < Duration::from_secs(2), "woken at once: {:?}", at - published);
        }
        since = format!("&since=id%3A{id}");
    }
    drop((a, b));
}
