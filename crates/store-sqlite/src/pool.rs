//! Read snapshots: the pool of read connections and the transaction each read runs in.

use super::schema;
use crate::codec::Db;
use crate::connection::SqliteConn;
use feed::FeedError;
use feed::ports::{ReadTx, StoreError};
use rusqlite::{Connection, OpenFlags};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use store_sql::batch::internal;
use store_sql::transaction::SqlTx;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Read connections to one database file, at most [`Pool::at_once`] in use at a time, each
/// on a blocking thread, all kept open once made.
///
/// Why a bound: WAL readers never wait for the writer or for one another, so a few per core
/// keep every core busy, and more only wait for a core. Without it a burst of reads (a
/// thousand event streams opened at once, each reading where it starts) opened as many
/// connections and blocking threads, and the process kept their memory.
pub(crate) struct Pool {
    path: PathBuf,
    /// A std mutex, not tokio's: it is only held to push or pop, never across an await or a
    /// query, and it is taken on blocking threads.
    idle: Mutex<Vec<Connection>>,
    turns: Arc<Semaphore>,
}

impl Pool {
    pub(crate) fn new(path: PathBuf) -> Pool {
        let at_once = Self::at_once();
        Pool { path, idle: Mutex::new(Vec::with_capacity(at_once)), turns: Arc::new(Semaphore::new(at_once)) }
    }

    /// Four reads per core.
    pub(crate) fn at_once() -> usize {
        4 * std::thread::available_parallelism().map_or(2, |n| n.get())
    }

    /// A turn to read: hold it while the read runs.
    pub(crate) async fn turn(&self) -> OwnedSemaphorePermit {
        self.turns.clone().acquire_owned().await.expect("the semaphore is never closed")
    }

    fn take(&self) -> Result<Connection, StoreError> {
        if let Some(conn) = self.idle.lock().unwrap_or_else(PoisonError::into_inner).pop() {
            return Ok(conn);
        }
        // No CREATE: the writer made the file; a reader must never create an empty one.
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(&self.path, flags).db()?;
        schema::configure_reader(&conn)?;
        Ok(conn)
    }

    fn give_back(&self, conn: Connection) {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner).push(conn);
    }

    /// Runs `f` on a pooled connection; blocking, so call it from a blocking thread.
    pub(crate) fn with<T>(&self, f: impl FnOnce(&Connection) -> (Result<T, FeedError>, bool)) -> Result<T, FeedError> {
        let conn = self.take()?;
        let (out, healthy) = f(&conn);
        if healthy {
            self.give_back(conn);
        }
        out
    }
}

/// Runs `f` in one deferred read transaction, so all its reads see one snapshot. Returns the
/// result and whether the connection can be reused (not after a panic).
pub(crate) fn snapshot<T>(
    conn: &Connection,
    f: impl FnOnce(&dyn ReadTx) -> Result<T, FeedError>,
) -> (Result<T, FeedError>, bool) {
    if let Err(e) = conn.execute_batch("BEGIN") {
        return (Err(crate::codec::store_error(e).into()), conn.is_autocommit());
    }
    let out = catch_unwind(AssertUnwindSafe(|| f(&SqlTx::new(SqliteConn(conn, None)))));
    // Nothing was written, so COMMIT and ROLLBACK are the same here: either ends the snapshot.
    let end = conn.execute_batch("COMMIT");
    if end.is_err() && !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    match out {
        Ok(result) => {
            let healthy = conn.is_autocommit();
            (result.and_then(|v| end.map(|()| v).map_err(|e| crate::codec::store_error(e).into())), healthy)
        }
        Err(_) => {
            tracing::error!("a store read closure panicked");
            (Err(internal()), false)
        }
    }
}
