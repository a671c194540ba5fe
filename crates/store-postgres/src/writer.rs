//! The writer thread: group commit ([`store_sql::group_commit`]), each batch on a pooled
//! connection in one transaction, a savepoint per closure, the commit announced to the other
//! instances ([`commit_notices`]) with the `COMMIT`.
//!
//! Several processes may write to one database: each has its own writer. A closure that
//! stamps items locks its feed's row first (`WriteTx::feed_for_update`), so writers of one
//! feed take turns across processes, each batch holding the lock until its COMMIT. The feeds
//! a batch's jobs name (`Store::write_to`) are locked first, in name order, so two processes'
//! batches over the same feeds never wait on each other in a cycle.

use crate::commit_notices;
use crate::connection::{Blocking, Param, PgConn};
use crate::error::retryable;
use deadpool_postgres::{Object, Pool};
use feed::Change;
use feed::ports::{StoreError, StoreResult, WriteTx};
use std::time::Duration;
use store_sql::batch::WriteJob;
use store_sql::batch_kept::Kept;
use store_sql::group_commit::{BatchTransaction, GroupCommit, next_batch};
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
        while let Some(batch) = next_batch(&mut jobs) {
            let mut tx = Batch {
                pool: &self.pool,
                blocking: &self.blocking,
                instance: self.instance,
                conn: None,
                kept: Kept::default(),
            };
            self.commits.run(&mut tx, batch, |_| {});
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
}

impl Batch<'_> {
    fn conn(&self) -> Result<&Object, StoreError> {
        self.conn.as_ref().ok_or_else(|| StoreError::Backend("no write transaction".into()))
    }
}

impl BatchTransaction for Batch<'_> {
    fn begin(&mut self) -> Result<(), StoreError> {
        self.conn = Some(begin(self.pool, self.blocking, "BEGIN; SAVEPOINT job")?);
        Ok(())
    }

    /// One after the other in name order, each kept for the closures (which then read it
    /// from the batch): the round trips they would have made themselves.
    fn lock_feeds(&mut self, feeds: &[&str]) -> Result<(), StoreError> {
        let (conn, blocking) = (self.conn()?, self.blocking);
        let mut tx = SqlTx::new(PgConn::writing(conn, blocking, &self.kept));
        for feed in feeds {
            let locked = tx.feed_for_update(feed);
            if let Some(e) = tx.driver().take_failure() {
                return Err(e);
            }
            locked?;
        }
        Ok(())
    }

    /// The savepoint stays for the next closure: released and set again after a success, in
    /// the round trip that sends the closure's pending writes; rolled back to (and kept) after
    /// a failure, the pending writes never sent.
    fn run(&mut self, job: &mut dyn WriteJob) -> Result<Option<Vec<Change>>, StoreError> {
        let (conn, blocking) = (self.conn()?, self.blocking);
        // What the closure finds kept; given back if it fails, as its savepoint is.
        let before = self.kept.borrow().clone();
        let mut tx = SqlTx::new(PgConn::writing(conn, blocking, &self.kept));
        let mut ok = job.run(&mut tx);
        // A statement that failed aborted the savepoint, whatever the closure made of it.
        if let Some(e) = tx.driver().take_failure() {
            if ok {
                job.fail(e.into());
            }
            ok = false;
        }
        if ok {
            let emitted = tx.take_changes();
            let (written, released) =
                tx.driver().round_trip(|c| c.batch_execute("RELEASE SAVEPOINT job; SAVEPOINT job"));
            match (written, released) {
                (Ok(()), Ok(())) => return Ok(Some(emitted)),
                // A pending write failed, and the rest of the pipeline with it: the closure
                // alone is rolled back, below.
                (Err(e), Err(_)) => job.fail(e.into()),
                // Its writes ran but one changed what it should not have, and the savepoint
                // is released with them: only the whole batch can be undone.
                (Err(e), Ok(())) => return Err(e),
                (Ok(()), Err(e)) => return Err(crate::error::store_error(e)),
            }
        }
        tx.driver().discard_pending();
        drop(tx);
        *self.kept.borrow_mut() = before;
        blocking.block_on(conn.batch_execute("ROLLBACK TO SAVEPOINT job")).map_err(crate::error::store_error)?;
        Ok(None)
    }

    /// Every instance is told of the feeds changed, once they are committed: the notice is
    /// delivered only if the transaction commits. The notice and the COMMIT go out in one
    /// round trip; a notice that failed aborted the transaction, so its COMMIT rolled back.
    fn commit(&mut self, changes: &[Change]) -> Result<(), StoreError> {
        let (conn, blocking) = (self.conn()?, self.blocking);
        if changes.is_empty() {
            return blocking.block_on(conn.batch_execute("COMMIT")).map_err(crate::error::store_error);
        }
        let payload = commit_notices::payload(self.instance, changes.iter().map(|c| c.feed.as_str()));
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
