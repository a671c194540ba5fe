//! What a writer's batch keeps of what its closures read, for the later ones: the rows of
//! the feeds it has locked, and the views that follow each feed. Publishes to one feed come
//! in runs (a batch is whatever queued while the last one ran), and each would otherwise read
//! both again: two statements, on PostgreSQL two round trips, of about ten.
//!
//! - A feed's row is the row for as long as the batch lasts: on PostgreSQL the batch holds
//!   its lock until COMMIT; on SQLite the one writer thread is the only one that changes
//!   feed rows. Every change to the row goes through the transaction, which keeps it here.
//! - The views that follow a feed are kept until a closure of the batch changes
//!   subscriptions. A subscription another process commits while the batch runs was
//!   answered after the batch's publishes were queued (they were all queued when it began),
//!   so none of them owes it a push.
//!
//! A closure that fails gives back what it found, as its savepoint is rolled back; a batch
//! that fails takes what it kept with it.

use crate::driver::Followed;
use feed::ports::FeedRow;
use std::cell::RefCell;
use std::collections::HashMap;

/// See the module docs.
#[derive(Clone, Default)]
pub struct BatchKept {
    /// The rows of the feeds the batch has read or locked, as it has them, by name.
    feeds: HashMap<String, FeedRow>,
    /// The views that follow each feed, by feed id, as read since the batch last changed
    /// subscriptions.
    followed: HashMap<i64, Followed>,
}

/// [`BatchKept`] as the closures of a batch share it.
pub type Kept = RefCell<BatchKept>;

impl BatchKept {
    pub fn feed(&self, name: &str) -> Option<FeedRow> {
        self.feeds.get(name).cloned()
    }

    pub fn keep_feed(&mut self, row: &FeedRow) {
        self.feeds.insert(row.name.clone(), row.clone());
    }

    pub fn followed(&self, feed: i64) -> Option<Followed> {
        self.followed.get(&feed).cloned()
    }

    pub fn keep_followed(&mut self, feed: i64, views: &Followed) {
        self.followed.insert(feed, views.clone());
    }

    /// A closure changed subscriptions: the views kept are stale.
    pub fn subscriptions_changed(&mut self) {
        self.followed.clear();
    }
}
