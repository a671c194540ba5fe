//! Fan-out, decided here for every face: who gets a committed change, and what happens to
//! a subscriber whose pushes keep failing. Faces only format and deliver.

use super::Service;
use crate::change::{Change, ViewChange};
use crate::error::FeedError;
use crate::ports::{Store, Subscription};
use std::sync::PoisonError;

/// A change's recipients in one view: what the view saw, and its subscriptions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recipients<'a> {
    pub view: &'a ViewChange,
    pub subscriptions: Vec<Subscription>,
}

/// What a failed push means for its subscriber.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bounce {
    /// Counted; the subscriber keeps its subscriptions.
    Counted(u32),
    /// The limit was reached: this many subscriptions were removed.
    Unsubscribed(u64),
    /// A temporary failure: not counted.
    Ignored,
}

impl<S: Store> Service<S> {
    /// Every subscription each view of `change` has now, in the order of `change.views`.
    pub async fn recipients<'a>(&self, change: &'a Change) -> Result<Vec<Recipients<'a>>, FeedError> {
        let feed = change.feed.clone();
        let views: Vec<String> = change.views.iter().map(|v| v.view.clone()).collect();
        let subs: Vec<Vec<Subscription>> = self
            .store
            .read(move |tx| {
                let Some(f) = tx.feed(&feed)? else { return Ok(Vec::new()) };
                views.iter().map(|v| Ok(tx.subscribers(f.id, v)?)).collect()
            })
            .await?;
        Ok(change.views.iter().zip(subs).map(|(view, subscriptions)| Recipients { view, subscriptions }).collect())
    }

    /// A push to `jid` failed. Permanent failures count; after the policy's bounce limit in
    /// a row, every subscription of exactly that JID is removed (a subscriber that is gone
    /// for good would otherwise cost a push per change forever).
    pub async fn bounced(&self, jid: &str, permanent: bool) -> Result<Bounce, FeedError> {
        if !permanent {
            return Ok(Bounce::Ignored);
        }
        let count = {
            let mut b = self.bounces.lock().unwrap_or_else(PoisonError::into_inner);
            let c = b.entry(jid.to_string()).or_insert(0);
            *c += 1;
            *c
        };
        if count < self.policy.bounce_limit {
            return Ok(Bounce::Counted(count));
        }
        self.bounces.lock().unwrap_or_else(PoisonError::into_inner).remove(jid);
        let target = jid.to_string();
        let removed = self.store.write(move |tx| Ok(tx.delete_subscriptions_of(&target)?)).await?;
        Ok(Bounce::Unsubscribed(removed))
    }

    /// `jid` showed it is alive (it sent a request): its bounce count starts again.
    pub fn alive(&self, jid: &str) {
        let mut b = self.bounces.lock().unwrap_or_else(PoisonError::into_inner);
        if !b.is_empty() {
            b.remove(jid);
        }
    }
}
