//! End to end, push (SPEC §5, with §2–§4 for views and cursors): real clients logged in to a
//! real XMPP server (Prosody or ejabberd, see `crates/testkit/src/server/select.rs`) subscribe to views of feeds served by the real `smartfeeds` binary, a
//! publisher changes the feeds, and every headline the clients get is checked against what
//! a pull of the same view returns at that moment.
//!
//! One server and one component serve every test of this file (under `cargo nextest`,
//! every test process starts its own pair). Each test has its own feed and its own users,
//! so tests never see each other's pushes. The restart test takes [`GATE`] for writing;
//! every other test holds it for reading, so no test runs while the component restarts.
//!
//! Neither host bounces a headline sent to a local user who is offline: Prosody 0.12's
//! `mod_message` discards headlines to an unavailable full or bare JID silently ("current
//! policy is to discard headlines if no recipient is available"), and ejabberd 23.01 drops
//! them too (`mod_offline` stores only chat and normal messages). So the gap test relies on
//! that silent loss, and the bounce test has the subscriber's own client answer pushes with
//! error messages, which is what a client that does not want them does (RFC 6120 §8.3).
//! Where the hosts differ — a headline to an account that no longer exists: Prosody drops
//! it, ejabberd bounces `service-unavailable` — the deleted-account test says so.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use minidom::Element;
use testkit::fixture::{Fixture, Shared};
use testkit::pubsub::*;
use testkit::push::*;
use testkit::smartfeeds::{BOT_PUBLISHES, bot_feeds, closed_feed, feeds};
use testkit::{Client, Kind, TestServer, stanza_type, to_xml, xml};

/// The push settings: two permanent delivery errors in a row remove a JID's subscriptions.
const PUSH: &str = "[push]\nbounce_limit = 2\n";

/// How long a push may take to arrive.
const PUSH_WAIT: Duration = Duration::from_secs(5);
/// How long we wait for pushes that must not come.
const QUIET: Duration = Duration::from_millis(500);

/// The shared server and smartfeeds; the restart test restarts the smartfeeds.
static FIXTURE: Shared<Mutex<Fixture>> = Shared::new();
/// Read by every test, written by the one that restarts the component.
static GATE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

fn fixture() -> std::sync::MutexGuard<'static, Fixture> {
    let fixture = FIXTURE.get_or_start(|| {
        let plain = bot_feeds(&["news", "subs", "gap", "rs", "bounce", "meta", "burst", "gone", "quiet"]);
        let closed = closed_feed("closed", &["p2-insider@localhost"]);
        let chat = feeds(&["chat"], &format!("push_body = true\n{BOT_PUBLISHES}"));
        let onsub = feeds(&["onsub"], &format!("send_last_published_item = \"on_sub\"\n{BOT_PUBLISHES}"));
        Mutex::new(Fixture::start(&format!("{PUSH}\n{plain}{closed}{chat}{onsub}")))
    });
    fixture.lock().unwrap_or_else(|p| p.into_inner())
}

fn server() -> &'static TestServer {
    fixture().server
}

/// Logs in `name@localhost` (created on first use), with a fresh resource.
async fn user(name: &str) -> Client {
    server().user(name).await
}

async fn bot() -> Client {
    server().login("bot").await
}

/// An entry whose title is `ID vVERSION`.
fn versioned(feed: &str, id: &str, version: u32, author: Option<&str>, categories: &[&str]) -> String {
    entry(&format!("urn:push-test:{feed}:{id}"), &format!("{id} v{version}"), author, categories)
}

/// Publishes the version `version` of the item `id` ([`versioned`]).
async fn publish_version(
    bot: &mut Client,
    feed: &str,
    id: &str,
    version: u32,
    author: Option<&str>,
    categories: &[&str],
) {
    publish(bot, feed, id, &versioned(feed, id, version, author, categories)).await;
}

async fn retract(bot: &mut Client, feed: &str, id: &str) {
    let reply = bot.iq(retract_iq(feed, id)).await;
    assert_eq!(stanza_type(&reply), "result", "retract {feed}/{id}: {}", to_xml(&reply));
}

/// Checks the envelope every push must have: a headline from the component to `to`, with an
/// id and the `TotalItems` and `LastCursor` headers (a cursor value, without `cursor:`).
#[track_caller]
fn check_envelope(push: &Push, to: &str) {
    let raw = &push.raw;
    assert_eq!(push.kind, "headline", "pushes are headlines: {raw}");
    assert_eq!(push.from, testkit::server::COMPONENT_DOMAIN, "pushes come from the component: {raw}");
    assert_eq!(push.to, to, "the push goes to the subscribed JID: {raw}");
    assert!(push.id.as_deref().is_some_and(|i| !i.is_empty()), "a push has an id: {raw}");
    assert!(push.total.is_some(), "TotalItems header: {raw}");
    assert!(!raw.contains("<body"), "no <body> unless the feed asks for one: {raw}");
    let last = push.last_cursor();
    assert!(Cursor::parse_spec(&format!("cursor:{last}")).is_some(), "LastCursor {last:?} is T_O_C: {raw}");
    if let Some(prev) = &push.previous {
        assert!(Cursor::parse_spec(&format!("cursor:{prev}")).is_some(), "PreviousCursor {prev:?} is T_O_C: {raw}");
    }
    for (name, _) in &push.headers {
        assert!(
            ["TotalItems", "PreviousCursor", "LastCursor"].contains(&name.as_str()),
            "only the sync headers: {raw}"
        );
    }
}

