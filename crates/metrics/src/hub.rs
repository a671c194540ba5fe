//! The hub's metrics, registered with the others (`smartfeeds_hub_*`): what an operator
//! watches to see that web subscribers keep up.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: &'static str,
}

/// Every hub metric.
#[derive(Clone, Default)]
pub struct HubMetrics {
    /// Subscriptions in force.
    pub subscriptions: Gauge,
    /// Documents by how their delivery ended: `delivered`, `dropped` (attempts used up),
    /// `rejected` (a 3xx or 4xx other than 410), `gone` (410: the subscription ended).
    pub deliveries: Family<OutcomeLabel, Counter>,
    /// Attempts that failed and were tried again.
    pub retries: Counter,
    /// Verifications of intent by outcome: `accepted`, `refused`.
    pub verifications: Family<OutcomeLabel, Counter>,
    /// Outbox rows waiting for at least one subscriber.
    pub queue_depth: Gauge,
    /// Age of the oldest of them, seconds.
    pub oldest_undelivered_seconds: Gauge<f64, AtomicU64>,
}

impl HubMetrics {
    pub fn register(registry: &mut Registry) -> HubMetrics {
        let m = HubMetrics::default();
        let r = registry.sub_registry_with_prefix("hub");
        r.register("subscriptions", "WebSub subscriptions in force", m.subscriptions.clone());
        r.register("deliveries", "WebSub documents by outcome", m.deliveries.clone());
        r.register("retries", "WebSub delivery attempts that failed and were retried", m.retries.clone());
        r.register("verifications", "WebSub verifications of intent by outcome", m.verifications.clone());
        r.register("queue_depth", "changes waiting for at least one WebSub subscriber", m.queue_depth.clone());
        r.register(
            "oldest_undelivered_seconds",
            "age of the oldest change waiting for a WebSub subscriber",
            m.oldest_undelivered_seconds.clone(),
        );
        m
    }

    pub fn delivery(&self, outcome: &'static str) {
        self.deliveries.get_or_create(&OutcomeLabel { outcome }).inc();
    }

    pub fn verification(&self, outcome: &'static str) {
        self.verifications.get_or_create(&OutcomeLabel { outcome }).inc();
    }
}
