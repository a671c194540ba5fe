//! What the two SQL stores share. SQLite and PostgreSQL keep the same tables and indexes, so
//! the reads they make are built here once ([`reads`], with each dialect's parameter style),
//! and both run their writes the same way: a writer thread with group commit, whose jobs
//! ([`batch`]) each run once inside a savepoint and are answered after the whole batch.
//!
//! Only the stores depend on this crate; it speaks no driver's API, only SQL text and the
//! core's types.

pub mod batch;
pub mod reads;
