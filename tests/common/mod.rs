//! Shared end-to-end test harness: a real XMPP server per test — Prosody or ejabberd, named
//! or the one the environment variable `SMARTFEEDS_TEST_SERVER` (`prosody`, the default, or
//! `ejabberd`) selects ([`server`]) — a minimal c2s client ([`client::Client`]), a raw
//! XEP-0114 component ([`component::Component`]), the real binary
//! ([`smartfeeds::Smartfeeds`]), a fixture shared by a test binary ([`fixture`]) and XML
//! helpers ([`xml`]). Test files use it with `mod common;`.
//!
//! ```ignore
//! let host = start_selected();                    // free ports, temp dir, demo users
//! let mut feeds = host.component().await;         // raw component as feeds.localhost
//! let mut alice = host.login("alice").await;      // alice@localhost/test-…
//! let reply = alice.iq(xml(r#"<iq type="get" to="feeds.localhost">…</iq>"#)).await;
//! ```
#![allow(dead_code, unused_imports)] // not every test binary uses every helper (or re-export)

pub mod client;
pub mod component;
pub mod connection;
pub mod federation;
pub mod fixture;
pub mod instances;
pub mod logs;
pub mod process;
pub mod pubsub;
pub mod push;
pub mod server;
pub mod smartfeeds;
pub mod websub;
pub mod xml;

pub use client::Client;
pub use component::Component;
pub use connection::{Connection, REPLY_TIMEOUT};
pub use fixture::{Fixture, Shared};
pub use server::{Ejabberd, EjabberdCluster, Kind, Prosody, Server, TestServer, start_selected};
pub use smartfeeds::Smartfeeds;
pub use xml::{error_condition, set_attr, stanza_type, to_xml, with_attr, xml};
