//! The schema, its migrations, and the settings every connection gets.
//!
//! Versions live in `PRAGMA user_version`: version N means the first N entries of
//! [`MIGRATIONS`] are applied ([`store_sql::migrations`]). Pending ones run in one `BEGIN
//! IMMEDIATE` transaction, so a crash mid-migration leaves the previous version intact; a
//! database whose version is above what this binary knows is refused rather than misread.

use crate::codec::Db;
use feed::ports::StoreError;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, TransactionBehavior};
use std::time::Duration;
use store_sql::migrations::pending;

/// How long a connection waits on a lock before reporting `SQLITE_BUSY`. Only the writer
/// takes write locks, so this mostly covers WAL checkpoints and other processes (backups).
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Page cache of the write connection, in KiB. The writer touches the pages of seven item
/// indexes, the category and count tables on every publish; with SQLite's default 2 MiB they
/// are re-read from the OS on each batch once a feed has some thousands of items, and the
/// batch (which every queued writer waits on) gets slower. 64 MiB holds the hot index pages
/// of millions of items.
const WRITER_CACHE_KIB: i64 = 64 * 1024;

/// Page cache of each read connection, in KiB: pages of recent views and index upper levels.
const READER_CACHE_KIB: i64 = 16 * 1024;

/// Statements cached per connection. The read side builds one statement per combination of
/// order, filter, bounds and direction (a few dozen), so the default of 16 would thrash.
const STATEMENT_CACHE: usize = 128;

