//! The HTTP face (SPEC §9, §11): pull, long-poll, Server-Sent Events, archives and publish
//! over HTTP, on axum. Like the XMPP face it only translates: every request becomes a call
//! to [`Service`](feed::service::Service), every decision is the core's
//! `Policy::may` (a bearer token acts as its configured JID), and held requests are woken
//! by the same change stream that feeds XMPP pushes.
//!
//! Files:
//! - `connections`: how connections are taken (their cap and timeouts, the head's bounds);
//!   `client_addr`: a client's address behind trusted proxies; `bounds`: what a request's
//!   path and body must keep to;
//! - `actor` (who a request is), `auth` (tokens → actor), `asked` (what a handler takes from
//!   a request), `query` (the feed URL's parameters), `resolve` (a request's view, its URLs
//!   and common headers);
//! - `schemas`: the JSON bodies, typed, which the OpenAPI description is made from;
//!   `formats` (JSON, Atom, JSON-P, ETags), `json_feed` (JSON Feed 1.1);
//! - `pull` (pull and long-poll), `wakeups` (the wake-up registry of held requests),
//!   `held_places` (the bound on held requests), `later` (answers given after the layers are
//!   done: held long-polls), `single_flight` (one read shared by many waiters);
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
pub mod connections;
pub mod cors;
pub mod errors;
pub mod formats;
pub mod held_places;
pub mod schemas;
pub use feed::generations;
pub mod html_page;
pub mod hub;
pub mod json_feed;
pub mod later;
pub mod openapi;
pub mod pull;
pub mod query;
pub mod reader;
pub mod rendered;
pub mod resolve;
pub mod single_flight;
pub mod sse;
pub mod wakeups;
pub mod writes;

use auth::{Actor, Tokens};
use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use errors::ApiError;
use feed::admission::Admission;
use feed::ports::Store;
use feed::service::Service;
use metrics::Metrics;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    pub trusted_proxies: client_addr::TrustedProxies,
}

impl Settings {
    pub fn hub(&self) -> String {
        format!("{}/hub", self.base)
    }
}

/// The re-reads woken long-polls share (see [`single_flight`]): by actor and request, the
/// page and the feed's generation read just before it.
pub type PullFlights = single_flight::SingleFlight<
    (String, feed::service::PullRequest),
    u64,
    Arc<(i64, feed::paging::Page)>,
    feed::FeedError,
>;

/// Everything a handler needs, shared behind one `Arc`.
pub struct HttpState<S: Store> {
    pub svc: Service<S>,
    pub settings: Settings,
    pub tokens: Tokens,
    pub wakeups: Arc<wakeups::Wakeups>,
    /// The places for held requests (`[http] max_held`).
    pub held: Arc<held_places::HeldPlaces>,
    /// Shared re-reads of woken long-polls: by actor and request, for a wake-up generation.
    pub flights: PullFlights,
    /// Shared reads of event streams at the same place, and their events' bytes.
    pub events: sse::EventFlights,
    /// Each feed's change generation, which validates answers without reading items.
    pub generations: Arc<generations::Generations>,
    /// Hot answers as bytes, valid for their feed's generation.
    pub answers: answer_cache::AnswerCache,
    /// Items' ready forms, once per item version.
    pub renders: rendered::Renders,
    pub metrics: Arc<Metrics>,
    /// Set at shutdown: held requests answer at once and streams end.
    pub closing: tokio::sync::watch::Receiver<bool>,
}

impl<S: Store> HttpState<S> {
    /// Whether shutdown has begun. Held requests check it when woken: [`serve`] wakes them
    /// all when it begins.
    pub fn is_closing(&self) -> bool {
        *self.closing.borrow()
    }
}

pub type St<S> = State<Arc<HttpState<S>>>;

/// The HTTP face as one service: its router, every route behind the gate, inside CORS, the
/// timeout and tracing.
pub type App = tower_http::trace::Trace<
    tower_http::timeout::Timeout<tower_http::cors::Cors<axum::Router>>,
    tower_http::classify::SharedClassifier<tower_http::classify::ServerErrorsAsFailures>,
>;

