//! End to end, pushes through the server's XEP-0033 multicast service (`multicast.localhost`:
//! ejabberd's mod_multicast, or `prosody/mod_component_multicast.lua`), on the server
//! `SMARTFEEDS_TEST_SERVER` selects. Every test starts its own server and smartfeeds (with
//! its metrics on a free port), as some change the server under way.
//!
//! What a subscriber checks is the same with and without the service: each change once per
//! subscription, with the node as she wrote it, the view's headers, an unbroken
//! `PreviousCursor` chain, and no address list. The metrics say which way the pushes went.

use std::collections::BTreeMap;
use std::time::Duration;

use testkit::fixture::Fixture;
use testkit::pubsub::*;
use testkit::push::*;
use testkit::server::{BENCH_DOMAIN, MULTICAST_DOMAIN};
use testkit::smartfeeds::{metric, scrape_metrics};
use testkit::xml::error_condition;
use testkit::{Client, Kind, TestServer, stanza_type, to_xml, xml};

const PUSH_WAIT: Duration = Duration::from_secs(5);
const QUIET: Duration = Duration::from_millis(300);
const ADDRESS: &str = "http://jabber.org/protocol/address";

/// A server, smartfeeds serving feed `mc` on it, and smartfeeds' metrics port.
struct Setup {
    fixture: Fixture,
    metrics: u16,
}

impl Setup {
    fn start(server: TestServer) -> Setup {
        let (fixture, ports) = Fixture::on_free_ports(server, 1, |ports| {
            format!(
                "[metrics]\nlisten = \"127.0.0.1:{}\"\n\n[push]\nbounce_limit = 2\n\n\
                 [[feeds]]\nname = \"mc\"\npublishers = [\"bot@localhost\"]\n",
                ports[0]
            )
        });
        Setup { fixture, metrics: ports[0] }
    }

    fn server(&self) -> &'static TestServer {
        self.fixture.server
    }

    async fn user(&self, name: &str) -> Client {
        self.server().user(name).await
    }

    /// A counter of smartfeeds' metrics (`smartfeeds_NAME_total`).
    fn counter(&self, name: &str) -> u64 {
        let text = scrape_metrics(self.metrics);
        metric(&text, &format!("smartfeeds_{name}_total")).unwrap_or_else(|| panic!("no {name} in\n{text}")) as u64
    }

    /// How many lines of smartfeeds' log contain all of `needles`.
    fn log_lines(&self, needles: &[&str]) -> usize {
        let text = std::fs::read_to_string(self.fixture.feeds.log_path()).unwrap_or_default();
        text.lines().filter(|l| needles.iter().all(|n| l.contains(n))).count()
    }
}

/// One subscription and what its subscriber has seen.
struct Sub {
    client: Client,
    node: &'static str,
    jid: String,
    /// Its view takes updates and retractions (`order=modified`).
    by_modified: bool,
    /// Its view's filter: author `x`, or category `hot`.
    filter: Option<fn(&Item) -> bool>,
    last: Option<String>,
    seen: Vec<String>,
}

/// An item of the model: its author and whether it is `hot`.
#[derive(Clone, Copy)]
struct Item {
    author: &'static str,
    hot: bool,
}

/// Subscribes `name`'s client to `node` (as its full JID when `full`, else its bare JID).
async fn sub(setup: &Setup, name: &str, node: &'static str, full: bool) -> Sub {
    let mut client = setup.user(name).await;
    let jid = if full { client.jid().to_string() } else { client.bare_jid().to_string() };
    subscribe(&mut client, node, &jid).await;
    let by_modified = node.contains("order=modified");
    let filter: Option<fn(&Item) -> bool> = if node.contains("author=x") {
        Some(|i| i.author == "x")
    } else if node.contains("category=hot") {
        Some(|i| i.hot)
    } else {
        None
    };
    Sub { client, node, jid, by_modified, filter, last: None, seen: Vec::new() }
}

