//! POSTs of ready bytes to one URL again and again (WebSub deliveries), on hyper's pooled
//! client directly.
//!
//! reqwest does much per request that such a POST never needs: its redirect, retry and
//! decompression layers run even when unused, and it parses each answer's URL again
//! (`Url::parse`, with IDNA). Measured on 10,000 deliveries per publish, that was about a
//! fifth of the hub's CPU. The policy is the same as [`Client`](crate::Client)'s: names are
//! resolved by the [`Guard`] at each connection (only the addresses it keeps are connected
//! to), IP hosts are checked before each request, redirects are answers like any other,
//! no proxy; TLS is rustls with the WebPKI roots, as reqwest's.

use crate::guard::{Guard, Refused};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderMap, HeaderValue, USER_AGENT};
use hyper::{Request, StatusCode, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client as Pooled;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::rt::TokioExecutor;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use url::Url;

/// Where POSTs go: the URL as given, checked, and as hyper takes it; made once and used for
/// every POST to it.
#[derive(Clone, Debug)]
pub struct PostTarget {
    url: Url,
    uri: Uri,
}

impl PostTarget {
    /// `url` if it may be posted to at all (see [`Guard::check_host`]).
    pub fn new(url: &str, guard: &Guard) -> Result<PostTarget, Refused> {
        let url = Url::parse(url).map_err(|_| Refused::NotHttp)?;
        guard.check_host(&url)?;
        let uri = url.as_str().parse().map_err(|_| Refused::NotHttp)?;
        Ok(PostTarget { url, uri })
    }

    pub fn url(&self) -> &Url {
        &self.url
    }
}

/// What a POST got back: the status and the headers (the body is read, at most the bytes
/// asked for, and dropped, so the connection can be used again).
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
}

/// Why a POST got no answer.
#[derive(Debug, thiserror::Error)]
pub enum PostFailed {
    #[error("refused: the URL {0}")]
    Refused(#[from] Refused),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Exchange(String),
}

/// hyper's pooled client under the guard. See the module docs.
#[derive(Clone)]
pub(crate) struct Poster {
    pooled: Pooled<HttpsConnector<HttpConnector<Guard>>, Full<Bytes>>,
    guard: Guard,
    timeout: Duration,
    agent: HeaderValue,
}

impl Poster {
    pub(crate) fn new(guard: Guard, timeout: Duration, connect: Duration, idle_per_host: usize, agent: &str) -> Poster {
        let mut http = HttpConnector::new_with_resolver(guard.clone());
        http.enforce_http(false);
        http.set_connect_timeout(Some(connect));
        http.set_nodelay(true);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let pooled = Pooled::builder(TokioExecutor::new()).pool_max_idle_per_host(idle_per_host).build(https);
        let agent = HeaderValue::from_str(agent).unwrap_or_else(|_| HeaderValue::from_static("smartfeeds"));
        Poster { pooled, guard, timeout, agent }
    }

    /// POSTs `body` with `headers` to `to`, reading at most `max` bytes of the answer's body,
    /// all within the client's timeout.
    pub(crate) async fn post(
        &self,
        to: &PostTarget,
        mut headers: HeaderMap,
        body: Bytes,
        max: usize,
    ) -> Result<Answer, PostFailed> {
        self.guard.check_host(&to.url)?;
        headers.insert(USER_AGENT, self.agent.clone());
        let mut req =
            Request::post(to.uri.clone()).body(Full::new(body)).map_err(|e| PostFailed::Exchange(e.to_string()))?;
        *req.headers_mut() = headers;
        let exchange = async {
            let res = self.pooled.request(req).await.map_err(|e| PostFailed::Exchange(error_chain(&e)))?;
            let (parts, mut body) = res.into_parts();
            let mut read = 0;
            while read < max {
                match body.frame().await {
                    Some(Ok(frame)) => read += frame.data_ref().map_or(0, Bytes::len),
                    Some(Err(_)) | None => break,
                }
            }
            Ok(Answer { status: parts.status, headers: parts.headers })
        };
        tokio::time::timeout(self.timeout, exchange).await.unwrap_or(Err(PostFailed::Timeout(self.timeout)))
    }
}

/// An error and its causes, one line: hyper's and reqwest's errors say "client error
/// (Connect)" or "error sending request" and keep the reason (a refused address, a refused
/// connection) in their sources.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// The guard as hyper's resolver: the addresses a connection may use (see
/// [`Guard::connectable`]).
impl tower::Service<Name> for Guard {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = Refused;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Refused>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Refused>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let guard = self.clone();
        Box::pin(async move {
            match guard.connectable(name.as_str()).await {
                Ok(addrs) => Ok(addrs.into_iter().map(|ip| SocketAddr::new(ip, 0)).collect::<Vec<_>>().into_iter()),
                Err(e) => {
                    tracing::debug!(host = name.as_str(), error = %e, "outbound connection refused");
                    Err(e)
                }
            }
        })
    }
}
