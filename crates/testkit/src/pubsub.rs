//! Stanzas a smartfeeds client sends and what it reads back, for the end-to-end tests:
//! Atom entries, publish/retract/items iqs with RSM, pages parsed into plain values,
//! T+O+C cursors, pipelined iqs and stanza error checks.

use std::future::Future;
use std::time::Duration;

use minidom::Element;

use super::connection::{Connection, REPLY_TIMEOUT};
use super::server::COMPONENT_DOMAIN;
use super::xml::{NS_STANZAS, error_app_condition, error_condition, set_attr, stanza_type, to_xml, xml};

pub const PUBSUB: &str = "http://jabber.org/protocol/pubsub";
pub const PUBSUB_OWNER: &str = "http://jabber.org/protocol/pubsub#owner";
pub const PUBSUB_ERRORS: &str = "http://jabber.org/protocol/pubsub#errors";
pub const RSM: &str = "http://jabber.org/protocol/rsm";
pub const DISCO_INFO: &str = "http://jabber.org/protocol/disco#info";
pub const DISCO_ITEMS: &str = "http://jabber.org/protocol/disco#items";
pub const SHIM: &str = "http://jabber.org/protocol/shim";
pub const ATOM: &str = "http://www.w3.org/2005/Atom";
pub const TOMBSTONES: &str = "http://purl.org/atompub/tombstones/1.0";
pub const DATA_FORMS: &str = "jabber:x:data";

/// Escapes text for an XML attribute or element.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&apos;")
}

