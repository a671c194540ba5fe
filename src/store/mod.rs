//! Stores: each implements the core's [`crate::feed::ports`] and only keeps what the core
//! decides. [`sqlite`] is the durable one; [`memory`] is a small model kept in maps, the
//! reference the conformance suite holds every store to and the store of the core's own
//! tests.

pub mod memory;
pub mod sqlite;
