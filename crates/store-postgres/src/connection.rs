//! A pooled connection that is inside a transaction, as the shared transaction
//! ([`store_sql::transaction::SqlTx`]) drives it: statements from the connection's cache,
//! parameters and columns through `tokio-postgres`, and the first failure kept.
//!
//! Every call blocks its thread on the runtime ([`tokio::runtime::Handle::block_on`]): the
//! core's closures are synchronous, so they run on a blocking thread (a reader's
//! `spawn_blocking` or the writer's own thread), never on an async worker.

use crate::payload;
use deadpool_postgres::Object;
use feed::outbox::OutboxEntry;
use feed::ports::{StoreError, StoreResult};
use feed::{Cursor, Item, Key};
use std::cell::RefCell;
use std::future::Future;
use store_sql::dialect::{Arg, Dialect, Statement};
use store_sql::driver::{Columns, Statements};
use tokio::runtime::Handle;
use tokio_postgres::Row;
use tokio_postgres::Statement as Prepared;
use tokio_postgres::types::{FromSql, ToSql};

/// A parameter of a statement.
pub(crate) type Param<'a> = &'a (dyn ToSql + Sync);

/// A connection inside a transaction the caller owns (a `REPEATABLE READ READ ONLY`
/// snapshot for readers, the batch's write transaction for the writer).
pub(crate) struct PgConn<'c> {
    client: &'c Object,
    rt: &'c Handle,
    /// The first statement that failed. PostgreSQL aborts the transaction (or savepoint) on
    /// any error, so a closure that went on after one cannot succeed: its caller gets this.
    failed: RefCell<Option<StoreError>>,
}

impl<'c> PgConn<'c> {
    pub(crate) fn new(client: &'c Object, rt: &'c Handle) -> PgConn<'c> {
        PgConn { client, rt, failed: RefCell::new(None) }
    }

    /// The first failure since the transaction began (or since the last call), taken.
    pub(crate) fn take_failure(&self) -> Option<StoreError> {
        self.failed.take()
    }

    /// Keeps `e` as the failure, unless one came first.
    pub(crate) fn fail(&self, e: StoreError) {
        self.failed.borrow_mut().get_or_insert(e);
    }

    fn note(&self, e: tokio_postgres::Error) -> StoreError {
        let e = crate::error::store_error(e);
        self.failed.borrow_mut().get_or_insert_with(|| e.clone());
        e
    }

    /// Runs `call` on a prepared `sql` from the connection's statement cache, blocking; a
    /// failure is noted.
    fn cached<'s, T, F>(&'s self, sql: &str, call: impl FnOnce(&'s Object, Prepared) -> F) -> StoreResult<T>
    where
        F: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let run = async {
            let st = self.client.prepare_cached(sql).await?;
            call(self.client, st).await
        };
        self.rt.block_on(run).map_err(|e| self.note(e))
    }

    /// All the rows of a statement.
    pub(crate) fn query(&self, sql: &str, params: &[Param<'_>]) -> StoreResult<Vec<Row>> {
        self.cached(sql, |client, st| async move { client.query(&st, params).await })
    }

    /// At most one row.
    pub(crate) fn query_opt(&self, sql: &str, params: &[Param<'_>]) -> StoreResult<Option<Row>> {
        self.cached(sql, |client, st| async move { client.query_opt(&st, params).await })
    }

    /// Exactly one row.
    pub(crate) fn query_one(&self, sql: &str, params: &[Param<'_>]) -> StoreResult<Row> {
        self.cached(sql, |client, st| async move { client.query_one(&st, params).await })
    }

    /// How many rows a statement changed.
    pub(crate) fn exec(&self, sql: &str, params: &[Param<'_>]) -> StoreResult<u64> {
        self.cached(sql, |client, st| async move { client.execute(&st, params).await })
    }

    /// A row of this connection's, to read as the shared code does.
    pub(crate) fn columns<'a>(&'a self, row: &'a Row) -> PgRow<'a> {
        PgRow { row, conn: self }
    }

    /// A column of a row, its conversion failure noted like a statement's.
    pub(crate) fn get<'r, T: FromSql<'r>>(&self, row: &'r Row, i: usize) -> StoreResult<T> {
        row.try_get(i).map_err(|e| self.note(e))
    }
}

/// A shared statement's parameter as the driver takes it.
fn param<'a>(a: &'a Arg<'_>) -> Param<'a> {
    match a {
        Arg::Int(v) => v,
        Arg::Text(v) => v,
        Arg::OptText(v) => v,
    }
}

impl Statements for PgConn<'_> {
    const DIALECT: Dialect = Dialect::Postgres;

    fn rows<T>(&self, st: &Statement<'_>, mut read: impl FnMut(&dyn Columns) -> StoreResult<T>) -> StoreResult<Vec<T>> {
        let params: Vec<Param<'_>> = st.args.iter().map(param).collect();
        let rows = self.query(&st.sql, &params)?;
        rows.iter().map(|row| read(&self.columns(row))).collect()
    }

    fn execute(&self, st: &Statement<'_>) -> StoreResult<u64> {
        let params: Vec<Param<'_>> = st.args.iter().map(param).collect();
        self.exec(&st.sql, &params)
    }
}

/// A row being read, its conversion failures noted on its connection.
pub(crate) struct PgRow<'a> {
    row: &'a Row,
    conn: &'a PgConn<'a>,
}

impl PgRow<'_> {
    fn cursor(&self, i: usize) -> StoreResult<Option<Cursor>> {
        let text: Option<String> = self.conn.get(self.row, i)?;
        text.map(|t| Cursor::parse(&t).ok_or_else(|| StoreError::Corrupt(format!("malformed outbox cursor {t:?}"))))
            .transpose()
    }
}

