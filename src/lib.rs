//! # smartfeeds
//!
//! An XMPP external component (XEP-0114) that serves Smart Feeds as XEP-0060 pubsub nodes,
//! with XEP-0059 paging over T+O+C cursors and pushes carrying XEP-0131 sync headers.
//!
//! # Layout
//!
//! - [`feed`]: the core, transport-free. Node names become views, position specs become keys,
//!   pages are cut, publishes stamped, and every decision about who may do what is made here.
//! - [`store`]: the storage trait the core needs, and its SQLite implementation with group
//!   commit. The only module that speaks SQL.
//! - [`config`]: the TOML configuration, validated with messages a human can act on.

pub mod app;
pub mod component;
pub mod config;
pub mod feed;
pub mod limiter;
pub mod logging;
pub mod metrics;
pub mod store;
pub mod xmpp;
