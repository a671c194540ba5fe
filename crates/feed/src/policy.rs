//! The rules of the service, built once at start from the configuration: feeds by name with
//! their parsed orders and bare JIDs, the admins, the limits, and the one function that
//! decides every "may this actor do this?" ([`Policy::may`]), whichever face asks.

use super::error::FeedError;
use super::node::Order;
use std::collections::{HashMap, HashSet};

/// Who may read a feed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Access {
    /// Anyone may pull and subscribe.
    #[default]
    Open,
    /// Only `allowed` JIDs and domains (plus publishers and admins).
    Whitelist,
}

/// The rules of one feed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FeedPolicy {
    pub title: Option<String>,
    pub description: Option<String>,
    /// Bare JIDs that may publish and retract.
    pub publishers: HashSet<String>,
    /// The order of the feed's node when its name gives none.
    pub order: Order,
    pub access: Access,
    /// For whitelist feeds: bare JIDs allowed to read.
    pub allowed: HashSet<String>,
    /// For whitelist feeds: domains whose every JID may read (`*@domain` in the config).
    pub allowed_domains: HashSet<String>,
    /// Pushes carry a `<body>` with the entry's title and link, for chat clients.
    pub push_body: bool,
    /// A new subscription gets the view's last published item at once (XEP-0060 §12.12,
    /// `send_last_published_item = on_sub`).
    pub last_on_subscribe: bool,
}

/// Bounds on what one request may ask of the core, and on how fast one sender may ask:
/// `[limits]` in the configuration, read as it is.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Items in a page when the request gives no `max`.
    pub default_page: u64,
    /// The largest page served; larger requests are clamped to it.
    pub max_page: u64,
    /// The largest Atom entry accepted, in bytes of XML.
    pub max_payload_bytes: usize,
    /// The most item ids one request may name.
    pub max_ids: usize,
    /// Subscriptions one bare JID may hold, across feeds.
    pub max_subscriptions_per_jid: u64,
    /// Subscriptions one feed may have, across views.
    pub max_subscriptions_per_feed: u64,
    /// Requests a second one sender (bare JID, or address for anonymous HTTP) may make
    /// before its requests wait; admins are not limited.
    pub requests_per_second: f64,
    /// Requests one sender may make at once above its rate.
    pub request_burst: f64,
    /// Requests one sender may have waiting for its rate; past that they are refused.
    pub request_backlog: f64,
    /// Requests of one sender domain served at once over XMPP; more wait for one of that
    /// domain's slots. A server may send from any number of JIDs of its domain, so the
    /// per-JID rate alone would let one domain take every request slot.
    pub requests_per_domain: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            default_page: 50,
            max_page: 500,
            max_payload_bytes: 65536,
            max_ids: 500,
            max_subscriptions_per_jid: 1000,
            max_subscriptions_per_feed: 100_000,
            requests_per_second: 200.0,
            request_burst: 400.0,
            request_backlog: 2000.0,
            requests_per_domain: 128,
        }
    }
}

/// Something an actor wants to do. Feed-scoped actions name the feed in [`Policy::may`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action<'a> {
    /// Pull items or read a node's meta-data.
    Read,
    /// Publish, update or retract items.
    Publish,
    /// Subscribe this JID (bare or full) to a view.
    Subscribe(&'a str),
    /// Remove this JID's subscription.
    Unsubscribe(&'a str),
    /// Create a feed that is not there yet.
    Create,
    /// Run the admin commands (and see them listed).
    Administer,
}

/// The service's rules; see the module docs.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// Bare JIDs that may do anything.
    pub admins: HashSet<String>,
    /// Whether an admin's publish to an unknown feed creates it.
    pub autocreate: bool,
    /// The configured feeds by name; others (created at run time) follow [`Policy::feed`]'s default.
    pub feeds: HashMap<String, FeedPolicy>,
    pub limits: Limits,
    /// Permanent push failures in a row after which a JID's subscriptions are removed.
    pub bounce_limit: u32,
}

impl Default for Policy {
    /// Nobody is an admin, no feed is configured, the default limits.
    fn default() -> Self {
        Policy {
            admins: HashSet::new(),
            autocreate: false,
            feeds: HashMap::new(),
            limits: Limits::default(),
            bounce_limit: 3,
        }
    }
}

/// The rules of a feed that is not configured: open, published to by admins only.
static UNCONFIGURED: std::sync::LazyLock<FeedPolicy> = std::sync::LazyLock::new(FeedPolicy::default);

impl Policy {
    /// The rules of a feed, configured or not.
    pub fn feed(&self, name: &str) -> &FeedPolicy {
        self.feeds.get(name).unwrap_or(&UNCONFIGURED)
    }

    /// Whether the feed is in the configuration (it exists from start-up on).
    pub fn is_configured(&self, name: &str) -> bool {
        self.feeds.contains_key(name)
    }

    pub fn is_admin(&self, actor: &str) -> bool {
        self.admins.contains(actor)
    }

    /// Whether `actor`'s requests skip the per-sender request rate (admins' do). Not an
    /// [`Action`]: every anonymous request asks, and a refusal's text would be made for
    /// each.
    pub fn is_unlimited(&self, actor: &str) -> bool {
        self.is_admin(actor)
    }

