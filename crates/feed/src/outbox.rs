//! WebSub subscriptions and the outbox, as the core and the stores see them (SPEC §10).
//!
//! Durability without a row per subscriber: a committed change that enters a view with
//! WebSub subscriptions is appended **once** to the outbox, in the same transaction as the
//! change itself, under an ascending sequence number. Each subscription keeps only the
//! sequence number it has been served up to (`delivered`). So a crash between a commit and
//! its deliveries loses nothing (the outbox row is as durable as the item), ten thousand
//! subscribers of one view cost one row per change, and order per subscriber is the
//! sequence order, which per view is commit order (a feed's writes are serialised).
//!
//! The outbox is bounded: rows every subscription of their view has passed are removed, and
//! a view never keeps more than a configured number of rows, so a dead callback cannot make
//! it grow; a subscriber that fell behind further sees the gap through `fo:prev_cursor`.

use super::cursor::Cursor;
use super::item::{Item, Payload};

/// A stored WebSub subscription.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubSubscription {
    /// The store's id; ignored by [`put_hub_subscription`](super::ports::WriteTx::put_hub_subscription).
    pub id: i64,
    /// The feed's id.
    pub feed: i64,
    /// The canonical view name (what changes are matched on).
    pub view: String,
    /// The topic URL as the subscriber gave it (the `self` link of its documents).
    pub topic: String,
    pub callback: String,
    /// The HMAC key of `X-Hub-Signature`, if the subscriber gave one.
    pub secret: Option<String>,
    /// When the lease ends, Unix ms.
    pub expires: i64,
    /// The outbox sequence number this subscription has been served up to.
    pub delivered: i64,
}

/// One change as one view saw it, waiting in the outbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboxEntry {
    /// Ascending in commit order within a view; assigned by the store (ignored on append).
    pub seq: i64,
    pub feed: i64,
    /// The canonical view name.
    pub view: String,
    pub item_id: String,
    /// The item's modification time after the change, Unix ms.
    pub modified: i64,
    /// The item after the change (a tombstone for a retraction).
    pub payload: Payload,
    /// Items in the view after the change.
    pub count: u64,
    /// The view's newest cursor before the change; `None` when it was empty.
    pub previous: Option<Cursor>,
    /// The changed item's cursor in the view.
    pub last: Cursor,
    /// When it was committed, Unix ms (for the age of the oldest undelivered change).
    pub at: i64,
}

impl OutboxEntry {
    /// The item as a document shows it: id, modification time and payload are all an
    /// outbox row keeps, and all an Atom entry of a delivery needs.
    pub fn item(&self) -> Item {
        Item::bare(self.item_id.clone(), self.modified, self.payload.clone())
    }
}

/// How full the outbox is, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutboxStats {
    /// Rows waiting for at least one subscription.
    pub rows: u64,
    /// The commit time of the oldest of them, Unix ms.
    pub oldest: Option<i64>,
}
