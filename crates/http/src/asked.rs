//! What a handler takes from a request about a feed, read once: who asks (the gate put the
//! actor in), the path's parameters, the query string and the headers. A path that does
//! not decode is a 400 naming it, before the handler runs.

use super::actor::Actor;
use super::errors::ApiError;
use super::resolve::path_error;
use axum::extract::{FromRequestParts, Path};
use axum::http::HeaderMap;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

/// A request about a feed: `P` is the path's parameters (the feed, or the feed and an item).
pub struct Asked<P> {
    pub actor: Actor,
    pub path: P,
    /// The raw query string, parsed by the handler against the parameters it takes.
    pub query: Option<String>,
    pub headers: HeaderMap,
}

impl<S: Send + Sync, P: DeserializeOwned + Send> FromRequestParts<S> for Asked<P> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(path) = Path::<P>::from_request_parts(parts, state).await.map_err(path_error)?;
        let actor = parts.extensions.get::<Actor>().cloned().unwrap_or(Actor::Anonymous);
        // The handler is the last to read the headers (the gate and the layers have run):
        // taken, not copied.
        let headers = std::mem::take(&mut parts.headers);
        Ok(Asked { actor, path, query: parts.uri.query().map(str::to_string), headers })
    }
}
