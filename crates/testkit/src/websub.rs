//! WebSub test kit: a real callback server (axum on a free loopback port) that records the
//! verifications and deliveries it gets and answers as a test tells it to, and helpers to
//! subscribe and read delivered documents.
//!
//! ```ignore
//! let cb = Callback::start().await;               // http://127.0.0.1:PORT/cb
//! assert_eq!(subscribe(&base, &topic, &cb.url, &[], None).await, 202);
//! cb.wait_verifications(1).await;
//! let docs = cb.wait_deliveries(2).await;         // accepted POSTs, in arrival order
//! ```

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How a callback answers verifications.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verify {
    /// 200 with the challenge: agrees.
    Echo,
    /// 200 with something else.
    WrongEcho,
    /// 404.
    NotFound,
}

/// One POST the callback received.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub headers: HeaderMap,
    pub body: String,
    /// What the callback answered.
    pub status: u16,
    pub at: Instant,
}

impl Delivery {
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
    }
}

#[derive(Default)]
struct Inner {
    verify: Option<Verify>,
    /// Statuses to answer the next POSTs with, then 200.
    statuses: VecDeque<u16>,
    /// Never answer POSTs (hold them open).
    hang: bool,
    verifications: Vec<HashMap<String, String>>,
    posts: Vec<Delivery>,
}

/// A callback server; it stops with the test's runtime.
#[derive(Clone)]
pub struct Callback {
    /// `http://127.0.0.1:PORT/cb?k=v`: a query of its own, which verifications must keep.
    pub url: String,
    inner: Arc<Mutex<Inner>>,
}

impl Callback {
    pub async fn start() -> Callback {
        let inner = Arc::new(Mutex::new(Inner { verify: Some(Verify::Echo), ..Inner::default() }));
        let app =
            axum::Router::new().route("/cb", axum::routing::get(verification).post(delivery)).with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a callback port");
        let port = listener.local_addr().expect("an address").port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Callback { url: format!("http://127.0.0.1:{port}/cb?k=v"), inner }
    }

    pub fn set_verify(&self, v: Verify) {
        self.inner.lock().unwrap().verify = Some(v);
    }

    /// Answers the next POSTs with these statuses, then 200.
    pub fn answer(&self, statuses: &[u16]) {
        self.inner.lock().unwrap().statuses.extend(statuses);
    }

    pub fn hang(&self, hang: bool) {
        self.inner.lock().unwrap().hang = hang;
    }

    pub fn verifications(&self) -> Vec<HashMap<String, String>> {
        self.inner.lock().unwrap().verifications.clone()
    }

    /// Every POST so far, whatever was answered.
    pub fn posts(&self) -> Vec<Delivery> {
        self.inner.lock().unwrap().posts.clone()
    }

    /// POSTs answered 2xx.
    pub fn accepted(&self) -> Vec<Delivery> {
        self.posts().into_iter().filter(|d| (200..300).contains(&d.status)).collect()
    }

    /// Waits until `n` verifications came (10 s at most).
    pub async fn wait_verifications(&self, n: usize) -> Vec<HashMap<String, String>> {
        wait_for(|| (self.verifications().len() >= n).then(|| self.verifications()), "verifications").await
    }

    /// Waits until `n` documents were accepted (10 s at most).
    pub async fn wait_deliveries(&self, n: usize) -> Vec<Delivery> {
        wait_for(|| (self.accepted().len() >= n).then(|| self.accepted()), "deliveries").await
    }

    /// Waits until the accepted documents hold the entries `ids` (10 s at most).
    pub async fn wait_ids(&self, ids: &[&str]) -> Vec<Delivery> {
        wait_for(
            || {
                let got = self.accepted();
                (entry_ids(&got).len() >= ids.len()).then_some(got)
            },
            "delivered entries",
        )
        .await
    }
}

