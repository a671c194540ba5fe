//! Feeds and items as SQLite keeps them, where that differs from PostgreSQL (see
//! [`FeedStatements`]): one writer thread, so nothing to lock; categories in one encoded
//! text ([`crate::codec`]); one category row per statement.

use crate::codec::{Db, encode_categories, payload_columns};
use crate::connection::SqliteConn;
use feed::Item;
use feed::ports::StoreResult;
use rusqlite::params;
use store_sql::batch_kept::Kept;
use store_sql::dialect::{Arg, Statement};
use store_sql::driver::{FeedStatements, Statements};

impl FeedStatements for SqliteConn<'_> {
    /// None: the one writer thread is the only one that changes feed rows.
    const LOCK_FEED: &'static str = "";

    /// The writer's batch keeps the feeds' rows (its thread is the only one that changes
    /// them) and the views that follow them: later publishes to a feed in the batch read
    /// neither.
    fn kept(&self) -> Option<&Kept> {
        self.1
    }

    fn feeds_after(after: Option<&str>, limit: i64) -> Statement<'_> {
        let sql =
            "SELECT id, name, items, last_t, last_mseq FROM feeds WHERE ?1 IS NULL OR name > ?1 ORDER BY name LIMIT ?2";
        Statement::written(Self::DIALECT, sql, &[Arg::OptText(after), Arg::Int(limit)])
    }

    fn insert_feed(&self, name: &str) -> StoreResult<i64> {
        let mut st = self.0.prepare_cached("INSERT INTO feeds(name) VALUES (?1)").db()?;
        st.execute([name]).db()?;
        Ok(self.0.last_insert_rowid())
    }

    fn insert_item_row(&self, feed: i64, item: &Item) -> StoreResult<()> {
        let (deleted, when, payload) = payload_columns(&item.payload);
        let mut st = self.0.prepare_cached(
            "INSERT INTO items(feed, id, cseq, ctime, mseq, mtime, author, atom_id, categories, deleted, when_ms, payload)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        ).db()?;
        let (created, modified) = (item.created, item.modified);
        let categories = encode_categories(&item.categories);
        st.execute(params![
            feed,
            item.id,
            created.seq,
            created.t,
            modified.seq,
            modified.t,
            item.author,
            item.atom_id,
            categories,
            deleted,
            when,
            payload,
        ])
        .db()?;
        Ok(())
    }

    /// Found by id (unique per feed, like the created seq the caller matched it by).
    fn update_item_row(&self, feed: i64, _cseq: i64, new: &Item) -> StoreResult<()> {
        let (deleted, when, payload) = payload_columns(&new.payload);
        let mut st = self
            .0
            .prepare_cached(
                "UPDATE items SET mseq = ?3, mtime = ?4, author = ?5, atom_id = ?6, categories = ?7, deleted = ?8,
                 when_ms = ?9, payload = ?10
             WHERE feed = ?1 AND id = ?2",
            )
            .db()?;
        let categories = encode_categories(&new.categories);
        let at = new.modified;
        st.execute(params![feed, new.id, at.seq, at.t, new.author, new.atom_id, categories, deleted, when, payload])
            .db()?;
        Ok(())
    }

    fn index_categories(&self, feed: i64, item: &Item, terms: &[&str]) -> StoreResult<()> {
        let mut st = self
            .0
            .prepare_cached(
                "INSERT INTO item_categories(feed, cseq, term, ctime, mtime, mseq) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .db()?;
        for term in terms {
            st.execute(params![feed, item.created.seq, term, item.created.t, item.modified.t, item.modified.seq])
                .db()?;
        }
        Ok(())
    }
}
