//! Writing: publish (a new item or an update) and retract. The writes themselves are the
//! store-independent intents of [`crate::intents`]; this adds the checks around them.

use super::{Service, no_feed};
use crate::cursor::Cursor;
use crate::error::FeedError;
use crate::item::{Entry, Item};
use crate::node::{Filter, NodeName, OrderBy};
use crate::paging::cursor_of;
use crate::policy::Action;
use crate::ports::{Scope, Store};

/// The longest item id accepted.
pub const MAX_ITEM_ID: usize = 256;

/// A feed a publish or retract may go to, checked once by [`Service::publish_target`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    feed: String,
    /// An admin may create the feed by publishing to it (`autocreate`).
    create: bool,
}

impl Target {
    pub fn feed(&self) -> &str {
        &self.feed
    }
}

/// A publish once durable: the item as stored, and its cursor in the feed's modification
/// order (`FEED?order=modified`), where a new version is always the newest; the HTTP face
/// answers it, so a publisher can pull from there without reading the item again.
#[derive(Clone, Debug, PartialEq)]
pub struct Published {
    pub item: Item,
    pub cursor: Cursor,
}

impl<S: Store> Service<S> {
    /// The feed a publish or retract goes to, after checking the node and authorisation.
    /// Faces ask this before they look at the payload, so an unauthorised sender learns
    /// nothing about what the service accepts. An unknown feed is `item-not-found` before
    /// anything else, unless an admin may create it by publishing (`autocreate`).
    pub async fn publish_target(&self, actor: &str, node: &str) -> Result<Target, FeedError> {
        let name = NodeName::parse(node)?;
        if name.order.is_some() || !name.filter.is_empty() {
            return Err(FeedError::BadRequest("publish and retract go to the feed itself, without parameters".into()));
        }
        let create = self.policy.autocreate && self.may(actor, Action::Create, &name.feed).is_ok();
        // Configured feeds exist from start-up on; others were created by an admin's publish.
        if !self.policy.is_configured(&name.feed) && !create {
            let feed = name.feed.clone();
            if self.store.read(move |tx| Ok(tx.feed(&feed)?)).await?.is_none() {
                return Err(no_feed(&name.feed));
            }
        }
        self.may(actor, Action::Publish, &name.feed)?;
        Ok(Target { feed: name.feed, create })
    }

    /// Publishes a new item or updates an existing one; returns it and its cursor once
    /// durable.
    pub async fn publish_to(&self, target: Target, id: Option<String>, entry: Entry) -> Result<Published, FeedError> {
        let limit = self.policy.limits.max_payload_bytes;
        if entry.xml.len() > limit {
            return Err(FeedError::PayloadTooBig { size: entry.xml.len(), limit });
        }
        let id = match id {
            Some(id) => check_item_id(id)?,
            None => new_item_id(),
        };
        let (now, order) = ((self.clock)(), self.policy.feed(&target.feed).order);
        let (name, item_id) = (target.feed.clone(), id.clone());
        self.store
            .write_to(&name, &item_id, move |tx| {
                let mut feed = match tx.feed_for_update(&target.feed)? {
                    Some(f) => f,
                    // Another process may have created it since: then publish into that one.
                    None if target.create => match tx.create_feed(&target.feed) {
                        Ok(f) => f,
                        Err(e) => tx.feed_for_update(&target.feed)?.ok_or(e)?,
                    },
                    None => return Err(no_feed(&target.feed)),
                };
                let newest_before = feed.last_t;
                let item = tx.publish(&mut feed, id, entry, now, order)?;
                // Alone at its millisecond (the usual case), the cursor needs no read; else
                // the items that share it are read in the same transaction.
                let cursor = if item.modified.t > newest_before {
                    Cursor::of(item.modified.t, [item.id.as_str()])
                } else {
                    let scope = Scope { feed: feed.id, by: OrderBy::Modified, filter: &Filter::default() };
                    cursor_of(tx, scope, item.modified)?
                };
                Ok(Published { item, cursor })
            })
            .await
    }

    /// [`publish_target`](Self::publish_target), then [`publish_to`](Self::publish_to):
    /// for callers that hold a parsed entry already.
    pub async fn publish(
        &self,
        actor: &str,
        node: &str,
        id: Option<String>,
        entry: Entry,
    ) -> Result<Published, FeedError> {
        let target = self.publish_target(actor, node).await?;
        self.publish_to(target, id, entry).await
    }

    /// Retracts an item: it stays as a tombstone. Retracting a tombstone changes nothing.
    pub async fn retract(&self, actor: &str, node: &str, id: String) -> Result<(), FeedError> {
        let target = self.publish_target(actor, node).await?;
        let (now, order) = ((self.clock)(), self.policy.feed(&target.feed).order);
        let (name, item_id) = (target.feed.clone(), id.clone());
        self.store
            .write_to(&name, &item_id, move |tx| {
                let mut feed = tx.feed_for_update(&target.feed)?.ok_or_else(|| no_feed(&target.feed))?;
                tx.retract(&mut feed, &id, now, order)
            })
            .await
    }
}

fn check_item_id(id: String) -> Result<String, FeedError> {
    if id.is_empty() || id.len() > MAX_ITEM_ID || id.chars().any(char::is_control) {
        return Err(FeedError::BadRequest(format!(
            "item ids must be 1 to {MAX_ITEM_ID} bytes without control characters"
        )));
    }
    Ok(id)
}

/// A fresh item id: 128 random bits in hex.
fn new_item_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}
