//! [`ReadTx`] over one SQLite connection: keyset scans, counts, ranks and positions, and
//! subscription lookups. The caller owns the transaction (a snapshot for readers, the batch's
//! write transaction for writers).

use super::codec::{ITEM_COLUMNS, item_from_row};
use super::mcounts;
use crate::feed::outbox::{HubSubscription, OutboxEntry, OutboxStats};
use crate::feed::ports::{FeedRow, ReadTx, Scope, StoreResult, Subscription};
use crate::feed::{Change, Item, Key, OrderBy};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};

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

/// A query being built: SQL text and its positional arguments, kept in step.
struct Query {
    sql: String,
    args: Vec<Value>,
}

impl Query {
    fn new(head: &str) -> Query {
        Query { sql: head.to_string(), args: Vec::new() }
    }
    fn push(&mut self, sql: &str) -> &mut Self {
        self.sql.push_str(sql);
        self
    }
    fn arg(&mut self, v: impl Into<Value>) -> &mut Self {
        self.sql.push('?');
        self.args.push(v.into());
        self
    }
}

/// The ordering columns of a scope: what `Key::t` and `Key::seq` are in its SQL.
struct KeyCols {
    t: &'static str,
    s: &'static str,
}

/// The scope's key columns: the category index carries its own copy of both keys.
fn key_cols(scope: &Scope<'_>) -> KeyCols {
    match (scope.filter.category.is_some(), scope.by) {
        (true, OrderBy::Created) => KeyCols { t: "c.ctime", s: "c.cseq" },
        (true, OrderBy::Modified) => KeyCols { t: "c.mtime", s: "c.mseq" },
        (false, OrderBy::Created) => KeyCols { t: "i.ctime", s: "i.cseq" },
        (false, OrderBy::Modified) => KeyCols { t: "i.mtime", s: "i.mseq" },
    }
}

/// Appends the scope's `FROM … WHERE …` (feed and filter) and returns its key columns.
///
/// Why this shape: an unfiltered or author-filtered scope ranges over one index of `items`
/// (`items_created`, `items_author_modified`, …); a category scope ranges over the category
/// index, which carries both keys, and joins `items` by `(feed, cseq)` for the rest (and
/// for the author, when both filters are set). Either way the `ORDER BY` matches the index,
/// so pages come without a sort and stop after `LIMIT` rows.
fn scope_from(q: &mut Query, scope: &Scope<'_>) -> KeyCols {
    match &scope.filter.category {
        Some(term) => {
            q.push(" FROM item_categories c JOIN items i ON i.feed = c.feed AND i.cseq = c.cseq WHERE c.feed = ")
                .arg(scope.feed)
                .push(" AND c.term = ")
                .arg(term.clone());
        }
        None => {
            q.push(" FROM items i WHERE i.feed = ").arg(scope.feed);
        }
    }
    if let Some(author) = &scope.filter.author {
        q.push(" AND i.author = ").arg(author.clone());
    }
    key_cols(scope)
}

/// The keyset query of [`ReadTx::scan`]: bounds as row-value comparisons on the index's own
/// columns, never an OFFSET.
fn scan_query(scope: &Scope<'_>, after: Option<Key>, before: Option<Key>, descending: bool, limit: usize) -> Query {
    let mut q = Query::new(&format!("SELECT {ITEM_COLUMNS}"));
    let cols = scope_from(&mut q, scope);
    if let Some(a) = after {
        key_bound(&mut q, &cols, ">", a);
    }
    if let Some(b) = before {
        key_bound(&mut q, &cols, "<", b);
    }
    let dir = if descending { " DESC" } else { "" };
    q.push(&format!(" ORDER BY {}{dir}, {}{dir} LIMIT ", cols.t, cols.s)).arg(limit_arg(limit));
    q
}

/// Counts the items of a (filtered) scope, all of them or those below `below`.
fn count_query(scope: &Scope<'_>, below: Option<Key>) -> Query {
    let mut q = Query::new("SELECT COUNT(*)");
    let cols = scope_from(&mut q, scope);
    if let Some(k) = below {
        key_bound(&mut q, &cols, "<", k);
    }
    q
}

