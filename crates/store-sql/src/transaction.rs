//! The core's [`ReadTx`] and [`WriteTx`] for both SQL stores: [`SqlTx`] over a store's
//! [`Driver`], on a connection that is inside a transaction (a read snapshot, or a writer's
//! batch and the closure's savepoint). The caller owns the transaction.
//!
//! Every read and write that is the same in both databases is here: which statement, which
//! rows, which error when. Shared statements are written once with `?N` parameters
//! ([`Statement::written`]); where a database spells a statement its own way, its driver
//! supplies it (see [`crate::driver`]).

use crate::dialect::{Arg, Statement};
use crate::driver::{Columns, Driver, Expect, Followed};
use crate::modified_counts;
use crate::reads::{
    FEED_COLUMNS, HUB_SUBSCRIPTION_COLUMNS, ITEM_COLUMNS, OUTBOX_COLUMNS, by_cseq_query, count_query, first_seq_query,
    limit_arg, nth_query, scan_query, ties_query,
};
use feed::outbox::{HubSubscription, OutboxEntry, OutboxStats};
use feed::policy::bare;
use feed::ports::{FeedRow, Range, ReadTx, Scope, SourceState, StoreError, StoreResult, Subscription, WriteTx};
use feed::{Change, Item, Key, OrderBy};

/// A transaction's view of a connection that is already inside one.
pub struct SqlTx<D> {
    driver: D,
    /// Changes emitted by the closure running now; the writer takes them when it succeeds.
    changes: Vec<Change>,
}

impl<D> SqlTx<D> {
    pub fn new(driver: D) -> SqlTx<D> {
        SqlTx { driver, changes: Vec::new() }
    }

    pub fn driver(&self) -> &D {
        &self.driver
    }

    /// The changes emitted so far, taken: the writer keeps them if the closure succeeded.
    pub fn take_changes(&mut self) -> Vec<Change> {
        std::mem::take(&mut self.changes)
    }
}

/// A feed's row, from [`FEED_COLUMNS`].
pub fn feed_row(r: &dyn Columns) -> StoreResult<FeedRow> {
    let (id, name, items) = (r.int(0)?, r.text(1)?, r.int(2)?.max(0) as u64);
    Ok(FeedRow { id, name, items, last_t: r.int(3)?, last_mseq: r.int(4)? })
}

/// The views that follow a feed (XMPP, WebSub), from its rows of (view, whether a WebSub
/// subscription follows it), each kind's in view order.
pub fn followed(rows: Vec<(String, bool)>) -> Followed {
    let (hub, xmpp): (Vec<_>, Vec<_>) = rows.into_iter().partition(|(_, hub)| *hub);
    (xmpp.into_iter().map(|(v, _)| v).collect(), hub.into_iter().map(|(v, _)| v).collect())
}

fn subscription(r: &dyn Columns) -> StoreResult<Subscription> {
    Ok(Subscription { node: r.text(0)?, view: r.text(1)?, jid: r.text(2)?, subid: r.text(3)? })
}

/// A WebSub subscription, from [`HUB_SUBSCRIPTION_COLUMNS`].
pub fn hub_subscription(r: &dyn Columns) -> StoreResult<HubSubscription> {
    let (id, feed, view, topic) = (r.int(0)?, r.int(1)?, r.text(2)?, r.text(3)?);
    let (callback, secret, expires, delivered) = (r.text(4)?, r.opt_text(5)?, r.int(6)?, r.int(7)?);
    Ok(HubSubscription { id, feed, view, topic, callback, secret, expires, delivered })
}

fn key(r: &dyn Columns) -> StoreResult<Key> {
    Ok(Key { t: r.int(0)?, seq: r.int(1)? })
}

/// The count a statement returned in its first row (none: 0).
fn count_of(rows: Vec<i64>) -> u64 {
    rows.first().map_or(0, |n| (*n).max(0) as u64)
}

