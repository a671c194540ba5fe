//! End to end, the WebSub hub (SPEC §10): the real binary, real callback servers (each a
//! small HTTP server on a free loopback port, `crates/testkit/src/websub.rs`), a real XMPP server
//! beside it for the tests that cross faces. First the hub against the W3C WebSub
//! recommendation's checklist for hubs, a test per point, each quoting the sentence it
//! checks; then verification accepted and refused, delivered documents (Atom, cursors),
//! order through failures, 410, leases, isolation from a callback that never answers,
//! private-address refusal, a SIGKILL between commit and delivery, and the
//! `PreviousCursor` / `fo:prev_cursor` chains of both faces agreeing.

use hmac::{Hmac, Mac};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use testkit::adhoc::{command, field, values};
use testkit::http::{ALICE, BOT, EVE, HttpFixture, http_table, put_entry};
use testkit::process::{Process, free_port};
use testkit::pubsub::{entry, publish_iq, retract_iq};
use testkit::push::{next_push, subscribe as xmpp_subscribe};
use testkit::smartfeeds::{bin, bot_feeds, closed_feed};
use testkit::websub::*;
use testkit::{Client, Shared};

/// Hub settings for tests: private callbacks allowed (they are on loopback), short leases
/// and retries.
const HUB: &str = r#"
[hub]
allow_private_callbacks = true
min_lease = 1
retry_initial = 0.2
retry_max = 0.5
max_attempts = 3
timeout = 2.0
"#;

static SHARED: Shared<HttpFixture> = Shared::new();

fn shared() -> &'static HttpFixture {
    SHARED.get_or_start(|| {
        HttpFixture::start(|port| {
            let http = http_table(port, "", &["bot", "alice", "eve"]);
            let closed = closed_feed("closed", &["alice@localhost"]);
            let feeds = [
                "verify", "requests", "content", "order", "gone", "lease", "slow", "cross", "admin", "redirect",
                "accepted", "leased", "body", "links", "selfs",
            ];
            format!("{http}{HUB}{closed}{}", bot_feeds(&feeds))
        })
    })
}

fn hub() -> String {
    format!("{}/hub", shared().base)
}

fn topic(feed_and_query: &str) -> String {
    format!("{}/feeds/{feed_and_query}", shared().base)
}

/// PUTs an entry over HTTP as the bot; returns the item's cursor in the modified order.
async fn put(base: &str, feed: &str, id: &str) -> String {
    let entry = entry(&format!("urn:{id}"), &format!("title {id}"), None, &[]);
    let res = put_entry(&reqwest::Client::new(), base, feed, id, BOT, &entry).await.expect("PUT");
    assert_eq!(res.status(), 200, "PUT {feed}/{id}");
    let doc: serde_json::Value = res.json().await.expect("JSON");
    doc["cursor"].as_str().expect("a cursor").to_string()
}

/// Nothing more is accepted by `cb` for `wait`.
async fn assert_quiet(cb: &Callback, wait: Duration, context: &str) {
    let before = cb.posts().len();
    tokio::time::sleep(wait).await;
    let posts = cb.posts();
    assert_eq!(posts.len(), before, "{context}: unexpected POST {:?}", posts.last().map(|p| &p.body));
}

// ----- the WebSub recommendation (W3C, 23 January 2018), its checklist for hubs -----

#[tokio::test]
async fn websub_a_subscription_request_is_answered_202_accepted() {
    // §5.1.1: "If the hub URL supports WebSub and is able to handle the subscription or
    // unsubscription request, it MUST respond to a subscription request with an HTTP
    // [RFC7231] 202 "Accepted" response to indicate that the request was received and will
    // now be verified (Section 5.3) and validated (Section 5.2) by the hub."
    shared();
    let (cb, t) = (Callback::start().await, topic("accepted/"));
    for mode in ["subscribe", "unsubscribe"] {
        let fields = [("hub.mode", mode), ("hub.topic", t.as_str()), ("hub.callback", cb.url.as_str())];
        assert_eq!(request(&hub(), &fields, None).await.0, 202, "{mode}");
    }
    // Received, then verified: each request is followed by its verification of intent.
    let modes: Vec<String> = cb.wait_verifications(2).await.iter().map(|v| v["hub.mode"].clone()).collect();
    assert!(modes.contains(&"subscribe".to_string()) && modes.contains(&"unsubscribe".to_string()), "{modes:?}");
}

