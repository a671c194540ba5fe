//! Leaving a source's hub (SPEC §13 on several instances): the subscriber side against a
//! real test hub, with a callback server that answers verifications as the HTTP face does.
//! An instance that stops fetching a source unsubscribes: the hub is asked to end the
//! subscription, its verification of that is agreed to, no renewal is due any more, and a
//! later `ensure` subscribes afresh.

use axum::extract::{Path, Query, State};
use smartfeeds_sources::websub::Subscriber;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use testkit::source_hub::SourceHub;

/// A callback server for `subscriber` on a free loopback port; its base URL.
async fn callbacks(subscriber: Arc<std::sync::OnceLock<Arc<Subscriber>>>) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    async fn verify(
        State(sub): State<Arc<std::sync::OnceLock<Arc<Subscriber>>>>,
        Path(key): Path<String>,
        Query(q): Query<HashMap<String, String>>,
    ) -> (axum::http::StatusCode, String) {
        let get = |k: &str| q.get(k).cloned().unwrap_or_default();
        let lease = q.get("hub.lease_seconds").and_then(|l| l.parse().ok());
        match sub.get() {
            Some(s) if s.verify(&key, &get("hub.mode"), &get("hub.topic"), lease) => {
                (axum::http::StatusCode::OK, get("hub.challenge"))
            }
            _ => (axum::http::StatusCode::NOT_FOUND, String::new()),
        }
    }
    let app = axum::Router::new().route("/sources/{key}", axum::routing::get(verify)).with_state(subscriber);
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (base, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaving_a_hub_unsubscribes_and_a_later_ensure_subscribes_afresh() {
    let hub = SourceHub::start(3600);
    let cell = Arc::new(std::sync::OnceLock::new());
    let (base, _server) = callbacks(cell.clone()).await;
    let guard = outbound::Guard::new(&outbound::OutboundConfig::default(), true).unwrap();
    let client = outbound::Client::new(guard, Duration::from_secs(5), 1, "test").unwrap();
    let subscriber = Arc::new(Subscriber::new(&base, client, 1 << 20));
    cell.set(subscriber.clone()).ok().unwrap();
    let (tx, _rx) = tokio::sync::mpsc::channel(1);
    let topic = "http://source.example/feed.xml";

    subscriber.ensure("f", &hub.url, topic, &tx).await;
    let wait = |n: usize| {
        let hub = &hub;
        tokio::task::block_in_place(move || hub.wait_verified(n, Duration::from_secs(10)))
    };
    let first = wait(1)[0].clone();
    assert_eq!((first.mode.as_str(), first.topic.as_str()), ("subscribe", topic));
    assert!(subscriber.renew_at("f").is_some(), "a lease in force has a renewal time");
    // In force: asking again asks the hub nothing.
    subscriber.ensure("f", &hub.url, topic, &tx).await;
    assert_eq!(hub.requests().len(), 1);

    subscriber.leave("f").await;
    let requests = wait(2);
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert_eq!(requests[1].mode, "unsubscribe");
    assert_eq!(requests[1].callback, first.callback, "the subscription that was");
    assert_eq!(subscriber.renew_at("f"), None, "nothing to renew once left");

    // Fetching it again later (the shard came back): a new subscription, new callback.
    subscriber.ensure("f", &hub.url, topic, &tx).await;
    let requests = wait(3);
    assert_eq!(requests[2].mode, "subscribe");
    assert_ne!(requests[2].callback, first.callback);
}
