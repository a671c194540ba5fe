//! End to end, federation: users of another server reach the component only through their
//! own server and a server-to-server link. Two real Prosody servers run on loopback
//! ([`Federation`]): the home server `localhost`, which carries `feeds.localhost` and the
//! real smartfeeds binary, and `remote.test`, whose user `alice@remote.test` discovers,
//! pulls, subscribes, receives pushes, is named in `allowed` and `publishers`, and has her
//! server stopped and started again while pushes are due. How each server finds the other
//! without the machine's resolver is in `crates/testkit/src/federation.rs`.

use std::time::{Duration, Instant};

use testkit::federation::{Federation, REMOTE};
use testkit::process::free_port;
use testkit::pubsub::*;
use testkit::push::*;
use testkit::smartfeeds::{Smartfeeds, bot_feeds, closed_feed, metric_total};
use testkit::{Client, error_condition, stanza_type, to_xml, xml};

const NEWS: &str = "news?order=created";
/// Long enough for an s2s link to be opened (dialback both ways) on a loaded machine.
const S2S: Duration = Duration::from_secs(20);

fn tables(metrics_port: u16) -> String {
    format!(
        r#"
[push]
bounce_limit = 2

[metrics]
listen = "127.0.0.1:{metrics_port}"

[[feeds]]
name = "board"
publishers = ["alice@{REMOTE}"]
{}{}"#,
        bot_feeds(&["news"]),
        closed_feed("club", &[&format!("*@{REMOTE}")]),
    )
}

/// Publishes the item `id` to `news`.
async fn publish_news(bot: &mut Client, id: &str) {
    publish(bot, "news", id, &small_entry(id)).await;
}

/// Pulls the whole view after `after` (or from the start) in pages of `max`.
async fn pull_all(conn: &mut Client, node: &str, after: Option<&str>, max: u32) -> (Vec<String>, Option<Cursor>) {
    let (mut ids, mut last, mut after) = (Vec::new(), None, after.map(String::from));
    loop {
        let mut request = Pull::node(node).max(max);
        if let Some(a) = &after {
            request = request.after(a);
        }
        let page = pull(conn, &request).await;
        if page.items.is_empty() {
            return (ids, last);
        }
        ids.extend(page.ids());
        last = Some(page.last_cursor());
        after = Some(page.last_cursor().spec());
        if page.items.len() < max as usize {
            return (ids, last);
        }
    }
}

fn bare(cursor: Cursor) -> String {
    cursor.spec().trim_start_matches("cursor:").to_string()
}

