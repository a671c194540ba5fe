//! The WebSub hub (SPEC §10): web services subscribe to a view with a callback URL and get
//! every change of it POSTed as a signed Atom document, in commit order, surviving restarts.
//!
//! Like the XMPP pusher, the hub takes the store's change stream and only formats and
//! delivers; who gets a change is decided where the change is committed. Files:
//!
//! - `request`: the `BASE/hub` handler: a form POST checked and answered 202 or 4xx.
//! - `verify`: verification of intent (`GET CALLBACK?hub.challenge=…`), then the store.
//! - `deliver`: one task per subscription, one document at a time, retries with backoff.
//! - `document`: the Atom document (made once per outbox read shared by a view's
//!   subscriptions) and its `X-Hub-Signature`.
//! - `registry`: the subscriptions in force, their tasks, the change sink that wakes them.
//! - `callback`: which callback URLs are safe, the HTTP client, bounded answers.
//!
//! **Durability.** A change owed to WebSub subscribers is appended to the store's outbox in
//! its own transaction ([`feed::outbox`]); each subscription's progress is saved
//! after its deliveries ([`Hub::ack`], batched). A crash loses nothing: on start every
//! subscription resumes after its saved progress, so a document delivered just before a
//! crash may come again (at least once), and none is skipped.
//!
//! **Isolation.** Every subscription has its own task, so a slow callback only delays its
//! own documents. Requests in flight are bounded over all callbacks (`max_concurrent`) and
//! per callback host (`max_per_host`), a host's slot taken before a global one, so one host
//! cannot occupy them all. Publishes and pulls never wait for the hub: the change sink only
//! wakes tasks, and the outbox row was already written with the change.
//!
//! **Several instances** on one store (PostgreSQL): each delivers the documents of the
//! feeds whose shard it holds (`store_postgres::push_shards`), woken by the changes it relays;
//! the others' tasks wait. A task that gets its feed resumes from the progress in the store,
//! and every instance reads the subscriptions again each [`RELOAD`], so one made or ended
//! through another instance is served or stopped here too.

pub mod callback;
pub mod config;
mod deliver;
pub mod document;
pub mod pings;
mod registry;
pub mod request;
pub mod source_callbacks;
mod verify;

use crate::hub::config::HubConfig;
use crate::serving::single_flight::SingleFlight;
use feed::FeedError;
use feed::outbox::HubSubscription;
use feed::ports::{Share, Store};
use feed::service::{CallbackSubscription, Housekeeping, Service};
use metrics::Metrics;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{Semaphore, watch};

pub use registry::Registry;
use registry::{ViewKey, Worker};

/// How often leases are expired, the outbox pruned and its gauges read.
const HOUSEKEEPING: Duration = Duration::from_secs(5);
/// How often delivery progress is saved (one write for all subscriptions).
const ACK_EVERY: Duration = Duration::from_millis(50);
/// Subscriptions read per page at start.
const LOAD_PAGE: usize = 1000;
/// Where instances share the store, how often subscriptions are read again.
const RELOAD: Duration = Duration::from_secs(1);

