//! Malformed and hostile stanzas, end to end (SPEC §3, §4, §6, §7 "every iq get/set gets
//! exactly one reply"; RFC 6120 §8.2.3, §8.3), against a real Prosody and the real
//! `smartfeeds`. Each case gets its error reply, or is ignored where RFC 6120 says so, and
//! afterwards the process is still running and a normal pull still works.
//!
//! Prosody stands in front of the component and answers some stanzas itself or cuts the
//! client's stream; each case asserts what the client ends up seeing and says which layer
//! answered:
//!
//! - Prosody 0.12 c2s: an iq with a type other than get/set/result/error, without `id`, or a
//!   get/set without exactly one child is answered by Prosody (`bad-request`, texts "Invalid
//!   IQ type", "Missing required 'id' attribute", "Incorrect number of children for IQ
//!   stanza") and never reaches the component;
//! - stanzas over `c2s_stanza_size_limit` (256 KiB, checked after each 64 KiB read, so
//!   enforced from 320 KiB) make Prosody close the client's stream with
//!   `<policy-violation/>` + `<stanza-too-big xmlns="urn:xmpp:errors"/>`;
//! - everything else reaches the component, which answers as asserted.
//!
//! Some cases need bytes minidom will not build or write (a stanza without an id, 10,000
//! levels of nesting), so this file has a raw c2s client of its own, [`Raw`]: plain TCP,
//! SASL PLAIN, bind, then text in and text out.

use std::time::{Duration, Instant};

use minidom::Element;
use testkit::fixture::{Fixture, Shared};
use testkit::pubsub::*;
use testkit::push::{subscribe_iq, unsubscribe_iq};
use testkit::server::COMPONENT_DOMAIN as COMPONENT;
use testkit::xml::{NS_STANZAS, base64};
use testkit::{Client, error_condition, stanza_type, to_xml, xml};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MAX_PAYLOAD: usize = 200_000;
const MAX_IDS: usize = 500;
/// Prosody 0.12's default `c2s_stanza_size_limit`.
const PROSODY_C2S_LIMIT: usize = 256 * 1024;
/// Prosody checks that limit after each read (`network_default_read_size`, 64 KiB in
/// prosody/prosody.cfg.lua), so a stanza gets past it by up to one read.
const PROSODY_READ: usize = 64 * 1024;

const TABLES: &str = r#"
[limits]
max_payload_bytes = 200000
max_ids = 500
max_page = 100

[[feeds]]
name = "h"
publishers = ["bot@localhost"]
"#;

static FIXTURE: Shared<Fixture> = Shared::new();

/// The shared server and smartfeeds, with a few items in `h`.
fn fixture() -> &'static Fixture {
    FIXTURE.get_or_start(|| {
        let fx = Fixture::start(TABLES);
        block_on_thread(seed(&fx));
        fx
    })
}

/// Five items in `h`, `h0` to `h4`, one after the other.
async fn seed(fx: &Fixture) {
    let mut bot = fx.server.login("bot").await;
    for i in 0..5 {
        let id = format!("h{i}");
        publish(&mut bot, "h", &id, &entry(&format!("urn:{id}"), &id, Some("Ann"), &["c"])).await;
    }
}

/// The smartfeeds process of the shared fixture is still running and serving.
async fn still_serving(case: &str) {
    serving(fixture(), case).await.unwrap_or_else(|e| panic!("{e}"));
}

/// Whether the smartfeeds process is running (not exited, not a zombie).
fn running(fx: &Fixture) -> bool {
    let Some(pid) = fx.feeds.pid() else { return false };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next());
    matches!(state, Some(s) if s != 'Z' && s != 'X')
}

/// The process is still running and a normal pull from a fresh client works.
async fn serving(fx: &Fixture, case: &str) -> Result<(), String> {
    if !running(fx) {
        return Err(format!("after {case}: smartfeeds is no longer running\n{}", fx.feeds.log_tail(10)));
    }
    let mut alice = fx.server.login("alice").await;
    let reply = alice.try_iq(Pull::node("h?order=created").iq(), Duration::from_secs(10)).await?;
    if stanza_type(&reply) != "result" {
        return Err(format!("after {case}: a normal pull fails: {}", to_xml(&reply)));
    }
    let page = parse_page(&reply);
    if !page.ids().starts_with(&["h0".to_string(), "h1".to_string()]) {
        return Err(format!("after {case}: {}", page.raw));
    }
    Ok(())
}

