//! Prometheus metrics: what the service does (requests by kind and outcome, latency), what
//! push does (sent, dropped, bounced, queue depths), what the store does (commits, batch
//! sizes, commit latency) and the link's state. Served as text on a loopback address.

pub mod hub;
pub mod source;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::borrow::Cow;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `items`, `publish`, `retract`, `subscribe`, … (see `xmpp::router::request_kind`).
    pub kind: &'static str,
    /// `ok`, or the stanza error condition.
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    /// The matched route, e.g. `/feeds/{feed}/` (borrowed when it is known when built).
    pub route: Cow<'static, str>,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HeldLabel {
    /// `longpoll` or `stream`.
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    pub queue: &'static str,
}

/// Every metric, registered once.
pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub request_seconds: Family<KindLabel, Histogram>,
    pub pushes_sent: Counter,
    pub multicast_messages: Counter,
    pub multicast_refusals: Counter,
    pub pushes_dropped: Counter<u64, AtomicU64>,
    pub pushes_bounced: Counter,
    pub subscriptions_removed: Counter,
    pub queue_depth: Family<QueueLabel, Gauge>,
    pub store_commit_seconds: Histogram,
    pub store_batch_size: Histogram,
    pub connected: Gauge,
    /// Push shards this instance holds, where instances share a PostgreSQL database.
    pub push_shards: Gauge,
    pub connects: Counter,
    pub http_requests: Family<HttpLabels, Counter>,
    pub http_request_seconds: Histogram,
    pub http_held: Family<HeldLabel, Gauge>,
    /// HTTP connections open (at most `[http] max_connections`).
    pub http_connections: Gauge,
    /// The WebSub hub's (`smartfeeds_hub_*`).
    pub hub: hub::HubMetrics,
    /// The sources' (`smartfeeds_source_*`).
    pub source: source::SourceMetrics,
}

/// Counts one held request (long-poll or stream) for as long as it lives.
pub struct HeldGuard(Gauge);

/// A count of held requests of one kind; see [`Metrics::held_count`].
#[derive(Clone)]
pub struct HeldCount(Gauge);

impl HeldCount {
    /// One more held request until the guard drops.
    pub fn one_more(&self) -> HeldGuard {
        self.0.inc();
        HeldGuard(self.0.clone())
    }
}

