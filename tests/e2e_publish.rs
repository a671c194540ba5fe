//! End to end, publishing and errors (SPEC §2, §3, §4, §6, §7): a real XMPP server (Prosody
//! or ejabberd, see `crates/testkit/src/server/select.rs`) and the real
//! `smartfeeds` binary shared by the tests of this file; each test uses its own feeds or
//! item ids, so they run in any order and in parallel.

use std::collections::HashSet;

use minidom::Element;
use testkit::fixture::{Fixture, Shared};
use testkit::pubsub::*;
use testkit::server::COMPONENT_DOMAIN as COMPONENT;
use testkit::smartfeeds::{BOT_PUBLISHES, Smartfeeds, closed_feed, feeds};
use testkit::{stanza_type, start_selected, to_xml, xml};

/// A feed with a title and a description, one ordered by modification by default, and one
/// only bob may read.
fn tables() -> String {
    [
        "[limits]\nmax_payload_bytes = 4096\n".to_string(),
        feeds(&["news"], &format!("title = \"News\"\ndescription = \"What happened\"\n{BOT_PUBLISHES}")),
        feeds(&["ordered"], &format!("{BOT_PUBLISHES}default_order = \"modified\"\n")),
        closed_feed("secret", &["bob@localhost"]),
    ]
    .concat()
}

static FIXTURE: Shared<Fixture> = Shared::new();

fn fixture() -> &'static Fixture {
    FIXTURE.get_or_start(|| Fixture::start(&tables()))
}

fn news_entry(id: &str, title: &str) -> String {
    entry(&format!("urn:smartfeeds-test:{id}"), title, Some("Reporter"), &["news"])
}

/// The item id of a publish result; checks the result's shape.
#[track_caller]
fn published_id(reply: &Element, node: &str) -> String {
    let raw = to_xml(reply);
    assert_eq!(stanza_type(reply), "result", "publish: {raw}");
    assert_eq!(reply.attr("from"), Some(COMPONENT), "{raw}");
    let publish = reply
        .get_child("pubsub", PUBSUB)
        .and_then(|p| p.get_child("publish", PUBSUB))
        .unwrap_or_else(|| panic!("the result holds <pubsub><publish/></pubsub>: {raw}"));
    assert_eq!(publish.attr("node"), Some(node), "{raw}");
    let ids: Vec<&str> = publish.children().filter(|c| c.is("item", PUBSUB)).filter_map(|i| i.attr("id")).collect();
    assert_eq!(ids.len(), 1, "one <item id/> in the result: {raw}");
    assert!(!ids[0].is_empty(), "{raw}");
    ids[0].to_string()
}

#[track_caller]
fn assert_result(reply: &Element) {
    assert_eq!(stanza_type(reply), "result", "{}", to_xml(reply));
    assert_eq!(reply.attr("from"), Some(COMPONENT), "{}", to_xml(reply));
}

#[tokio::test]
async fn publish_with_and_without_an_id() {
    let fx = fixture();
    let mut bot = fx.server.login("bot").await;

    let reply = bot.iq(publish_iq("news", Some("pub-with-id"), &news_entry("pub-with-id", "given id"))).await;
    assert_eq!(published_id(&reply, "news"), "pub-with-id");

    // Without an id the service makes one and returns it; two are never the same.
    let reply = bot.iq(publish_iq("news", None, &news_entry("gen-1", "generated 1"))).await;
    let first = published_id(&reply, "news");
    let reply = bot.iq(publish_iq("news", None, &news_entry("gen-2", "generated 2"))).await;
    let second = published_id(&reply, "news");
    assert_ne!(first, second);

    // Everyone can read them back by those ids.
    let mut alice = fx.server.login("alice").await;
    let page = pull(&mut alice, &Pull::node("news").ids(&["pub-with-id", &first, &second])).await;
    let titles: HashSet<String> = page.items.iter().filter_map(|i| i.title()).collect();
    assert_eq!(
        titles,
        ["given id", "generated 1", "generated 2"].map(String::from).into_iter().collect(),
        "{}",
        page.raw
    );
    // They are the newest items of the default view (-created), newest first.
    let page = pull(&mut alice, &Pull::node("news?order=created").max(0)).await;
    assert!(page.count.unwrap() >= 3);

    // An admin may publish to any feed.
    let mut admin = fx.server.login("admin").await;
    let reply = admin.iq(publish_iq("news", Some("pub-by-admin"), &news_entry("pub-by-admin", "from admin"))).await;
    assert_eq!(published_id(&reply, "news"), "pub-by-admin");

    // An entry just under the size limit is accepted.
    let big = entry("urn:smartfeeds-test:big", &"x".repeat(3000), None, &[]);
    assert!(big.len() < 4096);
    let reply = bot.iq(publish_iq("news", Some("pub-big-ok"), &big)).await;
    assert_eq!(published_id(&reply, "news"), "pub-big-ok");
}

