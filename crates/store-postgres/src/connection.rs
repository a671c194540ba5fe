//! A pooled connection that is inside a transaction, as the shared transaction
//! ([`store_sql::transaction::SqlTx`]) drives it: statements from the connection's cache,
//! parameters and columns through `tokio-postgres`, and the first failure kept.
//!
//! Every call blocks its thread on the runtime ([`tokio::runtime::Handle::block_on`]): the
//! core's closures are synchronous, so they run on a blocking thread (a reader's
//! `spawn_blocking` or the writer's own thread), never on an async worker.
//!
//! Each of those calls is a round trip to the server, which is what a write costs most
//! (a publish is a dozen statements). So writes whose only answer is a count to check
//! ([`Statements::write`]) are kept pending and sent in one pipeline with the next
//! statement that needs an answer ([`PgConn::round_trip`]): in order, each checked, the
//! first failure failing the closure as it would have at once.
//!
//! In the writer's batch, what is pending goes on from one closure to the next
//! ([`Carried`]), to the batch's COMMIT at the latest: a closure that asks the server
//! nothing (a publish whose feed, item and views the batch has read already) costs no round
//! trip of its own. A closure's savepoint is set, in the pipeline ahead of its writes, only
//! when one of its statements goes out before it has ended: until then its writes are
//! undone by dropping them. A write that fails after its closure has ended fails the whole
//! batch (see `writer`).

use crate::payload;
use deadpool_postgres::Object;
use feed::outbox::OutboxEntry;
use feed::ports::{StoreError, StoreResult};
use feed::{Cursor, Item, Key};
use futures::TryFutureExt;
use futures::future::Either;
use futures::future::join_all;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use store_sql::batch_kept::Kept;
use store_sql::dialect::{Arg, Dialect, Statement};
use store_sql::driver::{Columns, Expect, Statements};
use tokio::runtime::Handle;
use tokio_postgres::Row;
use tokio_postgres::Statement as Prepared;
use tokio_postgres::types::{FromSql, ToSql};

/// A parameter of a statement.
pub(crate) type Param<'a> = &'a (dyn ToSql + Sync);

/// A parameter kept with a pending write.
pub(crate) type Owned = Box<dyn ToSql + Sync + Send>;

/// How a blocking thread waits for the server: on the runtime the pool's connections run
/// on, each wait a round trip (a pipeline of statements counts once), counted for the tests
/// and benchmarks that measure what an operation costs.
#[derive(Clone)]
pub(crate) struct Blocking {
    rt: Handle,
    round_trips: Arc<AtomicU64>,
}

impl Blocking {
    pub(crate) fn new(rt: Handle) -> Blocking {
        Blocking { rt, round_trips: Arc::default() }
    }

    /// Waits for one round trip's future.
    pub(crate) fn block_on<F: Future>(&self, round_trip: F) -> F::Output {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        self.rt.block_on(round_trip)
    }

    /// Waits for a future that asks nothing of the server (a pooled connection), uncounted.
    pub(crate) fn wait<F: Future>(&self, local: F) -> F::Output {
        self.rt.block_on(local)
    }

    /// The round trips made so far.
    pub(crate) fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }
}

/// The parameters of a pending write, each moved or copied in: `owned![a, b]`.
macro_rules! owned {
    ($($v:expr),* $(,)?) => { vec![$(Box::new($v) as $crate::connection::Owned),*] };
}
pub(crate) use owned;

/// A write sent with the next statement (see the module's doc), or the savepoint of the
/// closure whose writes follow it.
pub(crate) enum Pending {
    /// A statement; `rows` when it inserts one row that may go out in one statement with the
    /// like inserts next to it ([`merge_rows`]).
    Write {
        sql: String,
        params: Vec<Owned>,
        expect: Expect,
        rows: Option<&'static RowInsert>,
    },
    Savepoint,
}

/// A one-row `INSERT` whose neighbours of the same kind go out as one statement of many
/// rows: what a batch's publishes to a feed write, one row each, costs the server one
/// statement rather than one per publish.
pub(crate) struct RowInsert {
    /// `INSERT INTO table(columns)`.
    pub(crate) head: &'static str,
    /// What follows the `VALUES` (e.g. `ON CONFLICT DO NOTHING`).
    pub(crate) tail: &'static str,
    /// Parameters per row.
    pub(crate) width: usize,
}

