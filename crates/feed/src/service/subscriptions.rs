//! Subscriptions: subscribe, unsubscribe, list one's own.

use super::{PullRequest, Service, no_feed};
use crate::change::ViewChange;
use crate::error::FeedError;
use crate::node::NodeName;
use crate::policy::Action;
use crate::ports::{Store, Subscription};
use crate::{Cursor, Item};

/// A view's last published item, as a push of it to a new subscriber carries it.
pub struct LastPublished {
    pub feed: String,
    pub item: Item,
    /// The view's count and the item's place in it: the push's headers.
    pub view: ViewChange,
}

impl<S: Store> Service<S> {
    /// What a new subscription to `node` starts with when its feed says
    /// `send_last_published_item = on_sub` (XEP-0060 §12.12): the view's last published
    /// item (the newest by the view's time) with the headers a push of it carries (the
    /// view's count, the cursor before it, its own), so the subscriber's chain of cursors
    /// starts there. `None` when the feed says `never` or the view is empty.
    pub async fn last_published(&self, actor: &str, node: &str) -> Result<Option<LastPublished>, FeedError> {
        let view = self.view(actor, node, Action::Read)?;
        if !self.policy.feed(&view.feed).last_on_subscribe {
            return Ok(None);
        }
        let asked = PullRequest { node: node.to_string(), max_items: Some(2), ..PullRequest::default() };
        let page = self.pull(actor, asked).await?;
        Ok(newest_of(page.items, page.cursors).map(|(item, last, previous)| LastPublished {
            view: ViewChange { view: view.canonical(), count: page.count, previous, last },
            feed: view.feed,
            item,
        }))
    }

    /// Subscribes `jid` (which must be the sender's own, bare or full) to a view.
    pub async fn subscribe(&self, actor: &str, node: &str, jid: &str) -> Result<Subscription, FeedError> {
        let view = self.view(actor, node, Action::Read)?;
        let canonical = view.canonical();
        let sub = Subscription {
            node: node.to_string(),
            subid: format!("{:08x}", crc32fast::hash(format!("{canonical} {jid}").as_bytes())),
            view: canonical,
            jid: jid.to_string(),
        };
        let stored = sub.clone();
        let (per_jid, per_feed) =
            (self.policy.limits.max_subscriptions_per_jid, self.policy.limits.max_subscriptions_per_feed);
        let (actor, policy) = (actor.to_string(), self.policy.clone());
        self.store
            .write(move |tx| {
                let feed = tx.feed(&view.feed)?.ok_or_else(|| no_feed(&view.feed))?;
                policy.may(&actor, Action::Subscribe(&stored.jid), &feed.name)?;
                let own = tx.subscriptions_of(&actor)?;
                let renewal = own.iter().any(|s| s.view == stored.view && s.jid == stored.jid);
                if !renewal && own.len() as u64 >= per_jid {
                    return Err(FeedError::PolicyViolation(format!("{actor} already has {per_jid} subscriptions")));
                }
                if !renewal && tx.subscription_count(feed.id)? >= per_feed {
                    return Err(FeedError::PolicyViolation(format!("{} has {per_feed} subscriptions", feed.name)));
                }
                Ok(tx.put_subscription(feed.id, &stored)?)
            })
            .await?;
        Ok(sub)
    }

    /// Removes `jid`'s subscription to a view (`jid` must be the sender's own).
    pub async fn unsubscribe(&self, actor: &str, node: &str, jid: &str) -> Result<(), FeedError> {
        self.may(actor, Action::Unsubscribe(jid), "")?;
        self.remove_subscription(node, jid).await
    }

    /// Removes `jid`'s subscription to the view `node` names, whoever asks.
    pub(super) async fn remove_subscription(&self, node: &str, jid: &str) -> Result<(), FeedError> {
        let name = NodeName::parse(node)?;
        let order = self.policy.feed(&name.feed).order;
        let view = name.resolve(order);
        let (canonical, jid, node) = (view.canonical(), jid.to_string(), node.to_string());
        self.store
            .write(move |tx| {
                let feed = tx.feed(&view.feed)?.ok_or_else(|| no_feed(&view.feed))?;
                if tx.delete_subscription(feed.id, &canonical, &jid)? {
                    Ok(())
                } else {
                    Err(FeedError::NotSubscribed(node))
                }
            })
            .await
    }

    /// The sender's own subscriptions, optionally to one view only.
    pub async fn subscriptions(&self, actor: &str, node: Option<&str>) -> Result<Vec<Subscription>, FeedError> {
        let view = node.map(|n| self.view(actor, n, Action::Read)).transpose()?;
        let actor = actor.to_string();
        self.store
            .read(move |tx| {
                let Some(view) = view else { return Ok(tx.subscriptions_of(&actor)?) };
                tx.feed(&view.feed)?.ok_or_else(|| no_feed(&view.feed))?;
                let canonical = view.canonical();
                let mut subs = tx.subscriptions_of(&actor)?;
                subs.retain(|s| s.view == canonical);
                Ok(subs)
            })
            .await
    }
}

/// The first of a `max_items` page (read newest first by the view's time), with its
/// cursor and the cursor of the item before it in time, if any.
fn newest_of(items: Vec<Item>, cursors: Vec<Cursor>) -> Option<(Item, Cursor, Option<Cursor>)> {
    let mut newest_first = cursors.into_iter().zip(items);
    let (last, item) = newest_first.next()?;
    Some((item, last, newest_first.next().map(|(c, _)| c)))
}
