//! WebSub state (SPEC §10): subscriptions of callbacks to views, their delivery progress,
//! leases and the outbox. The hub (a face) verifies intent and POSTs documents; every change
//! to this state is made here, so its rules are the policy's, like every other face's.

use super::{Service, no_feed};
use crate::error::FeedError;
use crate::outbox::{HubSubscription, OutboxEntry, OutboxStats};
use crate::policy::Action;
use crate::ports::Store;

/// A verified request to subscribe a callback to a view.
#[derive(Clone, Debug)]
pub struct CallbackSubscription {
    /// Who asked (a bare JID, or empty for an anonymous request).
    pub actor: String,
    pub feed: String,
    /// The canonical view.
    pub view: String,
    /// The topic as the subscriber gave it.
    pub topic: String,
    pub callback: String,
    pub secret: Option<String>,
    /// When the lease ends, Unix milliseconds.
    pub expires: i64,
}

/// What one round of housekeeping did.
#[derive(Clone, Debug)]
pub struct Housekeeping {
    /// Subscriptions whose lease had ended, now removed.
    pub expired: Vec<i64>,
    /// Outbox rows pruned past the backlog bound.
    pub pruned: u64,
    /// The outbox's size and age after pruning.
    pub stats: OutboxStats,
}

impl<S: Store> Service<S> {
    /// Stores a verified subscription (new, or renewed with a new lease and secret). The
    /// requester must be allowed to read the feed, at verification as at the request.
    pub async fn subscribe_callback(&self, sub: CallbackSubscription) -> Result<HubSubscription, FeedError> {
        self.may(&sub.actor, Action::Read, &sub.feed)?;
        self.store
            .write(move |tx| {
                let feed = tx.feed(&sub.feed)?.ok_or_else(|| no_feed(&sub.feed))?;
                Ok(tx.put_hub_subscription(&HubSubscription {
                    id: 0,
                    feed: feed.id,
                    view: sub.view,
                    topic: sub.topic,
                    callback: sub.callback,
                    secret: sub.secret,
                    expires: sub.expires,
                    delivered: 0,
                })?)
            })
            .await
    }

    /// Removes a verified unsubscription; false when there was none. `actor` is who asked
    /// (who must be allowed to read the feed), or `None` when the callback itself said it is
    /// gone (410).
    pub async fn unsubscribe_callback(
        &self,
        actor: Option<&str>,
        feed: &str,
        view: &str,
        callback: &str,
    ) -> Result<bool, FeedError> {
        if let Some(actor) = actor {
            self.may(actor, Action::Read, feed)?;
        }
        let (f, v, c) = (feed.to_string(), view.to_string(), callback.to_string());
        self.store
            .write(move |tx| match tx.feed(&f)? {
                Some(row) => Ok(tx.delete_hub_subscription(row.id, &v, &c)?),
                None => Ok(false),
            })
            .await
    }

    /// Stored subscriptions by id, strictly after `after`, at most `limit`.
    pub async fn callback_subscriptions(&self, after: i64, limit: usize) -> Result<Vec<HubSubscription>, FeedError> {
        self.store.read(move |tx| Ok(tx.hub_subscriptions(after, limit)?)).await
    }

    /// One subscription as stored now (another instance may have moved its progress).
    pub async fn callback_subscription(&self, feed: i64, id: i64) -> Result<Option<HubSubscription>, FeedError> {
        let subs = self.store.read(move |tx| Ok(tx.hub_subscribers(feed)?)).await?;
        Ok(subs.into_iter().find(|s| s.id == id))
    }

    /// Up to `limit` outbox rows of a view after row `after`, in commit order.
    pub async fn outbox(
        &self,
        feed: i64,
        view: String,
        after: i64,
        limit: usize,
    ) -> Result<Vec<OutboxEntry>, FeedError> {
        self.store.read(move |tx| Ok(tx.outbox(feed, &view, after, limit)?)).await
    }

    /// Saves delivery progress, `(subscription id, outbox row delivered up to)`, in one
    /// transaction.
    pub async fn save_delivered(&self, progress: Vec<(i64, i64)>) -> Result<(), FeedError> {
        self.store
            .write(move |tx| {
                for (id, upto) in &progress {
                    tx.hub_delivered(*id, *upto)?;
                }
                Ok(())
            })
            .await
    }

    /// Ends the leases past `now`, keeps at most `keep` outbox rows per view, and reads the
    /// outbox's gauges, in one transaction.
    pub async fn websub_housekeeping(&self, now: i64, keep: u64) -> Result<Housekeeping, FeedError> {
        self.store
            .write(move |tx| {
                let expired = tx.expire_hub_subscriptions(now)?;
                let pruned = tx.prune_outbox(keep)?;
                Ok(Housekeeping { expired, pruned, stats: tx.outbox_stats()? })
            })
            .await
    }
}
