//! [`ReadTx`] over one SQLite connection: keyset scans, counts, ranks and positions, and
//! subscription lookups. The caller owns the transaction (a snapshot for readers, the batch's
//! write transaction for writers).

use super::codec::item_from_row;
use super::modified_counts;
use crate::codec::Db;
use feed::outbox::{HubSubscription, OutboxEntry, OutboxStats};
use feed::ports::{FeedRow, ReadTx, Scope, StoreResult, Subscription};
use feed::{Change, Item, Key, OrderBy};
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};
use store_sql::reads::{
    Dialect, ITEM_COLUMNS, by_cseq_query, count_query, first_seq_query, limit_arg, nth_query, scan_query, ties_query,
};

/// A transaction's view of a connection that is already inside one: reads here, writes in
/// `write.rs`. The transaction itself (snapshot or batch) belongs to the caller.
pub(crate) struct SqlTx<'c> {
    pub(crate) conn: &'c Connection,
    /// Changes emitted by the closure running now; the writer takes them when it succeeds.
    pub(crate) changes: Vec<Change>,
}

impl<'c> SqlTx<'c> {
    pub(crate) fn new(conn: &'c Connection) -> SqlTx<'c> {
        SqlTx { conn, changes: Vec::new() }
    }
}

/// This store's parameters.
const D: Dialect = Dialect::Sqlite;

const FEED_COLUMNS: &str = "id, name, items, last_t, last_mseq";

fn feed_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<FeedRow> {
    let items: i64 = r.get(2)?;
    Ok(FeedRow { id: r.get(0)?, name: r.get(1)?, items: items.max(0) as u64, last_t: r.get(3)?, last_mseq: r.get(4)? })
}

fn sub_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Subscription> {
    Ok(Subscription { node: r.get(0)?, view: r.get(1)?, jid: r.get(2)?, subid: r.get(3)? })
}

impl SqlTx<'_> {
    /// The store's own count of the feed's items (see `feeds.n_items` in the schema).
    fn n_items(&self, feed: i64) -> StoreResult<u64> {
        let mut st = self.conn.prepare_cached("SELECT n_items FROM feeds WHERE id = ?1").db()?;
        let n: Option<i64> = st.query_row([feed], |r| r.get(0)).optional().db()?;
        Ok(n.unwrap_or(0).max(0) as u64)
    }

    /// The seq of the first item of the (unfiltered) order at or after `key`.
    fn first_seq_from(&self, feed: i64, by: OrderBy, key: Key) -> StoreResult<Option<i64>> {
        let q = first_seq_query(D, by, feed, key);
        let mut st = self.conn.prepare_cached(&q.sql).db()?;
        st.query_row(params_from_iter(q.args.iter().map(crate::codec::param)), |r| r.get(0)).optional().db()
    }
}

