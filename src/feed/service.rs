//! The pubsub service: every operation a client can ask for, as plain values in and typed
//! outcomes out. Authorisation is decided in one place, [`Service::may`].

use super::change::{Change, ViewChange, belongs};
use super::error::FeedError;
use super::item::{Entry, Item, Key, Payload};
use super::node::{NodeName, Order, View};
use super::page::{self, Anchor, Page, PageRequest, cursor_of, scope};
use super::position::Position;
use crate::config::{Access, Config, FeedConfig};
use crate::store::{FeedRow, ReadTx, Store, Subscription, WriteTx};
use std::sync::Arc;

/// Milliseconds since the Unix epoch; injectable so tests can step the clock back.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The system clock.
pub fn system_clock() -> Clock {
    Arc::new(|| chrono::Utc::now().timestamp_millis())
}

/// The longest item id accepted.
pub const MAX_ITEM_ID: usize = 256;

/// What an actor wants to do to a feed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Publish, update or retract items.
    Publish,
    /// Pull items, subscribe, or read the node's meta-data.
    Read,
}

/// An `<items/>` request as the glue parsed it (positions still as text).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PullRequest {
    pub node: String,
    /// RSM `<max>`.
    pub max: Option<u64>,
    /// RSM `<after>`.
    pub after: Option<String>,
    /// RSM `<before>`; `Some("")` asks for the last page.
    pub before: Option<String>,
    /// RSM `<index>`.
    pub index: Option<u64>,
    /// `max_items` on `<items/>`.
    pub max_items: Option<u64>,
    /// `<item id/>` children.
    pub ids: Vec<String>,
}

/// A node's meta-data for disco#info.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    pub title: String,
    pub description: String,
    pub count: u64,
    pub subscribers: u64,
}

/// A feed as disco#items lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeedSummary {
    pub name: String,
    pub title: String,
}

/// The service over a store.
#[derive(Clone)]
pub struct Service<S: Store> {
    store: S,
    config: Arc<Config>,
    clock: Clock,
}

/// The rules for feeds that were created on the fly (not in the configuration).
fn autocreated(name: &str) -> FeedConfig {
    FeedConfig {
        name: name.to_string(),
        title: None,
        description: None,
        publishers: Vec::new(),
        default_order: None,
        access: Access::Open,
        allowed: Vec::new(),
    }
}

