//! [`WriteTx`] over the writer's connection, inside the batch transaction and the closure's
//! savepoint: every statement here is undone if the closure fails.
//!
//! Failures a caller may provoke on purpose (a feed or item that exists, a feed or item
//! that does not) are found without a failing statement, so they do not abort the
//! savepoint; a closure may go on after them, as it can on the other stores.

use super::modified_counts;
use super::read::{FEED_SQL, PgTx};
use feed::outbox::{HubSubscription, OutboxEntry};
use feed::ports::{FeedRow, StoreError, StoreResult, Subscription, WriteTx};
use feed::{Change, Item};

/// The bare part of a JID: everything before the first `/`.
fn bare(jid: &str) -> &str {
    jid.split_once('/').map_or(jid, |(b, _)| b)
}

/// The distinct terms of an item, first occurrence first: what the filter index holds.
fn distinct_terms(terms: &[String]) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::with_capacity(terms.len());
    for t in terms {
        if !out.contains(&t.as_str()) {
            out.push(t);
        }
    }
    out
}

impl PgTx<'_> {
    fn insert_categories(&self, feed: i64, item: &Item) -> StoreResult<()> {
        let terms = distinct_terms(&item.categories);
        if terms.is_empty() {
            return Ok(());
        }
        self.execute(
            "INSERT INTO item_categories(feed, cseq, term, ctime, mtime, mseq)
             SELECT $1, $2, t, $3, $4, $5 FROM unnest($6::text[]) AS t",
            &[&feed, &item.created.seq, &item.created.t, &item.modified.t, &item.modified.seq, &terms],
        )?;
        Ok(())
    }
}

