//! Crash safety and graceful shutdown, end to end (SPEC §6 "the result is sent only after the
//! change is durable", §8 "nothing in the database is lost by a crash of the process at any
//! moment", "SIGTERM: finish or fail what is in flight, close the stream, exit 0"), against a
//! real Prosody and the real `smartfeeds` binary.
//!
//! One Prosody and one smartfeeds (restarted on the same database) for the whole file:
//!
//! - [`sigkill_rounds_lose_no_acknowledged_change`]: several publishers pipeline hundreds of
//!   publishes each (new items, and updates of earlier ones) while a reader takes cursors and
//!   a subscriber subscribes; the process is SIGKILLed at a random moment a few hundred ms in,
//!   several rounds in a row. While it is down, requests get an error from Prosody (never
//!   silence); after each restart every acknowledged publish is there exactly once with the
//!   acknowledged payload, cursors taken before the kill resume without skipping, and the
//!   subscriptions are intact. Then a SIGTERM while requests are in flight: exit 0 within
//!   10 s, every request answered exactly once, the stream closed, and the database passes
//!   `PRAGMA integrity_check` and holds every acknowledged publish.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use minidom::Element;
use testkit::pubsub::*;
use testkit::push::{subscribe_iq, subscriptions};
use testkit::server::COMPONENT_DOMAIN;
use testkit::server::prosody::COMPONENT_NS;
use testkit::smartfeeds::Smartfeeds;
use testkit::{Client, Connection, Prosody, Server, TestServer, error_condition, set_attr, stanza_type, to_xml};

/// Publisher accounts, each in the feed's `publishers`.
const PUBLISHERS: usize = 4;
/// New items each publisher pipelines per round.
const NEW_PER_ROUND: usize = 300;
/// Items of the previous round each publisher updates per round.
const UPDATES_PER_ROUND: usize = 40;
/// SIGKILL rounds.
const ROUNDS: usize = 4;
const FEED: &str = "crash";

const TABLES: &str = r#"
[limits]
requests_per_second = 200.0
request_burst = 400.0
request_backlog = 2000.0

[[feeds]]
name = "crash"
publishers = ["pub0@localhost", "pub1@localhost", "pub2@localhost", "pub3@localhost"]
"#;

/// The entry published for version `v` of item `id`: its title says both. No author: the
/// subscriptions of this test are to `author=` views nothing is published to, so Prosody
/// (single-threaded Lua, the slowest part here) is not also busy routing thousands of pushes.
fn versioned_entry(id: &str, v: usize) -> String {
    entry(&format!("urn:crash:{id}"), &title(id, v), None, &[&format!("v{v}")])
}

fn title(id: &str, v: usize) -> String {
    format!("{id} v{v}")
}

/// Queues every iq (a fresh id each) without waiting; returns the ids in order.
fn queue_all(conn: &mut Connection, iqs: Vec<Element>) -> Vec<String> {
    iqs.into_iter()
        .map(|mut iq| {
            let id = conn.fresh_id();
            set_attr(&mut iq, "id", &id);
            conn.queue(iq);
            id
        })
        .collect()
}

/// Collects the replies to `ids` until all came or none came for `quiet`.
async fn collect(conn: &mut Connection, ids: &[String], quiet: Duration) -> HashMap<String, Element> {
    collect_counting(conn, ids, quiet, &AtomicUsize::new(0)).await
}

/// [`collect`], adding one to `results` for every result as it arrives.
async fn collect_counting(
    conn: &mut Connection,
    ids: &[String],
    quiet: Duration,
    results: &AtomicUsize,
) -> HashMap<String, Element> {
    let mut want: HashSet<&str> = ids.iter().map(String::as_str).collect();
    let mut got = HashMap::new();
    while !want.is_empty() {
        let reply = conn
            .wait_for(quiet, |el| {
                el.name() == "iq"
                    && matches!(stanza_type(el), "result" | "error")
                    && el.attr("id").is_some_and(|i| want.contains(i))
            })
            .await;
        let Some(reply) = reply else { break };
        let id = reply.attr("id").expect("matched on id").to_string();
        if stanza_type(&reply) == "result" {
            results.fetch_add(1, Ordering::SeqCst);
        }
        want.remove(id.as_str());
        got.insert(id, reply);
    }
    got
}

