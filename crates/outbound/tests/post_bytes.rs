//! `Client::post_bytes` (WebSub deliveries) against real HTTP servers on loopback and a DNS
//! server the test drives: what a callback receives, and that the guard's policy holds on
//! this path too (a name resolving to a private address is never connected to).

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use bytes::Bytes;
use smartfeeds_outbound::{Client, Guard, OutboundConfig, PostFailed, Refused};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::dns::Dns;

/// What the callback got: each request's headers and body.
type Got = Arc<Mutex<Vec<(HeaderMap, Bytes)>>>;

/// A callback on 127.0.0.1 answering `status` (with `Retry-After: 7`) after `delay`.
async fn callback(status: StatusCode, delay: Duration) -> (u16, Got) {
    let got: Got = Arc::default();
    let seen = got.clone();
    let app = axum::Router::new().route(
        "/cb",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push((headers, body));
                tokio::time::sleep(delay).await;
                (status, [(header::RETRY_AFTER, "7")], "an answer the hub reads and drops")
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, got)
}

fn client(dns: Option<&Dns>, allow_private: bool, timeout: Duration) -> Client {
    let config = OutboundConfig { nameservers: dns.map(|d| vec![d.addr]).unwrap_or_default() };
    Client::new(Guard::new(&config, allow_private).unwrap(), timeout, 4, "smartfeeds-test").unwrap()
}

fn headers() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/atom+xml"));
    h.insert("x-hub-signature", HeaderValue::from_static("sha256=00"));
    h
}

#[tokio::test]
async fn a_post_carries_its_bytes_and_headers_and_its_answer_comes_back() {
    let (port, got) = callback(StatusCode::SERVICE_UNAVAILABLE, Duration::ZERO).await;
    let c = client(None, true, Duration::from_secs(5));
    let to = c.target(&format!("http://127.0.0.1:{port}/cb")).unwrap();
    for n in 0..3 {
        let answer = c.post_bytes(&to, headers(), Bytes::from(format!("<feed>{n}</feed>")), 64 << 10).await.unwrap();
        assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(answer.headers.get(header::RETRY_AFTER).unwrap(), "7");
    }
    let got = got.lock().unwrap();
    assert_eq!(got.len(), 3);
    let (h, body) = &got[2];
    assert_eq!(body.as_ref(), b"<feed>2</feed>");
    assert_eq!(h.get(header::CONTENT_TYPE).unwrap(), "application/atom+xml");
    assert_eq!(h.get("x-hub-signature").unwrap(), "sha256=00");
    assert_eq!(h.get(header::USER_AGENT).unwrap(), "smartfeeds-test");
    assert_eq!(h.get(header::HOST).unwrap().to_str().unwrap(), format!("127.0.0.1:{port}"));
}

#[tokio::test]
async fn private_callbacks_are_refused_by_address_and_by_a_name_resolving_to_one() {
    let (port, got) = callback(StatusCode::OK, Duration::ZERO).await;
    let dns = Dns::start().await;
    dns.answer("callback.test", &["127.0.0.1"]);
    let strict = client(Some(&dns), false, Duration::from_secs(5));
    assert_eq!(strict.target(&format!("http://127.0.0.1:{port}/cb")).unwrap_err(), Refused::Private);
    assert_eq!(strict.target(&format!("http://localhost:{port}/cb")).unwrap_err(), Refused::LocalName);
    // A name passes the check of its form; its addresses are judged at connection time.
    let to = strict.target(&format!("http://callback.test:{port}/cb")).unwrap();
    let err = strict.post_bytes(&to, headers(), Bytes::from_static(b"x"), 1024).await.unwrap_err();
    assert!(err.to_string().contains("resolves to a private"), "{err}");
    assert!(!dns.answered("callback.test").is_empty(), "the guard resolved the name");
    assert!(got.lock().unwrap().is_empty(), "the private address was connected to");
    // Allowed, the same name leads to the callback.
    let lax = client(Some(&dns), true, Duration::from_secs(5));
    let answer = lax.post_bytes(&to, headers(), Bytes::from_static(b"x"), 1024).await.unwrap();
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(got.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_callback_that_does_not_answer_in_time_is_a_timeout_and_https_to_plain_http_an_error() {
    let (port, _) = callback(StatusCode::OK, Duration::from_secs(30)).await;
    let c = client(None, true, Duration::from_millis(500));
    let to = c.target(&format!("http://127.0.0.1:{port}/cb")).unwrap();
    let started = Instant::now();
    let err = c.post_bytes(&to, headers(), Bytes::from_static(b"x"), 1024).await.unwrap_err();
    assert!(matches!(err, PostFailed::Timeout(_)), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    let tls = c.target(&format!("https://127.0.0.1:{port}/cb")).unwrap();
    let err = c.post_bytes(&tls, headers(), Bytes::from_static(b"x"), 1024).await.unwrap_err();
    assert!(matches!(err, PostFailed::Exchange(_) | PostFailed::Timeout(_)), "{err}");
}
