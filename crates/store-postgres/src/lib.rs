//! The PostgreSQL store: several processes can serve one database (SPEC §12).
//!
//! The [`ReadTx`] and [`WriteTx`] its closures get, the group commit and the writer thread
//! are the SQL stores' shared ones (`store_sql`); what is PostgreSQL's own is here:
//!
//! - `schema`: tables, indexes and migrations (one transaction under an advisory lock).
//! - `connection`: a pooled connection inside a transaction, as the shared transaction
//!   drives it: statements from its cache, parameters and columns, the first failure kept.
//! - `writer`: one writer thread per process: each batch on a pooled connection, a savepoint
//!   per closure, the commit announced with the `COMMIT`.
//! - `feeds`, `hub`, `modified_counts`: the statements PostgreSQL spells its own way.
//! - `error`: SQLSTATEs as [`StoreError`] kinds.
//! - [`push_shards`]: pushes shared by several instances: the push log, shards, fencing.
//! - `payload`: a payload as columns, the same in every table.
//! - [`commit_notices`]: every commit announced to the other instances (`LISTEN`/`NOTIFY`).
//!
//! # Bridging synchronous closures
//!
//! The core's closures are synchronous, and a closure's reads depend on one another, so each
//! runs on a blocking thread (a reader under `spawn_blocking`, writes on the writer thread)
//! holding one pooled connection inside a transaction, and each statement is sent with
//! [`tokio::runtime::Handle::block_on`]. This uses `tokio-postgres` with `deadpool-postgres`
//! rather than the synchronous `postgres` crate: that crate drives each connection with a
//! private runtime of its own, so it could not share a pool (nor the connection tasks) with
//! the async code that migrates and connects, and would start a runtime per connection.
//!
//! Reads run in `REPEATABLE READ READ ONLY` transactions: one snapshot per closure, which never
//! fails with a serialization error. Writes run in `READ COMMITTED`: a publisher locks its
//! feed's row (`WriteTx::feed_for_update`) before it reads the counters it stamps from, so the
//! clock and tie order of a feed are assigned by one transaction at a time, in commit order,
//! whichever process commits.

pub mod commit_notices;
mod connection;
mod error;
mod feeds;
mod hub;
mod modified_counts;
mod payload;
pub mod push_shards;
mod schema;
mod writer;

#[cfg(test)]
mod tests;

use crate::connection::{Blocking, PgConn};
use crate::error::Db;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use feed::FeedError;
use feed::ports::{ChangeSink, CommitObserver, ReadTx, Store, StoreError, StoreResult, WriteTx};
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;
use store_sql::batch::{WriteJob, internal};
use store_sql::group_commit::GroupCommit;
use store_sql::transaction::SqlTx;
use store_sql::writer_thread::WriterThread;
use tokio::runtime::Handle;
use tokio_postgres::NoTls;
use tokio_postgres::config::SslMode;
use writer::discard;

pub use schema::SCHEMA_VERSION;

/// Connections per process: the writer's and the readers'. Reads beyond this wait for one.
const POOL_SIZE: usize = 16;
/// How long a read or the writer waits for a pooled connection before answering busy.
const POOL_WAIT: Duration = Duration::from_secs(10);
/// How long opening a connection may take, when the URL does not say.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Settings of every session. A feed's row lock is waited for at most `lock_timeout`: a
/// write that waits longer (another process holds the feed in a transaction that does not
/// end) fails as busy rather than stalling its whole batch. A session left idle inside a
/// transaction (a process stopped mid-batch) is ended by the server, releasing its locks.
const SESSION_OPTIONS: &str = "-c lock_timeout=10s -c idle_in_transaction_session_timeout=60s";

/// Parses and checks a `[store] url`: a `postgres://` or `postgresql://` URL that names a
/// host and asks for no TLS (this build connects without it: use a local socket, a
/// loopback address or a tunnel). The reason, for `check-config`, when it is not usable.
pub fn parse_url(url: &str) -> Result<tokio_postgres::Config, String> {
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err("it must start with postgres:// or postgresql://".into());
    }
    let mut config: tokio_postgres::Config = url.parse().map_err(|e| format!("{e}"))?;
    if config.get_hosts().is_empty() {
        return Err("it names no host".into());
    }
    if config.get_user().is_none() {
        return Err("it names no user (postgres://USER@HOST/DB)".into());
    }
    if config.get_ssl_mode() == SslMode::Require {
        return Err("sslmode=require cannot be met: this build connects without TLS".into());
    }
    config.ssl_mode(SslMode::Disable);
    if config.get_application_name().is_none() {
        config.application_name("smartfeeds");
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    // First, so that options given in the URL win.
    let options = format!("{SESSION_OPTIONS} {}", config.get_options().unwrap_or(""));
    config.options(options.trim_end());
    Ok(config)
}

