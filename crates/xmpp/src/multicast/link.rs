//! Multicast on one connection to the server: what [`discovery`](super::discovery) found,
//! how the pusher uses it ([`plan`]) and what a refusal changes
//! ([`Fallback`]), kept together because all three start again at every login (a new
//! connection may meet a reconfigured server).
//!
//! The dispatcher drives it with what the link reads (`link_up`, iq answers, error messages
//! from the service); the pusher asks it to plan each change's pushes. One `std` mutex
//! guards it: every call is short and never awaits.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use jid::Jid;
use xmpp_parsers::disco::{DiscoInfoResult, DiscoItemsResult};
use xmpp_parsers::iq::Iq;
use xmpp_parsers::ns;

use super::{Discovery, Fallback, Limits, Outgoing, Query, Refusal, Service, plan};
use crate::payloads::Push;

/// Stanza ids of our discovery queries start with this, so their answers are told apart
/// from every other iq result.
const QUERY_ID: &str = "mc-disco-";
/// How long unanswered discovery queries are asked again on one connection.
const ASK_FOR: std::time::Duration = std::time::Duration::from_secs(20);
/// How often that is: once every `DISCOVERY_RETRY` for [`ASK_FOR`].
const ASK_AGAIN: u32 = (ASK_FOR.as_millis() / crate::dispatch::DISCOVERY_RETRY.as_millis()) as u32;
/// Stanza ids of our probes (see [`LinkMulticast::probe`]).
const PROBE_ID: &str = "mc-probe-";

/// The multicast state of the component's link. See the module docs.
pub struct LinkMulticast {
    /// Whether to look for a service at all (`push.multicast`).
    enabled: bool,
    me: Jid,
    /// The server's domain, where discovery starts.
    server: String,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The search on this connection, while it runs.
    discovery: Option<Discovery>,
    /// Queries sent and not answered, by stanza id.
    asked: HashMap<String, Query>,
    queries: u64,
    /// Times the unanswered queries were asked again on this connection.
    asked_again: u32,
    /// The service found on this connection.
    service: Option<Service>,
    fallback: Fallback,
}

/// What [`LinkMulticast::answer`] made of an iq.
#[derive(Debug, PartialEq)]
pub enum Answer {
    /// Not an answer to one of our queries: the iq is for the router.
    NotOurs,
    /// Taken; these queries go out next.
    Taken(Vec<Iq>),
    /// The service answered the probe with this stanza id.
    Settled(String),
}

