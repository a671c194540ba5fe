//! The reads the two SQL stores share: SQLite and PostgreSQL keep the same tables and
//! indexes (see their `schema.rs`), so a scope's keyset scan, count, position and ties are
//! the same SQL in both, built here once. Only how a parameter is written differs (`?N` or
//! `$N`), and how each store hands the values to its driver (`Arg` implements both
//! drivers' parameter traits, in the stores).

use feed::ports::Scope;
use feed::{Key, OrderBy};

/// How a store writes its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// `?1`, `?2`, …
    Sqlite,
    /// `$1`, `$2`, …
    Postgres,
}

impl Dialect {
    fn param(self, n: usize) -> String {
        match self {
            Dialect::Sqlite => format!("?{n}"),
            Dialect::Postgres => format!("${n}"),
        }
    }
}

/// A parameter of the shared queries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arg {
    Int(i64),
    Text(String),
}

impl From<i64> for Arg {
    fn from(v: i64) -> Arg {
        Arg::Int(v)
    }
}

impl From<String> for Arg {
    fn from(v: String) -> Arg {
        Arg::Text(v)
    }
}

/// A statement being built: SQL text and its parameters, kept in step.
pub struct Query {
    pub sql: String,
    pub args: Vec<Arg>,
    dialect: Dialect,
}

impl Query {
    pub fn new(dialect: Dialect, head: &str) -> Query {
        Query { sql: head.to_string(), args: Vec::new(), dialect }
    }

    fn push(&mut self, sql: &str) -> &mut Self {
        self.sql.push_str(sql);
        self
    }

    fn arg(&mut self, v: impl Into<Arg>) -> &mut Self {
        self.args.push(v.into());
        let p = self.dialect.param(self.args.len());
        self.sql.push_str(&p);
        self
    }
}

/// The `items` columns each store reads an item from, in order, for a table aliased `i`.
pub const ITEM_COLUMNS: &str =
    "i.id, i.cseq, i.ctime, i.mseq, i.mtime, i.author, i.atom_id, i.categories, i.deleted, i.when_ms, i.payload";

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

fn key_bound(q: &mut Query, cols: &KeyCols, op: &str, key: Key) {
    q.push(&format!(" AND ({}, {}) {op} (", cols.t, cols.s)).arg(key.t).push(", ").arg(key.seq).push(")");
}

/// A row count as a SQL `LIMIT`.
pub fn limit_arg(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// The keyset query of `ReadTx::scan`, selecting [`ITEM_COLUMNS`]: bounds as row-value
/// comparisons on the index's own columns, never an OFFSET.
pub fn scan_query(
    d: Dialect,
    scope: &Scope<'_>,
    after: Option<Key>,
    before: Option<Key>,
    descending: bool,
    limit: usize,
) -> Query {
    let mut q = Query::new(d, &format!("SELECT {ITEM_COLUMNS}"));
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
pub fn count_query(d: Dialect, scope: &Scope<'_>, below: Option<Key>) -> Query {
    let mut q = Query::new(d, "SELECT COUNT(*)");
    let cols = scope_from(&mut q, scope);
    if let Some(k) = below {
        key_bound(&mut q, &cols, "<", k);
    }
    q
}

/// The key at an ascending position of a (filtered) scope. Filtered views have no counts of
/// their own; the OFFSET walks the filter's index entries only, never the rows.
pub fn nth_query(d: Dialect, scope: &Scope<'_>, offset: i64) -> Query {
    let cols = key_cols(scope);
    let mut q = Query::new(d, &format!("SELECT {}, {}", cols.t, cols.s));
    scope_from(&mut q, scope);
    q.push(&format!(" ORDER BY {}, {} LIMIT 1 OFFSET ", cols.t, cols.s)).arg(offset);
    q
}

/// The ids at time `t` up to `upto_seq`, in tie order.
pub fn ties_query(d: Dialect, scope: &Scope<'_>, t: i64, upto_seq: i64, limit: usize) -> Query {
    let mut q = Query::new(d, "SELECT i.id");
    let cols = scope_from(&mut q, scope);
    q.push(&format!(" AND {} = ", cols.t)).arg(t);
    q.push(&format!(" AND {} <= ", cols.s)).arg(upto_seq);
    q.push(&format!(" ORDER BY {}, {} LIMIT ", cols.t, cols.s)).arg(limit_arg(limit));
    q
}

/// The seq of the first item of an unfiltered order at or after a key: parameters feed,
/// `t`, `seq`.
pub fn first_seq_query(d: Dialect, by: OrderBy, feed: i64, key: Key) -> Query {
    let (t, s) = match by {
        OrderBy::Created => ("ctime", "cseq"),
        OrderBy::Modified => ("mtime", "mseq"),
    };
    let mut q = Query::new(d, &format!("SELECT {s} FROM items WHERE feed = "));
    q.arg(feed).push(&format!(" AND ({t}, {s}) >= (")).arg(key.t).push(", ").arg(key.seq);
    q.push(&format!(") ORDER BY {t}, {s} LIMIT 1"));
    q
}

/// The key of the item with a given created seq (`nth` in unfiltered created order).
pub fn by_cseq_query(d: Dialect, feed: i64, cseq: i64) -> Query {
    let mut q = Query::new(d, "SELECT ctime, cseq FROM items WHERE feed = ");
    q.arg(feed).push(" AND cseq = ").arg(cseq);
    q
}

#[cfg(test)]
mod tests {
    use super::*;
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
            assert_eq!(
                q.args,
                [Arg::Int(7), Arg::Text("x".into()), Arg::Text("ann".into()), Arg::Int(5), Arg::Int(6), Arg::Int(10)]
            );
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
