//! One task per source: fetch, import, wait (the interval, or a backoff after failures, or
//! a ping), again. Tasks share nothing but the store and the outbound client's pool, so one
//! failing or slow source delays no other; parsing runs on blocking threads, so a large
//! document holds up no async worker; a fetch's changes are one write of the store, so
//! pulls, publishes and pushes only wait for that commit like for any other.

use crate::config::{Location, MAX_BACKOFF, Source};
use crate::fetch::{Answer, Fetcher, Validators};
use crate::history::{self, HistoryError};
use crate::websub::Subscriber;
use feed::ports::{Share, SourceState, Store};
use feed::service::{Imported, Service, SourceStatus};
use metrics::source::SourceMetrics;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, mpsc, watch};

/// How often an instance that does not fetch a source looks again whether it should.
const SHARE_RECHECK: Duration = Duration::from_secs(5);
/// Deliveries from the source's hub waiting for the task.
const DELIVERIES: usize = 16;

/// What a fetch came to.
#[derive(Debug)]
enum Outcome {
    Imported(Imported),
    NotModified,
    Gone,
    Failed(String),
}

impl Outcome {
    fn label(&self) -> &'static str {
        match self {
            Outcome::Imported(_) => "ok",
            Outcome::NotModified => "not_modified",
            Outcome::Gone => "gone",
            Outcome::Failed(_) => "error",
        }
    }
}

/// Everything one source's task needs.
pub struct Task<S: Store> {
    pub source: Source,
    pub svc: Service<S>,
    pub fetcher: Fetcher,
    pub metrics: Arc<SourceMetrics>,
    pub max_history: usize,
    /// Pings: a permit left while a fetch runs makes exactly one more fetch after it.
    pub ping: Arc<Notify>,
    /// The feeds this instance fetches, when instances share the store; `None`: all.
    pub share: Option<watch::Receiver<Share>>,
    /// Subscribes to the source's own hub, where the HTTP face has a public prefix.
    pub subscriber: Option<Arc<Subscriber>>,
}

/// The hub a fetched document names, and the topic to subscribe to there.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct HubLink {
    hub: String,
    topic: String,
}

