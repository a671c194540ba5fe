//! MAM queries on pubsub nodes (XEP-0313 with XEP-0442's `node`), as a client writes them,
//! and their answers read back: the result messages that came before the iq result (a
//! client stops listening at the result), and the `<fin/>`.

use crate::connection::Connection;
use crate::pubsub::{PageItem, RSM, esc};
use crate::{stanza_type, to_xml, xml};
use minidom::Element;
use std::time::Duration;

pub const MAM: &str = "urn:xmpp:mam:2";
const FORWARD: &str = "urn:xmpp:forward:0";
const DELAY: &str = "urn:xmpp:delay";
const EVENT: &str = "http://jabber.org/protocol/pubsub#event";

/// A MAM query of a node.
#[derive(Clone, Debug, Default)]
pub struct MamQuery {
    pub node: String,
    pub queryid: String,
    pub max: Option<usize>,
    pub after: Option<String>,
    /// `Some("")`: an empty `<before/>`, the last page.
    pub before: Option<String>,
    /// Form fields besides FORM_TYPE: `start`, `end`, or anything a test wants refused.
    pub fields: Vec<(String, String)>,
    /// XEP-0413: the namespace and `by` of an `<order/>`.
    pub order: Option<(String, String)>,
}

impl MamQuery {
    pub fn node(node: &str) -> MamQuery {
        MamQuery { node: node.to_string(), queryid: "q".into(), ..MamQuery::default() }
    }
    pub fn max(mut self, n: usize) -> MamQuery {
        self.max = Some(n);
        self
    }
    pub fn after(mut self, id: &str) -> MamQuery {
        self.after = Some(id.to_string());
        self
    }
    pub fn before(mut self, id: &str) -> MamQuery {
        self.before = Some(id.to_string());
        self
    }
    pub fn field(mut self, var: &str, value: &str) -> MamQuery {
        self.fields.push((var.to_string(), value.to_string()));
        self
    }
    /// `<order xmlns='urn:xmpp:order-by:VERSION' by=BY/>`.
    pub fn order(mut self, version: u8, by: &str) -> MamQuery {
        self.order = Some((format!("urn:xmpp:order-by:{version}"), by.to_string()));
        self
    }

