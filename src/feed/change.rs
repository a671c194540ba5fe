//! Change events: what a committed publish, update or retraction means for each subscribed
//! view, with everything a push needs (the SHIM headers' values).

use super::cursor::Cursor;
use super::item::Item;
use super::node::{OrderBy, View};

/// One committed change to one item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub feed: String,
    /// The item after the change (a tombstone for a retraction).
    pub item: Item,
    /// Whether the item is new (not an update or retraction).
    pub created: bool,
    /// Per subscribed view that the change belongs to.
    pub views: Vec<ViewChange>,
}

/// What one view saw of a change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewChange {
    /// The canonical view name (subscriptions are matched on it).
    pub view: String,
    /// Items in the view after the change.
    pub count: u64,
    /// The cursor of the view's newest item before the change; `None` if it was empty.
    pub previous: Option<Cursor>,
    /// The cursor of the changed item in the view.
    pub last: Cursor,
}

/// Whether a change to `item` belongs to `view`: created-ordered views get new items only,
/// modified-ordered views get new items, updates and retractions; filters apply to the item
/// as it is after the change.
pub fn belongs(view: &View, item: &Item, created: bool) -> bool {
    (created || view.order.by == OrderBy::Modified) && view.filter.matches(item.author.as_deref(), &item.categories)
}
