//! [`ReadTx`] over one PostgreSQL connection that is inside a transaction: keyset scans,
//! counts, ranks and positions, and subscription lookups. The caller owns the transaction
//! (a `REPEATABLE READ READ ONLY` snapshot for readers, the batch's write transaction for
//! the writer).
//!
//! Every call blocks its thread on the runtime ([`tokio::runtime::Handle::block_on`]): the
//! core's closures are synchronous, so they run on a blocking thread (a reader's
//! `spawn_blocking` or the writer's own thread), never on an async worker.

use super::modified_counts;
use deadpool_postgres::Object;
use feed::outbox::{HubSubscription, OutboxEntry, OutboxStats};
use feed::ports::{FeedRow, ReadTx, Scope, StoreError, StoreResult, Subscription};
use feed::{Change, Item, Key, OrderBy};
use std::cell::RefCell;
use store_sql::reads::{
    Arg, Dialect, ITEM_COLUMNS, Query, by_cseq_query, count_query, first_seq_query, limit_arg, nth_query, scan_query,
    ties_query,
};
use tokio::runtime::Handle;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

/// A parameter of a statement.
pub(crate) type Param<'a> = &'a (dyn ToSql + Sync);

/// A transaction's view of a connection that is already inside one: reads here, writes in
/// `write.rs`.
pub(crate) struct PgTx<'c> {
    pub(crate) client: &'c Object,
    pub(crate) rt: &'c Handle,
    /// Changes emitted by the closure running now; the writer takes them when it succeeds.
    pub(crate) changes: Vec<Change>,
    /// The first statement that failed. PostgreSQL aborts the transaction (or savepoint) on
    /// any error, so a closure that went on after one cannot succeed: its caller gets this.
    pub(crate) failed: RefCell<Option<StoreError>>,
}