/// Version 1: everything the store needs.
///
/// Design notes (the *why*):
/// - `items` is a rowid table: payloads are Atom entries of up to tens of KiB, which SQLite
///   stores best out of the ordering b-trees. The ordering indexes `(feed, ctime, cseq)` and
///   `(feed, mtime, mseq)` serve keyset scans in both directions, `ties`, and "first item at or
///   after a key" lookups without a temporary b-tree. `(feed, cseq)` and `(feed, mseq)` are
///   unique lookups by sequence: `nth` in created order (cseqs are dense from 1) and the
///   bounded count inside one modified bucket.
/// - `categories` keeps an item's terms exactly as given (order and duplicates) in one
///   length-prefixed text, so reading an item needs no join; `item_categories` holds the
///   *distinct* terms only, as a filter index carrying both ordering keys so a category view
///   is a plain index range scan.
/// - `feeds.n_items` is the store's own count of item rows, kept by `insert_item`, so an
///   unfiltered count is one row read and does not depend on when the core saves its
///   counters (`items`, `last_t`, `last_mseq` are the core's, written by `save_feed`).
/// - `mcounts` counts items per range of modified seqs, at two levels (2^10 and 2^20 seqs per
///   bucket), so rank and position in modified order touch at most ~2×1024 rows plus one row
///   per million seqs, whatever the feed's size. Updates free old mseqs, so the seqs are not
///   dense and plain arithmetic (as in created order) is not possible.
const V1: &str = r#"
CREATE TABLE feeds (
    id        INTEGER PRIMARY KEY,
    name      TEXT NOT NULL UNIQUE,
    items     INTEGER NOT NULL DEFAULT 0,
    last_t    INTEGER NOT NULL DEFAULT 0,
    last_mseq INTEGER NOT NULL DEFAULT 0,
    n_items   INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE items (
    rid        INTEGER PRIMARY KEY,
    feed       INTEGER NOT NULL REFERENCES feeds(id),
    id         TEXT NOT NULL,
    cseq       INTEGER NOT NULL,
    ctime      INTEGER NOT NULL,
    mseq       INTEGER NOT NULL,
    mtime      INTEGER NOT NULL,
    author     TEXT,
    atom_id    TEXT,
    categories TEXT NOT NULL,
    deleted    INTEGER NOT NULL CHECK (deleted IN (0, 1)),
    when_ms    INTEGER,
    payload    TEXT NOT NULL
);
CREATE UNIQUE INDEX items_by_id ON items(feed, id);
CREATE UNIQUE INDEX items_by_cseq ON items(feed, cseq);
CREATE UNIQUE INDEX items_by_mseq ON items(feed, mseq);
CREATE INDEX items_created ON items(feed, ctime, cseq);
CREATE INDEX items_modified ON items(feed, mtime, mseq);
CREATE INDEX items_author_created ON items(feed, author, ctime, cseq) WHERE author IS NOT NULL;
CREATE INDEX items_author_modified ON items(feed, author, mtime, mseq) WHERE author IS NOT NULL;

CREATE TABLE item_categories (
    feed  INTEGER NOT NULL,
    cseq  INTEGER NOT NULL,
    term  TEXT NOT NULL,
    ctime INTEGER NOT NULL,
    mtime INTEGER NOT NULL,
    mseq  INTEGER NOT NULL,
    PRIMARY KEY (feed, cseq, term),
    FOREIGN KEY (feed, cseq) REFERENCES items(feed, cseq)
) WITHOUT ROWID;
CREATE INDEX item_categories_created ON item_categories(feed, term, ctime, cseq);
CREATE INDEX item_categories_modified ON item_categories(feed, term, mtime, mseq);

CREATE TABLE mcounts (
    feed   INTEGER NOT NULL REFERENCES feeds(id),
    level  INTEGER NOT NULL,
    bucket INTEGER NOT NULL,
    n      INTEGER NOT NULL,
    PRIMARY KEY (feed, level, bucket)
) WITHOUT ROWID;

CREATE TABLE subscriptions (
    feed  INTEGER NOT NULL REFERENCES feeds(id),
    view  TEXT NOT NULL,
    jid   TEXT NOT NULL,
    bare  TEXT NOT NULL,
    node  TEXT NOT NULL,
    subid TEXT NOT NULL,
    PRIMARY KEY (feed, view, jid)
) WITHOUT ROWID;
CREATE INDEX subscriptions_by_bare ON subscriptions(bare);
"#;

/// Version 2: bounded work per page, measured at a million items.
///
/// - `mcounts` goes from two levels of 2^10 buckets to four levels of 2^6 (64, 4096, 2^18
///   and 2^24 seqs per bucket): a rank or position in modified order then visits at most
///   63 rows per level and 63 index entries, where summing up to 1023 level-1 rows made the
///   end of a million-item modified view cost twice its start.
/// - The ordering indexes carry the item id, so checking a cursor's checksum (the ids of
///   the items before it in its millisecond) reads the index alone, without a table lookup
///   per id: a feed filled in bursts has dozens of items in one millisecond.
const V2: &str = r#"
DROP INDEX items_created;
DROP INDEX items_modified;
CREATE INDEX items_created ON items(feed, ctime, cseq, id);
CREATE INDEX items_modified ON items(feed, mtime, mseq, id);

DELETE FROM mcounts;
INSERT INTO mcounts(feed, level, bucket, n) SELECT feed, 1, mseq >> 6, COUNT(*) FROM items GROUP BY feed, mseq >> 6;
INSERT INTO mcounts(feed, level, bucket, n) SELECT feed, 2, mseq >> 12, COUNT(*) FROM items GROUP BY feed, mseq >> 12;
INSERT INTO mcounts(feed, level, bucket, n) SELECT feed, 3, mseq >> 18, COUNT(*) FROM items GROUP BY feed, mseq >> 18;
INSERT INTO mcounts(feed, level, bucket, n) SELECT feed, 4, mseq >> 24, COUNT(*) FROM items GROUP BY feed, mseq >> 24;
"#;

/// Version 3: the WebSub hub (see `feed::outbox`).
///
/// - `hub_subscriptions` keeps each subscription's lease and how far it has been served
///   (`delivered`, an outbox `seq`); `(feed, view, callback)` is its identity and the index
///   that finds a feed's WebSub views on every commit.
/// - `hub_outbox` holds one row per change per view with WebSub subscriptions, written in the
///   change's own transaction. `AUTOINCREMENT`: a `seq` is never reused, even after the rows
///   above it are pruned, or a subscription's `delivered` could cover a new row.
const V3: &str = r#"
CREATE TABLE hub_subscriptions (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    feed      INTEGER NOT NULL REFERENCES feeds(id),
    view      TEXT NOT NULL,
    callback  TEXT NOT NULL,
    topic     TEXT NOT NULL,
    secret    TEXT,
    expires   INTEGER NOT NULL,
    delivered INTEGER NOT NULL,
    UNIQUE (feed, view, callback)
);

CREATE TABLE hub_outbox (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    feed     INTEGER NOT NULL REFERENCES feeds(id),
    view     TEXT NOT NULL,
    item_id  TEXT NOT NULL,
    modified INTEGER NOT NULL,
    deleted  INTEGER NOT NULL CHECK (deleted IN (0, 1)),
    when_ms  INTEGER,
    payload  TEXT NOT NULL,
    count    INTEGER NOT NULL,
    previous TEXT,
    last     TEXT NOT NULL,
    at       INTEGER NOT NULL
);
CREATE INDEX hub_outbox_by_view ON hub_outbox(feed, view, seq);
"#;

/// Version 4: `mcounts` is called `modified_counts`. Written so that it also fits a
/// database made at version 3 by the build that already called it `modified_counts` in the
/// earlier versions' text: whichever of the two tables is missing is made empty (`mcounts`
/// only needs to exist), the counts are copied into `modified_counts` (none when they are
/// already there) and `mcounts` goes.
const V4: &str = r#"
CREATE TABLE IF NOT EXISTS mcounts (feed INTEGER, level INTEGER, bucket INTEGER, n INTEGER);
CREATE TABLE IF NOT EXISTS modified_counts (
    feed   INTEGER NOT NULL REFERENCES feeds(id),
    level  INTEGER NOT NULL,
    bucket INTEGER NOT NULL,
    n      INTEGER NOT NULL,
    PRIMARY KEY (feed, level, bucket)
) WITHOUT ROWID;
INSERT INTO modified_counts(feed, level, bucket, n) SELECT feed, level, bucket, n FROM mcounts;
DROP TABLE mcounts;
"#;

/// Version 5: what a feed's source keeps across restarts (SPEC §13): where it is fetched
/// from after a permanent redirect, and the validators (`ETag`, `Last-Modified`) of its last
/// imported answer, with the URL as configured then (another configured URL starts afresh).
const V5: &str = r#"
CREATE TABLE source_state (
    feed          INTEGER PRIMARY KEY REFERENCES feeds(id),
    configured    TEXT NOT NULL,
    location      TEXT NOT NULL,
    etag          TEXT,
    last_modified TEXT
);
"#;

/// Every migration, in order. Append only; never edit a released entry.
pub(crate) const MIGRATIONS: &[&str] = &[V1, V2, V3, V4, V5];

/// The schema version this binary writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Settings for every connection, reader or writer.
pub(crate) fn configure(conn: &Connection) -> Result<(), StoreError> {
    conn.busy_timeout(BUSY_TIMEOUT).db()?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    conn.pragma_update(None, "foreign_keys", true).db()?;
    // Plans must not depend on bound values: otherwise SQLite marks a cached statement whose
    // plan looked at a parameter (every `LIMIT ?` here) as expired each time that parameter
    // is bound again, and re-prepares it on the next step, which cost more than the page read.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true).db()?;
    Ok(())
}

/// Settings for the write connection: WAL so readers never block the writer nor the reverse,
/// and `synchronous=FULL` so that COMMIT returns only once the WAL is fsynced, which is what
/// lets the writer acknowledge a write as durable.
pub(crate) fn configure_writer(conn: &Connection) -> Result<(), StoreError> {
    configure(conn)?;
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0)).db()?;
    // An in-memory database answers "memory": there is no file to make durable.
    if !mode.eq_ignore_ascii_case("wal") && !mode.eq_ignore_ascii_case("memory") {
        return Err(StoreError::Backend(format!("could not enable WAL (journal_mode is {mode})")));
    }
    conn.pragma_update(None, "synchronous", "FULL").db()?;
    // Each write closure runs in a savepoint, and SQLite keeps the pre-image of every page
    // a savepoint touches in a sub-journal. On a temp *file* that journal spills to disk past
    // 64 KiB, i.e. for almost every closure: thousands of pwrite calls per batch that cost
    // more than the fsync itself. In memory it is truncated as each savepoint is released,
    // so it stays at one closure's pages.
    conn.pragma_update(None, "temp_store", "MEMORY").db()?;
    // Negative: a size in KiB rather than a number of pages.
    conn.pragma_update(None, "cache_size", -WRITER_CACHE_KIB).db()?;
    Ok(())
}

