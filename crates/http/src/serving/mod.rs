//! The serving layer: how the HTTP face's requests are taken and answered, apart from what
//! they ask. The face sees one narrow interface: a request is answered now (a response),
//! or held for a view until a deadline and asked again after each change of the view
//! ([`Holds::hold`], which gives a stand-in response carrying the [`Hold`]). Everything
//! else is this module's:
//!
//! - `connections`: the accept loop, the bound on connections and the header timeout, and
//!   hyper for requests that are not plain GETs; `plain_gets`: plain GETs read and answered
//!   without hyper (most requests, held ones included); `rewind`: the bytes read before a
//!   connection went to hyper;
//! - `hold`: held requests, waited for here, asked again, answered and observed (the rule
//!   for layers that read answers: [`on_answer`]);
//! - `wakeups`: the registry of watched views, woken by the change stream; `places`: the
//!   bound on held requests (`[http] max_held`); `single_flight`: one read shared by the
//!   requests woken by the same change.

use axum::body::Body;
use axum::http::Request;
use axum::response::Response;
use futures::future::BoxFuture;

mod connections;
mod hold;
mod places;
mod plain_gets;
mod rewind;
pub mod single_flight;
pub mod wakeups;

pub use connections::{ConnectionLimits, MAX_HEAD, MAX_HEADERS, serve};
pub use hold::{
    AskAgain, Full, Hold, Holds, Observe, Observed, Observing, OnAnswer, observe, on_answer, settle, within,
};
pub use places::{HeldPlaces, Place, default_max_held};
pub use wakeups::{Prefetch, Wakeups, Watch};

/// Plain GETs a face answers itself, without its router and layers but doing all they
/// would (the same checks, headers and observers): the most frequent requests (pulls, and
/// long-polls asked again after each answer) skip the work of routing and layering. A
/// request the face does not take this way is served by the layered face.
pub trait Direct: Send + Sync + 'static {
    /// Whether the face answers `request` itself.
    fn takes(&self, request: &Request<Body>) -> bool;
    /// The answer to a request it takes.
    fn get(&self, request: Request<Body>) -> BoxFuture<'static, Response>;
}

/// Raises the soft open-file limit to the hard one, so thousands of clients can connect
/// (held long-polls and streams are one socket each). Returns the limit now in force.
pub fn raise_open_files() -> Option<u64> {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => Some(n),
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise the open-file limit");
            None
        }
    }
}