    /// The one place that decides whether `actor` (a bare JID) may do `action` on `feed`
    /// (a feed name; ignored by the actions that are not about a feed). Admins may do
    /// everything to every feed, a feed's publishers everything to it; nobody, not even an
    /// admin, subscribes or unsubscribes a JID other than their own.
    pub fn may(&self, actor: &str, action: Action<'_>, feed: &str) -> Result<(), FeedError> {
        let admin = self.is_admin(actor);
        let rules = self.feed(feed);
        let publisher = admin || rules.publishers.contains(actor);
        let read = || {
            let domain = actor.rsplit_once('@').map_or(actor, |(_, d)| d);
            let listed = rules.allowed.contains(actor) || rules.allowed_domains.contains(domain);
            if publisher || rules.access == Access::Open || listed { Ok(()) } else { Err(FeedError::ClosedNode) }
        };
        match action {
            Action::Create | Action::Administer if admin => Ok(()),
            Action::Create | Action::Administer => Err(FeedError::Forbidden(format!("{actor} is not an admin"))),
            Action::Publish if publisher => Ok(()),
            Action::Publish => Err(FeedError::Forbidden(format!("{actor} may not publish to {feed}"))),
            Action::Read => read(),
            Action::Subscribe(jid) => {
                read()?;
                if bare(jid) == actor {
                    Ok(())
                } else {
                    Err(FeedError::InvalidJid(format!("{jid} is not your own JID")))
                }
            }
            Action::Unsubscribe(jid) if bare(jid) == actor => Ok(()),
            Action::Unsubscribe(jid) => Err(FeedError::Forbidden(format!("{actor} may not unsubscribe {jid}"))),
        }
    }
}

/// The bare part of a JID string: everything before the first `/` (a localpart or domain
/// cannot hold one, a resource can).
pub fn bare(jid: &str) -> &str {
    jid.split_once('/').map_or(jid, |(b, _)| b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        let open = FeedPolicy { publishers: ["bot@x".to_string()].into(), ..Default::default() };
        let closed = FeedPolicy {
            access: Access::Whitelist,
            publishers: ["bot@x".to_string()].into(),
            allowed: ["bob@x".to_string()].into(),
            allowed_domains: ["example.net".to_string()].into(),
            ..Default::default()
        };
        Policy {
            admins: ["admin@x".to_string()].into(),
            feeds: [("open".to_string(), open), ("closed".to_string(), closed)].into(),
            ..Default::default()
        }
    }

    /// Every actor against every action on an open, a whitelist and an unconfigured feed.
    #[test]
    fn the_gate_decides_every_action() {
        use Action::*;
        let p = policy();
        // (actor, action, feed, allowed)
        let table: &[(&str, Action, &str, bool)] = &[
            // Admins may do everything, everywhere.
            ("admin@x", Read, "closed", true),
            ("admin@x", Publish, "unconfigured", true),
            ("admin@x", Create, "", true),
            ("admin@x", Administer, "", true),
            ("admin@x", Subscribe("admin@x/r"), "closed", true),
            ("admin@x", Subscribe("someone@else"), "open", false),
            ("admin@x", Unsubscribe("someone@else"), "open", false),
            // Publishers publish to their feed only, and read it even when closed.
            ("bot@x", Publish, "open", true),
            ("bot@x", Publish, "unconfigured", false),
            ("bot@x", Read, "closed", true),
            ("bot@x", Create, "", false),
            ("bot@x", Administer, "", false),
            // Anyone reads and subscribes to open feeds, configured or not, but never publishes.
            ("eve@y", Read, "open", true),
            ("eve@y", Read, "unconfigured", true),
            ("eve@y", Subscribe("eve@y/phone"), "open", true),
            ("eve@y", Publish, "open", false),
            // Whitelists: listed JIDs and whole domains; nobody else.
            ("bob@x", Read, "closed", true),
            ("ann@example.net", Read, "closed", true),
            ("ann@example.net", Subscribe("ann@example.net"), "closed", true),
            ("eve@y", Read, "closed", false),
            ("eve@y", Subscribe("eve@y"), "closed", false),
            ("example.net", Read, "closed", true),
            ("eve@sub.example.net", Read, "closed", false),
            // Only one's own JID is subscribed or unsubscribed.
            ("eve@y", Subscribe("bob@x"), "open", false),
            ("eve@y", Unsubscribe("eve@y/r"), "closed", true),
            ("eve@y", Unsubscribe("bob@x"), "open", false),
        ];
        for (actor, action, feed, allowed) in table {
            let got = p.may(actor, *action, feed);
            assert_eq!(got.is_ok(), *allowed, "{actor} {action:?} {feed}: {got:?}");
        }
        // Only admins skip the request rate.
        assert!(p.is_unlimited("admin@x"));
        assert!(!p.is_unlimited("bot@x") && !p.is_unlimited("eve@y") && !p.is_unlimited(""));
    }

    #[test]
    fn refusals_keep_their_xep_0060_meaning() {
        let p = policy();
        assert_eq!(p.may("eve@y", Action::Read, "closed"), Err(FeedError::ClosedNode));
        assert!(matches!(p.may("eve@y", Action::Publish, "open"), Err(FeedError::Forbidden(_))));
        assert!(matches!(p.may("eve@y", Action::Subscribe("bob@x"), "open"), Err(FeedError::InvalidJid(_))));
        // A closed feed says so before anything about the JID.
        assert_eq!(p.may("eve@y", Action::Subscribe("bob@x"), "closed"), Err(FeedError::ClosedNode));
        assert!(matches!(p.may("eve@y", Action::Unsubscribe("bob@x"), "open"), Err(FeedError::Forbidden(_))));
    }
}