#[tokio::test]
async fn update_keeps_the_created_position_and_retract_leaves_a_tombstone() {
    let fx = fixture();
    let mut bot = fx.server.login("bot").await;
    let mut bob = fx.server.login("bob").await;
    for id in ["u1", "u2", "u3"] {
        let reply = bot.iq(publish_iq("ordered", Some(id), &news_entry(id, &format!("{id} v1")))).await;
        assert_eq!(published_id(&reply, "ordered"), id);
    }
    let created_before = pull(&mut bob, &Pull::node("ordered?order=created")).await;
    assert_eq!(created_before.ids(), ["u1", "u2", "u3"]);

    // Update u1: same id, new payload.
    let reply = bot.iq(publish_iq("ordered", Some("u1"), &news_entry("u1", "u1 v2"))).await;
    assert_eq!(published_id(&reply, "ordered"), "u1");
    let created = pull(&mut bob, &Pull::node("ordered?order=created")).await;
    assert_eq!(created.ids(), ["u1", "u2", "u3"], "created order does not change on update");
    assert_eq!(created.count, Some(3), "an update adds no item");
    assert_eq!(created.items[0].title().as_deref(), Some("u1 v2"), "{}", created.raw);
    assert_eq!(created.first, created_before.first, "u1 keeps its created cursor");
    // The feed's default order is `modified`: u1 moves to the end.
    let modified = pull(&mut bob, &Pull::node("ordered")).await;
    assert_eq!(modified.ids(), ["u2", "u3", "u1"], "{}", modified.raw);
    let newest = pull(&mut bob, &Pull::node("ordered?order=-modified")).await;
    assert_eq!(newest.ids(), ["u1", "u3", "u2"]);
    assert!(
        modified.last_cursor().t >= created_before.last_cursor().t,
        "the update's modified time is not before the last creation"
    );

    // Retract u2: it stays, as a tombstone, and moves to the end of the modified view.
    let reply = bot.iq(retract_iq("ordered", "u2")).await;
    assert_result(&reply);
    let modified = pull(&mut bob, &Pull::node("ordered")).await;
    assert_eq!(modified.ids(), ["u3", "u1", "u2"], "{}", modified.raw);
    assert_eq!(modified.count, Some(3), "retracted items stay");
    let tomb = modified.items[2].tombstone().unwrap_or_else(|| panic!("u2 is a tombstone: {}", modified.raw));
    assert_eq!(tomb.attr("ref"), Some("urn:smartfeeds-test:u2"), "{}", modified.raw);
    let when = tomb.attr("when").and_then(parse_rfc3339).unwrap_or_else(|| panic!("when: {}", modified.raw));
    assert!((when - now_ms()).abs() < 60_000, "retracted just now: {}", modified.raw);
    let created = pull(&mut bob, &Pull::node("ordered?order=created")).await;
    assert_eq!(created.ids(), ["u1", "u2", "u3"]);
    assert!(created.items[1].tombstone().is_some(), "{}", created.raw);
    let page = pull(&mut bob, &Pull::node("ordered").ids(&["u2"])).await;
    assert!(page.items[0].tombstone().is_some(), "{}", page.raw);
}

