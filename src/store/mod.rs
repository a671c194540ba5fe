//! Stores: each implements the core's [`crate::feed::ports`] and only keeps what the core
//! decides. [`sqlite`] is the durable one on one machine; [`postgres`] keeps feeds in
//! PostgreSQL, for several processes serving one database; [`memory`] is a small model kept in maps, the
//! reference the conformance suite holds every store to and the store of the core's own
//! tests. `sql` holds the reads both SQL stores make the same way, `batch` the write jobs
//! both writer threads run.

mod batch;
pub mod memory;
pub mod postgres;
mod sql;
pub mod sqlite;