/// Resolves once `stop` is set (or its sender is gone). The watch guard is dropped here,
/// so callers' futures stay `Send`.
async fn stopping(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Milliseconds since the Unix epoch.
fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The hub: settings, the client, the bounds on requests in flight, and the subscriptions.
pub struct Hub<S: Store> {
    svc: Service<S>,
    config: HubConfig,
    /// The HTTP face's public prefix, `BASE`.
    base: String,
    /// `BASE/hub`.
    url: String,
    client: outbound::Client,
    metrics: Arc<Metrics>,
    registry: Arc<Registry>,
    /// One outbox read for all the subscriptions of a view at one progress mark, per change.
    /// The mark is part of the group, not the tag: subscriptions of one view a document apart
    /// (some delivered, some still posting) then keep a read each instead of replacing each
    /// other's, which made a read per subscription at every publish.
    reads: SingleFlight<(ViewKey, i64), u64, Arc<document::Batch>, FeedError>,
    slots: Arc<Semaphore>,
    hosts: Mutex<HashMap<String, Arc<Semaphore>>>,
    /// Progress not saved yet: subscription id → outbox seq delivered up to.
    acks: Mutex<HashMap<i64, i64>>,
    /// The feeds this instance delivers, when instances share the store; `None`: all.
    share: Option<watch::Receiver<Share>>,
    stop: watch::Receiver<bool>,
    /// Who is told of publisher pings (sources); unset: every ping is 404.
    pinged: std::sync::OnceLock<pings::Pinged>,
    /// Who subscribed to sources' hubs (their callbacks are `BASE/sources/KEY`); unset: 404.
    sources: std::sync::OnceLock<Arc<dyn source_callbacks::SourceCallbacks>>,
}

impl<S: Store> Hub<S> {
    /// A hub for the HTTP face whose public prefix is `base`. Nothing runs until
    /// [`start`](Self::start). Each argument is a separate part the wiring hands over.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        svc: Service<S>,
        config: HubConfig,
        outbound: &outbound::OutboundConfig,
        base: &str,
        metrics: Arc<Metrics>,
        registry: Arc<Registry>,
        share: Option<watch::Receiver<Share>>,
        stop: watch::Receiver<bool>,
    ) -> anyhow::Result<Arc<Hub<S>>> {
        let timeout = Duration::from_secs_f64(config.timeout);
        let client = callback::client(outbound, config.allow_private_callbacks, timeout, config.max_per_host)?;
        Ok(Arc::new(Hub {
            svc,
            url: format!("{base}/hub"),
            base: base.to_string(),
            client,
            metrics,
            registry,
            reads: SingleFlight::default(),
            slots: Arc::new(Semaphore::new(config.max_concurrent)),
            hosts: Mutex::default(),
            acks: Mutex::default(),
            share,
            stop,
            config,
            pinged: std::sync::OnceLock::new(),
            sources: std::sync::OnceLock::new(),
        }))
    }

    pub fn config(&self) -> &HubConfig {
        &self.config
    }

    /// Sets who is told of publisher pings (once; later calls change nothing).
    pub fn on_ping(&self, pinged: pings::Pinged) {
        let _ = self.pinged.set(pinged);
    }

    /// Sets who answers on `BASE/sources/KEY` (once; later calls change nothing).
    pub fn on_source_callbacks(&self, callbacks: Arc<dyn source_callbacks::SourceCallbacks>) {
        let _ = self.sources.set(callbacks);
    }

    /// The hub's routes: `BASE/hub` and the seed's `BASE/feeds/FEED/hub/`, the same hub.
    /// Mounted behind the HTTP face's gate, which puts the requester's `Actor` in.
    pub fn routes(self: &Arc<Self>) -> axum::Router {
        use axum::routing::post;
        axum::Router::new()
            .route("/hub", post(request::post::<S>))
            .route("/feeds/{feed}/hub/", post(request::post::<S>))
            .route("/feeds/{feed}/hub", post(request::post::<S>))
            .route(
                "/sources/{key}",
                axum::routing::get(source_callbacks::verify::<S>).post(source_callbacks::deliver::<S>),
            )
            .with_state(self.clone())
    }

    /// Loads the stored subscriptions, starts their tasks (each resumes after its saved
    /// progress) and the housekeeping; the returned task ends after `stop`, once the last
    /// progress is saved.
    pub async fn start(self: &Arc<Self>) -> Result<tokio::task::JoinHandle<()>, FeedError> {
        self.load().await?;
        let n = self.registry.len();
        self.metrics.hub.subscriptions.set(n as i64);
        tracing::info!(subscriptions = n, hub = %self.url, "WebSub hub ready");
        let me = self.clone();
        Ok(tokio::spawn(async move { me.background().await }))
    }

    /// Starts a task for every stored subscription without one; where instances share the
    /// store, also ends the tasks of subscriptions another instance removed.
    async fn load(self: &Arc<Self>) -> Result<(), FeedError> {
        let (mut after, mut ids) = (0, HashSet::new());
        loop {
            let page = self.svc.callback_subscriptions(after, LOAD_PAGE).await?;
            for sub in &page {
                ids.insert(sub.id);
                self.run(sub.clone());
            }
            match page.last() {
                Some(last) if page.len() == LOAD_PAGE => after = last.id,
                _ => break,
            }
        }
        // Ids are handed out in order: one above every id read may be newer than the read.
        if self.share.is_some()
            && let Some(&top) = ids.iter().max()
        {
            self.registry.remove(|s| s.id < top && !ids.contains(&s.id));
        }
        Ok(())
    }

    /// Whether this instance delivers the documents of the feed with id `feed`.
    fn owns(&self, feed: i64) -> bool {
        self.share.as_ref().is_none_or(|s| s.borrow().owns(feed))
    }

    /// Waits until this instance delivers for `feed`; false if the hub stops or the
    /// subscription ends first.
    async fn await_share(&self, feed: i64, w: &Worker) -> bool {
        let (Some(mut share), mut stop) = (self.share.clone(), self.stop.clone()) else { return true };
        loop {
            if share.borrow_and_update().owns(feed) {
                return true;
            }
            tokio::select! {
                changed = share.changed() => if changed.is_err() { return false },
                _ = stopping(&mut stop) => return false,
                _ = w.ended.notified() => return false,
            }
            if w.is_gone() {
                return false;
            }
        }
    }

    /// Resolves when the shards this instance holds change; never where there are none.
    async fn share_changed(&self) {
        match self.share.clone() {
            Some(mut share) => {
                share.mark_unchanged();
                let _ = share.changed().await;
            }
            None => std::future::pending().await,
        }
    }

    /// A subscription as stored now (another instance may have moved its progress).
    async fn stored(&self, feed: i64, id: i64) -> Result<Option<HubSubscription>, FeedError> {
        self.svc.callback_subscription(feed, id).await
    }

    /// Saves progress every [`ACK_EVERY`] and keeps house every [`HOUSEKEEPING`] until
    /// `stop`; then saves progress one last time.
    async fn background(self: Arc<Self>) {
        let mut stop = self.stop.clone();
        let mut acks = tokio::time::interval(ACK_EVERY);
        let mut house = tokio::time::interval(HOUSEKEEPING);
        acks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        house.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Where instances share the store, subscriptions made or removed through another
        // instance are picked up here.
        let mut reload = tokio::time::interval(RELOAD);
        reload.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = acks.tick() => self.save_progress().await,
                _ = house.tick() => self.housekeeping().await,
                _ = reload.tick(), if self.share.is_some() => {
                    if let Err(e) = self.load().await {
                        tracing::warn!(error = %e, "cannot read the WebSub subscriptions");
                    }
                }
                _ = stopping(&mut stop) => break,
            }
        }
        self.save_progress().await;
    }

    /// Starts the task of a subscription that is not running yet.
    fn run(self: &Arc<Self>, sub: HubSubscription) {
        if let Some(w) = self.registry.upsert(sub) {
            tokio::spawn(deliver::run(self.clone(), w));
        }
    }

    /// Records that subscription `id` was served up to outbox row `upto`; saved soon.
    fn ack(&self, id: i64, upto: i64) {
        let mut acks = self.acks.lock().unwrap_or_else(PoisonError::into_inner);
        let at = acks.entry(id).or_insert(upto);
        *at = (*at).max(upto);
    }

    /// Writes all recorded progress in one transaction; on failure keeps it for next time.
    async fn save_progress(&self) {
        let pending = std::mem::take(&mut *self.acks.lock().unwrap_or_else(PoisonError::into_inner));
        if pending.is_empty() {
            return;
        }
        let batch: Vec<(i64, i64)> = pending.iter().map(|(k, v)| (*k, *v)).collect();
        let saved = self.svc.save_delivered(batch).await;
        if let Err(e) = saved {
            tracing::warn!(error = %e, "cannot save WebSub delivery progress; will retry");
            for (id, upto) in pending {
                self.ack(id, upto);
            }
        }
    }

    /// Ends expired leases, prunes the outbox, and reads its gauges.
    async fn housekeeping(&self) {
        let (now, keep) = (now_ms(), self.config.max_backlog);
        match self.svc.websub_housekeeping(now, keep).await {
            Ok(Housekeeping { expired, pruned, stats }) => {
                if !expired.is_empty() {
                    let expired: HashSet<i64> = expired.into_iter().collect();
                    self.registry.remove(|s| expired.contains(&s.id));
                    tracing::info!(n = expired.len(), "WebSub leases ended");
                }
                if pruned > 0 {
                    tracing::debug!(rows = pruned, "outbox pruned");
                }
                let m = &self.metrics.hub;
                m.queue_depth.set(stats.rows as i64);
                let age = stats.oldest.map_or(0.0, |at| (now - at).max(0) as f64 / 1000.0);
                m.oldest_undelivered_seconds.set(age);
                m.subscriptions.set(self.registry.len() as i64);
            }
            Err(e) => tracing::warn!(error = %e, "WebSub housekeeping failed"),
        }
    }

    /// Stores a verified subscription (new or renewed) and makes sure its task runs.
    async fn subscribed(self: &Arc<Self>, intent: verify::Intent) -> Result<(), FeedError> {
        let expires = now_ms().saturating_add((intent.lease as i64).saturating_mul(1000));
        let sub = self
            .svc
            .subscribe_callback(CallbackSubscription {
                actor: intent.actor,
                feed: intent.feed,
                view: intent.view,
                topic: intent.topic,
                callback: intent.callback.to_string(),
                secret: intent.secret,
                expires,
            })
            .await?;
        self.run(sub);
        self.metrics.hub.subscriptions.set(self.registry.len() as i64);
        Ok(())
    }

    /// Ends the subscription of `callback` to `view` of `feed`: removed from the store, its
    /// task stopped. `actor` is who asked, or `None` when the callback said it is gone.
    async fn unsubscribed(
        &self,
        actor: Option<&str>,
        (feed, view, callback): (&str, &str, &str),
    ) -> Result<bool, FeedError> {
        let removed = self.svc.unsubscribe_callback(actor, feed, view, callback).await?;
        self.registry.remove(|s| s.view == view && s.callback == callback);
        self.metrics.hub.subscriptions.set(self.registry.len() as i64);
        Ok(removed)
    }

    /// The slot of one callback host, made on first use.
    fn host_slots(&self, host: &str) -> Arc<Semaphore> {
        let mut hosts = self.hosts.lock().unwrap_or_else(PoisonError::into_inner);
        hosts.entry(host.to_string()).or_insert_with(|| Arc::new(Semaphore::new(self.config.max_per_host))).clone()
    }

    /// Waits for a slot of `host`, then one of all: the permits of one request.
    async fn slots(
        &self,
        host: &str,
    ) -> Option<(tokio::sync::OwnedSemaphorePermit, tokio::sync::OwnedSemaphorePermit)> {
        let host = self.host_slots(host).acquire_owned().await.ok()?;
        let all = self.slots.clone().acquire_owned().await.ok()?;
        Some((host, all))
    }
}