#[tokio::test]
async fn publish_errors() {
    let fx = fixture();
    let mut bot = fx.server.login("bot").await;
    let mut alice = fx.server.login("alice").await;
    let ok = news_entry("err", "fine");

    // Not a publisher.
    assert_error(&alice.iq(publish_iq("news", Some("err-1"), &ok)).await, "forbidden", None);
    // A node name with parameters.
    for node in ["news?order=created", "news?author=Reporter"] {
        assert_error(&bot.iq(publish_iq(node, Some("err-2"), &ok)).await, "bad-request", None);
    }
    // Not exactly one Atom entry.
    let two = format!("{ok}{ok}");
    let text_and_entry = format!("some text{ok}");
    let wrong_ns = r#"<entry xmlns="urn:example:not-atom"><title>x</title></entry>"#.to_string();
    let other = r#"<geoloc xmlns="http://jabber.org/protocol/geoloc"><lat>1</lat></geoloc>"#.to_string();
    for payload in [String::new(), two, text_and_entry, wrong_ns, other] {
        let reply = bot.iq(publish_iq("news", Some("err-3"), &payload)).await;
        assert_error(&reply, "bad-request", Some("invalid-payload"));
    }
    // Too large.
    let huge = entry("urn:smartfeeds-test:huge", &"y".repeat(5000), None, &[]);
    let reply = bot.iq(publish_iq("news", Some("err-4"), &huge)).await;
    assert_error(&reply, "not-acceptable", Some("payload-too-big"));
    // None of that was stored.
    let page = pull(&mut alice, &Pull::node("news").ids(&["err-1", "err-2", "err-3", "err-4"])).await;
    assert!(page.items.is_empty(), "refused publishes store nothing: {}", page.raw);

    // Retract: unknown item, not a publisher, parameters.
    assert_error(&bot.iq(retract_iq("news", "never-published")).await, "item-not-found", None);
    let reply = bot.iq(publish_iq("news", Some("err-keep"), &ok)).await;
    published_id(&reply, "news");
    assert_error(&alice.iq(retract_iq("news", "err-keep")).await, "forbidden", None);
    assert_error(&bot.iq(retract_iq("news?order=created", "err-keep")).await, "bad-request", None);
    let page = pull(&mut alice, &Pull::node("news").ids(&["err-keep"])).await;
    assert_eq!(page.items[0].title().as_deref(), Some("fine"), "a refused retract changes nothing: {}", page.raw);

    // Purge and node deletion: items are never removed.
    let mut admin = fx.server.login("admin").await;
    for (op, feature) in [("purge", "purge-nodes"), ("delete", "delete-nodes")] {
        for sender in [&mut admin, &mut bot] {
            let iq = xml(&format!(
                r#"<iq type="set" to="{COMPONENT}"><pubsub xmlns="{PUBSUB_OWNER}"><{op} node="news"/></pubsub></iq>"#
            ));
            let reply = sender.iq(iq).await;
            assert_error(&reply, "feature-not-implemented", Some("unsupported"));
            let unsupported = reply
                .children()
                .find(|c| c.name() == "error")
                .and_then(|e| e.get_child("unsupported", PUBSUB_ERRORS))
                .and_then(|u| u.attr("feature"));
            assert_eq!(unsupported, Some(feature), "XEP-0060 names the feature: {}", to_xml(&reply));
        }
    }
    let page = pull(&mut alice, &Pull::node("news").ids(&["err-keep"])).await;
    assert_eq!(page.items.len(), 1, "still there after purge and delete: {}", page.raw);
}

#[tokio::test]
async fn an_unknown_feed_is_not_found_for_anyone_but_an_admin_with_autocreate() {
    let fx = fixture();
    let ok = news_entry("x", "x");
    for user in ["bot", "alice"] {
        let mut client = fx.server.login(user).await;
        let reply = client.iq(Pull::node("no-such-feed").iq()).await;
        assert_error(&reply, "item-not-found", None);
        let reply = client.iq(publish_iq("no-such-feed", Some("x"), &ok)).await;
        assert_error(&reply, "item-not-found", None);
        let reply = client.iq(retract_iq("no-such-feed", "x")).await;
        assert_error(&reply, "item-not-found", None);
    }
}

#[tokio::test]
async fn admins_create_feeds_by_publishing() {
    let fx = fixture();
    let mut admin = fx.server.login("admin").await;
    let mut alice = fx.server.login("alice").await;
    let feed = format!("fresh-{}", std::process::id());
    assert_error(&alice.iq(Pull::node(&feed).iq()).await, "item-not-found", None);
    let reply = admin.iq(publish_iq(&feed, Some("first"), &news_entry("first", "hello"))).await;
    assert_eq!(published_id(&reply, &feed), "first");
    let page = pull(&mut alice, &Pull::node(&feed)).await;
    assert_eq!(page.ids(), ["first"]);
    assert_eq!(page.count, Some(1));
    // Its views exist too; only admins publish there.
    let page = pull(&mut alice, &Pull::node(&format!("{feed}?order=modified&author=Reporter"))).await;
    assert_eq!(page.ids(), ["first"]);
    assert_error(&alice.iq(publish_iq(&feed, Some("x"), &news_entry("x", "x"))).await, "forbidden", None);
}