/// The key at an ascending position of a (filtered) scope. Filtered views have no counts of
/// their own; the OFFSET walks the filter's index entries only, never the rows.
fn nth_query(scope: &Scope<'_>, offset: i64) -> Query {
    let cols = key_cols(scope);
    let mut q = Query::new(&format!("SELECT {}, {}", cols.t, cols.s));
    scope_from(&mut q, scope);
    q.push(&format!(" ORDER BY {}, {} LIMIT 1 OFFSET ", cols.t, cols.s)).arg(offset);
    q
}

/// The ids at time `t` up to `upto_seq`, in tie order.
fn ties_query(scope: &Scope<'_>, t: i64, upto_seq: i64, limit: usize) -> Query {
    let mut q = Query::new("SELECT i.id");
    let cols = scope_from(&mut q, scope);
    q.push(&format!(" AND {} = ", cols.t)).arg(t);
    q.push(&format!(" AND {} <= ", cols.s)).arg(upto_seq);
    q.push(&format!(" ORDER BY {}, {} LIMIT ", cols.t, cols.s)).arg(limit_arg(limit));
    q
}

/// The seq of the first item of an unfiltered order at or after a key.
fn first_seq_sql(by: OrderBy) -> &'static str {
    match by {
        OrderBy::Created => {
            "SELECT cseq FROM items WHERE feed = ?1 AND (ctime, cseq) >= (?2, ?3) ORDER BY ctime, cseq LIMIT 1"
        }
        OrderBy::Modified => {
            "SELECT mseq FROM items WHERE feed = ?1 AND (mtime, mseq) >= (?2, ?3) ORDER BY mtime, mseq LIMIT 1"
        }
    }
}

/// The key of the item with a given created seq (`nth` in unfiltered created order).
const BY_CSEQ_SQL: &str = "SELECT ctime, cseq FROM items WHERE feed = ?1 AND cseq = ?2";

fn key_bound(q: &mut Query, cols: &KeyCols, op: &str, key: Key) {
    q.push(&format!(" AND ({}, {}) {op} (", cols.t, cols.s)).arg(key.t).push(", ").arg(key.seq).push(")");
}

fn limit_arg(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

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
        let mut st = self.conn.prepare_cached("SELECT n_items FROM feeds WHERE id = ?1")?;
        let n: Option<i64> = st.query_row([feed], |r| r.get(0)).optional()?;
        Ok(n.unwrap_or(0).max(0) as u64)
    }

    /// The seq of the first item of the (unfiltered) order at or after `key`.
    fn first_seq_from(&self, feed: i64, by: OrderBy, key: Key) -> StoreResult<Option<i64>> {
        let sql = first_seq_sql(by);
        let mut st = self.conn.prepare_cached(sql)?;
        Ok(st.query_row(params![feed, key.t, key.seq], |r| r.get(0)).optional()?)
    }
}

