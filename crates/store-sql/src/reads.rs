//! The reads the two SQL stores share: SQLite and PostgreSQL keep the same tables and
//! indexes (see their `schema.rs`), so the columns each kind of row is read from are the
//! same, and so are a scope's keyset scan, count, position and ties, built here once in the
//! store's [`Dialect`]. Those are built rather than written out because a scope picks its
//! index (and so its key columns) by its filter, and a page its bounds.

use crate::dialect::{Dialect, Statement};
use feed::ports::Scope;
use feed::{Key, OrderBy};

/// The `items` columns each store reads an item from, in order, for a table aliased `i`.
pub const ITEM_COLUMNS: &str =
    "i.id, i.cseq, i.ctime, i.mseq, i.mtime, i.author, i.atom_id, i.categories, i.deleted, i.when_ms, i.payload";

/// The `feeds` columns a [`FeedRow`](feed::ports::FeedRow) is read from, in order.
pub const FEED_COLUMNS: &str = "id, name, items, last_t, last_mseq";
/// The `hub_subscriptions` columns a [`HubSubscription`](feed::outbox::HubSubscription) is read from, in order.
pub const HUB_SUBSCRIPTION_COLUMNS: &str = "id, feed, view, topic, callback, secret, expires, delivered";
/// The `hub_outbox` columns an [`OutboxEntry`](feed::outbox::OutboxEntry) is read from, in order: the payload's three
/// (`deleted, when_ms, payload`) from index 5, as in `items`.
pub const OUTBOX_COLUMNS: &str =
    "seq, feed, view, item_id, modified, deleted, when_ms, payload, count, previous, last, at";

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
fn scope_from<'a>(q: &mut Statement<'a>, scope: &Scope<'a>) -> KeyCols {
    let filter = scope.filter;
    match filter.category.as_deref() {
        Some(term) => {
            q.push(" FROM item_categories c JOIN items i ON i.feed = c.feed AND i.cseq = c.cseq WHERE c.feed = ")
                .arg(scope.feed)
                .push(" AND c.term = ")
                .arg(term);
        }
        None => {
            q.push(" FROM items i WHERE i.feed = ").arg(scope.feed);
        }
    }
    if let Some(author) = filter.author.as_deref() {
        q.push(" AND i.author = ").arg(author);
    }
    key_cols(scope)
}

fn key_bound(q: &mut Statement<'_>, cols: &KeyCols, op: &str, key: Key) {
    q.push(&format!(" AND ({}, {}) {op} (", cols.t, cols.s)).arg(key.t).push(", ").arg(key.seq).push(")");
}

/// A row count as a SQL `LIMIT`.
pub fn limit_arg(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// The keyset query of `ReadTx::scan`, selecting [`ITEM_COLUMNS`]: bounds as row-value
/// comparisons on the index's own columns, never an OFFSET.
pub fn scan_query<'a>(
    d: Dialect,
    scope: &Scope<'a>,
    after: Option<Key>,
    before: Option<Key>,
    descending: bool,
    limit: usize,
) -> Statement<'a> {
    let mut q = Statement::build(d, &format!("SELECT {ITEM_COLUMNS}"));
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
pub fn count_query<'a>(d: Dialect, scope: &Scope<'a>, below: Option<Key>) -> Statement<'a> {
    let mut q = Statement::build(d, "SELECT COUNT(*)");
    let cols = scope_from(&mut q, scope);
    if let Some(k) = below {
        key_bound(&mut q, &cols, "<", k);
    }
    q
}

/// The key at an ascending position of a (filtered) scope. Filtered views have no counts of
/// their own; the OFFSET walks the filter's index entries only, never the rows.
pub fn nth_query<'a>(d: Dialect, scope: &Scope<'a>, offset: i64) -> Statement<'a> {
    let cols = key_cols(scope);
    let mut q = Statement::build(d, &format!("SELECT {}, {}", cols.t, cols.s));
    scope_from(&mut q, scope);
    q.push(&format!(" ORDER BY {}, {} LIMIT 1 OFFSET ", cols.t, cols.s)).arg(offset);
    q
}

/// The ids at time `t` up to `upto_seq`, in tie order.
pub fn ties_query<'a>(d: Dialect, scope: &Scope<'a>, t: i64, upto_seq: i64, limit: usize) -> Statement<'a> {
    let mut q = Statement::build(d, "SELECT i.id");
    let cols = scope_from(&mut q, scope);
    q.push(&format!(" AND {} = ", cols.t)).arg(t);
    q.push(&format!(" AND {} <= ", cols.s)).arg(upto_seq);
    q.push(&format!(" ORDER BY {}, {} LIMIT ", cols.t, cols.s)).arg(limit_arg(limit));
    q
}

/// The seq of the first item of an unfiltered order at or after a key: parameters feed,
/// `t`, `seq`.
pub fn first_seq_query(d: Dialect, by: OrderBy, feed: i64, key: Key) -> Statement<'static> {
    let (t, s) = match by {
        OrderBy::Created => ("ctime", "cseq"),
        OrderBy::Modified => ("mtime", "mseq"),
    };
    let mut q = Statement::build(d, &format!("SELECT {s} FROM items WHERE feed = "));
    q.arg(feed).push(&format!(" AND ({t}, {s}) >= (")).arg(key.t).push(", ").arg(key.seq);
    q.push(&format!(") ORDER BY {t}, {s} LIMIT 1"));
    q
}

/// The key of the item with a given created seq (`nth` in unfiltered created order).
pub fn by_cseq_query(d: Dialect, feed: i64, cseq: i64) -> Statement<'static> {
    let mut q = Statement::build(d, "SELECT ctime, cseq FROM items WHERE feed = ");
    q.arg(feed).push(" AND cseq = ").arg(cseq);
    q
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::Arg;
    use feed::Filter;

    #[test]
    fn parameters_are_numbered_in_each_dialect_and_kept_in_step() {
        let filter = Filter { author: Some("ann".into()), category: Some("x".into()) };
        let scope = Scope { feed: 7, by: OrderBy::Modified, filter: &filter };
        let key = Key { t: 5, seq: 6 };
        for (d, p) in [(Dialect::Sqlite, '?'), (Dialect::Postgres, '$')] {
            let q = scan_query(d, &scope, Some(key), None, true, 10);
            assert_eq!(
                q.sql,
                format!(
                    "SELECT {ITEM_COLUMNS} FROM item_categories c JOIN items i ON i.feed = c.feed AND i.cseq = c.cseq \
                     WHERE c.feed = {p}1 AND c.term = {p}2 AND i.author = {p}3 AND (c.mtime, c.mseq) > ({p}4, {p}5) \
                     ORDER BY c.mtime DESC, c.mseq DESC LIMIT {p}6"
                )
            );
            assert_eq!(q.args, [Arg::Int(7), Arg::Text("x"), Arg::Text("ann"), Arg::Int(5), Arg::Int(6), Arg::Int(10)]);
            let q = first_seq_query(d, OrderBy::Created, 1, key);
            assert_eq!(
                q.sql,
                format!(
                    "SELECT cseq FROM items WHERE feed = {p}1 AND (ctime, cseq) >= ({p}2, {p}3) ORDER BY ctime, cseq LIMIT 1"
                )
            );
        }
    }
}