#[tokio::test]
async fn websub_the_verification_of_a_subscription_carries_hub_lease_seconds() {
    // §5.3: "hub.lease_seconds REQUIRED/OPTIONAL. The hub-determined number of seconds that
    // the subscription will stay active before expiring [...] Hubs MUST supply this parameter
    // when hub.mode is set to "subscribe"."
    shared();
    let (asked, unasked) = (Callback::start().await, Callback::start().await);
    let t = topic("leased/");
    subscribed(&hub(), &t, &asked, &[("hub.lease_seconds", "7200")]).await;
    subscribed(&hub(), &t, &unasked, &[]).await;
    assert_eq!(asked.verifications()[0].get("hub.lease_seconds").map(String::as_str), Some("7200"), "as asked");
    assert_eq!(unasked.verifications()[0].get("hub.lease_seconds").map(String::as_str), Some("864000"), "10 days");
}

#[tokio::test]
async fn websub_a_distribution_is_the_topics_content_with_its_content_type() {
    // §7: "The content distribution request MUST have a Content-Type Header corresponding to
    // the Content-Type of the topic, and MUST contain the full contents of the topic URL,
    // with an exception allowed as described below." (The exception: §6, "Hubs MUST deliver
    // the full contents of the topic URL in the request, and MAY reduce the payload to a diff
    // if the content type supports it": later deliveries carry the changed entries only.)
    // The topic here is the view's Atom URL, and its first change the whole view.
    let sh = shared();
    let cb = Callback::start().await;
    let (view, t) = (topic("body/?order=modified"), topic("body/?order=modified&format=atom"));
    subscribed(&hub(), &t, &cb, &[]).await;
    put(&sh.base, "body", "b1").await;
    let d = cb.wait_deliveries(1).await.remove(0);
    let res = reqwest::get(&t).await.expect("GET the topic");
    assert_eq!(res.status(), 200);
    let ctype = res.headers().get("content-type").and_then(|v| v.to_str().ok()).map(str::to_string);
    assert_eq!(d.header("content-type"), ctype, "the topic's Content-Type");
    // The same document, but that a delivery names the topic as subscribed to where a pull
    // names the view, and is no page, so has no `next` link.
    let pulled = res.text().await.unwrap();
    let next = pulled.find(r#"<link rel="next""#).expect("a page has a next link");
    let pulled = format!("{}{}", &pulled[..next], &pulled[next + pulled[next..].find("/>").unwrap() + 2..]);
    let named = t.replace('&', "&amp;");
    let pulled =
        pulled.replace(&format!("{view}<"), &format!("{named}<")).replace(&format!("{view}\""), &format!("{named}\""));
    assert_eq!(d.body, pulled, "the topic's content");
}

#[tokio::test]
async fn websub_a_distribution_links_the_hub_and_the_topic() {
    // §7: "The request MUST include at least one Link Header [RFC5988] with rel=hub pointing
    // to a Hub associated with the topic being updated. It MUST also include one Link Header
    // [RFC5988] with rel=self set to the canonical URL of the topic being updated. The Hub
    // SHOULD combine these headers into a single Link Header [RFC5988]."
    let sh = shared();
    let cb = Callback::start().await;
    let t = topic("links/?order=modified");
    subscribed(&hub(), &t, &cb, &[]).await;
    put(&sh.base, "links", "l1").await;
    let d = cb.wait_deliveries(1).await.remove(0);
    let links: Vec<&str> = d.headers.get_all("link").iter().map(|v| v.to_str().unwrap()).collect();
    assert_eq!(links, [format!("<{}>; rel=\"hub\", <{t}>; rel=\"self\"", hub())], "one Link header");
}

/// Whether `header` is `METHOD=HEX`, the HMAC of `body` under `secret` with `method`, checked
/// as a subscriber would (constant time).
fn signed(method: &str, secret: &str, body: &[u8], header: &str) -> bool {
    fn check<M: Mac + hmac::digest::KeyInit>(secret: &str, body: &[u8], sig: &[u8]) -> bool {
        let mut mac = <M as hmac::digest::KeyInit>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(body);
        mac.verify_slice(sig).is_ok()
    }
    let Some(hex) = header.strip_prefix(method).and_then(|h| h.strip_prefix('=')) else { return false };
    let sig: Vec<u8> =
        (0..hex.len()).step_by(2).filter_map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok()).collect();
    match method {
        "sha1" => check::<Hmac<sha1::Sha1>>(secret, body, &sig),
        "sha256" => check::<Hmac<sha2::Sha256>>(secret, body, &sig),
        "sha384" => check::<Hmac<sha2::Sha384>>(secret, body, &sig),
        "sha512" => check::<Hmac<sha2::Sha512>>(secret, body, &sig),
        _ => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websub_each_signature_method_signs_the_body_with_the_secret() {
    // §7.1: "If the subscriber supplied a value for hub.secret in their subscription request,
    // the hub MUST generate an HMAC signature of the payload and include that signature in
    // the request headers of the content distribution request. The X-Hub-Signature header's
    // value MUST be in the form method=signature where method is one of the recognized
    // algorithm names and signature is the hexadecimal representation of the signature. The
    // signature MUST be computed using the HMAC algorithm [RFC6151] with the request body as
    // the data and the hub.secret as the key." §7.1.1 recognizes sha1, sha256, sha384, sha512.
    for method in ["sha1", "sha256", "sha384", "sha512"] {
        let alone = tokio::task::block_in_place(|| Alone::start(&format!("{HUB}signature = \"{method}\"\n")));
        let (hub, t) = (format!("{}/hub", alone.base), format!("{}/feeds/f/", alone.base));
        let (with, without) = (Callback::start().await, Callback::start().await);
        subscribed(&hub, &t, &with, &[("hub.secret", "the shared secret")]).await;
        subscribed(&hub, &t, &without, &[]).await;
        put(&alone.base, "f", "s1").await;
        let d = with.wait_deliveries(1).await.remove(0);
        let sig = d.header("x-hub-signature").unwrap_or_else(|| panic!("{method}: signed"));
        assert!(signed(method, "the shared secret", d.body.as_bytes(), &sig), "{method}: {sig}");
        assert!(!signed(method, "another secret", d.body.as_bytes(), &sig), "{method}: the secret is the key");
        let d = without.wait_deliveries(1).await.remove(0);
        assert_eq!(d.header("x-hub-signature"), None, "{method}: no secret, no signature");
    }
}

// ----- the hub's own behaviour -----

#[tokio::test]
async fn only_an_exact_echo_of_a_fresh_challenge_subscribes_or_unsubscribes() {
    let sh = shared();
    let t = topic("verify/?order=modified");
    let ok = Callback::start().await;
    subscribed(&hub(), &t, &ok, &[]).await;
    let v = &ok.verifications()[0];
    assert_eq!(v.get("hub.mode").map(String::as_str), Some("subscribe"));
    assert_eq!(v.get("hub.topic"), Some(&t));
    assert_eq!(v.get("k").map(String::as_str), Some("v"), "the callback's own query is kept");
    assert!(v.get("hub.challenge").is_some_and(|c| c.len() >= 32), "{v:?}");
    // Refused: a wrong echo, a 404.
    let wrong = Callback::start().await;
    wrong.set_verify(Verify::WrongEcho);
    let missing = Callback::start().await;
    missing.set_verify(Verify::NotFound);
    for cb in [&wrong, &missing] {
        subscribed(&hub(), &t, cb, &[]).await;
    }
    put(&sh.base, "verify", "v1").await;
    assert_eq!(entry_ids(&ok.wait_deliveries(1).await), ["v1"]);
    assert_quiet(&wrong, Duration::from_millis(500), "a wrong echo does not subscribe").await;
    assert!(missing.posts().is_empty() && wrong.posts().is_empty(), "refused callbacks get nothing");
    // An unsubscription the callback does not confirm changes nothing...
    ok.set_verify(Verify::WrongEcho);
    let fields = [("hub.mode", "unsubscribe"), ("hub.topic", t.as_str()), ("hub.callback", ok.url.as_str())];
    assert_eq!(request(&hub(), &fields, None).await.0, 202);
    let vs = ok.wait_verifications(2).await;
    assert_eq!(vs[1].get("hub.mode").map(String::as_str), Some("unsubscribe"));
    assert!(!vs[1].contains_key("hub.lease_seconds"));
    assert_ne!(vs[0]["hub.challenge"], vs[1]["hub.challenge"], "every challenge is fresh");
    tokio::time::sleep(Duration::from_millis(300)).await;
    put(&sh.base, "verify", "v2").await;
    assert_eq!(entry_ids(&ok.wait_deliveries(2).await), ["v1", "v2"]);
    // ...one it confirms ends the subscription.
    ok.set_verify(Verify::Echo);
    assert_eq!(request(&hub(), &fields, None).await.0, 202);
    ok.wait_verifications(3).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    put(&sh.base, "verify", "v3").await;
    assert_quiet(&ok, Duration::from_millis(800), "after a verified unsubscribe").await;
}

/// A request form: `hub.*` names and their values.
type Fields = Vec<(&'static str, String)>;

#[tokio::test]
async fn bad_subscription_requests_get_a_clear_4xx() {
    shared();
    let cb = Callback::start().await;
    let t = topic("requests/");
    let sub = |topic: String, callback: String| {
        vec![("hub.mode", "subscribe".to_string()), ("hub.topic", topic), ("hub.callback", callback)]
    };
    let send = |fields: Fields, token: Option<&'static str>| async move {
        let f: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
        request(&hub(), &f, token).await
    };
    let cases: Vec<(Fields, u16, &str)> = vec![
        (vec![("hub.topic", t.clone()), ("hub.callback", cb.url.clone())], 400, "hub.mode"),
        ([sub(t.clone(), cb.url.clone()), vec![("hub.mode", "x".into())]].concat(), 400, "more than once"),
        (
            vec![("hub.mode", "resubscribe".into()), ("hub.topic", t.clone()), ("hub.callback", cb.url.clone())],
            400,
            "hub.mode",
        ),
        // A publisher's ping (SPEC §13) naming no configured source.
        (
            vec![("hub.mode", "publish".into()), ("hub.topic", t.clone()), ("hub.callback", cb.url.clone())],
            404,
            "no configured source",
        ),
        (sub("http://elsewhere.example/feeds/requests/".into(), cb.url.clone()), 400, "not a feed URL"),
        (sub(topic("requests/?since=cursor%3A1_0_1"), cb.url.clone()), 400, "since"),
        (sub(topic("requests/?order=sideways"), cb.url.clone()), 400, "order"),
        (sub(topic("requests/?format=json"), cb.url.clone()), 400, "atom"),
        (sub(topic("nosuchfeed/"), cb.url.clone()), 404, "nosuchfeed"),
        (sub(t.clone(), "ftp://127.0.0.1/cb".into()), 400, "http"),
        (sub(t.clone(), "not a url".into()), 400, "hub.callback"),
        (sub(t.clone(), String::new()), 400, "hub.callback"),
        ([sub(t.clone(), cb.url.clone()), vec![("hub.secret", "s".repeat(200))]].concat(), 400, "hub.secret"),
        ([sub(t.clone(), cb.url.clone()), vec![("hub.lease_seconds", "soon".into())]].concat(), 400, "lease"),
        (sub(topic("closed/"), cb.url.clone()), 401, "token"),
    ];
    for (fields, status, needle) in cases {
        let (got, body) = send(fields.clone(), None).await;
        assert_eq!(got, status, "{fields:?}: {body}");
        assert!(body.contains(needle), "{body:?} should mention {needle:?}");
        let json: serde_json::Value = serde_json::from_str(&body).expect("a JSON error");
        assert!(json["error"].is_string(), "{json}");
    }
    // A whitelist feed: a JID that is not allowed is 403, an allowed one subscribes.
    assert_eq!(send(sub(topic("closed/"), cb.url.clone()), Some(EVE)).await.0, 403);
    assert_eq!(send(sub(topic("closed/"), cb.url.clone()), Some(ALICE)).await.0, 202);
    // Not a form.
    let res = reqwest::Client::new().post(hub()).header("content-type", "application/json").body("{}").send().await;
    assert_eq!(res.unwrap().status(), 415);
    // The seed's per-feed hub is the same hub; `hub.verify` is accepted (and ignored).
    let per_feed = format!("{}/feeds/requests/hub/", shared().base);
    let fields = [
        ("hub.mode", "subscribe"),
        ("hub.topic", t.as_str()),
        ("hub.callback", cb.url.as_str()),
        ("hub.verify", "sync"),
    ];
    assert_eq!(request(&per_feed, &fields, None).await.0, 202);
    cb.wait_verifications(2).await;
}

#[tokio::test]
async fn deliveries_are_atom_documents_with_chained_cursors() {
    let sh = shared();
    let cb = Callback::start().await;
    let t = topic("content/?order=modified");
    subscribed(&hub(), &t, &cb, &[]).await;
    let c1 = put(&sh.base, "content", "a").await;
    let d1 = cb.wait_deliveries(1).await.remove(0);
    let c2 = put(&sh.base, "content", "b").await;
    let d2 = cb.wait_deliveries(2).await.remove(1);
    let res = reqwest::Client::new().delete(format!("{}/feeds/content/items/a", sh.base)).bearer_auth(BOT).send().await;
    assert_eq!(res.unwrap().status(), 204);
    let d3 = cb.wait_deliveries(3).await.remove(2);
    for d in [&d1, &d2, &d3] {
        // A real Atom parser reads it.
        let feed = feed_rs::parser::parse(d.body.as_bytes()).expect("an Atom document");
        assert_eq!(feed.entries.len() + d.body.matches("<at:deleted-entry").count(), 1);
        assert!(d.body.contains(&format!(
            r#"<link rel="self" type="application/atom+xml" href="{}"/>"#,
            t.replace('&', "&amp;")
        )));
    }
    assert_eq!(tag(&d1.body, "fo:last_cursor"), Some(c1.clone()));
    assert_eq!(tag(&d1.body, "fo:total").as_deref(), Some("1"));
    assert_eq!(tag(&d1.body, "fo:prev_cursor"), None, "the view was empty");
    assert!(d1.body.contains("<title>title a</title>"), "the entry as published: {}", d1.body);
    assert_eq!(tag(&d2.body, "fo:prev_cursor"), Some(c1), "chained to the previous document");
    assert_eq!(tag(&d2.body, "fo:last_cursor"), Some(c2.clone()));
    assert_eq!(tag(&d2.body, "fo:total").as_deref(), Some("2"));
    assert_eq!(tag(&d3.body, "fo:prev_cursor"), Some(c2));
    assert!(d3.body.contains("<at:deleted-entry ref=\"urn:a\""), "a retraction is a tombstone: {}", d3.body);
}

#[tokio::test]
async fn order_is_kept_while_a_callback_fails_twice() {
    let sh = shared();
    let cb = Callback::start().await;
    subscribed(&hub(), &topic("order/"), &cb, &[]).await;
    cb.answer(&[500, 503]);
    for id in ["o1", "o2", "o3", "o4"] {
        put(&sh.base, "order", id).await;
    }
    let docs = cb.wait_ids(&["o1", "o2", "o3", "o4"]).await;
    assert_eq!(entry_ids(&docs), ["o1", "o2", "o3", "o4"], "each once, in commit order");
    let posts = cb.posts();
    assert_eq!(posts[0].status, 500);
    assert_eq!(posts[1].status, 503);
    assert_eq!(posts[0].body, posts[2].body, "the failed document itself is tried again");
    assert!(posts[1].at - posts[0].at >= Duration::from_millis(150), "after a backoff");
    // The chain has no gap: each document starts where the one before ended.
    for w in docs.windows(2) {
        assert_eq!(tag(&w[1].body, "fo:prev_cursor"), tag(&w[0].body, "fo:last_cursor"));
    }
    // A document that keeps failing is dropped after max_attempts; delivery moves on and
    // the subscriber sees the gap.
    cb.answer(&[500, 500, 500]);
    put(&sh.base, "order", "lost").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    put(&sh.base, "order", "next").await;
    let docs = cb.wait_ids(&["o1", "o2", "o3", "o4", "next"]).await;
    let last = docs.last().unwrap();
    assert_eq!(tags(&last.body, "fo:id"), ["next"]);
    assert_ne!(tag(&last.body, "fo:prev_cursor"), tag(&docs[docs.len() - 2].body, "fo:last_cursor"), "a visible gap");
}

#[tokio::test]
async fn gone_ends_the_subscription() {
    let sh = shared();
    let cb = Callback::start().await;
    subscribed(&hub(), &topic("gone/"), &cb, &[]).await;
    cb.answer(&[410]);
    put(&sh.base, "gone", "g1").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(cb.posts().len(), 1);
    put(&sh.base, "gone", "g2").await;
    assert_quiet(&cb, Duration::from_millis(800), "after 410 Gone").await;
}

#[tokio::test]
async fn a_redirect_or_a_4xx_drops_the_document_without_retrying() {
    let sh = shared();
    let cb = Callback::start().await;
    subscribed(&hub(), &topic("redirect/"), &cb, &[]).await;
    cb.answer(&[301, 400]);
    for (n, id) in ["r1", "r2", "r3"].into_iter().enumerate() {
        put(&sh.base, "redirect", id).await;
        // One document each: the next change is made once this one was answered.
        let deadline = Instant::now() + Duration::from_secs(5);
        while cb.posts().len() <= n {
            assert!(Instant::now() < deadline, "{id} was delivered");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let docs = cb.wait_ids(&["r3"]).await;
    assert_eq!(entry_ids(&docs), ["r3"]);
    let statuses: Vec<u16> = cb.posts().iter().map(|p| p.status).collect();
    assert_eq!(statuses, [301, 400, 200], "each refused document was sent once, never followed or retried");
}

#[tokio::test]
async fn an_expired_lease_gets_nothing_and_subscribing_again_renews() {
    let sh = shared();
    let (short, renewed) = (Callback::start().await, Callback::start().await);
    let t = topic("lease/");
    subscribed(&hub(), &t, &short, &[("hub.lease_seconds", "1")]).await;
    assert_eq!(short.verifications()[0].get("hub.lease_seconds").map(String::as_str), Some("1"));
    subscribed(&hub(), &t, &renewed, &[("hub.lease_seconds", "1")]).await;
    subscribed(&hub(), &t, &renewed, &[("hub.lease_seconds", "3600")]).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    put(&sh.base, "lease", "l1").await;
    assert_eq!(entry_ids(&renewed.wait_deliveries(1).await), ["l1"]);
    assert_quiet(&short, Duration::from_millis(500), "an expired lease").await;
}

#[tokio::test]
async fn a_callback_that_never_answers_delays_nobody_else() {
    let sh = shared();
    let (stuck, fast) = (Callback::start().await, Callback::start().await);
    stuck.hang(true);
    let t = topic("slow/");
    subscribed(&hub(), &t, &stuck, &[]).await;
    subscribed(&hub(), &t, &fast, &[]).await;
    for i in 0..5 {
        let id = format!("s{i}");
        let started = Instant::now();
        put(&sh.base, "slow", &id).await;
        assert!(started.elapsed() < Duration::from_secs(1), "a publish does not wait for callbacks");
        let docs = fast.wait_ids(&vec!["x"; i + 1]).await;
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "s{i} reached the fast callback in {:?}",
            started.elapsed()
        );
        assert_eq!(entry_ids(&docs).last(), Some(&id));
        // A pull is not held up either.
        let pulled = Instant::now();
        let res = reqwest::get(format!("{}/feeds/slow/?timeout=0", sh.base)).await.unwrap();
        assert_eq!(res.status(), 200);
        assert!(pulled.elapsed() < Duration::from_secs(1));
    }
    assert!(!stuck.posts().is_empty(), "the stuck callback was tried");
    assert!(stuck.accepted().is_empty());
}

#[tokio::test]
async fn a_publish_over_xmpp_reaches_websub_with_the_same_cursor_chain() {
    let sh = shared();
    let cb = Callback::start().await;
    let node = "cross?order=modified";
    subscribed(&hub(), &topic("cross/?order=modified"), &cb, &[]).await;
    let mut alice: Client = sh.fx.server.login("alice").await;
    let me = alice.bare_jid().to_string();
    xmpp_subscribe(&mut alice, node, &me).await;
    let mut bot = sh.fx.server.login("bot").await;
    for id in ["x1", "x2"] {
        let reply = bot.iq(publish_iq("cross", Some(id), &entry(&format!("urn:{id}"), id, None, &[]))).await;
        assert_eq!(testkit::stanza_type(&reply), "result");
    }
    let reply = bot.iq(retract_iq("cross", "x1")).await;
    assert_eq!(testkit::stanza_type(&reply), "result");
    let mut pushes = Vec::new();
    for _ in 0..3 {
        pushes.push(next_push(&mut alice, Duration::from_secs(5)).await);
    }
    let docs = cb.wait_ids(&["x1", "x2", "x1"]).await;
    assert_eq!(entry_ids(&docs), ["x1", "x2", "x1"]);
    let cursors: Vec<String> = docs.iter().flat_map(|d| tags(&d.body, "fo:cursor")).collect();
    let lasts: Vec<String> = pushes.iter().map(|p| p.last_cursor().to_string()).collect();
    assert_eq!(cursors, lasts, "the same cursors on both faces");
    assert_eq!(pushes[0].previous, None);
    assert_eq!(tag(&docs[0].body, "fo:prev_cursor"), None);
    let push_at = |cursor: &str| pushes.iter().find(|p| p.last_cursor() == cursor).expect("a push with that cursor");
    for d in &docs {
        // A document starts where the XMPP push of its first change starts, and ends with
        // the count of its last.
        let cursors = tags(&d.body, "fo:cursor");
        assert_eq!(tag(&d.body, "fo:prev_cursor"), push_at(&cursors[0]).previous);
        let last = push_at(cursors.last().unwrap());
        assert_eq!(tag(&d.body, "fo:last_cursor").as_deref(), Some(last.last_cursor()));
        assert_eq!(tag(&d.body, "fo:total"), last.total.map(|t| t.to_string()));
    }
    alice.close().await;
    bot.close().await;
}

#[tokio::test]
async fn admins_see_websub_subscriptions_in_list_feeds_and_subscribers() {
    let sh = shared();
    let cb = Callback::start().await;
    let t = topic("admin/?order=modified");
    subscribed(&hub(), &t, &cb, &[]).await;
    let mut admin = sh.fx.server.login("admin").await;
    let r = admin.iq(command("list-feeds", None)).await;
    assert!(values(&r, "feeds").contains(&"admin: 0 items, 1 subscriptions".to_string()), "{}", testkit::to_xml(&r));
    let r = admin.iq(command("subscribers", Some(&field("feed", "admin")))).await;
    assert_eq!(values(&r, "subscriptions"), [format!("{} {t}", cb.url)]);
    admin.close().await;
}

// ----- a process of its own: default hub settings, a backlog limit, a crash -----

/// smartfeeds with `[http]` and no XMPP server (the link keeps retrying; HTTP serves).
struct Alone {
    dir: tempfile::TempDir,
    base: String,
    metrics: String,
    process: Option<Process>,
}

impl Alone {
    fn start(hub: &str) -> Alone {
        let dir = tempfile::tempdir().unwrap();
        let (port, metrics) = (free_port(), free_port());
        let config = format!(
            "[component]\njid = \"feeds.localhost\"\nsecret = \"s\"\nserver = \"127.0.0.1:1\"\n\
             [store]\npath = \"{}\"\n[metrics]\nlisten = \"127.0.0.1:{metrics}\"\n\
             {}{hub}\n{}",
            dir.path().join("feeds.db").display(),
            http_table(port, "", &["bot"]),
            bot_feeds(&["f"])
        );
        std::fs::write(dir.path().join("c.toml"), config).unwrap();
        let mut alone = Alone {
            dir,
            base: format!("http://127.0.0.1:{port}"),
            metrics: format!("http://127.0.0.1:{metrics}/metrics"),
            process: None,
        };
        alone.spawn();
        alone
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("smartfeeds.log")
    }

    fn spawn(&mut self) {
        let mut cmd = std::process::Command::new(bin());
        cmd.arg("--config").arg(self.dir.path().join("c.toml")).env("RUST_LOG", "info");
        self.process = Some(Process::spawn(cmd, &self.log()).unwrap());
        let deadline = Instant::now() + Duration::from_secs(15);
        let health = format!("{}/health", self.base);
        while std::net::TcpStream::connect(health.trim_start_matches("http://").trim_end_matches("/health")).is_err() {
            let log = std::fs::read_to_string(self.log()).unwrap_or_default();
            assert!(Instant::now() < deadline, "smartfeeds did not listen:\n{log}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill(&mut self) {
        if let Some(p) = self.process.take() {
            p.kill();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_callbacks_are_refused_with_the_default_config() {
    let alone = Alone::start("");
    let t = format!("{}/feeds/f/", alone.base);
    for callback in ["http://127.0.0.1:9/cb", "http://localhost:9/cb", "http://10.0.0.1/cb", "http://[::1]:9/cb"] {
        let fields = [("hub.mode", "subscribe"), ("hub.topic", t.as_str()), ("hub.callback", callback)];
        let (status, body) = request(&format!("{}/hub", alone.base), &fields, None).await;
        assert_eq!(status, 400, "{callback}: {body}");
        assert!(body.contains("private"), "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_past_its_limit_drops_its_oldest_changes_and_shows_the_gap() {
    let alone = Alone::start(
        "[hub]\nallow_private_callbacks = true\nmax_backlog = 3\nmax_attempts = 100\n\
         retry_initial = 0.1\nretry_max = 0.2\ntimeout = 1.0\n",
    );
    let (hub, t) = (format!("{}/hub", alone.base), format!("{}/feeds/f/", alone.base));
    let cb = Callback::start().await;
    subscribed(&hub, &t, &cb, &[]).await;
    // The callback holds every POST: b1 is on its way, b2..b10 wait in the outbox.
    cb.hang(true);
    put(&alone.base, "f", "b1").await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while cb.posts().is_empty() {
        assert!(Instant::now() < deadline, "the b1 delivery was attempted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut cursors = Vec::new();
    for i in 2..=10 {
        cursors.push(put(&alone.base, "f", &format!("b{i}")).await);
    }
    // Housekeeping (every 5 s) keeps the newest 3 of the view's waiting changes.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let metrics = reqwest::get(&alone.metrics).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("smartfeeds_hub_queue_depth 3"), "{metrics}");
    cb.hang(false);
    let docs = cb.wait_ids(&["b1", "b8", "b9", "b10"]).await;
    assert_eq!(entry_ids(&docs), ["b1", "b8", "b9", "b10"], "the oldest waiting changes were dropped");
    let after_b1 = docs.iter().find(|d| tags(&d.body, "fo:id")[0] == "b8").unwrap();
    assert_eq!(tag(&after_b1.body, "fo:prev_cursor").as_ref(), Some(&cursors[5]), "b7's cursor: the gap shows");
    assert_ne!(tag(&after_b1.body, "fo:prev_cursor"), tag(&docs[0].body, "fo:last_cursor"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_between_commit_and_delivery_loses_no_document() {
    let mut alone = Alone::start(HUB);
    let (hub, t) = (format!("{}/hub", alone.base), format!("{}/feeds/f/", alone.base));
    let cb = Callback::start().await;
    subscribed(&hub, &t, &cb, &[("hub.secret", "crash-secret-xyz")]).await;
    put(&alone.base, "f", "k0").await;
    assert_eq!(entry_ids(&cb.wait_deliveries(1).await), ["k0"]);
    // Progress is saved within a few tens of ms; a crash before that would send k0 again
    // (at least once), which this test is not about.
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The callback now holds every POST: k1 is committed and on its way, k2 queued.
    cb.hang(true);
    put(&alone.base, "f", "k1").await;
    put(&alone.base, "f", "k2").await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while cb.posts().len() < 2 {
        assert!(Instant::now() < deadline, "the k1 delivery was attempted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::task::block_in_place(|| alone.kill());
    cb.hang(false);
    tokio::task::block_in_place(|| alone.spawn());
    let docs = cb.wait_ids(&["k0", "k1", "k2"]).await;
    assert_eq!(entry_ids(&docs), ["k0", "k1", "k2"], "everything committed, once, in order");
    for w in docs.windows(2) {
        assert_eq!(tag(&w[1].body, "fo:prev_cursor"), tag(&w[0].body, "fo:last_cursor"), "no gap");
    }
    let metrics = reqwest::get(&alone.metrics).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("smartfeeds_hub_subscriptions 1"), "{metrics}");
    assert!(metrics.contains("smartfeeds_hub_deliveries_total{outcome=\"delivered\"}"), "{metrics}");
    let log = std::fs::read_to_string(alone.log()).unwrap();
    assert!(!log.contains("crash-secret-xyz"), "the secret is never logged");
    alone.kill();
}

/// Every document that advertises the hub (`Link: rel=hub`) names as `rel=self` a topic the
/// hub accepts, archive documents included (whose `self` is the archive, as RFC 5005
/// wants): a follower that reads the history through `archive/` subscribes with it and gets
/// the feed's new entries pushed.
#[tokio::test]
async fn every_document_advertising_the_hub_names_a_self_the_hub_accepts() {
    let base = &shared().base;
    put(base, "selfs", "s1").await;
    let client = reqwest::Client::new();
    for (path, accept) in [
        ("/feeds/selfs/", "application/json"),
        ("/feeds/selfs/?order=modified", "application/atom+xml"),
        ("/feeds/selfs/archive/", "application/atom+xml"),
        ("/feeds/selfs/archive/", "application/feed+json"),
    ] {
        let res = client.get(format!("{base}{path}")).header("accept", accept).send().await.expect("GET");
        assert_eq!(res.status(), 200, "{path}");
        let link = res.headers().get("link").and_then(|l| l.to_str().ok()).unwrap_or_default().to_string();
        let rel = |name: &str| {
            link.split(',')
                .find(|l| l.contains(&format!("rel=\"{name}\"")))
                .and_then(|l| l.trim().strip_prefix('<')?.split_once('>').map(|(u, _)| u.to_string()))
                .unwrap_or_else(|| panic!("{path} ({accept}): no rel={name} in {link:?}"))
        };
        let (hub, self_url) = (rel("hub"), rel("self"));
        let cb = Callback::start().await;
        subscribed(&hub, &self_url, &cb, &[]).await;
        let id = format!("after-{}", cb.url.len() + path.len() + accept.len());
        put(base, "selfs", &id).await;
        let docs = cb.wait_ids(&[id.as_str()]).await;
        assert!(docs.iter().any(|d| d.body.contains(&format!("urn:{id}"))), "{path} ({accept}): {docs:?}");
    }
}