/// Waits until the metric reaches `at_least`; returns its value.
async fn wait_metric(port: u16, name: &str, at_least: f64) -> f64 {
    let deadline = Instant::now() + S2S;
    loop {
        let value = metric_total(port, name);
        if value >= at_least || Instant::now() > deadline {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_remote_user_pulls_subscribes_and_catches_up_after_her_server_was_away() {
    let mut fed = Federation::start();
    let metrics = free_port();
    let feeds = Smartfeeds::start(&fed.home, &tables(metrics));
    let mut bot = fed.home.login("bot").await;
    for i in 1..=5 {
        publish_news(&mut bot, &format!("n{i}")).await;
    }

    // Discovery over s2s: the service, then a node.
    let mut alice = fed.remote.login("alice").await;
    assert_eq!(alice.bare_jid(), format!("alice@{REMOTE}"));
    let info = alice
        .iq_timeout(xml(&format!(r#"<iq type="get" to="feeds.localhost"><query xmlns="{DISCO_INFO}"/></iq>"#)), S2S)
        .await;
    let raw = to_xml(&info);
    assert_eq!(stanza_type(&info), "result", "disco#info over s2s: {raw}\n{}", fed.home.log_tail(40));
    let features = info.get_child("query", DISCO_INFO).map(|q| q.children().filter_map(|f| f.attr("var")).count());
    assert!(raw.contains("var='http://jabber.org/protocol/pubsub'") && features > Some(5), "{raw}");
    assert_eq!(
        meta_field(&alice.iq(disco_info_iq(NEWS)).await, "pubsub#type").as_deref(),
        Some("urn:xmpp:pubsub-social-feed:1")
    );

    // Pull with RSM, two items a page.
    let (ids, last) = pull_all(&mut alice, NEWS, None, 2).await;
    assert_eq!(ids, ["n1", "n2", "n3", "n4", "n5"]);
    let n5 = last.expect("a last cursor");

    // Subscribe; a push carries the SHIM headers that chain onto the pulled page.
    let me = alice.bare_jid().to_string();
    subscribe(&mut alice, NEWS, &me).await;
    publish_news(&mut bot, "n6").await;
    let push = next_push(&mut alice, S2S).await;
    assert_eq!((push.node.as_str(), push.item_id(), push.total), (NEWS, "n6", Some(6)), "{}", push.raw);
    assert_eq!(push.previous.as_deref(), Some(bare(n5).as_str()), "PreviousCursor is n5's cursor: {}", push.raw);
    let seen = push.last_cursor().to_string();

    // `allowed = ["*@remote.test"]` and `publishers = ["alice@remote.test"]`.
    let club = pull(&mut alice, &Pull::node("club")).await;
    assert_eq!(club.count, Some(0), "{}", club.raw);
    subscribe(&mut alice, "club", &me).await;
    let mut bob = fed.home.login("bob").await;
    assert_error(&bob.iq(Pull::node("club").iq()).await, "not-allowed", Some("closed-node"));
    let posted = alice.iq(publish_iq("board", Some("a1"), &entry("urn:a1", "from afar", None, &[]))).await;
    assert_eq!(stanza_type(&posted), "result", "{}", to_xml(&posted));
    assert_error(&alice.iq(publish_iq("news", None, &entry("urn:x", "x", None, &[]))).await, "forbidden", None);
    assert_error(&bob.iq(publish_iq("board", None, &entry("urn:y", "y", None, &[]))).await, "forbidden", None);

    // Her server goes away while pushes are due: each push bounces with Prosody's
    // `remote-server-not-found` (type cancel), more often than `bounce_limit`, and none of
    // those bounces costs her the subscriptions.
    let bounced_before = metric_total(metrics, "smartfeeds_pushes_bounced_total");
    fed.remote.stop();
    for i in 7..=10 {
        publish_news(&mut bot, &format!("n{i}")).await;
        wait_metric(metrics, "smartfeeds_pushes_bounced_total", bounced_before + f64::from(i - 6)).await;
    }
    let removed = metric_total(metrics, "smartfeeds_subscriptions_removed_total");
    assert_eq!(removed, 0.0, "a server that is away cost its users their subscriptions\n{}", feeds.log_tail(20));
    let bounced = metric_total(metrics, "smartfeeds_pushes_bounced_total") - bounced_before;
    assert!(bounced >= 3.0, "pushes to the stopped server bounce (got {bounced})\n{}", fed.home.log_tail(30));
    let failed = "Sending error replies for 1 queued stanzas because of failed outgoing connection to remote.test";
    assert!(fed.home.log_tail(2000).contains(failed), "Prosody bounced them itself: {}", fed.home.log_tail(60));

    // Back again: the subscriptions are there, pushes resume, and the first one shows the
    // gap, which a pull after the last cursor she saw fills exactly.
    fed.remote.restart();
    let mut alice = fed.remote.login("alice").await;
    let subs = alice.iq_timeout(subscriptions_iq(None), S2S).await;
    let mut nodes: Vec<String> = parse_subscriptions(&subs).into_iter().map(|s| s.node).collect();
    nodes.sort();
    assert_eq!(nodes, ["club", NEWS], "subscriptions kept: {}", to_xml(&subs));
    publish_news(&mut bot, "n11").await;
    let push = next_push(&mut alice, S2S).await;
    assert_eq!(push.item_id(), "n11", "{}", push.raw);
    assert_ne!(push.previous.as_deref(), Some(seen.as_str()), "the gap shows in PreviousCursor: {}", push.raw);
    let (missed, last) = pull_all(&mut alice, NEWS, Some(&format!("cursor:{seen}")), 2).await;
    assert_eq!(missed, ["n7", "n8", "n9", "n10", "n11"]);
    assert_eq!(bare(last.expect("a cursor")), push.last_cursor(), "the pull ends where the push is");

    // Unsubscribe: no more pushes.
    let reply = alice.iq(unsubscribe_iq(NEWS, &me)).await;
    assert_eq!(stanza_type(&reply), "result", "{}", to_xml(&reply));
    publish_news(&mut bot, "n12").await;
    assert_no_message(&mut alice, Duration::from_secs(2), "after unsubscribing").await;
}

#[tokio::test]
async fn a_flood_from_a_remote_server_is_limited_like_any_sender() {
    let fed = Federation::start();
    let limits = "[limits]\nrequests_per_second = 5.0\nrequest_burst = 2.0\nrequest_backlog = 3.0\n\
                  requests_per_domain = 1\n";
    let _feeds = Smartfeeds::start(&fed.home, &format!("{limits}{}", tables(free_port())));
    let mut alice = fed.remote.login("alice").await;
    let mut bob = fed.home.login("bob").await;
    // The link is up before the flood, so the flood measures the service, not dialback.
    let first = alice.iq_timeout(Pull::node(NEWS).iq(), S2S).await;
    assert_eq!(stanza_type(&first), "result", "{}", to_xml(&first));
    tokio::time::sleep(Duration::from_secs(1)).await; // her bucket refills

    let started = Instant::now();
    let flood = async {
        let replies = iq_all(&mut alice, (0..30).map(|_| Pull::node(NEWS).iq()).collect()).await;
        (replies, started.elapsed())
    };
    let local = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let reply = bob.iq(Pull::node(NEWS).iq()).await;
        (reply, started.elapsed())
    };
    let ((replies, flood_took), (bobs, bob_took)) = tokio::join!(flood, local);

    let conditions: Vec<String> = replies.iter().map(|r| error_condition(r).unwrap_or_else(|| "ok".into())).collect();
    let served = conditions.iter().filter(|c| *c == "ok").count();
    let refused = conditions.iter().filter(|c| *c == "resource-constraint").count();
    assert_eq!(served + refused, 30, "every request answered, served or refused: {conditions:?}");
    assert!((2..=8).contains(&served), "her burst and backlog are served, the rest refused: {conditions:?}");
    assert_eq!(stanza_type(&bobs), "result", "{}", to_xml(&bobs));
    assert!(bob_took < flood_took, "bob ({bob_took:?}) is not held up by her flood ({flood_took:?})");
}