impl<S: Store> Service<S> {
    pub fn new(store: S, config: Arc<Config>, clock: Clock) -> Self {
        Service { store, config, clock }
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Creates the configured feeds that the store does not have yet.
    pub async fn init(&self) -> Result<(), FeedError> {
        let names: Vec<String> = self.config.feeds.iter().map(|f| f.name.clone()).collect();
        self.store
            .write(move |tx| {
                for name in &names {
                    if tx.feed(name)?.is_none() {
                        tx.create_feed(name)?;
                    }
                }
                Ok(())
            })
            .await
    }

    fn policy(&self, feed: &str) -> FeedConfig {
        self.config.feed(feed).cloned().unwrap_or_else(|| autocreated(feed))
    }

    fn is_admin(&self, actor: &str) -> bool {
        self.config.admins.iter().any(|a| a == actor)
    }

    /// The one place that decides whether `actor` (a bare JID) may do `action` on `feed`.
    pub fn may(&self, actor: &str, action: Action, feed: &FeedConfig) -> Result<(), FeedError> {
        if self.is_admin(actor) || feed.publishers.iter().any(|p| p == actor) {
            return Ok(());
        }
        match action {
            Action::Publish => Err(FeedError::Forbidden(format!("{actor} may not publish to {}", feed.name))),
            Action::Read if feed.access == Access::Open => Ok(()),
            Action::Read => {
                let domain = actor.rsplit_once('@').map_or(actor, |(_, d)| d);
                let allowed = feed.allowed.iter().any(|a| a == actor || a.strip_prefix("*@") == Some(domain));
                if allowed { Ok(()) } else { Err(FeedError::ClosedNode) }
            }
        }
    }

    /// Parses a node name, checks the feed exists and that `actor` may read it.
    async fn readable(&self, actor: &str, node: &str) -> Result<(FeedRow, View), FeedError> {
        let name = NodeName::parse(node)?;
        let policy = self.policy(&name.feed);
        let feed_name = name.feed.clone();
        let feed = self.store.read(move |tx| Ok(tx.feed(&feed_name)?)).await?;
        let feed = feed.ok_or_else(|| FeedError::NodeNotFound(format!("no such feed: {}", name.feed)))?;
        self.may(actor, Action::Read, &policy)?;
        Ok((feed, name.resolve(policy.order())))
    }

    /// Serves an `<items/>` request.
    pub async fn pull(&self, actor: &str, req: PullRequest) -> Result<Page, FeedError> {
        let (feed, view) = self.readable(actor, &req.node).await?;
        let limits = &self.config.limits;
        if req.ids.len() > limits.max_ids {
            return Err(FeedError::PolicyViolation(format!("at most {} item ids per request", limits.max_ids)));
        }
        if !req.ids.is_empty() {
            let ids = req.ids;
            return self.store.read(move |tx| page::by_ids(tx, &feed, &view, &ids)).await;
        }
        if let Some(n) = req.max_items {
            let n = n.min(limits.max_page) as usize;
            return self.store.read(move |tx| page::most_recent(tx, &feed, &view, n)).await;
        }
        let parse = |s: &Option<String>| s.as_deref().map(Position::parse).transpose();
        let after = parse(&req.after)?;
        let before = match req.before.as_deref() {
            None => None,
            Some("") => Some(None),
            Some(s) => Some(Some(Position::parse(s)?)),
        };
        let start = match (req.index, after) {
            (Some(_), Some(_)) => return Err(FeedError::BadRequest("index cannot be combined with after".into())),
            (Some(_), _) if before.is_some() => {
                return Err(FeedError::BadRequest("index cannot be combined with before".into()));
            }
            (Some(i), None) => Some(Anchor::Index(i)),
            (None, Some(p)) => Some(Anchor::After(p)),
            (None, None) => None,
        };
        let max = req.max.unwrap_or(limits.default_page).min(limits.max_page) as usize;
        let req = PageRequest { max, start, before };
        self.store.read(move |tx| page::page(tx, &feed, &view, &req)).await
    }

    /// Publishes a new item or updates an existing one; returns its id once durable.
    pub async fn publish(
        &self,
        actor: &str,
        node: &str,
        id: Option<String>,
        entry: Entry,
    ) -> Result<String, FeedError> {
        let feed_name = self.publish_target(actor, node).await?;
        let limit = self.config.limits.max_payload_bytes;
        if entry.xml.len() > limit {
            return Err(FeedError::PayloadTooBig { size: entry.xml.len(), limit });
        }
        let id = match id {
            Some(id) => check_item_id(id)?,
            None => new_item_id(),
        };
        let create = self.config.autocreate && self.is_admin(actor);
        let config = self.config.clone();
        let now = (self.clock)();
        self.store
            .write(move |tx| {
                let mut feed = match tx.feed(&feed_name)? {
                    Some(f) => f,
                    None if create => tx.create_feed(&feed_name)?,
                    None => return Err(FeedError::NodeNotFound(format!("no such feed: {feed_name}"))),
                };
                let old = tx.item(feed.id, &id)?;
                let modified = next_modified(&mut feed, old.as_ref(), now);
                let created = match &old {
                    Some(o) => o.created,
                    None => {
                        feed.items += 1;
                        Key { t: modified.t, seq: feed.items as i64 }
                    }
                };
                let item = Item {
                    id: id.clone(),
                    created,
                    modified,
                    author: entry.author,
                    categories: entry.categories,
                    atom_id: entry.atom_id,
                    payload: Payload::Entry(entry.xml),
                };
                commit_change(tx, &mut feed, old, item, &config)?;
                Ok(id)
            })
            .await
    }

    /// Retracts an item: it stays as a tombstone. Retracting a tombstone changes nothing.
    pub async fn retract(&self, actor: &str, node: &str, id: String) -> Result<(), FeedError> {
        let feed_name = self.publish_target(actor, node).await?;
        let config = self.config.clone();
        let now = (self.clock)();
        self.store
            .write(move |tx| {
                let mut feed = tx
                    .feed(&feed_name)?
                    .ok_or_else(|| FeedError::NodeNotFound(format!("no such feed: {feed_name}")))?;
                let old = tx.item(feed.id, &id)?.ok_or_else(|| FeedError::ItemNotFound(id.clone()))?;
                if old.is_deleted() {
                    return Ok(());
                }
                let modified = next_modified(&mut feed, Some(&old), now);
                let item = Item {
                    modified,
                    payload: Payload::Tombstone {
                        atom_ref: old.atom_id.clone().unwrap_or_else(|| id.clone()),
                        when: modified.t,
                    },
                    ..old.clone()
                };
                commit_change(tx, &mut feed, Some(old), item, &config)
            })
            .await
    }

    /// The feed a publish or retract goes to, after checking the node and authorisation.
    /// The glue asks this before it looks at the payload, so an unauthorised sender learns
    /// nothing about what the service accepts.
    /// An unknown feed is `item-not-found` before anything else, unless an admin may create
    /// it by publishing (`autocreate`).
    pub async fn publish_target(&self, actor: &str, node: &str) -> Result<String, FeedError> {
        let name = NodeName::parse(node)?;
        if name.order.is_some() || !name.filter.is_empty() {
            return Err(FeedError::BadRequest("publish and retract go to the feed itself, without parameters".into()));
        }
        // Configured feeds exist from start-up on; others were created by an admin's publish.
        if self.config.feed(&name.feed).is_none() && !(self.config.autocreate && self.is_admin(actor)) {
            let feed = name.feed.clone();
            if self.store.read(move |tx| Ok(tx.feed(&feed)?)).await?.is_none() {
                return Err(FeedError::NodeNotFound(format!("no such feed: {}", name.feed)));
            }
        }
        self.may(actor, Action::Publish, &self.policy(&name.feed))?;
        Ok(name.feed)
    }

    /// Subscribes `jid` (which must be the sender's own, bare or full) to a view.
    pub async fn subscribe(&self, actor: &str, node: &str, jid: &str) -> Result<Subscription, FeedError> {
        let (feed, view) = self.readable(actor, node).await?;
        if bare(jid) != actor {
            return Err(FeedError::InvalidJid(format!("{jid} is not your own JID")));
        }
        let canonical = view.canonical();
        let sub = Subscription {
            node: node.to_string(),
            subid: format!("{:08x}", crc32fast::hash(format!("{canonical} {jid}").as_bytes())),
            view: canonical,
            jid: jid.to_string(),
        };
        let stored = sub.clone();
        let (per_jid, per_feed) =
            (self.config.limits.max_subscriptions_per_jid, self.config.limits.max_subscriptions_per_feed);
        let actor = actor.to_string();
        self.store
            .write(move |tx| {
                let own = tx.subscriptions_of(&actor)?;
                let renewal = own.iter().any(|s| s.view == stored.view && s.jid == stored.jid);
                if !renewal && own.len() as u64 >= per_jid {
                    return Err(FeedError::PolicyViolation(format!("{actor} already has {per_jid} subscriptions")));
                }
                if !renewal && tx.subscription_count(feed.id)? >= per_feed {
                    return Err(FeedError::PolicyViolation(format!("{} has {per_feed} subscriptions", feed.name)));
                }
                Ok(tx.put_subscription(feed.id, &stored)?)
            })
            .await?;
        Ok(sub)
    }

    /// Removes `jid`'s subscription to a view.
    pub async fn unsubscribe(&self, actor: &str, node: &str, jid: &str) -> Result<(), FeedError> {
        if bare(jid) != actor {
            return Err(FeedError::Forbidden(format!("{actor} may not unsubscribe {jid}")));
        }
        self.remove_subscription(node, jid).await
    }

    /// Removes `jid`'s subscription to the view `node` names, whoever asks.
    async fn remove_subscription(&self, node: &str, jid: &str) -> Result<(), FeedError> {
        let name = NodeName::parse(node)?;
        let order = self.policy(&name.feed).order();
        let view = name.resolve(order);
        let (canonical, jid, node) = (view.canonical(), jid.to_string(), node.to_string());
        self.store
            .write(move |tx| {
                let feed = tx
                    .feed(&view.feed)?
                    .ok_or_else(|| FeedError::NodeNotFound(format!("no such feed: {}", view.feed)))?;
                if tx.delete_subscription(feed.id, &canonical, &jid)? {
                    Ok(())
                } else {
                    Err(FeedError::NotSubscribed(node))
                }
            })
            .await
    }

    /// The sender's own subscriptions, optionally to one view only.
    pub async fn subscriptions(&self, actor: &str, node: Option<&str>) -> Result<Vec<Subscription>, FeedError> {
        let view = match node {
            Some(n) => Some(self.readable(actor, n).await?.1.canonical()),
            None => None,
        };
        let actor = actor.to_string();
        let mut subs = self.store.read(move |tx| Ok(tx.subscriptions_of(&actor)?)).await?;
        if let Some(v) = view {
            subs.retain(|s| s.view == v);
        }
        Ok(subs)
    }

    /// Meta-data of a node for disco#info.
    pub async fn node_info(&self, actor: &str, node: &str) -> Result<NodeInfo, FeedError> {
        let (feed, view) = self.readable(actor, node).await?;
        let policy = self.policy(&feed.name);
        let (count, subscribers) =
            // Each view is a node of its own, so its subscribers are the view's, not the feed's.
            self.store
                .read(move |tx| {
                    let subscribers = tx.subscribers(feed.id, &view.canonical())?.len() as u64;
                    Ok((tx.count(scope(&feed, &view))?, subscribers))
                })
                .await?;
        Ok(NodeInfo {
            title: policy.title.unwrap_or_else(|| policy.name.clone()),
            description: policy.description.unwrap_or_default(),
            count,
            subscribers,
        })
    }

    /// Feeds `actor` may read, by name, after `after`, at most `max`.
    pub async fn feeds(&self, actor: &str, after: Option<String>, max: usize) -> Result<Vec<FeedSummary>, FeedError> {
        let mut out = Vec::new();
        let mut cursor = after;
        // Whitelist feeds the actor may not read are skipped, so read in batches until full.
        loop {
            let from = cursor.clone();
            let batch = self.store.read(move |tx| Ok(tx.feeds(from.as_deref(), 256)?)).await?;
            let done = batch.len() < 256;
            for f in batch {
                cursor = Some(f.name.clone());
                let policy = self.policy(&f.name);
                if self.may(actor, Action::Read, &policy).is_ok() {
                    out.push(FeedSummary {
                        title: policy.title.clone().unwrap_or_else(|| f.name.clone()),
                        name: f.name,
                    });
                    if out.len() == max {
                        return Ok(out);
                    }
                }
            }
            if done {
                return Ok(out);
            }
        }
    }
}

/// Administration, for admins only (XEP-0050 commands in the glue).
impl<S: Store> Service<S> {
    /// `forbidden` unless `actor` is an admin.
    pub fn check_admin(&self, actor: &str) -> Result<(), FeedError> {
        if self.is_admin(actor) { Ok(()) } else { Err(FeedError::Forbidden(format!("{actor} is not an admin"))) }
    }

