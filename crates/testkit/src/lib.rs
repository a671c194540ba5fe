//! What the tests of smartfeeds share, kept out of the product: the in-memory store every
//! store is held to ([`memory_store`]), and a private, throwaway PostgreSQL server
//! ([`postgres_server`]) for the PostgreSQL store's tests, the end-to-end tests and the
//! benchmarks.

pub mod memory_store;
pub mod postgres_server;
