//! End to end on a two-node ejabberd cluster ([`EjabberdCluster`]), whatever
//! `SMARTFEEDS_TEST_SERVER` says: a private PostgreSQL database and two smartfeeds instances
//! with one configuration, A attached to node a's component port and B to node b's. alice is
//! logged in on node a and bob on node b, each subscribed to three views of the feed
//! `shared`: `shared?order=created`, `shared?order=modified`, and the feed's default view,
//! which alice spells `shared` and bob `shared?order=-created`. (One JID holds one
//! subscription per view: a second spelling from the same JID replaces the first, so the
//! two spellings need two subscribers.) Publishers write through both instances at once,
//! over HTTP (PUTs to each instance) and over XMPP (`bot` logged in on each node; a node
//! routes the domain's requests to the instance attached to it). While they write, a reader
//! (`admin` on each node) pages the feed forward with RSM through A and B in turn, and must
//! read every change once, in commit order.
//!
//! Each test has a cluster of its own: nextest runs every test in a process of its own, and
//! the instances of two tests could not share the cluster's one `feeds.localhost` anyway.
//!
//! Each subscription is checked as its subscriber would, against the feed's commit order
//! (the `created` view pulled at the end: times and tie order are assigned in commit order):
//! every change once, in commit order, each push's `PreviousCursor` the `LastCursor` of the
//! push before (the first push has none: the view was empty), and the ids received are
//! exactly the ids acknowledged to the publishers.
//!
//! The second test SIGKILLs the instance that pushes the feed's changes (the one whose
//! `smartfeeds_pushes_sent_total` grew) while publishers write through the other, then
//! restarts it. A crash may repeat what the killed instance had taken from the push log and
//! not yet deleted: one batch, `push_shards::BATCH` (64) changes (SPEC §12: "duplicating at
//! most what was in flight"); nothing is lost, since a change leaves the log only once its
//! pushes were written. So per subscription nothing may be missing and at most 64 changes
//! repeated, as one run of consecutive changes in commit order, none of them published after
//! the restart; the repeat must show as a `PreviousCursor` that is not the `LastCursor`
//! before it, and everything else must arrive once, in order, chained.
//!
//! Failures are gathered over all subscriptions and reported together.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::time::{Duration, Instant};

use store_postgres::push_shards::BATCH;
use testkit::instances::{Received, collect, fresh_database, instance_on, put_shared, wait_logged};
use testkit::process::free_port;
use testkit::pubsub::{Pull, entry, publish_iq, pull, walk};
use testkit::push::{subscribe, subscriptions};
use testkit::smartfeeds::{metric, scrape_metrics};
use testkit::{Client, EjabberdCluster, Smartfeeds, TestServer, stanza_type};

/// The nodes alice and bob subscribe to: the default view under two spellings, and two more.
const NODES: [[&str; 3]; 2] = [
    ["shared", "shared?order=created", "shared?order=modified"],
    ["shared?order=-created", "shared?order=created", "shared?order=modified"],
];

/// How long a publish may take (generous: parallel tests share the CPUs).
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a subscriber that still misses pushes waits for the next before giving up.
const QUIET: Duration = Duration::from_secs(10);

/// The cluster, two instances on one database, and the clients on both nodes.
struct Setup {
    /// Declared first: the instances stop before the cluster goes.
    instances: [Smartfeeds; 2],
    http: [u16; 2],
    metrics: [u16; 2],
    /// alice on node a, bob on node b.
    subscribers: [Client; 2],
    /// `bot` on node a and on node b.
    bots: [Client; 2],
    /// `admin` on node a and on node b, to read pages.
    readers: [Client; 2],
    cluster: EjabberdCluster,
}

