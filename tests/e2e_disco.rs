//! End to end, service discovery (SPEC §7, XEP-0030): a real XMPP server (Prosody or
//! ejabberd, see `crates/testkit/src/server/select.rs`) and the real
//! `smartfeeds` binary with configured feeds, shared by the tests of this file (only the
//! meta-data test publishes, to a configured feed, so the list of feeds is fixed).

use std::collections::{BTreeSet, HashMap};

use minidom::Element;
use testkit::fixture::{Fixture, Shared};
use testkit::pubsub::*;
use testkit::push::subscribe_iq;
use testkit::server::COMPONENT_DOMAIN as COMPONENT;
use testkit::{Client, stanza_type, to_xml, xml};

const TABLES: &str = r#"
[[feeds]]
name = "alpha"
title = "Alpha"
description = "The first feed"
publishers = ["bot@localhost"]

[[feeds]]
name = "beta"
title = "Beta"

[[feeds]]
name = "gamma"
title = "Gamma"

[[feeds]]
name = "delta"
title = "Delta"

[[feeds]]
name = "epsilon"
title = "Epsilon"

[[feeds]]
name = "hidden"
title = "Hidden"
access = "whitelist"
allowed = ["bob@localhost"]
"#;
/// `pubsub#type` of a node of Atom entries (XEP-0472).
const SOCIAL_FEED: &str = "urn:xmpp:pubsub-social-feed:1";
const COMMANDS: &str = "http://jabber.org/protocol/commands";
const OPEN_FEEDS: [&str; 5] = ["alpha", "beta", "delta", "epsilon", "gamma"];

static FIXTURE: Shared<Fixture> = Shared::new();

fn fixture() -> &'static Fixture {
    FIXTURE.get_or_start(|| Fixture::start(TABLES))
}

async fn login(name: &str) -> Client {
    fixture().server.login(name).await
}

