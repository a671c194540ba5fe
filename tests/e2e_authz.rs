//! Authorisation, table-driven, end to end (SPEC §4 whitelist feeds, §5 subscribe rules, §6
//! publishers and admins, §7 discovery), against a real Prosody and the real `smartfeeds`:
//! every actor × every action × an open feed, a whitelist feed and a domain-whitelist feed,
//! with the exact outcome SPEC gives; then that nothing of a whitelist feed leaks to someone
//! not allowed, through disco, pushes or error texts.
//!
//! Actors: the admin (`admin@localhost`, global `admins`), the feeds' publisher
//! (`bot@localhost`), the whitelist member (`bob@localhost`), another local user
//! (`alice@localhost`), and a user of another domain, `sub1@bench.localhost`, spoken for by a
//! raw XEP-0114 component connected as `bench.localhost` (Prosody has only `localhost`; a
//! component may send from any JID of its domain).

use std::collections::{BTreeMap, HashSet};
use std::ops::DerefMut;
use std::time::Duration;

use minidom::Element;
use testkit::fixture::Fixture;
use testkit::pubsub::*;
use testkit::push::{PUBSUB_EVENT, subscribe_iq, subscriptions, unsubscribe_iq};
use testkit::{Component, Connection, error_condition, set_attr, stanza_type, to_xml, xml};

const TABLES: &str = r#"
[[feeds]]
name = "open"
title = "Open feed"
publishers = ["bot@localhost"]

[[feeds]]
name = "closed"
title = "Closed feed"
description = "Members only"
publishers = ["bot@localhost"]
access = "whitelist"
allowed = ["bob@localhost"]

[[feeds]]
name = "domain"
title = "Domain feed"
publishers = ["bot@localhost"]
access = "whitelist"
allowed = ["*@bench.localhost"]
"#;

const REMOTE: &str = "sub1@bench.localhost";
/// The view bob and alice subscribe to before the table, for others to try to remove.
const SUBSCRIBED_VIEW: &str = "open?order=modified";
/// Items the closed feed holds before the table runs: distinctive ids and titles to look for
/// in everything a non-member receives.
const SECRET_ITEMS: usize = 13;

fn secret_id(i: usize) -> String {
    format!("zq-secret-{i:02}")
}

