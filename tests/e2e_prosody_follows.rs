//! End to end, Prosody's own WebSub subscriber follows a feed through our hub: a private
//! Prosody with `mod_pubsub_feeds` (Debian `prosody-modules`) on its pubsub service
//! `follower.localhost`, whose node `ours` follows a smartfeeds view. Prosody fetches the
//! view once, finds our hub in it, subscribes with a secret of its own, and from then on
//! takes each change as our hub pushes it, checking its `X-Hub-Signature` with SHA-1 only
//! (hence `[hub] signature = "sha1"`; with `sha256` it refuses every delivery). What a user
//! checks: Prosody's node, read over XMPP.

use std::time::{Duration, Instant};
use testkit::http::{BOT, put_entry};
use testkit::pubsub::{ATOM, PUBSUB, esc, now_ms, rfc3339};
use testkit::server::prosody::FOLLOWER;
use testkit::smartfeeds::{metric, scrape_metrics};
use testkit::standalone::Standalone;
use testkit::{Client, Prosody, TestServer, stanza_type, to_xml, xml};

/// How long Prosody may take to show a change.
const WITHIN: Duration = Duration::from_secs(10);

/// An Atom entry `urn:ID` titled `title`, updated `updated` (RFC 3339).
fn entry(id: &str, title: &str, updated: &str) -> String {
    format!(
        r#"<entry xmlns="{ATOM}"><id>urn:{id}</id><title>{}</title><updated>{updated}</updated></entry>"#,
        esc(title)
    )
}

/// PUTs the entry `id` of the feed `f`.
async fn put(base: &str, id: &str, title: &str, updated: &str) {
    let res = put_entry(&reqwest::Client::new(), base, "f", id, BOT, &entry(id, title, updated)).await.expect("PUT");
    assert_eq!(res.status(), 200, "PUT f/{id}");
}