/// Replies to `ids` that arrive (again) within `wait`: a second reply to one request.
async fn duplicates(conn: &mut Connection, ids: &HashSet<String>, wait: Duration) -> Vec<String> {
    tokio::time::sleep(wait).await;
    conn.drain()
        .into_iter()
        .filter(|el| el.name() == "iq" && el.attr("id").is_some_and(|i| ids.contains(i)))
        .map(|el| to_xml(&el))
        .collect()
}

/// Whether `reply` is Prosody's bounce for a disconnected component (XEP-0114 does not say
/// what a server answers; Prosody 0.12 sends `remote-server-timeout` with
/// `<not-connected xmlns="xmpp:prosody.im/protocol/component"/>` from the component's domain).
fn is_prosody_bounce(reply: &Element) -> bool {
    stanza_type(reply) == "error"
        && reply.attr("from") == Some(COMPONENT_DOMAIN)
        && error_condition(reply).as_deref() == Some("remote-server-timeout")
        && reply.get_child("error", testkit::xml::NS_CLIENT).is_some_and(|e| e.has_child("not-connected", COMPONENT_NS))
}

/// Every item of a view, walking pages of 500 from `after` (or the start) to the end, and
/// the view's `<count>` as the first page gave it.
async fn walk(conn: &mut Connection, node: &str, after: Option<&str>) -> (Vec<PageItem>, Option<u64>) {
    let mut items = Vec::new();
    let mut cursor = after.map(String::from);
    let mut count = None;
    loop {
        let mut req = Pull::node(node).max(500);
        if let Some(c) = &cursor {
            req = req.after(c);
        }
        let page = pull(conn, &req).await;
        count = count.or(page.count);
        if page.items.is_empty() {
            return (items, count);
        }
        cursor = Some(page.last.clone().unwrap_or_else(|| panic!("a non-empty page has <last>: {}", page.raw)));
        items.extend(page.items);
    }
}

/// What one publisher sent in a round and what came back.
struct Sent {
    /// Item id → version, for every publish sent.
    sent: Vec<(String, usize)>,
    /// Item id → version, for every publish acknowledged with a result.
    acked: Vec<(String, usize)>,
    /// Error replies: (condition, from Prosody?).
    errors: Vec<Element>,
    unanswered: usize,
}

/// One publisher's round: updates of its acknowledged items of the previous round, then new
/// items, all pipelined; then the replies until none comes for 5 s (the kill happens within
/// a second, so a quiet 5 s means nothing more will come).
async fn publish_round(
    mut client: Client,
    p: usize,
    round: usize,
    to_update: Vec<String>,
    acks: Arc<AtomicUsize>,
) -> (Client, Sent) {
    let mut plan: Vec<(String, usize)> = to_update.into_iter().map(|id| (id, round)).collect();
    plan.extend((0..NEW_PER_ROUND).map(|i| (format!("r{round}-p{p}-{i:04}"), 0)));
    let iqs = plan.iter().map(|(id, v)| publish_iq(FEED, Some(id), &versioned_entry(id, *v))).collect();
    let ids = queue_all(&mut client, iqs);
    let replies = collect_counting(&mut client, &ids, Duration::from_secs(3), &acks).await;
    let mut sent = Sent { sent: Vec::new(), acked: Vec::new(), errors: Vec::new(), unanswered: 0 };
    for (iq_id, (item, v)) in ids.iter().zip(plan) {
        match replies.get(iq_id) {
            Some(r) if stanza_type(r) == "result" => {
                let raw = to_xml(r);
                let published = r
                    .get_child("pubsub", PUBSUB)
                    .and_then(|p| p.get_child("publish", PUBSUB))
                    .and_then(|p| p.get_child("item", PUBSUB))
                    .and_then(|i| i.attr("id"));
                assert_eq!(published, Some(item.as_str()), "the result names the published item: {raw}");
                sent.acked.push((item.clone(), v));
            }
            Some(r) => sent.errors.push(r.clone()),
            None => sent.unanswered += 1,
        }
        sent.sent.push((item, v));
    }
    (client, sent)
}

