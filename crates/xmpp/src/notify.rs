//! Pushes: every committed change, to every subscription whose view it belongs to, as a
//! `headline` with the pubsub#event payload and the SHIM sync headers.
//!
//! Ordering: one task takes changes in commit order and queues their messages in that
//! order on one FIFO, so pushes to any one subscriber leave in commit order. A change whose
//! subscribers cannot be read (the database restarting) is asked about again until they
//! can: no later change overtakes it. Receipts on the queue go to the link behind the
//! pushes before them (see [`feed::receipt`]).
//!
//! Multicast: while the link knows the server's XEP-0033 service, each change's pushes are
//! grouped by identical push and sent as `bcc` batches through it (see
//! [`super::multicast`]); a refusal from the service comes back here, on the same task, so
//! the refused batch is resent one by one before any later change is fanned out. Batches
//! sent before the first refusal arrived may be refused too: so after it, a probe is
//! queued behind them and no change is fanned out until the service has answered it
//! (at most [`SETTLE_WAIT`]), each refusal meanwhile resent as it comes. Every subscriber
//! thus gets its pushes in commit order also across the switch.
//!
//! Backpressure policy: pushes are best-effort, as Smart Feeds intends (a client that sees a
//! `PreviousCursor` it does not hold pulls what it missed). The writer hands changes over
//! without ever waiting; when more than `push.backlog` changes wait to be fanned out, new
//! ones are not pushed (counted and logged), so publishes and pulls never slow down for
//! push. Messages wait in their own bounded queue, which the link drains after replies.

use super::multicast::{Limits, LinkMulticast, Outgoing};
use super::payloads::event::headline_text;
use super::payloads::shim::SyncHeaders;
use super::payloads::{Headers, Push, PushBody};
use feed::ports::{Store, StoreError};
use feed::service::{Bounce, Service};
use feed::{Change, FeedError, Payload, ToPush};
use jid::Jid;
use metrics::Metrics;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Formats changes as headlines for their subscribers; the core says who they are.
pub struct Notifier<S: Store> {
    svc: Service<S>,
    me: Jid,
    metrics: Arc<Metrics>,
    multicast: Arc<LinkMulticast>,
    limits: Limits,
}

/// How long fan-out waits, after a first refusal, for the service to answer the probe.
pub const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
/// The longest pause between attempts to read a change's subscribers while the store fails.
const RETRY_MAX: std::time::Duration = std::time::Duration::from_millis(500);

/// What the fan-out loop takes next.
enum Next {
    Service(FromService),
    Change(Option<ToPush>),
    Stop,
}

/// What the multicast service said about our messages.
#[derive(Debug, Clone)]
pub enum FromService {
    /// It refused the message with stanza id `id` with the error `condition` (e.g.
    /// `forbidden`).
    Refused { id: String, condition: String },
    /// It answered the probe with this stanza id: every earlier message is settled.
    Answered(String),
}

/// The process is stopping and fan-out cannot go on in order.
struct Stopping;

/// A push could not be written as XML (a node name or id no XML can carry).
#[derive(Debug, thiserror::Error)]
#[error("cannot encode the push of {item}: {err}")]
pub struct EncodeError {
    item: String,
    err: std::io::Error,
}

/// The `<body>` of pushes of `item` in `feed`, a chat client's line (its title and link),
/// when the feed asks for one (`push_body`): chat clients show a push only with a body.
pub fn chat_text<S: Store>(svc: &Service<S>, feed: &str, item: &feed::Item) -> Option<String> {
    match &item.payload {
        Payload::Entry(xml) if svc.policy().feed(feed).push_body => headline_text(xml),
        _ => None,
    }
}