/// Settings for a pooled read connection: refuses writes, as a guard against a read path
/// that would bypass the writer (and its durability and ordering guarantees).
pub(crate) fn configure_reader(conn: &Connection) -> Result<(), StoreError> {
    configure(conn)?;
    conn.pragma_update(None, "query_only", true).db()?;
    conn.pragma_update(None, "cache_size", -READER_CACHE_KIB).db()?;
    Ok(())
}

/// Brings the schema to [`SCHEMA_VERSION`], or refuses a database that is newer.
pub(crate) fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    migrate_with(conn, MIGRATIONS)
}

/// [`migrate`] over an explicit list, so tests can exercise an upgrade.
pub(crate) fn migrate_with(conn: &mut Connection, migrations: &[&str]) -> Result<(), StoreError> {
    // IMMEDIATE: the version is read under the write lock, so two processes opening the same
    // file cannot both apply the same migration.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).db()?;
    let found: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0)).db()?;
    let pending = pending(found, migrations)?;
    for sql in pending {
        tx.execute_batch(sql).db()?;
    }
    if !pending.is_empty() {
        tx.pragma_update(None, "user_version", migrations.len() as i64).db()?;
    }
    tx.commit().db()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use feed::ports::Scope;
    use feed::{Filter, Key, OrderBy};
    use rusqlite::params_from_iter;
    use store_sql::dialect::{Dialect, Statement};
    use store_sql::reads::{by_cseq_query, count_query, first_seq_query, nth_query, scan_query, ties_query};

    const D: Dialect = Dialect::Sqlite;

    fn version(conn: &Connection) -> i64 {
        conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap()
    }

    #[test]
    fn fresh_database_gets_the_current_version() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        assert_eq!(version(&conn), SCHEMA_VERSION);
        // Applying again is a no-op.
        migrate(&mut conn).unwrap();
        assert_eq!(version(&conn), SCHEMA_VERSION);
    }

    #[test]
    fn newer_database_is_refused_and_left_alone() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 3).unwrap();
        assert_eq!(migrate(&mut conn), Err(StoreError::TooNew { found: SCHEMA_VERSION + 3, known: SCHEMA_VERSION }));
        assert_eq!(version(&conn), SCHEMA_VERSION + 3);
        let tables: i64 = conn.query_row("SELECT COUNT(*) FROM sqlite_schema", [], |r| r.get(0)).unwrap();
        assert_eq!(tables, 0, "nothing was created");
    }

    #[test]
    fn pending_migrations_apply_in_order_and_atomically() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate_with(&mut conn, &["CREATE TABLE a(x)"]).unwrap();
        assert_eq!(version(&conn), 1);
        migrate_with(&mut conn, &["CREATE TABLE a(x)", "CREATE TABLE b(y)", "INSERT INTO b VALUES (1)"]).unwrap();
        assert_eq!(version(&conn), 3);
        // A failing step rolls the whole upgrade back, version included.
        let err = migrate_with(&mut conn, &["-", "-", "-", "CREATE TABLE c(z)", "NOT SQL"]).unwrap_err();
        assert!(matches!(err, StoreError::Backend(_)), "{err:?}");
        assert_eq!(version(&conn), 3);
        let c: i64 = conn.query_row("SELECT COUNT(*) FROM sqlite_schema WHERE name = 'c'", [], |r| r.get(0)).unwrap();
        assert_eq!(c, 0);
    }

    fn plan(conn: &Connection, q: &Statement<'_>) -> String {
        let mut st = conn.prepare(&format!("EXPLAIN QUERY PLAN {}", q.sql)).unwrap();
        let rows =
            st.query_map(params_from_iter(q.args.iter().map(crate::codec::param)), |r| r.get::<_, String>(3)).unwrap();
        rows.map(Result::unwrap).collect::<Vec<_>>().join(" | ")
    }

    /// Every read of every scope is an index search: no table scan, no temporary b-tree
    /// for ORDER BY, whatever the bounds and direction.
    #[test]
    fn every_read_searches_an_index_without_sorting() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
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