impl<S: Store> Task<S> {
    /// Runs until the process ends, or the source answers `410 Gone`.
    pub async fn run(self) {
        let feed = self.source.feed.clone();
        let mut location = self.source.location.clone();
        let mut validators: Option<Validators> = None;
        let mut failures: u32 = 0;
        let mut status = SourceStatus { location: location.to_string(), ..SourceStatus::default() };
        let (deliveries_tx, mut deliveries_rx) = mpsc::channel(DELIVERIES);
        let mut hub: Option<HubLink> = None;
        // Whether a document was read since the process started, and so `hub` is known.
        let mut hub_read = false;
        let mut verifications = self.subscriber.as_ref().map(|s| s.verifications());
        // What the store keeps of the source, as last read or saved.
        let mut saved: Option<SourceState> = None;
        // Whether this instance fetched the source last time round (and so may hold a
        // subscription at its hub); whether a ping ended the last wait.
        let (mut was_owner, mut pinged) = (false, false);
        // Changes of the shares: an instance that stops fetching the source learns it while
        // it waits, not only at its next fetch (and leaves the source's hub at once).
        let mut share = self.share.clone();
        loop {
            let owner = self.owned().await;
            // The saved state is read when this instance starts fetching the source (at start,
            // or on taking it over) and for a fetch it makes for a ping only, not at every
            // fetch: while it keeps fetching, it saves what it holds itself. (Validators another
            // instance saved after a ping meanwhile are newer; older ones only cost one whole
            // document.)
            let stale = !owner || !was_owner;
            if owner {
                was_owner = true;
            } else {
                if std::mem::take(&mut was_owner)
                    && let Some(subscriber) = &self.subscriber
                {
                    // Another instance fetches it now, and subscribes at the hub itself.
                    subscriber.leave(&feed).await;
                }
                status.next_fetch = None;
                status.idle = Some("fetched by another instance".into());
                self.svc.sources().set(&feed, status.clone());
                // A ping is served by whoever receives it: the import is the same
                // transaction on any instance, so fetching twice publishes nothing twice.
                if !std::mem::take(&mut pinged) {
                    let ping = tokio::select! {
                        _ = self.ping.notified() => true,
                        _ = tokio::time::sleep(SHARE_RECHECK) => false,
                    };
                    if !ping {
                        continue;
                    }
                }
            }
            pinged = false;
            status.idle = None;
            if stale {
                self.load_state(&mut location, &mut validators, &mut saved).await;
            }
            let outcome = self.fetch_once(&mut location, &mut validators, &mut hub, &mut hub_read).await;
            self.metrics.fetch(outcome.label());
            let now = chrono::Utc::now();
            status.location = location.to_string();
            let delay = match &outcome {
                Outcome::Failed(why) => {
                    failures = failures.saturating_add(1);
                    if status.last_error.as_deref() != Some(why.as_str()) {
                        tracing::warn!(feed = %feed, source = %location, error = %why, failures, "source fetch failed; retrying with backoff");
                    }
                    status.last_error = Some(why.clone());
                    backoff(self.source.interval, failures)
                }
                Outcome::Gone => {
                    tracing::warn!(feed = %feed, source = %location, "source answered 410 Gone; no longer fetched");
                    status.idle = Some("the source answered 410 Gone".into());
                    status.next_fetch = None;
                    status.last_error = Some("410 Gone".into());
                    self.svc.sources().set(&feed, status);
                    self.save_state(&location, validators.as_ref(), &mut saved).await;
                    return;
                }
                ok => {
                    if status.last_error.take().is_some() {
                        tracing::info!(feed = %feed, source = %location, "source fetched again after failures");
                    }
                    failures = 0;
                    status.last_success = Some(now.timestamp_millis());
                    self.metrics.success(&feed, now.timestamp());
                    if let Outcome::Imported(i) = ok {
                        self.count(i);
                        if i.changed() {
                            tracing::info!(feed = %feed, published = i.published, updated = i.updated, retracted = i.retracted, "source imported");
                        }
                    }
                    self.source.interval
                }
            };
            status.next_fetch = Some(now.timestamp_millis() + delay.as_millis() as i64);
            self.svc.sources().set(&feed, status.clone());
            // Saved after the status is shown: what a fetch imported is committed already, and
            // `list-feeds` must not show its items beside "last success never" meanwhile.
            self.save_state(&location, validators.as_ref(), &mut saved).await;
            // Only the instance that fetches the source subscribes at its hub: one subscription,
            // not one per instance that served a ping.
            if let (true, Some(subscriber), Some(link)) = (owner, &self.subscriber, &hub) {
                subscriber.ensure(&feed, &link.hub, &link.topic, &deliveries_tx).await;
            }
            // An instance that does not fetch the source looks again soon whether it should.
            let delay = if owner { delay } else { delay.min(SHARE_RECHECK) };
            // Until the next fetch: a ping cuts the wait short, deliveries from the hub are
            // imported as they come, the subscription to the hub is renewed when its time
            // comes.
            let next = tokio::time::Instant::now() + delay;
            loop {
                // Seen before the renewal time is read: a verification after this wakes
                // the wait below, to read it again.
                if let Some(v) = verifications.as_mut() {
                    v.borrow_and_update();
                }
                let renew = match (owner, &self.subscriber, &hub) {
                    (true, Some(subscriber), Some(_)) => subscriber.renew_at(&feed).map(tokio::time::Instant::from_std),
                    _ => None,
                };
                tokio::select! {
                    _ = self.ping.notified() => {
                        pinged = true;
                        break;
                    }
                    _ = tokio::time::sleep_until(next) => break,
                    Some(()) = async { verifications.as_mut()?.changed().await.ok() } => {}
                    Some(()) = async { share.as_mut()?.changed().await.ok() } => {
                        if owner && !self.owned().await {
                            break;
                        }
                    }
                    _ = tokio::time::sleep_until(renew.unwrap_or(next)), if renew.is_some_and(|r| r < next) => {
                        if let (Some(subscriber), Some(link)) = (&self.subscriber, &hub) {
                            subscriber.ensure(&feed, &link.hub, &link.topic, &deliveries_tx).await;
                        }
                    }
                    Some(body) = deliveries_rx.recv() => {
                        let outcome = self.import_document(body, None).await;
                        self.metrics.fetch(if matches!(outcome, Outcome::Failed(_)) { "error" } else { "delivered" });
                        match outcome {
                            Outcome::Imported(i) => self.count(&i),
                            Outcome::Failed(why) => tracing::warn!(feed = %feed, error = %why, "a delivery from the source's hub could not be imported"),
                            _ => {}
                        }
                    }
                }
            }
        }
    }

