//! The SQLite store: one writer thread with group commit, a small pool of read connections.
//!
//! The [`ReadTx`] and [`WriteTx`] its closures get, the group commit and the writer thread
//! are the SQL stores' shared ones (`store_sql`); what is SQLite's own is here:
//!
//! - `schema`: tables, indexes, migrations (`PRAGMA user_version`), connection settings.
//! - `connection`: a connection as the shared transaction drives it: statements from its
//!   cache, parameters and columns through rusqlite.
//! - `writer`: the writer thread: each batch in one `BEGIN IMMEDIATE` … `COMMIT` (one fsync),
//!   a savepoint per closure; and the reads of an in-memory database.
//! - `pool`: read connections and the snapshot transaction every read runs in.
//! - `feeds`, `hub`, `modified_counts`: the statements SQLite spells its own way.
//! - `codec`: items and outbox rows to columns and back; SQLite's failures as the core's.
//!
//! rusqlite is blocking, so it never runs on an async worker: writes go over a channel to
//! the writer thread and come back on a oneshot; reads run under `spawn_blocking`.

mod codec;
mod connection;
mod feeds;
mod hub;
mod modified_counts;
mod pool;
mod schema;
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
use std::sync::{Arc, Mutex, PoisonError};
use store_sql::batch::internal;
use store_sql::group_commit::GroupCommit;
use store_sql::writer_thread::WriterThread;
use tokio::sync::oneshot;
use writer::Job;

pub use schema::SCHEMA_VERSION;

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
    writer: Arc<WriterThread<Job>>,
    /// Read connections; `None` for an in-memory database, whose only connection is the
    /// writer's (reads then queue behind writes, on the writer thread).
    readers: Option<Pool>,
    /// The writer's counts, kept by the writer thread.
    stats: Arc<Mutex<StoreStats>>,
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
        let stats = Arc::new(Mutex::new(StoreStats::default()));
        let writer = Arc::new(writer::start(conn, GroupCommit::new(sink, observer), stats.clone())?);
        Ok(SqliteStore { inner: Arc::new(Inner { writer, readers, stats }) })
    }

    /// The writer's counters so far.
    pub fn stats(&self) -> StoreStats {
        *self.inner.stats.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stops taking writes, lets the writer finish (and commit) everything already queued,
    /// and waits for it. Later reads and writes on any clone fail with [`StoreError::Closed`].
    pub async fn close(&self) {
        self.inner.writer.close().await
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
    /// Runs `f` on a read connection: a pooled one on a blocking thread, or the writer's for
    /// an in-memory database. `f` returns its result and whether the connection is reusable.
    async fn on_connection<T, F>(self: Arc<Self>, f: F) -> Result<T, FeedError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> (Result<T, FeedError>, bool) + Send + 'static,
    {
        if self.writer.is_closed() {
            return Err(StoreError::Closed.into());
        }
        if let Some(pool) = &self.readers {
            let turn = pool.turn().await;
            let inner = self.clone();
            let run = move || {
                let _turn = turn;
                match &inner.readers {
                    Some(pool) => pool.with(f),
                    None => Err(StoreError::Closed.into()),
                }
            };
            return tokio::task::spawn_blocking(run).await.unwrap_or_else(|_| Err(internal()));
        }
        let (tx, rx) = oneshot::channel();
        self.writer
            .submit(Job::Read(Box::new(move |conn| {
                let _ = tx.send(f(conn).0);
            })))
            .await?;
        drop(self);
        rx.await.unwrap_or(Err(StoreError::Closed.into()))
    }
}

impl Store for SqliteStore {
    fn read<T, F>(&self, f: F) -> impl Future<Output = Result<T, FeedError>> + Send
    where
        T: Send + 'static,
        F: FnOnce(&dyn ReadTx) -> Result<T, FeedError> + Send + 'static,
    {
        self.inner.clone().on_connection(move |conn| snapshot(conn, f))
    }

    fn write<T, F>(&self, f: F) -> impl Future<Output = Result<T, FeedError>> + Send
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn WriteTx) -> Result<T, FeedError> + Send + 'static,
    {
        self.inner.writer.clone().write(f)
    }
}