/// The distinct terms of an item, first occurrence first: what the category index holds.
fn distinct_terms(terms: &[String]) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::with_capacity(terms.len());
    for t in terms {
        if !out.contains(&t.as_str()) {
            out.push(t);
        }
    }
    out
}

impl<D: Driver> SqlTx<D> {
    /// Keeps a feed's row as this transaction now has it, for the batch's later closures.
    fn kept_feed(&self, row: &FeedRow) {
        if let Some(kept) = self.driver.kept() {
            kept.borrow_mut().keep_feed(row);
        }
    }

    /// The batch wrote `item` to `feed`: kept with the ids at its time, for the later
    /// closures. The feed's row as kept says what was newest before it.
    fn wrote_item(&self, feed: i64, item: &Item) {
        if let Some(kept) = self.driver.kept() {
            let mut kept = kept.borrow_mut();
            let newest_before = kept.feed_by_id(feed).map(|f| f.last_t);
            kept.wrote_item(feed, item, newest_before);
        }
    }

    /// This transaction changed subscriptions: the views the batch kept are stale.
    fn subscriptions_changed(&self) {
        if let Some(kept) = self.driver.kept() {
            kept.borrow_mut().subscriptions_changed();
        }
    }

    /// Runs a statement written with `?N` parameters, reading its rows with `read`.
    fn rows<T>(
        &self,
        sql: &str,
        args: &[Arg<'_>],
        read: impl FnMut(&dyn Columns) -> StoreResult<T>,
    ) -> StoreResult<Vec<T>> {
        self.driver.rows(&Statement::written(D::DIALECT, sql, args), read)
    }

    /// Runs a statement written with `?N` parameters that returns no rows; how many it
    /// changed.
    fn execute(&self, sql: &str, args: &[Arg<'_>]) -> StoreResult<u64> {
        self.driver.execute(&Statement::written(D::DIALECT, sql, args))
    }

    /// Runs a write written with `?N` parameters whose count is only checked, perhaps with
    /// the next statement (see [`Statements::write`]).
    fn write(&self, sql: &str, args: &[Arg<'_>], expect: Expect) -> StoreResult<()> {
        self.driver.write(&Statement::written(D::DIALECT, sql, args), expect)
    }

    /// The store's own count of the feed's items (see `feeds.n_items` in the schemas).
    fn n_items(&self, feed: i64) -> StoreResult<u64> {
        Ok(count_of(self.rows("SELECT n_items FROM feeds WHERE id = ?1", &[Arg::Int(feed)], |r| r.int(0))?))
    }

    /// The seq of the first item of the (unfiltered) order at or after `key`.
    fn first_seq_from(&self, feed: i64, by: OrderBy, key: Key) -> StoreResult<Option<i64>> {
        let seqs = self.driver.rows(&first_seq_query(D::DIALECT, by, feed, key), |r| r.int(0))?;
        Ok(seqs.into_iter().next())
    }

    /// The feed named `name`, its `SELECT` followed by `lock`.
    fn feed_row(&self, name: &str, lock: &str) -> StoreResult<Option<FeedRow>> {
        let sql = format!("SELECT {FEED_COLUMNS} FROM feeds WHERE name = ?1{lock}");
        Ok(self.rows(&sql, &[Arg::Text(name)], feed_row)?.into_iter().next())
    }
}

impl<D: Driver> ReadTx for SqlTx<D> {
    fn feed(&self, name: &str) -> StoreResult<Option<FeedRow>> {
        self.feed_row(name, "")
    }

    fn feeds(&self, after: Option<&str>, limit: usize) -> StoreResult<Vec<FeedRow>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.driver.rows(&D::feeds_after(after, limit_arg(limit)), feed_row)
    }

    fn item(&self, feed: i64, id: &str) -> StoreResult<Option<Item>> {
        let kept = self.driver.kept();
        if let Some(item) = kept.and_then(|k| k.borrow().item(feed, id)) {
            return Ok(item);
        }
        let sql = format!("SELECT {ITEM_COLUMNS} FROM items i WHERE i.feed = ?1 AND i.id = ?2");
        let item = self.rows(&sql, &[Arg::Int(feed), Arg::Text(id)], |r| r.item())?.into_iter().next();
        // Only under the feed's lock is it the item until the batch commits.
        if let Some(kept) = kept
            && kept.borrow().feed_by_id(feed).is_some()
        {
            kept.borrow_mut().keep_item(feed, id, item.clone());
        }
        Ok(item)
    }

    fn scan(&self, scope: Scope<'_>, range: Range) -> StoreResult<Vec<Item>> {
        let Range { after, before, descending, limit } = range;
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.driver.rows(&scan_query(D::DIALECT, &scope, after, before, descending, limit), |r| r.item())
    }

    fn count(&self, scope: Scope<'_>) -> StoreResult<u64> {
        if scope.filter.is_empty() {
            return self.n_items(scope.feed);
        }
        Ok(count_of(self.driver.rows(&count_query(D::DIALECT, &scope, None), |r| r.int(0))?))
    }

    fn rank(&self, scope: Scope<'_>, key: Key) -> StoreResult<u64> {
        if scope.filter.is_empty() {
            // The items below `key` are exactly those before the first item at or after it.
            let Some(seq) = self.first_seq_from(scope.feed, scope.by, key)? else {
                return self.n_items(scope.feed);
            };
            return match scope.by {
                // Created seqs are dense from 1 and follow key order.
                OrderBy::Created => Ok(seq.saturating_sub(1).max(0) as u64),
                OrderBy::Modified => self.driver.count_modified_below(scope.feed, seq),
            };
        }
        Ok(count_of(self.driver.rows(&count_query(D::DIALECT, &scope, Some(key)), |r| r.int(0))?))
    }

    fn nth(&self, scope: Scope<'_>, index: u64) -> StoreResult<Option<Key>> {
        let Ok(offset) = i64::try_from(index) else { return Ok(None) };
        let q = if scope.filter.is_empty() {
            if index >= self.n_items(scope.feed)? {
                return Ok(None);
            }
            match scope.by {
                OrderBy::Created => by_cseq_query(D::DIALECT, scope.feed, offset + 1),
                OrderBy::Modified => return modified_counts::nth(&self.driver, scope.feed, index),
            }
        } else {
            nth_query(D::DIALECT, &scope, offset)
        };
        Ok(self.driver.rows(&q, key)?.into_iter().next())
    }

    fn ties(&self, scope: Scope<'_>, t: i64, upto_seq: i64, limit: usize) -> StoreResult<Vec<String>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        if scope.filter.is_empty()
            && scope.by == OrderBy::Modified
            && let Some(ids) = self.driver.kept().and_then(|k| k.borrow().ties(scope.feed, t, upto_seq, limit))
        {
            return Ok(ids);
        }
        self.driver.rows(&ties_query(D::DIALECT, &scope, t, upto_seq, limit), |r| r.text(0))
    }

    fn subscribed_views(&self, feed: i64) -> StoreResult<Vec<String>> {
        self.rows("SELECT DISTINCT view FROM subscriptions WHERE feed = ?1 ORDER BY view", &[Arg::Int(feed)], |r| {
            r.text(0)
        })
    }

    fn subscribers(&self, feed: i64, view: &str) -> StoreResult<Vec<Subscription>> {
        self.rows(
            "SELECT node, view, jid, subid FROM subscriptions WHERE feed = ?1 AND view = ?2 ORDER BY jid",
            &[Arg::Int(feed), Arg::Text(view)],
            subscription,
        )
    }

    fn subscriptions_of(&self, bare: &str) -> StoreResult<Vec<Subscription>> {
        self.rows(
            "SELECT s.node, s.view, s.jid, s.subid FROM subscriptions s JOIN feeds f ON f.id = s.feed
             WHERE s.bare = ?1 ORDER BY f.name, s.view, s.jid",
            &[Arg::Text(bare)],
            subscription,
        )
    }

    fn subscription_count(&self, feed: i64) -> StoreResult<u64> {
        Ok(count_of(self.rows("SELECT COUNT(*) FROM subscriptions WHERE feed = ?1", &[Arg::Int(feed)], |r| r.int(0))?))
    }

    fn hub_views(&self, feed: i64) -> StoreResult<Vec<String>> {
        self.rows("SELECT DISTINCT view FROM hub_subscriptions WHERE feed = ?1 ORDER BY view", &[Arg::Int(feed)], |r| {
            r.text(0)
        })
    }

    fn followed_views(&self, feed: i64) -> StoreResult<(Vec<String>, Vec<String>)> {
        if let Some(views) = self.driver.kept().and_then(|k| k.borrow().followed(feed)) {
            return Ok(views);
        }
        let rows = self.rows(
            "SELECT view, CAST(0 AS BIGINT) FROM subscriptions WHERE feed = ?1
             UNION SELECT view, CAST(1 AS BIGINT) FROM hub_subscriptions WHERE feed = ?1
             ORDER BY 2, 1",
            &[Arg::Int(feed)],
            |r| Ok((r.text(0)?, r.int(1)? == 1)),
        )?;
        let followed = followed(rows);
        if let Some(kept) = self.driver.kept() {
            kept.borrow_mut().keep_followed(feed, &followed);
        }
        Ok(followed)
    }

    fn hub_subscriptions(&self, after: i64, limit: usize) -> StoreResult<Vec<HubSubscription>> {
        let sql =
            format!("SELECT {HUB_SUBSCRIPTION_COLUMNS} FROM hub_subscriptions WHERE id > ?1 ORDER BY id LIMIT ?2");
        self.rows(&sql, &[Arg::Int(after), Arg::Int(limit_arg(limit))], hub_subscription)
    }

    fn hub_subscribers(&self, feed: i64) -> StoreResult<Vec<HubSubscription>> {
        let sql =
            format!("SELECT {HUB_SUBSCRIPTION_COLUMNS} FROM hub_subscriptions WHERE feed = ?1 ORDER BY view, callback");
        self.rows(&sql, &[Arg::Int(feed)], hub_subscription)
    }

    fn outbox(&self, feed: i64, view: &str, after: i64, limit: usize) -> StoreResult<Vec<OutboxEntry>> {
        let sql = format!(
            "SELECT {OUTBOX_COLUMNS}
             FROM hub_outbox WHERE feed = ?1 AND view = ?2 AND seq > ?3 ORDER BY seq LIMIT ?4"
        );
        let args = [Arg::Int(feed), Arg::Text(view), Arg::Int(after), Arg::Int(limit_arg(limit))];
        self.rows(&sql, &args, |r| r.outbox_entry())
    }

    fn outbox_stats(&self) -> StoreResult<OutboxStats> {
        let stats = self.rows("SELECT COUNT(*), MIN(at) FROM hub_outbox", &[], |r| {
            Ok(OutboxStats { rows: r.int(0)?.max(0) as u64, oldest: r.opt_int(1)? })
        })?;
        Ok(stats.into_iter().next().unwrap_or(OutboxStats { rows: 0, oldest: None }))
    }

    fn source_state(&self, feed: i64) -> StoreResult<Option<SourceState>> {
        let sql = "SELECT configured, location, etag, last_modified FROM source_state WHERE feed = ?1";
        let states = self.rows(sql, &[Arg::Int(feed)], |r| {
            Ok(SourceState {
                configured: r.text(0)?,
                location: r.text(1)?,
                etag: r.opt_text(2)?,
                last_modified: r.opt_text(3)?,
            })
        })?;
        Ok(states.into_iter().next())
    }
}

impl<D: Driver> WriteTx for SqlTx<D> {
    fn feed_for_update(&mut self, name: &str) -> StoreResult<Option<FeedRow>> {
        if let Some(row) = self.driver.kept().and_then(|k| k.borrow().feed(name)) {
            return Ok(Some(row));
        }
        let row = self.feed_row(name, D::LOCK_FEED)?;
        if let Some(row) = &row {
            self.kept_feed(row);
        }
        Ok(row)
    }

    fn create_feed(&mut self, name: &str) -> StoreResult<FeedRow> {
        let id = self.driver.insert_feed(name)?;
        let row = FeedRow { id, name: name.to_string(), items: 0, last_t: 0, last_mseq: 0 };
        self.kept_feed(&row);
        Ok(row)
    }

    fn save_feed(&mut self, feed: &FeedRow) -> StoreResult<()> {
        // Kept first: a store that writes the row once for the batch writes it from there.
        self.kept_feed(feed);
        self.driver.save_feed_row(feed)
    }

    fn insert_item(&mut self, feed: i64, item: &Item) -> StoreResult<()> {
        self.driver.insert_item_row(feed, item)?;
        self.driver.count_item(feed)?;
        self.driver.index_categories(feed, item, &distinct_terms(&item.categories))?;
        self.driver.move_modified(feed, Some(item.modified.seq), None)?;
        self.wrote_item(feed, item);
        Ok(())
    }

    fn update_item(&mut self, feed: i64, old: &Item, new: &Item) -> StoreResult<()> {
        if new.id != old.id || new.created != old.created {
            return Err(StoreError::Backend(format!("update of {:?} must keep its id and created key", old.id)));
        }
        // The stored row, not `old`, says which modified bucket to release: a stale `old`
        // must not be able to skew the counts.
        // As the batch knows it, if it does (kept under the feed's lock, so the stored row).
        let kept = self.driver.kept().and_then(|k| k.borrow().item(feed, &old.id));
        let found = match kept {
            Some(item) => item.map(|i| (i.created.seq, i.modified.seq)),
            None => self
                .rows(
                    "SELECT cseq, mseq FROM items WHERE feed = ?1 AND id = ?2",
                    &[Arg::Int(feed), Arg::Text(&old.id)],
                    |r| Ok((r.int(0)?, r.int(1)?)),
                )?
                .into_iter()
                .next(),
        };
        let Some((cseq, old_mseq)) = found else {
            return Err(StoreError::Backend(format!("no item {:?} to update", old.id)));
        };
        if cseq != new.created.seq {
            return Err(StoreError::Backend(format!("update of {:?} must keep its created key", old.id)));
        }
        self.driver.update_item_row(feed, cseq, new)?;
        let sql = "DELETE FROM item_categories WHERE feed = ?1 AND cseq = ?2";
        self.write(sql, &[Arg::Int(feed), Arg::Int(cseq)], Expect::Any)?;
        self.driver.index_categories(feed, new, &distinct_terms(&new.categories))?;
        self.driver.move_modified(feed, Some(new.modified.seq), Some(old_mseq))?;
        self.wrote_item(feed, new);
        Ok(())
    }

    fn put_subscription(&mut self, feed: i64, sub: &Subscription) -> StoreResult<()> {
        self.subscriptions_changed();
        let (view, jid, node, subid) = (sub.view.as_str(), sub.jid.as_str(), sub.node.as_str(), sub.subid.as_str());
        let args =
            [Arg::Int(feed), Arg::Text(view), Arg::Text(jid), Arg::Text(bare(jid)), Arg::Text(node), Arg::Text(subid)];
        self.execute(
            "INSERT INTO subscriptions(feed, view, jid, bare, node, subid) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (feed, view, jid) DO UPDATE SET node = excluded.node, subid = excluded.subid",
            &args,
        )?;
        Ok(())
    }

    fn delete_subscription(&mut self, feed: i64, view: &str, jid: &str) -> StoreResult<bool> {
        self.subscriptions_changed();
        Ok(self.execute(
            "DELETE FROM subscriptions WHERE feed = ?1 AND view = ?2 AND jid = ?3",
            &[Arg::Int(feed), Arg::Text(view), Arg::Text(jid)],
        )? > 0)
    }

    fn delete_subscriptions_of(&mut self, jid: &str) -> StoreResult<u64> {
        self.subscriptions_changed();
        // Through the `bare` index: a JID's subscriptions are among its bare JID's.
        self.execute("DELETE FROM subscriptions WHERE bare = ?1 AND jid = ?2", &[Arg::Text(bare(jid)), Arg::Text(jid)])
    }

    fn put_hub_subscription(&mut self, sub: &HubSubscription) -> StoreResult<HubSubscription> {
        self.subscriptions_changed();
        self.driver.upsert_hub_subscription(sub)
    }

    fn delete_hub_subscription(&mut self, feed: i64, view: &str, callback: &str) -> StoreResult<bool> {
        self.subscriptions_changed();
        Ok(self.execute(
            "DELETE FROM hub_subscriptions WHERE feed = ?1 AND view = ?2 AND callback = ?3",
            &[Arg::Int(feed), Arg::Text(view), Arg::Text(callback)],
        )? > 0)
    }

    fn expire_hub_subscriptions(&mut self, now: i64) -> StoreResult<Vec<i64>> {
        self.subscriptions_changed();
        self.rows("DELETE FROM hub_subscriptions WHERE expires <= ?1 RETURNING id", &[Arg::Int(now)], |r| r.int(0))
    }

    fn put_source_state(&mut self, feed: i64, state: &SourceState) -> StoreResult<()> {
        self.execute(
            "INSERT INTO source_state (feed, configured, location, etag, last_modified) VALUES (?1, ?2, ?3, ?4, ?5) \
             ON CONFLICT (feed) DO UPDATE SET configured = excluded.configured, location = excluded.location, \
             etag = excluded.etag, last_modified = excluded.last_modified",
            &[
                Arg::Int(feed),
                Arg::Text(&state.configured),
                Arg::Text(&state.location),
                Arg::OptText(state.etag.as_deref()),
                Arg::OptText(state.last_modified.as_deref()),
            ],
        )?;
        Ok(())
    }

    fn hub_delivered(&mut self, id: i64, upto: i64) -> StoreResult<bool> {
        self.driver.raise_delivered(id, upto)
    }

    fn append_outbox(&mut self, entry: &OutboxEntry) -> StoreResult<i64> {
        self.driver.insert_outbox(entry)
    }

    /// Per view, one lookup of the slowest subscription's mark and one index range delete:
    /// a correlated `MIN` per outbox row would cost rows × subscriptions.
    fn prune_outbox(&mut self, keep: u64) -> StoreResult<u64> {
        let marks =
            self.rows("SELECT feed, view, MIN(delivered) FROM hub_subscriptions GROUP BY feed, view", &[], |r| {
                Ok((r.int(0)?, r.text(1)?, r.int(2)?))
            })?;
        let mut n = 0u64;
        for (feed, view, mark) in &marks {
            n += self.execute(
                "DELETE FROM hub_outbox WHERE feed = ?1 AND view = ?2 AND seq <= ?3",
                &[Arg::Int(*feed), Arg::Text(view), Arg::Int(*mark)],
            )?;
        }
        n += self.execute(D::DELETE_UNFOLLOWED_OUTBOX, &[])?;
        n += self.execute(D::DELETE_OUTBOX_BEYOND, &[Arg::Int(keep.min(i64::MAX as u64) as i64)])?;
        Ok(n)
    }

    fn emit(&mut self, change: Change) {
        self.driver.emitted(&change);
        self.changes.push(change);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_terms_keep_the_first_of_each_in_order() {
        let terms: Vec<String> = ["b", "a", "b", "c", "a"].map(String::from).into();
        assert_eq!(distinct_terms(&terms), ["b", "a", "c"]);
    }
}