fn secret_title(i: usize) -> String {
    format!("Confidential memo {i:02} xyzzy")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Role {
    Admin,
    Publisher,
    Member,
    Local,
    Remote,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Feed {
    Open,
    Closed,
    Domain,
}

impl Feed {
    fn name(self) -> &'static str {
        match self {
            Feed::Open => "open",
            Feed::Closed => "closed",
            Feed::Domain => "domain",
        }
    }

    /// SPEC §4: who may read (pull, subscribe, node meta-data): anyone on an open feed; on a
    /// whitelist feed the `allowed` JIDs or domains, the feed's publishers and the admins.
    fn readable_by(self, role: Role) -> bool {
        matches!(
            (self, role),
            (Feed::Open, _)
                | (_, Role::Admin | Role::Publisher)
                | (Feed::Closed, Role::Member)
                | (Feed::Domain, Role::Remote)
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Action {
    Publish,
    Update,
    Retract,
    Pull,
    SubscribeSelf,
    SubscribeOther,
    UnsubscribeOther,
    DiscoInfo,
    DiscoItemsNode,
}

const ACTIONS: [Action; 9] = [
    Action::Publish,
    Action::Update,
    Action::Retract,
    Action::Pull,
    Action::SubscribeSelf,
    Action::SubscribeOther,
    Action::UnsubscribeOther,
    Action::DiscoInfo,
    Action::DiscoItemsNode,
];

#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    Ok,
    /// Defined condition and pubsub#errors condition.
    Err(String, Option<String>),
}

fn err(condition: &str, app: Option<&str>) -> Outcome {
    Outcome::Err(condition.to_string(), app.map(String::from))
}

/// What SPEC says `role` gets for `action` on `feed`.
fn expected(feed: Feed, role: Role, action: Action) -> Outcome {
    let may_publish = matches!(role, Role::Admin | Role::Publisher);
    let closed = err("not-allowed", Some("closed-node"));
    match action {
        // §6: publishers and admins; `forbidden` otherwise, whatever the feed's access.
        Action::Publish | Action::Update | Action::Retract if may_publish => Outcome::Ok,
        Action::Publish | Action::Update | Action::Retract => err("forbidden", None),
        // §4, §7.
        Action::Pull | Action::SubscribeSelf | Action::DiscoInfo | Action::DiscoItemsNode => {
            if feed.readable_by(role) {
                Outcome::Ok
            } else {
                closed
            }
        }
        // §5: only one's own JID, for everyone (admins too); a closed feed says closed first.
        Action::SubscribeOther if feed.readable_by(role) => err("bad-request", Some("invalid-jid")),
        Action::SubscribeOther => closed,
        Action::UnsubscribeOther => err("forbidden", None),
    }
}

struct Actor {
    role: Role,
    bare: String,
    /// Set as `from` on what this actor sends (the remote user's JID on the bench component).
    from: Option<String>,
    conn: Box<dyn DerefMut<Target = Connection> + Send>,
}

impl Actor {
    async fn iq(&mut self, mut iq: Element) -> Element {
        if let Some(from) = &self.from {
            set_attr(&mut iq, "from", from);
        }
        self.conn.iq(iq).await
    }
}

/// Someone else's JID for `role` to (un)subscribe: bob's, or alice's for bob.
fn other(role: Role) -> &'static str {
    if role == Role::Member { "alice@localhost" } else { "bob@localhost" }
}

fn tag(role: Role) -> String {
    format!("{role:?}").to_lowercase()
}

fn request(feed: Feed, actor: &Actor, action: Action) -> Element {
    let node = feed.name();
    let t = tag(actor.role);
    match action {
        Action::Publish => {
            let id = format!("new-{t}");
            publish_iq(node, Some(&id), &entry(&format!("urn:{node}:{id}"), &format!("new by {t}"), None, &[]))
        }
        Action::Update => {
            let id = format!("base-{t}");
            publish_iq(node, Some(&id), &entry(&format!("urn:{node}:{id}"), &format!("updated by {t}"), None, &[]))
        }
        Action::Retract => retract_iq(node, &format!("victim-{t}")),
        Action::Pull => Pull::node(node).max(5).iq(),
        Action::SubscribeSelf => subscribe_iq(node, &actor.bare),
        Action::SubscribeOther => subscribe_iq(node, other(actor.role)),
        // On the open feed, the very view bob and alice are subscribed to.
        Action::UnsubscribeOther if feed == Feed::Open => unsubscribe_iq(SUBSCRIBED_VIEW, other(actor.role)),
        Action::UnsubscribeOther => unsubscribe_iq(node, other(actor.role)),
        Action::DiscoInfo => {
            xml(&format!(r#"<iq type="get" to="feeds.localhost"><query xmlns="{DISCO_INFO}" node="{node}"/></iq>"#))
        }
        Action::DiscoItemsNode => {
            xml(&format!(r#"<iq type="get" to="feeds.localhost"><query xmlns="{DISCO_ITEMS}" node="{node}"/></iq>"#))
        }
    }
}

/// What happened, as an [`Outcome`]; checks the reply comes from the component and an
/// error carries a text.
fn outcome(reply: &Element) -> Outcome {
    let raw = to_xml(reply);
    assert_eq!(reply.attr("from"), Some("feeds.localhost"), "{raw}");
    if stanza_type(reply) == "result" {
        return Outcome::Ok;
    }
    assert_eq!(stanza_type(reply), "error", "{raw}");
    let condition = error_condition(reply).unwrap_or_else(|| panic!("an error condition in {raw}"));
    let app = testkit::xml::error_app_condition(reply).map(|(ns, name)| {
        assert_eq!(ns, PUBSUB_ERRORS, "{raw}");
        name
    });
    assert!(error_text(reply).is_some_and(|t| !t.trim().is_empty()), "an error says why: {raw}");
    Outcome::Err(condition, app)
}

/// A successful result has the right shape for its action.
fn check_result(action: Action, feed: Feed, actor: &Actor, reply: &Element) {
    let raw = to_xml(reply);
    match action {
        Action::Pull => {
            let page = parse_page(reply);
            assert!(page.count.unwrap_or(0) > 0, "the feed's items are served: {raw}");
        }
        Action::SubscribeSelf => {
            let sub = testkit::push::parse_subscription(reply);
            assert_eq!(sub.jid, actor.bare, "{raw}");
            assert_eq!(sub.node, feed.name(), "{raw}");
        }
        Action::DiscoInfo => {
            let title = testkit::push::meta_field(reply, "pubsub#title");
            assert!(title.is_some_and(|t| !t.is_empty()), "meta-data with a title: {raw}");
        }
        Action::DiscoItemsNode => {
            let q = reply.get_child("query", DISCO_ITEMS).unwrap_or_else(|| panic!("a disco#items result: {raw}"));
            assert!(q.children().count() > 0, "the node's items are listed: {raw}");
        }
        _ => {}
    }
}

async fn connect_actors(fx: &Fixture) -> Vec<Actor> {
    let mut actors = Vec::new();
    for (role, name) in
        [(Role::Admin, "admin"), (Role::Publisher, "bot"), (Role::Member, "bob"), (Role::Local, "alice")]
    {
        let client = fx.server.login(name).await;
        actors.push(Actor { role, bare: format!("{name}@localhost"), from: None, conn: Box::new(client) });
    }
    let bench = Component::connect(fx.server.component_port(), "bench.localhost", fx.server.secret()).await;
    actors.push(Actor { role: Role::Remote, bare: REMOTE.into(), from: Some(REMOTE.into()), conn: Box::new(bench) });
    actors
}

/// The feeds disco#items on the component lists to this actor.
async fn listed(actor: &mut Actor) -> HashSet<String> {
    let reply =
        actor.iq(xml(&format!(r#"<iq type="get" to="feeds.localhost"><query xmlns="{DISCO_ITEMS}"/></iq>"#))).await;
    let raw = to_xml(&reply);
    assert_eq!(stanza_type(&reply), "result", "{raw}");
    let q = reply.get_child("query", DISCO_ITEMS).unwrap_or_else(|| panic!("{raw}"));
    q.children().filter(|c| c.is("item", DISCO_ITEMS)).filter_map(|i| i.attr("node")).map(String::from).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_actor_every_action_every_access() {
    let fx = Fixture::start(TABLES);
    let mut actors = connect_actors(&fx).await;

    // The items the table works on: per feed, a base item per actor to update and a victim
    // per actor to retract; the closed feed also holds its secrets.
    let mut bot = fx.server.login("bot").await;
    let mut seeds = Vec::new();
    for feed in [Feed::Open, Feed::Closed, Feed::Domain] {
        for actor in &actors {
            let t = tag(actor.role);
            for id in [format!("base-{t}"), format!("victim-{t}")] {
                let e = entry(&format!("urn:{}:{id}", feed.name()), &format!("{id} original"), None, &[]);
                seeds.push(publish_iq(feed.name(), Some(&id), &e));
            }
        }
    }
    for i in 0..SECRET_ITEMS {
        seeds.push(publish_iq("closed", Some(&secret_id(i)), &entry(&format!("urn:{i}"), &secret_title(i), None, &[])));
    }
    for reply in iq_all(&mut bot, seeds).await {
        assert_eq!(stanza_type(&reply), "result", "{}", to_xml(&reply));
    }
    // Bob and alice hold subscriptions that others will try to remove.
    for actor in actors.iter_mut().filter(|a| matches!(a.role, Role::Member | Role::Local)) {
        let bare = actor.bare.clone();
        let reply = actor.iq(subscribe_iq(SUBSCRIBED_VIEW, &bare)).await;
        assert_eq!(stanza_type(&reply), "result", "{}", to_xml(&reply));
    }
    let closed_count = 2 * actors.len() + SECRET_ITEMS;

    // The table.
    let mut mismatches = Vec::new();
    let mut table: BTreeMap<(Feed, Action), Vec<String>> = BTreeMap::new();
    let mut non_member_replies: Vec<(Role, Element)> = Vec::new();
    for feed in [Feed::Open, Feed::Closed, Feed::Domain] {
        for action in ACTIONS {
            for actor in actors.iter_mut() {
                let iq = request(feed, actor, action);
                let sent = to_xml(&iq);
                let reply = actor.iq(iq).await;
                let got = outcome(&reply);
                let want = expected(feed, actor.role, action);
                if got == Outcome::Ok && want == Outcome::Ok {
                    check_result(action, feed, actor, &reply);
                }
                if got != want {
                    mismatches.push(format!(
                        "{feed:?} feed, {:?} ({}), {action:?}: expected {want:?}, got {got:?}\n  sent: {sent}\n  got:  {}",
                        actor.role,
                        actor.bare,
                        to_xml(&reply)
                    ));
                }
                if feed != Feed::Open && !feed.readable_by(actor.role) {
                    non_member_replies.push((actor.role, reply.clone()));
                }
                let cell = match &got {
                    Outcome::Ok => "ok".to_string(),
                    Outcome::Err(c, Some(a)) => format!("{c}+{a}"),
                    Outcome::Err(c, None) => c.to_string(),
                };
                table.entry((feed, action)).or_default().push(cell);
            }
        }
    }
    eprintln!("{:<8} {:<18} admin | publisher | member | local | remote", "feed", "action");
    for ((feed, action), cells) in &table {
        eprintln!("{:<8} {:<18} {}", format!("{feed:?}"), format!("{action:?}"), cells.join(" | "));
    }
    assert!(mismatches.is_empty(), "{} outcomes differ from SPEC:\n{}", mismatches.len(), mismatches.join("\n"));

    // Refused changes changed nothing; allowed ones took effect.
    for feed in [Feed::Open, Feed::Closed, Feed::Domain] {
        let mut admin = fx.server.login("admin").await;
        for role in [Role::Admin, Role::Publisher, Role::Member, Role::Local, Role::Remote] {
            let t = tag(role);
            let ids = [format!("new-{t}"), format!("base-{t}"), format!("victim-{t}")];
            let page =
                pull(&mut admin, &Pull::node(feed.name()).ids(&ids.iter().map(String::as_str).collect::<Vec<_>>()))
                    .await;
            let by_id = |id: &str| page.items.iter().find(|i| i.id == id).cloned();
            let may = matches!(role, Role::Admin | Role::Publisher);
            assert_eq!(by_id(&ids[0]).is_some(), may, "{feed:?}: new item by {t} stored iff allowed: {}", page.raw);
            let base = by_id(&ids[1]).unwrap_or_else(|| panic!("{feed:?}: base-{t}: {}", page.raw));
            let want = if may { format!("updated by {t}") } else { format!("base-{t} original") };
            assert_eq!(base.title(), Some(want), "{feed:?}: update by {t}: {}", page.raw);
            let victim = by_id(&ids[2]).unwrap_or_else(|| panic!("{feed:?}: victim-{t}: {}", page.raw));
            assert_eq!(victim.tombstone().is_some(), may, "{feed:?}: retract by {t} took effect iff allowed");
        }
    }
    // Nobody removed bob's or alice's subscription.
    for actor in actors.iter_mut().filter(|a| matches!(a.role, Role::Member | Role::Local)) {
        let subs = subscriptions(actor.conn.deref_mut(), Some(SUBSCRIBED_VIEW)).await;
        assert_eq!(subs.len(), 1, "{}'s own subscription is intact: {subs:?}", actor.bare);
    }

    // disco#items on the component: every open feed, whitelist feeds only to the allowed.
    for actor in actors.iter_mut() {
        let got = listed(actor).await;
        let want: HashSet<String> = [Feed::Open, Feed::Closed, Feed::Domain]
            .into_iter()
            .filter(|f| f.readable_by(actor.role))
            .map(|f| f.name().to_string())
            .collect();
        assert_eq!(got, want, "disco#items as seen by {:?} ({})", actor.role, actor.bare);
    }

    // Views of a closed feed are closed too; each answer to a non-member reveals nothing.
    for actor in actors.iter_mut().filter(|a| !Feed::Closed.readable_by(a.role)) {
        for node in ["closed?order=modified", "closed?author=x", "closed?order=-created&category=y"] {
            let bare = actor.bare.clone();
            for iq in [
                Pull::node(node).iq(),
                Pull::node(node).ids(&[secret_id(0).as_str()]).iq(),
                Pull::node(node).max_items(5).iq(),
                subscribe_iq(node, &bare),
                xml(&format!(
                    r#"<iq type="get" to="feeds.localhost"><query xmlns="{DISCO_INFO}" node="{}"/></iq>"#,
                    esc(node)
                )),
            ] {
                let sent = to_xml(&iq);
                let reply = actor.iq(iq).await;
                assert_eq!(
                    outcome(&reply),
                    err("not-allowed", Some("closed-node")),
                    "{:?}: {sent} → {}",
                    actor.role,
                    to_xml(&reply)
                );
                non_member_replies.push((actor.role, reply));
            }
        }
        // Positions naming secret items are refused the same way (nothing says whether they exist).
        for pos in [format!("id:{}", secret_id(1)), "id:no-such-item".to_string()] {
            let reply = actor.iq(Pull::node("closed").after(&pos).iq()).await;
            assert_eq!(outcome(&reply), err("not-allowed", Some("closed-node")), "{}", to_xml(&reply));
            non_member_replies.push((actor.role, reply));
        }
    }
    let count = closed_count.to_string();
    for (role, reply) in &non_member_replies {
        let raw = &to_xml(reply);
        for i in 0..SECRET_ITEMS {
            assert!(!raw.contains(&secret_id(i)), "{role:?} sees a secret item id: {raw}");
            assert!(!raw.contains(&secret_title(i)), "{role:?} sees a secret title: {raw}");
        }
        assert!(!raw.contains("Members only"), "{role:?} sees the closed feed's description: {raw}");
        assert!(!raw.contains("<item"), "{role:?} gets items: {raw}");
        assert!(!raw.contains("jabber:x:data"), "{role:?} gets meta-data: {raw}");
        let text = error_text(reply).unwrap_or_default();
        let numbers: Vec<&str> = text.split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty()).collect();
        assert!(!numbers.contains(&count.as_str()), "{role:?} sees the item count {count}: {raw}");
    }
    eprintln!("{} answers to non-members checked: no item id, title, description or count", non_member_replies.len());

    // Pushes: the closed feed's subscribers (admin, publisher, member subscribed above) get
    // the next change; the others were refused, so they get nothing of it.
    for actor in actors.iter_mut() {
        actor.conn.drain();
    }
    let reply = bot
        .iq(publish_iq("closed", Some("zq-secret-push"), &entry("urn:p", "Confidential push xyzzy", None, &[])))
        .await;
    assert_eq!(stanza_type(&reply), "result", "{}", to_xml(&reply));
    tokio::time::sleep(Duration::from_millis(800)).await;
    for actor in actors.iter_mut() {
        let messages: Vec<Element> = actor.conn.drain().into_iter().filter(|m| m.name() == "message").collect();
        let closed_pushes: Vec<&Element> = messages
            .iter()
            .filter(|m| {
                m.get_child("event", PUBSUB_EVENT)
                    .and_then(|e| e.get_child("items", PUBSUB_EVENT))
                    .and_then(|i| i.attr("node"))
                    .is_some_and(|n| n.starts_with("closed"))
            })
            .collect();
        if Feed::Closed.readable_by(actor.role) {
            assert_eq!(closed_pushes.len(), 1, "{:?} is subscribed and gets the push: {messages:?}", actor.role);
        } else {
            assert!(closed_pushes.is_empty(), "{:?} gets a push of the closed feed: {closed_pushes:?}", actor.role);
            for m in &messages {
                let raw = to_xml(m);
                assert!(!raw.contains("xyzzy"), "{:?} receives something of the closed feed: {raw}", actor.role);
            }
        }
    }
}
