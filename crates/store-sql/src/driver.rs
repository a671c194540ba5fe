//! What the shared transaction ([`SqlTx`](crate::transaction::SqlTx)) needs from a store's
//! driver. A store implements these traits for its connection, and the core's `ReadTx` and
//! `WriteTx` are then implemented once, for both databases.
//!
//! Why statements rather than the ports' methods: what a read or a write does (which rows,
//! in which order, which error when) is the same in both databases and is written once; what
//! differs is how a statement reaches the driver and how a row's columns convert
//! ([`Statements`], [`Columns`]), and a few statements that one database spells its own way
//! or needs alone ([`FeedStatements`], [`HubStatements`], [`ModifiedCounts`]).

use crate::batch_kept::Kept;
use crate::dialect::{Arg, Dialect, Statement};
use feed::outbox::{HubSubscription, OutboxEntry};
use feed::ports::FeedRow;
use feed::ports::{StoreError, StoreResult};
use feed::{Change, Item};

/// One row of a result, read by column index. A failure is the driver's, as its store maps
/// it onto the core's kinds.
pub trait Columns {
    fn int(&self, i: usize) -> StoreResult<i64>;
    fn opt_int(&self, i: usize) -> StoreResult<Option<i64>>;
    fn text(&self, i: usize) -> StoreResult<String>;
    fn opt_text(&self, i: usize) -> StoreResult<Option<String>>;
    /// The item of a row selected with [`ITEM_COLUMNS`](crate::reads::ITEM_COLUMNS): each
    /// database keeps an item's categories and payload in its own column types.
    fn item(&self) -> StoreResult<Item>;
    /// The outbox row of a row selected with
    /// [`OUTBOX_COLUMNS`](crate::reads::OUTBOX_COLUMNS), as [`Columns::item`].
    fn outbox_entry(&self) -> StoreResult<OutboxEntry>;
}

/// What a write must have changed, checked once it has run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Any number of rows.
    Any,
    /// Exactly one row; otherwise this error's text.
    One(String),
    /// At least one row; otherwise this error's text.
    Some(String),
    /// Exactly this many rows (several writes sent as one statement); otherwise this
    /// error's text.
    Rows(u64, String),
}

impl Expect {
    /// Whether `changed` rows meet it: the store's error when not.
    pub fn check(&self, changed: u64) -> StoreResult<()> {
        match self {
            Expect::Any => Ok(()),
            Expect::One(_) if changed == 1 => Ok(()),
            Expect::Some(_) if changed >= 1 => Ok(()),
            Expect::Rows(n, _) if changed == *n => Ok(()),
            Expect::One(why) | Expect::Some(why) | Expect::Rows(_, why) => Err(StoreError::Backend(why.clone())),
        }
    }
}

