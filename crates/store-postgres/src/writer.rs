//! The writer thread: group commit ([`store_sql::group_commit`]), each batch on a pooled
//! connection in one transaction, a savepoint per closure, the commit announced to the other
//! instances ([`commit_notices`]) with the `COMMIT`.
//!
//! Several processes may write to one database: each has its own writer. A closure that
//! stamps items locks its feed's row first (`WriteTx::feed_for_update`), so writers of one
//! feed take turns across processes, each batch holding the lock until its COMMIT.

use crate::commit_notices;
use crate::connection::PgConn;
use crate::error::retryable;
use deadpool_postgres::{Object, Pool};
use feed::Change;
use feed::ports::{StoreError, StoreResult};
use std::time::Duration;
use store_sql::batch::WriteJob;
use store_sql::group_commit::{BatchTransaction, GroupCommit, next_batch};
use store_sql::transaction::SqlTx;
use store_sql::writer_thread::WriterThread;
use tokio::runtime::Handle;
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
pub(crate) fn begin(pool: &Pool, rt: &Handle, begin: &str) -> Result<Object, StoreError> {
    let mut last = StoreError::Busy("no attempt made".into());
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            std::thread::sleep(Duration::from_millis(50 << attempt));
        }
        let conn = match rt.block_on(pool.get()) {
            Ok(conn) => conn,
            Err(e) => {
                last = crate::error::pool_error(e);
                if retryable(&last) {
                    continue;
                }
                return Err(last);
            }
        };
        match rt.block_on(conn.batch_execute(begin)) {
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
    rt: Handle,
    commits: GroupCommit,
    instance: u64,
) -> StoreResult<WriterThread<Box<dyn WriteJob>>> {
    let writer = Writer { pool, rt, commits, instance };
    WriterThread::spawn("postgres-writer", move |jobs| writer.run(jobs))
}

struct Writer {
    pool: Pool,
    rt: Handle,
    commits: GroupCommit,
    instance: u64,
}

impl Writer {
    /// Serves jobs until the queue is closed and empty, a batch at a time.
    fn run(mut self, mut jobs: Receiver<Box<dyn WriteJob>>) {
        while let Some(batch) = next_batch(&mut jobs) {
            let mut tx = Batch { pool: &self.pool, rt: &self.rt, instance: self.instance, conn: None };
            self.commits.run(&mut tx, batch, |_| {});
        }
    }
}

/// One batch's transaction, on a pooled connection taken when it begins.
struct Batch<'w> {
    pool: &'w Pool,
    rt: &'w Handle,
    instance: u64,
    conn: Option<Object>,
}

impl Batch<'_> {
    fn conn(&self) -> Result<&Object, StoreError> {
        self.conn.as_ref().ok_or_else(|| StoreError::Backend("no write transaction".into()))
    }
}

impl BatchTransaction for Batch<'_> {
    fn begin(&mut self) -> Result<(), StoreError> {
        self.conn = Some(begin(self.pool, self.rt, "BEGIN; SAVEPOINT job")?);
        Ok(())
    }

    fn run(&mut self, job: &mut dyn WriteJob) -> Result<Option<Vec<Change>>, StoreError> {
        let (conn, rt) = (self.conn()?, self.rt);
        let mut tx = SqlTx::new(PgConn::new(conn, rt));
        let mut ok = job.run(&mut tx);
        // A statement that failed aborted the savepoint, whatever the closure made of it.
        if let Some(e) = tx.driver().take_failure() {
            if ok {
                job.fail(e.into());
            }
            ok = false;
        }
        let emitted = tx.take_changes();
        // The savepoint stays for the next closure: released and set again after a success,
        // rolled back to (and kept) after a failure. One round trip each.
        let end = if ok { "RELEASE SAVEPOINT job; SAVEPOINT job" } else { "ROLLBACK TO SAVEPOINT job" };
        rt.block_on(conn.batch_execute(end)).map_err(crate::error::store_error)?;
        Ok(ok.then_some(emitted))
    }

    /// Every instance is told of the feeds changed, once they are committed: the notice is
    /// delivered only if the transaction commits.
    fn commit(&mut self, changes: &[Change]) -> Result<(), StoreError> {
        let (conn, rt) = (self.conn()?, self.rt);
        if !changes.is_empty() {
            let payload = commit_notices::payload(self.instance, changes.iter().map(|c| c.feed.as_str()));
            rt.block_on(conn.execute("SELECT pg_notify($1, $2)", &[&commit_notices::CHANNEL, &payload]))
                .map_err(crate::error::store_error)?;
        }
        rt.block_on(conn.batch_execute("COMMIT")).map_err(crate::error::store_error)
    }

    /// A failed COMMIT has ended the transaction already; otherwise it ends here. A
    /// connection in doubt is closed, not pooled again.
    fn roll_back(&mut self) {
        if let Some(conn) = self.conn.take()
            && self.rt.block_on(conn.batch_execute("ROLLBACK")).is_err()
        {
            discard(conn);
        }
    }
}
