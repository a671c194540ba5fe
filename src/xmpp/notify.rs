//! Pushes: every committed change, to every subscription whose view it belongs to, as a
//! `headline` with the pubsub#event payload and the SHIM sync headers.
//!
//! Ordering: one task takes changes in commit order and queues their messages in that
//! order on one FIFO, so pushes to any one subscriber leave in commit order.
//!
//! Backpressure policy: pushes are best-effort, as Smart Feeds intends (a client that sees a
//! `PreviousCursor` it does not hold pulls what it missed). The writer hands changes over
//! without ever waiting; when more than `push.backlog` changes wait to be fanned out, new
//! ones are not pushed (counted and logged), so publishes and pulls never slow down for
//! push. Messages wait in their own bounded queue, which the link drains after replies.

use super::payloads::shim::SyncHeaders;
use super::payloads::{Headers, Push, PushBody, item_published, item_retracted};
use super::router::payload_element;
use crate::feed::{Change, FeedError, Payload};
use crate::metrics::Metrics;
use crate::store::{Store, Subscription};
use jid::Jid;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// Fans changes out to subscribers.
pub struct Notifier<S: Store> {
    store: S,
    me: Jid,
    /// After this many bounces in a row a JID's subscriptions are removed.
    bounce_limit: u32,
    bounces: Mutex<HashMap<String, u32>>,
    metrics: Arc<Metrics>,
}

/// The store's change sink: hands changes that have subscribers to the notifier, never
/// blocking the writer; drops them when the backlog is full.
pub fn change_sink(tx: mpsc::Sender<Change>, metrics: Arc<Metrics>) -> crate::store::ChangeSink {
    Box::new(move |changes: Vec<Change>| {
        for change in changes {
            if change.views.is_empty() {
                continue;
            }
            if tx.try_send(change).is_err() {
                metrics.pushes_dropped.inc();
                let n = metrics.pushes_dropped.get();
                if n.is_power_of_two() {
                    tracing::warn!(
                        dropped = n,
                        "push backlog full: changes are not pushed (subscribers pull to catch up)"
                    );
                }
            }
        }
    })
}

impl<S: Store> Notifier<S> {
    pub fn new(store: S, me: Jid, bounce_limit: u32, metrics: Arc<Metrics>) -> Self {
        Notifier { store, me, bounce_limit, bounces: Mutex::new(HashMap::new()), metrics }
    }

    /// Fans out changes until `stop` is set, then fans out what is already waiting and
    /// returns (dropping `out`, so the link can close once it is written).
    pub async fn run(
        &self,
        mut changes: mpsc::Receiver<Change>,
        out: mpsc::Sender<Push>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut n = 0u64;
        loop {
            let stopping = tokio::select! {
                c = changes.recv() => Err(c),
                r = stop.wait_for(|s| *s) => Ok(r.is_ok()),
            };
            let change = match stopping {
                Err(c) => c,
                Ok(_) => {
                    changes.close();
                    changes.recv().await
                }
            };
            let Some(change) = change else { return };
            let messages = match self.messages(&change, &mut n).await {
                Ok(m) => m,
                Err(e) => {
                    tracing::error!(feed = %change.feed, item = %change.item.id, error = %e, "cannot fan out a change");
                    continue;
                }
            };
            for m in messages {
                if out.send(m).await.is_err() {
                    return;
                }
                self.metrics.pushes_sent.inc();
            }
        }
    }

    /// The messages one change makes, in subscription order within each view. The copies of
    /// one view share one body per node name as subscribers wrote it (usually just one).
    async fn messages(&self, change: &Change, n: &mut u64) -> Result<Vec<Push>, FeedError> {
        let feed = change.feed.clone();
        let views: Vec<String> = change.views.iter().map(|v| v.view.clone()).collect();
        let subs: Vec<Vec<Subscription>> = self
            .store
            .read(move |tx| {
                let Some(f) = tx.feed(&feed)? else { return Ok(Vec::new()) };
                views.iter().map(|v| Ok(tx.subscribers(f.id, v)?)).collect()
            })
            .await?;
        let item = &change.item;
        // A retraction pushes `<retract id/>`; everything else the entry itself.
        let payload = match &item.payload {
            Payload::Entry(_) => Some(payload_element(item)?),
            Payload::Tombstone { .. } => None,
        };
        let from = self.me.to_string();
        let mut out = Vec::with_capacity(subs.iter().map(Vec::len).sum());
        for (vc, subs) in change.views.iter().zip(subs) {
            let headers = Headers::from(SyncHeaders {
                total_items: vc.count,
                previous_cursor: vc.previous.map(|c| c.to_string()),
                last_cursor: vc.last.to_string(),
            });
            let mut bodies: HashMap<String, Arc<PushBody>> = HashMap::new();
            for sub in subs {
                let body = match bodies.get(&sub.node) {
                    Some(body) => body.clone(),
                    None => {
                        let event = match &payload {
                            Some(entry) => item_published(&sub.node, &item.id, entry.clone()),
                            None => item_retracted(&sub.node, &item.id),
                        };
                        let body = PushBody::new(from.clone(), &event, &headers).map_err(|e| {
                            FeedError::Store(crate::store::StoreError::Backend(format!("push of {}: {e}", item.id)))
                        })?;
                        let body = Arc::new(body);
                        bodies.insert(sub.node.clone(), body.clone());
                        body
                    }
                };
                *n += 1;
                // The JID was checked when the subscription was made.
                out.push(Push { to: sub.jid, id: format!("push-{n}"), body });
            }
        }
        Ok(out)
    }

    /// A push came back as an error from `from`. Permanent errors count towards removal.
    pub async fn bounced(&self, from: &Jid, permanent: bool) {
        self.metrics.pushes_bounced.inc();
        if !permanent {
            return;
        }
        let jid = from.to_string();
        let count = {
            let mut b = self.bounces.lock().unwrap_or_else(|p| p.into_inner());
            let c = b.entry(jid.clone()).or_insert(0);
            *c += 1;
            *c
        };
        if count < self.bounce_limit {
            return;
        }
        self.bounces.lock().unwrap_or_else(|p| p.into_inner()).remove(&jid);
        let target = jid.clone();
        let removed = self.store.write(move |tx| Ok(tx.delete_subscriptions_of(&target)?)).await;
        match removed {
            Ok(n) => {
                self.metrics.subscriptions_removed.inc_by(n);
                tracing::warn!(%jid, bounces = count, removed = n, "pushes keep bouncing: unsubscribed");
            }
            Err(e) => tracing::error!(%jid, error = %e, "cannot remove the subscriptions of a bouncing JID"),
        }
    }

    /// `jid` showed it is alive (it sent us a request): its bounce count starts again.
    pub fn alive(&self, jid: &Jid) {
        let mut b = self.bounces.lock().unwrap_or_else(|p| p.into_inner());
        if !b.is_empty() {
            b.remove(&jid.to_string());
        }
    }
}