    /// Whether this instance fetches the source now.
    async fn owned(&self) -> bool {
        let Some(share) = &self.share else { return true };
        let share = share.borrow().clone();
        match self.svc.feed_id(&self.source.feed).await {
            Ok(Some(id)) => share.owns(id),
            _ => false,
        }
    }

    /// Takes where the source is fetched from and its validators from the store, as the last
    /// fetch (by this process, an earlier one or another instance) left them: a restart goes
    /// on with a conditional GET of the URL a permanent redirect moved it to. What was saved
    /// for another configured URL is ignored. A store that cannot be read leaves them as they
    /// are.
    async fn load_state(
        &self,
        location: &mut Location,
        validators: &mut Option<Validators>,
        saved: &mut Option<SourceState>,
    ) {
        if !matches!(self.source.location, Location::Web(_)) {
            return;
        }
        let state = match self.svc.source_state(&self.source.feed).await {
            Ok(Some(state)) if state.configured == self.source.configured => state,
            Ok(_) => return,
            Err(e) => {
                tracing::debug!(feed = %self.source.feed, error = %e, "the source's saved state could not be read");
                return;
            }
        };
        if saved.as_ref() == Some(&state) {
            return;
        }
        if let Ok(url) = url::Url::parse(&state.location) {
            let moved = Location::Web(url);
            if moved != *location {
                tracing::info!(feed = %self.source.feed, source = %moved, "source fetched from where it moved permanently");
            }
            *location = moved;
        }
        *validators = (state.etag.is_some() || state.last_modified.is_some())
            .then(|| Validators { etag: state.etag.clone(), last_modified: state.last_modified.clone() });
        *saved = Some(state);
    }

    /// Saves where the source is fetched from and its validators, when they changed.
    async fn save_state(&self, location: &Location, validators: Option<&Validators>, saved: &mut Option<SourceState>) {
        if !matches!(location, Location::Web(_)) {
            return;
        }
        let state = SourceState {
            configured: self.source.configured.clone(),
            location: location.to_string(),
            etag: validators.and_then(|v| v.etag.clone()),
            last_modified: validators.and_then(|v| v.last_modified.clone()),
        };
        let unchanged = saved.as_ref().map_or_else(
            // Nothing saved yet and nothing worth saving: the source as configured, no validators.
            || {
                state.location == self.source.location.to_string()
                    && state.etag.is_none()
                    && state.last_modified.is_none()
            },
            |s| *s == state,
        );
        if unchanged {
            return;
        }
        match self.svc.save_source_state(&self.source.feed, state.clone()).await {
            Ok(()) => *saved = Some(state),
            Err(e) => tracing::warn!(feed = %self.source.feed, error = %e, "the source's state could not be saved"),
        }
    }

    fn count(&self, i: &Imported) {
        for (change, n) in [
            ("published", i.published),
            ("updated", i.updated),
            ("unchanged", i.unchanged),
            ("retracted", i.retracted),
            ("too_big", i.too_big),
        ] {
            self.metrics.entries(change, n);
        }
    }

