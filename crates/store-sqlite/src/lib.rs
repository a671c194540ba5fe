//! The SQLite store: one writer thread with group commit, a small pool of read connections.
//!
//! - `schema`: tables, indexes, migrations (`PRAGMA user_version`), connection settings.
//! - `writer`: the writer thread: batches of write closures, one savepoint each, one COMMIT
//!   (one fsync) per batch, then the change sink, then the answers.
//! - `pool`: read connections and the snapshot transaction every read runs in.
//! - `read` / `write`: the [`ReadTx`] and
//!   [`WriteTx`] methods as SQL.
//! - `modified_counts`: per-bucket counts that give rank and position in modified order.
//! - `codec`: items to rows and back.
//! - `hub`: WebSub subscriptions and the outbox.
//!
//! rusqlite is blocking, so it never runs on an async worker: writes go over a channel to
//! the writer thread and come back on a oneshot; reads run under `spawn_blocking`.

mod codec;
mod hub;
mod modified_counts;
mod pool;
mod read;
mod schema;
mod write;
mod writer;

#[cfg(test)]
mod tests;

use crate::codec::Db;
use feed::FeedError;
use feed::ports::{ChangeSink, CommitObserver, ReadTx, Store, StoreError, StoreResult, WriteTx};
use pool::{Pool, snapshot};
use rusqlite::Connection;
use std::future::Future;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{JoinHandle, ThreadId};
use tokio::sync::{mpsc, oneshot};
use writer::{Counters, Job, Pending, Writer};

pub use schema::SCHEMA_VERSION;

/// Jobs waiting for the writer: a few full batches.
const QUEUE: usize = 4 * writer::MAX_BATCH;

/// The writer's counters since open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Transactions committed: one fsync each.
    pub commits: u64,
    /// Write closures committed.
    pub writes: u64,
    /// Write closures whose caller got an error (their own, or their batch's).
    pub failed_writes: u64,
    /// The largest batch taken in one transaction.
    pub max_batch: u64,
}

