//! Writes as intents: publish (append a new item or update one) and retract, on any
//! [`WriteTx`]. This is the only place that stamps an item (the feed's clock, its created and
//! modified sequences) and the only place that works out what each subscribed view saw of a
//! change, so every store and every caller (the service, benchmarks, crash tests) writes
//! items the same way. Stores implement only the primitives these are made of.

use super::change::{Change, ViewChange, belongs};
use super::cursor::Cursor;
use super::error::FeedError;
use super::item::{Entry, Item, Key, Payload};
use super::node::{NodeName, Order, View};
use super::outbox::OutboxEntry;
use super::paging::{cursor_of, scope};
use super::ports::{FeedRow, Range, ReadTx, WriteTx};

impl dyn WriteTx + '_ {
    /// Appends the item `id` to `feed`, or updates it if it exists; emits the change to
    /// every subscribed view it belongs to. `now` is the wall clock (Unix ms); `order` is
    /// the feed's default order, which subscriptions without one were made against.
    pub fn publish(
        &mut self,
        feed: &mut FeedRow,
        id: String,
        entry: Entry,
        now: i64,
        order: Order,
    ) -> Result<Item, FeedError> {
        let old = self.item(feed.id, &id)?;
        let modified = next_modified(feed, old.as_ref(), now);
        let created = match &old {
            Some(o) => o.created,
            None => {
                feed.items += 1;
                Key { t: modified.t, seq: feed.items as i64 }
            }
        };
        let item = Item {
            id,
            created,
            modified,
            author: entry.author,
            categories: entry.categories,
            atom_id: entry.atom_id,
            payload: Payload::Entry(entry.xml),
        };
        self.commit(feed, old, item.clone(), order)?;
        Ok(item)
    }

    /// Retracts the item `id`: it stays as a tombstone. Retracting a tombstone changes
    /// nothing and emits nothing; an unknown id is `ItemNotFound`.
    pub fn retract(&mut self, feed: &mut FeedRow, id: &str, now: i64, order: Order) -> Result<(), FeedError> {
        let old = self.item(feed.id, id)?.ok_or_else(|| FeedError::ItemNotFound(id.to_string()))?;
        if old.is_deleted() {
            return Ok(());
        }
        let modified = next_modified(feed, Some(&old), now);
        let item = Item {
            modified,
            payload: Payload::Tombstone {
                atom_ref: old.atom_id.clone().unwrap_or_else(|| id.to_string()),
                when: modified.t,
            },
            ..old.clone()
        };
        self.commit(feed, Some(old), item, order)
    }

    /// Stores an item's new version with the feed's counters and emits what every
    /// subscribed view (XMPP or WebSub) saw of it; appends it to the outbox for each view
    /// with WebSub subscriptions.
    fn commit(&mut self, feed: &FeedRow, old: Option<Item>, item: Item, order: Order) -> Result<(), FeedError> {
        let created = old.is_none();
        let (mut names, hub_views) = self.followed_views(feed.id)?;
        names.extend(hub_views.iter().cloned());
        names.sort_unstable();
        names.dedup();
        let views: Vec<View> = names
            .iter()
            .filter_map(|v| NodeName::parse(v).ok().map(|n| n.resolve(order)))
            .filter(|v| belongs(v, &item, created))
            .collect();
        let mut previous = Vec::with_capacity(views.len());
        for v in &views {
            previous.push(newest_cursor(self, feed, v)?);
        }
        match &old {
            None => self.insert_item(feed.id, &item)?,
            Some(o) => self.update_item(feed.id, o, &item)?,
        }
        self.save_feed(feed)?;
        let mut changes = Vec::with_capacity(views.len());
        for (v, previous) in views.iter().zip(previous) {
            let s = scope(feed, v);
            changes.push(ViewChange {
                view: v.canonical(),
                count: self.count(s)?,
                previous,
                last: cursor_of(self, s, item.key(v.order.by))?,
            });
        }
        // WebSub deliveries are owed in this same transaction: durable with the change.
        for c in changes.iter().filter(|c| hub_views.contains(&c.view)) {
            self.append_outbox(&OutboxEntry {
                seq: 0,
                feed: feed.id,
                view: c.view.clone(),
                item_id: item.id.clone(),
                modified: item.modified.t,
                payload: item.payload.clone(),
                count: c.count,
                previous: c.previous,
                last: c.last,
                at: item.modified.t,
            })?;
        }
        self.emit(Change { feed: feed.name.clone(), item, created, views: changes });
        Ok(())
    }
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
fn newest_cursor(tx: &dyn ReadTx, feed: &FeedRow, view: &View) -> Result<Option<Cursor>, FeedError> {
    let s = scope(feed, view);
    match tx.scan(s, Range { descending: true, limit: 1, ..Range::default() })?.first() {
        Some(i) => Ok(Some(cursor_of(tx, s, i.key(view.order.by))?)),
        None => Ok(None),
    }
}
