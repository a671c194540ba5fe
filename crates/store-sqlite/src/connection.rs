//! A connection as the shared transaction ([`store_sql::transaction::SqlTx`]) drives it:
//! statements from the connection's cache, parameters and columns through rusqlite, its
//! failures as the core's kinds ([`crate::codec::store_error`]).

use crate::codec::{Db, item_from_row, outbox_entry_from_row, param};
use feed::Item;
use feed::outbox::OutboxEntry;
use feed::ports::StoreResult;
use rusqlite::{Connection, params_from_iter};
use store_sql::batch_kept::Kept;
use store_sql::dialect::{Dialect, Statement};
use store_sql::driver::{Columns, Statements};

/// The connection a transaction (snapshot or batch) is open on, and what the writer's batch
/// keeps for its later closures (none in a snapshot).
#[derive(Clone, Copy)]
pub(crate) struct SqliteConn<'c>(pub(crate) &'c Connection, pub(crate) Option<&'c Kept>);

impl Statements for SqliteConn<'_> {
    const DIALECT: Dialect = Dialect::Sqlite;

    fn rows<T>(&self, st: &Statement<'_>, mut read: impl FnMut(&dyn Columns) -> StoreResult<T>) -> StoreResult<Vec<T>> {
        let mut prepared = self.0.prepare_cached(&st.sql).db()?;
        let mut rows = prepared.query(params_from_iter(st.args.iter().map(param))).db()?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().db()? {
            out.push(read(&SqliteRow(row))?);
        }
        Ok(out)
    }

    fn execute(&self, st: &Statement<'_>) -> StoreResult<u64> {
        let mut prepared = self.0.prepare_cached(&st.sql).db()?;
        Ok(prepared.execute(params_from_iter(st.args.iter().map(param))).db()? as u64)
    }
}

/// A row being read.
struct SqliteRow<'r, 's>(&'r rusqlite::Row<'s>);

impl Columns for SqliteRow<'_, '_> {
    fn int(&self, i: usize) -> StoreResult<i64> {
        self.0.get(i).db()
    }

    fn opt_int(&self, i: usize) -> StoreResult<Option<i64>> {
        self.0.get(i).db()
    }

    fn text(&self, i: usize) -> StoreResult<String> {
        self.0.get(i).db()
    }

    fn opt_text(&self, i: usize) -> StoreResult<Option<String>> {
        self.0.get(i).db()
    }

    fn item(&self) -> StoreResult<Item> {
        item_from_row(self.0).db()
    }

    fn outbox_entry(&self) -> StoreResult<OutboxEntry> {
        outbox_entry_from_row(self.0).db()
    }
}