#[tokio::test]
async fn without_autocreate_an_unknown_feed_is_not_found_even_for_admins() {
    let host = start_selected();
    let feeds = Smartfeeds::start_with(&host, "admins = [\"admin@localhost\"]\nautocreate = false\n", "");
    let mut admin = host.login("admin").await;
    let reply = admin.iq(publish_iq("nowhere", Some("x"), &news_entry("x", "x"))).await;
    assert_error(&reply, "item-not-found", None);
    let reply = admin.iq(Pull::node("nowhere").iq()).await;
    assert_error(&reply, "item-not-found", None);
    drop(feeds);
}

#[tokio::test]
async fn published_items_survive_a_stop_and_a_crash() {
    let host = start_selected();
    let mut feeds = Smartfeeds::start(&host, "[[feeds]]\nname = \"news\"\npublishers = [\"bot@localhost\"]\n");
    let mut bot = host.login("bot").await;
    let reply = bot.iq(publish_iq("news", Some("before-stop"), &news_entry("before-stop", "one"))).await;
    published_id(&reply, "news");

    // SIGTERM: a clean exit with status 0; everything is there after a restart.
    let status = feeds.stop().expect("it was running");
    assert!(status.success(), "SIGTERM exits 0, got {status}\n{}", feeds.log_tail(20));
    // Meanwhile the server answers for the absent component, at once, with an error: Prosody
    // `remote-server-timeout` (it knows the component; type wait), ejabberd
    // `remote-server-not-found` (no route: it tries s2s; type cancel).
    let reply = bot.iq(Pull::node("news").iq()).await;
    assert!(
        host.is_component_down_error(&reply),
        "{}'s error for a component that is down: {}",
        host.name(),
        to_xml(&reply)
    );
    feeds.restart();
    let reply = bot.iq(publish_iq("news", Some("before-crash"), &news_entry("before-crash", "two"))).await;
    published_id(&reply, "news");

    // SIGKILL right after the result: the result means durable, so the item is there.
    feeds.kill();
    feeds.restart();
    let page = pull(&mut bot, &Pull::node("news?order=created")).await;
    assert_eq!(page.ids(), ["before-stop", "before-crash"], "{}", page.raw);
    assert_eq!(page.items[1].title().as_deref(), Some("two"));
}

#[tokio::test]
async fn pull_errors_name_what_is_wrong() {
    let fx = fixture();
    let mut bot = fx.server.login("bot").await;
    let mut alice = fx.server.login("alice").await;
    let reply = bot.iq(publish_iq("news", Some("pos-1"), &news_entry("pos-1", "anchor"))).await;
    published_id(&reply, "news");

    // Unknown, repeated or badly valued parameters: the node does not exist.
    for (node, parameter) in [
        ("news?sort=x", "sort"),
        ("news?order=created&order=modified", "order"),
        ("news?order=sideways", "order"),
        ("news?author=a&author=b", "author"),
        ("news?category=%FF", "category"),
    ] {
        let reply = alice.iq(Pull::node(node).iq()).await;
        let text = assert_error(&reply, "item-not-found", None);
        assert!(text.contains(parameter), "the text of the error for {node} names {parameter:?}: {text}");
    }

    // Malformed position specs: bad-request, in after and in before.
    for spec in ["cursor:abc", "cursor:1_2", "cursor:1_2_3_4", "seq:4", "8f4a1546", "time:yesterday", "id:"] {
        for request in [Pull::node("news").max(5).after(spec), Pull::node("news").max(5).before(spec)] {
            let reply = alice.iq(request.iq()).await;
            assert_error(&reply, "bad-request", None);
        }
    }
    // An id naming no item.
    for request in [Pull::node("news").after("id:no-such-item"), Pull::node("news").before("id:no-such-item")] {
        assert_error(&alice.iq(request.iq()).await, "item-not-found", None);
    }
    // A known id works.
    let page = pull(&mut alice, &Pull::node("news?order=created").max(5).before("id:pos-1")).await;
    assert!(!page.ids().contains(&"pos-1".to_string()), "before is exclusive: {}", page.raw);
}