/// A PostgreSQL-backed [`Store`]. Cloning is cheap and shares the pool and the writer.
///
/// Dropping the last clone stops the writer once it has finished every queued job; outside
/// a tokio runtime the drop waits for that. Call [`PostgresStore::close`] to wait from async
/// code. The change sink and the commit observer run on the writer thread between COMMIT and
/// the answers: they must be quick and must not wait on this store.
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    writer: Arc<WriterThread<Box<dyn WriteJob>>>,
    pool: Pool,
    /// How blocking threads wait on the runtime the pool's connection tasks run on.
    blocking: Blocking,
    /// This process's id in commit notices (never 0).
    instance: u64,
}

impl PostgresStore {
    /// Connects to the database at `url` (see [`parse_url`]) and migrates its schema.
    /// Committed changes are handed to `sink`, in commit order. Call it inside a tokio
    /// runtime with worker threads: connections run as tasks on it.
    pub async fn connect(url: &str, sink: Option<ChangeSink>) -> StoreResult<PostgresStore> {
        PostgresStore::connect_observed(url, sink, None).await
    }

    /// Like [`connect`](Self::connect), and `observer` is told of every commit.
    pub async fn connect_observed(
        url: &str,
        sink: Option<ChangeSink>,
        observer: Option<CommitObserver>,
    ) -> StoreResult<PostgresStore> {
        let config = parse_url(url).map_err(|why| StoreError::Backend(format!("store.url: {why}")))?;
        let manager = Manager::from_config(config, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(POOL_WAIT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        let mut client = pool.get().await.db()?;
        schema::migrate(&mut client).await?;
        drop(client);
        let blocking = Blocking::new(Handle::current());
        let instance = rand::random::<u64>() | 1;
        let commits = GroupCommit::new(sink, observer);
        let writer = Arc::new(writer::start(pool.clone(), blocking.clone(), commits, instance)?);
        Ok(PostgresStore { inner: Arc::new(Inner { writer, pool, blocking, instance }) })
    }

    /// The round trips to the server this store has made (a pipeline of statements counts
    /// once): what the tests and benchmarks count an operation's cost in.
    pub fn round_trips(&self) -> u64 {
        self.inner.blocking.round_trips()
    }

    /// This process's id in the commit notices its writer sends (see [`commit_notices`]).
    pub fn instance(&self) -> u64 {
        self.inner.instance
    }

    /// Stops taking writes, lets the writer finish (and commit) everything already queued,
    /// and waits for it; then closes the pool. Later reads and writes fail with
    /// [`StoreError::Closed`].
    pub async fn close(&self) {
        self.inner.writer.close().await;
        self.inner.pool.close();
    }
}

impl Inner {
    /// Runs `f` in a read-only snapshot, on a blocking thread.
    async fn read<T: Send + 'static>(
        self: Arc<Self>,
        f: impl FnOnce(&dyn ReadTx) -> Result<T, FeedError> + Send + 'static,
    ) -> Result<T, FeedError> {
        if self.writer.is_closed() {
            return Err(StoreError::Closed.into());
        }
        tokio::task::spawn_blocking(move || self.snapshot(f)).await.unwrap_or_else(|_| Err(internal()))
    }

    /// Runs `f` in one read-only snapshot on a pooled connection; blocking.
    fn snapshot<T>(&self, f: impl FnOnce(&dyn ReadTx) -> Result<T, FeedError>) -> Result<T, FeedError> {
        let conn = writer::begin(&self.pool, &self.blocking, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")?;
        let tx = SqlTx::new(PgConn::new(&conn, &self.blocking));
        let out = catch_unwind(AssertUnwindSafe(|| f(&tx)));
        let failed = tx.driver().take_failure();
        drop(tx);
        // Nothing was written: COMMIT only ends the snapshot.
        let end = self.blocking.block_on(conn.batch_execute("COMMIT"));
        let Ok(out) = out else {
            tracing::error!("a store read closure panicked");
            discard(conn);
            return Err(internal());
        };
        if end.is_err() {
            discard(conn);
        }
        let out = match (out, failed) {
            (Ok(_), Some(e)) => Err(e.into()),
            (out, _) => out,
        };
        out.and_then(|v| end.map(|()| v).map_err(|e| crate::error::store_error(e).into()))
    }
}

impl Store for PostgresStore {
    fn read<T, F>(&self, f: F) -> impl Future<Output = Result<T, FeedError>> + Send
    where
        T: Send + 'static,
        F: FnOnce(&dyn ReadTx) -> Result<T, FeedError> + Send + 'static,
    {
        self.inner.clone().read(f)
    }

    fn write<T, F>(&self, f: F) -> impl Future<Output = Result<T, FeedError>> + Send
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn WriteTx) -> Result<T, FeedError> + Send + 'static,
    {
        self.inner.writer.clone().write(f)
    }

    fn write_to<T, F>(&self, feed: &str, item: &str, f: F) -> impl Future<Output = Result<T, FeedError>> + Send
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn WriteTx) -> Result<T, FeedError> + Send + 'static,
    {
        self.inner.writer.clone().write_to(feed.to_string(), item.to_string(), f)
    }
}