/// Checks a push against a pull of the subscriber's (ascending) view right after it: the
/// pull `after=cursor:PreviousCursor` (or the first page, when the view was empty) starts
/// with the pushed item (same payload, a tombstone for a retraction), its `<first>` and
/// `<last>` are `cursor:LastCursor` and its `<count>` is `TotalItems`.
async fn check_against_pull(conn: &mut Client, push: &Push) {
    let raw = &push.raw;
    let request = match &push.previous {
        Some(prev) => Pull::node(&push.node).max(1).after(&format!("cursor:{prev}")),
        None => Pull::node(&push.node).max(1),
    };
    let page = pull(conn, &request).await;
    let first =
        page.items.first().unwrap_or_else(|| panic!("pull {request:?} is empty after push {raw}: {}", page.raw));
    assert_eq!(
        first.id,
        push.item_id(),
        "pull {request:?} starts with the pushed item\npush: {raw}\npull: {}",
        page.raw
    );
    let last = format!("cursor:{}", push.last_cursor());
    assert_eq!(page.first.as_deref(), Some(last.as_str()), "<first> is LastCursor\npush: {raw}\npull: {}", page.raw);
    assert_eq!(page.last.as_deref(), Some(last.as_str()), "<last> is LastCursor\npush: {raw}\npull: {}", page.raw);
    assert_eq!(page.count, push.total, "<count> is TotalItems\npush: {raw}\npull: {}", page.raw);
    match &push.event {
        Event::Item { payload, .. } => {
            assert_eq!(
                first.payload.as_ref(),
                Some(payload),
                "the pushed entry is the pulled one\npush: {raw}\npull: {}",
                page.raw
            )
        }
        Event::Retract { .. } => {
            assert!(
                first.tombstone().is_some(),
                "a retracted item pulls as a tombstone\npush: {raw}\npull: {}",
                page.raw
            )
        }
    }
    if push.previous.is_none() {
        assert_eq!(
            page.count,
            Some(1),
            "no PreviousCursor: the view was empty before\npush: {raw}\npull: {}",
            page.raw
        );
    }
}

// ---------------------------------------------------------------------------------------
// 1. Two subscribers, different views: exactly the right pushes, consistent with pulls.
// ---------------------------------------------------------------------------------------

/// A subscription of test 1 and what its view holds.
struct Sub {
    /// 0: alice, 1: bob.
    who: usize,
    node: &'static str,
    jid: String,
    by_modified: bool,
    author: Option<&'static str>,
    /// The LastCursor of the previous push to this subscription.
    last: Option<String>,
    pushes: Vec<String>,
}

enum Op {
    Publish { id: &'static str, version: u32, author: &'static str, categories: &'static [&'static str] },
    Retract(&'static str),
}

#[tokio::test]
async fn each_subscriber_gets_exactly_its_views_changes_in_order_with_pull_consistent_headers() {
    let _gate = GATE.read().await;
    let feed = "news";
    let mut bot = bot().await;
    let mut clients = [user("p1-alice").await, user("p1-bob").await];
    let (alice_full, bob_full) = (clients[0].jid().to_string(), clients[1].jid().to_string());
    let mut subs = vec![
        Sub {
            who: 0,
            node: "news?order=modified",
            jid: alice_full.clone(),
            by_modified: true,
            author: None,
            last: None,
            pushes: vec![],
        },
        // Bob subscribes his bare JID here and his full JID below.
        Sub {
            who: 1,
            node: "news?order=created",
            jid: "p1-bob@localhost".into(),
            by_modified: false,
            author: None,
            last: None,
            pushes: vec![],
        },
        // Parameters in another order than the canonical `order=…&author=…`: pushes must
        // name the node exactly as bob wrote it.
        Sub {
            who: 1,
            node: "news?author=x&order=modified",
            jid: bob_full.clone(),
            by_modified: true,
            author: Some("x"),
            last: None,
            pushes: vec![],
        },
    ];
    for s in &subs {
        subscribe(&mut clients[s.who], s.node, &s.jid).await;
    }

    let ops = [
        Op::Publish { id: "n1", version: 1, author: "x", categories: &[] },
        Op::Publish { id: "n2", version: 1, author: "y", categories: &[] },
        Op::Publish { id: "n3", version: 1, author: "x", categories: &["hot"] },
        // Updates: modified views only.
        Op::Publish { id: "n1", version: 2, author: "x", categories: &[] },
        // n2 moves into the author=x view (filters apply to the item after the change).
        Op::Publish { id: "n2", version: 2, author: "x", categories: &[] },
        Op::Retract("n3"),
        Op::Publish { id: "n4", version: 1, author: "z", categories: &[] },
        // An update of the newest item of the modified view: PreviousCursor is its old cursor.
        Op::Publish { id: "n4", version: 2, author: "z", categories: &[] },
        // Retracting a tombstone changes nothing: no push.
        Op::Retract("n3"),
        // n1 leaves the author=x view: bob's filtered view gets nothing.
        Op::Publish { id: "n1", version: 3, author: "y", categories: &[] },
        Op::Publish { id: "n5", version: 1, author: "x", categories: &[] },
    ];

    // The model: id -> (author, retracted).
    let mut model: HashMap<&str, (&str, bool)> = HashMap::new();
    for (step, op) in ops.iter().enumerate() {
        // What the change is, and the item after it.
        let (id, created, retraction, noop) = match op {
            Op::Publish { id, version, author, categories } => {
                let created = !model.contains_key(id);
                publish_version(&mut bot, feed, id, *version, Some(author), categories).await;
                model.insert(id, (author, false));
                (*id, created, false, false)
            }
            Op::Retract(id) => {
                let (author, was_retracted) = model[id];
                retract(&mut bot, feed, id).await;
                model.insert(id, (author, true));
                (*id, false, true, was_retracted)
            }
        };
        let author_after = model[id].0;
        for (who, client) in clients.iter_mut().enumerate() {
            // The subscriptions of this client that this change belongs to.
            let mut expected: Vec<usize> = (0..subs.len())
                .filter(|&k| {
                    let s = &subs[k];
                    s.who == who && !noop && (created || s.by_modified) && s.author.is_none_or(|a| a == author_after)
                })
                .collect();
            while !expected.is_empty() {
                let push = next_push(client, PUSH_WAIT).await;
                let k = expected
                    .iter()
                    .position(|&k| subs[k].node == push.node)
                    .map(|i| expected.remove(i))
                    .unwrap_or_else(|| {
                        panic!(
                            "step {step}: unexpected push to {} (expected one for {:?}): {}",
                            client.label(),
                            expected.iter().map(|&k| subs[k].node).collect::<Vec<_>>(),
                            push.raw
                        )
                    });
                let s = &subs[k];
                check_envelope(&push, &s.jid);
                assert_eq!(push.item_id(), id, "step {step}: the push is about the changed item: {}", push.raw);
                assert_eq!(push.is_retract(), retraction, "step {step}: <retract/> iff retracted: {}", push.raw);
                if let Op::Publish { version, .. } = op {
                    assert_eq!(
                        push.title(),
                        Some(format!("{id} v{version}")),
                        "step {step}: latest version: {}",
                        push.raw
                    );
                }
                assert_eq!(
                    push.previous, s.last,
                    "step {step}, {}: PreviousCursor is the LastCursor of the previous push to this view \
                     (absent on the first push into an empty view): {}",
                    s.node, push.raw
                );
                let in_view = model.values().filter(|(a, _)| s.author.is_none_or(|f| f == *a)).count() as u64;
                assert_eq!(push.total, Some(in_view), "step {step}, {}: TotalItems: {}", s.node, push.raw);
                check_against_pull(client, &push).await;
                let s = &mut subs[k];
                s.last = Some(push.last_cursor().to_string());
                s.pushes.push(format!("{}{id}", if retraction { "-" } else { "+" }));
            }
            // Nothing else for this change (and nothing stray from an earlier one).
            if let Some(m) = client.next_message(Duration::from_millis(50)).await {
                panic!("step {step}: {} got an extra message: {}", client.label(), to_xml(&m));
            }
        }
    }
    for c in &mut clients {
        assert_no_message(c, QUIET, "after the last change").await;
    }
    let pushes: Vec<(&str, Vec<String>)> = subs.iter().map(|s| (s.node, s.pushes.clone())).collect();
    let strs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        pushes,
        vec![
            ("news?order=modified", strs(&["+n1", "+n2", "+n3", "+n1", "+n2", "-n3", "+n4", "+n4", "+n1", "+n5"])),
            ("news?order=created", strs(&["+n1", "+n2", "+n3", "+n4", "+n5"])),
            ("news?author=x&order=modified", strs(&["+n1", "+n3", "+n1", "+n2", "-n3", "+n5"])),
        ]
    );
}

