//! Reading: pages of a view, a node's meta-data, the feeds an actor may see. Each request
//! reads one store snapshot.

use super::{Service, no_feed};
use crate::error::FeedError;
use crate::paging::{self, Anchor, Page, PageRequest, scope};
use crate::policy::Action;
use crate::ports::Store;
use crate::position::Position;

/// An `<items/>` request (or its HTTP twin) as the face parsed it, positions still as text.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PullRequest {
    pub node: String,
    /// RSM `<max>`.
    pub max: Option<u64>,
    /// RSM `<after>`.
    pub after: Option<String>,
    /// RSM `<before>`; `Some("")` asks for the last page.
    pub before: Option<String>,
    /// RSM `<index>`.
    pub index: Option<u64>,
    /// `max_items` on `<items/>`.
    pub max_items: Option<u64>,
    /// `<item id/>` children.
    pub ids: Vec<String>,
}

/// A node's meta-data for disco#info.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    pub title: String,
    pub description: String,
    pub count: u64,
    pub subscribers: u64,
}

/// A feed as disco#items lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeedSummary {
    pub name: String,
    pub title: String,
}

/// What a pull asks the store for, once the request is checked.
enum Want {
    Ids(Vec<String>),
    MostRecent(usize),
    Page(PageRequest),
}

impl<S: Store> Service<S> {
    /// Serves a pull: the page, the items named by id, or the most recent items.
    pub async fn pull(&self, actor: &str, req: PullRequest) -> Result<Page, FeedError> {
        let view = self.view(actor, &req.node, Action::Read)?;
        let want = self.want(req)?;
        self.store
            .read(move |tx| {
                let feed = tx.feed(&view.feed)?.ok_or_else(|| no_feed(&view.feed))?;
                match &want {
                    Want::Ids(ids) => paging::by_ids(tx, &feed, &view, ids),
                    Want::MostRecent(n) => paging::most_recent(tx, &feed, &view, *n),
                    Want::Page(req) => paging::page(tx, &feed, &view, req),
                }
            })
            .await
    }

    /// What a pull of `node` by `actor` depends on besides the request: the feed's change
    /// generation, the last modified seq it handed out. Every publish, update and
    /// retraction stamps a new one, so an answer about the feed can change only when this
    /// does; reading it costs one feed row, no item. Refused as a pull would be.
    pub async fn generation(&self, actor: &str, node: &str) -> Result<i64, FeedError> {
        let view = self.view(actor, node, Action::Read)?;
        self.store.read(move |tx| Ok(tx.feed(&view.feed)?.ok_or_else(|| no_feed(&view.feed))?.last_mseq)).await
    }

    /// Checks a pull's parameters against each other and the limits.
    fn want(&self, req: PullRequest) -> Result<Want, FeedError> {
        let limits = &self.policy.limits;
        if req.ids.len() > limits.max_ids {
            return Err(FeedError::PolicyViolation(format!("at most {} item ids per request", limits.max_ids)));
        }
        if !req.ids.is_empty() {
            return Ok(Want::Ids(req.ids));
        }
        if let Some(n) = req.max_items {
            return Ok(Want::MostRecent(n.min(limits.max_page) as usize));
        }
        let parse = |s: &Option<String>| s.as_deref().map(Position::parse).transpose();
        let after = parse(&req.after)?;
        let before = match req.before.as_deref() {
            None => None,
            Some("") => Some(None),
            Some(s) => Some(Some(Position::parse(s)?)),
        };
        let start = match (req.index, after) {
            (Some(_), Some(_)) => return Err(FeedError::BadRequest("index cannot be combined with after".into())),
            (Some(_), _) if before.is_some() => {
                return Err(FeedError::BadRequest("index cannot be combined with before".into()));
            }
            (Some(i), None) => Some(Anchor::Index(i)),
            (None, Some(p)) => Some(Anchor::After(p)),
            (None, None) => None,
        };
        let max = self.page_size(req.max) as usize;
        Ok(Want::Page(PageRequest { max, start, before }))
    }

    /// Meta-data of a node for disco#info.
    pub async fn node_info(&self, actor: &str, node: &str) -> Result<NodeInfo, FeedError> {
        let view = self.view(actor, node, Action::Read)?;
        let rules = self.policy.feed(&view.feed);
        let title = rules.title.clone().unwrap_or_else(|| view.feed.clone());
        let description = rules.description.clone().unwrap_or_default();
        let (count, subscribers) = self
            .store
            .read(move |tx| {
                let feed = tx.feed(&view.feed)?.ok_or_else(|| no_feed(&view.feed))?;
                // Each view is a node of its own, so its subscribers are the view's, not the feed's.
                let subscribers = tx.subscribers(feed.id, &view.canonical())?.len() as u64;
                Ok((tx.count(scope(&feed, &view))?, subscribers))
            })
            .await?;
        Ok(NodeInfo { title, description, count, subscribers })
    }

    /// Feeds `actor` may read, by name, after `after`, at most `max`.
    pub async fn feeds(&self, actor: &str, after: Option<String>, max: usize) -> Result<Vec<FeedSummary>, FeedError> {
        let policy = self.policy.clone();
        let actor = actor.to_string();
        self.store
            .read(move |tx| {
                let mut out = Vec::new();
                let mut cursor = after;
                // Whitelist feeds the actor may not read are skipped, so read in batches until full.
                loop {
                    let batch = tx.feeds(cursor.as_deref(), 256)?;
                    let done = batch.len() < 256;
                    for f in batch {
                        cursor = Some(f.name.clone());
                        if policy.may(&actor, Action::Read, &f.name).is_ok() {
                            let title = policy.feed(&f.name).title.clone().unwrap_or_else(|| f.name.clone());
                            out.push(FeedSummary { title, name: f.name });
                            if out.len() == max {
                                return Ok(out);
                            }
                        }
                    }
                    if done {
                        return Ok(out);
                    }
                }
            })
            .await
    }
}