    /// One fetch: the document (conditionally), its history when needed, one import. Notes
    /// the hub the document names in `hub`, and that it is known in `hub_read`. Where the
    /// source's hub could be subscribed to and no document was read yet (validators saved
    /// by an earlier process or another instance would make it a `304`, which names no
    /// hub), the fetch asks for the whole document.
    async fn fetch_once(
        &self,
        location: &mut Location,
        validators: &mut Option<Validators>,
        hub: &mut Option<HubLink>,
        hub_read: &mut bool,
    ) -> Outcome {
        let feed = &self.source.feed;
        let conditional = if self.subscriber.is_none() || *hub_read { validators.as_ref() } else { None };
        let fetched = match self.fetcher.fetch(location, conditional).await {
            Ok(f) => f,
            Err(e) => return Outcome::Failed(e.to_string()),
        };
        if let Some(to) = fetched.moved {
            tracing::warn!(feed = %feed, from = %location, to = %to, "source moved permanently; fetched from its new URL from now on");
            *location = Location::Web(to);
        }
        let (body, url, header_hub, header_topic, new_validators) = match fetched.answer {
            Answer::NotModified => return Outcome::NotModified,
            Answer::Gone => return Outcome::Gone,
            Answer::Document(got) => {
                let got = *got;
                (got.body, got.url, got.hub, got.topic, got.validators)
            }
        };
        let doc = match history::parse_off_thread(body).await {
            Ok(d) => d,
            Err(e) => return Outcome::Failed(e.to_string()),
        };
        if url.scheme() != "file" {
            let found = header_hub.or_else(|| doc.hub.clone()).and_then(|h| url.join(&h).ok());
            let topic = header_topic.or_else(|| doc.self_link.clone()).and_then(|t| url.join(&t).ok());
            *hub_read = true;
            *hub = found.map(|h| HubLink {
                hub: h.to_string(),
                topic: topic.map_or_else(|| url.to_string(), |t| t.to_string()),
            });
        }
        let outcome = self.import(doc, &url).await;
        if matches!(outcome, Outcome::Imported(_)) {
            // Only once the document is imported: a failed import is asked for whole again.
            *validators = Some(new_validators);
        }
        outcome
    }

    /// A document the source's hub delivered, imported like a fetched one.
    async fn import_document(&self, body: Vec<u8>, url: Option<&url::Url>) -> Outcome {
        let doc = match history::parse_off_thread(body).await {
            Ok(d) => d,
            Err(e) => return Outcome::Failed(e.to_string()),
        };
        let base = match (url, &self.source.location) {
            (Some(u), _) | (None, Location::Web(u)) => u.clone(),
            (None, Location::File(_)) => return Outcome::Failed("a delivery for a file source".into()),
        };
        self.import(doc, &base).await
    }

    /// A read document's entries, completed from its archives, imported in one transaction.
    async fn import(&self, doc: crate::document::Document, url: &url::Url) -> Outcome {
        let feed = &self.source.feed;
        if doc.skipped > 0 {
            tracing::debug!(feed = %feed, skipped = doc.skipped, "source entries without an id or link, or unwritable, left out");
        }
        let entries = match history::complete(&self.svc, feed, &self.fetcher, doc, url, self.max_history).await {
            Ok(e) => e,
            Err(HistoryError::Store(e)) => return Outcome::Failed(format!("the store: {e}")),
            Err(e) => return Outcome::Failed(e.to_string()),
        };
        match self.svc.import(feed, entries).await {
            Ok(imported) => Outcome::Imported(imported),
            Err(e) => Outcome::Failed(format!("the store: {e}")),
        }
    }
}

/// The wait after `failures` failures in a row: the interval, doubling with each further
/// failure, at most one day.
pub fn backoff(interval: Duration, failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(20);
    interval.saturating_mul(1 << doublings).min(MAX_BACKOFF.max(interval))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_the_interval_up_to_a_day() {
        let i = Duration::from_secs(900);
        assert_eq!(backoff(i, 1), i);
        assert_eq!(backoff(i, 2), 2 * i);
        assert_eq!(backoff(i, 4), 8 * i);
        assert_eq!(backoff(i, 10), MAX_BACKOFF);
        assert_eq!(backoff(i, u32::MAX), MAX_BACKOFF);
    }
}
