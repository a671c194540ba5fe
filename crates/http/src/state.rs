//! What every handler shares: the `[http]` settings and the face's state.

use crate::auth::Tokens;
use crate::{answer_cache, generations, rendered, serving, sse};
use axum::extract::State;
use feed::ports::Store;
use feed::service::Service;
use metrics::Metrics;
use std::sync::Arc;

/// The settings of `[http]` the handlers use.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The public prefix, without a trailing `/`.
    pub base: String,
    pub max_timeout: u64,
    pub cache_max_age: u64,
    pub archive_page: u64,
    pub archive_max_age: u64,
    /// The component's JID (`[component] jid`), for the page's XMPP subscription links.
    pub component_jid: String,
    /// Whose forwarding headers name the client's address (`[http] trusted_proxies`).
    pub trusted_proxies: crate::client_addr::TrustedProxies,
}

impl Settings {
    pub fn hub(&self) -> String {
        format!("{}/hub", self.base)
    }
}

/// The re-reads woken long-polls share (see [`single_flight`](crate::serving::single_flight)): by actor and request, the
/// page and the feed's generation read just before it.
pub type PullFlights = crate::serving::single_flight::SingleFlight<
    Arc<(String, feed::service::PullRequest)>,
    u64,
    Arc<(i64, feed::paging::Page)>,
    feed::FeedError,
>;

/// Everything a handler needs, shared behind one `Arc`.
pub struct HttpState<S: Store> {
    pub svc: Service<S>,
    pub settings: Settings,
    pub tokens: Tokens,
    /// Held requests: their views' wake-ups, their places (`[http] max_held`), the closing
    /// signal.
    pub holds: serving::Holds,
    /// Shared re-reads of woken long-polls: by actor and request, for a wake-up generation.
    pub flights: PullFlights,
    /// Pulls parsed and resolved, once per distinct request.
    pub pulls: crate::prepared::PreparedPulls,
    /// Shared reads of event streams at the same place, and their events' bytes.
    pub events: sse::EventFlights,
    /// Each feed's change generation, which validates answers without reading items.
    pub generations: Arc<generations::Generations>,
    /// Hot answers as bytes, valid for their feed's generation.
    pub answers: answer_cache::AnswerCache,
    /// Items' ready forms, once per item version.
    pub renders: rendered::Renders,
    pub metrics: Arc<Metrics>,
}

pub type St<S> = State<Arc<HttpState<S>>>;
