//! Finding the server's multicast service (XEP-0033 §2.1, with XEP-0030): the server's
//! own domain may offer it, or one of the services disco#items lists there (ejabberd's
//! mod_multicast and our Prosody module both live at `multicast.DOMAIN`). Whoever answers
//! disco#info with the `http://jabber.org/protocol/address` feature is the service; the
//! `message` field of its XEP-0128 form (FORM_TYPE `http://jabber.org/protocol/address`)
//! is how many addresses one message may carry.
//!
//! Written without I/O: [`Discovery`] says which queries to send and takes the answers as
//! they come (an error answer as `None`), so the link decides how requests travel and how
//! long to wait, and the logic is tested here on literal answers.

use std::collections::BTreeSet;

use jid::Jid;
use xmpp_parsers::disco::{DiscoInfoQuery, DiscoInfoResult, DiscoItemsQuery, DiscoItemsResult};
use xmpp_parsers::iq::Iq;

use crate::payloads::addresses::ADDRESS;

/// What to assume when a service advertises no `message` limit: ejabberd's default for
/// senders that are not its own users, which a component is.
pub const DEFAULT_MAX_ADDRESSES: usize = 20;

/// A multicast service that was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    /// Its JID: multicast messages go there.
    pub jid: String,
    /// Addresses per message; `None` when it advertises `infinite`.
    pub max_addresses: Option<usize>,
}

/// A query to send.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Query {
    /// disco#info to this JID.
    Info(String),
    /// disco#items to this JID.
    Items(String),
}

impl Query {
    /// The JID asked.
    pub fn jid(&self) -> &str {
        match self {
            Query::Info(jid) | Query::Items(jid) => jid,
        }
    }

    /// The query as an iq `get` from `from` with stanza id `id`.
    pub fn iq(&self, from: &Jid, id: String) -> Result<Iq, jid::Error> {
        let iq = match self {
            Query::Info(to) => Iq::from_get(id, DiscoInfoQuery { node: None }).with_to(Jid::new(to)?),
            Query::Items(to) => Iq::from_get(id, DiscoItemsQuery { node: None, rsm: None }).with_to(Jid::new(to)?),
        };
        Ok(iq.with_from(from.clone()))
    }
}

/// The search in progress. See the module docs.
#[derive(Debug)]
pub struct Discovery {
    me: String,
    server: String,
    /// disco#info answers still awaited, by JID.
    info_waiting: BTreeSet<String>,
    /// The server's disco#items answer is still awaited.
    items_waiting: bool,
    /// Items listed by the server, in its order, with whether they offer multicast once known.
    candidates: Vec<(String, Option<Option<Service>>)>,
    /// The server's own answer, once known.
    server_offers: Option<Option<Service>>,
}

impl Discovery {
    /// Starts looking on `server` (the server's domain) for the component `me`; the
    /// queries to send first.
    pub fn start(me: &str, server: &str) -> (Discovery, Vec<Query>) {
        let d = Discovery {
            me: me.to_string(),
            server: server.to_string(),
            info_waiting: [server.to_string()].into(),
            items_waiting: true,
            candidates: Vec::new(),
            server_offers: None,
        };
        (d, vec![Query::Info(server.to_string()), Query::Items(server.to_string())])
    }

    /// The disco#info answer of `from` (`None`: an error). Nothing more to send.
    pub fn info(&mut self, from: &str, answer: Option<&DiscoInfoResult>) {
        if !self.info_waiting.remove(from) {
            return;
        }
        let offer = answer.and_then(|info| offers(from, info));
        if from == self.server {
            self.server_offers = Some(offer);
        } else if let Some(c) = self.candidates.iter_mut().find(|(jid, _)| jid == from) {
            c.1 = Some(offer);
        }
    }