/// The items of Prosody's node `ours`: (item id, entry title), or the error's text.
async fn node_items(client: &mut Client) -> Result<Vec<(String, String)>, String> {
    let iq =
        xml(&format!(r#"<iq type="get" to="{FOLLOWER}"><pubsub xmlns="{PUBSUB}"><items node="ours"/></pubsub></iq>"#));
    let reply = client.iq(iq).await;
    if stanza_type(&reply) != "result" {
        return Err(to_xml(&reply));
    }
    let items = reply.get_child("pubsub", PUBSUB).and_then(|p| p.get_child("items", PUBSUB)).ok_or(to_xml(&reply))?;
    Ok(items
        .children()
        .filter(|i| i.is("item", PUBSUB))
        .map(|i| {
            let title = i.get_child("entry", ATOM).and_then(|e| e.get_child("title", ATOM)).map(|t| t.text());
            (i.attr("id").unwrap_or_default().to_string(), title.unwrap_or_default())
        })
        .collect())
}

/// Waits until Prosody's node holds `item` (id and title); panics with the node and the
/// logs after [`WITHIN`].
async fn wait_for(client: &mut Client, item: (&str, &str), context: &str, logs: impl Fn() -> String) {
    let deadline = Instant::now() + WITHIN;
    loop {
        let items = node_items(client).await;
        if items.as_ref().is_ok_and(|items| items.iter().any(|(id, t)| (id.as_str(), t.as_str()) == item)) {
            return;
        }
        assert!(Instant::now() < deadline, "{context}: Prosody's node has {items:?}, not {item:?}\n{}", logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A sample of smartfeeds' metrics (0 when absent).
fn counter(metrics: u16, name: &str) -> u64 {
    metric(&scrape_metrics(metrics), name).unwrap_or(0.0) as u64
}

/// Waits until our hub has made `n` deliveries Prosody took (2xx).
async fn delivered(metrics: u16, n: u64, logs: impl Fn() -> String) {
    let deadline = Instant::now() + WITHIN;
    while counter(metrics, DELIVERED) < n {
        assert!(Instant::now() < deadline, "{n} deliveries were not taken\n{}", logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

const DELIVERED: &str = r#"smartfeeds_hub_deliveries_total{outcome="delivered"}"#;
const REJECTED: &str = r#"smartfeeds_hub_deliveries_total{outcome="rejected"}"#;

/// mod_pubsub_feeds takes an entry only if its `<updated>` is after its last fetch or
/// delivery, in whole seconds: an entry written now is dated once the second has turned.
async fn now_next_second() -> String {
    tokio::time::sleep(Duration::from_millis(1100)).await;
    rfc3339(now_ms())
}

/// smartfeeds with the feed `f` (entries `a` and `b`) and a hub signing with `signature`,
/// then a Prosody whose node `ours` follows the view `f?order=modified` by its Atom URL;
/// and the port of smartfeeds' metrics.
async fn follow(signature: &str) -> (Standalone, TestServer<Prosody>, u16) {
    let tables = format!("[hub]\nallow_private_callbacks = true\nsignature = \"{signature}\"\n");
    let (sf, metrics) = tokio::task::block_in_place(|| Standalone::start_with_metrics("", &["f"], &tables));
    put(&sf.base, "a", "first", "2024-01-01T00:00:00Z").await;
    put(&sf.base, "b", "second", "2024-01-02T00:00:00Z").await;
    let atom = format!("{}/feeds/f/?order=modified&format=atom", sf.base);
    let prosody = tokio::task::block_in_place(|| {
        TestServer::<Prosody>::start_with(|dir| Prosody::following(dir, &[("ours", atom.as_str())]))
    });
    (sf, prosody, metrics)
}

/// What each side logged, and smartfeeds' metrics, for a failure's message.
fn logs(sf: &Standalone, prosody: &TestServer<Prosody>, metrics: u16) -> String {
    let prosody_log = std::fs::read_to_string(prosody.log_path()).unwrap_or_default();
    format!("--- metrics:\n{}\n--- smartfeeds:\n{}\n--- Prosody:\n{prosody_log}", scrape_metrics(metrics), sf.log())
}

/// Waits until Prosody has subscribed at our hub and our hub verified its intent.
async fn subscribed(metrics: u16, logs: impl Fn() -> String) {
    let deadline = Instant::now() + WITHIN;
    while counter(metrics, "smartfeeds_hub_subscriptions") < 1 {
        assert!(Instant::now() < deadline, "Prosody did not subscribe at our hub\n{}", logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prosody_follows_a_view_through_our_hub() {
    let (sf, prosody, metrics) = follow("sha1").await;
    let logs = || logs(&sf, &prosody, metrics);
    let mut alice = prosody.login("alice").await;
    // The first fetch: what the view holds.
    wait_for(&mut alice, ("urn:a", "first"), "the first fetch", logs).await;
    wait_for(&mut alice, ("urn:b", "second"), "the first fetch", logs).await;
    subscribed(metrics, logs).await;
    // A new publish arrives within seconds: pushed, as Prosody fetches nothing for 600 minutes.
    let started = Instant::now();
    put(&sf.base, "c", "third", &now_next_second().await).await;
    wait_for(&mut alice, ("urn:c", "third"), "a new publish", logs).await;
    assert!(started.elapsed() < Duration::from_secs(5), "pushed in {:?}", started.elapsed());
    delivered(metrics, 1, logs).await;
    // A changed entry is pushed too, and Prosody takes the document (it answers 401 to a
    // signature it does not accept, which the hub counts as rejected).
    put(&sf.base, "a", "first, changed", &now_next_second().await).await;
    delivered(metrics, 2, logs).await;
    assert_eq!(counter(metrics, REJECTED), 0, "Prosody refused no delivery\n{}", logs());
    // mod_pubsub_feeds publishes only the entries whose id its node does not have yet
    // (`if not items[id]`), so it keeps the first version of a changed entry: the node holds
    // each of our entries once, by its Atom id.
    let mut items = node_items(&mut alice).await.expect("the node's items");
    items.sort();
    let expected = [("urn:a", "first"), ("urn:b", "second"), ("urn:c", "third")];
    assert_eq!(items, expected.map(|(i, t)| (i.to_string(), t.to_string())), "{}", logs());
    alice.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prosody_refuses_what_our_hub_signs_with_sha256() {
    // Why `[hub] signature = "sha1"` for Prosody: it subscribes with a secret and checks
    // `sha1=` only, so it refuses (401) a document signed with SHA-256 and never shows it.
    let (sf, prosody, metrics) = follow("sha256").await;
    let logs = || logs(&sf, &prosody, metrics);
    let mut alice = prosody.login("alice").await;
    wait_for(&mut alice, ("urn:b", "second"), "the first fetch", logs).await;
    subscribed(metrics, logs).await;
    put(&sf.base, "c", "third", &now_next_second().await).await;
    let deadline = Instant::now() + WITHIN;
    while counter(metrics, REJECTED) < 1 {
        assert!(Instant::now() < deadline, "Prosody did not refuse the document\n{}", logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let items = node_items(&mut alice).await.expect("the node's items");
    assert!(!items.iter().any(|(id, _)| id == "urn:c"), "{items:?}");
    alice.close().await;
}
