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
use super::payloads::{Headers, Push, PushBody};
use crate::feed::ports::Store;
use crate::feed::service::{Bounce, Service};
use crate::feed::{Change, Payload};
use crate::metrics::Metrics;
use jid::Jid;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Formats changes as headlines for their subscribers; the core says who they are.
pub struct Notifier<S: Store> {
    svc: Service<S>,
    me: Jid,
    metrics: Arc<Metrics>,
}

/// A push could not be written as XML (a node name or id no XML can carry).
#[derive(Debug, thiserror::Error)]
#[error("cannot encode the push of {item}: {err}")]
pub struct EncodeError {
    item: String,
    err: std::io::Error,
}

/// The store's change sink: hands changes that have subscribers to the notifier, never
/// blocking the writer; drops them when the backlog is full.
pub fn change_sink(tx: mpsc::Sender<Change>, metrics: Arc<Metrics>) -> crate::feed::ports::ChangeSink {
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
    pub fn new(svc: Service<S>, me: Jid, metrics: Arc<Metrics>) -> Self {
        Notifier { svc, me, metrics }
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
    async fn messages(&self, change: &Change, n: &mut u64) -> anyhow::Result<Vec<Push>> {
        let recipients = self.svc.recipients(change).await?;
        let item = &change.item;
        // A retraction pushes `<retract id/>`; everything else the entry as stored.
        let entry = match &item.payload {
            Payload::Entry(xml) => Some(xml.as_str()),
            Payload::Tombstone { .. } => None,
        };
        let from = self.me.to_string();
        let mut out = Vec::with_capacity(recipients.iter().map(|r| r.subscriptions.len()).sum());
        for r in recipients {
            let headers = Headers::from(SyncHeaders {
                total_items: r.view.count,
                previous_cursor: r.view.previous.map(|c| c.to_string()),
                last_cursor: r.view.last.to_string(),
            });
            let mut bodies: HashMap<String, Arc<PushBody>> = HashMap::new();
            for sub in r.subscriptions {
                let body = match bodies.get(&sub.node) {
                    Some(body) => body.clone(),
                    None => {
                        let body = PushBody::new(from.clone(), &sub.node, &item.id, entry, &headers)
                            .map_err(|err| EncodeError { item: item.id.clone(), err })?;
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

    /// A push came back as an error from `from`; the core decides what that costs it.
    pub async fn bounced(&self, from: &Jid, permanent: bool) {
        self.metrics.pushes_bounced.inc();
        let jid = from.to_string();
        match self.svc.bounced(&jid, permanent).await {
            Ok(Bounce::Unsubscribed(n)) => {
                self.metrics.subscriptions_removed.inc_by(n);
                tracing::warn!(%jid, removed = n, "pushes keep bouncing: unsubscribed");
            }
            Ok(Bounce::Counted(_) | Bounce::Ignored) => {}
            Err(e) => tracing::error!(%jid, error = %e, "cannot remove the subscriptions of a bouncing JID"),
        }
    }

    /// `jid` showed it is alive (it sent us a request): its bounce count starts again.
    pub fn alive(&self, jid: &Jid) {
        self.svc.alive(jid.as_str());
    }
}