/// The store's change sink: hands changes that have subscribers to the notifier, never
/// blocking the writer; drops them when the backlog is full.
pub fn change_sink(tx: mpsc::Sender<ToPush>, metrics: Arc<Metrics>) -> feed::ports::ChangeSink {
    Box::new(move |changes: Vec<Change>| {
        for change in changes {
            if change.views.is_empty() {
                continue;
            }
            if tx.try_send(ToPush::Change(change)).is_err() {
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
    pub fn new(svc: Service<S>, me: Jid, metrics: Arc<Metrics>, multicast: Arc<LinkMulticast>) -> Self {
        Notifier { svc, me, metrics, multicast, limits: Limits::default() }
    }

    /// Fans out changes until `stop` is set, then fans out what is already waiting and
    /// returns (dropping `out`, so the link can close once it is written). A refusal from
    /// the multicast service is handled before the next change.
    pub async fn run(
        &self,
        mut changes: mpsc::Receiver<ToPush>,
        mut service: mpsc::UnboundedReceiver<FromService>,
        out: mpsc::Sender<Outgoing>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut n = 0u64;
        loop {
            // Each branch only says what came, so no future of the select (the guard
            // `wait_for` returns may not live across an await) is alive while it is handled.
            let next = tokio::select! {
                biased;
                Some(said) = service.recv() => Next::Service(said),
                c = changes.recv() => Next::Change(c),
                _ = stop.wait_for(|s| *s) => Next::Stop,
            };
            let change = match next {
                Next::Service(FromService::Refused { id, condition }) => {
                    if !self.refused(&id, &condition, &mut service, &out).await {
                        return;
                    }
                    continue;
                }
                // A probe answered late, after fan-out stopped waiting for it.
                Next::Service(FromService::Answered(_)) => continue,
                Next::Change(c) => c,
                Next::Stop => {
                    changes.close();
                    changes.recv().await
                }
            };
            let change = match change {
                None => return,
                Some(ToPush::Receipt(r)) => {
                    if !self.send(Outgoing::Receipt(r), &out).await {
                        return;
                    }
                    continue;
                }
                Some(ToPush::Change(c)) => c,
            };
            let pushes = match self.messages_in_turn(&change, &mut n, &stop).await {
                Ok(Some(pushes)) => pushes,
                Ok(None) => continue,
                // Nothing after it may go out before it: what waits stays unpushed (the
                // shared push log keeps it for the next owner).
                Err(Stopping) => return,
            };
            for o in self.multicast.plan(pushes, self.limits) {
                if !self.send(o, &out).await {
                    return;
                }
            }
        }
    }

    /// Queues one stanza for the link; false once the link is gone.
    async fn send(&self, o: Outgoing, out: &mpsc::Sender<Outgoing>) -> bool {
        let (recipients, multicast) = (o.recipients() as u64, matches!(o, Outgoing::Multicast(_)));
        if out.send(o).await.is_err() {
            return false;
        }
        self.metrics.pushes_sent.inc_by(recipients);
        if multicast {
            self.metrics.multicast_messages.inc();
        }
        true
    }

    /// The service refused a multicast message: its pushes go out one by one, and multicast
    /// stops for this connection (logged once). After the first refusal, waits for the
    /// service to settle the messages sent before it (see the module docs).
    async fn refused(
        &self,
        id: &str,
        condition: &str,
        service: &mut mpsc::UnboundedReceiver<FromService>,
        out: &mpsc::Sender<Outgoing>,
    ) -> bool {
        let Some(first) = self.resend(id, condition, out).await else { return false };
        let Some(probe) = first.then(|| self.multicast.probe()).flatten() else { return true };
        let probe_id = probe.id().to_string();
        if !self.send(Outgoing::Probe(Box::new(probe)), out).await {
            return false;
        }
        let deadline = tokio::time::Instant::now() + SETTLE_WAIT;
        loop {
            match tokio::time::timeout_at(deadline, service.recv()).await {
                Ok(Some(FromService::Refused { id, condition })) => {
                    if self.resend(&id, &condition, out).await.is_none() {
                        return false;
                    }
                }
                Ok(Some(FromService::Answered(id))) if id == probe_id => return true,
                Ok(Some(FromService::Answered(_))) => {}
                Ok(None) => return true,
                Err(_) => {
                    tracing::warn!(wait = ?SETTLE_WAIT, "the multicast service did not answer a probe; fanning out again");
                    return true;
                }
            }
        }
    }

    /// Resends the refused message `id` one by one; whether it was the first refusal on
    /// this connection, or `None` once the link is gone.
    async fn resend(&self, id: &str, condition: &str, out: &mpsc::Sender<Outgoing>) -> Option<bool> {
        let Some(refusal) = self.multicast.refusal(id, condition) else { return Some(false) };
        self.metrics.multicast_refusals.inc();
        if refusal.first {
            tracing::warn!(
                %id,
                %condition,
                resent = refusal.resend.len(),
                "the multicast service refused a push message: one message per subscriber until the next login"
            );
        }
        for push in refusal.resend {
            if !self.send(Outgoing::Single(push), out).await {
                return None;
            }
        }
        Some(refusal.first)
    }

    /// The messages of `change`, asked for again while the store fails for a while (a
    /// database restarting or failing over), so that no later change is pushed before it.
    /// `None` when it cannot ever be pushed (logged); [`Stopping`] when the store still
    /// fails once the process is stopping.
    async fn messages_in_turn(
        &self,
        change: &Change,
        n: &mut u64,
        stop: &tokio::sync::watch::Receiver<bool>,
    ) -> Result<Option<Vec<Push>>, Stopping> {
        let mut pause = std::time::Duration::from_millis(50);
        let mut failed = 0u32;
        loop {
            let e = match self.messages(change, n).await {
                Ok(m) => {
                    if failed > 0 {
                        tracing::info!(feed = %change.feed, item = %change.item.id, failed, "fanned out a change after the store came back");
                    }
                    return Ok(Some(m));
                }
                Err(e) => e,
            };
            let passing = matches!(
                e.downcast_ref::<FeedError>(),
                Some(FeedError::Store(StoreError::Busy(_) | StoreError::Full(_) | StoreError::Backend(_)))
            );
            if !passing {
                tracing::error!(feed = %change.feed, item = %change.item.id, error = %e, "cannot fan out a change; not pushed");
                return Ok(None);
            }
            if *stop.borrow() {
                tracing::warn!(feed = %change.feed, item = %change.item.id, error = %e, "stopping while the store fails: changes left unpushed");
                return Err(Stopping);
            }
            failed += 1;
            if failed == 1 {
                tracing::warn!(feed = %change.feed, item = %change.item.id, error = %e, "cannot fan out a change yet; later changes wait for it");
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(RETRY_MAX);
        }
    }

    /// The messages one change makes, in subscription order within each view. The copies of
    /// one view share one body per node name as subscribers wrote it (usually just one).
    async fn messages(&self, change: &Change, n: &mut u64) -> anyhow::Result<Vec<Push>> {
        let recipients = self.svc.recipients(change).await?;
        let item = &change.item;
        let from = self.me.to_string();
        let text = chat_text(&self.svc, &change.feed, item);
        let mut out = Vec::with_capacity(recipients.iter().map(|r| r.subscriptions.len()).sum());
        for r in recipients {
            let headers = Headers::from(SyncHeaders::of(r.view));
            let mut bodies: HashMap<String, Arc<PushBody>> = HashMap::new();
            for sub in r.subscriptions {
                let body = match bodies.get(&sub.node) {
                    Some(body) => body.clone(),
                    None => {
                        let body = PushBody::of(from.clone(), &sub.node, item, &headers, text.as_deref())
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