    /// Every feed with its item and subscription counts, by name.
    pub async fn admin_feeds(&self, actor: &str) -> Result<Vec<(FeedRow, u64)>, FeedError> {
        self.check_admin(actor)?;
        self.store
            .read(|tx| {
                let mut out = Vec::new();
                let mut after: Option<String> = None;
                loop {
                    let batch = tx.feeds(after.as_deref(), 1000)?;
                    for f in &batch {
                        out.push((f.clone(), tx.subscription_count(f.id)?));
                    }
                    match batch.last() {
                        Some(last) if batch.len() == 1000 => after = Some(last.name.clone()),
                        _ => return Ok(out),
                    }
                }
            })
            .await
    }

    /// Creates a feed (open, published to by admins, until configured); false if it existed.
    pub async fn admin_create_feed(&self, actor: &str, name: &str) -> Result<bool, FeedError> {
        self.check_admin(actor)?;
        if !super::node::valid_feed_name(name) {
            return Err(FeedError::BadRequest(format!("{name:?} is not a valid feed name")));
        }
        let name = name.to_string();
        self.store
            .write(move |tx| {
                if tx.feed(&name)?.is_some() {
                    return Ok(false);
                }
                tx.create_feed(&name)?;
                Ok(true)
            })
            .await
    }

    /// Every subscription to any view of a feed.
    pub async fn admin_subscribers(&self, actor: &str, feed: &str) -> Result<Vec<Subscription>, FeedError> {
        self.check_admin(actor)?;
        let feed = feed.to_string();
        self.store
            .read(move |tx| {
                let f = tx.feed(&feed)?.ok_or_else(|| FeedError::NodeNotFound(format!("no such feed: {feed}")))?;
                let mut out = Vec::new();
                for view in tx.subscribed_views(f.id)? {
                    out.extend(tx.subscribers(f.id, &view)?);
                }
                Ok(out)
            })
            .await
    }