/// The pulls whose `<last>` cursors a reader keeps: the last page of the created and the
/// modified order, the first page of newest-first.
fn cursor_pulls() -> Vec<(String, Element)> {
    let created = format!("{FEED}?order=created");
    let modified = format!("{FEED}?order=modified");
    let newest = format!("{FEED}?order=-created");
    vec![
        (created.clone(), Pull::node(&created).before("").max(10).iq()),
        (modified.clone(), Pull::node(&modified).before("").max(10).iq()),
        (newest.clone(), Pull::node(&newest).max(10).iq()),
    ]
}

/// `(node, <last> cursor, id of the page's last item)` of an items result; `None` for an
/// error (the component was gone) or an empty page.
fn cursor_in(node: &str, reply: &Element) -> Option<(String, String, String)> {
    if stanza_type(reply) != "result" {
        assert!(is_prosody_bounce(reply), "reading {node}: {}", to_xml(reply));
        return None;
    }
    let page = parse_page(reply);
    Some((node.to_string(), page.last.clone()?, page.items.last()?.id.clone()))
}

/// What Prosody 0.12 logs when it has seen the component's connection end.
const DISCONNECTED: &str = "component disconnected: feeds.localhost";

fn count_in_log(path: &std::path::Path, needle: &str) -> usize {
    std::fs::read_to_string(path).unwrap_or_default().matches(needle).count()
}