/// A change of the scenario.
enum Op {
    Publish { id: &'static str, author: &'static str, hot: bool },
    Retract(&'static str),
}

/// The feed's items by id, as the changes so far left them.
type Model = BTreeMap<&'static str, Item>;

/// Applies `ops` to feed `mc` (holding `model`) one by one; after each, every subscription
/// whose view takes the change gets exactly one push, checked against the model, and
/// nothing else arrives.
async fn run_ops(setup: &Setup, subs: &mut [Sub], model: &mut Model, ops: &[Op]) {
    let mut bot = setup.server().login("bot").await;
    for (step, op) in ops.iter().enumerate() {
        let (id, created, retraction) = match op {
            Op::Publish { id, author, hot } => {
                let categories: &[&str] = if *hot { &["hot"] } else { &[] };
                let entry = entry(&format!("urn:mc:{id}"), &format!("{id} by {author}"), Some(author), categories);
                let reply = bot.iq(publish_iq("mc", Some(id), &entry)).await;
                assert_eq!(stanza_type(&reply), "result", "publish {id}: {}", to_xml(&reply));
                let created = model.insert(id, Item { author, hot: *hot }).is_none();
                (*id, created, false)
            }
            Op::Retract(id) => {
                let reply = bot.iq(retract_iq("mc", id)).await;
                assert_eq!(stanza_type(&reply), "result", "retract {id}: {}", to_xml(&reply));
                (*id, false, true)
            }
        };
        let item = model[id];
        for s in subs.iter_mut() {
            let in_view = s.filter.is_none_or(|f| f(&item));
            if !(in_view && (created || s.by_modified)) {
                continue;
            }
            let push = next_push(&mut s.client, PUSH_WAIT).await;
            let raw = &push.raw;
            assert_eq!(push.kind, "headline", "step {step}: {raw}");
            assert_eq!(push.from, testkit::server::COMPONENT_DOMAIN, "step {step}: {raw}");
            assert_eq!(push.to, s.jid, "step {step}: to the subscribed JID: {raw}");
            assert!(!raw.contains(ADDRESS), "step {step}: a bcc copy carries no address list: {raw}");
            assert_eq!(push.node, s.node, "step {step}: the node as the subscriber wrote it: {raw}");
            assert_eq!(push.item_id(), id, "step {step}: {raw}");
            assert_eq!(push.is_retract(), retraction, "step {step}: {raw}");
            let total = model.values().filter(|i| s.filter.is_none_or(|f| f(i))).count() as u64;
            assert_eq!(push.total, Some(total), "step {step}, {}: TotalItems: {raw}", s.node);
            assert_eq!(push.previous, s.last, "step {step}, {}: PreviousCursor follows on: {raw}", s.node);
            s.last = Some(push.last_cursor().to_string());
            s.seen.push(format!("{}{id}", if retraction { "-" } else { "+" }));
        }
        for s in subs.iter_mut() {
            if let Some(m) = s.client.next_message(Duration::from_millis(50)).await {
                panic!("step {step}: {} ({}) got an extra message: {}", s.client.label(), s.node, to_xml(&m));
            }
        }
    }
    for s in subs.iter_mut() {
        assert_no_message(&mut s.client, QUIET, "after the last change").await;
    }
}

/// Subscribers of several views, one view under two spellings, and a lone subscriber; five
/// changes. Returns how many multicast messages smartfeeds sent.
async fn several_views(setup: &Setup) -> u64 {
    let mut subs = Vec::new();
    for k in 0..4 {
        subs.push(sub(setup, &format!("mod{k}"), "mc?order=modified", true).await);
    }
    for k in 0..3 {
        subs.push(sub(setup, &format!("cre{k}"), "mc?order=created", false).await);
    }
    for k in 0..2 {
        subs.push(sub(setup, &format!("xa{k}"), "mc?author=x&order=modified", true).await);
        subs.push(sub(setup, &format!("xb{k}"), "mc?order=modified&author=x", false).await);
    }
    subs.push(sub(setup, "hot0", "mc?category=hot", true).await);
    let ops = [
        Op::Publish { id: "i1", author: "x", hot: true },
        Op::Publish { id: "i2", author: "y", hot: false },
        Op::Publish { id: "i1", author: "x", hot: true },
        Op::Retract("i2"),
        Op::Publish { id: "i3", author: "x", hot: true },
    ];
    run_ops(setup, &mut subs, &mut Model::new(), &ops).await;
    let seen: BTreeMap<&str, Vec<String>> = subs.iter().map(|s| (s.node, s.seen.clone())).collect();
    let strs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(seen["mc?order=modified"], strs(&["+i1", "+i2", "+i1", "-i2", "+i3"]));
    assert_eq!(seen["mc?order=created"], strs(&["+i1", "+i2", "+i3"]));
    assert_eq!(seen["mc?author=x&order=modified"], strs(&["+i1", "+i1", "+i3"]));
    assert_eq!(seen["mc?order=modified&author=x"], strs(&["+i1", "+i1", "+i3"]));
    assert_eq!(seen["mc?category=hot"], strs(&["+i1", "+i3"]));
    // 4 x 5 + 3 x 3 + 4 x 3 + 1 x 2 pushes.
    assert_eq!(setup.counter("pushes_sent"), 43);
    setup.counter("multicast_messages")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_of_several_views_each_get_each_change_once_through_multicast() {
    let setup = Setup::start(testkit::start_selected());
    let messages = several_views(&setup).await;
    // One message per change and group of two or more: the modified view (5 changes),
    // the created view (3), each spelling of the author=x view (3 each); the lone
    // subscriber of the hot view gets hers one by one.
    assert_eq!(messages, 14, "{}", setup.fixture.feeds.log_tail(20));
    assert_eq!(setup.log_lines(&["multicast service found"]), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_service_every_subscriber_gets_each_change_once_by_itself() {
    let setup = Setup::start(Kind::from_env().start_without_multicast());
    assert_eq!(several_views(&setup).await, 0);
    assert_eq!(setup.log_lines(&["no multicast service on the server"]), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_mid_run_falls_back_without_losing_a_push() {
    let setup = Setup::start(testkit::start_selected());
    let mut subs = Vec::new();
    for k in 0..3 {
        subs.push(sub(&setup, &format!("ref{k}"), "mc?order=modified", k % 2 == 0).await);
    }
    let mut model = Model::new();
    run_ops(&setup, &mut subs, &mut model, &[Op::Publish { id: "r1", author: "x", hot: false }]).await;
    assert_eq!(setup.counter("multicast_messages"), 1);
    setup.server().refuse_multicast();

    // A wave of pipelined changes: several go out as multicast messages before the first
    // refusal is back; each refused one reaches everyone one by one, before anything later.
    let wave: Vec<String> = (0..20).map(|k| format!("w{k:02}")).collect();
    let mut bot = setup.server().login("bot").await;
    let iqs = wave.iter().map(|id| publish_iq("mc", Some(id), &entry(&format!("urn:mc:{id}"), "w", Some("x"), &[])));
    for reply in iq_all(&mut bot, iqs.collect()).await {
        assert_eq!(stanza_type(&reply), "result", "{}", to_xml(&reply));
    }
    for s in &mut subs {
        let mut got = Vec::new();
        for k in 0..wave.len() {
            let push = next_push(&mut s.client, PUSH_WAIT).await;
            assert_eq!(push.previous, s.last, "{}: in commit order, each once: {}", s.jid, push.raw);
            assert_eq!(push.total, Some(2 + k as u64), "{}: {}", s.jid, push.raw);
            assert!(!push.raw.contains(ADDRESS), "{}", push.raw);
            s.last = Some(push.last_cursor().to_string());
            got.push(push.item_id().to_string());
        }
        got.sort();
        assert_eq!(got, wave, "{}: every change of the wave", s.jid);
        s.seen.push("wave".into());
    }
    for id in &wave {
        model.insert(Box::leak(id.clone().into_boxed_str()), Item { author: "x", hot: false });
    }

    // Later changes go one by one from the start.
    let ops = [Op::Publish { id: "r2", author: "x", hot: false }, Op::Publish { id: "r2", author: "y", hot: false }];
    run_ops(&setup, &mut subs, &mut model, &ops).await;
    for s in &subs {
        assert_eq!(s.seen, ["+r1", "wave", "+r2", "+r2"], "{}", s.jid);
    }
    let (messages, refusals) = (setup.counter("multicast_messages"), setup.counter("multicast_refusals"));
    assert!(messages >= 2 && refusals == messages - 1, "{messages} messages, {refusals} refused");
    assert_eq!(setup.log_lines(&["the multicast service refused a push message"]), 1, "logged once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_whose_multicast_copies_bounce_is_unsubscribed() {
    let setup = Setup::start(testkit::start_selected());
    let node = "mc?order=modified";
    let mut dead = sub(&setup, "dead", node, true).await;
    let mut live = vec![sub(&setup, "live0", node, true).await, sub(&setup, "live1", node, false).await];
    let mut bot = setup.server().login("bot").await;
    // From here on `dead` sends no iq: a request would show it is alive and reset its count.
    for k in 0..2 {
        let id = format!("b{k}");
        let reply = bot.iq(publish_iq("mc", Some(&id), &entry(&format!("urn:mc:{id}"), "t", None, &[]))).await;
        assert_eq!(stanza_type(&reply), "result", "{}", to_xml(&reply));
        for s in &mut live {
            assert_eq!(next_push(&mut s.client, PUSH_WAIT).await.item_id(), id);
        }
        let push = next_push(&mut dead.client, PUSH_WAIT).await;
        assert_eq!(push.item_id(), id, "still subscribed after {k} bounce(s): {}", push.raw);
        // What a client that does not want the push answers (RFC 6120 §8.3).
        dead.client
            .send(xml(&format!(
                r#"<message type="error" to="{}" id="{}"><error type="cancel"><service-unavailable xmlns="urn:ietf:params:xml:ns:xmpp-stanzas"/></error></message>"#,
                push.from,
                esc(push.id.as_deref().unwrap_or_default()),
            )))
            .await;
    }
    assert_eq!(setup.counter("multicast_messages"), 2, "the pushes went through the service");
    let deadline = tokio::time::Instant::now() + PUSH_WAIT;
    while setup.log_lines(&["pushes keep bouncing: unsubscribed", &dead.jid]) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the bounces of the copies unsubscribe {}\n{}",
            dead.jid,
            setup.fixture.feeds.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let reply = bot.iq(publish_iq("mc", Some("b2"), &entry("urn:mc:b2", "t", None, &[]))).await;
    assert_eq!(stanza_type(&reply), "result");
    for s in &mut live {
        assert_eq!(next_push(&mut s.client, PUSH_WAIT).await.item_id(), "b2", "the others still get pushes");
    }
    assert_no_message(&mut dead.client, QUIET, "unsubscribed").await;
    assert_eq!(subscriptions(&mut dead.client, None).await, vec![], "its subscription is gone");
}

/// A multicast message to `alice@localhost` through the service, with stanza id `id`.
fn multicast_to_alice(from: &str, id: &str) -> minidom::Element {
    xml(&format!(
        r#"<message from="{from}" to="{MULTICAST_DOMAIN}" type="headline" id="{id}"><addresses xmlns="{ADDRESS}"><address type="bcc" jid="alice@localhost"/></addresses><body>relayed?</body></message>"#
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_refuses_senders_not_in_its_list() {
    let server = testkit::start_selected();
    let mut alice = server.login("alice").await;
    let mut other = server.component_as(BENCH_DOMAIN).await;
    other.send(multicast_to_alice(&format!("x@{BENCH_DOMAIN}"), "other-1")).await;
    let answer = other.next_message(PUSH_WAIT).await.expect("an answer from the service");
    assert_eq!(stanza_type(&answer), "error", "{}", to_xml(&answer));
    assert_eq!(answer.attr("from"), Some(MULTICAST_DOMAIN), "{}", to_xml(&answer));
    assert_eq!(error_condition(&answer).as_deref(), Some("forbidden"), "{}", to_xml(&answer));

    let mut bob = server.login("bob").await;
    let from = bob.jid().to_string();
    bob.send(multicast_to_alice(&from, "bob-1")).await;
    let answer = bob.next_message(PUSH_WAIT).await.expect("an answer from the service");
    assert_eq!(stanza_type(&answer), "error", "{}", to_xml(&answer));
    assert_eq!(error_condition(&answer).as_deref(), Some("forbidden"), "{}", to_xml(&answer));
    assert_no_message(&mut alice, QUIET, "nothing is relayed for a sender not in the list").await;
}