impl LinkMulticast {
    /// The state of the component `me`, whose server is the parent domain of `me` (the
    /// domain the link pings); `enabled: false` never looks for a service.
    pub fn new(enabled: bool, me: Jid, server: String) -> LinkMulticast {
        LinkMulticast { enabled, me, server, state: Mutex::new(State::default()) }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new login: everything learnt on the last connection is forgotten, and the
    /// discovery queries to send are returned.
    pub fn link_up(&self) -> Vec<Iq> {
        let mut state = self.state();
        *state = State::default();
        if !self.enabled {
            return Vec::new();
        }
        let (discovery, queries) = Discovery::start(self.me.as_str(), &self.server);
        state.discovery = Some(discovery);
        self.ask(&mut state, queries)
    }

    /// The discovery queries still unanswered, asked again under new ids (at most
    /// [`ASK_AGAIN`] times per connection). With several instances on one domain, ejabberd
    /// routes an answer to any of them, so an instance's answer may go to another; a query
    /// asked again reaches us sooner or later, or another instance's answer about the same
    /// JID does (see [`LinkMulticast::answer`]).
    pub fn ask_again(&self) -> Vec<Iq> {
        let mut state = self.state();
        if state.discovery.is_none() || state.asked.is_empty() {
            return Vec::new();
        }
        if state.asked_again >= ASK_AGAIN {
            tracing::info!("no answer to the multicast discovery: one push message per subscriber");
            state.discovery = None;
            state.asked.clear();
            return Vec::new();
        }
        state.asked_again += 1;
        let queries: Vec<Query> = std::mem::take(&mut state.asked).into_values().collect();
        self.ask(&mut state, queries)
    }

    /// The link is down: no multicast until the next login has found the service again.
    pub fn link_down(&self) {
        *self.state() = State::default();
    }

    fn ask(&self, state: &mut State, queries: Vec<Query>) -> Vec<Iq> {
        let mut iqs = Vec::new();
        for query in queries {
            state.queries += 1;
            let id = format!("{QUERY_ID}{}", state.queries);
            match query.iq(&self.me, id.clone()) {
                Ok(iq) => {
                    state.asked.insert(id, query);
                    iqs.push(iq);
                }
                Err(e) => {
                    // A disco item whose JID does not parse: it is no service of ours.
                    tracing::debug!(?query, error = %e, "not asking a malformed JID");
                    if let (Some(d), Query::Info(jid)) = (state.discovery.as_mut(), &query) {
                        d.info(jid, None);
                    }
                }
            }
        }
        iqs
    }

    /// Takes `iq` if it answers a discovery query (a result or an error).
    ///
    /// A result counts for what it answers, the disco#info or disco#items of its sender,
    /// whichever stanza id it carries: instances on one domain ask as the same JID, so
    /// another instance's answer (which ejabberd may route to us) is the one we would get,
    /// and every instance numbers its queries alike, so an id alone could name another
    /// JID's query. An error counts only for the query of its id, and only from that JID.
    pub fn answer(&self, iq: &Iq) -> Answer {
        let (id, from, payload) = match iq {
            Iq::Result { id, from, payload, .. } => (id, from, payload.as_ref()),
            Iq::Error { id, from, .. } => (id, from, None),
            Iq::Get { .. } | Iq::Set { .. } => return Answer::NotOurs,
        };
        if id.starts_with(PROBE_ID) {
            return Answer::Settled(id.clone());
        }
        if !id.starts_with(QUERY_ID) {
            return Answer::NotOurs;
        }
        // The server stamps its own answers; one without a sender is the server's.
        let from = from.as_ref().map_or(self.server.as_str(), Jid::as_str);
        let answered = match payload {
            Some(p) if p.is("query", ns::DISCO_INFO) => Some(Query::Info(from.to_string())),
            Some(p) if p.is("query", ns::DISCO_ITEMS) => Some(Query::Items(from.to_string())),
            _ => None,
        };
        let mut state = self.state();
        let key = match answered {
            Some(q) => state.asked.iter().find(|(_, asked)| **asked == q).map(|(k, _)| k.clone()),
            None => state.asked.get(id).filter(|q| q.jid() == from).map(|_| id.clone()),
        };
        let Some(query) = key.and_then(|k| state.asked.remove(&k)) else { return Answer::Taken(Vec::new()) };
        let Some(discovery) = state.discovery.as_mut() else { return Answer::Taken(Vec::new()) };
        let next = match &query {
            Query::Info(jid) => {
                let info = payload.and_then(|p| DiscoInfoResult::try_from(p.clone()).ok());
                discovery.info(jid, info.as_ref());
                Vec::new()
            }
            Query::Items(jid) => {
                let items = payload.and_then(|p| DiscoItemsResult::try_from(p.clone()).ok());
                discovery.items(jid, items.as_ref())
            }
        };
        let outcome = discovery.outcome();
        let iqs = self.ask(&mut state, next);
        if let Some(found) = outcome {
            state.discovery = None;
            state.asked.clear();
            match &found {
                Some(s) => tracing::info!(service = %s.jid, max_addresses = ?s.max_addresses,
                    "multicast service found: one push message per view and change"),
                None => tracing::info!("no multicast service on the server: one push message per subscriber"),
            }
            state.service = found;
        }
        Answer::Taken(iqs)
    }

    /// The service in use, if any (none once it refused a message on this connection).
    pub fn service(&self) -> Option<Service> {
        let state = self.state();
        state.service.clone().filter(|_| state.fallback.usable())
    }

    /// The stanzas for one change's `pushes`: multicast batches through the service while
    /// there is one, else one stanza each. Batches are remembered for a refusal.
    pub fn plan(&self, pushes: Vec<Push>, limits: Limits) -> Vec<Outgoing> {
        let mut state = self.state();
        let Some(service) = state.service.clone().filter(|_| state.fallback.usable()) else {
            return pushes.into_iter().map(Outgoing::Single).collect();
        };
        let limits = Limits { max_addresses: service.max_addresses, ..limits };
        let out = plan(pushes, &service.jid, &limits);
        let now = Instant::now();
        for o in &out {
            if let Outgoing::Multicast(m) = o {
                state.fallback.sent(m.clone(), now);
            }
        }
        out
    }

    /// A disco#info to the service found on this connection (refused or not), with a fresh
    /// id: sent behind multicast messages, its answer says the service has answered them
    /// all. `None` without a service.
    pub fn probe(&self) -> Option<Iq> {
        let mut state = self.state();
        let jid = state.service.as_ref()?.jid.clone();
        state.queries += 1;
        Query::Info(jid).iq(&self.me, format!("{PROBE_ID}{}", state.queries)).ok()
    }

    /// Whether an error message from `from` is the service refusing a message of ours
    /// (rather than a recipient's bounce).
    pub fn is_service(&self, from: &Jid) -> bool {
        self.state().service.as_ref().is_some_and(|s| s.jid == from.as_str())
    }

    /// The service refused the message `id` with `condition`: what to resend, and
    /// whether this is the first refusal on this connection. `None` if `id` is not one of
    /// our multicast messages.
    pub fn refusal(&self, id: &str, condition: &str) -> Option<Refusal> {
        self.state().fallback.refusal(id, condition, Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::multicast::test_body;
    use minidom::Element;

    fn result(to_answer: &Iq, from: &str, xml: &str) -> Iq {
        let id = match to_answer {
            Iq::Get { id, .. } => id.clone(),
            other => panic!("{other:?}"),
        };
        let payload: Element = xml.parse().unwrap();
        Iq::Result { from: Some(Jid::new(from).unwrap()), to: None, id, payload: Some(payload) }
    }

    fn pushes(n: usize) -> Vec<Push> {
        let body = test_body("v");
        (0..n).map(|i| Push { to: format!("u{i}@localhost"), id: format!("push-{i}"), body: body.clone() }).collect()
    }

    const NO_FEATURES: &str =
        "<query xmlns='http://jabber.org/protocol/disco#info'><identity category='server' type='im'/></query>";

    #[test]
    fn finds_the_service_through_the_servers_items_then_multicasts_until_refused() {
        let mc = LinkMulticast::new(true, Jid::new("feeds.localhost").unwrap(), "localhost".into());
        assert_eq!(mc.plan(pushes(3), Limits::default()).len(), 3, "no service yet: one by one");
        let first = mc.link_up();
        assert_eq!(first.len(), 2);
        assert_eq!(mc.answer(&result(&first[0], "localhost", NO_FEATURES)), Answer::Taken(Vec::new()));
        let items = "<query xmlns='http://jabber.org/protocol/disco#items'>\
            <item jid='feeds.localhost'/><item jid='multicast.localhost'/></query>";
        let Answer::Taken(next) = mc.answer(&result(&first[1], "localhost", items)) else { panic!() };
        assert_eq!(next.len(), 1, "only multicast.localhost is asked");
        let info = "<query xmlns='http://jabber.org/protocol/disco#info'>\
            <identity category='service' type='multicast'/>\
            <feature var='http://jabber.org/protocol/address'/></query>";
        assert_eq!(mc.answer(&result(&next[0], "multicast.localhost", info)), Answer::Taken(Vec::new()));
        assert_eq!(mc.service().map(|s| s.jid), Some("multicast.localhost".to_string()));

        let out = mc.plan(pushes(3), Limits::default());
        let Outgoing::Multicast(m) = &out[0] else { panic!("{out:?}") };
        assert_eq!(m.recipients.len(), 3);
        assert!(mc.is_service(&Jid::new("multicast.localhost").unwrap()));
        let refusal = mc.refusal(&m.id, "forbidden").unwrap();
        assert!(refusal.first);
        assert_eq!(refusal.resend.len(), 3);
        assert!(mc.service().is_none());
        assert!(matches!(mc.plan(pushes(3), Limits::default())[0], Outgoing::Single(_)));
        // The probe goes to the service, and its answer is told apart.
        let probe = mc.probe().unwrap();
        assert_eq!(probe.to().map(|j| j.to_string()), Some("multicast.localhost".to_string()));
        let answer = result(&probe, "multicast.localhost", info);
        assert!(matches!(mc.answer(&answer), Answer::Settled(id) if id.starts_with(PROBE_ID)));
        // A new login looks again, from nothing.
        assert_eq!(mc.link_up().len(), 2);
        let stray = Iq::Result { from: None, to: None, id: "keepalive-1".into(), payload: None };
        assert_eq!(mc.answer(&stray), Answer::NotOurs);
    }

    #[test]
    fn unanswered_queries_are_asked_again_under_new_ids_a_bounded_number_of_times() {
        let mc = LinkMulticast::new(true, Jid::new("feeds.localhost").unwrap(), "localhost".into());
        assert!(mc.ask_again().is_empty(), "nothing asked yet");
        let first = mc.link_up();
        // The items answer went to another instance; the info answer came.
        assert_eq!(mc.answer(&result(&first[0], "localhost", NO_FEATURES)), Answer::Taken(Vec::new()));
        let again = mc.ask_again();
        assert_eq!(again.len(), 1, "only the unanswered query");
        let id = |iq: &Iq| match iq {
            Iq::Get { id, .. } => id.clone(),
            other => panic!("{other:?}"),
        };
        assert_ne!(id(&again[0]), id(&first[1]));
        // A late answer to the old id counts as well as one to the new id: once.
        let items = "<query xmlns='http://jabber.org/protocol/disco#items'><item jid='multicast.localhost'/></query>";
        let Answer::Taken(next) = mc.answer(&result(&first[1], "localhost", items)) else { panic!() };
        assert_eq!(next.len(), 1, "multicast.localhost is asked");
        assert_eq!(mc.answer(&result(&again[0], "localhost", items)), Answer::Taken(Vec::new()));
        // Never answered: asked again ASK_AGAIN times, then given up (one message each).
        for _ in 0..ASK_AGAIN - 1 {
            assert_eq!(mc.ask_again().len(), 1);
        }
        assert!(mc.ask_again().is_empty());
        assert!(mc.ask_again().is_empty());
        assert!(mc.service().is_none());
    }

    #[test]
    fn another_instances_answers_count_for_what_they_answer_never_for_their_id() {
        let mc = LinkMulticast::new(true, Jid::new("feeds.localhost").unwrap(), "localhost".into());
        let first = mc.link_up();
        assert_eq!(mc.answer(&result(&first[0], "localhost", NO_FEATURES)), Answer::Taken(Vec::new()));
        let items = "<query xmlns='http://jabber.org/protocol/disco#items'>\
            <item jid='proxy.localhost'/><item jid='multicast.localhost'/></query>";
        let Answer::Taken(next) = mc.answer(&result(&first[1], "localhost", items)) else { panic!() };
        assert_eq!(next.len(), 2);
        let (proxy, multicast) = match next[0].to().map(|j| j.to_string()).as_deref() {
            Some("proxy.localhost") => (&next[0], &next[1]),
            _ => (&next[1], &next[0]),
        };
        let info = "<query xmlns='http://jabber.org/protocol/disco#info'>\
            <identity category='service' type='multicast'/>\
            <feature var='http://jabber.org/protocol/address'/></query>";
        // Another instance asked the multicast service under the id we gave the proxy:
        // its answer is the multicast service's, whatever its id says.
        assert_eq!(mc.answer(&result(proxy, "multicast.localhost", info)), Answer::Taken(Vec::new()));
        assert_eq!(mc.answer(&result(proxy, "multicast.localhost", info)), Answer::Taken(Vec::new()));
        assert_eq!(mc.answer(&result(multicast, "proxy.localhost", NO_FEATURES)), Answer::Taken(Vec::new()));
        assert_eq!(mc.service().map(|s| s.jid), Some("multicast.localhost".to_string()));

        // An error counts only from the JID its id asked.
        let first = mc.link_up();
        let error = |to_answer: &Iq, from: &str| {
            let Iq::Get { id, .. } = to_answer else { panic!() };
            let e = xmpp_parsers::stanza_error::StanzaError::new(
                xmpp_parsers::stanza_error::ErrorType::Cancel,
                xmpp_parsers::stanza_error::DefinedCondition::ServiceUnavailable,
                "en",
                "",
            );
            Iq::Error { from: Some(Jid::new(from).unwrap()), to: None, id: id.clone(), error: e, payload: None }
        };
        let items = "<query xmlns='http://jabber.org/protocol/disco#items'><item jid='multicast.localhost'/></query>";
        let Answer::Taken(next) = mc.answer(&result(&first[1], "localhost", items)) else { panic!() };
        assert_eq!(mc.answer(&error(&next[0], "proxy.localhost")), Answer::Taken(Vec::new()));
        let again = mc.ask_again();
        assert_eq!(again.len(), 2, "the info of localhost and of multicast.localhost");
        let asked = again.iter().find(|iq| iq.to().is_some_and(|j| j.as_str() == "multicast.localhost")).unwrap();
        assert_eq!(mc.answer(&error(asked, "multicast.localhost")), Answer::Taken(Vec::new()));
        assert_eq!(mc.answer(&result(&first[0], "localhost", NO_FEATURES)), Answer::Taken(Vec::new()));
        assert!(mc.service().is_none(), "no service: localhost has none and multicast.localhost failed");
        assert!(mc.ask_again().is_empty(), "the search is over");
    }

    #[test]
    fn disabled_never_asks() {
        let mc = LinkMulticast::new(false, Jid::new("feeds.localhost").unwrap(), "localhost".into());
        assert!(mc.link_up().is_empty());
        assert!(mc.service().is_none());
    }
}
