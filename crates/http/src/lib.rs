//! The HTTP face (SPEC §9, §11): pull, long-poll, Server-Sent Events, archives and publish
//! over HTTP, on axum. Like the XMPP face it only translates: every request becomes a call
//! to [`Service`](feed::service::Service), every decision is the core's
//! `Policy::may` (a bearer token acts as its configured JID), and held requests are woken
//! by the same change stream that feeds XMPP pushes.
//!
//! Files:
//! - [`serving`]: how requests are taken and answered (connections, the plain GET path,
//!   held requests and their wake-ups, shared reads), behind one narrow interface: answer
//!   now, or hold for a view until a deadline and ask again;
//! - `router` (the routes, the gate every request passes, the layers and the rule they
//!   keep), `direct` (GETs of a feed URL answered without the router, as it would),
//!   `state` (the settings and state the handlers share);
//! - `client_addr`: a client's address behind trusted proxies; `bounds`: what a request's
//!   path and body must keep to;
//! - `actor` (who a request is), `auth` (tokens → actor), `asked` (what a handler takes from
//!   a request), `query` (the feed URL's parameters), `resolve` (a request's view, its URLs
//!   and common headers);
//! - `schemas`: the JSON bodies, typed, which the OpenAPI description is made from;
//!   `formats` (JSON, Atom, JSON-P, ETags), `json_feed` (JSON Feed 1.1);
//! - `pull` (pull and long-poll), `prepared` (a pull parsed and resolved, once per distinct
//!   request);
//! - `generations` (each feed's change generation), `answer_cache` (ETags from it, hot
//!   answers as bytes), `rendered` (an item's forms, made once per version);
//! - `cors` (cross-origin reads of open feeds), `sse` (event streams), `archive` (RFC 5005
//!   documents), `writes` (PUT, POST, DELETE), `html_page` (the page at `BASE/`, a feed
//!   reader; `reader` renders it), `errors` (the one error type), `openapi` (the OpenAPI
//!   description, generated from the handlers).
//!
//! [`hub`], the WebSub hub, lives beside the face: it uses the face's modules (errors,
//! queries, formats), never the reverse; the wiring mounts its routes through
//! [`router`]'s `more`.

pub mod actor;
pub mod answer_cache;
pub mod archive;
pub mod asked;
pub mod auth;
pub mod bounds;
pub mod client_addr;
pub mod cors;
pub mod direct;
pub mod errors;
pub mod formats;
pub use feed::generations;
pub mod html_page;
pub mod hub;
pub mod json_feed;
pub mod openapi;
pub mod prepared;
pub mod pull;
pub mod query;
pub mod reader;
pub mod rendered;
pub mod resolve;
pub mod router;
pub mod schemas;
pub mod serving;
pub mod sse;
pub mod state;
pub mod writes;

pub use router::{App, body_limit, router, serve};
pub use serving::raise_open_files;
pub use state::{HttpState, PullFlights, Settings, St};

/// An item for the formats' unit tests: `payload` under `id`, published and last changed at
/// one fixed time.
#[cfg(test)]
pub(crate) fn test_item(id: &str, payload: feed::Payload) -> feed::Item {
    let at = feed::Key { t: 1_700_000_000_000, seq: 1 };
    feed::Item { id: id.into(), created: at, modified: at, author: None, categories: vec![], atom_id: None, payload }
}
