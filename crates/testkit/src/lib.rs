//! What the tests of smartfeeds share, kept out of the product and compiled once for every
//! test binary:
//!
//! - the in-memory store every store is held to ([`memory_store`]), and a private, throwaway
//!   PostgreSQL server ([`postgres_server`]) for the PostgreSQL store's tests, the
//!   end-to-end tests and the benchmarks;
//! - the end-to-end harness: a real XMPP server per test — Prosody or ejabberd, named or the
//!   one the environment variable `SMARTFEEDS_TEST_SERVER` (`prosody`, the default, or
//!   `ejabberd`) selects ([`server`]) — a minimal c2s client ([`client::Client`]), a raw
//!   XEP-0114 component ([`component::Component`]), the real binary
//!   ([`smartfeeds::Smartfeeds`]), a fixture shared by a test binary ([`fixture`]), the
//!   stanzas a pubsub client sends and reads ([`pubsub`], [`push`], [`adhoc`]), the HTTP face
//!   ([`http`]), several instances on one database ([`instances`]), a federation
//!   ([`federation`]), a WebSub callback ([`websub`]) and XML helpers ([`mod@xml`]).
//!
//! ```ignore
//! use testkit::{start_selected, xml};
//!
//! let host = start_selected();                    // free ports, temp dir, demo users
//! let mut feeds = host.component().await;         // raw component as feeds.localhost
//! let mut alice = host.login("alice").await;      // alice@localhost/test-…
//! let reply = alice.iq(xml(r#"<iq type="get" to="feeds.localhost">…</iq>"#)).await;
//! ```

pub mod adhoc;
pub mod client;
pub mod component;
pub mod connection;
pub mod dns;
pub mod federation;
pub mod fixture;
pub mod http;
pub mod instances;
pub mod libervia;
pub mod logs;
pub mod mam;
pub mod memory_store;
pub mod postgres_server;
pub mod process;
pub mod pubsub;
pub mod push;
pub mod server;
pub mod smartfeeds;
pub mod source_hub;
pub mod source_server;
pub mod standalone;
pub mod websub;
pub mod xml;

pub use client::Client;
pub use component::Component;
pub use connection::{Connection, REPLY_TIMEOUT};
pub use fixture::{Fixture, Shared};
pub use http::HttpFixture;
pub use server::{Ejabberd, EjabberdCluster, Kind, Prosody, Server, TestServer, start_selected};
pub use smartfeeds::Smartfeeds;
pub use xml::{error_condition, set_attr, stanza_type, to_xml, with_attr, xml};
