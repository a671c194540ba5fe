//! Shared end-to-end test harness: a real XMPP server per test — Prosody
//! ([`prosody::Prosody`]) or ejabberd ([`ejabberd::Ejabberd`]), the one the environment
//! variable `SMARTFEEDS_TEST_SERVER` (`prosody`, the default, or `ejabberd`) selects through
//! [`host::Host`] — a minimal c2s client ([`client::Client`]), a raw XEP-0114 component
//! ([`component::Component`]), the real binary ([`smartfeeds::Smartfeeds`]) and XML helpers
//! ([`xml`]). Test files use it with `mod common;`. [`server::Server`] is the trait over all
//! three server types, for helpers and for tests that run a scenario on each by name.
//!
//! ```ignore
//! let host = Host::start();                       // free ports, temp dir, demo users
//! let mut feeds = host.component().await;         // raw component as feeds.localhost
//! let mut alice = host.login("alice").await;      // alice@localhost/test-…
//! let reply = alice.iq(xml(r#"<iq type="get" to="feeds.localhost">…</iq>"#)).await;
//! ```
#![allow(dead_code, unused_imports)] // not every test binary uses every helper (or re-export)

pub mod client;
pub mod component;
pub mod connection;
pub mod ejabberd;
pub mod federation;
pub mod host;
pub mod prosody;
pub mod pubsub;
pub mod push;
pub mod server;
pub mod smartfeeds;
pub mod xml;

pub use client::Client;
pub use component::Component;
pub use connection::{Connection, REPLY_TIMEOUT};
pub use ejabberd::Ejabberd;
pub use host::{Host, HostKind};
pub use prosody::Prosody;
pub use server::Server;
pub use xml::{error_condition, set_attr, stanza_type, to_xml, with_attr, xml};