#[tokio::test]
async fn whitelist_feeds_are_closed_to_others() {
    let fx = fixture();
    let mut bot = fx.server.login("bot").await;
    let mut alice = fx.server.login("alice").await;
    let mut bob = fx.server.login("bob").await;
    let reply = bot.iq(publish_iq("secret", Some("s1"), &news_entry("s1", "for bob"))).await;
    assert_eq!(published_id(&reply, "secret"), "s1");

    for request in [
        Pull::node("secret"),
        Pull::node("secret?order=modified").max(10),
        Pull::node("secret").ids(&["s1"]),
        Pull::node("secret").max_items(1),
    ] {
        let reply = alice.iq(request.iq()).await;
        assert_error(&reply, "not-allowed", Some("closed-node"));
        assert!(!to_xml(&reply).contains("for bob"), "reveals nothing: {}", to_xml(&reply));
    }
    let subscribe = xml(&format!(
        r#"<iq type="set" to="{COMPONENT}"><pubsub xmlns="{PUBSUB}"><subscribe node="secret" jid="{}"/></pubsub></iq>"#,
        alice.jid()
    ));
    assert_error(&alice.iq(subscribe).await, "not-allowed", Some("closed-node"));

    // The allowed user reads it.
    let page = pull(&mut bob, &Pull::node("secret")).await;
    assert!(page.ids().contains(&"s1".to_string()), "{}", page.raw);
    let page = pull(&mut bob, &Pull::node("secret").ids(&["s1"])).await;
    assert_eq!(page.items[0].title().as_deref(), Some("for bob"));
}

#[tokio::test]
async fn other_requests_ping_and_exactly_one_reply_each() {
    let fx = fixture();
    let mut alice = fx.server.login("alice").await;

    // XEP-0199 ping.
    let reply = alice.iq(xml(&format!(r#"<iq type="get" to="{COMPONENT}"><ping xmlns="urn:xmpp:ping"/></iq>"#))).await;
    assert_result(&reply);

    // Unknown payloads: service-unavailable, for get and set.
    for kind in ["get", "set"] {
        let iq = xml(&format!(r#"<iq type="{kind}" to="{COMPONENT}"><nonsense xmlns="urn:example:nonsense"/></iq>"#));
        let reply = alice.iq(iq).await;
        assert_eq!(stanza_type(&reply), "error", "{}", to_xml(&reply));
        assert_eq!(reply.attr("from"), Some(COMPONENT), "{}", to_xml(&reply));
        assert_eq!(testkit::error_condition(&reply).as_deref(), Some("service-unavailable"), "{}", to_xml(&reply));
    }

    // A burst of mixed requests, pipelined: one reply each, nothing more.
    let mut iqs = Vec::new();
    for i in 0..10 {
        iqs.push(Pull::node("news").max(i).iq());
        iqs.push(xml(&format!(r#"<iq type="get" to="{COMPONENT}"><ping xmlns="urn:xmpp:ping"/></iq>"#)));
        iqs.push(Pull::node("news?sort=x").iq());
        iqs.push(xml(&format!(r#"<iq type="get" to="{COMPONENT}"><query xmlns="{DISCO_INFO}"/></iq>"#)));
        iqs.push(publish_iq("news", Some("nope"), &news_entry("x", "x")));
    }
    let n = iqs.len();
    let replies = iq_all(&mut alice, iqs).await;
    assert_eq!(replies.len(), n);
    for (i, r) in replies.iter().enumerate() {
        let want = if matches!(i % 5, 2 | 4) { "error" } else { "result" };
        assert_eq!(stanza_type(r), want, "request {i}: {}", to_xml(r));
        assert_eq!(r.attr("from"), Some(COMPONENT));
    }
    tokio::time::sleep(SHORT).await;
    let extra: Vec<String> = alice.drain().iter().filter(|s| s.name() == "iq").map(to_xml).collect();
    assert!(extra.is_empty(), "no second reply to any request: {extra:?}");
}