    /// The server's disco#items answer (`None`: an error); the disco#info queries it calls
    /// for. Our own domain and items with a node are not services to ask.
    pub fn items(&mut self, from: &str, answer: Option<&DiscoItemsResult>) -> Vec<Query> {
        if from != self.server || !self.items_waiting {
            return Vec::new();
        }
        self.items_waiting = false;
        let mut queries = Vec::new();
        for item in answer.map(|a| a.items.as_slice()).unwrap_or_default() {
            let jid = item.jid.to_string();
            if item.node.is_some() || jid == self.me || jid == self.server || !self.info_waiting.insert(jid.clone()) {
                continue;
            }
            self.candidates.push((jid.clone(), None));
            queries.push(Query::Info(jid));
        }
        queries
    }

    /// `None` while the outcome still depends on answers not in; then the service, or
    /// `Some(None)` when there is none. The server itself is preferred, then the first
    /// item in the server's order that offers it.
    pub fn outcome(&self) -> Option<Option<Service>> {
        match &self.server_offers {
            Some(Some(service)) => return Some(Some(service.clone())),
            Some(None) => {}
            None => return None,
        }
        if self.items_waiting {
            return None;
        }
        for (_, offer) in &self.candidates {
            match offer {
                Some(Some(service)) => return Some(Some(service.clone())),
                Some(None) => continue,
                None => return None,
            }
        }
        Some(None)
    }

    /// The JIDs whose disco#info is still awaited (for a caller that gives up on them).
    pub fn waiting(&self) -> impl Iterator<Item = &str> {
        self.info_waiting.iter().map(String::as_str)
    }
}

/// Whether `info` (the disco#info of `jid`) offers multicast, and with what limit.
pub fn offers(jid: &str, info: &DiscoInfoResult) -> Option<Service> {
    if !info.features.contains(ADDRESS) {
        return None;
    }
    let limit = info
        .extensions
        .iter()
        .filter(|form| form.form_type() == Some(ADDRESS))
        .flat_map(|form| form.fields.iter())
        .find(|field| field.var.as_deref() == Some("message"))
        .and_then(|field| field.values.first());
    let max_addresses = match limit.map(|v| v.trim()) {
        None => Some(DEFAULT_MAX_ADDRESSES),
        Some("infinite") => None,
        Some(n) => Some(n.parse::<usize>().ok().filter(|&n| n > 0).unwrap_or(DEFAULT_MAX_ADDRESSES)),
    };
    Some(Service { jid: jid.to_string(), max_addresses })
}

#[cfg(test)]
mod tests {
    use super::*;
    use minidom::Element;

    fn info(xml: &str) -> DiscoInfoResult {
        let el: Element = xml.parse().unwrap();
        DiscoInfoResult::try_from(el).unwrap()
    }

    fn items(jids: &[&str]) -> DiscoItemsResult {
        let items: String = jids.iter().map(|j| format!("<item jid='{j}'/>")).collect();
        let el: Element =
            format!("<query xmlns='http://jabber.org/protocol/disco#items'>{items}</query>").parse().unwrap();
        DiscoItemsResult::try_from(el).unwrap()
    }

    /// ejabberd 23.01's mod_multicast with `limits: remote: message: infinite`.
    const EJABBERD: &str = "<query xmlns='http://jabber.org/protocol/disco#info'>\
        <identity name='Multicast' type='multicast' category='service'/>\
        <feature var='http://jabber.org/protocol/disco#info'/><feature var='http://jabber.org/protocol/address'/>\
        <x type='result' xmlns='jabber:x:data'><field var='FORM_TYPE' type='hidden'>\
        <value>http://jabber.org/protocol/address</value></field><field var='message'><value>infinite</value></field>\
        </x></query>";
    /// prosody/mod_component_multicast.lua with its default limit.
    const PROSODY: &str = "<query xmlns='http://jabber.org/protocol/disco#info'>\
        <identity name='Multicast for components' category='service' type='multicast'/>\
        <feature var='http://jabber.org/protocol/address'/><feature var='http://jabber.org/protocol/disco#info'/>\
        <x type='result' xmlns='jabber:x:data'><field var='FORM_TYPE' type='hidden'>\
        <value>http://jabber.org/protocol/address</value></field>\
        <field var='message' type='text-single'><value>10000</value></field></x></query>";
    const PLAIN: &str = "<query xmlns='http://jabber.org/protocol/disco#info'>\
        <identity category='server' type='im'/><feature var='http://jabber.org/protocol/disco#info'/></query>";