impl ReadTx for SqlTx<'_> {
    fn feed(&self, name: &str) -> StoreResult<Option<FeedRow>> {
        let mut st = self.conn.prepare_cached(&format!("SELECT {FEED_COLUMNS} FROM feeds WHERE name = ?1")).db()?;
        st.query_row([name], feed_from_row).optional().db()
    }

    fn feeds(&self, after: Option<&str>, limit: usize) -> StoreResult<Vec<FeedRow>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut st = self
            .conn
            .prepare_cached(&format!(
                "SELECT {FEED_COLUMNS} FROM feeds WHERE ?1 IS NULL OR name > ?1 ORDER BY name LIMIT ?2"
            ))
            .db()?;
        let rows = st.query_map(params![after, limit_arg(limit)], feed_from_row).db()?;
        rows.collect::<Result<_, _>>().db()
    }

    fn item(&self, feed: i64, id: &str) -> StoreResult<Option<Item>> {
        let mut st = self
            .conn
            .prepare_cached(&format!("SELECT {ITEM_COLUMNS} FROM items i WHERE i.feed = ?1 AND i.id = ?2"))
            .db()?;
        st.query_row(params![feed, id], item_from_row).optional().db()
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
        let mut st = self.conn.prepare_cached(&q.sql).db()?;
        let rows = st.query_map(params_from_iter(q.args.iter().map(crate::codec::param)), item_from_row).db()?;
        rows.collect::<Result<_, _>>().db()
    }

    fn count(&self, scope: Scope<'_>) -> StoreResult<u64> {
        if scope.filter.is_empty() {
            return self.n_items(scope.feed);
        }
        let q = count_query(D, &scope, None);
        let mut st = self.conn.prepare_cached(&q.sql).db()?;
        let n: i64 = st.query_row(params_from_iter(q.args.iter().map(crate::codec::param)), |r| r.get(0)).db()?;
        Ok(n.max(0) as u64)
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
                OrderBy::Modified => modified_counts::count_below(self.conn, scope.feed, seq),
            };
        }
        let q = count_query(D, &scope, Some(key));
        let mut st = self.conn.prepare_cached(&q.sql).db()?;
        let n: i64 = st.query_row(params_from_iter(q.args.iter().map(crate::codec::param)), |r| r.get(0)).db()?;
        Ok(n.max(0) as u64)
    }

    fn nth(&self, scope: Scope<'_>, index: u64) -> StoreResult<Option<Key>> {
        let Ok(offset) = i64::try_from(index) else { return Ok(None) };
        let found: Option<(i64, i64)> = if scope.filter.is_empty() {
            if index >= self.n_items(scope.feed)? {
                return Ok(None);
            }
            match scope.by {
                OrderBy::Created => {
                    let q = by_cseq_query(D, scope.feed, offset + 1);
                    let mut st = self.conn.prepare_cached(&q.sql).db()?;
                    st.query_row(params_from_iter(q.args.iter().map(crate::codec::param)), |r| {
                        Ok((r.get(0)?, r.get(1)?))
                    })
                    .optional()
                    .db()?
                }
                OrderBy::Modified => modified_counts::nth(self.conn, scope.feed, index)?,
            }
        } else {
            let q = nth_query(D, &scope, offset);
            let mut st = self.conn.prepare_cached(&q.sql).db()?;
            st.query_row(params_from_iter(q.args.iter().map(crate::codec::param)), |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
                .db()?
        };
        Ok(found.map(|(t, seq)| Key { t, seq }))
    }

    fn ties(&self, scope: Scope<'_>, t: i64, upto_seq: i64, limit: usize) -> StoreResult<Vec<String>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let q = ties_query(D, &scope, t, upto_seq, limit);
        let mut st = self.conn.prepare_cached(&q.sql).db()?;
        let rows = st.query_map(params_from_iter(q.args.iter().map(crate::codec::param)), |r| r.get(0)).db()?;
        rows.collect::<Result<_, _>>().db()
    }

    fn subscribed_views(&self, feed: i64) -> StoreResult<Vec<String>> {
        let mut st =
            self.conn.prepare_cached("SELECT DISTINCT view FROM subscriptions WHERE feed = ?1 ORDER BY view").db()?;
        let rows = st.query_map([feed], |r| r.get(0)).db()?;
        rows.collect::<Result<_, _>>().db()
    }

    fn subscribers(&self, feed: i64, view: &str) -> StoreResult<Vec<Subscription>> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT node, view, jid, subid FROM subscriptions WHERE feed = ?1 AND view = ?2 ORDER BY jid",
            )
            .db()?;
        let rows = st.query_map(params![feed, view], sub_from_row).db()?;
        rows.collect::<Result<_, _>>().db()
    }

    fn subscriptions_of(&self, bare: &str) -> StoreResult<Vec<Subscription>> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT s.node, s.view, s.jid, s.subid FROM subscriptions s JOIN feeds f ON f.id = s.feed
             WHERE s.bare = ?1 ORDER BY f.name, s.view, s.jid",
            )
            .db()?;
        let rows = st.query_map([bare], sub_from_row).db()?;
        rows.collect::<Result<_, _>>().db()
    }

    fn subscription_count(&self, feed: i64) -> StoreResult<u64> {
        let mut st = self.conn.prepare_cached("SELECT COUNT(*) FROM subscriptions WHERE feed = ?1").db()?;
        let n: i64 = st.query_row([feed], |r| r.get(0)).db()?;
        Ok(n.max(0) as u64)
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

#[cfg(test)]
mod tests {
    use super::*;
    use feed::Filter;

    fn plan(conn: &Connection, q: &store_sql::reads::Query) -> String {
        let mut st = conn.prepare(&format!("EXPLAIN QUERY PLAN {}", q.sql)).unwrap();
        let rows =
            st.query_map(params_from_iter(q.args.iter().map(crate::codec::param)), |r| r.get::<_, String>(3)).unwrap();
        rows.map(Result::unwrap).collect::<Vec<_>>().join(" | ")
    }

    fn db() -> Connection {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::schema::migrate(&mut conn).unwrap();
        conn
    }

    /// Every read of every scope is an index search: no table scan, no temporary b-tree
    /// for ORDER BY, whatever the bounds and direction.
    #[test]
    fn every_read_searches_an_index_without_sorting() {
        let conn = db();
        let filters = [
            Filter::default(),
            Filter { author: Some("a".into()), category: None },
            Filter { author: None, category: Some("x".into()) },
            Filter { author: Some("a".into()), category: Some("x".into()) },
        ];
        let k = Some(Key { t: 1, seq: 2 });
        let end = Some(Key::end_of(9));
        let mut queries = Vec::new();
        for by in [OrderBy::Created, OrderBy::Modified] {
            for filter in &filters {
                let scope = Scope { feed: 1, by, filter };
                for (after, before) in [(None, None), (k, None), (None, end), (k, end)] {
                    for desc in [false, true] {
                        queries.push(scan_query(D, &scope, after, before, desc, 10));
                    }
                }
                if !filter.is_empty() {
                    queries.push(count_query(D, &scope, None));
                    queries.push(count_query(D, &scope, k));
                    queries.push(nth_query(D, &scope, 3));
                }
                queries.push(ties_query(D, &scope, 1, 5, 10));
            }
            queries.push(first_seq_query(D, by, 1, Key { t: 1, seq: 2 }));
        }
        queries.push(by_cseq_query(D, 1, 1));
        for q in &queries {
            let plan = plan(&conn, q);
            assert!(!plan.contains("TEMP B-TREE"), "{}\n  {plan}", q.sql);
            assert!(plan.split(" | ").all(|step| step.starts_with("SEARCH")), "{}\n  {plan}", q.sql);
        }
    }
}
