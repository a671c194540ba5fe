//! What the two SQL stores share. SQLite and PostgreSQL keep the same tables and indexes, so
//! what the core asks of them is the same SQL in both, written here once; and both run their
//! writes the same way: a writer thread with group commit, whose jobs each run once inside a
//! savepoint and are answered after the whole batch.
//!
//! - [`dialect`]: a statement's SQL as either database spells its parameters, and the
//!   parameters.
//! - [`reads`]: the columns each kind of row is read from, and the scope queries (keyset
//!   scan, count, position, ties), built per scope.
//! - [`transaction`]: the core's `ReadTx` and `WriteTx` for both stores, over a [`driver`].
//! - [`driver`]: what a store implements for its connection: running a statement, reading a
//!   row, and the few statements each database spells its own way.
//! - [`modified_counts`]: the per-bucket counts of modified seqs, and the walk to a position.
//! - [`batch`]: a write closure waiting in a batch, and its answer.
//! - [`batch_kept`]: what a batch's closures read and keep for the later ones.
//! - [`group_commit`]: a batch's steps, from the queue to the answers.
//! - [`writer_thread`]: the writer thread and the queue to it, as a store's handle holds them.
//! - [`migrations`]: which migrations a database still needs.
//!
//! Only the stores depend on this crate; it speaks no driver's API, only SQL text, the
//! traits its stores implement, and the core's types.

pub mod batch;
pub mod batch_kept;
pub mod dialect;
pub mod driver;
pub mod group_commit;
pub mod migrations;
pub mod modified_counts;
pub mod reads;
pub mod transaction;
pub mod writer_thread;