/// Waits until `needle` occurs `n` times in the log.
fn wait_for_log(path: &std::path::Path, needle: &str, n: usize, limit: Duration) {
    let started = Instant::now();
    while count_in_log(path, needle) < n {
        assert!(started.elapsed() < limit, "no {needle:?} in {} within {limit:?}", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Logs in until it works (Prosody stays up throughout; this only guards slow starts).
async fn login(prosody: &TestServer<Prosody>, name: &str) -> Client {
    prosody.login(name).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_rounds_lose_no_acknowledged_change() {
    let prosody = Prosody::start();
    for p in 0..PUBLISHERS {
        prosody.create_user(&format!("pub{p}"), "password");
    }
    let mut sf = Smartfeeds::start(&prosody, TABLES);
    let mut publishers = Vec::new();
    for p in 0..PUBLISHERS {
        publishers.push(login(&prosody, &format!("pub{p}")).await);
    }
    let mut admin = login(&prosody, "admin").await;
    let mut alice = login(&prosody, "alice").await;
    let mut bob = login(&prosody, "bob").await;

    // Subscriptions made before any crash: alice's full JID, bob's bare JID.
    let alice_jid = alice.jid().to_string();
    let mut subscribed: HashSet<(String, String)> = HashSet::new();
    for (conn, node, jid) in [
        (&mut alice, format!("{FEED}?order=modified&author=alice"), alice_jid.clone()),
        (&mut bob, format!("{FEED}?author=bob"), "bob@localhost".to_string()),
    ] {
        let reply = conn.iq(subscribe_iq(&node, &jid)).await;
        assert_eq!(stanza_type(&reply), "result", "{}", to_xml(&reply));
        subscribed.insert((node, jid));
    }

    // Every version ever sent and the newest acknowledged version, by item id.
    let mut sent_versions: HashMap<String, HashSet<usize>> = HashMap::new();
    let mut acked_version: HashMap<String, usize> = HashMap::new();
    // A few items before the first round, so there are cursors to keep from the start.
    let seeds: Vec<String> = (0..20).map(|i| format!("seed-{i:02}")).collect();
    let iqs = seeds.iter().map(|id| publish_iq(FEED, Some(id), &versioned_entry(id, 0))).collect();
    for (id, reply) in seeds.iter().zip(iq_all(&mut admin, iqs).await) {
        assert_eq!(stanza_type(&reply), "result", "{}", to_xml(&reply));
        sent_versions.entry(id.clone()).or_default().insert(0);
        acked_version.insert(id.clone(), 0);
    }
    let mut acked_last_round: Vec<Vec<String>> = vec![Vec::new(); PUBLISHERS];
    let (mut total_sent, mut total_acked) = (0usize, 0usize);

    for round in 0..ROUNDS {
        // The kill comes at a random moment while publishes are being acknowledged: once a
        // random number of them have been, plus a random few ms.
        // (Acknowledgements reach the clients a few hundred behind what the component has
        // sent: Prosody routes them at its own pace. Hence the low numbers.)
        let kill_at_acks = rand::random_range(50..(PUBLISHERS * NEW_PER_ROUND / 3));
        let jitter = Duration::from_millis(rand::random_range(0..50));
        // Cursors handed out before the round, at the end of the previous one.
        let mut cursors = Vec::new();
        for (node, iq) in cursor_pulls() {
            let reply = admin.iq(iq).await;
            cursors.extend(cursor_in(&node, &reply));
        }
        let started = Instant::now();
        let acks = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for (p, client) in publishers.drain(..).enumerate() {
            let to_update: Vec<String> = acked_last_round[p].iter().take(UPDATES_PER_ROUND).cloned().collect();
            tasks.push(tokio::spawn(publish_round(client, p, round, to_update, acks.clone())));
        }

        // While they publish (from another task, so the kill keeps its time): cursors of
        // three views and a new subscription. Their replies may come after the kill (what
        // the component wrote before it died) or never (lost in flight).
        let node = format!("{FEED}?author=round{round}");
        let (sub_node, sub_jid) = (node.clone(), alice_jid.clone());
        let midway = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let reads = cursor_pulls();
            let read_ids = queue_all(&mut admin, reads.iter().map(|(_, iq)| iq.clone()).collect());
            let sub_ids = queue_all(&mut alice, vec![subscribe_iq(&sub_node, &sub_jid)]);
            let read_replies = collect(&mut admin, &read_ids, Duration::from_secs(8)).await;
            let sub_reply = collect(&mut alice, &sub_ids, Duration::from_secs(8)).await.into_values().next();
            let cursors: Vec<_> = reads
                .iter()
                .zip(&read_ids)
                .filter_map(|((node, _), id)| cursor_in(node, read_replies.get(id)?))
                .collect();
            (admin, alice, cursors, sub_reply)
        });

        let deadline = started + Duration::from_secs(20);
        while acks.load(Ordering::SeqCst) < kill_at_acks && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(jitter).await;
        let disconnects = count_in_log(&prosody.log_path(), DISCONNECTED);
        sf.kill();
        let killed_at = started.elapsed();
        let acked_at_kill = acks.load(Ordering::SeqCst);
        let (a, b, mid_cursors, sub_reply) = midway.await.expect("midway task");
        (admin, alice) = (a, b);
        let mid_count = mid_cursors.len();
        cursors.extend(mid_cursors);
        match sub_reply {
            Some(r) if stanza_type(&r) == "result" => {
                subscribed.insert((node, alice_jid.clone()));
            }
            Some(r) => assert!(is_prosody_bounce(&r), "subscribe during the round: {}", to_xml(&r)),
            None => {}
        }

        // While it is down, Prosody answers for it: a get and a set, both with an error.
        // Prosody must first have read the EOF: a stanza it routes in the moment between the
        // process's death and that read goes into the dead socket and is lost (XEP-0114 has
        // no acknowledgements; that window is the server's, not the component's). Its log
        // says when it knows.
        wait_for_log(&prosody.log_path(), DISCONNECTED, disconnects + 1, Duration::from_secs(20));
        for iq in [Pull::node(FEED).iq(), subscribe_iq(FEED, "bob@localhost")] {
            let sent = to_xml(&iq);
            let reply = bob.iq_timeout(iq, Duration::from_secs(10)).await;
            assert!(
                is_prosody_bounce(&reply),
                "a request to the component while it is down gets Prosody's error, not silence: {sent} → {}",
                to_xml(&reply)
            );
        }

        let mut round_sent = 0;
        let mut round_acked = 0;
        let mut bounced = 0;
        let mut unanswered = 0;
        for (p, task) in tasks.into_iter().enumerate() {
            let (client, sent) = task.await.expect("publisher task");
            publishers.push(client);
            for e in &sent.errors {
                assert!(
                    is_prosody_bounce(e),
                    "the only errors are Prosody's for the disconnected component: {}",
                    to_xml(e)
                );
            }
            bounced += sent.errors.len();
            unanswered += sent.unanswered;
            round_sent += sent.sent.len();
            round_acked += sent.acked.len();
            for (id, v) in &sent.sent {
                sent_versions.entry(id.clone()).or_default().insert(*v);
            }
            acked_last_round[p] = sent.acked.iter().filter(|(_, v)| *v == 0).map(|(id, _)| id.clone()).collect();
            for (id, v) in sent.acked {
                let newest = acked_version.entry(id).or_insert(v);
                *newest = (*newest).max(v);
            }
        }
        total_sent += round_sent;
        total_acked += round_acked;
        eprintln!(
            "round {round}: SIGKILL at {killed_at:?} ({acked_at_kill} acknowledged by then); {round_sent} \
             publishes sent, {round_acked} acknowledged, \
             {bounced} bounced by Prosody, {unanswered} lost in flight (unanswered); {mid_count} cursors read \
             during the round"
        );
        assert!(round_acked > 0, "round {round}: some publishes are acknowledged before the kill");

        sf.restart();
        verify(&mut admin, &sent_versions, &acked_version, &cursors, round).await;
        let mut have: HashSet<(String, String)> = HashSet::new();
        for conn in [&mut alice, &mut bob] {
            for s in subscriptions(conn, None).await {
                have.insert((s.node, s.jid));
            }
        }
        assert!(
            subscribed.is_subset(&have),
            "round {round}: every acknowledged subscription survives the crash; missing {:?}",
            subscribed.difference(&have).collect::<Vec<_>>()
        );
    }
    assert!(total_acked < total_sent, "the kills interrupted the publishing");
    eprintln!(
        "{ROUNDS} SIGKILLs survived: {total_sent} publishes sent, {total_acked} acknowledged, {} distinct items \
         acknowledged, all present",
        acked_version.len()
    );

    graceful_shutdown(sf, &mut admin, &mut alice, bob, &mut acked_version).await;
}

/// After a restart: the whole feed, in created order, is every acknowledged item exactly
/// once with at least its acknowledged version, nothing that was never sent, and the
/// cursors taken before the kill resume exactly where they were.
async fn verify(
    admin: &mut Connection,
    sent_versions: &HashMap<String, HashSet<usize>>,
    acked_version: &HashMap<String, usize>,
    cursors: &[(String, String, String)],
    round: usize,
) {
    let node = format!("{FEED}?order=created");
    let (items, count) = walk(admin, &node, None).await;
    let ids: Vec<&str> = items.iter().map(|i| i.id.as_str()).collect();
    let unique: HashSet<&str> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "round {round}: no item appears twice in the created order");
    assert_eq!(count, Some(ids.len() as u64), "round {round}: <count> matches the items listed");
    for item in &items {
        let versions =
            sent_versions.get(&item.id).unwrap_or_else(|| panic!("round {round}: item {} was never sent", item.id));
        let t = item.title().unwrap_or_else(|| panic!("round {round}: item {} has an entry with a title", item.id));
        let v = versions
            .iter()
            .copied()
            .find(|v| t == title(&item.id, *v))
            .unwrap_or_else(|| panic!("round {round}: item {} has a payload that was never sent: {t:?}", item.id));
        if let Some(acked) = acked_version.get(&item.id) {
            assert!(v >= *acked, "round {round}: item {} is at v{v} though v{acked} was acknowledged", item.id);
        }
    }
    let missing: Vec<&String> = acked_version.keys().filter(|id| !unique.contains(id.as_str())).collect();
    assert!(
        missing.is_empty(),
        "round {round}: {} acknowledged publishes are lost, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );

    // The modified order holds the same items, each once.
    let (modified, mcount) = walk(admin, &format!("{FEED}?order=modified"), None).await;
    let mids: HashSet<&str> = modified.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(mids.len(), modified.len(), "round {round}: no item twice in the modified order");
    assert_eq!(mids, unique, "round {round}: created and modified orders hold the same items");
    assert_eq!(mcount, count, "round {round}");

    // Cursors from before the kill resume exactly after their item.
    for (node, cursor, at) in cursors {
        let (full, _) = walk(admin, node, None).await;
        let pos = full
            .iter()
            .position(|i| &i.id == at)
            .unwrap_or_else(|| panic!("round {round}: {at}, read from {node} before the kill, is gone"));
        let want: Vec<&str> = full[pos + 1..].iter().map(|i| i.id.as_str()).collect();
        let (resumed, _) = walk(admin, node, Some(cursor)).await;
        let got: Vec<&str> = resumed.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(
            got.len(),
            want.len(),
            "round {round}: resuming {node} after {cursor} (item {at}) gives every later item"
        );
        assert_eq!(got, want, "round {round}: resuming {node} after {cursor} (item {at})");
        eprintln!("round {round}: {node} resumed after {cursor}: {} items, none skipped", got.len());
    }
    eprintln!("round {round}: {} items checked after the restart, each once", ids.len());
}

/// SIGTERM while requests are in flight: alice (rate-limited: more than her burst, so many
/// wait for her rate) pulls, admin (exempt) publishes, and bob keeps sending one pull every
/// 20 ms from before the signal until after the exit. Every request gets exactly one reply;
/// the process exits 0 within 10 s with the stream closed; the database is sound and holds
/// every acknowledged publish.
async fn graceful_shutdown(
    mut sf: Smartfeeds,
    admin: &mut Client,
    alice: &mut Client,
    mut bob: Client,
    acked_version: &mut HashMap<String, usize>,
) {
    let pulls = (0..1200).map(|_| Pull::node(&format!("{FEED}?order=created")).max(20).iq()).collect();
    let alice_ids = queue_all(alice, pulls);
    let publishes = (0..300)
        .map(|i| {
            let id = format!("term-{i:04}");
            publish_iq(FEED, Some(&id), &versioned_entry(&id, 0))
        })
        .collect();
    let admin_ids = queue_all(admin, publishes);

    // Bob's steady trickle, on its own task, timestamped.
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let trickle = tokio::spawn(async move {
        let mut sent: Vec<(String, Instant)> = Vec::new();
        loop {
            let mut iq = Pull::node(FEED).max(1).iq();
            let id = bob.fresh_id();
            set_attr(&mut iq, "id", &id);
            bob.queue(iq);
            sent.push((id, Instant::now()));
            tokio::select! {
                _ = &mut stop_rx => break,
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
        (bob, sent)
    });

    tokio::time::sleep(Duration::from_millis(300)).await;
    let signalled = Instant::now();
    let stopper = std::thread::spawn(move || {
        let status = sf.stop();
        (sf, status, signalled.elapsed())
    });
    let (sf, status, took) =
        tokio::task::spawn_blocking(move || stopper.join().expect("stop thread")).await.expect("join the stop thread");
    // Prosody answers for the component from now on; a few more of bob's requests see that.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _ = stop_tx.send(());
    let (mut bob_conn, bob_sent) = trickle.await.expect("trickle task");
    eprintln!("SIGTERM: exited with {status:?} after {took:?}");

    // Every request gets exactly one reply, whoever gives it.
    let mut tally: HashMap<(&'static str, &'static str), usize> = HashMap::new();
    let mut silent = Vec::new();
    let mut dups = Vec::new();
    let bob_ids: Vec<String> = bob_sent.iter().map(|(id, _)| id.clone()).collect();
    for (who, conn, ids) in
        [("alice", &mut **alice, &alice_ids), ("admin", &mut **admin, &admin_ids), ("bob", &mut *bob_conn, &bob_ids)]
    {
        let replies = collect(conn, ids, Duration::from_secs(5)).await;
        for id in ids.iter() {
            match replies.get(id) {
                None => {
                    *tally.entry((who, "no reply")).or_default() += 1;
                    let when = bob_sent.iter().find(|(b, _)| b == id && who == "bob").map(|(_, t)| *t);
                    let rel = when.map(|t| {
                        if t < signalled {
                            format!("{:?} before the signal", signalled - t)
                        } else {
                            format!("{:?} after the signal", t - signalled)
                        }
                    });
                    silent.push(format!("{who} {id} ({})", rel.unwrap_or_else(|| "sent before the signal".into())));
                }
                Some(r) if stanza_type(r) == "result" => {
                    *tally.entry((who, "result from the component")).or_default() += 1
                }
                Some(r) if is_prosody_bounce(r) => {
                    *tally.entry((who, "remote-server-timeout from Prosody")).or_default() += 1
                }
                Some(r) if error_condition(r).as_deref() == Some("service-unavailable") => {
                    *tally.entry((who, "service-unavailable from the component")).or_default() += 1
                }
                Some(r) => panic!("{who}: unexpected reply during shutdown: {}", to_xml(r)),
            }
            if who == "admin"
                && let Some(r) = replies.get(id)
                && stanza_type(r) == "result"
            {
                let item = r
                    .get_child("pubsub", PUBSUB)
                    .and_then(|p| p.get_child("publish", PUBSUB))
                    .and_then(|p| p.get_child("item", PUBSUB))
                    .and_then(|i| i.attr("id"))
                    .expect("a publish result names its item");
                acked_version.insert(item.to_string(), 0);
            }
        }
        let set: HashSet<String> = ids.iter().cloned().collect();
        dups.extend(duplicates(conn, &set, Duration::from_millis(300)).await);
    }
    eprintln!(
        "SIGTERM: {} requests from alice, {} from admin, {} from bob; replies: {tally:?}; unanswered: {}",
        alice_ids.len(),
        admin_ids.len(),
        bob_ids.len(),
        silent.len()
    );
    assert!(dups.is_empty(), "a request got a second reply: {dups:?}");
    assert_eq!(status.and_then(|s| s.code()), Some(0), "SIGTERM → exit 0 (took {took:?})\n{}", sf.log_tail(30));
    assert!(took < Duration::from_secs(10), "the process exits within 10 s of SIGTERM (took {took:?})");
    let log = std::fs::read_to_string(sf.log_path()).expect("the smartfeeds log");
    let last_run = &log[log.rfind("shutting down").unwrap_or_else(|| panic!("no 'shutting down' in the log"))..];
    assert!(last_run.contains("stream closed"), "the log says the stream was closed:\n{}", sf.log_tail(20));

    // The database, read directly after the clean stop.
    let db = rusqlite::Connection::open_with_flags(sf.db_path(), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("open the database read-only");
    let check: String = db.query_row("PRAGMA integrity_check", [], |r| r.get(0)).expect("integrity_check");
    assert_eq!(check, "ok", "PRAGMA integrity_check");
    let mut stmt = db
        .prepare("SELECT items.id FROM items JOIN feeds ON feeds.id = items.feed WHERE feeds.name = ?1")
        .expect("query items");
    let stored: HashSet<String> =
        stmt.query_map([FEED], |r| r.get::<_, String>(0)).expect("items").collect::<Result<_, _>>().expect("item ids");
    let lost: Vec<&String> = acked_version.keys().filter(|id| !stored.contains(*id)).collect();
    assert!(lost.is_empty(), "acknowledged publishes missing from the database: {lost:?}");
    eprintln!(
        "after the clean stop: integrity_check ok, {} items stored, all {} acknowledged ones among them",
        stored.len(),
        acked_version.len()
    );

    // Exactly one reply each. The one window XEP-0114 leaves open: what the server routed to
    // us after our footer left and before it read it; the component logs each such request
    // by id, and nothing else may go unanswered.
    let late: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("cannot be answered"))
        .filter_map(|l| l.split(" id=").nth(1))
        .filter_map(|rest| rest.split_whitespace().next())
        .collect();
    let unexplained: Vec<&String> =
        silent.iter().filter(|s| !late.iter().any(|id| s.split_whitespace().nth(1) == Some(*id))).collect();
    eprintln!(
        "SIGTERM: {} of {} requests got no reply ({} logged as arriving after the footer)",
        silent.len(),
        alice_ids.len() + admin_ids.len() + bob_ids.len(),
        late.len()
    );
    assert!(unexplained.is_empty(), "requests left without a reply at SIGTERM: {unexplained:?}\n{}", sf.log_tail(30));
}