    #[test]
    fn reads_the_limit_of_both_servers() {
        assert_eq!(offers("m", &info(EJABBERD)), Some(Service { jid: "m".into(), max_addresses: None }));
        assert_eq!(offers("m", &info(PROSODY)), Some(Service { jid: "m".into(), max_addresses: Some(10_000) }));
        assert_eq!(offers("m", &info(PLAIN)), None);
        let no_form = "<query xmlns='http://jabber.org/protocol/disco#info'>\
            <feature var='http://jabber.org/protocol/address'/></query>";
        assert_eq!(offers("m", &info(no_form)).unwrap().max_addresses, Some(DEFAULT_MAX_ADDRESSES));
    }

    #[test]
    fn finds_the_service_among_the_servers_items() {
        let (mut d, first) = Discovery::start("feeds.localhost", "localhost");
        assert_eq!(first, [Query::Info("localhost".into()), Query::Items("localhost".into())]);
        d.info("localhost", Some(&info(PLAIN)));
        assert_eq!(d.outcome(), None);
        let next = d.items(
            "localhost",
            Some(&items(&["feeds.localhost", "pubsub.localhost", "multicast.localhost", "bench.localhost"])),
        );
        assert_eq!(next, ["pubsub.localhost", "multicast.localhost", "bench.localhost"].map(|j| Query::Info(j.into())));
        d.info("multicast.localhost", Some(&info(PROSODY)));
        // pubsub.localhost comes first in the server's order and has not answered.
        assert_eq!(d.outcome(), None);
        d.info("pubsub.localhost", Some(&info(PLAIN)));
        let found = Some(Service { jid: "multicast.localhost".into(), max_addresses: Some(10_000) });
        assert_eq!(d.outcome(), Some(found.clone()));
        // bench.localhost (another component) answers with an error, late: no change.
        d.info("bench.localhost", None);
        assert_eq!(d.outcome(), Some(found));
        assert_eq!(d.waiting().count(), 0);
    }

    #[test]
    fn the_server_itself_wins_and_nothing_found_is_an_answer() {
        let (mut d, _) = Discovery::start("feeds.localhost", "localhost");
        d.info("localhost", Some(&info(EJABBERD)));
        assert_eq!(d.outcome(), Some(Some(Service { jid: "localhost".into(), max_addresses: None })));

        let (mut d, _) = Discovery::start("feeds.localhost", "localhost");
        d.info("localhost", None);
        assert_eq!(d.items("localhost", Some(&items(&["pubsub.localhost"]))), [Query::Info("pubsub.localhost".into())]);
        assert_eq!(d.outcome(), None);
        d.info("pubsub.localhost", Some(&info(PLAIN)));
        assert_eq!(d.outcome(), Some(None));

        // An error for the items: only the server's own answer counts.
        let (mut d, _) = Discovery::start("feeds.localhost", "localhost");
        d.info("localhost", Some(&info(PLAIN)));
        assert!(d.items("localhost", None).is_empty());
        assert_eq!(d.outcome(), Some(None));
        // Answers nobody asked for change nothing.
        d.info("stranger.example", Some(&info(PROSODY)));
        assert!(d.items("stranger.example", Some(&items(&["x.example"]))).is_empty());
        assert_eq!(d.outcome(), Some(None));
    }

    #[test]
    fn queries_are_iqs_from_the_component() {
        let me = Jid::new("feeds.localhost").unwrap();
        let iq = Query::Items("localhost".into()).iq(&me, "d1".into()).unwrap();
        let el = Element::from(iq);
        assert_eq!(el.attr("to"), Some("localhost"));
        assert_eq!(el.attr("from"), Some("feeds.localhost"));
        assert_eq!(el.attr("type"), Some("get"));
        assert!(el.get_child("query", "http://jabber.org/protocol/disco#items").is_some());
        let el = Element::from(Query::Info("m.localhost".into()).iq(&me, "d2".into()).unwrap());
        assert!(el.get_child("query", "http://jabber.org/protocol/disco#info").is_some());
    }
}