impl ReadTx for SqlTx<'_> {
    fn feed(&self, name: &str) -> StoreResult<Option<FeedRow>> {
        let mut st = self.conn.prepare_cached(&format!("SELECT {FEED_COLUMNS} FROM feeds WHERE name = ?1"))?;
        Ok(st.query_row([name], feed_from_row).optional()?)
    }

    fn feeds(&self, after: Option<&str>, limit: usize) -> StoreResult<Vec<FeedRow>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut st = self.conn.prepare_cached(&format!(
            "SELECT {FEED_COLUMNS} FROM feeds WHERE ?1 IS NULL OR name > ?1 ORDER BY name LIMIT ?2"
        ))?;
        let rows = st.query_map(params![after, limit_arg(limit)], feed_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn item(&self, feed: i64, id: &str) -> StoreResult<Option<Item>> {
        let mut st =
            self.conn.prepare_cached(&format!("SELECT {ITEM_COLUMNS} FROM items i WHERE i.feed = ?1 AND i.id = ?2"))?;
        Ok(st.query_row(params![feed, id], item_from_row).optional()?)
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
        let q = scan_query(&scope, after, before, descending, limit);
        let mut st = self.conn.prepare_cached(&q.sql)?;
        let rows = st.query_map(params_from_iter(q.args), item_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn count(&self, scope: Scope<'_>) -> StoreResult<u64> {
        if scope.filter.is_empty() {
            return self.n_items(scope.feed);
        }
        let q = count_query(&scope, None);
        let mut st = self.conn.prepare_cached(&q.sql)?;
        let n: i64 = st.query_row(params_from_iter(q.args), |r| r.get(0))?;
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
                OrderBy::Modified => mcounts::count_below(self.conn, scope.feed, seq),
            };
        }
        let q = count_query(&scope, Some(key));
        let mut st = self.conn.prepare_cached(&q.sql)?;
        let n: i64 = st.query_row(params_from_iter(q.args), |r| r.get(0))?;
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
                    let mut st = self.conn.prepare_cached(BY_CSEQ_SQL)?;
                    st.query_row(params![scope.feed, offset + 1], |r| Ok((r.get(0)?, r.get(1)?))).optional()?
                }
                OrderBy::Modified => mcounts::nth(self.conn, scope.feed, index)?,
            }
        } else {
            let q = nth_query(&scope, offset);
            let mut st = self.conn.prepare_cached(&q.sql)?;
            st.query_row(params_from_iter(q.args), |r| Ok((r.get(0)?, r.get(1)?))).optional()?
        };
        Ok(found.map(|(t, seq)| Key { t, seq }))
    }

    fn ties(&self, scope: Scope<'_>, t: i64, upto_seq: i64, limit: usize) -> StoreResult<Vec<String>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let q = ties_query(&scope, t, upto_seq, limit);
        let mut st = self.conn.prepare_cached(&q.sql)?;
        let rows = st.query_map(params_from_iter(q.args), |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn subscribed_views(&self, feed: i64) -> StoreResult<Vec<String>> {
        let mut st =
            self.conn.prepare_cached("SELECT DISTINCT view FROM subscriptions WHERE feed = ?1 ORDER BY view")?;
        let rows = st.query_map([feed], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn subscribers(&self, feed: i64, view: &str) -> StoreResult<Vec<Subscription>> {
        let mut st = self.conn.prepare_cached(
            "SELECT node, view, jid, subid FROM subscriptions WHERE feed = ?1 AND view = ?2 ORDER BY jid",
        )?;
        let rows = st.query_map(params![feed, view], sub_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn subscriptions_of(&self, bare: &str) -> StoreResult<Vec<Subscription>> {
        let mut st = self.conn.prepare_cached(
            "SELECT s.node, s.view, s.jid, s.subid FROM subscriptions s JOIN feeds f ON f.id = s.feed
             WHERE s.bare = ?1 ORDER BY f.name, s.view, s.jid",
        )?;
        let rows = st.query_map([bare], sub_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn subscription_count(&self, feed: i64) -> StoreResult<u64> {
        let mut st = self.conn.prepare_cached("SELECT COUNT(*) FROM subscriptions WHERE feed = ?1")?;
        let n: i64 = st.query_row([feed], |r| r.get(0))?;
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
    use crate::feed::Filter;

    fn plan(conn: &Connection, q: &Query) -> String {
        let mut st = conn.prepare(&format!("EXPLAIN QUERY PLAN {}", q.sql)).unwrap();
        let rows = st.query_map(params_from_iter(q.args.iter()), |r| r.get::<_, String>(3)).unwrap();
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
                        queries.push(scan_query(&scope, after, before, desc, 10));
                    }
                }
                if !filter.is_empty() {
                    queries.push(count_query(&scope, None));
                    queries.push(count_query(&scope, k));
                    queries.push(nth_query(&scope, 3));
                }
                queries.push(ties_query(&scope, 1, 5, 10));
            }
            let mut q = Query::new(first_seq_sql(by));
            q.args = vec![Value::Integer(1), Value::Integer(1), Value::Integer(2)];
            queries.push(q);
        }
        let mut q = Query::new(BY_CSEQ_SQL);
        q.args = vec![Value::Integer(1), Value::Integer(1)];
        queries.push(q);
        for q in &queries {
            let plan = plan(&conn, q);
            assert!(!plan.contains("TEMP B-TREE"), "{}\n  {plan}", q.sql);
            assert!(plan.split(" | ").all(|step| step.starts_with("SEARCH")), "{}\n  {plan}", q.sql);
        }
    }
}