fn info_iq(node: Option<&str>) -> Element {
    let node = node.map(|n| format!(r#" node="{}""#, esc(n))).unwrap_or_default();
    xml(&format!(r#"<iq type="get" to="{COMPONENT}"><query xmlns="{DISCO_INFO}"{node}/></iq>"#))
}

/// The `<query/>` of a disco result, after checking the envelope.
#[track_caller]
fn query<'a>(reply: &'a Element, ns: &str) -> &'a Element {
    let raw = to_xml(reply);
    assert_eq!(stanza_type(reply), "result", "{raw}");
    assert_eq!(reply.attr("from"), Some(COMPONENT), "{raw}");
    reply.get_child("query", ns).unwrap_or_else(|| panic!("no <query xmlns={ns}/> in {raw}"))
}

fn features(q: &Element) -> BTreeSet<String> {
    q.children().filter(|c| c.is("feature", DISCO_INFO)).filter_map(|f| f.attr("var")).map(String::from).collect()
}

fn identities(q: &Element) -> Vec<(String, String)> {
    q.children()
        .filter(|c| c.is("identity", DISCO_INFO))
        .map(|i| (i.attr("category").unwrap_or("").to_string(), i.attr("type").unwrap_or("").to_string()))
        .collect()
}

/// The fields of the data form with this FORM_TYPE: var -> values.
fn form(q: &Element, form_type: &str) -> Option<HashMap<String, Vec<String>>> {
    q.children().filter(|c| c.is("x", DATA_FORMS)).find_map(|x| {
        let fields: HashMap<String, Vec<String>> = x
            .children()
            .filter(|f| f.is("field", DATA_FORMS))
            .filter_map(|f| {
                let values = f.children().filter(|v| v.is("value", DATA_FORMS)).map(|v| v.text()).collect();
                f.attr("var").map(|var| (var.to_string(), values))
            })
            .collect();
        (fields.get("FORM_TYPE") == Some(&vec![form_type.to_string()])).then_some(fields)
    })
}

#[tokio::test]
async fn the_component_is_a_pubsub_service_with_rsm_and_shim() {
    let mut alice = login("alice").await;
    let reply = alice.iq(info_iq(None)).await;
    let q = query(&reply, DISCO_INFO);
    assert!(identities(q).contains(&("pubsub".into(), "service".into())), "{}", to_xml(&reply));
    let got = features(q);
    // Every feature the service implements, and only those.
    let mut want: BTreeSet<String> = [
        DISCO_INFO,
        DISCO_ITEMS,
        PUBSUB,
        RSM,
        SHIM,
        "urn:xmpp:ping",
        COMMANDS,
        // MAM on every view, ordered by XEP-0413 (both versions; 0.2 says where it applies).
        "urn:xmpp:mam:2",
        "urn:xmpp:order-by:0",
        "urn:xmpp:order-by:1",
        "urn:xmpp:order-by:1@urn:xmpp:mam:2",
        "urn:xmpp:order-by:1@http://jabber.org/protocol/pubsub",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    for f in [
        "retrieve-items",
        "item-ids",
        "rsm",
        "subscribe",
        "retrieve-subscriptions",
        "publish",
        "retract-items",
        "persistent-items",
        "meta-data",
        "access-open",
        "access-whitelist",
    ] {
        want.insert(format!("{PUBSUB}#{f}"));
    }
    assert_eq!(got, want, "{}", to_xml(&reply));

    // XEP-0131 §3.2: the headers it sends, on the SHIM node.
    let reply = alice.iq(info_iq(Some(SHIM))).await;
    let q = query(&reply, DISCO_INFO);
    assert_eq!(q.attr("node"), Some(SHIM), "the reply names the node: {}", to_xml(&reply));
    let got = features(q);
    for header in ["TotalItems", "PreviousCursor", "LastCursor"] {
        assert!(got.contains(&format!("{SHIM}#{header}")), "{header}: {}", to_xml(&reply));
    }
}

#[tokio::test]
async fn every_view_is_a_leaf_node_with_meta_data() {
    let mut alice = login("alice").await;
    for node in ["alpha", "alpha?order=modified", "alpha?author=someone&order=-created", "alpha?category=x"] {
        let reply = alice.iq(info_iq(Some(node))).await;
        let q = query(&reply, DISCO_INFO);
        let raw = to_xml(&reply);
        assert_eq!(q.attr("node"), Some(node), "the reply names the node as asked: {raw}");
        assert!(identities(q).contains(&("pubsub".into(), "leaf".into())), "{raw}");
        let meta = form(q, &format!("{PUBSUB}#meta-data")).unwrap_or_else(|| panic!("a meta-data form: {raw}"));
        assert_eq!(meta.get("pubsub#title"), Some(&vec!["Alpha".to_string()]), "{raw}");
        assert_eq!(meta.get("pubsub#description"), Some(&vec!["The first feed".to_string()]), "{raw}");
        assert_eq!(meta.get("pubsub#type"), Some(&vec![SOCIAL_FEED.to_string()]), "{raw}");
        assert_eq!(meta.get("pubsub#access_model"), Some(&vec!["open".to_string()]), "{raw}");
    }
    // Another feed has its own title.
    let reply = alice.iq(info_iq(Some("gamma"))).await;
    let meta = form(query(&reply, DISCO_INFO), &format!("{PUBSUB}#meta-data")).expect("form");
    assert_eq!(meta.get("pubsub#title"), Some(&vec!["Gamma".to_string()]), "{}", to_xml(&reply));

    // A node that names no view.
    for (node, names) in [("no-such-feed", "no-such-feed"), ("alpha?sort=x", "sort"), ("alpha?order=up", "order")] {
        let reply = alice.iq(info_iq(Some(node))).await;
        let text = assert_error(&reply, "item-not-found", None);
        assert!(text.contains(names), "the text for {node} names {names:?}: {text}");
    }
}

/// The values Movim reads from a node's form: a creation date once the feed has an item,
/// each view's own subscribers, the access model of a whitelist feed.
#[tokio::test]
async fn meta_data_counts_subscribers_per_view_and_dates_the_first_item() {
    let mut bot = login("bot").await;
    let mut alice = login("alice").await;
    let meta = |reply: &Element| form(query(reply, DISCO_INFO), &format!("{PUBSUB}#meta-data")).expect("form");
    let one = |s: &str| vec![s.to_string()];

    let before = now_ms();
    publish(&mut bot, "alpha", "meta-1", &entry("urn:meta-1", "Meta", None, &["meta"])).await;
    let view = "alpha?category=meta";
    let jid = alice.jid().to_string();
    let reply = alice.iq(subscribe_iq(view, &jid)).await;
    assert_eq!(stanza_type(&reply), "result", "{}", to_xml(&reply));

    let reply = alice.iq(info_iq(Some(view))).await;
    let raw = to_xml(&reply);
    let m = meta(&reply);
    assert_eq!(m.get("pubsub#num_subscribers"), Some(&one("1")), "the view's own subscriber: {raw}");
    assert_eq!(m.get("pubsub#num_items"), Some(&one("1")), "{raw}");
    let created = m.get("pubsub#creation_date").and_then(|v| parse_rfc3339(&v[0]));
    let created = created.unwrap_or_else(|| panic!("a creation date: {raw}"));
    // The feed's first item: this test's, published just now.
    assert!(created <= now_ms() && created >= before - 1000, "creation date {created}: {raw}");

    // The whole feed is another node, with its own subscribers (none) and the same date.
    let reply = alice.iq(info_iq(Some("alpha"))).await;
    let m = meta(&reply);
    assert_eq!(m.get("pubsub#num_subscribers"), Some(&one("0")), "{}", to_xml(&reply));
    assert_eq!(m.get("pubsub#creation_date").and_then(|v| parse_rfc3339(&v[0])), Some(created), "{}", to_xml(&reply));

    // A feed without items has no creation date yet; a whitelist feed says so.
    let mut bob = login("bob").await;
    let reply = bob.iq(info_iq(Some("hidden"))).await;
    let m = meta(&reply);
    assert_eq!(m.get("pubsub#access_model"), Some(&one("whitelist")), "{}", to_xml(&reply));
    assert_eq!(m.get("pubsub#creation_date"), None, "{}", to_xml(&reply));
}

/// The feeds of a disco#items reply, after checking every item is ours.
#[track_caller]
fn listed(reply: &Element) -> Vec<String> {
    let q = query(reply, DISCO_ITEMS);
    q.children()
        .filter(|c| c.is("item", DISCO_ITEMS))
        .map(|i| {
            assert_eq!(i.attr("jid"), Some(COMPONENT), "items are nodes of the component: {}", to_xml(reply));
            i.attr("node").unwrap_or_else(|| panic!("an item names its feed: {}", to_xml(reply))).to_string()
        })
        .collect()
}

fn items_iq(set: &str) -> Element {
    xml(&format!(r#"<iq type="get" to="{COMPONENT}"><query xmlns="{DISCO_ITEMS}">{set}</query></iq>"#))
}

#[tokio::test]
async fn the_component_lists_the_feeds_each_user_may_read() {
    for (user, extra) in [("alice", None), ("bob", Some("hidden"))] {
        let mut client = login(user).await;
        let mut want: BTreeSet<String> = OPEN_FEEDS.iter().map(|s| s.to_string()).collect();
        want.extend(extra.map(String::from));

        let reply = client.iq(items_iq("")).await;
        let all = listed(&reply);
        assert_eq!(all.len(), want.len(), "one item per feed for {user}: {all:?}");
        assert_eq!(all.iter().cloned().collect::<BTreeSet<_>>(), want, "{user}");

        // Paged with RSM: two at a time, after the previous page's <last>.
        let mut seen = Vec::new();
        let mut set = format!(r#"<set xmlns="{RSM}"><max>2</max></set>"#);
        for _ in 0..10 {
            let reply = client.iq(items_iq(&set)).await;
            let page = listed(&reply);
            assert!(page.len() <= 2, "max is respected: {}", to_xml(&reply));
            if page.is_empty() {
                break;
            }
            seen.extend(page);
            let last = reply
                .get_child("query", DISCO_ITEMS)
                .and_then(|q| q.get_child("set", RSM))
                .and_then(|s| s.get_child("last", RSM))
                .map(|l| l.text())
                .unwrap_or_else(|| panic!("a page has an RSM <last>: {}", to_xml(&reply)));
            set = format!(r#"<set xmlns="{RSM}"><max>2</max><after>{}</after></set>"#, esc(&last));
        }
        assert_eq!(seen.len(), want.len(), "every feed once for {user}: {seen:?}");
        assert_eq!(seen.into_iter().collect::<BTreeSet<_>>(), want, "{user}");
    }
}