/// A raw c2s session: what goes out is text, what comes in is kept as text.
struct Raw {
    tcp: TcpStream,
    inbox: Vec<u8>,
    /// Set when the server closed the connection.
    eof: bool,
}

impl Raw {
    /// Logs `name@localhost` in on `fx`'s Prosody: stream, SASL PLAIN, stream restart, bind.
    async fn login(fx: &Fixture, name: &str) -> Raw {
        let tcp = TcpStream::connect(("127.0.0.1", fx.server.c2s_port())).await.expect("connect");
        tcp.set_nodelay(true).expect("nodelay");
        let mut raw = Raw { tcp, inbox: Vec::new(), eof: false };
        let header = "<?xml version='1.0'?><stream:stream to='localhost' xmlns='jabber:client' \
                      xmlns:stream='http://etherx.jabber.org/streams' version='1.0'>";
        raw.send(header).await;
        raw.read_until("</stream:features>").await;
        let auth = base64(format!("\0{name}\0{}", fx.server.password(name)).as_bytes());
        raw.send(&format!("<auth xmlns='urn:ietf:params:xml:ns:xmpp-sasl' mechanism='PLAIN'>{auth}</auth>")).await;
        raw.read_until("<success").await;
        raw.inbox.clear();
        raw.send(header).await;
        raw.read_until("</stream:features>").await;
        raw.send("<iq type='set' id='bind'><bind xmlns='urn:ietf:params:xml:ns:xmpp-bind'/></iq>").await;
        raw.read_until("</iq>").await;
        raw.inbox.clear();
        raw
    }

    async fn send(&mut self, text: &str) {
        self.tcp.write_all(text.as_bytes()).await.expect("write to Prosody");
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.inbox).into_owned()
    }

    /// Reads until `needle` has arrived; panics after 10 s.
    async fn read_until(&mut self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.text().contains(needle) {
            assert!(self.fill(deadline).await, "no {needle:?} from Prosody; got {:?}", self.text());
        }
    }

    /// One read; false on timeout or EOF.
    async fn fill(&mut self, deadline: Instant) -> bool {
        let mut buf = vec![0u8; 1 << 16];
        match tokio::time::timeout_at(deadline.into(), self.tcp.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                self.eof = true;
                false
            }
            Ok(Ok(n)) => {
                self.inbox.extend_from_slice(&buf[..n]);
                true
            }
            Err(_) => false,
        }
    }

    /// The text of the `<iq>` with this id, once it arrived (within `wait`).
    async fn reply(&mut self, id: &str, wait: Duration) -> Option<String> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(stanza) = find_iq(&self.text(), id) {
                return Some(stanza);
            }
            if self.eof || !self.fill(deadline).await {
                return find_iq(&self.text(), id);
            }
        }
    }

    /// Reads until the server closes the connection (within 10 s); returns everything read.
    async fn until_closed(&mut self) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.eof {
            if !self.fill(deadline).await && !self.eof {
                panic!("Prosody did not close the stream; got {:?}", self.text());
            }
        }
        self.text()
    }
}

/// The `<iq …id='ID'…>…</iq>` (or self-closed) in `text`.
fn find_iq(text: &str, id: &str) -> Option<String> {
    let at = [format!("id='{id}'"), format!("id=\"{id}\"")].iter().find_map(|p| text.find(p.as_str()))?;
    let start = text[..at].rfind("<iq")?;
    let open_end = start + text[start..].find('>')?;
    if text[..open_end].ends_with('/') {
        return Some(text[start..=open_end].to_string());
    }
    let close = open_end + text[open_end..].find("</iq>")?;
    Some(text[start..close + "</iq>".len()].to_string())
}

#[track_caller]
fn prosody_error(reply: &Element, condition: &str, text: &str) {
    let raw = to_xml(reply);
    assert_eq!(stanza_type(reply), "error", "{raw}");
    assert_eq!(error_condition(reply).as_deref(), Some(condition), "{raw}");
    assert_eq!(error_text(reply).as_deref(), Some(text), "Prosody's own text says Prosody answered: {raw}");
}

