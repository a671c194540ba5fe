//! What the core needs from the world, owned by the core so that dependencies point inward:
//! stores implement these traits ([`the stores`], [`the stores`]), faces
//! receive committed changes through a [`ChangeSink`].
//!
//! The core works on *snapshots*: [`Store::read`] runs a closure against a consistent
//! read-only view ([`ReadTx`]); [`Store::write`] runs a closure inside a write transaction
//! ([`WriteTx`]) and answers only once that transaction is durable. Implementations may run
//! many writers' closures in one transaction (group commit), each in its own savepoint, so a
//! closure that fails leaves no trace and does not disturb the others.
//!
//! All ordering work is expressed over [`Key`]s in ascending order within a [`Scope`] (a
//! feed, one of its two orders and a filter); the core maps descending views onto that.

use super::outbox::{HubSubscription, OutboxEntry, OutboxStats};
use super::{Change, FeedError, Filter, Item, Key, OrderBy};
use std::future::Future;

/// A feed's row: its identity and the counters that keep its clocks monotonic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeedRow {
    pub id: i64,
    pub name: String,
    /// Items ever published (tombstones included); also the last `created` seq, since
    /// created seqs are dense from 1 and items are never removed.
    pub items: u64,
    /// The last timestamp handed out in this feed, Unix ms. New stamps never go below it.
    pub last_t: i64,
    /// The last `modified` seq handed out.
    pub last_mseq: i64,
}

/// What a feed's source (SPEC §13) keeps across restarts: where it is fetched from now (a
/// permanent redirect moves it) and the validators of its last imported answer. Kept with
/// the URL as configured: a source whose configuration names another URL starts afresh.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceState {
    /// The source as configured when this was saved.
    pub configured: String,
    /// Where it is fetched from.
    pub location: String,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
}

/// The items of one feed in one order, filtered: what a view is, minus its direction.
#[derive(Clone, Copy, Debug)]
pub struct Scope<'a> {
    pub feed: i64,
    pub by: OrderBy,
    pub filter: &'a Filter,
}

/// A stored subscription.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subscription {
    /// The node name as the subscriber wrote it (what pushes carry).
    pub node: String,
    /// The canonical view name (what matching uses).
    pub view: String,
    /// The subscribed JID, as given.
    pub jid: String,
    pub subid: String,
}

/// A storage failure. Carries the kind and the backend's text, not its error type, so the
/// core stays free of it; the kinds an operator acts on differently stay apart.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// Another connection holds a lock for longer than the busy timeout (try again).
    #[error("the database is busy: {0}")]
    Busy(String),
    /// The disk or the database is full (free space).
    #[error("the database or its disk is full: {0}")]
    Full(String),
    /// The database file is damaged or not a database (restore it).
    #[error("the database is corrupt: {0}")]
    Corrupt(String),
    /// Any other failure of the backend.
    #[error("storage error: {0}")]
    Backend(String),
    #[error("the store is shut down")]
    Closed,
    #[error("database schema version {found} is newer than this binary understands ({known})")]
    TooNew { found: i64, known: i64 },
}

pub type StoreResult<T> = Result<T, StoreError>;

/// Which items of a scope a scan reads: those with `after < key < before`, at most `limit`,
/// ascending from `after` when `descending` is false, else descending from `before`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Range {
    pub after: Option<Key>,
    pub before: Option<Key>,
    pub descending: bool,
    pub limit: usize,
}