// ---------------------------------------------------------------------------------------
// 1b. A burst of pipelined changes (group commits): commit order, unbroken cursor chain.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_burst_of_pipelined_changes_is_pushed_in_commit_order_with_an_unbroken_cursor_chain() {
    let _gate = GATE.read().await;
    let feed = "burst";
    let (created_node, modified_node) = ("burst?order=created", "burst?order=modified");
    let mut bot = bot().await;
    let mut ivy = user("p7-ivy").await;
    let ivy_full = ivy.jid().to_string();
    subscribe(&mut ivy, created_node, &ivy_full).await;
    subscribe(&mut ivy, modified_node, &ivy_full).await;

    // Two pipelined waves (within a wave the service picks the order): 60 new items, then
    // 20 updates, 10 retractions and 20 new items.
    let check = |what: &str, replies: Vec<Element>| {
        for r in replies {
            assert_eq!(stanza_type(&r), "result", "{what}: {}", to_xml(&r));
        }
    };
    let first: Vec<String> = (0..60).map(|k| format!("w{k:02}")).collect();
    let iqs = first.iter().map(|id| publish_iq(feed, Some(id), &versioned(feed, id, 1, None, &[]))).collect();
    check("wave 1", iq_all(&mut bot, iqs).await);
    let mut iqs: Vec<Element> = (0..20)
        .map(|k| format!("w{:02}", k * 3))
        .map(|id| publish_iq(feed, Some(&id), &versioned(feed, &id, 2, None, &[])))
        .collect();
    iqs.extend((0..10).map(|k| retract_iq(feed, &format!("w{:02}", k * 3 + 1))));
    iqs.extend(
        (0..20).map(|k| format!("x{k:02}")).map(|id| publish_iq(feed, Some(&id), &versioned(feed, &id, 1, None, &[]))),
    );
    check("wave 2", iq_all(&mut bot, iqs).await);

    // 80 new items reach both views; 30 updates and retractions the modified view only.
    let mut pushes: HashMap<String, Vec<Push>> = HashMap::new();
    for _ in 0..(80 + 80 + 30) {
        let push = next_push(&mut ivy, PUSH_WAIT).await;
        check_envelope(&push, &ivy_full);
        pushes.entry(push.node.clone()).or_default().push(push);
    }
    assert_no_message(&mut ivy, QUIET, "one push per change and view").await;

    for (node, expected) in [(created_node, 80), (modified_node, 110)] {
        let got = pushes.remove(node).unwrap_or_default();
        assert_eq!(got.len(), expected, "{node}: one push per change it takes");
        // The chain: each push follows on from the previous one.
        assert_eq!(got[0].previous, None, "{node}: the view was empty: {}", got[0].raw);
        for pair in got.windows(2) {
            assert_eq!(
                pair[1].previous.as_deref(),
                Some(pair[0].last_cursor()),
                "{node}: PreviousCursor is the previous push's LastCursor\nprevious: {}\nthis: {}",
                pair[0].raw,
                pair[1].raw
            );
        }
        // Commit order is the view's order: replaying the pushes gives the pulled view.
        let mut replay: Vec<&str> = Vec::new();
        for p in &got {
            replay.retain(|id| *id != p.item_id());
            replay.push(p.item_id());
        }
        let view = walk(&mut ivy, node, 100).await;
        let pulled: Vec<&str> = view.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(replay, pulled, "{node}: the pushes, replayed, are the view in its order");
        let page = pull(&mut ivy, &Pull::node(node).before("").max(1)).await;
        let last = got.last().expect("pushes");
        assert_eq!(
            page.last,
            Some(format!("cursor:{}", last.last_cursor())),
            "{node}: the last push is the view's end"
        );
        assert_eq!(page.count, last.total, "{node}: TotalItems of the last push");
        if node == created_node {
            let totals: Vec<u64> = got.iter().map(|p| p.total.unwrap_or_default()).collect();
            assert_eq!(totals, (1..=80).collect::<Vec<u64>>(), "{node}: TotalItems counts the new items");
        }
    }
}