/// The cluster, the instances (each attached to its own node), both subscribers subscribed.
async fn setup() -> Setup {
    let started_at = Instant::now();
    let cluster = EjabberdCluster::start();
    eprintln!("cluster formed after {:?}", started_at.elapsed());
    let url = fresh_database().await;
    let (http, metrics) = ([free_port(), free_port()], [free_port(), free_port()]);
    let mut started = Vec::new();
    for (i, node) in cluster.nodes().iter().enumerate() {
        let other = &cluster.nodes()[1 - i];
        // Its own node first; the other is where it would go if its node went away.
        let servers = [node.component_addr(), other.component_addr()];
        let tables = format!("[metrics]\nlisten = \"127.0.0.1:{}\"\n", metrics[i]);
        let sf = instance_on(node, &url, &servers, http[i], &tables).await;
        attached(&sf, node, 0).await;
        started.push(sf);
    }
    let instances: [Smartfeeds; 2] = started.try_into().unwrap_or_else(|_| unreachable!());
    let mut alice = cluster.a().login("alice").await;
    let mut bob = cluster.b().login("bob").await;
    for (conn, nodes, jid) in [(&mut alice, NODES[0], "alice@localhost"), (&mut bob, NODES[1], "bob@localhost")] {
        for node in nodes {
            subscribe(conn, node, jid).await;
        }
        let mut held: Vec<String> = subscriptions(conn, None).await.into_iter().map(|s| s.node).collect();
        held.sort();
        let mut want: Vec<&str> = nodes.to_vec();
        want.sort();
        assert_eq!(held, want, "{jid} holds a subscription to each node");
    }
    let bots = [cluster.a().login("bot").await, cluster.b().login("bot").await];
    let readers = [cluster.a().login("admin").await, cluster.b().login("admin").await];
    eprintln!("instances attached and subscribers subscribed after {:?}", started_at.elapsed());
    Setup { instances, http, metrics, subscribers: [alice, bob], bots, readers, cluster }
}

/// Waits until `sf`'s log past `offset` says it is connected to `node`'s component port
/// and has found the multicast service (whose answer must reach it, not the other instance).
async fn attached(sf: &Smartfeeds, node: &TestServer<testkit::Ejabberd>, offset: u64) {
    let limit = Duration::from_secs(30);
    wait_logged(sf, offset, &format!("connected server={}", node.component_addr()), limit).await;
    wait_logged(sf, offset, "multicast service found", limit).await;
}

/// Where a publisher writes: the HTTP face on a port, or XMPP through a logged-in bot.
enum Via<'a> {
    Http(u16),
    Xmpp(&'a mut Client),
}

/// Publishes `PREFIX-N` for each N of `range` in turn; returns the ids acknowledged.
async fn publish(via: Via<'_>, prefix: &str, range: Range<u32>) -> Vec<String> {
    let http = reqwest::Client::builder().timeout(PUBLISH_TIMEOUT).build().unwrap();
    let mut acked = Vec::new();
    let mut via = via;
    for i in range {
        let id = format!("{prefix}-{i}");
        let outcome = match &mut via {
            Via::Http(port) => put_shared(&http, *port, &id).await,
            Via::Xmpp(bot) => {
                let body = entry(&format!("urn:{id}"), &id, None, &[]);
                match bot.try_iq(publish_iq("shared", Some(&id), &body), PUBLISH_TIMEOUT).await {
                    Ok(reply) if stanza_type(&reply) == "result" => Ok(()),
                    Ok(reply) => Err(testkit::to_xml(&reply)),
                    Err(e) => Err(e),
                }
            }
        };
        match outcome {
            Ok(()) => acked.push(id),
            Err(e) => eprintln!("publish {id}: {e}"),
        }
    }
    acked
}

