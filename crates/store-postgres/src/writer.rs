//! The writer thread and its group commit, as on SQLite: one thread owns one connection,
//! blocks for a job, takes whatever else is queued (up to [`MAX_BATCH`]) and runs them all in
//! one transaction, each closure in its own savepoint, then one `COMMIT`. After the commit
//! the batch's changes go to the [`ChangeSink`] in one call, in order, and only then is each
//! caller answered: an answer always means "committed".
//!
//! Several processes may write to one database: each has its own writer. A closure that
//! stamps items locks its feed's row first (`WriteTx::feed_for_update`), so writers of one
//! feed take turns across processes, each batch holding the lock until its COMMIT.

use super::error::retryable;
use super::read::PgTx;
use deadpool_postgres::{Object, Pool};
use feed::ports::{ChangeSink, CommitObserver, StoreError};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;
pub(crate) use store_sql::batch::{Pending, WriteJob, internal};
use tokio::runtime::Handle;
use tokio::sync::mpsc::Receiver;

/// The most jobs one transaction takes.
pub(crate) const MAX_BATCH: usize = 1024;

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

pub(crate) struct Writer {
    pub(crate) pool: Pool,
    pub(crate) rt: Handle,
    pub(crate) jobs: Receiver<Box<dyn WriteJob>>,
    pub(crate) sink: Option<ChangeSink>,
    pub(crate) observer: Option<CommitObserver>,
    /// This process's id in commit commit_notices.
    pub(crate) instance: u64,
}

impl Writer {
    /// Serves jobs until every sender is gone and the queue is empty: queued work is always
    /// finished, which is what a graceful shutdown relies on.
    pub(crate) fn run(mut self) {
        while let Some(first) = self.jobs.blocking_recv() {
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match self.jobs.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            self.commit_batch(batch);
        }
    }

    fn commit_batch(&mut self, mut jobs: Vec<Box<dyn WriteJob>>) {
        let n = jobs.len();
        let started = std::time::Instant::now();
        let conn = match begin(&self.pool, &self.rt, "BEGIN; SAVEPOINT job") {
            Ok(conn) => conn,
            Err(e) => {
                tracing::error!(error = %e, jobs = n, "cannot begin a write transaction");
                for job in jobs {
                    job.answer(Err(e.clone()));
                }
                return;
            }
        };
        let rt = &self.rt;
        let mut changes = Vec::new();
        let mut aborted: Option<StoreError> = None;
        for job in jobs.iter_mut() {
            let mut tx = PgTx::new(&conn, rt);
            let mut ok = job.run(&mut tx);
            // A statement that failed aborted the savepoint, whatever the closure made of it.
            if let Some(e) = tx.failed.take() {
                if ok {
                    job.fail(e.into());
                }
                ok = false;
            }
            let emitted = std::mem::take(&mut tx.changes);
            // The savepoint stays for the next closure: released and set again after a
            // success, rolled back to (and kept) after a failure. One round trip each.
            let end = if ok { "RELEASE SAVEPOINT job; SAVEPOINT job" } else { "ROLLBACK TO SAVEPOINT job" };
            if let Err(e) = rt.block_on(conn.batch_execute(end)) {
                aborted = Some(crate::error::store_error(e));
                break;
            }
            if ok {
                changes.extend(emitted);
            }
        }
        let outcome = match aborted {
            Some(e) => Err(e),
            None => {
                // Every instance is told of the feeds changed, once they are committed.
                let notified = if changes.is_empty() {
                    Ok(())
                } else {
                    let payload =
                        super::commit_notices::payload(self.instance, changes.iter().map(|c| c.feed.as_str()));
                    rt.block_on(conn.execute("SELECT pg_notify($1, $2)", &[&super::commit_notices::CHANNEL, &payload]))
                        .map(drop)
                        .map_err(crate::error::store_error)
                };
                notified.and_then(|()| rt.block_on(conn.batch_execute("COMMIT")).map_err(crate::error::store_error))
            }
        };
        match &outcome {
            Ok(()) => {
                if let Some(observe) = &self.observer {
                    observe(n, started.elapsed());
                }
                if !changes.is_empty()
                    && let Some(sink) = self.sink.as_mut()
                    && catch_unwind(AssertUnwindSafe(|| sink(changes))).is_err()
                {
                    tracing::error!("the change sink panicked; the writer carries on");
                }
            }
            Err(e) => {
                tracing::error!(error = %e, jobs = n, "a write batch failed; all its callers get an error");
                // A failed COMMIT has ended the transaction already; otherwise end it here.
                // A connection in doubt is closed, not pooled again.
                if rt.block_on(conn.batch_execute("ROLLBACK")).is_err() {
                    discard(conn);
                }
            }
        }
        for job in jobs {
            job.answer(outcome.clone());
        }
    }
}