impl Columns for PgRow<'_> {
    fn int(&self, i: usize) -> StoreResult<i64> {
        self.conn.get(self.row, i)
    }

    fn opt_int(&self, i: usize) -> StoreResult<Option<i64>> {
        self.conn.get(self.row, i)
    }

    fn text(&self, i: usize) -> StoreResult<String> {
        self.conn.get(self.row, i)
    }

    fn opt_text(&self, i: usize) -> StoreResult<Option<String>> {
        self.conn.get(self.row, i)
    }

    /// Categories are a `TEXT[]`; the payload's columns are as in every table ([`payload`]).
    fn item(&self) -> StoreResult<Item> {
        let (r, db) = (self.row, self.conn);
        let payload = payload::from_columns(db.get(r, 8)?, db.get(r, 9)?, db.get(r, 10)?, "items")?;
        Ok(Item {
            id: db.get(r, 0)?,
            created: Key { seq: db.get(r, 1)?, t: db.get(r, 2)? },
            modified: Key { seq: db.get(r, 3)?, t: db.get(r, 4)? },
            author: db.get(r, 5)?,
            atom_id: db.get(r, 6)?,
            categories: db.get(r, 7)?,
            payload,
        })
    }

    fn outbox_entry(&self) -> StoreResult<OutboxEntry> {
        let (r, db) = (self.row, self.conn);
        let payload = payload::from_columns(db.get(r, 5)?, db.get(r, 6)?, db.get(r, 7)?, "hub_outbox")?;
        let (seq, feed, view, item_id, modified) =
            (self.int(0)?, self.int(1)?, self.text(2)?, self.text(3)?, self.int(4)?);
        let (count, previous) = (self.int(8)?.max(0) as u64, self.cursor(9)?);
        let last = self.cursor(10)?.ok_or_else(|| StoreError::Corrupt("an outbox row without a cursor".into()))?;
        let at = self.int(11)?;
        Ok(OutboxEntry { seq, feed, view, item_id, modified, payload, count, previous, last, at })
    }
}