/// The HTTP face. `more` is routes served beside it (the WebSub hub's), behind the same
/// gate, CORS, timeout and tracing; this face does not know what they are.
pub fn router<S: Store>(state: Arc<HttpState<S>>, more: axum::Router) -> App {
    // Longer than the longest long-poll, so only a stuck request is cut off.
    let timeout = Duration::from_secs(state.settings.max_timeout + 30);
    let routes = axum::Router::new()
        .route("/", get(html_page::index::<S>))
        .route("/health", get(health::<S>))
        .route("/openapi.json", get(|State(st): St<S>| openapi::openapi_json(st.settings.base.clone())))
        .route("/feeds/", get(pull::list::<S>))
        .route("/feeds", get(pull::list::<S>))
        .route("/feeds/{feed}/", get(pull::feed::<S>).post(writes::post::<S>))
        .route("/feeds/{feed}", get(pull::feed::<S>).post(writes::post::<S>))
        .route("/feeds/{feed}/items/{id}", get(pull::item::<S>).put(writes::put::<S>).delete(writes::delete::<S>))
        .route("/feeds/{feed}/archive/", get(archive::recent::<S>))
        .route("/feeds/{feed}/archive", get(archive::recent::<S>))
        .route("/feeds/{feed}/archive/{k}", get(archive::numbered::<S>))
        .fallback(|| async { ApiError::not_found("no such resource") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(axum::http::StatusCode::METHOD_NOT_ALLOWED, "not-allowed", "method not allowed here")
        })
        .with_state(state.clone())
        .merge(more)
        .layer(axum::middleware::from_fn_with_state(state.clone(), gate::<S>));
    // Around the whole router, not each route (as `Router::layer` puts them): a connection
    // holds them once, where each request cloned them with its route and boxed their future.
    tower::ServiceBuilder::new()
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            timeout,
        ))
        .layer(cors::layer(state.svc.policy().clone()))
        .service(routes)
}

/// The largest body any route takes: an Atom entry at the payload limit, with a little room
/// for an XML declaration around it.
pub fn body_limit<S: Store>(svc: &Service<S>) -> usize {
    svc.policy().limits.max_payload_bytes + 1024
}

/// Every request: its path and announced body within [`bounds`] (400, 413), who it is (401
/// for an unknown token), its rate (per token JID, else per client address, which trusted
/// proxies may name: [`client_addr`]; admins are not limited), and its metrics.
async fn gate<S: Store>(State(st): St<S>, mut req: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = req.extensions().get::<MatchedPath>().map_or("unmatched", |m| m.as_str()).to_string();
    let res = async {
        bounds::check_path(req.uri().path())?;
        bounds::check_announced(req.headers(), body_limit(&st.svc))?;
        let actor = st.tokens.actor(req.headers())?;
        if req.method() != Method::OPTIONS {
            let key = match &actor {
                Actor::Jid(j) => j.clone(),
                Actor::Anonymous => match req.extensions().get::<ConnectInfo<SocketAddr>>() {
                    Some(peer) => st.settings.trusted_proxies.client(peer.0.ip(), req.headers()).to_string(),
                    None => "unknown".to_string(),
                },
            };
            match st.svc.admit(actor.as_str(), &key) {
                Admission::Unlimited => {}
                Admission::After(d) if d.is_zero() => {}
                Admission::After(d) => tokio::time::sleep(d).await,
                Admission::Refuse => return Err(ApiError::too_many(1)),
            }
        }
        req.extensions_mut().insert(actor);
        Ok::<_, ApiError>(next.run(req).await)
    }
    .await
    .unwrap_or_else(IntoResponse::into_response);
    let count = move |metrics: &Metrics, res: &Response| {
        metrics.http_request(route, res.status().as_u16(), started.elapsed());
    };
    match res.extensions().get::<later::Later>() {
        // A held request counts when it is answered.
        Some(later) => {
            let metrics = st.metrics.clone();
            later.then(move |res| count(&metrics, res));
        }
        None => count(&st.metrics, &res),
    }
    res
}

/// `GET /health`: 200 when the store answers.
#[utoipa::path(get, path = "/health", operation_id = "health", tag = "service", summary = "Whether the service and its store answer",
    responses((status = 200, description = "Ready", body = schemas::Health),
        (status = 503, description = "The store does not answer", body = schemas::ErrorJson)))]
async fn health<S: Store>(State(st): St<S>) -> Response {
    match st.svc.ready().await {
        Ok(()) => axum::Json(schemas::Health { status: "ok".into() }).into_response(),
        Err(e) => ApiError::from_feed(e, &Actor::Anonymous).into_response(),
    }
}

/// Serves the HTTP face on `listener` within `limits` until `stop` resolves. Held requests
/// end with it.
pub async fn serve<S: Store>(
    listener: tokio::net::TcpListener,
    state: Arc<HttpState<S>>,
    more: axum::Router,
    limits: connections::ConnectionLimits,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let metrics = state.metrics.clone();
    // Held requests answer (long-polls) or end (event streams) when shutdown begins: woken
    // here, they see it (a wait on the signal each would cost every held request its room).
    let (mut closing, wakeups) = (state.closing.clone(), state.wakeups.clone());
    tokio::spawn(async move {
        let _ = closing.wait_for(|c| *c).await;
        wakeups.wake_feed(None);
    });
    connections::serve(listener, router(state, more), limits, metrics, stop).await
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

/// An item for the formats' unit tests: `payload` under `id`, published and last changed at
/// one fixed time.
#[cfg(test)]
pub(crate) fn test_item(id: &str, payload: feed::Payload) -> feed::Item {
    let at = feed::Key { t: 1_700_000_000_000, seq: 1 };
    feed::Item { id: id.into(), created: at, modified: at, author: None, categories: vec![], atom_id: None, payload }
}