// ---------------------------------------------------------------------------------------
// 2. Subscribe, unsubscribe, subscriptions, and their errors.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn subscription_management_and_its_error_conditions() {
    let _gate = GATE.read().await;
    let mut bot = bot().await;
    let mut alice = user("p2-alice").await;
    let mut bob = user("p2-bob").await;
    let mut insider = user("p2-insider").await;
    let node = "subs?order=modified";
    let alice_full = alice.jid().to_string();

    // Someone else's JID, bare or full.
    for jid in ["p2-bob@localhost", bob.jid(), "p2-bob@localhost/elsewhere", "localhost", "p2-alice@elsewhere"] {
        let reply = alice.iq(subscribe_iq(node, jid)).await;
        assert_error(&reply, "bad-request", Some("invalid-jid"));
    }
    // Nodes that name no view.
    for (bad, named) in [
        ("nosuchfeed", "nosuchfeed"),
        ("subs?colour=red", "colour"),
        ("subs?order=sideways", "order"),
        ("subs?order=created&order=modified", "order"),
        ("subs?author=", "author"),
    ] {
        let reply = alice.iq(subscribe_iq(bad, &alice_full)).await;
        let text = assert_error(&reply, "item-not-found", None);
        assert!(text.contains(named), "the <text/> names {named:?}: {}", to_xml(&reply));
    }
    // A whitelist feed, for someone not on the list; an allowed JID may subscribe.
    for closed in ["closed", "closed?order=modified"] {
        let reply = alice.iq(subscribe_iq(closed, &alice_full)).await;
        assert_error(&reply, "not-allowed", Some("closed-node"));
    }
    let insider_jid = insider.jid().to_string();
    subscribe(&mut insider, "closed?order=modified", &insider_jid).await;
    // Unsubscribing without a subscription.
    let reply = alice.iq(unsubscribe_iq(node, &alice_full)).await;
    assert_error(&reply, "unexpected-request", Some("not-subscribed"));
    assert_eq!(subscriptions(&mut alice, None).await, vec![], "alice has no subscriptions yet");

    // Subscribing twice: one subscription, the same subid, one push per change.
    let first = subscribe(&mut alice, node, &alice_full).await;
    let again = subscribe(&mut alice, node, &alice_full).await;
    assert_eq!(first, again, "subscribing twice is idempotent");
    let bob_sub = subscribe(&mut bob, node, "p2-bob@localhost").await;
    let alices = subscriptions(&mut alice, None).await;
    assert_eq!(alices, vec![first.clone()], "<subscriptions/> lists alice's one subscription, not bob's");
    assert_eq!(subscriptions(&mut bob, None).await, vec![bob_sub.clone()], "bob sees only his own");
    assert_eq!(subscriptions(&mut alice, Some(node)).await, vec![first.clone()], "<subscriptions node/>");
    assert_eq!(subscriptions(&mut alice, Some("subs?order=created")).await, vec![], "none to another view");

    // The same view written two ways is one subscription.
    let a1 = subscribe(&mut alice, "subs?order=created&category=c", &alice_full).await;
    let a2 = subscribe(&mut alice, "subs?category=c&order=created", &alice_full).await;
    assert_eq!(a1.subid, a2.subid, "same view, same JID: same subscription");
    let alices = subscriptions(&mut alice, None).await;
    assert_eq!(alices.len(), 2, "one subscription per view: {alices:?}");

    // Someone else's subscription cannot be removed.
    let reply = bob.iq(unsubscribe_iq(node, &alice_full)).await;
    assert_error(&reply, "forbidden", None);
    // A subscription belongs to the JID it was made for: alice's bare JID has none.
    let reply = alice.iq(unsubscribe_iq(node, "p2-alice@localhost")).await;
    assert_error(&reply, "unexpected-request", Some("not-subscribed"));

    publish_version(&mut bot, "subs", "s1", 1, Some("x"), &["c"]).await;
    let push = next_push(&mut bob, PUSH_WAIT).await;
    assert_eq!((push.node.as_str(), push.item_id()), (node, "s1"), "{}", push.raw);
    // Alice: one push for the modified view, one for the created view with category=c
    // (in either order: they are different views).
    let (mut modified, mut created) = (0, 0);
    for _ in 0..2 {
        let push = next_push(&mut alice, PUSH_WAIT).await;
        assert_eq!(push.item_id(), "s1", "{}", push.raw);
        if push.node == node {
            modified += 1;
        } else {
            assert!(
                ["subs?order=created&category=c", "subs?category=c&order=created"].contains(&push.node.as_str()),
                "the push names one of the ways alice wrote that view: {}",
                push.raw
            );
            created += 1;
        }
    }
    assert_eq!((modified, created), (1, 1), "one push per subscription");
    assert_no_message(&mut alice, QUIET, "one push per subscription").await;
    assert_no_message(&mut bob, Duration::ZERO, "one push per subscription").await;

    // Unsubscribe: the reply is a result, the subscription is gone, pushes stop.
    let reply = alice.iq(unsubscribe_iq(node, &alice_full)).await;
    assert_eq!(stanza_type(&reply), "result", "{}", to_xml(&reply));
    assert_eq!(subscriptions(&mut alice, Some(node)).await, vec![]);
    let reply = alice.iq(unsubscribe_iq(node, &alice_full)).await;
    assert_error(&reply, "unexpected-request", Some("not-subscribed"));
    publish_version(&mut bot, "subs", "s1", 2, Some("x"), &["c"]).await;
    let push = next_push(&mut bob, PUSH_WAIT).await;
    assert_eq!(push.item_id(), "s1", "{}", push.raw);
    assert_no_message(&mut alice, QUIET, "alice unsubscribed from the modified view").await;
    assert_no_message(&mut insider, Duration::ZERO, "nothing was published to the closed feed").await;
}

