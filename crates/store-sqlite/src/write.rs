//! [`WriteTx`] over the writer's connection, inside the batch transaction and the closure's
//! savepoint: every statement here is undone if the closure fails.

use super::codec::{distinct_terms, encode_categories, payload_columns};
use super::modified_counts;
use super::read::SqlTx;
use crate::codec::Db;
use feed::outbox::{HubSubscription, OutboxEntry};
use feed::ports::{FeedRow, ReadTx, StoreError, StoreResult, Subscription, WriteTx};
use feed::{Change, Item};
use rusqlite::{OptionalExtension, params};

/// The bare part of a JID: everything before the first `/` (a localpart or domain cannot
/// hold one, a resource can).
fn bare(jid: &str) -> &str {
    jid.split_once('/').map_or(jid, |(b, _)| b)
}

impl SqlTx<'_> {
    fn insert_categories(&self, feed: i64, item: &Item) -> StoreResult<()> {
        let mut st = self
            .conn
            .prepare_cached(
                "INSERT INTO item_categories(feed, cseq, term, ctime, mtime, mseq) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .db()?;
        for term in distinct_terms(&item.categories) {
            st.execute(params![feed, item.created.seq, term, item.created.t, item.modified.t, item.modified.seq])
                .db()?;
        }
        Ok(())
    }
}

impl WriteTx for SqlTx<'_> {
    /// A plain read: the one writer thread is the only one that changes feed rows.
    fn feed_for_update(&mut self, name: &str) -> StoreResult<Option<FeedRow>> {
        self.feed(name)
    }

    fn create_feed(&mut self, name: &str) -> StoreResult<FeedRow> {
        let mut st = self.conn.prepare_cached("INSERT INTO feeds(name) VALUES (?1)").db()?;
        st.execute([name]).db()?;
        Ok(FeedRow { id: self.conn.last_insert_rowid(), name: name.to_string(), items: 0, last_t: 0, last_mseq: 0 })
    }

    fn save_feed(&mut self, feed: &FeedRow) -> StoreResult<()> {
        let items = i64::try_from(feed.items).map_err(|_| StoreError::Backend("feed item count overflows".into()))?;
        let mut st =
            self.conn.prepare_cached("UPDATE feeds SET items = ?2, last_t = ?3, last_mseq = ?4 WHERE id = ?1").db()?;
        match st.execute(params![feed.id, items, feed.last_t, feed.last_mseq]).db()? {
            1 => Ok(()),
            _ => Err(StoreError::Backend(format!("no feed with id {}", feed.id))),
        }
    }

    fn insert_item(&mut self, feed: i64, item: &Item) -> StoreResult<()> {
        let (deleted, when, payload) = payload_columns(&item.payload);
        let mut st = self.conn.prepare_cached(
            "INSERT INTO items(feed, id, cseq, ctime, mseq, mtime, author, atom_id, categories, deleted, when_ms, payload)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        ).db()?;
        st.execute(params![
            feed,
            item.id,
            item.created.seq,
            item.created.t,
            item.modified.seq,
            item.modified.t,
            item.author,
            item.atom_id,
            encode_categories(&item.categories),
            deleted,
            when,
            payload,
        ])
        .db()?;
        let mut count = self.conn.prepare_cached("UPDATE feeds SET n_items = n_items + 1 WHERE id = ?1").db()?;
        count.execute([feed]).db()?;
        self.insert_categories(feed, item)?;
        modified_counts::bump(self.conn, feed, item.modified.seq, 1)
    }

    fn update_item(&mut self, feed: i64, old: &Item, new: &Item) -> StoreResult<()> {
        if new.id != old.id || new.created != old.created {
            return Err(StoreError::Backend(format!("update of {:?} must keep its id and created key", old.id)));
        }
        // The stored row, not `old`, says which modified bucket to release: a stale `old`
        // must not be able to skew the counts.
        let mut find = self.conn.prepare_cached("SELECT cseq, mseq FROM items WHERE feed = ?1 AND id = ?2").db()?;
        let Some((cseq, old_mseq)) = find
            .query_row(params![feed, old.id], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))
            .optional()
            .db()?
        else {
            return Err(StoreError::Backend(format!("no item {:?} to update", old.id)));
        };
        if cseq != new.created.seq {
            return Err(StoreError::Backend(format!("update of {:?} must keep its created key", old.id)));
        }
        let (deleted, when, payload) = payload_columns(&new.payload);
        let mut st = self
            .conn
            .prepare_cached(
                "UPDATE items SET mseq = ?3, mtime = ?4, author = ?5, atom_id = ?6, categories = ?7, deleted = ?8,
                 when_ms = ?9, payload = ?10
             WHERE feed = ?1 AND id = ?2",
            )
            .db()?;
        st.execute(params![
            feed,
            new.id,
            new.modified.seq,
            new.modified.t,
            new.author,
            new.atom_id,
            encode_categories(&new.categories),
            deleted,
            when,
            payload,
        ])
        .db()?;
        let mut clear = self.conn.prepare_cached("DELETE FROM item_categories WHERE feed = ?1 AND cseq = ?2").db()?;
        clear.execute(params![feed, cseq]).db()?;
        self.insert_categories(feed, new)?;
        if old_mseq != new.modified.seq {
            modified_counts::bump(self.conn, feed, old_mseq, -1)?;
            modified_counts::bump(self.conn, feed, new.modified.seq, 1)?;
        }
        Ok(())
    }

    fn put_subscription(&mut self, feed: i64, sub: &Subscription) -> StoreResult<()> {
        let mut st = self
            .conn
            .prepare_cached(
                "INSERT INTO subscriptions(feed, view, jid, bare, node, subid) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT(feed, view, jid) DO UPDATE SET node = excluded.node, subid = excluded.subid",
            )
            .db()?;
        st.execute(params![feed, sub.view, sub.jid, bare(&sub.jid), sub.node, sub.subid]).db()?;
        Ok(())
    }

    fn delete_subscription(&mut self, feed: i64, view: &str, jid: &str) -> StoreResult<bool> {
        let mut st =
            self.conn.prepare_cached("DELETE FROM subscriptions WHERE feed = ?1 AND view = ?2 AND jid = ?3").db()?;
        Ok(st.execute(params![feed, view, jid]).db()? > 0)
    }

    fn delete_subscriptions_of(&mut self, jid: &str) -> StoreResult<u64> {
        // Through the `bare` index: a JID's subscriptions are among its bare JID's.
        let mut st = self.conn.prepare_cached("DELETE FROM subscriptions WHERE bare = ?1 AND jid = ?2").db()?;
        Ok(st.execute(params![bare(jid), jid]).db()? as u64)
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

    fn emit(&mut self, change: Change) {
        self.changes.push(change);
    }
}

#[cfg(test)]
mod tests {
    use super::bare;

    #[test]
    fn bare_drops_the_resource_only() {
        assert_eq!(bare("a@b/c/d"), "a@b");
        assert_eq!(bare("a@b"), "a@b");
        assert_eq!(bare("b/r"), "b");
    }
}