/// Reads against one consistent snapshot.
pub trait ReadTx {
    fn feed(&self, name: &str) -> StoreResult<Option<FeedRow>>;
    /// Feeds by name, strictly after `after`, at most `limit`.
    fn feeds(&self, after: Option<&str>, limit: usize) -> StoreResult<Vec<FeedRow>>;
    fn item(&self, feed: i64, id: &str) -> StoreResult<Option<Item>>;
    /// Items of the scope within `range`.
    fn scan(&self, scope: Scope<'_>, range: Range) -> StoreResult<Vec<Item>>;
    /// How many items the scope holds.
    fn count(&self, scope: Scope<'_>) -> StoreResult<u64>;
    /// How many items of the scope have a key below `key`.
    fn rank(&self, scope: Scope<'_>, key: Key) -> StoreResult<u64>;
    /// The key of the item at ascending position `index`, if there is one.
    fn nth(&self, scope: Scope<'_>, index: u64) -> StoreResult<Option<Key>>;
    /// Ids of the scope's items at time `t` with `seq <= upto_seq`, ascending, at most
    /// `limit`: the input of a T+O+C checksum.
    fn ties(&self, scope: Scope<'_>, t: i64, upto_seq: i64, limit: usize) -> StoreResult<Vec<String>>;
    /// Canonical names of the views of this feed that have at least one subscription.
    fn subscribed_views(&self, feed: i64) -> StoreResult<Vec<String>>;
    /// Subscriptions to one canonical view.
    fn subscribers(&self, feed: i64, view: &str) -> StoreResult<Vec<Subscription>>;
    /// Subscriptions whose JID's bare part is `bare`, across feeds, with their feed names.
    fn subscriptions_of(&self, bare: &str) -> StoreResult<Vec<Subscription>>;
    /// How many subscriptions a feed has (all views).
    fn subscription_count(&self, feed: i64) -> StoreResult<u64>;

    // WebSub (see [`crate::outbox`]).

    /// Canonical names of the views of this feed that have at least one WebSub subscription.
    fn hub_views(&self, feed: i64) -> StoreResult<Vec<String>>;
    /// [`subscribed_views`](Self::subscribed_views) and [`hub_views`](Self::hub_views)
    /// together: every write asks both, and a store may answer them with one read.
    fn followed_views(&self, feed: i64) -> StoreResult<(Vec<String>, Vec<String>)> {
        Ok((self.subscribed_views(feed)?, self.hub_views(feed)?))
    }
    /// WebSub subscriptions of every feed with an id above `after`, by id, at most `limit`.
    fn hub_subscriptions(&self, after: i64, limit: usize) -> StoreResult<Vec<HubSubscription>>;
    /// WebSub subscriptions to any view of one feed, by view and callback.
    fn hub_subscribers(&self, feed: i64) -> StoreResult<Vec<HubSubscription>>;
    /// Outbox rows of one view with a sequence number above `after`, ascending, at most `limit`.
    fn outbox(&self, feed: i64, view: &str, after: i64, limit: usize) -> StoreResult<Vec<OutboxEntry>>;
    /// How many rows the outbox holds, and the oldest one's commit time.
    fn outbox_stats(&self) -> StoreResult<OutboxStats>;
    /// The saved state of the feed's source, if any.
    fn source_state(&self, feed: i64) -> StoreResult<Option<SourceState>>;
}

/// Writes inside one transaction; reads through it see the writes made so far.
pub trait WriteTx: ReadTx {
    /// The feed's row, to stamp items from: what [`ReadTx::feed`] reads, and where other
    /// processes may write the same database (PostgreSQL), the row is also locked until this
    /// transaction ends, so each feed's clock and tie order are assigned by one transaction
    /// at a time and commit order is cursor order. Every caller of the write intents
    /// (`publish`, `retract`) reads the row with this. A store with a single writer reads it
    /// plainly: nothing else can change it before its transaction ends.
    fn feed_for_update(&mut self, name: &str) -> StoreResult<Option<FeedRow>>;
    /// Creates a feed with zeroed counters.
    fn create_feed(&mut self, name: &str) -> StoreResult<FeedRow>;
    /// Saves a feed's counters (`items`, `last_t`, `last_mseq`).
    fn save_feed(&mut self, feed: &FeedRow) -> StoreResult<()>;
    /// Stores a new item.
    fn insert_item(&mut self, feed: i64, item: &Item) -> StoreResult<()>;
    /// Replaces an item (same id) by its new version; `old` is what is stored now.
    fn update_item(&mut self, feed: i64, old: &Item, new: &Item) -> StoreResult<()>;
    /// Adds a subscription, or replaces the one with the same view and JID. `feed` is its id.
    fn put_subscription(&mut self, feed: i64, sub: &Subscription) -> StoreResult<()>;
    /// Removes a subscription; false when there was none.
    fn delete_subscription(&mut self, feed: i64, view: &str, jid: &str) -> StoreResult<bool>;
    /// Removes every subscription of exactly this JID (all feeds and views); returns how many.
    fn delete_subscriptions_of(&mut self, jid: &str) -> StoreResult<u64>;
    /// Adds a WebSub subscription, or renews the one with the same feed, view and callback
    /// (new topic spelling, secret and lease; its id and `delivered` kept). A new one starts
    /// after the view's newest outbox row: it gets changes committed from now on. Returns
    /// the subscription as stored.
    fn put_hub_subscription(&mut self, sub: &HubSubscription) -> StoreResult<HubSubscription>;
    /// Removes a WebSub subscription; false when there was none.
    fn delete_hub_subscription(&mut self, feed: i64, view: &str, callback: &str) -> StoreResult<bool>;
    /// Removes the WebSub subscriptions whose lease ended at or before `now`; their ids.
    fn expire_hub_subscriptions(&mut self, now: i64) -> StoreResult<Vec<i64>>;
    /// Records that subscription `id` has been served up to outbox row `upto` (never moves
    /// back); false when the subscription is gone.
    fn hub_delivered(&mut self, id: i64, upto: i64) -> StoreResult<bool>;
    /// Appends a row to the outbox; returns its sequence number, above every one before it.
    fn append_outbox(&mut self, entry: &OutboxEntry) -> StoreResult<i64>;
    /// Removes outbox rows no subscription of their view still needs, and the oldest rows
    /// of any view holding more than `keep`; returns how many went.
    fn prune_outbox(&mut self, keep: u64) -> StoreResult<u64>;
    /// Queues a change to be announced once this write is durable, in commit order.
    fn emit(&mut self, change: Change);
    /// Saves the state of the feed's source, replacing what was saved.
    fn put_source_state(&mut self, feed: i64, state: &SourceState) -> StoreResult<()>;
}

/// Receives every committed change, in commit order, after it is durable and before the
/// writers that made it are answered.
pub type ChangeSink = Box<dyn FnMut(Vec<Change>) + Send>;

/// Told of every successful group commit: how many writes it carried and how long it took
/// (fsync included). For metrics.
pub type CommitObserver = Box<dyn Fn(usize, std::time::Duration) + Send>;

/// A store: snapshots to read, transactions to write.
pub trait Store: Clone + Send + Sync + 'static {
    fn read<T, F>(&self, f: F) -> impl Future<Output = Result<T, FeedError>> + Send
    where
        T: Send + 'static,
        F: FnOnce(&dyn ReadTx) -> Result<T, FeedError> + Send + 'static;

    fn write<T, F>(&self, f: F) -> impl Future<Output = Result<T, FeedError>> + Send
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn WriteTx) -> Result<T, FeedError> + Send + 'static;

    /// [`write`](Self::write) for a closure whose first act is to lock `feed`'s row
    /// ([`WriteTx::feed_for_update`]) and whose next is to read its item `item`: a store whose
    /// batches may lock several feeds, with other processes writing too, locks all the feeds
    /// a batch names first, in one order; a store to which each read is a round trip reads
    /// the items a batch names with them.
    fn write_to<T, F>(&self, feed: &str, item: &str, f: F) -> impl Future<Output = Result<T, FeedError>> + Send
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn WriteTx) -> Result<T, FeedError> + Send + 'static,
    {
        let _ = (feed, item);
        self.write(f)
    }
}

/// Which feeds this instance pushes, when several instances share one store (see
/// `store_postgres::push_shards`): feeds are spread over `of` shards by id, and an instance
/// pushes (XMPP and WebSub) the feeds of the shards it holds. `None` where one instance
/// pushes everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Share {
    pub shards: std::collections::BTreeSet<i32>,
    pub of: i32,
}

impl Share {
    pub fn owns(&self, feed: i64) -> bool {
        self.of > 0 && self.shards.contains(&(feed.rem_euclid(i64::from(self.of)) as i32))
    }
}