impl<'c> PgTx<'c> {
    pub(crate) fn new(client: &'c Object, rt: &'c Handle) -> PgTx<'c> {
        PgTx { client, rt, changes: Vec::new(), failed: RefCell::new(None) }
    }

    fn note(&self, e: tokio_postgres::Error) -> StoreError {
        let e = crate::error::store_error(e);
        self.failed.borrow_mut().get_or_insert_with(|| e.clone());
        e
    }

    /// Runs a statement from the connection's statement cache; all its rows.
    pub(crate) fn query(&self, sql: &str, params: &[Param<'_>]) -> StoreResult<Vec<Row>> {
        let run = async {
            let st = self.client.prepare_cached(sql).await?;
            self.client.query(&st, params).await
        };
        self.rt.block_on(run).map_err(|e| self.note(e))
    }

    /// At most one row.
    pub(crate) fn query_opt(&self, sql: &str, params: &[Param<'_>]) -> StoreResult<Option<Row>> {
        let run = async {
            let st = self.client.prepare_cached(sql).await?;
            self.client.query_opt(&st, params).await
        };
        self.rt.block_on(run).map_err(|e| self.note(e))
    }

    /// Exactly one row.
    pub(crate) fn query_one(&self, sql: &str, params: &[Param<'_>]) -> StoreResult<Row> {
        let run = async {
            let st = self.client.prepare_cached(sql).await?;
            self.client.query_one(&st, params).await
        };
        self.rt.block_on(run).map_err(|e| self.note(e))
    }

    /// How many rows a statement changed.
    pub(crate) fn execute(&self, sql: &str, params: &[Param<'_>]) -> StoreResult<u64> {
        let run = async {
            let st = self.client.prepare_cached(sql).await?;
            self.client.execute(&st, params).await
        };
        self.rt.block_on(run).map_err(|e| self.note(e))
    }

    /// A column of a row, its conversion failure noted like a statement's.
    pub(crate) fn get<'r, T: tokio_postgres::types::FromSql<'r>>(&self, row: &'r Row, i: usize) -> StoreResult<T> {
        row.try_get(i).map_err(|e| self.note(e))
    }

    fn count_rows(&self, sql: &str, params: &[Param<'_>]) -> StoreResult<u64> {
        let row = self.query_one(sql, params)?;
        Ok(self.get::<i64>(&row, 0)?.max(0) as u64)
    }
}

/// This store's parameters.
const D: Dialect = Dialect::Postgres;

/// A shared query parameter as the driver takes it.
pub(crate) fn param(a: &Arg) -> &(dyn ToSql + Sync) {
    match a {
        Arg::Int(v) => v,
        Arg::Text(v) => v,
    }
}

/// A shared query's parameters as this driver takes them.
fn params(q: &Query) -> Vec<Param<'_>> {
    q.args.iter().map(param).collect()
}

impl PgTx<'_> {
    /// Reads an item from a row selected with [`ITEM_COLUMNS`].
    fn item_from_row(&self, row: &Row) -> StoreResult<Item> {
        let payload = super::payload::from_columns(self.get(row, 8)?, self.get(row, 9)?, self.get(row, 10)?, "items")?;
        Ok(Item {
            id: self.get(row, 0)?,
            created: Key { seq: self.get(row, 1)?, t: self.get(row, 2)? },
            modified: Key { seq: self.get(row, 3)?, t: self.get(row, 4)? },
            author: self.get(row, 5)?,
            atom_id: self.get(row, 6)?,
            categories: self.get(row, 7)?,
            payload,
        })
    }

    fn items(&self, rows: Vec<Row>) -> StoreResult<Vec<Item>> {
        rows.iter().map(|r| self.item_from_row(r)).collect()
    }

    /// The store's own count of the feed's items (see `feeds.n_items` in the schema).
    fn n_items(&self, feed: i64) -> StoreResult<u64> {
        let row = self.query_opt("SELECT n_items FROM feeds WHERE id = $1", &[&feed])?;
        Ok(match row {
            Some(r) => self.get::<i64>(&r, 0)?.max(0) as u64,
            None => 0,
        })
    }

    /// The seq of the first item of the (unfiltered) order at or after `key`.
    fn first_seq_from(&self, feed: i64, by: OrderBy, key: Key) -> StoreResult<Option<i64>> {
        let q = first_seq_query(D, by, feed, key);
        let row = self.query_opt(&q.sql, &params(&q))?;
        row.map(|r| self.get(&r, 0)).transpose()
    }

    pub(crate) fn feed_row(&self, sql: &str, name: &str) -> StoreResult<Option<FeedRow>> {
        let row = self.query_opt(sql, &[&name])?;
        row.map(|r| self.feed_from_row(&r)).transpose()
    }

    fn feed_from_row(&self, r: &Row) -> StoreResult<FeedRow> {
        Ok(FeedRow {
            id: self.get(r, 0)?,
            name: self.get(r, 1)?,
            items: self.get::<i64>(r, 2)?.max(0) as u64,
            last_t: self.get(r, 3)?,
            last_mseq: self.get(r, 4)?,
        })
    }

    fn subs(&self, rows: Vec<Row>) -> StoreResult<Vec<Subscription>> {
        rows.iter()
            .map(|r| {
                Ok(Subscription {
                    node: self.get(r, 0)?,
                    view: self.get(r, 1)?,
                    jid: self.get(r, 2)?,
                    subid: self.get(r, 3)?,
                })
            })
            .collect()
    }
}

pub(crate) const FEED_SQL: &str = "SELECT id, name, items, last_t, last_mseq FROM feeds WHERE name = $1";

impl ReadTx for PgTx<'_> {
    fn feed(&self, name: &str) -> StoreResult<Option<FeedRow>> {
        self.feed_row(FEED_SQL, name)
    }

    fn feeds(&self, after: Option<&str>, limit: usize) -> StoreResult<Vec<FeedRow>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let limit = limit_arg(limit);
        let rows = match after {
            Some(after) => self.query(
                "SELECT id, name, items, last_t, last_mseq FROM feeds WHERE name > $1 ORDER BY name LIMIT $2",
                &[&after, &limit],
            )?,
            None => {
                self.query("SELECT id, name, items, last_t, last_mseq FROM feeds ORDER BY name LIMIT $1", &[&limit])?
            }
        };
        rows.iter().map(|r| self.feed_from_row(r)).collect()
    }

    fn item(&self, feed: i64, id: &str) -> StoreResult<Option<Item>> {
        let sql = format!("SELECT {ITEM_COLUMNS} FROM items i WHERE i.feed = $1 AND i.id = $2");
        let row = self.query_opt(&sql, &[&feed, &id])?;
        row.map(|r| self.item_from_row(&r)).transpose()
    }

    fn scan(
        &self,
        scope: Scope<'_>,
        after: Option<Key>,
        before: Option<Key>,
        descending: bool,
        limit: usize,
    ) -> StoreResult<Vec<Item>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let q = scan_query(D, &scope, after, before, descending, limit);
        let rows = self.query(&q.sql, &params(&q))?;
        self.items(rows)
    }

    fn count(&self, scope: Scope<'_>) -> StoreResult<u64> {
        if scope.filter.is_empty() {
            return self.n_items(scope.feed);
        }
        let q = count_query(D, &scope, None);
        self.count_rows(&q.sql, &params(&q))
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
                OrderBy::Modified => modified_counts::count_below(self, scope.feed, seq),
            };
        }
        let q = count_query(D, &scope, Some(key));
        self.count_rows(&q.sql, &params(&q))
    }

    fn nth(&self, scope: Scope<'_>, index: u64) -> StoreResult<Option<Key>> {
        let Ok(offset) = i64::try_from(index) else { return Ok(None) };
        let row = if scope.filter.is_empty() {
            if index >= self.n_items(scope.feed)? {
                return Ok(None);
            }
            match scope.by {
                OrderBy::Created => {
                    let q = by_cseq_query(D, scope.feed, offset + 1);
                    self.query_opt(&q.sql, &params(&q))?
                }
                OrderBy::Modified => return modified_counts::nth(self, scope.feed, index),
            }
        } else {
            let q = nth_query(D, &scope, offset);
            self.query_opt(&q.sql, &params(&q))?
        };
        row.map(|r| Ok(Key { t: self.get(&r, 0)?, seq: self.get(&r, 1)? })).transpose()
    }

    fn ties(&self, scope: Scope<'_>, t: i64, upto_seq: i64, limit: usize) -> StoreResult<Vec<String>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let q = ties_query(D, &scope, t, upto_seq, limit);
        let rows = self.query(&q.sql, &params(&q))?;
        rows.iter().map(|r| self.get(r, 0)).collect()
    }

    fn subscribed_views(&self, feed: i64) -> StoreResult<Vec<String>> {
        let rows = self.query("SELECT DISTINCT view FROM subscriptions WHERE feed = $1 ORDER BY view", &[&feed])?;
        rows.iter().map(|r| self.get(r, 0)).collect()
    }

    fn subscribers(&self, feed: i64, view: &str) -> StoreResult<Vec<Subscription>> {
        let rows = self.query(
            "SELECT node, view, jid, subid FROM subscriptions WHERE feed = $1 AND view = $2 ORDER BY jid",
            &[&feed, &view],
        )?;
        self.subs(rows)
    }

    fn subscriptions_of(&self, bare: &str) -> StoreResult<Vec<Subscription>> {
        let rows = self.query(
            "SELECT s.node, s.view, s.jid, s.subid FROM subscriptions s JOIN feeds f ON f.id = s.feed
             WHERE s.bare = $1 ORDER BY f.name, s.view, s.jid",
            &[&bare],
        )?;
        self.subs(rows)
    }

    fn subscription_count(&self, feed: i64) -> StoreResult<u64> {
        self.count_rows("SELECT COUNT(*) FROM subscriptions WHERE feed = $1", &[&feed])
    }

    fn hub_views(&self, feed: i64) -> StoreResult<Vec<String>> {
        self.hub_views_sql(feed)
    }

    fn hub_subscriptions(&self, after: i64, limit: usize) -> StoreResult<Vec<HubSubscription>> {
        self.hub_subscriptions_sql(after, limit)
    }

    fn hub_subscribers(&self, feed: i64) -> StoreResult<Vec<HubSubscription>> {
        self.hub_subscribers_sql(feed)
    }

    fn outbox(&self, feed: i64, view: &str, after: i64, limit: usize) -> StoreResult<Vec<OutboxEntry>> {
        self.outbox_sql(feed, view, after, limit)
    }

    fn outbox_stats(&self) -> StoreResult<OutboxStats> {
        self.outbox_stats_sql()
    }
}
