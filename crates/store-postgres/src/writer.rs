//! The writer thread: group commit ([`store_sql::group_commit`]), each batch on a pooled
//! connection in one transaction, a savepoint per closure, the commit announced to the other
//! instances ([`commit_notices`]) with the `COMMIT`.
//!
//! What a batch costs in round trips: `BEGIN`; the rows of the feeds its jobs name locked,
//! with the items they name and the views that follow them read, in one pipeline; the writes
//! not sent yet; the `COMMIT`. A closure that finds all it reads kept (see
//! [`store_sql::batch_kept`]) sends nothing: its writes go out with the next closure's first
//! read, or before the `COMMIT`, and its savepoint is set only if it makes a round trip of
//! its own (see [`crate::connection`]). A write that fails once its closure has ended (a
//! statement the store's own checks should have kept from failing) fails the whole batch:
//! every caller gets the error, nothing is committed.
//!
//! Several processes may write to one database: each has its own writer. A closure that
//! stamps items locks its feed's row first (`WriteTx::feed_for_update`), so writers of one
//! feed take turns across processes, each batch holding the lock until its COMMIT. The feeds
//! a batch's jobs name (`Store::write_to`) are locked first, in name order, so two processes'
//! batches over the same feeds never wait on each other in a cycle; those another process
//! holds are put off to the next batch rather than waited for (`PgConn::lock_and_read`).

use crate::commit_notices;
use crate::connection::{Blocking, Carried, Param, PgConn};
use crate::error::retryable;
use deadpool_postgres::{Object, Pool};
use feed::Change;
use feed::ports::{StoreError, StoreResult};
use std::time::Duration;
use store_sql::batch::WriteJob;
use store_sql::batch_kept::Kept;
use store_sql::group_commit::{BatchTransaction, Busy, GroupCommit, Targets, next_batch_after};
use store_sql::transaction::SqlTx;
use store_sql::writer_thread::WriterThread;
use tokio::sync::mpsc::Receiver;

/// How often getting a connection and beginning a transaction is tried before the callers
/// get [`StoreError::Busy`]: a restarted server or a dropped connection is met with a fresh
/// connection. Nothing of any caller has run at that point, so retrying is safe.
pub(crate) const ATTEMPTS: u32 = 3;

/// A connection that may be mid-transaction or broken: closed rather than pooled again.
pub(crate) fn discard(conn: Object) {
    drop(Object::take(conn));
}

/// Gets a pooled connection and runs `begin` on it, retrying on a lost connection.
pub(crate) fn begin(pool: &Pool, blocking: &Blocking, begin: &str) -> Result<Object, StoreError> {
    let mut last = StoreError::Busy("no attempt made".into());
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            std::thread::sleep(Duration::from_millis(50 << attempt));
        }
        let conn = match blocking.wait(pool.get()) {
            Ok(conn) => conn,
            Err(e) => {
                last = crate::error::pool_error(e);
                if retryable(&last) {
                    continue;
                }
                return Err(last);
            }
        };
        match blocking.block_on(conn.batch_execute(begin)) {
            Ok(()) => return Ok(conn),
            Err(e) => {
                discard(conn);
                last = crate::error::store_error(e);
                if !retryable(&last) {
                    return Err(last);
                }
            }
        }
    }
    Err(last)
}

/// Starts this process's writer thread, writing through `pool`; `instance` is this
/// process's id in commit notices.
pub(crate) fn start(
    pool: Pool,
    blocking: Blocking,
    commits: GroupCommit,
    instance: u64,
) -> StoreResult<WriterThread<Box<dyn WriteJob>>> {
    let writer = Writer { pool, blocking, commits, instance };
    WriterThread::spawn("postgres-writer", move |jobs| writer.run(jobs))
}

struct Writer {
    pool: Pool,
    blocking: Blocking,
    commits: GroupCommit,
    instance: u64,
}

impl Writer {
    /// Serves jobs until the queue is closed and empty, a batch at a time.
    fn run(mut self, mut jobs: Receiver<Box<dyn WriteJob>>) {
        let mut put_off = Vec::new();
        while let Some(batch) = next_batch_after(std::mem::take(&mut put_off), &mut jobs) {
            let mut tx = Batch {
                pool: &self.pool,
                blocking: &self.blocking,
                instance: self.instance,
                conn: None,
                kept: Kept::default(),
                carried: Carried::default(),
            };
            put_off = self.commits.run(&mut tx, batch, |_| {});
        }
    }
}

/// One batch's transaction, on a pooled connection taken when it begins.
struct Batch<'w> {
    pool: &'w Pool,
    blocking: &'w Blocking,
    instance: u64,
    conn: Option<Object>,
    /// What the batch's closures read and left for the next: a closure that publishes to a
    /// feed an earlier one locked reads its row (and the views that follow it) from here,
    /// not the server.
    kept: Kept,
    /// The writes of the closures so far not sent yet, and the savepoint's state.
    carried: Carried,
}

