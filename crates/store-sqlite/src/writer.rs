//! The writer thread: group commit ([`store_sql::group_commit`]) on the one write connection,
//! each batch in one `BEGIN IMMEDIATE` … `COMMIT`, and the reads of an in-memory database,
//! which has no other connection.

use crate::StoreStats;
use crate::codec::store_error;
use crate::connection::SqliteConn;
use feed::Change;
use feed::ports::{StoreError, StoreResult};
use rusqlite::Connection;
use std::sync::{Arc, Mutex, PoisonError};
use store_sql::batch::WriteJob;
use store_sql::batch_kept::Kept;
use store_sql::group_commit::{BatchTransaction, GroupCommit, Tally, next_batch};
use store_sql::transaction::SqlTx;
use store_sql::writer_thread::WriterThread;
use tokio::sync::mpsc::Receiver;

/// What the writer thread is asked to do.
pub(crate) enum Job {
    Write(Box<dyn WriteJob>),
    /// A read on the write connection: only for in-memory stores, which have no other.
    Read(Box<dyn FnOnce(&Connection) + Send>),
}

impl From<Box<dyn WriteJob>> for Job {
    fn from(write: Box<dyn WriteJob>) -> Job {
        Job::Write(write)
    }
}

impl StoreStats {
    /// Adds a batch: its closures count as written only if it committed; otherwise every
    /// caller got the batch's error.
    fn count(&mut self, batch: Tally) {
        let (n, succeeded) = (batch.jobs as u64, batch.succeeded as u64);
        self.max_batch = self.max_batch.max(n);
        if batch.committed {
            self.commits += 1;
            self.writes += succeeded;
            self.failed_writes += n - succeeded;
        } else {
            self.failed_writes += n;
        }
    }
}

/// Starts the writer thread, owning the write connection; it counts its batches in `stats`
/// (a lock taken once per batch, before any caller is answered).
pub(crate) fn start(
    conn: Connection,
    commits: GroupCommit,
    stats: Arc<Mutex<StoreStats>>,
) -> StoreResult<WriterThread<Job>> {
    let writer = Writer { conn, commits, stats };
    WriterThread::spawn("sqlite-writer", move |jobs| writer.run(jobs))
}

struct Writer {
    conn: Connection,
    commits: GroupCommit,
    stats: Arc<Mutex<StoreStats>>,
}

impl Writer {
    /// Serves jobs until the queue is closed and empty; each round's writes in one batch,
    /// then its reads.
    fn run(mut self, mut jobs: Receiver<Job>) {
        while let Some(round) = next_batch(&mut jobs) {
            let mut writes = Vec::new();
            let mut reads = Vec::new();
            for job in round {
                match job {
                    Job::Write(w) => writes.push(w),
                    Job::Read(r) => reads.push(r),
                }
            }
            if !writes.is_empty() {
                let stats = &self.stats;
                let count = |batch| stats.lock().unwrap_or_else(PoisonError::into_inner).count(batch);
                self.commits.run(&mut Batch { conn: &self.conn, kept: Kept::default() }, writes, count);
            }
            for read in reads {
                read(&self.conn);
            }
        }
    }
}

/// One batch's transaction on the write connection, and what its closures keep for the
/// later ones ([`store_sql::batch_kept`]).
struct Batch<'c> {
    conn: &'c Connection,
    kept: Kept,
}

impl BatchTransaction for Batch<'_> {
    fn begin(&mut self) -> Result<(), StoreError> {
        self.conn.execute_batch("BEGIN IMMEDIATE").map_err(store_error)
    }

    fn run(&mut self, job: &mut dyn WriteJob) -> Result<Option<Vec<Change>>, StoreError> {
        let conn = self.conn;
        run(conn, "SAVEPOINT job").map_err(store_error)?;
        // What the closure finds kept; given back if it fails, as its savepoint is.
        let before = self.kept.borrow().checkpoint();
        let mut tx = SqlTx::new(SqliteConn(conn, Some(&self.kept)));
        let ok = job.run(&mut tx);
        let emitted = tx.take_changes();
        // Some errors (disk full, I/O) make SQLite roll the whole transaction back by
        // itself: then the earlier closures' work is gone too, and the batch fails.
        if conn.is_autocommit() {
            return Err(StoreError::Backend("the write transaction was rolled back by SQLite".into()));
        }
        let end = if ok {
            run(conn, "RELEASE job")
        } else {
            self.kept.borrow_mut().restore(before);
            run(conn, "ROLLBACK TO job").and_then(|()| run(conn, "RELEASE job"))
        };
        end.map_err(store_error)?;
        Ok(ok.then_some(emitted))
    }

    fn commit(&mut self, _changes: &[Change]) -> Result<(), StoreError> {
        self.conn.execute_batch("COMMIT").map_err(store_error)
    }

    fn roll_back(&mut self) {
        // A failed COMMIT (e.g. busy) leaves the transaction open: end it, or the next
        // batch's BEGIN would fail too.
        if !self.conn.is_autocommit()
            && let Err(e) = self.conn.execute_batch("ROLLBACK")
        {
            tracing::error!(error = %e, "rollback after a failed batch failed");
        }
    }
}

/// Runs a transaction-control statement from the statement cache: they run twice per write,
/// and parsing them each time is measurable at thousands of writes per second.
fn run(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}
