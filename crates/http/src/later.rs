//! Answers given later: a long-poll that has to wait returns at once with a stand-in
//! response that carries the wait; the layers (gate, CORS, timeout, tracing) run over the
//! stand-in and are done with, and the connection then keeps only the wait until it gives
//! the real answer, to which the headers the layers added to the stand-in are carried.
//!
//! Why: a request waiting inside its handler keeps every layer's future and the router's
//! around it for as long as it is held, several times what the wait itself needs; ten
//! thousand held long-polls kept that much each. The connection's path
//! ([`crate::connections`]) awaits the wait alone, and stops it when the client goes away.
//!
//! What changes for the layers: they see the stand-in (status 200, no body). Tracing logs
//! the request when the stand-in is made, the gate's metrics are recorded when the real
//! answer is ([`Later::then`]), and the wait bounds itself as the timeout layer would.

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, header};
use axum::response::Response;
use futures::future::BoxFuture;
use http_body_util::Either;
use std::sync::{Arc, Mutex, PoisonError};

/// The wait a stand-in carries (in its extensions, which must be `Clone + Sync`).
#[derive(Clone)]
pub struct Later(Arc<Mutex<Option<BoxFuture<'static, Response>>>>);

/// A stand-in for the answer `wait` gives.
pub fn later(wait: impl Future<Output = Response> + Send + 'static) -> Response {
    let mut res = Response::new(Body::empty());
    res.extensions_mut().insert(Later(Arc::new(Mutex::new(Some(Box::pin(wait))))));
    res
}

impl Later {
    /// Has `record` see the real answer when it is given.
    pub fn then(&self, record: impl FnOnce(&Response) + Send + 'static) {
        let mut slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(wait) = slot.take() {
            *slot = Some(Box::pin(async move {
                let res = wait.await;
                record(&res);
                res
            }));
        }
    }
}

/// The headers the layers put on a stand-in, but its `Content-Length` (of its empty
/// body, not the answer's): a short list, kept while the wait goes on.
pub struct Added(Vec<(HeaderName, HeaderValue)>);

/// What the layers added to a stand-in, and its wait; any other response as it is.
pub fn split<B>(mut res: Response<B>) -> Result<(Added, BoxFuture<'static, Response>), Response<B>> {
    let wait = match res.extensions_mut().remove::<Later>() {
        Some(Later(wait)) => wait.lock().unwrap_or_else(PoisonError::into_inner).take(),
        None => None,
    };
    let Some(wait) = wait else { return Err(res) };
    let added = res.headers().iter().filter(|(n, _)| *n != header::CONTENT_LENGTH);
    Ok((Added(added.map(|(n, v)| (n.clone(), v.clone())).collect()), wait))
}

/// The real answer with the headers the layers put on its stand-in, put as they put them:
/// replacing the answer's own, but for `Vary`, whose values are added (as CORS does).
pub fn settle(added: Added, mut answer: Response) -> Response {
    for (name, _) in &added.0 {
        if name != header::VARY {
            answer.headers_mut().remove(name);
        }
    }
    for (name, value) in added.0 {
        answer.headers_mut().append(name, value);
    }
    answer
}

/// The answer `res` stands for, waited for here when it is a stand-in.
pub async fn answer<B>(res: Response<B>) -> Response<Either<B, Body>> {
    match split(res) {
        Ok((added, wait)) => settle(added, wait.await).map(Either::Right),
        Err(res) => res.map(Either::Left),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    #[tokio::test]
    async fn the_answer_comes_with_the_headers_the_layers_put_on_its_stand_in() {
        let mut stand_in = later(async {
            let mut res = Response::new(Body::from("page"));
            *res.status_mut() = StatusCode::NOT_MODIFIED;
            res.headers_mut().insert(header::VARY, HeaderValue::from_static("Accept"));
            res.headers_mut().insert(header::ETAG, HeaderValue::from_static("\"e\""));
            res.headers_mut().insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("x"));
            res
        });
        let seen = Arc::new(Mutex::new(None));
        let record = seen.clone();
        stand_in.extensions().get::<Later>().unwrap().then(move |r| *record.lock().unwrap() = Some(r.status()));
        // What CORS adds on the way out.
        let h = stand_in.headers_mut();
        h.append(header::VARY, HeaderValue::from_static("origin"));
        h.append(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
        let res = answer(stand_in).await;
        assert_eq!(res.status(), StatusCode::NOT_MODIFIED);
        let vary: Vec<_> = res.headers().get_all(header::VARY).iter().collect();
        assert_eq!(vary, ["Accept", "origin"]);
        assert_eq!(res.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN], "*");
        assert_eq!(res.headers()[header::ETAG], "\"e\"");
        assert!(!res.headers().contains_key(header::CONTENT_LENGTH), "the stand-in's length is not the answer's");
        assert_eq!(*seen.lock().unwrap(), Some(StatusCode::NOT_MODIFIED));
    }

    #[tokio::test]
    async fn any_other_response_is_the_answer_itself() {
        let res = answer(Response::new(Body::from("now"))).await;
        let body = http_body_util::BodyExt::collect(res.into_body()).await.unwrap().to_bytes();
        assert_eq!(&body[..], b"now");
    }
}
