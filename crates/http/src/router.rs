//! The face as one service: its routes, the gate every request passes, the layers around
//! them, and how it is served.
//!
//! Where layers go, and the rule they keep: layers are added in [`router`]. One that reads
//! or changes answers (logs, metrics, compression) is made with
//! [`serving::on_answer`](crate::serving::on_answer) or calls
//! [`serving::observe`](crate::serving::observe), and so sees a held long-poll's real answer
//! (200, 304 or 503) when it is given; any other layer sees a held request's stand-in, a 202
//! without a body (see [`crate::serving`]'s hold module).

use crate::auth::Actor;
use crate::errors::ApiError;
use crate::state::{HttpState, Settings, St};
use crate::{archive, bounds, cors, html_page, openapi, pull, schemas, serving, writes};
use axum::body::Body;
use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use feed::admission::Admission;
use feed::ports::Store;
use feed::service::Service;
use metrics::Metrics;
use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The HTTP face as one service: its router, every route behind the gate, inside CORS, the
/// timeout and the log of answers.
pub type App =
    serving::Observed<tower_http::timeout::Timeout<tower_http::cors::Cors<axum::Router>>, fn(&Request<Body>) -> Logged>;

/// The HTTP face. `more` is routes served beside it (the WebSub hub's), behind the same
/// gate, CORS, timeout and log; this face does not know what they are.
pub fn router<S: Store>(state: Arc<HttpState<S>>, more: axum::Router) -> App {
    let timeout = timeout(&state.settings);
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
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "not-allowed", "method not allowed here")
        })
        .with_state(state.clone())
        .merge(more)
        .layer(axum::middleware::from_fn_with_state(state.clone(), gate::<S>));
    // Around the whole router, not each route (as `Router::layer` puts them): a connection
    // holds them once, where each request cloned them with its route and boxed their future.
    tower::ServiceBuilder::new()
        .layer(serving::on_answer(log as fn(&Request<Body>) -> Logged))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(StatusCode::SERVICE_UNAVAILABLE, timeout))
        .layer(cors::layer(state.svc.policy().clone()))
        .service(routes)
}

/// The timeout layer's bound: longer than the longest long-poll, so only a stuck request
/// is cut off.
pub(crate) fn timeout(settings: &Settings) -> Duration {
    Duration::from_secs(settings.max_timeout + 30)
}

/// A request as the log of answers names it.
pub struct Logged {
    method: Method,
    uri: Uri,
    /// When the request was taken.
    pub(crate) started: Instant,
}

/// The log of answers, at `debug` (`warn` for a server error): method, path, the real
/// status, and the time to the answer.
pub(crate) fn log(req: &Request<Body>) -> Logged {
    Logged { method: req.method().clone(), uri: req.uri().clone(), started: Instant::now() }
}

impl serving::Observe for Logged {
    fn answered(self, answer: &mut Response) {
        let Logged { method, uri, started } = self;
        let (status, took) = (answer.status().as_u16(), started.elapsed());
        if answer.status().is_server_error() {
            tracing::warn!(%method, %uri, status, ?took, "HTTP request failed");
        } else {
            tracing::debug!(%method, %uri, status, ?took, "HTTP request answered");
        }
    }
}

/// The largest body any route takes: an Atom entry at the payload limit, with a little room
/// for an XML declaration around it.
pub fn body_limit<S: Store>(svc: &Service<S>) -> usize {
    svc.policy().limits.max_payload_bytes + 1024
}

/// Every request: its path and announced body within [`bounds`] (400, 413), who it is (401
/// for an unknown token), its rate (per token JID, else per client address, which trusted
/// proxies may name: [`crate::client_addr`]; admins are not limited), and its metrics (of
/// its real answer, held or not).
async fn gate<S: Store>(State(st): St<S>, mut req: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = req.extensions().get::<MatchedPath>().map_or("unmatched", |m| m.as_str()).to_string();
    let peer = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    let mut res = match pass(&st, req.method(), req.uri(), req.headers(), peer).await {
        Ok(actor) => {
            req.extensions_mut().insert(actor);
            next.run(req).await
        }
        Err(refused) => refused.into_response(),
    };
    count(&st, Cow::Owned(route), started, &mut res);
    res
}

/// What the gate checks of a request (see [`gate`]) from `peer`: who asks, once the
/// request may go on.
pub(crate) async fn pass<S: Store>(
    st: &HttpState<S>,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    peer: Option<SocketAddr>,
) -> Result<Actor, ApiError> {
    bounds::check_path(uri.path())?;
    bounds::check_announced(headers, body_limit(&st.svc))?;
    let actor = st.tokens.actor(headers)?;
    if method != Method::OPTIONS {
        let key = match &actor {
            Actor::Jid(j) => j.clone(),
            Actor::Anonymous => match peer {
                Some(peer) => st.settings.trusted_proxies.client(peer.ip(), headers).to_string(),
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
    Ok(actor)
}

/// Counts a request under `route` when its real answer is given.
pub(crate) fn count<S: Store>(st: &HttpState<S>, route: Cow<'static, str>, started: Instant, res: &mut Response) {
    let metrics: Arc<Metrics> = st.metrics.clone();
    serving::observe(res, move |res: &mut Response| {
        metrics.http_request(route, res.status().as_u16(), started.elapsed());
    });
}

/// `GET /health`: 200 when the store answers.
#[utoipa::path(get, path = "/health", operation_id = "health", tag = "service", summary = "Whether the service and its store answer",
    responses((status = 200, description = "Ready", body = schemas::Health),
        (status = 503, description = "The store does not answer", body = schemas::ErrorJson)))]
pub(crate) async fn health<S: Store>(State(st): St<S>) -> Response {
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
    limits: serving::ConnectionLimits,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let metrics = state.metrics.clone();
    // Held requests answer (long-polls) or end (event streams) when shutdown begins: woken
    // here, they see it (a wait on the signal each would cost every held request its room).
    let holds = state.holds.clone();
    tokio::spawn(async move { holds.wake_all_when_closing().await });
    let direct = Arc::new(crate::direct::FeedGets::new(state.clone()));
    serving::serve(listener, router(state, more), direct, limits, metrics, stop).await
}