/// The most rows one merged `INSERT` carries. Runs are cut into powers of two up to it, so a
/// table has at most seven statements in the connection's cache.
const MAX_MERGED_ROWS: usize = 64;

impl RowInsert {
    /// The statement inserting `n` rows.
    pub(crate) fn sql(&self, n: usize) -> String {
        let rows: Vec<String> = (0..n)
            .map(|r| {
                let params: Vec<String> = (1..=self.width).map(|c| format!("${}", r * self.width + c)).collect();
                format!("({})", params.join(", "))
            })
            .collect();
        format!("{} VALUES {} {}", self.head, rows.join(", "), self.tail)
    }
}

/// Merges each run of like one-row inserts in `pending` into statements of many rows, in
/// order; with, for each statement, the index in `pending` of its first write.
fn merge_rows(pending: Vec<Pending>) -> Vec<(usize, Pending)> {
    let mut out: Vec<(usize, Pending)> = Vec::with_capacity(pending.len());
    let mut run: Vec<(usize, Vec<Owned>, Expect)> = Vec::new();
    let mut kind: Option<&'static RowInsert> = None;
    let flush = |out: &mut Vec<(usize, Pending)>, run: &mut Vec<(usize, Vec<Owned>, Expect)>, kind: &RowInsert| {
        let mut rest = run.drain(..).peekable();
        while rest.peek().is_some() {
            let left = rest.len();
            let n = if left >= MAX_MERGED_ROWS { MAX_MERGED_ROWS } else { 1 << left.ilog2() };
            let chunk: Vec<(usize, Vec<Owned>, Expect)> = rest.by_ref().take(n).collect();
            let first = chunk[0].0;
            let pending = if n == 1 {
                let (_, params, expect) = chunk.into_iter().next().expect("one row");
                Pending::Write { sql: kind.sql(1), params, expect, rows: None }
            } else {
                let why = match &chunk[0].2 {
                    Expect::One(why) | Expect::Some(why) | Expect::Rows(_, why) => why.clone(),
                    Expect::Any => String::new(),
                };
                let params = chunk.into_iter().flat_map(|(_, params, _)| params).collect();
                Pending::Write { sql: kind.sql(n), params, expect: Expect::Rows(n as u64, why), rows: None }
            };
            out.push((first, pending));
        }
    };
    for (i, p) in pending.into_iter().enumerate() {
        match p {
            Pending::Write { params, expect, rows: Some(shape), .. } => {
                if kind.is_some_and(|k| !std::ptr::eq(k, shape)) {
                    flush(&mut out, &mut run, kind.expect("a kind"));
                }
                kind = Some(shape);
                run.push((i, params, expect));
            }
            other => {
                if let Some(k) = kind.take() {
                    flush(&mut out, &mut run, k);
                }
                out.push((i, other));
            }
        }
    }
    if let Some(k) = kind {
        flush(&mut out, &mut run, k);
    }
    out
}

/// What the writer's batch carries from one closure to the next: the writes not sent yet,
/// and whether a savepoint is set (the next is then set by releasing it first).
#[derive(Default)]
pub(crate) struct Carried {
    pub(crate) pending: Vec<Pending>,
    pub(crate) savepoint: bool,
}

/// Where a connection's statements run: what a failure fails, and whether a savepoint is
/// set before them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// A read snapshot, or the batch's own statements (its locks, its COMMIT): a failure
    /// fails the caller.
    Plain,
    /// A closure of the writer's batch, after `earlier` writes of the closures before it.
    Closure { earlier: usize },
}

/// A connection inside a transaction the caller owns (a `REPEATABLE READ READ ONLY`
/// snapshot for readers, the batch's write transaction for the writer).
pub(crate) struct PgConn<'c> {
    client: &'c Object,
    blocking: &'c Blocking,
    /// The first statement that failed. PostgreSQL aborts the transaction (or savepoint) on
    /// any error, so a closure that went on after one cannot succeed: its caller gets this.
    failed: RefCell<Option<StoreError>>,
    /// Writes not sent yet, in order.
    pending: RefCell<Vec<Pending>>,
    /// Whether a savepoint is set in the batch's transaction.
    savepoint: Cell<bool>,
    scope: Cell<Scope>,
    /// Whether this closure's own savepoint has been sent: then undoing it takes a
    /// `ROLLBACK TO`, not just dropping its pending writes.
    sent_own: Cell<bool>,
    /// A write of an earlier closure that failed: the batch is lost.
    lost: RefCell<Option<StoreError>>,
    /// What the writer's batch keeps for its later closures (nothing in a read snapshot).
    kept: Option<&'c Kept>,
}