/// An Atom entry: `atom_id`, `title`, an author name (if any), category terms.
pub fn entry(atom_id: &str, title: &str, author: Option<&str>, categories: &[&str]) -> String {
    let mut s = format!(r#"<entry xmlns="{ATOM}"><id>{}</id><title>{}</title>"#, esc(atom_id), esc(title));
    if let Some(a) = author {
        s.push_str(&format!("<author><name>{}</name></author>", esc(a)));
    }
    for c in categories {
        s.push_str(&format!(r#"<category term="{}"/>"#, esc(c)));
    }
    s.push_str("<updated>2024-01-01T00:00:00Z</updated></entry>");
    s
}

/// The smallest entry for the item `id`: Atom id `urn:ID`, title `ID`, no author, no
/// category.
pub fn small_entry(id: &str) -> String {
    entry(&format!("urn:{id}"), id, None, &[])
}

/// `n` item ids, `PREFIX000`, `PREFIX001`, …
pub fn numbered(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i:03}")).collect()
}

/// `<iq type="set"><pubsub><publish node><item id?>PAYLOAD</item></publish></pubsub></iq>`.
pub fn publish_iq(node: &str, id: Option<&str>, payload: &str) -> Element {
    let id = id.map(|i| format!(r#" id="{}""#, esc(i))).unwrap_or_default();
    xml(&format!(
        r#"<iq type="set" to="{COMPONENT_DOMAIN}"><pubsub xmlns="{PUBSUB}"><publish node="{}"><item{id}>{payload}</item></publish></pubsub></iq>"#,
        esc(node)
    ))
}

/// `<iq type="set"><pubsub><retract node><item id/></retract></pubsub></iq>`.
pub fn retract_iq(node: &str, id: &str) -> Element {
    xml(&format!(
        r#"<iq type="set" to="{COMPONENT_DOMAIN}"><pubsub xmlns="{PUBSUB}"><retract node="{}"><item id="{}"/></retract></pubsub></iq>"#,
        esc(node),
        esc(id)
    ))
}

/// An `<items/>` request: `Pull::node("x").max(5).after("cursor:…").iq()`.
#[derive(Clone, Debug, Default)]
pub struct Pull {
    pub node: String,
    pub max: Option<String>,
    pub after: Option<String>,
    pub before: Option<String>,
    pub index: Option<String>,
    pub max_items: Option<String>,
    pub ids: Vec<String>,
    /// Send an empty `<set/>` even without RSM fields.
    pub empty_set: bool,
}

impl Pull {
    pub fn node(node: &str) -> Pull {
        Pull { node: node.to_string(), ..Pull::default() }
    }
    pub fn max(mut self, n: impl ToString) -> Pull {
        self.max = Some(n.to_string());
        self
    }
    pub fn after(mut self, pos: &str) -> Pull {
        self.after = Some(pos.to_string());
        self
    }
    /// `before("")` is the empty `<before/>`: the last page.
    pub fn before(mut self, pos: &str) -> Pull {
        self.before = Some(pos.to_string());
        self
    }
    pub fn index(mut self, i: impl ToString) -> Pull {
        self.index = Some(i.to_string());
        self
    }
    pub fn max_items(mut self, n: impl ToString) -> Pull {
        self.max_items = Some(n.to_string());
        self
    }
    pub fn ids(mut self, ids: &[&str]) -> Pull {
        self.ids = ids.iter().map(|s| s.to_string()).collect();
        self
    }

    /// The iq get.
    pub fn iq(&self) -> Element {
        let max_items = self.max_items.as_ref().map(|n| format!(r#" max_items="{}""#, esc(n))).unwrap_or_default();
        let ids: String = self.ids.iter().map(|i| format!(r#"<item id="{}"/>"#, esc(i))).collect();
        let mut set = String::new();
        for (name, value) in
            [("max", &self.max), ("after", &self.after), ("before", &self.before), ("index", &self.index)]
        {
            match value {
                Some(v) if v.is_empty() => set.push_str(&format!("<{name}/>")),
                Some(v) => set.push_str(&format!("<{name}>{}</{name}>", esc(v))),
                None => {}
            }
        }
        let set = if set.is_empty() && !self.empty_set { set } else { format!(r#"<set xmlns="{RSM}">{set}</set>"#) };
        xml(&format!(
            r#"<iq type="get" to="{COMPONENT_DOMAIN}"><pubsub xmlns="{PUBSUB}"><items node="{}"{max_items}>{ids}</items>{set}</pubsub></iq>"#,
            esc(&self.node)
        ))
    }
}

/// A T+O+C cursor as the service writes it after `cursor:`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cursor {
    pub t: i64,
    pub o: u64,
    pub c: u32,
}

impl Cursor {
    /// Parses `cursor:T_O_C`; `None` if it is not exactly that.
    pub fn parse_spec(spec: &str) -> Option<Cursor> {
        let value = spec.strip_prefix("cursor:")?;
        let parts: Vec<&str> = value.split('_').collect();
        let [t, o, c] = parts[..] else { return None };
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !(digits(t) && digits(o) && digits(c)) {
            return None;
        }
        Some(Cursor { t: t.parse().ok()?, o: o.parse().ok()?, c: c.parse().ok()? })
    }

    /// `cursor:T_O_C`.
    pub fn spec(&self) -> String {
        format!("cursor:{}_{}_{}", self.t, self.o, self.c)
    }
}

/// An item of a page: its id and payload.
#[derive(Clone, Debug)]
pub struct PageItem {
    pub id: String,
    pub payload: Option<Element>,
}

impl PageItem {
    /// The `<deleted-entry/>` of a tombstone.
    pub fn tombstone(&self) -> Option<&Element> {
        self.payload.as_ref().filter(|p| p.is("deleted-entry", TOMBSTONES))
    }
    /// The Atom `<entry/>`.
    pub fn entry(&self) -> Option<&Element> {
        self.payload.as_ref().filter(|p| p.is("entry", ATOM))
    }
    /// The entry's `<title/>` text.
    pub fn title(&self) -> Option<String> {
        self.entry().and_then(|e| e.get_child("title", ATOM)).map(|t| t.text())
    }
}

/// An items result, parsed.
#[derive(Clone, Debug)]
pub struct Page {
    /// The `node` of `<items/>`.
    pub node: String,
    pub items: Vec<PageItem>,
    /// Whether the reply had an RSM `<set/>`.
    pub has_set: bool,
    /// `<first>` text and its `index`.
    pub first: Option<String>,
    pub first_index: Option<u64>,
    pub last: Option<String>,
    pub count: Option<u64>,
    /// The whole reply, for messages.
    pub raw: String,
}

impl Page {
    pub fn ids(&self) -> Vec<String> {
        self.items.iter().map(|i| i.id.clone()).collect()
    }
    pub fn first_cursor(&self) -> Cursor {
        let f = self.first.as_deref().unwrap_or_else(|| panic!("no <first> in {}", self.raw));
        Cursor::parse_spec(f).unwrap_or_else(|| panic!("<first>{f}</first> is not cursor:T_O_C in {}", self.raw))
    }
    pub fn last_cursor(&self) -> Cursor {
        let l = self.last.as_deref().unwrap_or_else(|| panic!("no <last> in {}", self.raw));
        Cursor::parse_spec(l).unwrap_or_else(|| panic!("<last>{l}</last> is not cursor:T_O_C in {}", self.raw))
    }
}

/// Parses an items result; panics (with the stanza) on an error or a malformed result.
pub fn parse_page(reply: &Element) -> Page {
    let raw = to_xml(reply);
    assert_eq!(stanza_type(reply), "result", "expected an items result: {raw}");
    assert_eq!(reply.attr("from"), Some(COMPONENT_DOMAIN), "reply from the component: {raw}");
    let pubsub = reply.get_child("pubsub", PUBSUB).unwrap_or_else(|| panic!("no <pubsub/> in {raw}"));
    let items = pubsub.get_child("items", PUBSUB).unwrap_or_else(|| panic!("no <items/> in {raw}"));
    let node = items.attr("node").unwrap_or_else(|| panic!("<items/> without node in {raw}")).to_string();
    let items = items
        .children()
        .filter(|c| c.is("item", PUBSUB))
        .map(|i| PageItem {
            id: i.attr("id").unwrap_or_else(|| panic!("<item/> without id in {raw}")).to_string(),
            payload: i.children().next().cloned(),
        })
        .collect();
    let set = pubsub.get_child("set", RSM);
    let text = |name: &str| set.and_then(|s| s.get_child(name, RSM)).map(|e| e.text());
    let first_index = set
        .and_then(|s| s.get_child("first", RSM))
        .and_then(|f| f.attr("index"))
        .map(|i| i.parse::<u64>().unwrap_or_else(|_| panic!("<first index={i:?}> is not a number in {raw}")));
    let count = text("count").map(|c| c.parse::<u64>().unwrap_or_else(|_| panic!("<count>{c}</count> in {raw}")));
    Page { node, items, has_set: set.is_some(), first: text("first"), first_index, last: text("last"), count, raw }
}

/// Sends all `iqs` at once (pipelined; ids added) and returns their replies in the same
/// order. Panics if one gets no reply within [`REPLY_TIMEOUT`] after the last was sent.
pub async fn iq_all(conn: &mut Connection, iqs: Vec<Element>) -> Vec<Element> {
    let mut ids = Vec::with_capacity(iqs.len());
    for mut iq in iqs {
        let id = conn.fresh_id();
        set_attr(&mut iq, "id", &id);
        conn.queue(iq);
        ids.push(id);
    }
    let mut replies = Vec::with_capacity(ids.len());
    for id in ids {
        let reply = conn
            .wait_for(REPLY_TIMEOUT, |el| {
                el.name() == "iq" && el.attr("id") == Some(id.as_str()) && matches!(stanza_type(el), "result" | "error")
            })
            .await
            .unwrap_or_else(|| panic!("{}: no reply to pipelined iq {id} ({:?})", conn.label(), conn.closed_reason()));
        replies.push(reply);
    }
    replies
}

/// Publishes `payload` as the item `id` of `node` and checks that the reply is a result.
pub async fn publish(conn: &mut Connection, node: &str, id: &str, payload: &str) {
    let reply = conn.iq(publish_iq(node, Some(id), payload)).await;
    assert_eq!(stanza_type(&reply), "result", "publish {node}/{id}: {}", to_xml(&reply));
}

/// Publishes a [`small_entry`] for each of `ids` to `node`, all at once (pipelined, so they
/// commit in any order), and checks that each is acknowledged.
pub async fn publish_small(conn: &mut Connection, node: &str, ids: &[String]) {
    let iqs = ids.iter().map(|id| publish_iq(node, Some(id), &small_entry(id))).collect();
    for reply in iq_all(conn, iqs).await {
        assert_eq!(stanza_type(&reply), "result", "publish to {node}: {}", to_xml(&reply));
    }
}

/// Sends the iq and parses the items result.
pub async fn pull(conn: &mut Connection, pull: &Pull) -> Page {
    let reply = conn.iq(pull.iq()).await;
    if stanza_type(&reply) != "result" {
        panic!("pull {pull:?} failed: {}", to_xml(&reply));
    }
    parse_page(&reply)
}

/// Every page of a view forward from `request`, each asked for `after` the `<last>` of the
/// one before, up to the first empty page (not included).
pub async fn pages(conn: &mut Connection, request: Pull) -> Vec<Page> {
    let mut out: Vec<Page> = Vec::new();
    let mut request = request;
    loop {
        let page = pull(conn, &request).await;
        if page.items.is_empty() {
            return out;
        }
        request = request.after(page.last.as_deref().expect("a non-empty page has <last>"));
        out.push(page);
        assert!(out.len() < 10_000, "paging {} does not end", request.node);
    }
}

/// The `<text/>` of a stanza error.
pub fn error_text(reply: &Element) -> Option<String> {
    let error = reply.children().find(|c| c.name() == "error")?;
    error.children().find(|c| c.is("text", NS_STANZAS)).map(|t| t.text())
}

/// Checks that `reply` is an error from the component with `condition`, the pubsub#errors
/// application condition `app` (or none when `None`), and a non-empty `<text/>`; returns the
/// text.
#[track_caller]
pub fn assert_error(reply: &Element, condition: &str, app: Option<&str>) -> String {
    let raw = to_xml(reply);
    assert_eq!(stanza_type(reply), "error", "expected an error <{condition}/>, got {raw}");
    assert_eq!(reply.attr("from"), Some(COMPONENT_DOMAIN), "the error comes from the component: {raw}");
    assert_eq!(error_condition(reply).as_deref(), Some(condition), "{raw}");
    let got_app = error_app_condition(reply);
    match app {
        Some(name) => {
            assert_eq!(got_app, Some((PUBSUB_ERRORS.to_string(), name.to_string())), "pubsub#errors <{name}/> in {raw}")
        }
        None => assert_eq!(got_app, None, "no application condition expected in {raw}"),
    }
    let text = error_text(reply).unwrap_or_default();
    assert!(!text.trim().is_empty(), "the error has a <text/> saying why: {raw}");
    text
}

/// Unix milliseconds as RFC 3339 UTC with milliseconds, as `time:` specs take them.
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .expect("time in range")
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Parses RFC 3339 into Unix milliseconds.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(s).ok().map(|t| t.timestamp_millis())
}

/// The wall clock in Unix milliseconds.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Every item of a view, forward by pages of `max` (see [`pages`]).
pub async fn walk(conn: &mut Connection, node: &str, max: usize) -> Vec<PageItem> {
    pages(conn, Pull::node(node).max(max)).await.into_iter().flat_map(|page| page.items).collect()
}

/// Runs a future to completion on a fresh runtime on another thread (usable from `static`
/// initialisers called inside a test's runtime, where `block_on` would panic).
pub fn block_on_thread<F>(fut: F) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    std::thread::scope(|s| {
        let handle = s.spawn(|| {
            tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime").block_on(fut)
        });
        match handle.join() {
            Ok(out) => out,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// A short wait for things that should not arrive.
pub const SHORT: Duration = Duration::from_millis(300);
