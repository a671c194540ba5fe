//! # smartfeeds
//!
//! An XMPP external component (XEP-0114) that serves Smart Feeds as XEP-0060 pubsub nodes,
//! with XEP-0059 paging over T+O+C cursors and pushes carrying XEP-0131 sync headers, and
//! the same feeds over HTTP.
//!
//! # Layout
//!
//! A Cargo workspace whose crates are the architecture, so the compiler keeps the layers
//! apart. One core that decides, faces that only translate, stores that only keep;
//! dependencies point inward (faces → `feed` ← stores):
//!
//! - `crates/feed` (`smartfeeds-feed`): the core, with no store, face, HTTP, SQL or XMPP
//!   transport dependency. Node names become views, position specs become keys, pages are
//!   cut, items stamped, and every decision about who may do what is one `Policy::may`. It
//!   owns the traits stores implement (`ports`), the service every face calls (`service`,
//!   which also says who receives each change and admits requests at each sender's rate),
//!   and the Atom entry checks both faces make.
//! - `crates/store-sqlite`, `crates/store-postgres`: the stores, each the only user of its
//!   driver; `crates/store-sql` holds what both share: the one transaction type that
//!   implements the ports over a driver, the SQL, group commit and the writer thread.
//! - `crates/xmpp`: the XMPP face: the component link, dispatch, one file per request kind,
//!   the payloads, the error table, pushes (headlines, multicast).
//! - `crates/http`: the HTTP face (axum): pulls, long-polls, event streams, archives,
//!   publishes, the HTML page; and beside it the WebSub hub, which uses the face's modules.
//! - `crates/sources`: the producer, a face that only publishes (SPEC §13): each feed's
//!   source fetched (through `crates/outbound`'s checked client), read (Atom kept as
//!   written, RSS and JSON Feed written as Atom), completed from its archives, and handed to
//!   the core's `Service::import`, which commits each fetch's delta in one transaction.
//! - `crates/outbound`: the requests to URLs others give (WebSub callbacks, sources): where
//!   they may connect.
//! - `crates/metrics`: the Prometheus metrics every part reports to.
//! - `crates/load`: `smartfeeds-load`, the load tool; `crates/testkit`: what tests share (the
//!   memory store, a throwaway PostgreSQL, the server harness of the end-to-end tests).
//!
//! This package is the program: [`config`] (the TOML file, validated, turned once into the
//! core's `Policy`), [`app`] (wiring: the store, the service, the faces and the link, run
//! until SIGTERM, then [`shutdown`] in stages), [`logging`].

#![forbid(unsafe_code)]

pub mod app;
pub mod config;
pub mod logging;
pub mod shutdown;
