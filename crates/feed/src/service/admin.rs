//! Administration (the XMPP face offers it as XEP-0050 commands): admins only, each
//! operation asks [`crate::policy::Policy::may`] for [`Action::Administer`].

use super::{Service, no_feed};
use crate::error::FeedError;
use crate::node::valid_feed_name;
use crate::policy::Action;
use crate::ports::{FeedRow, Store, Subscription};

impl<S: Store> Service<S> {
    /// `forbidden` unless `actor` is an admin.
    pub fn check_admin(&self, actor: &str) -> Result<(), FeedError> {
        self.may(actor, Action::Administer, "")
    }

    /// Every feed with its item and subscription counts (XMPP and WebSub), by name.
    pub async fn admin_feeds(&self, actor: &str) -> Result<Vec<(FeedRow, u64)>, FeedError> {
        self.check_admin(actor)?;
        self.store
            .read(|tx| {
                let mut out = Vec::new();
                let mut after: Option<String> = None;
                loop {
                    let batch = tx.feeds(after.as_deref(), 1000)?;
                    for f in &batch {
                        out.push((f.clone(), tx.subscription_count(f.id)? + tx.hub_subscribers(f.id)?.len() as u64));
                    }
                    match batch.last() {
                        Some(last) if batch.len() == 1000 => after = Some(last.name.clone()),
                        _ => return Ok(out),
                    }
                }
            })
            .await
    }

    /// Creates a feed (open, published to by admins, until configured); false if it existed.
    pub async fn admin_create_feed(&self, actor: &str, name: &str) -> Result<bool, FeedError> {
        self.may(actor, Action::Create, name)?;
        if !valid_feed_name(name) {
            return Err(FeedError::BadRequest(format!("{name:?} is not a valid feed name")));
        }
        let name = name.to_string();
        self.store
            .write(move |tx| {
                if tx.feed(&name)?.is_some() {
                    return Ok(false);
                }
                tx.create_feed(&name)?;
                Ok(true)
            })
            .await
    }

    /// Every subscription to any view of a feed: XMPP ones, then WebSub ones (their callback
    /// URL where a JID would be, their topic as the node, `websub-ID` as the subid).
    pub async fn admin_subscribers(&self, actor: &str, feed: &str) -> Result<Vec<Subscription>, FeedError> {
        self.check_admin(actor)?;
        let feed = feed.to_string();
        self.store
            .read(move |tx| {
                let f = tx.feed(&feed)?.ok_or_else(|| no_feed(&feed))?;
                let mut out = Vec::new();
                for view in tx.subscribed_views(f.id)? {
                    out.extend(tx.subscribers(f.id, &view)?);
                }
                out.extend(tx.hub_subscribers(f.id)?.into_iter().map(|h| Subscription {
                    node: h.topic,
                    view: h.view,
                    jid: h.callback,
                    subid: format!("websub-{}", h.id),
                }));
                Ok(out)
            })
            .await
    }

    /// Removes someone's subscription to a view.
    pub async fn admin_unsubscribe(&self, actor: &str, node: &str, jid: &str) -> Result<(), FeedError> {
        self.check_admin(actor)?;
        self.remove_subscription(node, jid).await
    }
}