/// Runs the publishers at once, each `(via, prefix)` over `range`; every id acknowledged.
async fn publish_all(publishers: Vec<(Via<'_>, &str)>, range: Range<u32>) -> Vec<String> {
    let runs = publishers.into_iter().map(|(via, prefix)| publish(via, prefix, range.clone()));
    futures::future::join_all(runs).await.concat()
}

/// The pushes of every subscription, alice's then bob's, labelled, until each has every id
/// of `want` (see [`collect`]).
async fn collect_all(subscribers: &mut [Client; 2], want: &HashSet<String>) -> Vec<(String, Received)> {
    let started = Instant::now();
    let [alice, bob] = subscribers;
    let (a, b) = tokio::join!(collect(alice, &NODES[0], want, QUIET), collect(bob, &NODES[1], want, QUIET));
    eprintln!("pushes collected in {:?}", started.elapsed());
    let mut all = Vec::new();
    for (k, (who, got)) in [("alice (node a)", a), ("bob (node b)", b)].into_iter().enumerate() {
        all.extend(got.into_iter().enumerate().map(|(i, r)| (format!("{who} on {}", NODES[k][i]), r)));
    }
    all
}

/// Every subscription's pushes (see [`collect_all`], until each has `want`), then the
/// feed's ids in commit order: its `created` view, pulled through alice, which must hold
/// exactly `acked`.
async fn pushes_and_commit_order(
    s: &mut Setup,
    want: &HashSet<String>,
    acked: &HashSet<String>,
) -> (Vec<(String, Received)>, Vec<String>) {
    let results = collect_all(&mut s.subscribers, want).await;
    let committed: Vec<String> =
        walk(&mut s.subscribers[0], "shared?order=created", 200).await.into_iter().map(|i| i.id).collect();
    assert_eq!(
        &committed.iter().cloned().collect::<HashSet<_>>(),
        acked,
        "the feed holds exactly what was acknowledged"
    );
    (results, committed)
}

/// Each instance's value of the metric `name` (ports `metrics`: A's, then B's; 0 before it
/// is counted).
fn counted(metrics: &[u16], name: &str) -> Vec<f64> {
    metrics.iter().map(|&m| metric(&scrape_metrics(m), name).unwrap_or(0.0)).collect()
}

/// Pages `shared?order=created` forward with RSM (`after` the last page's `<last>`, 7 items
/// a page) through each reader in turn, until the publishers are done (`publishing`
/// resolves) and a page comes back empty. Every id read, in the order read, and the pages
/// each reader got.
async fn read_forward(
    readers: &mut [Client; 2],
    publishing: impl Future<Output = Vec<String>>,
) -> (Vec<String>, Vec<String>, [usize; 2]) {
    let mut publishing = std::pin::pin!(publishing);
    let mut acked = None;
    let (mut seen, mut pages, mut after) = (Vec::new(), [0; 2], None::<String>);
    for turn in 0.. {
        let done = acked.is_some();
        let mut request = Pull::node("shared?order=created").max(7);
        if let Some(last) = &after {
            request = request.after(last);
        }
        let reader = &mut readers[turn % 2];
        let page = tokio::select! {
            page = pull(reader, &request) => page,
            ids = &mut publishing, if acked.is_none() => { acked = Some(ids); continue }
        };
        pages[turn % 2] += 1;
        if page.items.is_empty() {
            if done {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        after = page.last.clone();
        seen.extend(page.ids());
    }
    (acked.unwrap_or_default(), seen, pages)
}

/// The chain breaks of `got`: indexes of pushes whose `PreviousCursor` is not the
/// `LastCursor` of the push before (for the first push: not absent).
fn breaks(got: &Received) -> Vec<usize> {
    (0..got.len()).filter(|&k| got[k].1.as_deref() != k.checked_sub(1).map(|j| got[j].2.as_str())).collect()
}

/// The ids of `got` in arrival order, the changes pushed more than once, and what is wrong
/// whatever happened: changes missing, pushes of changes never committed.
fn tallied<'g>(got: &'g Received, committed: &[String]) -> (Vec<&'g str>, Vec<String>, Vec<String>) {
    let ids: Vec<&str> = got.iter().map(|(i, _, _)| i.as_str()).collect();
    let mut problems = Vec::new();
    let (missing, repeated, unknown) = tally(&ids, committed);
    if !missing.is_empty() {
        problems.push(format!("{} missing: {}", missing.len(), sample(&missing)));
    }
    if !unknown.is_empty() {
        problems.push(format!("{} never committed: {}", unknown.len(), sample(&unknown)));
    }
    (ids, repeated, problems)
}

/// What a subscriber would find wrong with `got` when nothing may be lost or repeated.
fn exact_problems(got: &Received, committed: &[String]) -> Vec<String> {
    let (ids, repeated, mut problems) = tallied(got, committed);
    if !repeated.is_empty() {
        problems.push(format!("{} pushed more than once: {}", repeated.len(), sample(&repeated)));
    }
    let order = inversions(&ids, committed);
    if order > 0 {
        problems.push(format!("{order} pushes arrived before a change committed earlier"));
    }
    let broken = breaks(got);
    if !broken.is_empty() {
        problems.push(format!("{} chain breaks, first at {}", broken.len(), describe_break(got, broken[0])));
    }
    problems
}

/// What a subscriber would find wrong with `got` when one crash happened: nothing missing,
/// at most one run of at most [`BATCH`] consecutive changes repeated, none of `after` (the
/// changes published after the restart), shown by a chain break, nothing else broken.
fn crash_problems(got: &Received, committed: &[String], after: &HashSet<String>) -> Vec<String> {
    let (ids, repeated, mut problems) = tallied(got, committed);
    if repeated.len() > BATCH {
        problems.push(format!("{} repeated, more than one batch ({BATCH}): {}", repeated.len(), sample(&repeated)));
    }
    if !consecutive(&repeated, committed) {
        problems.push(format!("repeated changes are not one run in commit order: {}", sample(&repeated)));
    }
    let late: Vec<String> = repeated.iter().filter(|id| after.contains(*id)).cloned().collect();
    if !late.is_empty() {
        problems.push(format!("{} repeated though published after the restart: {}", late.len(), sample(&late)));
    }
    // First arrivals in commit order.
    let mut once = HashSet::new();
    let firsts: Vec<&str> = ids.iter().copied().filter(|i| once.insert(*i)).collect();
    let order = inversions(&firsts, committed);
    if order > 0 {
        problems.push(format!("{order} pushes arrived before a change committed earlier"));
    }
    // Where a subscriber must see a break: the first repeat.
    let mut explained = HashSet::new();
    let mut seen = HashSet::new();
    if let Some(first_repeat) = ids.iter().position(|id| !seen.insert(*id)) {
        explained.insert(first_repeat);
    }
    let broken: HashSet<usize> = breaks(got).into_iter().collect();
    for k in &explained {
        if !broken.contains(k) {
            problems.push(format!("a repeat the chain hides, at {}", describe_break(got, *k)));
        }
    }
    let mut unexplained: Vec<usize> = broken.difference(&explained).copied().collect();
    unexplained.sort();
    // A repeated run after the first repeat chains on from it; a push after a break that
    // neither loses nor repeats anything is out of order.
    if let Some(&k) = unexplained.first() {
        problems.push(format!(
            "{} chain breaks with nothing repeated there, first at {}",
            unexplained.len(),
            describe_break(got, k)
        ));
    }
    problems
}

/// Missing, repeated and never-committed ids of `ids` against `committed`, each in commit
/// order (never-committed in arrival order).
fn tally(ids: &[&str], committed: &[String]) -> (Vec<String>, Vec<String>, Vec<String>) {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for id in ids {
        *counts.entry(id).or_default() += 1;
    }
    let known: HashSet<&str> = committed.iter().map(String::as_str).collect();
    let missing = committed.iter().filter(|id| !counts.contains_key(id.as_str())).cloned().collect();
    let repeated = committed.iter().filter(|id| counts.get(id.as_str()).is_some_and(|&n| n > 1)).cloned().collect();
    let mut seen = HashSet::new();
    let unknown = ids.iter().filter(|id| !known.contains(*id) && seen.insert(**id)).map(|id| id.to_string()).collect();
    (missing, repeated, unknown)
}

/// How many pushes of `ids` (known ones) come after a push of a change committed later.
fn inversions(ids: &[&str], committed: &[String]) -> usize {
    let position: HashMap<&str, usize> = committed.iter().enumerate().map(|(k, id)| (id.as_str(), k)).collect();
    let mut latest = None;
    let mut count = 0;
    for p in ids.iter().filter_map(|id| position.get(id).copied()) {
        if latest.is_some_and(|l| p < l) {
            count += 1;
        }
        latest = latest.max(Some(p));
    }
    count
}

/// Whether `run` (in commit order) is consecutive changes of `committed`.
fn consecutive(run: &[String], committed: &[String]) -> bool {
    let Some(first) = run.first().and_then(|id| committed.iter().position(|c| c == id)) else { return true };
    committed.get(first..first + run.len()).is_some_and(|slice| slice == run)
}

/// A few ids of `ids`, for messages.
fn sample(ids: &[String]) -> String {
    let shown: Vec<&str> = ids.iter().take(8).map(String::as_str).collect();
    if ids.len() > shown.len() { format!("{shown:?} …") } else { format!("{shown:?}") }
}

/// Push `k` of `got`: its id, and its `PreviousCursor` against the `LastCursor` before it.
fn describe_break(got: &Received, k: usize) -> String {
    let before = k.checked_sub(1).map(|j| format!("{} ({})", got[j].2, got[j].0));
    format!("push {k} ({}): PreviousCursor {:?}, LastCursor before {before:?}", got[k].0, got[k].1)
}

/// Prints each subscription's tally and panics with every problem found.
fn report(results: &[(String, Received)], problems: Vec<(String, Vec<String>)>, committed: usize) {
    for (label, got) in results {
        eprintln!("{label}: {} pushes for {committed} changes, {} chain breaks", got.len(), breaks(got).len());
    }
    let failed: Vec<String> = problems
        .into_iter()
        .filter(|(_, p)| !p.is_empty())
        .map(|(label, p)| format!("{label}: {}", p.join("; ")))
        .collect();
    assert!(failed.is_empty(), "what subscribers would find wrong:\n{}", failed.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_on_both_nodes_get_each_change_once_in_order_from_publishes_through_both_instances() {
    let mut s = setup().await;
    let [bot_a, bot_b] = &mut s.bots;
    let publishers = vec![
        (Via::Http(s.http[0]), "ha"),
        (Via::Http(s.http[1]), "hb"),
        (Via::Xmpp(bot_a), "xa"),
        (Via::Xmpp(bot_b), "xb"),
    ];
    // Meanwhile a reader on each node (each node routes it to its own instance) pages the
    // feed forward with RSM, one page through A, the next through B.
    let (acked, read, pages) = read_forward(&mut s.readers, publish_all(publishers, 0..25)).await;
    assert_eq!(acked.len(), 100, "every publish acknowledged");
    let acked: HashSet<String> = acked.into_iter().collect();

    let (results, committed) = pushes_and_commit_order(&mut s, &acked, &acked).await;
    // Commit order is cursor order: paging forward while publishes commit on both instances
    // skips nothing and repeats nothing.
    eprintln!("the reader read {} items in {pages:?} pages through nodes a, b", read.len());
    assert_eq!(read, committed, "the reader paging through both instances read every change once, in commit order");
    assert!(pages.iter().all(|&p| p > 3), "the reader paged through both instances during the run: {pages:?}");
    let pulled = counted(&s.metrics, r#"smartfeeds_requests_total{kind="items",outcome="ok"}"#);
    assert!(pulled.iter().all(|&p| p > 3.0), "both instances answered the reader's pages: {pulled:?}");
    eprintln!("pushes sent by A, B: {:?}", counted(&s.metrics, "smartfeeds_pushes_sent_total"));
    let problems = results.iter().map(|(label, got)| (label.clone(), exact_problems(got, &committed))).collect();
    report(&results, problems, committed.len());
    drop(s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_on_both_nodes_miss_nothing_and_see_at_most_the_batch_in_flight_again_when_the_pushing_instance_is_killed()
 {
    let mut s = setup().await;
    let [bot_a, bot_b] = &mut s.bots;
    let (ha, hb) = (s.http[0], s.http[1]);

    // Both instances take publishes; the one that pushed them is the one to kill.
    let mut acked = publish_all(
        vec![(Via::Http(ha), "ha"), (Via::Http(hb), "hb"), (Via::Xmpp(bot_a), "xa"), (Via::Xmpp(bot_b), "xb")],
        0..15,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pushed = counted(&s.metrics, "smartfeeds_pushes_sent_total");
    let victim = if pushed[0] >= pushed[1] { 0 } else { 1 };
    let survivor = 1 - victim;
    eprintln!("pushes sent by A, B: {pushed:?}; killing {}", ["A", "B"][victim]);

    // Publishers write through the survivor (HTTP, and XMPP from the bot on its node) while
    // the victim dies under them.
    let bot_s: &mut Client = if survivor == 0 { &mut *bot_a } else { &mut *bot_b };
    let dying = &mut s.instances[victim];
    let (during, ()) =
        tokio::join!(publish_all(vec![(Via::Http(s.http[survivor]), "hs"), (Via::Xmpp(bot_s), "xs")], 15..40), async {
            tokio::time::sleep(Duration::from_millis(150)).await;
            let killed = Instant::now();
            tokio::task::block_in_place(|| dying.kill());
            eprintln!("killed in {:?}", killed.elapsed());
        });
    acked.extend(during);

    // The victim comes back, attached to its own node again, and both take publishes.
    let node = &s.cluster.nodes()[victim];
    let offset = testkit::logs::offset(&s.instances[victim].log_path());
    let restarted = Instant::now();
    tokio::task::block_in_place(|| s.instances[victim].restart());
    attached(&s.instances[victim], node, offset).await;
    eprintln!("restarted and attached in {:?}", restarted.elapsed());
    let after = publish_all(
        vec![(Via::Http(ha), "ha"), (Via::Http(hb), "hb"), (Via::Xmpp(bot_a), "xa"), (Via::Xmpp(bot_b), "xb")],
        40..55,
    )
    .await;
    let after_set: HashSet<String> = after.iter().cloned().collect();
    acked.extend(after);
    assert_eq!(acked.len(), 4 * 15 + 2 * 25 + 4 * 15, "every publish acknowledged");
    let acked: HashSet<String> = acked.into_iter().collect();

    // Pushes come in commit order: once the changes published after the restart are in,
    // any earlier one still missing was lost (a late one would be out of order anyway).
    let (results, committed) = pushes_and_commit_order(&mut s, &after_set, &acked).await;
    // The survivor took the feed's pushes over: subscribers on both nodes got pushes from both.
    let now = counted(&s.metrics, "smartfeeds_pushes_sent_total");
    let (taken, back) = (now[survivor], now[victim]);
    eprintln!("pushes sent since: survivor {}, restarted instance {back}", taken - pushed[survivor]);
    assert!(taken > pushed[survivor], "the survivor pushed after the kill ({} then {taken})", pushed[survivor]);
    let problems =
        results.iter().map(|(label, got)| (label.clone(), crash_problems(got, &committed, &after_set))).collect();
    report(&results, problems, committed.len());
    drop(s);
}
