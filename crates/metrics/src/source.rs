//! The sources' metrics (`smartfeeds_source_*`, SPEC §13): how fetches end, what they
//! change, and when each source last answered.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// `ok` (a document fetched and imported), `not_modified` (304), `error`, `gone` (410),
    /// `delivered` (a document the source's hub pushed, imported).
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChangeLabel {
    /// `published`, `updated`, `unchanged`, `retracted`, `too_big`.
    pub change: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FeedLabel {
    pub feed: String,
}

/// Every source metric.
#[derive(Clone, Default)]
pub struct SourceMetrics {
    pub fetches: Family<OutcomeLabel, Counter>,
    pub entries: Family<ChangeLabel, Counter>,
    pub last_success: Family<FeedLabel, Gauge>,
}

impl SourceMetrics {
    pub fn register(registry: &mut Registry) -> SourceMetrics {
        let m = SourceMetrics::default();
        let r = registry.sub_registry_with_prefix("source");
        r.register("fetches", "source fetches by outcome", m.fetches.clone());
        r.register("entries", "source entries by what they changed", m.entries.clone());
        r.register(
            "last_success_timestamp_seconds",
            "when each feed's source last answered (Unix seconds)",
            m.last_success.clone(),
        );
        m
    }

    pub fn fetch(&self, outcome: &'static str) {
        self.fetches.get_or_create(&OutcomeLabel { outcome }).inc();
    }

    pub fn entries(&self, change: &'static str, n: u64) {
        if n > 0 {
            self.entries.get_or_create(&ChangeLabel { change }).inc_by(n);
        }
    }

    pub fn success(&self, feed: &str, unix_seconds: i64) {
        self.last_success.get_or_create(&FeedLabel { feed: feed.to_string() }).set(unix_seconds);
    }
}
