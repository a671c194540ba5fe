//! Read snapshots: the pool of read connections and the transaction each read runs in.

use super::schema;
use crate::codec::Db;
use crate::connection::SqliteConn;
use feed::FeedError;
use feed::ports::{ReadTx, StoreError};
use rusqlite::{Connection, OpenFlags};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use store_sql::batch::internal;
use store_sql::transaction::SqlTx;

/// Idle read connections kept open. More are opened when all are busy (WAL readers do not
/// block one another) and closed again when returned beyond this number.
const MAX_IDLE: usize = 4;

/// Read connections to one database file.
pub(crate) struct Pool {
    path: PathBuf,
    /// A std mutex, not tokio's: it is only held to push or pop, never across an await or a
    /// query, and it is taken on blocking threads.
    idle: Mutex<Vec<Connection>>,
}

impl Pool {
    pub(crate) fn new(path: PathBuf) -> Pool {
        Pool { path, idle: Mutex::new(Vec::new()) }
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
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
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
    let out = catch_unwind(AssertUnwindSafe(|| f(&SqlTx::new(SqliteConn(conn)))));
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