impl WriteTx for PgTx<'_> {
    /// `FOR NO KEY UPDATE`: publishers of this feed, in this process or another, queue here
    /// until this transaction ends, so each stamps from the counters the previous one
    /// committed and commit order is cursor order. Subscriptions, whose foreign key takes a
    /// `KEY SHARE` lock on the row, do not wait for it.
    fn feed_for_update(&mut self, name: &str) -> StoreResult<Option<FeedRow>> {
        self.feed_row(&format!("{FEED_SQL} FOR NO KEY UPDATE"), name)
    }

    fn create_feed(&mut self, name: &str) -> StoreResult<FeedRow> {
        let row =
            self.query_opt("INSERT INTO feeds(name) VALUES ($1) ON CONFLICT (name) DO NOTHING RETURNING id", &[&name])?;
        match row {
            Some(r) => Ok(FeedRow { id: self.get(&r, 0)?, name: name.to_string(), items: 0, last_t: 0, last_mseq: 0 }),
            None => Err(StoreError::Backend(format!("feed {name:?} exists"))),
        }
    }

    fn save_feed(&mut self, feed: &FeedRow) -> StoreResult<()> {
        let items = i64::try_from(feed.items).map_err(|_| StoreError::Backend("feed item count overflows".into()))?;
        let n = self.execute(
            "UPDATE feeds SET items = $2, last_t = $3, last_mseq = $4 WHERE id = $1",
            &[&feed.id, &items, &feed.last_t, &feed.last_mseq],
        )?;
        match n {
            1 => Ok(()),
            _ => Err(StoreError::Backend(format!("no feed with id {}", feed.id))),
        }
    }

    fn insert_item(&mut self, feed: i64, item: &Item) -> StoreResult<()> {
        let (deleted, when, payload) = super::payload::columns(&item.payload);
        let n = self.execute(
            "INSERT INTO items(feed, id, cseq, ctime, mseq, mtime, author, atom_id, categories, deleted, when_ms, payload)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
             ON CONFLICT DO NOTHING",
            &[
                &feed,
                &item.id,
                &item.created.seq,
                &item.created.t,
                &item.modified.seq,
                &item.modified.t,
                &item.author,
                &item.atom_id,
                &item.categories,
                &deleted,
                &when,
                &payload,
            ],
        )?;
        if n != 1 {
            return Err(StoreError::Backend(format!("item {:?} or one of its seqs exists", item.id)));
        }
        if self.execute("UPDATE feeds SET n_items = n_items + 1 WHERE id = $1", &[&feed])? != 1 {
            return Err(StoreError::Backend(format!("no feed with id {feed}")));
        }
        self.insert_categories(feed, item)?;
        modified_counts::bump(self, feed, Some(item.modified.seq), None)
    }

    fn update_item(&mut self, feed: i64, old: &Item, new: &Item) -> StoreResult<()> {
        if new.id != old.id || new.created != old.created {
            return Err(StoreError::Backend(format!("update of {:?} must keep its id and created key", old.id)));
        }
        // The stored row, not `old`, says which modified bucket to release: a stale `old`
        // must not be able to skew the counts.
        let found = self.query_opt("SELECT cseq, mseq FROM items WHERE feed = $1 AND id = $2", &[&feed, &old.id])?;
        let Some(found) = found else {
            return Err(StoreError::Backend(format!("no item {:?} to update", old.id)));
        };
        let (cseq, old_mseq): (i64, i64) = (self.get(&found, 0)?, self.get(&found, 1)?);
        if cseq != new.created.seq {
            return Err(StoreError::Backend(format!("update of {:?} must keep its created key", old.id)));
        }
        let (deleted, when, payload) = super::payload::columns(&new.payload);
        self.execute(
            "UPDATE items SET mseq = $3, mtime = $4, author = $5, atom_id = $6, categories = $7, deleted = $8,
                 when_ms = $9, payload = $10
             WHERE feed = $1 AND cseq = $2",
            &[
                &feed,
                &cseq,
                &new.modified.seq,
                &new.modified.t,
                &new.author,
                &new.atom_id,
                &new.categories,
                &deleted,
                &when,
                &payload,
            ],
        )?;
        self.execute("DELETE FROM item_categories WHERE feed = $1 AND cseq = $2", &[&feed, &cseq])?;
        self.insert_categories(feed, new)?;
        modified_counts::bump(self, feed, Some(new.modified.seq), Some(old_mseq))
    }

    fn put_subscription(&mut self, feed: i64, sub: &Subscription) -> StoreResult<()> {
        self.execute(
            "INSERT INTO subscriptions(feed, view, jid, bare, node, subid) VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (feed, view, jid) DO UPDATE SET node = excluded.node, subid = excluded.subid",
            &[&feed, &sub.view, &sub.jid, &bare(&sub.jid), &sub.node, &sub.subid],
        )?;
        Ok(())
    }

    fn delete_subscription(&mut self, feed: i64, view: &str, jid: &str) -> StoreResult<bool> {
        let n = self
            .execute("DELETE FROM subscriptions WHERE feed = $1 AND view = $2 AND jid = $3", &[&feed, &view, &jid])?;
        Ok(n > 0)
    }

    fn delete_subscriptions_of(&mut self, jid: &str) -> StoreResult<u64> {
        // Through the `bare` index: a JID's subscriptions are among its bare JID's.
        self.execute("DELETE FROM subscriptions WHERE bare = $1 AND jid = $2", &[&bare(jid), &jid])
    }

    fn put_hub_subscription(&mut self, sub: &HubSubscription) -> StoreResult<HubSubscription> {
        self.put_hub_subscription_sql(sub)
    }

    fn delete_hub_subscription(&mut self, feed: i64, view: &str, callback: &str) -> StoreResult<bool> {
        self.delete_hub_subscription_sql(feed, view, callback)
    }

    fn expire_hub_subscriptions(&mut self, now: i64) -> StoreResult<Vec<i64>> {
        self.expire_hub_subscriptions_sql(now)
    }

    fn hub_delivered(&mut self, id: i64, upto: i64) -> StoreResult<bool> {
        self.hub_delivered_sql(id, upto)
    }

    fn append_outbox(&mut self, entry: &OutboxEntry) -> StoreResult<i64> {
        self.append_outbox_sql(entry)
    }

    fn prune_outbox(&mut self, keep: u64) -> StoreResult<u64> {
        self.prune_outbox_sql(keep)
    }

    /// Also logs the change for the instance that pushes its feed (see `relay`), in this
    /// transaction: a change is owed to subscribers exactly when it is committed. A failure
    /// to log fails the closure, like any failed statement.
    fn emit(&mut self, change: Change) {
        if !change.views.is_empty()
            && let Err(e) = self.log_push(&change)
        {
            // A failed statement is noted already; a row not written is noted here.
            self.failed.borrow_mut().get_or_insert(e);
        }
        self.changes.push(change);
    }
}

impl PgTx<'_> {
    /// Appends a change to `push_log` (see `relay`), in its feed's shard.
    fn log_push(&self, change: &Change) -> StoreResult<()> {
        let (deleted, when, payload) = super::payload::columns(&change.item.payload);
        let views: Vec<&str> = change.views.iter().map(|v| v.view.as_str()).collect();
        let counts: Vec<i64> = change.views.iter().map(|v| v.count.min(i64::MAX as u64) as i64).collect();
        let previous: Vec<Option<String>> = change.views.iter().map(|v| v.previous.map(|c| c.to_string())).collect();
        let last: Vec<String> = change.views.iter().map(|v| v.last.to_string()).collect();
        let n = self.execute(
            "INSERT INTO push_log(feed, shard, item_id, created, modified, deleted, when_ms, payload,
                                  views, counts, previous, last)
             SELECT id, (id % $12)::int, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 FROM feeds WHERE name = $1",
            &[
                &change.feed,
                &change.item.id,
                &change.created,
                &change.item.modified.t,
                &deleted,
                &when,
                &payload,
                &views,
                &counts,
                &previous,
                &last,
                &i64::from(super::push_shards::SHARDS),
            ],
        )?;
        if n == 0 {
            return Err(StoreError::Backend(format!("cannot log a push: no feed {:?}", change.feed)));
        }
        Ok(())
    }
}