/// A SQLite-backed [`Store`]. Cloning is cheap and shares the writer and the read pool.
///
/// Dropping the last clone stops the writer once it has finished every queued job; outside
/// a tokio runtime the drop waits for that, inside one it does not block (the thread
/// finishes on its own). Call [`SqliteStore::close`] to wait for it from async code.
///
/// The change sink and the commit observer run on the writer thread between COMMIT and the
/// answers: they must be quick and must not wait on this store (hand the changes to a
/// channel), or every writer waits with them.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// `None` once closed. A std mutex: held only to clone the sender, never across an
    /// await. The queue is bounded ([`QUEUE`]): when the writer falls behind, writers wait
    /// for room instead of piling up memory.
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    writer_id: ThreadId,
    /// Read connections; `None` for an in-memory database, whose only connection is the
    /// writer's (reads then queue behind writes, on the writer thread).
    readers: Option<Pool>,
    counters: Arc<Counters>,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`, migrating its schema. Committed
    /// changes are handed to `sink`, in commit order.
    pub fn open(path: &Path, sink: Option<ChangeSink>) -> StoreResult<SqliteStore> {
        SqliteStore::open_observed(path, sink, None)
    }

    /// Like [`open`](Self::open), and `observer` is told of every commit.
    pub fn open_observed(
        path: &Path,
        sink: Option<ChangeSink>,
        observer: Option<CommitObserver>,
    ) -> StoreResult<SqliteStore> {
        let conn = Connection::open(path).db()?;
        SqliteStore::start(conn, Some(Pool::new(path.to_path_buf())), sink, observer)
    }

    /// A private in-memory database, for tests and demos: nothing survives the process.
    pub fn open_in_memory(sink: Option<ChangeSink>) -> StoreResult<SqliteStore> {
        SqliteStore::start(Connection::open_in_memory().db()?, None, sink, None)
    }

    fn start(
        mut conn: Connection,
        readers: Option<Pool>,
        sink: Option<ChangeSink>,
        observer: Option<CommitObserver>,
    ) -> StoreResult<SqliteStore> {
        schema::configure_writer(&conn)?;
        schema::migrate(&mut conn)?;
        let (tx, rx) = mpsc::channel(QUEUE);
        let counters = Arc::new(Counters::default());
        let writer = Writer { conn, jobs: rx, sink, observer, counters: counters.clone() };
        let handle = std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || writer.run())
            .map_err(|e| StoreError::Backend(format!("cannot start the writer thread: {e}")))?;
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                jobs: Mutex::new(Some(tx)),
                writer_id: handle.thread().id(),
                writer: Mutex::new(Some(handle)),
                readers,
                counters,
            }),
        })
    }

    /// The writer's counters so far.
    pub fn stats(&self) -> StoreStats {
        let c = &self.inner.counters;
        StoreStats {
            commits: c.commits.load(Ordering::Relaxed),
            writes: c.writes.load(Ordering::Relaxed),
            failed_writes: c.failed_writes.load(Ordering::Relaxed),
            max_batch: c.max_batch.load(Ordering::Relaxed),
        }
    }

    /// Stops taking writes, lets the writer finish (and commit) everything already queued,
    /// and waits for it. Later reads and writes on any clone fail with [`StoreError::Closed`].
    pub async fn close(&self) {
        if let Some(handle) = self.inner.shut_down() {
            if handle.thread().id() == std::thread::current().id() {
                return;
            }
            if tokio::task::spawn_blocking(move || handle.join()).await.is_err() {
                tracing::error!("could not wait for the store's writer thread");
            }
        }
    }

    /// `PRAGMA integrity_check`: `"ok"`, or SQLite's list of problems, one per line.
    pub async fn integrity_check(&self) -> StoreResult<String> {
        let out = self
            .inner
            .clone()
            .on_connection(|conn| {
                let check = || -> StoreResult<String> {
                    let mut st = conn.prepare("PRAGMA integrity_check").db()?;
                    let lines =
                        st.query_map([], |r| r.get::<_, String>(0)).db()?.collect::<Result<Vec<_>, _>>().db()?;
                    Ok(lines.join("\n"))
                };
                (check().map_err(FeedError::from), true)
            })
            .await;
        out.map_err(|e| match e {
            FeedError::Store(e) => e,
            other => StoreError::Backend(other.to_string()),
        })
    }
}

impl Inner {
    /// Queues a job, waiting for room.
    async fn submit(&self, job: Job) -> Result<(), StoreError> {
        let sender = self.jobs.lock().unwrap_or_else(PoisonError::into_inner).clone().ok_or(StoreError::Closed)?;
        sender.send(job).await.map_err(|_| StoreError::Closed)
    }

    /// Queues a job now, in call order (tests line jobs up behind a held writer this way).
    #[cfg(test)]
    fn send(&self, job: Job) -> Result<(), StoreError> {
        let jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        let sender = jobs.as_ref().ok_or(StoreError::Closed)?;
        sender.try_send(job).map_err(|_| StoreError::Closed)
    }

    fn is_closed(&self) -> bool {
        self.jobs.lock().unwrap_or_else(PoisonError::into_inner).is_none()
    }

    /// Drops the job sender (the writer drains the queue, then exits) and hands back the
    /// writer's handle, once.
    fn shut_down(&self) -> Option<JoinHandle<()>> {
        self.jobs.lock().unwrap_or_else(PoisonError::into_inner).take();
        self.writer.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    /// Runs `f` on a read connection: a pooled one on a blocking thread, or the writer's for
    /// an in-memory database. `f` returns its result and whether the connection is reusable.
    async fn on_connection<T, F>(self: Arc<Self>, f: F) -> Result<T, FeedError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> (Result<T, FeedError>, bool) + Send + 'static,
    {
        if self.is_closed() {
            return Err(StoreError::Closed.into());
        }
        if self.readers.is_some() {
            let inner = self.clone();
            let run = move || match &inner.readers {
                Some(pool) => pool.with(f),
                None => Err(StoreError::Closed.into()),
            };
            return tokio::task::spawn_blocking(run).await.unwrap_or_else(|_| Err(writer::internal()));
        }
        let (tx, rx) = oneshot::channel();
        self.submit(Job::Read(Box::new(move |conn| {
            let _ = tx.send(f(conn).0);
        })))
        .await?;
        drop(self);
        rx.await.unwrap_or(Err(StoreError::Closed.into()))
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let Some(handle) = self.shut_down() else { return };
        // Waiting inside a runtime would block one of its workers for up to a batch; there
        // the thread is left to finish the queue alone. A closure that held the last clone
        // would be dropped on the writer thread itself, which must not wait for itself.
        if tokio::runtime::Handle::try_current().is_err() && std::thread::current().id() != self.writer_id {
            let _ = handle.join();
        }
    }
}

impl Store for SqliteStore {
    fn read<T, F>(&self, f: F) -> impl Future<Output = Result<T, FeedError>> + Send
    where
        T: Send + 'static,
        F: FnOnce(&dyn ReadTx) -> Result<T, FeedError> + Send + 'static,
    {
        let inner = self.inner.clone();
        inner.on_connection(move |conn| snapshot(conn, f))
    }

    fn write<T, F>(&self, f: F) -> impl Future<Output = Result<T, FeedError>> + Send
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn WriteTx) -> Result<T, FeedError> + Send + 'static,
    {
        let inner = self.inner.clone();
        // The job is queued when the future is first polled. Once queued it runs even if the
        // future is dropped: a write cannot be recalled, only its answer ignored.
        async move {
            let (tx, rx) = oneshot::channel();
            inner.submit(Job::Write(Box::new(Pending::new(f, tx)))).await?;
            // A queued write does not keep the store open: the last clone's drop may shut the
            // writer down, which still finishes this job first.
            drop(inner);
            rx.await.unwrap_or(Err(StoreError::Closed.into()))
        }
    }
}