/// Waits `wait` and returns every stanza that arrived meanwhile from the component.
async fn from_component(client: &mut Client, wait: Duration) -> Vec<Element> {
    tokio::time::sleep(wait).await;
    client.drain().into_iter().filter(|s| s.attr("from") == Some(COMPONENT)).collect()
}

#[tokio::test]
async fn unknown_payloads_and_wrong_iq_types() {
    let fx = fixture();
    let mut alice = fx.server.login("alice").await;
    let to = format!(r#"to="{COMPONENT}""#);

    // The component: an unknown payload in a get or a set is service-unavailable.
    for t in ["get", "set"] {
        let reply = alice.iq(xml(&format!(r#"<iq type="{t}" {to}><query xmlns="urn:example:nothing"/></iq>"#))).await;
        assert_error(&reply, "service-unavailable", None);
        let reply =
            alice.iq(xml(&format!(r#"<iq type="{t}" {to}><ping xmlns="urn:example:nothing"><x/></ping></iq>"#))).await;
        assert_error(&reply, "service-unavailable", None);
    }
    // A get-only payload in a set, and the pubsub#owner namespace: the component.
    let reply = alice.iq(xml(&format!(r#"<iq type="set" {to}><query xmlns="{DISCO_INFO}"/></iq>"#))).await;
    assert_error(&reply, "service-unavailable", None);
    // Pubsub requests under the wrong iq type, or unknown ones: bad-request.
    let items_in_a_set = format!(r#"<iq type="set" {to}><pubsub xmlns="{PUBSUB}"><items node="h"/></pubsub></iq>"#);
    let publish_in_a_get = format!(
        r#"<iq type="get" {to}><pubsub xmlns="{PUBSUB}"><publish node="h"><item id="x">{}</item></publish></pubsub></iq>"#,
        entry("urn:x", "x", None, &[])
    );
    let unknown_op = format!(r#"<iq type="get" {to}><pubsub xmlns="{PUBSUB}"><frobnicate node="h"/></pubsub></iq>"#);
    let empty_pubsub = format!(r#"<iq type="set" {to}><pubsub xmlns="{PUBSUB}"/></iq>"#);
    for iq in [items_in_a_set, publish_in_a_get, unknown_op, empty_pubsub] {
        let reply = alice.iq(xml(&iq)).await;
        assert_error(&reply, "bad-request", None);
    }
    // Purge and delete: feature-not-implemented (SPEC §6).
    for op in ["purge", "delete"] {
        let reply = alice
            .iq(xml(&format!(
                r#"<iq type="set" {to}><pubsub xmlns="http://jabber.org/protocol/pubsub#owner"><{op} node="h"/></pubsub></iq>"#
            )))
            .await;
        assert_error(&reply, "feature-not-implemented", Some("unsupported"));
    }

    // Prosody: an iq type that does not exist, no child, two children.
    let reply = alice.iq(xml(&format!(r#"<iq type="fetch" {to}><ping xmlns="urn:xmpp:ping"/></iq>"#))).await;
    prosody_error(&reply, "bad-request", "Invalid IQ type");
    let reply = alice.iq(xml(&format!(r#"<iq type="get" {to}/>"#))).await;
    prosody_error(&reply, "bad-request", "Incorrect number of children for IQ stanza");
    let reply = alice
        .iq(xml(&format!(r#"<iq type="get" {to}><ping xmlns="urn:xmpp:ping"/><query xmlns="{DISCO_INFO}"/></iq>"#)))
        .await;
    prosody_error(&reply, "bad-request", "Incorrect number of children for IQ stanza");
    // Prosody: no id.
    let mut raw = Raw::login(fixture(), "alice").await;
    raw.send(&format!("<iq type='get' to='{COMPONENT}'><ping xmlns='urn:xmpp:ping'/></iq>")).await;
    raw.read_until("Missing required").await;
    assert!(raw.text().contains("bad-request"), "{}", raw.text());
    still_serving("unknown payloads and wrong iq types").await;
}

#[tokio::test]
async fn pubsub_requests_missing_their_attributes() {
    let fx = fixture();
    let mut alice = fx.server.login("alice").await;
    let mut bot = fx.server.login("bot").await;
    let jid = alice.bare_jid().to_string();
    let ps = |body: &str, t: &str| {
        xml(&format!(r#"<iq type="{t}" to="{COMPONENT}"><pubsub xmlns="{PUBSUB}">{body}</pubsub></iq>"#))
    };

    // No node: bad-request; subscribe, unsubscribe and retract also say nodeid-required.
    assert_error(&alice.iq(ps("<items/>", "get")).await, "bad-request", None);
    let e = entry("urn:nonode", "x", None, &[]);
    assert_error(
        &bot.iq(ps(&format!("<publish><item id='nn'>{e}</item></publish>"), "set")).await,
        "bad-request",
        None,
    );
    for op in [format!(r#"<subscribe jid="{jid}"/>"#), format!(r#"<unsubscribe jid="{jid}"/>"#)] {
        assert_error(&alice.iq(ps(&op, "set")).await, "bad-request", Some("nodeid-required"));
    }
    assert_error(
        &bot.iq(ps(r#"<retract><item id="h0"/></retract>"#, "set")).await,
        "bad-request",
        Some("nodeid-required"),
    );
    // No jid on (un)subscribe: bad-request + invalid-jid.
    for op in [r#"<subscribe node="h"/>"#, r#"<unsubscribe node="h"/>"#] {
        assert_error(&alice.iq(ps(op, "set")).await, "bad-request", Some("invalid-jid"));
    }
    // No item, or an item without id, on retract: bad-request + item-required.
    for body in [r#"<retract node="h"/>"#, r#"<retract node="h"><item/></retract>"#] {
        assert_error(&bot.iq(ps(body, "set")).await, "bad-request", Some("item-required"));
    }
    // An <item/> without id in an items request, or an empty node name.
    assert_error(&alice.iq(ps(r#"<items node="h"><item/></items>"#, "get")).await, "bad-request", None);
    assert_error(&alice.iq(ps(r#"<items node=""/>"#, "get")).await, "item-not-found", None);
    // Publish with an empty id or none at all: bad-request, or a generated id.
    assert_error(&bot.iq(publish_iq("h", Some(""), &e)).await, "bad-request", None);
    // Nothing of that was stored.
    let page = pull(&mut alice, &Pull::node("h").ids(&["nn", ""])).await;
    assert!(page.items.is_empty(), "{}", page.raw);
    still_serving("pubsub requests missing attributes").await;
}

/// Checks a reply's text.
type Check = fn(&str) -> Result<(), String>;

/// One hostile case for a fixture of its own: what is sent, and what must come back.
struct Case {
    what: &'static str,
    who: &'static str,
    /// The stanza, with `id='case'` if an iq.
    stanza: String,
    /// `Some(check)`: an iq reply must come, and pass the check; `None`: nothing comes back.
    expect: Option<Check>,
}

/// Runs the cases one by one against `fx`: each must get its reply (or none), leave the
/// process running and serving, and not drop the component's link to Prosody. After a
/// failure the process is restarted, so the later cases still run. Returns the failures.
async fn run_cases(fx: &mut Fixture, cases: Vec<Case>) -> Vec<String> {
    const DROPPED: &str = "lost the server connection";
    let mut failures = Vec::new();
    for case in cases {
        let drops_before = std::fs::read_to_string(fx.feeds.log_path()).unwrap_or_default().matches(DROPPED).count();
        let mut raw = Raw::login(fx, case.who).await;
        raw.send(&case.stanza).await;
        let reply = raw.reply("case", Duration::from_secs(10)).await;
        let head = |s: &str| s.chars().take(500).collect::<String>();
        let outcome = match (&case.expect, &reply) {
            (Some(check), Some(r)) => check(r).map_err(|e| format!("wrong reply: {e}: {}", head(r))),
            (Some(_), None) => Err(format!(
                "no reply within 10 s (client stream {})",
                if raw.eof { "closed by Prosody" } else { "open" }
            )),
            (None, Some(r)) => Err(format!("a reply to something that needs none: {}", head(r))),
            (None, None) => Ok(()),
        };
        eprintln!("{}: {}", case.what, reply.as_deref().map(head).unwrap_or_else(|| "(no reply)".into()));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let log = plain(&std::fs::read_to_string(fx.feeds.log_path()).unwrap_or_default());
        let dropped = log.matches(DROPPED).count() > drops_before;
        let alive = running(fx);
        let mut problems: Vec<String> = outcome.err().into_iter().collect();
        if !alive {
            let why = log.lines().rev().find(|l| l.contains("overflow") || l.contains("panicked")).unwrap_or("");
            problems.push(format!("the smartfeeds process died ({why})"));
        } else if dropped {
            let line = log.lines().rev().find(|l| l.contains(DROPPED)).unwrap_or("");
            problems.push(format!("the component dropped its link to Prosody: {line}"));
        }
        if alive && let Err(e) = serving(fx, case.what).await {
            problems.push(e);
        }
        if !problems.is_empty() {
            failures.push(format!("{} (sent by {}): {}", case.what, case.who, problems.join("; ")));
        }
        if !alive {
            fx.feeds.restart();
        }
        serving(fx, case.what).await.unwrap_or_else(|e| panic!("{e}"));
    }
    failures
}

/// Text without ANSI colour codes (the log is written for a terminal).
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn is_error(reply: &str, condition: &str) -> Result<(), String> {
    let el = xml(reply);
    if el.attr("from") != Some(COMPONENT) {
        return Err("not from the component".into());
    }
    match error_condition(&el) {
        Some(c) if c == condition => Ok(()),
        other => Err(format!("expected {condition}, got {other:?}")),
    }
}

fn is_empty_result(reply: &str) -> Result<(), String> {
    let el = xml(reply);
    let page = parse_page(&el);
    if page.items.is_empty() { Ok(()) } else { Err("items".into()) }
}

#[tokio::test]
async fn thousands_of_item_ids() {
    let fx = fixture();
    let mut alice = fx.server.login("alice").await;
    // Under max_ids: served, unknown ids left out.
    let mut ids: Vec<String> = (0..MAX_IDS - 2).map(|i| format!("missing-{i}")).collect();
    ids.extend(["h1".to_string(), "h3".to_string()]);
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let page = pull(&mut alice, &Pull::node("h").ids(&refs)).await;
    let mut got = page.ids();
    got.sort();
    assert_eq!(got, ["h1", "h3"], "{}", page.raw.len());
    // Thousands: policy-violation.
    for n in [MAX_IDS + 1, 5000] {
        let ids: Vec<String> = (0..n).map(|i| format!("i{i}")).collect();
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let reply = alice.iq(Pull::node("h").ids(&refs).iq()).await;
        assert_error(&reply, "policy-violation", None);
    }
    // The same id thousands of times is as many ids.
    let same = vec!["h1"; 3000];
    let reply = alice.iq(Pull::node("h").ids(&same).iq()).await;
    assert_error(&reply, "policy-violation", None);
    still_serving("thousands of item ids").await;
}

#[tokio::test]
async fn rsm_numbers_out_of_range() {
    let fx = fixture();
    let mut alice = fx.server.login("alice").await;
    let node = "h?order=created";
    // 2^63 and u64::MAX - 1 as max: clamped, the whole (5-item) feed. The lexical forms
    // xs:int allows ("+3", "007") are numbers too.
    for (max, n) in [("9223372036854775808", 5), ("18446744073709551614", 5), ("+3", 3), ("007", 5)] {
        let page = pull(&mut alice, &Pull::node(node).max(max)).await;
        assert!(page.items.len() == n && page.count == Some(5), "max={max}: {}", page.raw);
    }
    // Not a usize: bad-request from the component.
    for max in ["18446744073709551616", "-1", "abc", "", " 5", "1e3", "99999999999999999999999"] {
        let reply = alice.iq(Pull::node(node).max(max).iq()).await;
        assert_error(&reply, "bad-request", None);
    }
    for index in ["-1", "abc", "18446744073709551616", ""] {
        let reply = alice.iq(Pull::node(node).index(index).iq()).await;
        assert_error(&reply, "bad-request", None);
    }
    // An index past the end, even 2^63: an empty page with the count.
    for index in ["5", "9223372036854775808"] {
        let page = pull(&mut alice, &Pull::node(node).index(index)).await;
        assert!(page.items.is_empty(), "index={index}: {}", page.raw);
        assert_eq!(page.count, Some(5), "index={index}: {}", page.raw);
    }
    for max_items in ["-1", "abc", "18446744073709551616"] {
        let reply = alice.iq(Pull::node(node).max_items(max_items).iq()).await;
        assert_error(&reply, "bad-request", None);
    }
    let page = pull(&mut alice, &Pull::node(node).max_items("18446744073709551615")).await;
    assert_eq!(page.items.len(), 5, "{}", page.raw);
    still_serving("RSM numbers out of range").await;
}

#[tokio::test]
async fn malformed_positions_and_node_names() {
    let fx = fixture();
    let mut alice = fx.server.login("alice").await;
    let me = alice.jid().to_string();
    for pos in [
        "cursor:",
        "cursor:1_2",
        "cursor:a_b_c",
        "cursor:99999999999999999999_0_0",
        "cursor:1_99999999999999999999_0",
        "cursor:1_0_99999999999",
        "time:yesterday",
        "time:2024-13-45T99:00:00Z",
        "nonsense",
        "unknown:x",
        "id:",
    ] {
        let reply = alice.iq(Pull::node("h").after(pos).iq()).await;
        assert_error(&reply, "bad-request", None);
        let reply = alice.iq(Pull::node("h").before(pos).iq()).await;
        assert_error(&reply, "bad-request", None);
    }
    let reply = alice.iq(Pull::node("h").after("id:no-such-item").iq()).await;
    assert_error(&reply, "item-not-found", None);

    // Percent-encoded bytes that are not UTF-8, and other bad node names: item-not-found.
    for node in ["h?author=%FF", "h?category=%C3%28", "h%FF", "h?order=%00created", "h?=x", "h?&", "?"] {
        let reply = alice.iq(Pull::node(node).iq()).await;
        let text = assert_error(&reply, "item-not-found", None);
        assert!(text.len() < 1000, "{text}");
        let reply = alice.iq(subscribe_iq(node, &me)).await;
        assert_error(&reply, "item-not-found", None);
        let reply = alice
            .iq(xml(&format!(
                r#"<iq type="get" to="{COMPONENT}"><query xmlns="{DISCO_INFO}" node="{}"/></iq>"#,
                esc(node)
            )))
            .await;
        assert_error(&reply, "item-not-found", None);
    }
    // The one that names a parameter says which.
    let reply = alice.iq(Pull::node("h?author=%FF").iq()).await;
    let text = assert_error(&reply, "item-not-found", None);
    assert!(text.contains("author"), "the text names the parameter: {text}");
    // Unsubscribing from nonsense is not a crash either.
    let reply = alice.iq(unsubscribe_iq("h?author=%FF", &me)).await;
    assert_eq!(stanza_type(&reply), "error", "{}", to_xml(&reply));
    still_serving("malformed positions and node names").await;
}

#[tokio::test]
async fn payloads_over_the_limit() {
    let fx = fixture();
    let mut bot = fx.server.login("bot").await;
    // Over max_payload_bytes, under Prosody's limit: the component refuses it.
    let over = entry("urn:over", &"o".repeat(MAX_PAYLOAD + 30_000), None, &[]);
    assert!(over.len() < PROSODY_C2S_LIMIT - 1000);
    let reply = bot.iq(publish_iq("h", Some("over"), &over)).await;
    assert_error(&reply, "not-acceptable", Some("payload-too-big"));
    // Over Prosody's limit (and its read margin): Prosody closes the stream.
    let mut raw = Raw::login(fixture(), "bot").await;
    let huge = entry("urn:huge", &"o".repeat(PROSODY_C2S_LIMIT + PROSODY_READ + 10_000), None, &[]);
    raw.send(&format!(
        "<iq type='set' id='huge' to='{COMPONENT}'><pubsub xmlns='{PUBSUB}'><publish node='h'><item \
         id='huge'>{huge}</item></publish></pubsub></iq>"
    ))
    .await;
    let got = raw.until_closed().await;
    assert!(got.contains("policy-violation") && got.contains("stanza-too-big"), "{got}");
    let mut alice = fx.server.login("alice").await;
    let page = pull(&mut alice, &Pull::node("h").ids(&["over", "huge"])).await;
    assert!(page.items.is_empty(), "neither is stored: {}", page.raw.len());
    still_serving("payloads over the limit").await;
}

#[tokio::test]
async fn unsolicited_results_errors_messages_and_presence_are_ignored() {
    let fx = fixture();
    let mut alice = fx.server.login("alice").await;
    let stanzas = [
        format!(r#"<iq type="result" id="stray-1" to="{COMPONENT}"/>"#),
        format!(r#"<iq type="result" id="stray-2" to="{COMPONENT}"><query xmlns="{DISCO_INFO}"/></iq>"#),
        format!(
            r#"<iq type="error" id="stray-3" to="{COMPONENT}"><error type="cancel"><item-not-found xmlns="{NS_STANZAS}"/></error></iq>"#
        ),
        format!(r#"<iq type="result" id="keepalive-1" to="{COMPONENT}"/>"#),
        format!(r#"<message to="{COMPONENT}"><body>hello</body></message>"#),
        format!(r#"<message type="chat" to="{COMPONENT}"><body>hello</body></message>"#),
        format!(
            r#"<message type="headline" to="{COMPONENT}"><event xmlns="http://jabber.org/protocol/pubsub#event"><items node="h"/></event></message>"#
        ),
        format!(r#"<presence to="{COMPONENT}"/>"#),
        format!(r#"<presence type="subscribe" to="{COMPONENT}"/>"#),
        format!(r#"<presence type="probe" to="{COMPONENT}"/>"#),
        format!(r#"<presence type="unavailable" to="{COMPONENT}"/>"#),
    ];
    for s in &stanzas {
        alice.send(xml(s)).await;
    }
    let replies = from_component(&mut alice, Duration::from_secs(1)).await;
    assert!(
        replies.is_empty(),
        "nothing answers results, errors, messages or presence: {:?}",
        replies.iter().map(to_xml).collect::<Vec<_>>()
    );
    // A message of type error from a subscriber only counts against that subscriber's own
    // deliveries (a bounce); it does not remove anyone else's subscription.
    let mut bob = fx.server.login("bob").await;
    let bob_jid = bob.jid().to_string();
    let reply = bob.iq(subscribe_iq("h?order=modified", &bob_jid)).await;
    assert_eq!(stanza_type(&reply), "result", "{}", to_xml(&reply));
    for _ in 0..5 {
        let bounce = format!(
            r#"<message type="error" to="{COMPONENT}"><error type="cancel"><service-unavailable xmlns="{NS_STANZAS}"/></error></message>"#
        );
        alice.send(xml(&bounce)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let subs = testkit::push::subscriptions(&mut bob, None).await;
    assert!(subs.iter().any(|s| s.node == "h?order=modified"), "bob's subscription stays: {subs:?}");
    still_serving("unsolicited stanzas").await;
}

#[tokio::test]
async fn huge_attribute_values() {
    // A fixture of its own: run_cases restarts the process if a case kills it.
    let mut fx = Fixture::start(TABLES);
    seed(&fx).await;
    let n200k = "n".repeat(200_000);
    let n9k = "n".repeat(9_000);
    let items = |node: &str, inner: &str| {
        format!(
            "<iq type='get' id='case' to='{COMPONENT}'><pubsub xmlns='{PUBSUB}'><items node='{node}'>{inner}</items></pubsub></iq>"
        )
    };
    let cases = vec![
        // Under Prosody's 256 KiB: they reach the component, which must answer.
        Case {
            what: "a 9 KB node name",
            who: "alice",
            stanza: items(&n9k, ""),
            expect: Some(|r| is_error(r, "item-not-found")),
        },
        Case {
            what: "a 200 KB node name",
            who: "alice",
            stanza: items(&n200k, ""),
            expect: Some(|r| is_error(r, "item-not-found")),
        },
        Case {
            what: "a 200 KB item id in an items request",
            who: "alice",
            stanza: items("h", &format!("<item id='{n200k}'/>")),
            expect: Some(is_empty_result),
        },
        Case {
            what: "a 200 KB jid in a subscribe",
            who: "alice",
            stanza: format!(
                "<iq type='set' id='case' to='{COMPONENT}'><pubsub xmlns='{PUBSUB}'><subscribe node='h' jid='{n200k}'/></pubsub></iq>"
            ),
            expect: Some(|r| {
                is_error(r, "bad-request")?;
                // The error's text quotes the jid, clipped: no 200 KB echo.
                if r.len() < 2000 { Ok(()) } else { Err(format!("a {}-byte error reply", r.len())) }
            }),
        },
        Case {
            what: "a 200 KB cursor (element text)",
            who: "alice",
            stanza: format!(
                "<iq type='get' id='case' to='{COMPONENT}'><pubsub xmlns='{PUBSUB}'><items node='h'/><set xmlns='{RSM}'><after>cursor:{}</after></set></pubsub></iq>",
                "1".repeat(200_000)
            ),
            expect: Some(|r| is_error(r, "bad-request")),
        },
    ];
    let mut failures = run_cases(&mut fx, cases).await;

    // Over it (1 MB): Prosody closes the client's stream; the component never sees it.
    for (what, iq) in [
        ("node name", items(&"n".repeat(1 << 20), "")),
        (
            "cursor",
            format!(
                "<iq type='get' id='case' to='{COMPONENT}'><pubsub xmlns='{PUBSUB}'><items node='h'/><set xmlns='{RSM}'><after>cursor:{}</after></set></pubsub></iq>",
                "1".repeat(1 << 20)
            ),
        ),
    ] {
        let mut raw = Raw::login(&fx, "alice").await;
        raw.send(&iq).await;
        let got = raw.until_closed().await;
        assert!(
            got.contains("policy-violation") && got.contains("stanza-too-big"),
            "a 1 MB {what}: Prosody closes the stream with policy-violation / stanza-too-big: {got}"
        );
        eprintln!("a 1 MB {what}: Prosody closed the client's stream with policy-violation / stanza-too-big");
        if let Err(e) = serving(&fx, &format!("a 1 MB {what}")).await {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{} hostile cases went wrong:\n{}", failures.len(), failures.join("\n"));
}

#[tokio::test]
async fn deep_nesting() {
    // A fixture of its own: run_cases restarts the process if a case kills it. The component
    // keeps stanzas to 128 levels below the stanza element and refuses deeper ones with
    // policy-violation, whoever sends them (ejabberd 23.01 itself crashes on 10,000 levels).
    let mut fx = Fixture::start(TABLES);
    seed(&fx).await;
    let nest = |depth: usize| format!("{}deep{}", "<x>".repeat(depth), "</x>".repeat(depth));
    let publish = |depth: usize| {
        let entry = format!(
            "<entry xmlns='{ATOM}'><id>urn:deep</id><title>deep</title><content type='xhtml'><div \
             xmlns='http://www.w3.org/1999/xhtml'>{}</div></content></entry>",
            nest(depth)
        );
        assert!(entry.len() < MAX_PAYLOAD && entry.len() < PROSODY_C2S_LIMIT);
        format!(
            "<iq type='set' id='case' to='{COMPONENT}'><pubsub xmlns='{PUBSUB}'><publish node='h'><item \
             id='deep{depth}'>{entry}</item></publish></pubsub></iq>"
        )
    };
    let unknown = |depth: usize| {
        format!(
            "<iq type='get' id='case' to='{COMPONENT}'><query xmlns='urn:example:deep'>{}</query></iq>",
            nest(depth)
        )
    };
    let cases = vec![
        Case {
            what: "an unknown payload nested 100 deep",
            who: "alice",
            stanza: unknown(100),
            expect: Some(|r| is_error(r, "service-unavailable")),
        },
        Case {
            what: "an unknown payload nested 1,000 deep, from a user with no rights",
            who: "alice",
            stanza: unknown(1_000),
            expect: Some(|r| is_error(r, "policy-violation")),
        },
        Case {
            what: "a message with a payload nested 1,000 deep",
            who: "alice",
            stanza: format!("<message to='{COMPONENT}'><x xmlns='urn:example:deep'>{}</x></message>", nest(1_000)),
            expect: None,
        },
        Case {
            what: "a publish nested 10,000 deep, from a user who may not publish",
            who: "alice",
            stanza: publish(10_000),
            expect: Some(|r| is_error(r, "policy-violation")),
        },
        Case {
            what: "an Atom entry nested 10,000 deep, from the publisher",
            who: "bot",
            stanza: publish(10_000),
            expect: Some(|r| is_error(r, "policy-violation")),
        },
        Case {
            what: "an Atom entry nested 100 deep (within the limit), from the publisher",
            who: "bot",
            stanza: publish(100),
            expect: Some(|r| if stanza_type(&xml(r)) == "result" { Ok(()) } else { Err("not stored".into()) }),
        },
    ];
    let failures = run_cases(&mut fx, cases).await;
    assert!(failures.is_empty(), "{} hostile cases went wrong:\n{}", failures.len(), failures.join("\n"));
}