    /// Removes someone's subscription to a view.
    pub async fn admin_unsubscribe(&self, actor: &str, node: &str, jid: &str) -> Result<(), FeedError> {
        self.check_admin(actor)?;
        self.remove_subscription(node, jid).await
    }
}

/// Stores an item's new version and emits what every subscribed view saw of it.
fn commit_change(
    tx: &mut dyn WriteTx,
    feed: &mut FeedRow,
    old: Option<Item>,
    item: Item,
    config: &Config,
) -> Result<(), FeedError> {
    let created = old.is_none();
    let default_order = config.feed(&feed.name).map_or(Order::NEWEST_FIRST, FeedConfig::order);
    let views: Vec<View> = tx
        .subscribed_views(feed.id)?
        .iter()
        .filter_map(|v| NodeName::parse(v).ok().map(|n| n.resolve(default_order)))
        .filter(|v| belongs(v, &item, created))
        .collect();
    let mut previous = Vec::with_capacity(views.len());
    for v in &views {
        previous.push(newest_cursor(tx, feed, v)?);
    }
    match &old {
        None => tx.insert_item(feed.id, &item)?,
        Some(o) => tx.update_item(feed.id, o, &item)?,
    }
    tx.save_feed(feed)?;
    let mut changes = Vec::with_capacity(views.len());
    for (v, previous) in views.iter().zip(previous) {
        let s = scope(feed, v);
        changes.push(ViewChange {
            view: v.canonical(),
            count: tx.count(s)?,
            previous,
            last: cursor_of(tx, s, item.key(v.order.by))?,
        });
    }
    tx.emit(Change { feed: feed.name.clone(), item, created, views: changes });
    Ok(())
}

/// Stamps a modification: the feed's clock never goes back, even if the wall clock does.
///
/// An item modified again within the same millisecond is moved one millisecond on. Without
/// that it would keep its `T` and could keep its offset among the items at `T`, so a cursor
/// handed out for its old version would still verify and resume *after* the new version,
/// and a client would miss the update. With it, the item leaves `T`, the checksum of every
/// cursor at or after it changes, and such cursors fall back to `time:T`.
fn next_modified(feed: &mut FeedRow, old: Option<&Item>, now: i64) -> Key {
    let mut t = feed.last_t.max(now);
    if old.is_some_and(|o| o.modified.t == t) {
        t += 1;
    }
    feed.last_t = t;
    feed.last_mseq += 1;
    Key { t, seq: feed.last_mseq }
}

/// The cursor of the item with the greatest key in a view, if any.
fn newest_cursor(tx: &dyn ReadTx, feed: &FeedRow, view: &View) -> Result<Option<super::Cursor>, FeedError> {
    let s = scope(feed, view);
    match tx.scan(s, None, None, true, 1)?.first() {
        Some(i) => Ok(Some(cursor_of(tx, s, i.key(view.order.by))?)),
        None => Ok(None),
    }
}

/// The bare part of a JID string.
pub fn bare(jid: &str) -> &str {
    jid.split_once('/').map_or(jid, |(b, _)| b)
}

fn check_item_id(id: String) -> Result<String, FeedError> {
    if id.is_empty() || id.len() > MAX_ITEM_ID || id.chars().any(char::is_control) {
        return Err(FeedError::BadRequest(format!(
            "item ids must be 1 to {MAX_ITEM_ID} bytes without control characters"
        )));
    }
    Ok(id)
}

/// A fresh item id: 128 random bits in hex.
fn new_item_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}