// ---------------------------------------------------------------------------------------
// 3. A gap: pushes lost while offline are noticed through PreviousCursor and pulled.
// ---------------------------------------------------------------------------------------

/// What a client knows of an item.
#[derive(Clone, Debug, PartialEq)]
enum Known {
    Entry(Element),
    Deleted,
}

/// A client's copy of a modified-ordered view: items in order, each at its latest version.
#[derive(Default, Debug)]
struct Mirror {
    order: Vec<String>,
    items: HashMap<String, Known>,
}

impl Mirror {
    fn apply(&mut self, id: &str, known: Known) {
        self.order.retain(|i| i != id);
        self.order.push(id.to_string());
        self.items.insert(id.to_string(), known);
    }
    fn apply_page_item(&mut self, item: &PageItem) {
        let known = if item.tombstone().is_some() {
            Known::Deleted
        } else {
            Known::Entry(item.entry().unwrap_or_else(|| panic!("an entry or a tombstone: {item:?}")).clone())
        };
        self.apply(&item.id, known);
    }
    fn apply_push(&mut self, push: &Push) {
        match &push.event {
            Event::Item { id, payload } => self.apply(id, Known::Entry(payload.clone())),
            Event::Retract { id } => self.apply(id, Known::Deleted),
        }
    }
}

#[tokio::test]
async fn a_client_back_from_offline_sees_the_gap_and_pulls_exactly_what_it_missed() {
    let _gate = GATE.read().await;
    let feed = "gap";
    let node = "gap?order=modified";
    let mut bot = bot().await;
    for id in ["g1", "g2", "g3"] {
        publish_version(&mut bot, feed, id, 1, Some("a"), &[]).await;
    }

    // Bootstrap as Smart Feeds says: subscribe to the modified view, pull, keep L. The
    // subscription is to the BARE JID, so it reaches whichever resource carol is online
    // with; while she has none, the server drops the headlines silently (the gap).
    let mut carol = user("p3-carol").await;
    subscribe(&mut carol, node, "p3-carol@localhost").await;
    // A witness, online throughout: once it has the push of the last offline change, so
    // has the server carol's (and dropped it), and carol may log in again.
    let mut witness = user("p3-witness").await;
    subscribe(&mut witness, node, "p3-witness@localhost").await;
    let mut mirror = Mirror::default();
    for item in walk(&mut carol, node, 2).await {
        mirror.apply_page_item(&item);
    }
    let page = pull(&mut carol, &Pull::node(node).before("").max(1)).await;
    let mut l = page.last_cursor().spec().strip_prefix("cursor:").expect("cursor:").to_string();

    publish_version(&mut bot, feed, "g4", 1, Some("a"), &[]).await;
    let push = next_push(&mut carol, PUSH_WAIT).await;
    check_envelope(&push, "p3-carol@localhost");
    assert_eq!(push.previous.as_deref(), Some(l.as_str()), "in sync: PreviousCursor is L: {}", push.raw);
    mirror.apply_push(&push);
    l = push.last_cursor().to_string();

    // Offline: every kind of change, including an update of the item L points at (so L no
    // longer verifies and the service falls back to its time).
    carol.close().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    publish_version(&mut bot, feed, "g5", 1, Some("a"), &[]).await;
    publish_version(&mut bot, feed, "g1", 2, Some("a"), &[]).await;
    publish_version(&mut bot, feed, "g4", 2, Some("a"), &[]).await;
    retract(&mut bot, feed, "g2").await;
    publish_version(&mut bot, feed, "g6", 1, Some("a"), &[]).await;
    publish_version(&mut bot, feed, "g5", 2, Some("a"), &[]).await;
    let mut witnessed = Vec::new();
    while witnessed.last().map(String::as_str) != Some("g5 v2") {
        let push = next_push(&mut witness, PUSH_WAIT).await;
        witnessed.push(push.title().unwrap_or_else(|| format!("-{}", push.item_id())));
    }
    assert_eq!(witnessed, ["g4 v1", "g5 v1", "g1 v2", "g4 v2", "-g2", "g6 v1", "g5 v2"], "the witness saw it all");
    tokio::time::sleep(Duration::from_millis(100)).await;

    let mut carol = user("p3-carol").await;
    // The premise: what was pushed meanwhile is gone (neither host keeps headlines).
    assert_no_message(&mut carol, QUIET, "the server drops headlines for an offline user").await;
    publish_version(&mut bot, feed, "g7", 1, Some("a"), &[]).await;
    let push = next_push(&mut carol, PUSH_WAIT).await;
    check_envelope(&push, "p3-carol@localhost");
    assert_eq!(push.item_id(), "g7", "{}", push.raw);
    assert_ne!(push.previous.as_deref(), Some(l.as_str()), "the gap shows: PreviousCursor is not L: {}", push.raw);
    mirror.apply_push(&push);
    let pushed_last = push.last_cursor().to_string();

    // Catch up: pull after L until an empty page.
    let mut after = format!("cursor:{l}");
    let mut pulled = Vec::new();
    loop {
        let page = pull(&mut carol, &Pull::node(node).max(2).after(&after)).await;
        if page.items.is_empty() {
            break;
        }
        for item in &page.items {
            mirror.apply_page_item(item);
            pulled.push(item.id.clone());
        }
        after = page.last.clone().expect("a non-empty page has <last>");
        assert!(pulled.len() < 100, "catching up does not end: {pulled:?}");
    }
    assert_eq!(after, format!("cursor:{pushed_last}"), "caught up to the push's LastCursor");
    for missed in ["g5", "g1", "g4", "g2", "g6"] {
        assert!(pulled.iter().any(|p| p == missed), "the catch-up pull brings {missed}: {pulled:?}");
    }

    // Exactly the feed: every item, latest versions, in the view's order.
    let full = walk(&mut carol, node, 50).await;
    let mut reference = Mirror::default();
    for item in &full {
        reference.apply_page_item(item);
    }
    assert_eq!(mirror.order, reference.order, "the mirror has the feed's items in its order");
    assert_eq!(mirror.items, reference.items, "the mirror has every item's latest version");
    assert_eq!(mirror.order, ["g3", "g1", "g4", "g2", "g6", "g5", "g7"]);
    let titles: Vec<Option<String>> = mirror
        .order
        .iter()
        .map(|id| match &mirror.items[id] {
            Known::Entry(e) => e.get_child("title", ATOM).map(|t| t.text()),
            Known::Deleted => None,
        })
        .collect();
    let expected = [Some("g3 v1"), Some("g1 v2"), Some("g4 v2"), None, Some("g6 v1"), Some("g5 v2"), Some("g7 v1")];
    assert_eq!(titles, expected.map(|t| t.map(String::from)).to_vec());

    // Back in sync: the next push follows on.
    publish_version(&mut bot, feed, "g8", 1, Some("a"), &[]).await;
    let push = next_push(&mut carol, PUSH_WAIT).await;
    assert_eq!(push.previous.as_deref(), Some(pushed_last.as_str()), "in sync again: {}", push.raw);
    assert_no_message(&mut carol, QUIET, "after the last change").await;
}

