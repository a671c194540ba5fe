//! The XEP-0060 payloads the tool sends, formatted as text, and the few facts it reads back
//! from replies and pushes.
//!
//! Formatting by hand (instead of building typed values and serialising them) keeps the
//! sending side out of the measurement: a page request is one `format!`.

use std::borrow::Cow;

use minidom::Element;

use crate::scan;

pub const NS_PUBSUB: &str = "http://jabber.org/protocol/pubsub";
pub const NS_PUBSUB_EVENT: &str = "http://jabber.org/protocol/pubsub#event";
pub const NS_RSM: &str = "http://jabber.org/protocol/rsm";
pub const NS_SHIM: &str = "http://jabber.org/protocol/shim";
pub const NS_ATOM: &str = "http://www.w3.org/2005/Atom";
pub const NS_MAM: &str = "urn:xmpp:mam:2";

/// XML escaping: the core's (minidom's), so the tool writes what the service would.
pub use feed::atom::escape as esc;

/// How a pull asks for its page.
#[derive(Clone, Debug)]
pub enum PageAsk<'a> {
    /// RSM `<max>` and, past the first page, `<after>`.
    Rsm { max: u32, after: Option<&'a str> },
    /// `max_items="n"` (XEP-0060 §6.5.7), for services without RSM.
    MaxItems(u32),
    /// A MAM query of the node (XEP-0313 with `node`), paged like `Rsm`: its results come
    /// as messages before the iq result, whose `<fin/>` says where the page ends.
    Mam { max: u32, after: Option<&'a str> },
}

impl PageAsk<'_> {
    /// The iq type of the request: MAM queries are `set`s.
    pub fn iq_type(&self) -> &'static str {
        match self {
            PageAsk::Mam { .. } => "set",
            _ => "get",
        }
    }
}

/// The `<pubsub/>` of an items request.
pub fn items_query(node: &str, ask: &PageAsk) -> String {
    let node = esc(node);
    match ask {
        PageAsk::Rsm { max, after } => {
            let after = after.map(|a| format!("<after>{}</after>", esc(a))).unwrap_or_default();
            format!(
                "<pubsub xmlns='{NS_PUBSUB}'><items node='{node}'/><set xmlns='{NS_RSM}'><max>{max}</max>{after}</set></pubsub>"
            )
        }
        PageAsk::MaxItems(n) => format!("<pubsub xmlns='{NS_PUBSUB}'><items node='{node}' max_items='{n}'/></pubsub>"),
        PageAsk::Mam { max, after } => {
            let after = after.map(|a| format!("<after>{}</after>", esc(a))).unwrap_or_default();
            format!(
                "<query xmlns='{NS_MAM}' queryid='p' node='{node}'><set xmlns='{NS_RSM}'><max>{max}</max>{after}</set></query>"
            )
        }
    }
}

/// The `<pubsub/>` of a publish of one Atom entry with item id `id`; `padding` bytes of
/// `<content>` make the entry bigger.
pub fn publish(node: &str, id: &str, title: &str, padding: usize) -> String {
    let (node, eid) = (esc(node), esc(id));
    let entry = atom_entry(id, title, padding);
    format!("<pubsub xmlns='{NS_PUBSUB}'><publish node='{node}'><item id='{eid}'>{entry}</item></publish></pubsub>")
}

/// The Atom entry the tool publishes as `id`, with `padding` bytes of `<content>`.
pub fn atom_entry(id: &str, title: &str, padding: usize) -> String {
    let (id, title) = (esc(id), esc(title));
    let updated = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let content = if padding > 0 { format!("<content>{}</content>", "x".repeat(padding)) } else { String::new() };
    format!(
        "<entry xmlns='{NS_ATOM}'><id>urn:smartfeeds-load:{id}</id><title>{title}</title>\
         <author><name>smartfeeds-load</name></author><updated>{updated}</updated>{content}</entry>"
    )
}

/// The `<pubsub/>` of a node creation (XEP-0060 §8.1.3) keeping up to `max_items` items,
/// open to any publisher (`fanout --publisher` publishes from another domain).
pub fn create_node(node: &str, max_items: u32) -> String {
    format!(
        "<pubsub xmlns='{NS_PUBSUB}'><create node='{}'/><configure><x xmlns='jabber:x:data' type='submit'>\
         <field var='FORM_TYPE' type='hidden'><value>{NS_PUBSUB}#node_config</value></field>\
         <field var='pubsub#max_items'><value>{max_items}</value></field>\
         <field var='pubsub#persist_items'><value>1</value></field>\
         <field var='pubsub#publish_model'><value>open</value></field></x></configure></pubsub>",
        esc(node)
    )
}

/// The `<pubsub/>` of a subscribe (or unsubscribe) of `jid` to `node`.
pub fn subscription(op: &str, node: &str, jid: &str) -> String {
    format!("<pubsub xmlns='{NS_PUBSUB}'><{op} node='{}' jid='{}'/></pubsub>", esc(node), esc(jid))
}

/// `Ok` for an iq result, `Err(condition)` for an error (with its `<text/>` when there is one).
pub fn outcome(reply: &Element) -> Result<(), String> {
    if reply.attr("type") != Some("error") {
        return Ok(());
    }
    let Some(error) = reply.children().find(|c| c.name() == "error") else {
        return Err("error (no <error/>)".into());
    };
    let condition = error.children().find(|c| c.name() != "text").map_or("undefined-condition", |c| c.name());
    Err(match error.children().find(|c| c.name() == "text") {
        Some(t) => format!("{condition}: {}", t.text()),
        None => condition.to_string(),
    })
}

