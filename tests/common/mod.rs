//! Shared end-to-end test harness: a real Prosody per test ([`prosody::Prosody`]), a minimal
//! c2s client ([`client::Client`]), a raw XEP-0114 component ([`component::Component`]) and
//! XML helpers ([`xml`]). Test files use it with `mod common;`. The same API runs a real
//! ejabberd ([`ejabberd::Ejabberd`]); [`server::Server`] covers both, for tests run on each.
//!
//! ```ignore
//! let prosody = Prosody::start();                 // free ports, temp dir, demo users
//! let mut feeds = prosody.component().await;      // raw component as feeds.localhost
//! let mut alice = prosody.login("alice").await;   // alice@localhost/test-…
//! let reply = alice.iq(xml(r#"<iq type="get" to="feeds.localhost">…</iq>"#)).await;
//! ```
#![allow(dead_code, unused_imports)] // not every test binary uses every helper (or re-export)

pub mod client;
pub mod component;
pub mod connection;
pub mod ejabberd;
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
pub use prosody::Prosody;
pub use server::Server;
pub use xml::{error_condition, set_attr, stanza_type, to_xml, with_attr, xml};