impl<'c> PgConn<'c> {
    /// A connection in a read snapshot.
    pub(crate) fn new(client: &'c Object, blocking: &'c Blocking) -> PgConn<'c> {
        PgConn::with(client, blocking, None, Carried::default(), Scope::Plain)
    }

    /// A connection in the writer's batch transaction, for the batch's own statements, after
    /// what the closures before them left pending.
    pub(crate) fn batch(client: &'c Object, blocking: &'c Blocking, kept: &'c Kept, carried: Carried) -> PgConn<'c> {
        PgConn::with(client, blocking, Some(kept), carried, Scope::Plain)
    }

    /// A connection in the writer's batch transaction for one closure, after what the
    /// closures before it left pending; it keeps what it reads in `kept`.
    pub(crate) fn closure(client: &'c Object, blocking: &'c Blocking, kept: &'c Kept, carried: Carried) -> PgConn<'c> {
        let earlier = carried.pending.len();
        PgConn::with(client, blocking, Some(kept), carried, Scope::Closure { earlier })
    }

    fn with(
        client: &'c Object,
        blocking: &'c Blocking,
        kept: Option<&'c Kept>,
        carried: Carried,
        scope: Scope,
    ) -> PgConn<'c> {
        PgConn {
            client,
            blocking,
            failed: RefCell::new(None),
            pending: RefCell::new(carried.pending),
            savepoint: Cell::new(carried.savepoint),
            scope: Cell::new(scope),
            sent_own: Cell::new(false),
            lost: RefCell::new(None),
            kept,
        }
    }

    /// What goes on to the next closure (or the COMMIT), taken.
    pub(crate) fn carry(&self) -> Carried {
        Carried { pending: self.pending.take(), savepoint: self.savepoint.get() }
    }

    /// Sends what is owed and pending, if anything, in one round trip: whether it all did
    /// what it was expected to.
    pub(crate) fn flush(&self) -> StoreResult<()> {
        self.pay_owed();
        if self.pending.borrow().is_empty() {
            return Ok(());
        }
        let (written, _) = self.round_trip(|_| async { Ok::<_, tokio_postgres::Error>(()) });
        self.take_failure();
        written
    }

    /// Drops this closure's pending writes, as its failure undoes them: whether its
    /// savepoint was sent (then the caller rolls back to it).
    pub(crate) fn drop_own(&self) -> bool {
        match self.scope.get() {
            Scope::Closure { earlier } => self.pending.borrow_mut().truncate(earlier),
            Scope::Plain => self.pending.borrow_mut().clear(),
        }
        self.sent_own.get()
    }

    /// A write of an earlier closure that failed, taken: the batch is lost.
    pub(crate) fn take_lost(&self) -> Option<StoreError> {
        self.lost.take()
    }

    /// What the writer's batch keeps for its later closures (none in a read snapshot).
    pub(crate) fn kept(&self) -> Option<&'c Kept> {
        self.kept
    }

    /// Keeps a write to send with the next statement.
    pub(crate) fn defer(&self, sql: impl Into<String>, params: Vec<Owned>, expect: Expect) {
        self.pending.borrow_mut().push(Pending::Write { sql: sql.into(), params, expect, rows: None });
    }

    /// Keeps a one-row insert to send with the next statement, merged with the like ones
    /// next to it.
    pub(crate) fn defer_row(&self, kind: &'static RowInsert, params: Vec<Owned>, expect: Expect) {
        debug_assert_eq!(params.len(), kind.width, "one parameter per column");
        self.pending.borrow_mut().push(Pending::Write { sql: String::new(), params, expect, rows: Some(kind) });
    }

    /// The pending writes to send now, with this closure's savepoint set ahead of its own
    /// the first time; how many of them are earlier closures' (a failure among those, or of
    /// the savepoint, loses the batch).
    fn to_send(&self) -> (Vec<Pending>, usize) {
        let mut pending = self.pending.take();
        let Scope::Closure { earlier } = self.scope.get() else { return (pending, 0) };
        if !self.sent_own.get() {
            pending.insert(earlier, Pending::Savepoint);
            self.sent_own.set(true);
        }
        // From here on, every pending write is this closure's.
        self.scope.set(Scope::Closure { earlier: 0 });
        (pending, earlier)
    }

    /// Sends the pending writes and then `last` in one pipeline, one round trip (two when
    /// a statement is not prepared yet on this connection): whether the writes all did what
    /// they were expected to (the first failure noted), and what `last` gave. A write that
    /// failed aborts the transaction, so `last` then fails too.
    pub(crate) fn round_trip<'s, T, F>(
        &'s self,
        last: impl FnOnce(&'s Object) -> F,
    ) -> (StoreResult<()>, Result<T, tokio_postgres::Error>)
    where
        F: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        // What the batch owes its feeds goes out ahead of what is asked.
        self.pay_owed();
        let (pending, earlier) = self.to_send();
        let (firsts, pending): (Vec<usize>, Vec<Pending>) = merge_rows(pending).into_iter().unzip();
        let client = self.client;
        let params: Vec<Vec<Param<'_>>> = pending
            .iter()
            .map(|p| match p {
                Pending::Write { params, .. } => params.iter().map(|b| b.as_ref() as Param<'_>).collect(),
                Pending::Savepoint => Vec::new(),
            })
            .collect();
        // A savepoint set while one is set releases that one: they do not nest.
        let mut set = self.savepoint.get();
        let savepoints: Vec<&str> = pending
            .iter()
            .filter(|p| matches!(p, Pending::Savepoint))
            .map(|_| {
                if std::mem::replace(&mut set, true) { "RELEASE SAVEPOINT job; SAVEPOINT job" } else { "SAVEPOINT job" }
            })
            .collect();
        self.savepoint.set(set);
        let run = async {
            // Every statement prepared first (from the cache, mostly: at once), so that the
            // pipeline goes out in the order the writes were given, `last` after them.
            let prepared = join_all(pending.iter().map(|p| async move {
                match p {
                    Pending::Write { sql, .. } => client.prepare_cached(sql).await.map(Some),
                    Pending::Savepoint => Ok(None),
                }
            }))
            .await;
            let mut sends = Vec::with_capacity(pending.len());
            let mut savepoints = savepoints.iter();
            for (st, params) in prepared.iter().zip(&params) {
                match st {
                    Ok(Some(st)) => sends.push(Either::Left(client.execute(st, params))),
                    Ok(None) => {
                        let sql = savepoints.next().expect("a statement for each savepoint");
                        sends.push(Either::Right(client.batch_execute(sql).map_ok(|()| 0)));
                    }
                    Err(_) => break,
                }
            }
            let (sent, last) = futures::join!(join_all(sends), last(client));
            (prepared, sent, last)
        };
        let (prepared, sent, last) = self.blocking.block_on(run);
        let mut sent = sent.into_iter();
        let mut outcome = Ok(());
        for ((p, st), first) in pending.iter().zip(prepared).zip(firsts) {
            let expect = match p {
                Pending::Write { expect, .. } => expect,
                Pending::Savepoint => &Expect::Any,
            };
            let checked = match st.and_then(|_| sent.next().expect("one send for each prepared write")) {
                Ok(changed) => expect.check(changed),
                Err(e) => Err(crate::error::store_error(e)),
            };
            if let Err(e) = checked {
                // An earlier closure's write (or this one's savepoint, ahead of its writes).
                if first < earlier || matches!(p, Pending::Savepoint) {
                    self.lost.borrow_mut().get_or_insert(e.clone());
                } else {
                    self.fail(e.clone());
                }
                outcome = Err(e);
                break;
            }
        }
        (outcome, last)
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

    /// Runs `call` on a prepared `sql` from the connection's statement cache, after the
    /// pending writes and in the same round trip; a failure is noted.
    fn cached<'s, T, F>(&'s self, sql: &str, call: impl FnOnce(&'s Object, Prepared) -> F) -> StoreResult<T>
    where
        F: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        // Polled after the writes have gone out (see `round_trip`), so sent after them.
        let (written, answer) = self.round_trip(|client| async move {
            let st = client.prepare_cached(sql).await?;
            call(client, st).await
        });
        written?;
        answer.map_err(|e| self.note(e))
    }

    /// All the rows of each of `statements`, run one after the other in one round trip.
    pub(crate) fn queries(&self, statements: &[(&str, &[Param<'_>])]) -> StoreResult<Vec<Vec<Row>>> {
        let (written, answers) = self.round_trip(|client| async move {
            // Prepared first (from the cache, mostly: at once), so that they go out in order.
            let prepared = join_all(statements.iter().map(|(sql, _)| client.prepare_cached(sql))).await;
            let prepared: Vec<Prepared> = prepared.into_iter().collect::<Result<_, _>>()?;
            let asked = prepared.iter().zip(statements).map(|(st, (_, params))| client.query(st, params));
            join_all(asked).await.into_iter().collect::<Result<Vec<_>, _>>()
        });
        written?;
        answers.map_err(|e| self.note(e))
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

impl Drop for PgConn<'_> {
    fn drop(&mut self) {
        // Pending writes go on to the next closure or the COMMIT, or are dropped with their closure.
        debug_assert!(self.pending.get_mut().is_empty() || std::thread::panicking(), "pending writes dropped unsent");
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

    fn write(&self, st: &Statement<'_>, expect: Expect) -> StoreResult<()> {
        let params = st.args.iter().map(owned_arg).collect();
        self.defer(st.sql.as_ref(), params, expect);
        Ok(())
    }
}

/// A shared statement's parameter, kept with a pending write.
fn owned_arg(a: &Arg<'_>) -> Owned {
    match *a {
        Arg::Int(v) => Box::new(v),
        Arg::Text(v) => Box::new(v.to_string()),
        Arg::OptText(v) => Box::new(v.map(str::to_string)),
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

#[cfg(test)]
mod tests {
    use super::*;

    static ROW: RowInsert = RowInsert { head: "INSERT INTO t(a, b)", tail: "ON CONFLICT DO NOTHING", width: 2 };
    static OTHER: RowInsert = RowInsert { head: "INSERT INTO u(a, b)", tail: "", width: 2 };

    fn row(kind: &'static RowInsert, n: i64) -> Pending {
        Pending::Write {
            sql: String::new(),
            params: owned![n, n],
            expect: Expect::One(format!("row {n}")),
            rows: Some(kind),
        }
    }

    fn write(sql: &str) -> Pending {
        Pending::Write { sql: sql.into(), params: Vec::new(), expect: Expect::Any, rows: None }
    }

    /// What goes out: each statement's SQL (rows counted), its first write's index, and how
    /// many rows it must change.
    fn shape(merged: Vec<(usize, Pending)>) -> Vec<(String, usize, Option<u64>)> {
        merged
            .into_iter()
            .map(|(first, p)| match p {
                Pending::Write { sql, expect, params, .. } => {
                    let n = match expect {
                        Expect::Rows(n, _) => Some(n),
                        Expect::One(_) => Some(1),
                        _ => None,
                    };
                    let head = sql.split(" VALUES").next().unwrap_or_default().to_string();
                    (format!("{head}/{}", params.len()), first, n)
                }
                Pending::Savepoint => ("savepoint".into(), first, None),
            })
            .collect()
    }

    #[test]
    fn runs_of_like_rows_go_out_in_powers_of_two_and_never_across_another_statement() {
        let mut pending: Vec<Pending> = (0..7).map(|n| row(&ROW, n)).collect();
        pending.push(write("UPDATE x"));
        pending.push(row(&ROW, 7));
        pending.push(Pending::Savepoint);
        pending.extend((8..10).map(|n| row(&ROW, n)));
        pending.push(row(&OTHER, 10));
        let t = "INSERT INTO t(a, b)";
        assert_eq!(
            shape(merge_rows(pending)),
            vec![
                (format!("{t}/8"), 0, Some(4)),
                (format!("{t}/4"), 4, Some(2)),
                (format!("{t}/2"), 6, Some(1)),
                ("UPDATE x/0".into(), 7, None),
                (format!("{t}/2"), 8, Some(1)),
                ("savepoint".into(), 9, None),
                (format!("{t}/4"), 10, Some(2)),
                ("INSERT INTO u(a, b)/2".into(), 12, Some(1)),
            ]
        );
        assert_eq!(ROW.sql(2), "INSERT INTO t(a, b) VALUES ($1, $2), ($3, $4) ON CONFLICT DO NOTHING");
    }

    #[test]
    fn a_run_longer_than_a_statement_takes_is_cut() {
        let pending: Vec<Pending> = (0..MAX_MERGED_ROWS as i64 + 3).map(|n| row(&ROW, n)).collect();
        let rows: Vec<Option<u64>> = shape(merge_rows(pending)).into_iter().map(|(_, _, n)| n).collect();
        assert_eq!(rows, [Some(MAX_MERGED_ROWS as u64), Some(2), Some(1)]);
    }
}