// ---------------------------------------------------------------------------------------
// 4. Subscriptions survive a restart of the component.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn subscriptions_survive_a_component_restart() {
    let _gate = GATE.write().await;
    let mut bot = bot().await;
    let mut dave = user("p4-dave").await;
    let dave_full = dave.jid().to_string();
    let created = subscribe(&mut dave, "rs?order=created", &dave_full).await;
    let modified = subscribe(&mut dave, "rs?order=modified", "p4-dave@localhost").await;
    publish_version(&mut bot, "rs", "r1", 1, None, &[]).await;
    let mut last: HashMap<String, String> = HashMap::new();
    for _ in 0..2 {
        let push = next_push(&mut dave, PUSH_WAIT).await;
        assert_eq!(push.item_id(), "r1", "{}", push.raw);
        last.insert(push.node.clone(), push.last_cursor().to_string());
    }
    let before = subscriptions(&mut dave, None).await;

    fixture().feeds.restart();

    assert_eq!(subscriptions(&mut dave, None).await, before, "the same subscriptions after the restart");
    publish_version(&mut bot, "rs", "r2", 1, None, &[]).await;
    let mut seen = Vec::new();
    for _ in 0..2 {
        let push = next_push(&mut dave, PUSH_WAIT).await;
        let jid = if push.node == created.node { &created.jid } else { &modified.jid };
        check_envelope(&push, jid);
        assert_eq!(push.item_id(), "r2", "{}", push.raw);
        assert_eq!(push.previous.as_ref(), last.get(&push.node), "PreviousCursor follows on: {}", push.raw);
        check_against_pull(&mut dave, &push).await;
        seen.push(push.node.clone());
    }
    seen.sort();
    assert_eq!(seen, ["rs?order=created", "rs?order=modified"]);
    assert_no_message(&mut dave, QUIET, "one push per subscription").await;
}

// ---------------------------------------------------------------------------------------
// 5. Bounces: a JID whose pushes keep bouncing loses its subscriptions.
// ---------------------------------------------------------------------------------------

/// The error a client sends back for a push it does not want.
fn bounce(push: &Push, error_type: &str, condition: &str) -> Element {
    xml(&format!(
        r#"<message type="error" to="{}" id="{}"><error type="{error_type}"><{condition} xmlns="urn:ietf:params:xml:ns:xmpp-stanzas"/></error></message>"#,
        push.from,
        esc(push.id.as_deref().unwrap_or_default()),
    ))
}

