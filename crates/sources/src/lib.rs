//! The producer (SPEC §13): feeds whose items come from a **source**, a feed document
//! elsewhere. A face that only publishes: it fetches, reads, works out the delta and hands
//! it to the core's service, whose change stream then pushes it like any other publish
//! (XMPP, SSE, long-poll, WebSub).
//!
//! - [`config`]: `[sources]` and each feed's `source`, checked;
//! - [`fetch`]: one conditional GET through the checked outbound client (redirects hop by
//!   hop, bounded body), or a file read;
//! - [`document`]: Atom (kept as written), RSS and JSON Feed (written as Atom) to entries in
//!   publishing order, with their [`item_id`]s;
//! - [`history`]: RFC 5005 archives on the first fetch, the Simplefeed walk-back after;
//! - [`task`]: one task per source, its schedule, backoff, `410`, pings and metrics;
//! - [`websub`]: subscriptions to the sources' own WebSub hubs, their callbacks' answers.
//!
//! The delta itself is the core's (`Service::import`): worked out and committed in one
//! store transaction per fetch.

pub mod config;
pub mod document;
pub mod fetch;
pub mod history;
mod item_id;
pub mod task;
pub mod websub;

pub use config::{Location, Source, SourcesConfig};
pub use item_id::item_id;

use feed::ports::{Share, Store};
use feed::service::{Service, SourceStatus};
use metrics::source::SourceMetrics;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, watch};

/// `smartfeeds/VERSION`, the User-Agent of every fetch.
pub const USER_AGENT: &str = concat!("smartfeeds/", env!("CARGO_PKG_VERSION"));

/// The running sources: what pings reach.
#[derive(Clone, Default)]
pub struct Sources {
    /// Each source's ping, by its URL as configured.
    pings: Arc<HashMap<String, Arc<Notify>>>,
    /// The subscriptions to sources' hubs, when the HTTP face has a public prefix.
    subscriber: Option<Arc<websub::Subscriber>>,
}

impl Sources {
    /// Starts one task per source, each fetching at once and then at its interval. With
    /// `base` (`[http] base_url`), sources that name a WebSub hub are subscribed to there,
    /// with callbacks under `BASE/sources/`.
    pub fn start<S: Store>(
        svc: &Service<S>,
        sources: Vec<Source>,
        config: &SourcesConfig,
        outbound: &outbound::OutboundConfig,
        metrics: Arc<SourceMetrics>,
        share: Option<watch::Receiver<Share>>,
        base: Option<&str>,
    ) -> Result<Sources, String> {
        let guard = outbound::Guard::new(outbound, config.allow_private)?;
        let client = outbound::Client::new(guard, Duration::from_secs(config.timeout), 4, USER_AGENT)
            .map_err(|e| format!("the sources' HTTP client: {e}"))?;
        let subscriber = base.map(|b| {
            Arc::new(websub::Subscriber::new(
                b,
                client.clone(),
                usize::try_from(config.max_bytes).unwrap_or(usize::MAX),
            ))
        });
        let fetcher = fetch::Fetcher { client, max_bytes: config.max_bytes };
        let mut pings = HashMap::new();
        for source in sources {
            let ping = Arc::new(Notify::new());
            pings.insert(source.configured.clone(), ping.clone());
            svc.sources()
                .set(&source.feed, SourceStatus { location: source.location.to_string(), ..SourceStatus::default() });
            let task = task::Task {
                source,
                svc: svc.clone(),
                fetcher: fetcher.clone(),
                metrics: metrics.clone(),
                max_history: usize::try_from(config.max_history).unwrap_or(usize::MAX),
                ping,
                share: share.clone(),
                subscriber: subscriber.clone(),
            };
            tokio::spawn(task.run());
        }
        Ok(Sources { pings: Arc::new(pings), subscriber })
    }

    /// A publisher's ping naming `urls`: each configured source among them is fetched at
    /// once (or once more after the fetch in flight). Whether any was.
    pub fn ping(&self, urls: &[String]) -> bool {
        let mut any = false;
        for url in urls {
            if let Some(n) = self.pings.get(url.trim()) {
                n.notify_one();
                any = true;
            }
        }
        any
    }

    /// The subscriber side of the subscriptions to sources' hubs, if there is one.
    pub fn subscriber(&self) -> Option<Arc<websub::Subscriber>> {
        self.subscriber.clone()
    }
}