/// A batch's connection, once it has begun (a field apart, so that the batch's other
/// fields stay free to change while it is used).
fn open(conn: &Option<Object>) -> Result<&Object, StoreError> {
    conn.as_ref().ok_or_else(|| StoreError::Backend("no write transaction".into()))
}

impl BatchTransaction for Batch<'_> {
    fn begin(&mut self) -> Result<(), StoreError> {
        self.conn = Some(begin(self.pool, self.blocking, "BEGIN")?);
        Ok(())
    }

    /// In name order, with the items its jobs name and the views that follow them, kept for
    /// the closures (which then read them from the batch): the round trips they would have
    /// made themselves.
    fn lock_feeds(&mut self, targets: &Targets<'_>, wait: &Busy) -> Result<Busy, StoreError> {
        let (conn, blocking) = (open(&self.conn)?, self.blocking);
        let db = PgConn::batch(conn, blocking, &self.kept, Carried::default());
        let read = db.lock_and_read(targets, wait);
        db.take_failure().map_or(read, Err)
    }

    /// A closure that succeeds leaves its writes pending for the next (see the module docs);
    /// one that fails drops those not sent, and rolls back to its savepoint if it had set
    /// one. A failure of an earlier closure's write, sent with this one's, loses the batch.
    fn run(&mut self, job: &mut dyn WriteJob) -> Result<Option<Vec<Change>>, StoreError> {
        let (conn, blocking) = (open(&self.conn)?, self.blocking);
        // What the closure finds kept; given back if it fails, as its savepoint is.
        let before = self.kept.borrow().checkpoint();
        let carried = std::mem::take(&mut self.carried);
        let mut tx = SqlTx::new(PgConn::closure(conn, blocking, &self.kept, carried));
        let mut ok = job.run(&mut tx);
        let db = tx.driver();
        if let Some(e) = db.take_lost() {
            // The batch is rolled back whole: nothing pending goes on.
            db.carry();
            return Err(e);
        }
        // A statement that failed aborted the savepoint, whatever the closure made of it.
        if let Some(e) = db.take_failure() {
            if ok {
                job.fail(e.into());
            }
            ok = false;
        }
        if ok {
            let emitted = tx.take_changes();
            self.carried = tx.driver().carry();
            return Ok(Some(emitted));
        }
        let rollback = db.drop_own();
        self.carried = db.carry();
        drop(tx);
        self.kept.borrow_mut().restore(before);
        if rollback {
            blocking.block_on(conn.batch_execute("ROLLBACK TO SAVEPOINT job")).map_err(crate::error::store_error)?;
        }
        Ok(None)
    }

    /// The closures' writes not sent yet go out first, in one round trip, and are checked:
    /// one that failed, or changed what it should not have (which does not abort the
    /// transaction by itself), fails the batch before it commits, and every caller gets the
    /// error. Every instance is told of the feeds changed, once they are committed: the
    /// notice and the COMMIT go out in one round trip, and the notice is delivered only if the
    /// transaction commits; a notice that failed aborted it, so its COMMIT rolled back.
    fn commit(&mut self, changes: &[Change]) -> Result<(), StoreError> {
        let (conn, blocking) = (open(&self.conn)?, self.blocking);
        PgConn::batch(conn, blocking, &self.kept, std::mem::take(&mut self.carried)).flush()?;
        if changes.is_empty() {
            return blocking.block_on(conn.batch_execute("COMMIT")).map_err(crate::error::store_error);
        }
        // A change with subscribed views was logged to push (`WriteTx::emit`).
        let pushes = changes.iter().any(|c| !c.views.is_empty());
        let payload = commit_notices::payload(self.instance, changes.iter().map(|c| c.feed.as_str()), pushes);
        let (notified, committed) = blocking.block_on(async {
            // Prepared first (cached after the first batch), so that the notice goes out first.
            let notify = match conn.prepare_cached("SELECT pg_notify($1, $2)").await {
                Ok(st) => st,
                Err(e) => return (Err(e), Ok(())),
            };
            let params: [Param<'_>; 2] = [&commit_notices::CHANNEL, &payload];
            futures::join!(conn.execute(&notify, &params), conn.batch_execute("COMMIT"))
        });
        notified.map_err(crate::error::store_error)?;
        committed.map_err(crate::error::store_error)
    }

    /// A failed COMMIT has ended the transaction already; otherwise it ends here. A
    /// connection in doubt is closed, not pooled again.
    fn roll_back(&mut self) {
        if let Some(conn) = self.conn.take()
            && self.blocking.block_on(conn.batch_execute("ROLLBACK")).is_err()
        {
            discard(conn);
        }
    }
}
