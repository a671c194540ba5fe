//! The XEP-0060 payloads the tool sends, formatted as text, and the few facts it reads back
//! from replies and pushes.
//!
//! Formatting by hand (instead of building typed values and serialising them) keeps the
//! sending side out of the measurement: a page request is one `format!`.

use std::borrow::Cow;

use minidom::Element;

pub const NS_PUBSUB: &str = "http://jabber.org/protocol/pubsub";
pub const NS_PUBSUB_EVENT: &str = "http://jabber.org/protocol/pubsub#event";
pub const NS_RSM: &str = "http://jabber.org/protocol/rsm";
pub const NS_SHIM: &str = "http://jabber.org/protocol/shim";
pub const NS_ATOM: &str = "http://www.w3.org/2005/Atom";

/// Escapes text for an attribute value (quoted with `'` or `"`) or character data.
pub fn esc(s: &str) -> Cow<'_, str> {
    if !s.contains(['&', '<', '>', '\'', '"']) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\'' => out.push_str("&apos;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// How a pull asks for its page.
#[derive(Clone, Debug)]
pub enum PageAsk<'a> {
    /// RSM `<max>` and, past the first page, `<after>`.
    Rsm { max: u32, after: Option<&'a str> },
    /// `max_items="n"` (XEP-0060 §6.5.7), for services without RSM.
    MaxItems(u32),
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
    }
}

/// The `<pubsub/>` of a publish of one Atom entry with item id `id`; `padding` bytes of
/// `<content>` make the entry bigger.
pub fn publish(node: &str, id: &str, title: &str, padding: usize) -> String {
    let (node, id, title) = (esc(node), esc(id), esc(title));
    let updated = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let content = if padding > 0 { format!("<content>{}</content>", "x".repeat(padding)) } else { String::new() };
    format!(
        "<pubsub xmlns='{NS_PUBSUB}'><publish node='{node}'><item id='{id}'><entry xmlns='{NS_ATOM}'>\
         <id>urn:smartfeeds-load:{id}</id><title>{title}</title><author><name>smartfeeds-load</name></author>\
         <updated>{updated}</updated>{content}</entry></item></publish></pubsub>"
    )
}

/// The `<pubsub/>` of a node creation (XEP-0060 §8.1.3) keeping up to `max_items` items.
pub fn create_node(node: &str, max_items: u32) -> String {
    format!(
        "<pubsub xmlns='{NS_PUBSUB}'><create node='{}'/><configure><x xmlns='jabber:x:data' type='submit'>\
         <field var='FORM_TYPE' type='hidden'><value>{NS_PUBSUB}#node_config</value></field>\
         <field var='pubsub#max_items'><value>{max_items}</value></field>\
         <field var='pubsub#persist_items'><value>1</value></field></x></configure></pubsub>",
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

pub fn page_facts(reply: &Element) -> Option<PageFacts> {
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

/// What a push says: the item id it carries (published or retracted) and its SHIM headers.
#[derive(Debug, Default)]
pub struct PushFacts {
    pub item: String,
    pub total_items: Option<String>,
    pub previous_cursor: Option<String>,
    pub last_cursor: Option<String>,
}

/// `None` when the message is not a pubsub event with one item.
pub fn push_facts(message: &Element) -> Option<PushFacts> {
    let items = message.get_child("event", NS_PUBSUB_EVENT)?.get_child("items", NS_PUBSUB_EVENT)?;
    let item = items.children().find(|c| c.name() == "item" || c.name() == "retract")?;
    let mut facts = PushFacts { item: item.attr("id")?.to_string(), ..Default::default() };
    if let Some(headers) = message.get_child("headers", NS_SHIM) {
        for h in headers.children().filter(|h| h.name() == "header") {
            let slot = match h.attr("name") {
                Some("TotalItems") => &mut facts.total_items,
                Some("PreviousCursor") => &mut facts.previous_cursor,
                Some("LastCursor") => &mut facts.last_cursor,
                _ => continue,
            };
            *slot = Some(h.text());
        }
    }
    Some(facts)
}
