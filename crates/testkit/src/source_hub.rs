//! A WebSub hub the test controls, as a source names it (SPEC §13, push from the source's
//! hub): axum on a free loopback port, on a thread and runtime of its own. It records each
//! subscription request, answers `202`, then verifies intent at the callback with the lease
//! the test set (`hub.lease_seconds`), and records whether the callback echoed the
//! challenge. It delivers nothing by itself.
//!
//! ```ignore
//! let hub = SourceHub::start(12);                    // grants 12-second leases
//! web.set("/feed.xml", doc_with_link_to(&hub.url));
//! let subs = hub.wait_verified(1, Duration::from_secs(10));
//! ```

use axum::body::Bytes;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One subscription request the hub received.
#[derive(Clone, Debug)]
pub struct SubRequest {
    pub mode: String,
    pub topic: String,
    pub callback: String,
    pub secret: Option<String>,
    /// When it arrived.
    pub at: Instant,
    /// When the callback echoed the challenge, if it did.
    pub verified: Option<Instant>,
}

#[derive(Default)]
struct Inner {
    lease: u64,
    requests: Vec<SubRequest>,
}

pub struct SourceHub {
    /// `http://127.0.0.1:PORT/`: what a source's `Link: <…>; rel="hub"` names.
    pub url: String,
    inner: Arc<Mutex<Inner>>,
}

impl SourceHub {
    /// A hub granting leases of `lease_seconds`.
    pub fn start(lease_seconds: u64) -> SourceHub {
        let inner = Arc::new(Mutex::new(Inner { lease: lease_seconds, requests: Vec::new() }));
        let state = inner.clone();
        let app = axum::Router::new().fallback(move |body: Bytes| subscribe(state.clone(), body));
        let port = super::source_server::serve_on_thread(std::net::Ipv4Addr::LOCALHOST, app);
        SourceHub { url: format!("http://127.0.0.1:{port}/"), inner }
    }

    /// The subscription requests so far, in arrival order.
    pub fn requests(&self) -> Vec<SubRequest> {
        self.inner.lock().unwrap().requests.clone()
    }

    /// Waits until `n` requests were verified (`limit` at most); returns all the requests.
    pub fn wait_verified(&self, n: usize, limit: Duration) -> Vec<SubRequest> {
        let deadline = Instant::now() + limit;
        loop {
            let requests = self.requests();
            if requests.iter().filter(|r| r.verified.is_some()).count() >= n {
                return requests;
            }
            assert!(Instant::now() < deadline, "{n} verified subscriptions not within {limit:?}: {requests:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until `n` requests arrived (`limit` at most); returns them.
    pub fn wait_requests(&self, n: usize, limit: Duration) -> Vec<SubRequest> {
        let deadline = Instant::now() + limit;
        loop {
            let requests = self.requests();
            if requests.len() >= n {
                return requests;
            }
            assert!(Instant::now() < deadline, "{n} subscription requests not within {limit:?}: {requests:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

async fn subscribe(inner: Arc<Mutex<Inner>>, body: Bytes) -> axum::http::StatusCode {
    let field = |name: &str| url::form_urlencoded::parse(&body).find(|(k, _)| k == name).map(|(_, v)| v.into_owned());
    let (Some(mode), Some(topic), Some(callback)) = (field("hub.mode"), field("hub.topic"), field("hub.callback"))
    else {
        return axum::http::StatusCode::BAD_REQUEST;
    };
    let request = SubRequest {
        mode: mode.clone(),
        topic: topic.clone(),
        callback: callback.clone(),
        secret: field("hub.secret"),
        at: Instant::now(),
        verified: None,
    };
    let (index, lease) = {
        let mut inner = inner.lock().unwrap();
        inner.requests.push(request);
        (inner.requests.len() - 1, inner.lease)
    };
    tokio::spawn(async move {
        let challenge = format!("challenge-{index}");
        let Ok(mut url) = url::Url::parse(&callback) else { return };
        url.query_pairs_mut()
            .append_pair("hub.mode", &mode)
            .append_pair("hub.topic", &topic)
            .append_pair("hub.challenge", &challenge)
            .append_pair("hub.lease_seconds", &lease.to_string());
        let Ok(res) = reqwest::get(url).await else { return };
        if res.status().is_success() && res.text().await.is_ok_and(|t| t == challenge) {
            inner.lock().unwrap().requests[index].verified = Some(Instant::now());
        }
    });
    axum::http::StatusCode::ACCEPTED
}