/// Runs statements on the connection a transaction is on.
pub trait Statements {
    /// How this database writes parameters.
    const DIALECT: Dialect;
    /// Runs a statement, reading each row it returns with `read`.
    fn rows<T>(&self, st: &Statement<'_>, read: impl FnMut(&dyn Columns) -> StoreResult<T>) -> StoreResult<Vec<T>>;
    /// Runs a statement that returns no rows; how many rows it changed.
    fn execute(&self, st: &Statement<'_>) -> StoreResult<u64>;
    /// Runs a write whose only answer is checked (`expect`), now or later: a store whose
    /// every statement is a network round trip sends it with the next statement that needs
    /// an answer, or at the latest with the end of the closure, and a failure then fails the
    /// closure as if it had happened here. Statements still run in the order they were
    /// given. By default, now.
    fn write(&self, st: &Statement<'_>, expect: Expect) -> StoreResult<()> {
        expect.check(self.execute(st)?)
    }
}

/// Feeds and items where the two databases differ.
pub trait FeedStatements: Statements {
    /// What `WriteTx::feed_for_update` adds to the feed's `SELECT`: a row lock where other
    /// processes write the same database, nothing where one writer thread is the only one.
    const LOCK_FEED: &'static str;
    /// The statement listing the feeds named after `after` (all, for `None`), by name, at
    /// most `limit`, selecting [`FEED_COLUMNS`](crate::reads::FEED_COLUMNS).
    fn feeds_after(after: Option<&str>, limit: i64) -> Statement<'_>;
    /// Adds a feed with zeroed counters; its id.
    fn insert_feed(&self, name: &str) -> StoreResult<i64>;
    /// Adds an item's row (its categories and counts are the caller's).
    fn insert_item_row(&self, feed: i64, item: &Item) -> StoreResult<()>;
    /// Replaces the row of the item whose created seq is `cseq` by `new`.
    fn update_item_row(&self, feed: i64, cseq: i64, new: &Item) -> StoreResult<()>;
    /// Writes a feed's counters, as `WriteTx::save_feed` has them. By default, now.
    fn save_feed_row(&self, feed: &FeedRow) -> StoreResult<()> {
        let items = i64::try_from(feed.items).map_err(|_| StoreError::Backend("feed item count overflows".into()))?;
        let args = [Arg::Int(feed.id), Arg::Int(items), Arg::Int(feed.last_t), Arg::Int(feed.last_mseq)];
        let sql = "UPDATE feeds SET items = ?2, last_t = ?3, last_mseq = ?4 WHERE id = ?1";
        self.write(&Statement::written(Self::DIALECT, sql, &args), Expect::One(format!("no feed with id {}", feed.id)))
    }
    /// Counts an item row in (`feeds.n_items`, the store's own count). By default, now.
    fn count_item(&self, feed: i64) -> StoreResult<()> {
        let sql = "UPDATE feeds SET n_items = n_items + 1 WHERE id = ?1";
        let st = Statement::written(Self::DIALECT, sql, &[Arg::Int(feed)]);
        self.write(&st, Expect::One(format!("no feed with id {feed}")))
    }
    /// Files an item under each of `terms`, its distinct categories.
    fn index_categories(&self, feed: i64, item: &Item, terms: &[&str]) -> StoreResult<()>;
    /// Told of each change a closure emits, in its transaction, before it is queued for the
    /// change sink.
    fn emitted(&self, _change: &Change) {}
    /// What the writer's batch keeps of what its closures read, for the later ones
    /// ([`crate::batch_kept`]); `None` in a read snapshot, which keeps nothing.
    fn kept(&self) -> Option<&Kept> {
        None
    }
}

/// The views that follow a feed: those with XMPP subscriptions, those with WebSub ones.
pub type Followed = (Vec<String>, Vec<String>);

/// WebSub subscriptions and the outbox where the two databases differ.
pub trait HubStatements: Statements {
    /// Deletes the outbox rows of views that no WebSub subscription follows any more. Like
    /// the next, spelled for this database (each names a table its own way in a `DELETE`).
    const DELETE_UNFOLLOWED_OUTBOX: &'static str;
    /// Deletes the outbox rows of each view beyond its newest `keep` (its one parameter).
    const DELETE_OUTBOX_BEYOND: &'static str;
    /// `WriteTx::put_hub_subscription`.
    fn upsert_hub_subscription(&self, sub: &HubSubscription) -> StoreResult<HubSubscription>;
    /// `WriteTx::hub_delivered`.
    fn raise_delivered(&self, id: i64, upto: i64) -> StoreResult<bool>;
    /// `WriteTx::append_outbox`.
    fn insert_outbox(&self, entry: &OutboxEntry) -> StoreResult<i64>;
}

/// The per-bucket counts of modified seqs (see [`crate::modified_counts`]) where the two
/// databases keep them differently.
pub trait ModifiedCounts: Statements {
    /// How many items of the feed have an mseq below `mseq`.
    fn count_modified_below(&self, feed: i64, mseq: i64) -> StoreResult<u64>;
    /// Counts the item at mseq `add` in and the one at `remove` out (an update does both).
    fn move_modified(&self, feed: i64, add: Option<i64>, remove: Option<i64>) -> StoreResult<()>;
}

/// Everything [`SqlTx`](crate::transaction::SqlTx) needs of a store's connection.
pub trait Driver: FeedStatements + HubStatements + ModifiedCounts {}

impl<D: FeedStatements + HubStatements + ModifiedCounts> Driver for D {}
