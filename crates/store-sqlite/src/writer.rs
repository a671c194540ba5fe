//! The writer thread and its group commit.
//!
//! One thread owns the write connection. It blocks for a job, then takes whatever else is
//! already queued (up to [`MAX_BATCH`]), and runs them all in one `BEGIN IMMEDIATE` …
//! `COMMIT`: one fsync for the whole batch, which is what makes many concurrent durable
//! writes fast. Each closure runs inside its own savepoint, so one that fails (or panics)
//! is rolled back alone. After the commit the batch's changes go to the [`ChangeSink`] in one
//! call, in order, and only then is every caller answered: an answer always means "durable".

use super::read::SqlTx;
use feed::ports::{ChangeSink, CommitObserver, StoreError};
use rusqlite::Connection;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
pub(crate) use store_sql::batch::{Pending, WriteJob, internal};
use tokio::sync::mpsc::Receiver;

/// The most jobs one transaction takes. Bounds the latency a batch adds to its first caller
/// and the memory its changes hold; at this size the fsync is long amortised.
pub(crate) const MAX_BATCH: usize = 1024;

/// What the writer thread is asked to do.
pub(crate) enum Job {
    Write(Box<dyn WriteJob>),
    /// A read on the write connection: only for in-memory stores, which have no other.
    Read(Box<dyn FnOnce(&Connection) + Send>),
}

/// The writer's counters, shared with [`super::SqliteStore::stats`].
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) commits: AtomicU64,
    pub(crate) writes: AtomicU64,
    pub(crate) failed_writes: AtomicU64,
    pub(crate) max_batch: AtomicU64,
}

pub(crate) struct Writer {
    pub(crate) conn: Connection,
    pub(crate) jobs: Receiver<Job>,
    pub(crate) sink: Option<ChangeSink>,
    pub(crate) observer: Option<CommitObserver>,
    pub(crate) counters: Arc<Counters>,
}

impl Writer {
    /// Serves jobs until every sender is gone and the queue is empty: queued work is always
    /// finished, which is what a graceful shutdown relies on.
    pub(crate) fn run(mut self) {
        while let Some(first) = self.jobs.blocking_recv() {
            let mut writes = Vec::new();
            let mut reads = Vec::new();
            let mut next = Some(first);
            while let Some(job) = next.take() {
                match job {
                    Job::Write(w) => writes.push(w),
                    Job::Read(r) => reads.push(r),
                }
                if writes.len() + reads.len() < MAX_BATCH {
                    next = self.jobs.try_recv().ok();
                }
            }
            if !writes.is_empty() {
                self.commit_batch(writes);
            }
            for read in reads {
                read(&self.conn);
            }
        }
    }

    fn commit_batch(&mut self, mut jobs: Vec<Box<dyn WriteJob>>) {
        let conn = &self.conn;
        let n = jobs.len() as u64;
        self.counters.max_batch.fetch_max(n, Ordering::Relaxed);
        let mut changes = Vec::new();
        let mut succeeded = 0u64;
        let started = std::time::Instant::now();
        let mut aborted: Option<StoreError> =
            conn.execute_batch("BEGIN IMMEDIATE").err().map(crate::codec::store_error);
        if aborted.is_none() {
            for job in jobs.iter_mut() {
                if let Err(e) = run(conn, "SAVEPOINT job") {
                    aborted = Some(crate::codec::store_error(e));
                    break;
                }
                let mut tx = SqlTx::new(conn);
                let ok = job.run(&mut tx);
                let emitted = std::mem::take(&mut tx.changes);
                // Some errors (disk full, I/O) make SQLite roll the whole transaction back
                // by itself: then the earlier closures' work is gone too, and the batch fails.
                if conn.is_autocommit() {
                    aborted = Some(StoreError::Backend("the write transaction was rolled back by SQLite".into()));
                    break;
                }
                let end = if ok {
                    run(conn, "RELEASE job")
                } else {
                    run(conn, "ROLLBACK TO job").and_then(|()| run(conn, "RELEASE job"))
                };
                if let Err(e) = end {
                    aborted = Some(crate::codec::store_error(e));
                    break;
                }
                if ok {
                    succeeded += 1;
                    changes.extend(emitted);
                }
            }
        }
        let outcome = match aborted {
            Some(e) => Err(e),
            None => conn.execute_batch("COMMIT").map_err(crate::codec::store_error),
        };
        if outcome.is_err() && !conn.is_autocommit() {
            // A failed COMMIT (e.g. busy) leaves the transaction open: end it, or the next
            // batch's BEGIN would fail too.
            if let Err(e) = conn.execute_batch("ROLLBACK") {
                tracing::error!(error = %e, "rollback after a failed batch failed");
            }
        }
        match &outcome {
            Ok(()) => {
                if let Some(observe) = &self.observer {
                    observe(n as usize, started.elapsed());
                }
                self.counters.commits.fetch_add(1, Ordering::Relaxed);
                self.counters.writes.fetch_add(succeeded, Ordering::Relaxed);
                self.counters.failed_writes.fetch_add(n - succeeded, Ordering::Relaxed);
                if !changes.is_empty()
                    && let Some(sink) = self.sink.as_mut()
                    && catch_unwind(AssertUnwindSafe(|| sink(changes))).is_err()
                {
                    tracing::error!("the change sink panicked; the writer carries on");
                }
            }
            Err(e) => {
                tracing::error!(error = %e, jobs = n, "a write batch failed; all its callers get an error");
                self.counters.failed_writes.fetch_add(n, Ordering::Relaxed);
            }
        }
        for job in jobs {
            job.answer(outcome.clone());
        }
    }
}

/// Runs a transaction-control statement from the statement cache: they run twice per write,
/// and parsing them each time is measurable at thousands of writes per second.
fn run(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}
