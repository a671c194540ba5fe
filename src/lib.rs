//! # smartfeeds
//!
//! An XMPP external component (XEP-0114) that serves Smart Feeds as XEP-0060 pubsub nodes,
//! with XEP-0059 paging over T+O+C cursors and pushes carrying XEP-0131 sync headers.
//!
//! # Layout
//!
//! One core that decides, faces that only translate, stores that only keep. Data flows one
//! way: bytes in, a face parses one typed request, the core decides, the face writes the
//! outcome; committed changes flow from the store through the core's change stream to each
//! face's pusher. Dependencies point inward: faces and stores use [`feed`], never the reverse.
//!
//! - [`feed`]: the core, transport-free and storage-free. Node names become views, position
//!   specs become keys, pages are cut, items stamped (`feed::intents`), and every decision
//!   about who may do what is one call to `Policy::may`. It owns the traits it needs from
//!   stores (`feed::ports`) and the service every face calls (`feed::service`), which also
//!   says who receives each change.
//! - [`store`]: implementations of `feed::ports`: SQLite with group commit, PostgreSQL for
//!   several processes on one database (the only modules that speak SQL), and an in-memory
//!   model that the conformance suite compares them to.
//! - [`xmpp`]: the XMPP face: one file per request kind (`xmpp::iq`: parse, apply, reply),
//!   the XML payloads, the one error table, and the pusher that formats changes as headlines.
//! - [`http`]: the HTTP face (axum): pull, long-poll, event streams, archives and publish
//!   over HTTP, bearer tokens mapped to JIDs for the same `Policy::may`, held requests woken
//!   by the change stream, and the small HTML page.
//! - [`atom`]: Atom entries as both faces take them: one `<entry/>` checked, the fields
//!   the core filters on pulled out, tombstones.
//! - [`hub`]: the WebSub hub: verified subscriptions to views, and every change POSTed to
//!   their callbacks as signed Atom documents, one at a time in commit order, from an outbox
//!   written with the change itself, so deliveries survive crashes.
//! - [`component`]: the XEP-0114 link: login, the XML stream with its limits, keepalive,
//!   reconnects, and a shutdown that loses no request.
//! - [`app`]: wiring: store, service, faces and link, run until SIGTERM, then drained.
//! - [`config`]: the TOML configuration, validated with messages a human can act on, and
//!   turned once into the core's `Policy`.
//! - [`limiter`]: per-sender request rates, so a flood slows only its sender.
//! - [`metrics`]: Prometheus counters and gauges, served (on axum) on a loopback address.
//! - [`logging`]: `tracing` set up for humans or as JSON lines.

#![forbid(unsafe_code)]

pub mod app;
pub mod atom;
pub mod component;
pub mod config;
pub mod feed;
pub mod http;
pub mod hub;
pub mod limiter;
pub mod logging;
pub mod metrics;
pub mod store;
pub mod xmpp;