async fn wait_for<T>(mut f: impl FnMut() -> Option<T>, what: &str) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(Instant::now() < deadline, "no {what} within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn verification(State(inner): State<Arc<Mutex<Inner>>>, Query(q): Query<HashMap<String, String>>) -> Response {
    let challenge = q.get("hub.challenge").cloned().unwrap_or_default();
    let verify = {
        let mut i = inner.lock().unwrap();
        i.verifications.push(q);
        i.verify
    };
    match verify {
        Some(Verify::Echo) => challenge.into_response(),
        Some(Verify::WrongEcho) => format!("{challenge}x").into_response(),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn delivery(State(inner): State<Arc<Mutex<Inner>>>, headers: HeaderMap, body: Bytes) -> Response {
    let (hang, status) = {
        let mut i = inner.lock().unwrap();
        let status = if i.hang { 0 } else { i.statuses.pop_front().unwrap_or(200) };
        let body = String::from_utf8_lossy(&body).to_string();
        i.posts.push(Delivery { headers, body, status, at: Instant::now() });
        (i.hang, status)
    };
    if hang {
        std::future::pending::<()>().await;
    }
    StatusCode::from_u16(status).unwrap_or(StatusCode::OK).into_response()
}

/// POSTs a subscription request form to `hub`; returns the status.
pub async fn request(hub: &str, fields: &[(&str, &str)], token: Option<&str>) -> (u16, String) {
    let body: String = url::form_urlencoded::Serializer::new(String::new()).extend_pairs(fields).finish();
    let mut req =
        reqwest::Client::new().post(hub).header("content-type", "application/x-www-form-urlencoded").body(body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let res = req.send().await.expect("the hub answers");
    let status = res.status().as_u16();
    (status, res.text().await.unwrap_or_default())
}

/// Subscribes `callback` to `topic` at `hub` with `extra` fields; returns the status.
pub async fn subscribe(hub: &str, topic: &str, callback: &str, extra: &[(&str, &str)]) -> u16 {
    let mut fields = vec![("hub.mode", "subscribe"), ("hub.topic", topic), ("hub.callback", callback)];
    fields.extend_from_slice(extra);
    request(hub, &fields, None).await.0
}

/// Subscribes and waits until the subscription is in force: the callback agreed, and the
/// hub had a moment to store it.
pub async fn subscribed(hub: &str, topic: &str, cb: &Callback, extra: &[(&str, &str)]) {
    let before = cb.verifications().len();
    assert_eq!(subscribe(hub, topic, &cb.url, extra).await, 202);
    cb.wait_verifications(before + 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// The text of every element `NAME` of a delivered Atom document, in document order, read
/// with a real XML parser: `NAME` is `fo:LOCAL` for the feed extension's elements (`fo:id`,
/// `fo:cursor`, `fo:last_cursor`, …) or a bare Atom element name. Panics if the document is
/// not XML, which a test should see.
pub fn tags(doc: &str, name: &str) -> Vec<String> {
    const FO: &str = "http://fanout.org/protocol/atom";
    const ATOM: &str = "http://www.w3.org/2005/Atom";
    let (ns, local) = match name.split_once(':') {
        Some(("fo", local)) => (FO, local),
        Some((prefix, _)) => panic!("tags: no namespace known for the prefix {prefix}"),
        None => (ATOM, name),
    };
    let root: minidom::Element = doc.parse().unwrap_or_else(|e| panic!("a delivered document is not XML ({e}): {doc}"));
    let mut out = Vec::new();
    let mut stack = vec![&root];
    while let Some(el) = stack.pop() {
        if el.is(local, ns) {
            out.push(el.text());
        }
        stack.extend(el.children().collect::<Vec<_>>().into_iter().rev());
    }
    out
}

/// The one `<NAME>` of a document, if any.
pub fn tag(doc: &str, name: &str) -> Option<String> {
    tags(doc, name).into_iter().next()
}

/// The item ids of every entry of these documents, in order.
pub fn entry_ids(docs: &[Delivery]) -> Vec<String> {
    docs.iter().flat_map(|d| tags(&d.body, "fo:id")).collect()
}