/// Waits until the component's log has a line with all of `needles`.
async fn wait_for_log(needles: &[&str], timeout: Duration) -> Option<String> {
    let path = fixture().feeds.log_path();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| needles.iter().all(|n| l.contains(n))) {
            return Some(line.to_string());
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn a_subscriber_that_keeps_bouncing_is_unsubscribed_after_the_bounce_limit() {
    let _gate = GATE.read().await;
    let feed = "bounce";
    let node = "bounce?order=modified";
    let mut bot = bot().await;
    let mut erin = user("p5-erin").await;
    let mut frank = user("p5-frank").await;
    let erin_full = erin.jid().to_string();
    subscribe(&mut erin, node, &erin_full).await;
    subscribe(&mut frank, node, "p5-frank@localhost").await;
    // From here on erin sends no iq: a request from her would show she is alive and start
    // her bounce count again.

    // A transient error (type "wait") does not count; the limit is 2 permanent ones.
    let bounces = [("wait", "resource-constraint"), ("cancel", "service-unavailable"), ("cancel", "item-not-found")];
    for (k, (error_type, condition)) in bounces.iter().enumerate() {
        let id = format!("b{k}");
        publish_version(&mut bot, feed, &id, 1, None, &[]).await;
        let push = next_push(&mut frank, PUSH_WAIT).await;
        assert_eq!(push.item_id(), id, "{}", push.raw);
        let push = next_push(&mut erin, PUSH_WAIT).await;
        assert_eq!(
            push.item_id(),
            id,
            "erin is still subscribed after {k} bounce(s), at most one of them permanent: {}",
            push.raw
        );
        check_envelope(&push, &erin_full);
        erin.send(bounce(&push, error_type, condition)).await;
    }

    let line = wait_for_log(&["pushes keep bouncing: unsubscribed", &erin_full], PUSH_WAIT).await;
    assert!(
        line.is_some(),
        "the component logs that it unsubscribed {erin_full} after 2 permanent bounces\n{}",
        fixture().feeds.log_tail(30)
    );

    publish_version(&mut bot, feed, "b3", 1, None, &[]).await;
    let push = next_push(&mut frank, PUSH_WAIT).await;
    assert_eq!(push.item_id(), "b3", "frank, who never bounced, still gets pushes: {}", push.raw);
    assert_no_message(&mut erin, QUIET, "erin was unsubscribed").await;
    assert_eq!(subscriptions(&mut erin, None).await, vec![], "erin's subscription is gone");
    assert_eq!(subscriptions(&mut frank, None).await.len(), 1, "frank's is not");

    // Logged in again, erin sees no subscription and gets no push.
    erin.close().await;
    let mut erin = user("p5-erin").await;
    assert_eq!(subscriptions(&mut erin, None).await, vec![], "erin's subscription is gone after a new login");
    publish_version(&mut bot, feed, "b4", 1, None, &[]).await;
    let push = next_push(&mut frank, PUSH_WAIT).await;
    assert_eq!(push.item_id(), "b4", "{}", push.raw);
    assert_no_message(&mut erin, QUIET, "erin was unsubscribed").await;
}

/// A subscriber whose account is deleted: where the hosts differ. ejabberd 23.01 bounces
/// a headline to a user that does not exist with `service-unavailable` (type cancel, from
/// the bare JID), a permanent error, so after `bounce_limit` (2) pushes the subscription is
/// removed. Prosody 0.12 drops such headlines silently (as for an offline user), so the
/// component never learns and the subscription stays: nothing to see but no error either.
#[tokio::test]
async fn a_deleted_accounts_subscription_goes_where_the_server_bounces_its_pushes() {
    let _gate = GATE.read().await;
    let host = server();
    let feed = "gone";
    let node = "gone?order=modified";
    let mut bot = bot().await;
    let mut ivan = user("p7-ivan").await;
    let mut judy = user("p7-judy").await;
    subscribe(&mut ivan, node, "p7-ivan@localhost").await;
    subscribe(&mut judy, node, "p7-judy@localhost").await;
    assert_eq!(num_subscribers(&mut judy, node).await.as_deref(), Some("2"));
    ivan.close().await;
    host.delete_user("p7-ivan");

    for id in ["x1", "x2", "x3"] {
        publish_version(&mut bot, feed, id, 1, None, &[]).await;
        let push = next_push(&mut judy, PUSH_WAIT).await;
        assert_eq!(push.item_id(), id, "judy, who exists, gets every push: {}", push.raw);
    }
    let unsubscribed = ["pushes keep bouncing: unsubscribed", "p7-ivan@localhost"];
    if host.kind() == Kind::Ejabberd {
        let line = wait_for_log(&unsubscribed, PUSH_WAIT).await;
        assert!(
            line.is_some(),
            "ejabberd bounces pushes to a deleted account; after 2 the component unsubscribes it\n{}",
            fixture().feeds.log_tail(30)
        );
        assert_eq!(num_subscribers(&mut judy, node).await.as_deref(), Some("1"), "only judy's is left");
    } else {
        let line = wait_for_log(&unsubscribed, QUIET).await;
        assert!(line.is_none(), "Prosody sends no bounce, so nothing is unsubscribed: {line:?}");
        assert_eq!(num_subscribers(&mut judy, node).await.as_deref(), Some("2"), "ivan's subscription stays");
    }
    // Either way the others are not affected.
    publish_version(&mut bot, feed, "x4", 1, None, &[]).await;
    assert_eq!(next_push(&mut judy, PUSH_WAIT).await.item_id(), "x4");
}

// ---------------------------------------------------------------------------------------
// 6. pubsub#num_subscribers in the node's meta-data.
// ---------------------------------------------------------------------------------------

async fn num_subscribers(conn: &mut Client, node: &str) -> Option<String> {
    let reply = conn.iq(disco_info_iq(node)).await;
    meta_field(&reply, "pubsub#num_subscribers")
}

#[tokio::test]
async fn num_subscribers_in_the_node_meta_data_counts_its_subscriptions() {
    let _gate = GATE.read().await;
    let node = "meta?order=modified";
    let mut gina = user("p6-gina").await;
    let mut hank = user("p6-hank").await;
    let gina_full = gina.jid().to_string();
    let count = |n: u32| Some(n.to_string());

    assert_eq!(num_subscribers(&mut gina, node).await, count(0), "no subscribers yet");
    subscribe(&mut gina, node, &gina_full).await;
    assert_eq!(num_subscribers(&mut hank, node).await, count(1), "gina's subscription");
    subscribe(&mut gina, node, &gina_full).await;
    assert_eq!(num_subscribers(&mut hank, node).await, count(1), "subscribing twice is one subscription");
    subscribe(&mut hank, node, "p6-hank@localhost").await;
    assert_eq!(num_subscribers(&mut gina, node).await, count(2), "gina's and hank's");
    let reply = gina.iq(unsubscribe_iq(node, &gina_full)).await;
    assert_eq!(stanza_type(&reply), "result", "{}", to_xml(&reply));
    assert_eq!(num_subscribers(&mut gina, node).await, count(1), "gina unsubscribed");

    // A node is a view: a subscription to another view of the feed is not one to this node.
    subscribe(&mut gina, "meta?order=created", &gina_full).await;
    assert_eq!(num_subscribers(&mut gina, "meta?order=created").await, count(1), "gina's, to the created view");
    assert_eq!(
        num_subscribers(&mut gina, node).await,
        count(1),
        "{node} still has hank's subscription only (XEP-0060: the number of subscribers to the node)"
    );
}

// ---------------------------------------------------------------------------------------
// 7. A push a chat client shows: `push_body = true`.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_feed_with_push_body_pushes_the_title_and_link_as_the_body() {
    let _gate = GATE.read().await;
    let mut ivy = user("p7-ivy").await;
    let ivy_full = ivy.jid().to_string();
    // The modified view, where retractions are pushed too; two subscribers, so the push
    // goes through the server's multicast service where there is one.
    subscribe(&mut ivy, "chat?order=modified", &ivy_full).await;
    let mut jay = user("p7-jay").await;
    subscribe(&mut jay, "chat?order=modified", "p7-jay@localhost").await;
    let mut bot = bot().await;
    let entry = format!(
        r#"<entry xmlns="{ATOM}"><id>urn:chat:1</id><title>Tea &amp; cake</title><link rel="alternate" href="https://example.org/tea"/><updated>2024-01-01T00:00:00Z</updated></entry>"#
    );
    publish(&mut bot, "chat", "c1", &entry).await;
    let msg = ivy.next_message(PUSH_WAIT).await.expect("a push");
    let raw = to_xml(&msg);
    let body = msg.children().find(|c| c.name() == "body").unwrap_or_else(|| panic!("a <body>: {raw}"));
    assert_eq!(body.text(), "Tea & cake\nhttps://example.org/tea", "{raw}");
    // Beside the event and its headers, as every push.
    let push = parse_push(&msg);
    assert_eq!((push.item_id(), push.title().as_deref()), ("c1", Some("Tea & cake")), "{raw}");
    assert!(push.total.is_some() && push.last.is_some(), "{raw}");
    let msg = jay.next_message(PUSH_WAIT).await.expect("jay's push");
    let body = msg.children().find(|c| c.name() == "body").map(|b| b.text());
    assert_eq!(body.as_deref(), Some("Tea & cake\nhttps://example.org/tea"), "{}", to_xml(&msg));

    // A retraction has nothing to show.
    retract(&mut bot, "chat", "c1").await;
    let msg = ivy.next_message(PUSH_WAIT).await.expect("a retraction push");
    assert!(msg.children().all(|c| c.name() != "body"), "{}", to_xml(&msg));
    assert!(parse_push(&msg).is_retract());
    let msg = jay.next_message(PUSH_WAIT).await.expect("jay's retraction push");
    assert!(parse_push(&msg).is_retract(), "{}", to_xml(&msg));
}