/// What an items result holds: the number of items, and the RSM `<last>` and `<count>`
/// when the reply has a `<set/>`.
#[derive(Debug, Default)]
pub struct PageFacts {
    pub items: usize,
    pub has_set: bool,
    pub last: Option<String>,
    pub count: Option<u64>,
}

pub fn page_facts(reply: &Element, ask: &PageAsk) -> Option<PageFacts> {
    if let PageAsk::Mam { max, .. } = ask {
        return reply.get_child("fin", NS_MAM).map(|fin| fin_facts(fin, *max));
    }
    let pubsub = reply.get_child("pubsub", NS_PUBSUB)?;
    let items = pubsub.get_child("items", NS_PUBSUB)?;
    let mut facts = PageFacts { items: items.children().filter(|c| c.name() == "item").count(), ..Default::default() };
    if let Some(set) = pubsub.get_child("set", NS_RSM) {
        facts.has_set = true;
        facts.last = set.get_child("last", NS_RSM).map(|l| l.text());
        facts.count = set.get_child("count", NS_RSM).and_then(|c| c.text().trim().parse().ok());
    }
    Some(facts)
}

/// What a push says, found in its bytes: the item id it carries (published or retracted)
/// and its SHIM `<headers/>` element as written (read with [`sync_headers`] when needed:
/// the copies of one push carry the same bytes, so comparing them is enough for all but
/// the first).
#[derive(Debug, PartialEq)]
pub struct PushFacts<'a> {
    pub item: Cow<'a, str>,
    pub headers: Option<&'a [u8]>,
}

/// The SHIM sync headers of a push.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SyncHeaders {
    pub total_items: Option<String>,
    pub previous_cursor: Option<String>,
    pub last_cursor: Option<String>,
}

/// The facts of a message given as bytes (see `scan`), in one pass over its children;
/// `None` when it is not a pubsub event with one item.
pub fn push_facts(message: &[u8]) -> Option<PushFacts<'_>> {
    let (mut item, mut headers) = (None, None);
    for child in scan::children(message) {
        match scan::name(child) {
            b"event" if in_ns(child, NS_PUBSUB_EVENT) => {
                let items = scan::child(child, "items", NS_PUBSUB_EVENT)?;
                let it = scan::children(items).find(|c| matches!(scan::name(c), b"item" | b"retract"))?;
                item = Some(scan::attr(it, "id")?);
            }
            b"headers" if in_ns(child, NS_SHIM) => headers = Some(child),
            _ => {}
        }
    }
    Some(PushFacts { item: item?, headers })
}

/// Whether `el` declares namespace `ns` (or none, inheriting it as every service measured
/// here writes it).
fn in_ns(el: &[u8], ns: &str) -> bool {
    scan::attr(el, "xmlns").is_none_or(|x| x == ns)
}

/// The sync headers in a `<headers/>` element given as bytes.
pub fn sync_headers(headers: &[u8]) -> SyncHeaders {
    let mut out = SyncHeaders::default();
    for h in scan::children(headers).filter(|h| scan::name(h) == b"header") {
        let slot = match scan::attr(h, "name").as_deref() {
            Some("TotalItems") => &mut out.total_items,
            Some("PreviousCursor") => &mut out.previous_cursor,
            Some("LastCursor") => &mut out.last_cursor,
            _ => continue,
        };
        *slot = Some(scan::text(h).into_owned());
    }
    out
}

/// What a MAM `<fin/>` says of its page: its RSM `<set/>`, and the number of results, from
/// the set (the results themselves came as messages, which the tool does not read): the
/// page runs from `<first index>` to `<count>` when complete, else it holds the `max` asked
/// for (the count the caller compares with the first walk's).
fn fin_facts(fin: &Element, max: u32) -> PageFacts {
    let set = fin.get_child("set", NS_RSM);
    let child = |name: &str| set.and_then(|s| s.get_child(name, NS_RSM));
    let count = child("count").and_then(|c| c.text().trim().parse::<u64>().ok());
    let first = child("first").and_then(|f| f.attr("index")?.parse::<u64>().ok());
    let complete = fin.attr("complete") == Some("true");
    let items = match (complete, first, count) {
        (true, Some(first), Some(count)) => count.saturating_sub(first) as usize,
        (true, None, _) => 0,
        _ => max as usize,
    };
    PageFacts { items, has_set: set.is_some(), last: child("last").map(|l| l.text()), count }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_facts_read_item_and_headers_from_bytes() {
        let push = format!(
            "<message from='feeds.localhost' to='sub3@bench.localhost' type='headline' id='p1'>\
             <event xmlns='{NS_PUBSUB_EVENT}'><items node='load'><item id='f-7'><entry xmlns='{NS_ATOM}'>\
             <title>header</title></entry></item></items></event><headers xmlns='{NS_SHIM}'>\
             <header name='TotalItems'>8</header><header name='PreviousCursor'>1_0_2</header>\
             <header name='LastCursor'>3_0_4</header></headers></message>"
        );
        let facts = push_facts(push.as_bytes()).unwrap();
        assert_eq!(facts.item, "f-7");
        assert_eq!(
            sync_headers(facts.headers.unwrap()),
            SyncHeaders {
                total_items: Some("8".into()),
                previous_cursor: Some("1_0_2".into()),
                last_cursor: Some("3_0_4".into()),
            }
        );
        let retract = format!(
            "<message><event xmlns='{NS_PUBSUB_EVENT}'><items node='n'><retract id='r'/></items></event></message>"
        );
        assert_eq!(push_facts(retract.as_bytes()).unwrap().item, "r");
        assert_eq!(push_facts(b"<message><body>hi</body></message>"), None);
    }
}