impl Drop for HeldGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("smartfeeds");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register("requests", "iq requests served, by kind and outcome", requests.clone());
        let request_seconds = Family::<KindLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0001, 2.0, 16))
        });
        registry.register("request_seconds", "time from receipt to reply, by kind", request_seconds.clone());
        let pushes_sent = Counter::default();
        registry.register(
            "pushes_sent",
            "pushes handed to the server, one per subscriber and change (multicast copies included)",
            pushes_sent.clone(),
        );
        let multicast_messages = Counter::default();
        registry.register(
            "multicast_messages",
            "messages sent through the server's XEP-0033 multicast service, each one push to many subscribers",
            multicast_messages.clone(),
        );
        let multicast_refusals = Counter::default();
        registry.register(
            "multicast_refusals",
            "multicast messages the service refused (their pushes were resent one by one)",
            multicast_refusals.clone(),
        );
        let pushes_dropped = Counter::default();
        registry.register("pushes_dropped", "changes not pushed because the backlog was full", pushes_dropped.clone());
        let pushes_bounced = Counter::default();
        registry.register("pushes_bounced", "pushes that came back as errors", pushes_bounced.clone());
        let subscriptions_removed = Counter::default();
        registry.register(
            "subscriptions_removed",
            "subscriptions removed because their pushes kept bouncing",
            subscriptions_removed.clone(),
        );
        let queue_depth = Family::<QueueLabel, Gauge>::default();
        registry.register("queue_depth", "stanzas waiting, by queue (replies, pushes, changes)", queue_depth.clone());
        let store_commit_seconds = Histogram::new(exponential_buckets(0.0001, 2.0, 16));
        registry.register(
            "store_commit_seconds",
            "time of one group commit, fsync included",
            store_commit_seconds.clone(),
        );
        let store_batch_size = Histogram::new(exponential_buckets(1.0, 2.0, 12));
        registry.register("store_batch_size", "writes sharing one commit", store_batch_size.clone());
        let connected = Gauge::default();
        registry.register("connected", "1 while the link to the server is up", connected.clone());
        let push_shards = Gauge::default();
        registry.register(
            "push_shards",
            "push shards this instance holds (several instances on PostgreSQL: it pushes their feeds)",
            push_shards.clone(),
        );
        let connects = Counter::default();
        registry.register("connects", "successful logins to the server", connects.clone());
        let http_requests = Family::<HttpLabels, Counter>::default();
        registry.register("http_requests", "HTTP requests answered, by route and status", http_requests.clone());
        let http_request_seconds = Histogram::new(exponential_buckets(0.0001, 2.0, 20));
        registry.register(
            "http_request_seconds",
            "time to the answer's head (long-polls included)",
            http_request_seconds.clone(),
        );
        let http_held = Family::<HeldLabel, Gauge>::default();
        registry.register("http_held", "HTTP requests held open, by kind (longpoll, stream)", http_held.clone());
        let http_connections = Gauge::default();
        registry.register("http_connections", "HTTP connections open", http_connections.clone());
        let hub = hub::HubMetrics::register(&mut registry);
        let source = source::SourceMetrics::register(&mut registry);
        Metrics {
            hub,
            source,
            http_requests,
            http_request_seconds,
            http_held,
            http_connections,
            registry,
            requests,
            request_seconds,
            pushes_sent,
            multicast_messages,
            multicast_refusals,
            pushes_dropped,
            pushes_bounced,
            subscriptions_removed,
            queue_depth,
            store_commit_seconds,
            store_batch_size,
            connected,
            push_shards,
            connects,
        }
    }

    /// One served request.
    pub fn request(&self, kind: &'static str, outcome: String, took: Duration) {
        self.requests.get_or_create(&RequestLabels { kind, outcome }).inc();
        self.request_seconds.get_or_create(&KindLabel { kind }).observe(took.as_secs_f64());
    }

    /// One answered HTTP request.
    pub fn http_request(&self, route: Cow<'static, str>, status: u16, took: Duration) {
        self.http_requests.get_or_create(&HttpLabels { route, status }).inc();
        self.http_request_seconds.observe(took.as_secs_f64());
    }

    /// One more held request of `kind` until the guard drops.
    pub fn held(&self, kind: &'static str) -> HeldGuard {
        self.held_count(kind).one_more()
    }

    /// The count of held requests of `kind`, for whoever counts many (no look-up each).
    pub fn held_count(&self, kind: &'static str) -> HeldCount {
        HeldCount(self.http_held.get_or_create(&HeldLabel { kind }).clone())
    }

    /// One group commit.
    pub fn commit(&self, batch: usize, took: Duration) {
        self.store_commit_seconds.observe(took.as_secs_f64());
        self.store_batch_size.observe(batch as f64);
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Serves `GET /metrics` on `listener` (on the same axum stack as the HTTP face) until the
/// task is dropped. `refresh` updates the gauges that are read rather than counted (queue
/// depths) just before each scrape.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: std::sync::Arc<Metrics>,
    refresh: std::sync::Arc<dyn Fn(&Metrics) + Send + Sync>,
) {
    let app = router(metrics, refresh);
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!(error = %e, "the metrics listener failed");
    }
}

/// The `/metrics` route.
pub fn router(
    metrics: std::sync::Arc<Metrics>,
    refresh: std::sync::Arc<dyn Fn(&Metrics) + Send + Sync>,
) -> axum::Router {
    use axum::http::{StatusCode, header};
    let scrape = move || {
        let (metrics, refresh) = (metrics.clone(), refresh.clone());
        async move {
            refresh(&metrics);
            ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], metrics.encode())
        }
    };
    axum::Router::new().route("/metrics", axum::routing::get(scrape)).fallback(|| async {
        (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            "only GET /metrics is served here\n",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_commits_show_up_in_the_text() {
        let m = Metrics::new();
        m.request("items", "ok".into(), Duration::from_millis(2));
        m.request("publish", "forbidden".into(), Duration::from_millis(1));
        m.commit(8, Duration::from_millis(3));
        m.connected.set(1);
        let text = m.encode();
        assert!(text.contains("smartfeeds_requests_total{kind=\"items\",outcome=\"ok\"} 1"), "{text}");
        assert!(text.contains("smartfeeds_requests_total{kind=\"publish\",outcome=\"forbidden\"} 1"), "{text}");
        assert!(text.contains("smartfeeds_store_batch_size_count 1"), "{text}");
        assert!(text.contains("smartfeeds_connected 1"), "{text}");
    }
}