// ---------------------------------------------------------------------------------------
// 8. The last published item on subscribe: `send_last_published_item = "on_sub"`.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_new_subscription_gets_the_last_published_item_when_the_feed_says_on_sub_and_its_chain_starts_there() {
    let _gate = GATE.read().await;
    let mut bot = bot().await;
    for id in ["l1", "l2", "l3"] {
        publish_version(&mut bot, "onsub", id, 1, None, &[]).await;
    }
    // An update of the first: the last published item of the modified view.
    publish_version(&mut bot, "onsub", "l1", 2, None, &[]).await;
    let mut kim = user("p8-kim").await;
    let kim_jid = kim.bare_jid().to_string();
    let mut last = HashMap::new();
    for (node, title) in [("onsub?order=created", "l3 v1"), ("onsub?order=modified", "l1 v2")] {
        subscribe(&mut kim, node, &kim_jid).await;
        let push = next_push(&mut kim, PUSH_WAIT).await;
        check_envelope(&push, &kim_jid);
        assert_eq!((push.node.as_str(), push.title().as_deref()), (node, Some(title)), "{}", push.raw);
        assert_eq!(push.total, Some(3), "{}", push.raw);
        assert!(push.previous.is_some(), "the cursor before it: {}", push.raw);
        check_against_pull(&mut kim, &push).await;
        last.insert(node.to_string(), push.last_cursor().to_string());
    }
    // The chain starts there: the next change's PreviousCursor is that push's LastCursor.
    publish_version(&mut bot, "onsub", "l4", 1, None, &[]).await;
    for _ in 0..2 {
        let push = next_push(&mut kim, PUSH_WAIT).await;
        assert_eq!(push.item_id(), "l4", "{}", push.raw);
        assert_eq!(push.previous.as_ref(), last.get(&push.node), "the chain holds: {}", push.raw);
    }
    // A feed that says nothing (`never`, the default): the result, and no push.
    publish_version(&mut bot, "quiet", "q1", 1, None, &[]).await;
    subscribe(&mut kim, "quiet?order=created", &kim_jid).await;
    assert_no_message(&mut kim, QUIET, "no last item from a feed that does not send it").await;
    // An empty view: nothing to send.
    subscribe(&mut kim, "onsub?order=created&author=nobody", &kim_jid).await;
    assert_no_message(&mut kim, QUIET, "no last item from an empty view").await;
}