    /// The `<iq type='set'>` to `to`.
    pub fn iq(&self, to: &str) -> Element {
        let field =
            |var: &str, value: &str| format!(r#"<field var="{}"><value>{}</value></field>"#, esc(var), esc(value));
        let fields: String = self.fields.iter().map(|(var, value)| field(var, value)).collect();
        let mut set = String::new();
        if let Some(max) = self.max {
            set.push_str(&format!("<max>{max}</max>"));
        }
        for (name, value) in [("after", &self.after), ("before", &self.before)] {
            match value.as_deref() {
                Some("") => set.push_str(&format!("<{name}/>")),
                Some(v) => set.push_str(&format!("<{name}>{}</{name}>", esc(v))),
                None => {}
            }
        }
        let order = match &self.order {
            Some((ns, by)) => format!(r#"<order xmlns="{}" by="{}"/>"#, esc(ns), esc(by)),
            None => String::new(),
        };
        xml(&format!(
            r#"<iq type="set" to="{}"><query xmlns="{MAM}" queryid="{}" node="{}"><x xmlns="jabber:x:data" type="submit"><field var="FORM_TYPE" type="hidden"><value>{MAM}</value></field>{fields}</x><set xmlns="{RSM}">{set}</set>{order}</query></iq>"#,
            esc(to),
            esc(&self.queryid),
            esc(&self.node)
        ))
    }
}

/// One result message: its id (a cursor), the service it came from, the item it carries,
/// and the `<delay/>` stamp.
#[derive(Clone, Debug)]
pub struct MamResult {
    pub id: String,
    pub queryid: Option<String>,
    pub from: String,
    pub node: String,
    pub item: PageItem,
    pub stamp: Option<String>,
}

/// A MAM answer: the results in arrival order, and the `<fin/>`.
#[derive(Clone, Debug)]
pub struct MamAnswer {
    pub results: Vec<MamResult>,
    pub complete: bool,
    pub first: Option<String>,
    pub first_index: Option<u64>,
    pub last: Option<String>,
    pub count: Option<u64>,
    pub raw: String,
}

impl MamAnswer {
    pub fn ids(&self) -> Vec<&str> {
        self.results.iter().map(|r| r.item.id.as_str()).collect()
    }
}

/// Sends `q` to `to` and reads its answer: `Err` with the error iq when refused. Results
/// are the messages of its `queryid` received before the iq result.
pub async fn mam(conn: &mut Connection, to: &str, q: &MamQuery) -> Result<MamAnswer, Element> {
    let reply = conn.iq_timeout(q.iq(to), Duration::from_secs(30)).await;
    let queryid = q.queryid.clone();
    let ours = move |m: &Element| {
        m.name() == "message" && m.get_child("result", MAM).is_some_and(|r| r.attr("queryid") == Some(&queryid))
    };
    let messages = conn.take_queued(ours);
    if stanza_type(&reply) != "result" {
        return Err(reply);
    }
    let mut raw = String::new();
    let mut results = Vec::new();
    for m in &messages {
        raw.push_str(&to_xml(m));
        results.push(result_of(m));
    }
    let fin = reply.get_child("fin", MAM).unwrap_or_else(|| panic!("a <fin/>: {}", to_xml(&reply)));
    raw.push_str(&to_xml(&reply));
    let set = fin.get_child("set", RSM);
    let text = |name: &str| set.and_then(|s| s.get_child(name, RSM)).map(|e| e.text());
    Ok(MamAnswer {
        results,
        complete: fin.attr("complete") == Some("true"),
        first: text("first"),
        first_index: set.and_then(|s| s.get_child("first", RSM)).and_then(|f| f.attr("index")?.parse().ok()),
        last: text("last"),
        count: text("count").and_then(|c| c.parse().ok()),
        raw,
    })
}

fn result_of(m: &Element) -> MamResult {
    let raw = to_xml(m);
    let result = m.get_child("result", MAM).expect("a result");
    let forwarded = result.get_child("forwarded", FORWARD).unwrap_or_else(|| panic!("<forwarded/>: {raw}"));
    let inner = forwarded.get_child("message", "jabber:client").unwrap_or_else(|| panic!("a message: {raw}"));
    let items = inner
        .get_child("event", EVENT)
        .and_then(|e| e.get_child("items", EVENT))
        .unwrap_or_else(|| panic!("an event's items: {raw}"));
    let item = items.get_child("item", EVENT).unwrap_or_else(|| panic!("an item: {raw}"));
    MamResult {
        id: result.attr("id").unwrap_or_else(|| panic!("a result id: {raw}")).to_string(),
        queryid: result.attr("queryid").map(str::to_string),
        from: m.attr("from").unwrap_or_default().to_string(),
        node: items.attr("node").unwrap_or_default().to_string(),
        item: PageItem {
            id: item.attr("id").unwrap_or_default().to_string(),
            payload: item.children().next().cloned(),
        },
        stamp: forwarded.get_child("delay", DELAY).and_then(|d| d.attr("stamp")).map(str::to_string),
    }
}

/// Every page of a MAM query forward, each `after` the `<last>` of the one before, up to
/// the page whose `<fin/>` says complete.
pub async fn mam_pages(conn: &mut Connection, to: &str, q: MamQuery) -> Vec<MamAnswer> {
    let mut out: Vec<MamAnswer> = Vec::new();
    let mut q = q;
    loop {
        let page = mam(conn, to, &q).await.unwrap_or_else(|e| panic!("MAM {q:?} refused: {}", to_xml(&e)));
        let complete = page.complete;
        let last = page.last.clone();
        out.push(page);
        if complete {
            return out;
        }
        q = q.after(&last.expect("an incomplete page has <last>"));
        assert!(out.len() < 10_000, "MAM paging of {} does not end", q.node);
    }
}
