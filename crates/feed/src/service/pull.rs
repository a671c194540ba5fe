//! Reading: pages of a view, a node's meta-data, the feeds an actor may see. Each request
//! reads one store snapshot.

use super::{Service, no_feed};
use crate::error::FeedError;
use crate::node::{Filter, Order, OrderBy, View};
use crate::paging::{self, Anchor, Page, PageRequest, Window, scope};
use crate::policy::{Access, Action};
use crate::ports::Store;
use crate::ports::{Range, Scope};
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
    /// XEP-0413 order-by: the time that orders the view instead of the node's own (its
    /// direction stays the node's).
    pub order_by: Option<OrderBy>,
    /// Only items at or after this time of the view's ordering, Unix ms (MAM `start`).
    pub from: Option<i64>,
    /// Only items at or before this time (MAM `end`).
    pub to: Option<i64>,
}

/// A view the policy lets its requester read, made by [`Service::readable`] only: the reads
/// that take one do not ask the policy again.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Readable(pub(super) View);

impl Readable {
    pub fn view(&self) -> &View {
        &self.0
    }

    /// The view in ascending order (what an event stream reads), as readable as this one.
    pub fn ascending(&self) -> Readable {
        Readable(View { order: Order { descending: false, ..self.0.order }, ..self.0.clone() })
    }
}

/// A node's meta-data for disco#info.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    pub title: String,
    pub description: String,
    pub count: u64,
    pub subscribers: u64,
    /// Who may read it: `open` or `whitelist`, as configured.
    pub access: Access,
    /// When the feed's first item was stamped, Unix ms: a feed is made by its first
    /// publish, and one made empty (by an admin or the configuration) has none yet.
    pub created: Option<i64>,
}

/// A feed as disco#items lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeedSummary {
    pub name: String,
    pub title: String,
}

/// What a pull asks the store for, once the request is checked.
#[derive(Debug, PartialEq, Eq)]
enum Want {
    Ids(Vec<String>),
    Page(PageRequest),
    /// A request with `max_items`: a page of the view read newest first, the shape Movim
    /// and ejabberd's SQL backend share. See [`newest_first`].
    NewestFirst(PageRequest),
}

/// The page shape of a request that carries `max_items` (XEP-0060 §6.5.7): the view read
/// newest first, so the first page is the newest `max_items` items, `<first>` the newest
/// of a page and `<last>` its oldest; `<before>` then means older and `<after>` newer.
/// That is how Movim pages a node back in time (`<before>` with the page's `<last>`) and
/// forward (`<after>` with its `<first>`); on the newest-first view these are XEP-0059's
/// `<after>` and `<before>`, so they are swapped here. Requests without `max_items` keep
/// XEP-0059's meaning on the view as named.
fn newest_first(req: PageRequest) -> Result<PageRequest, FeedError> {
    let (after, before) = match (req.start, req.before) {
        (Some(Anchor::After(_)), Some(_)) => {
            return Err(FeedError::BadRequest("with max_items, give after or before, not both".into()));
        }
        (Some(Anchor::After(p)), None) => (None, Some(Some(p))),
        (start @ (Some(Anchor::Index(_)) | None), None) => {
            return Ok(PageRequest { max: req.max, start, before: None, window: req.window });
        }
        // `<before/>` empty: the oldest page, the last of the newest-first view.
        (None, Some(None)) => (None, Some(None)),
        (None, Some(Some(p))) => (Some(Anchor::After(p)), None),
        (Some(Anchor::Index(_)), Some(_)) => {
            return Err(FeedError::BadRequest("index cannot be combined with before".into()));
        }
    };
    Ok(PageRequest { max: req.max, start: after, before, window: req.window })
}

impl<S: Store> Service<S> {
    /// Serves a pull: the page, the items named by id, or the most recent items.
    pub async fn pull(&self, actor: &str, req: PullRequest) -> Result<Page, FeedError> {
        let view = self.readable_node(actor, &req.node)?;
        self.pull_view(&view, req).await
    }

    /// [`pull`](Self::pull) of a view already checked: `req.node` is not read, `view` is
    /// what it names.
    pub async fn pull_view(&self, view: &Readable, req: PullRequest) -> Result<Page, FeedError> {
        let mut view = view.0.clone();
        if let Some(by) = req.order_by {
            view.order.by = by;
        }
        let want = self.want(req)?;
        self.store
            .read(move |tx| {
                let feed = tx.feed(&view.feed)?.ok_or_else(|| no_feed(&view.feed))?;
                match &want {
                    Want::Ids(ids) => paging::by_ids(tx, &feed, &view, ids),
                    Want::Page(req) => paging::page(tx, &feed, &view, req),
                    Want::NewestFirst(req) => {
                        let newest_first = View { order: Order { descending: true, ..view.order }, ..view.clone() };
                        paging::page(tx, &feed, &newest_first, req)
                    }
                }
            })
            .await
    }

    /// What a pull of `node` by `actor` depends on besides the request: the feed's change
    /// generation, the last modified seq it handed out. Every publish, update and
    /// retraction stamps a new one, so an answer about the feed can change only when this
    /// does; reading it costs one feed row, no item.
    pub async fn generation(&self, view: &Readable) -> Result<i64, FeedError> {
        let feed = view.0.feed.clone();
        self.store.read(move |tx| Ok(tx.feed(&feed)?.ok_or_else(|| no_feed(&feed))?.last_mseq)).await
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
        if let (Some(from), Some(to)) = (req.from, req.to)
            && from > to
        {
            return Err(FeedError::BadRequest("the start is after the end".into()));
        }
        let window = Window { from: req.from, to: req.to };
        match req.max_items {
            // RSM's `<max>` when both are given, as the page size of any other request.
            Some(n) => {
                let max = req.max.unwrap_or(n).min(n).min(limits.max_page) as usize;
                Ok(Want::NewestFirst(newest_first(PageRequest { max, start, before, window })?))
            }
            None => Ok(Want::Page(PageRequest { max: self.page_size(req.max) as usize, start, before, window })),
        }
    }

    /// Meta-data of a node for disco#info.
    pub async fn node_info(&self, actor: &str, node: &str) -> Result<NodeInfo, FeedError> {
        let view = self.view(actor, node, Action::Read)?;
        let rules = self.policy.feed(&view.feed);
        let title = rules.title.clone().unwrap_or_else(|| view.feed.clone());
        let description = rules.description.clone().unwrap_or_default();
        let access = rules.access;
        let (count, subscribers, created) = self
            .store
            .read(move |tx| {
                let feed = tx.feed(&view.feed)?.ok_or_else(|| no_feed(&view.feed))?;
                // Each view is a node of its own, so its subscribers are the view's, not the feed's.
                let subscribers = tx.subscribers(feed.id, &view.canonical())?.len() as u64;
                // The feed's first item, whatever the view shows: the node's creation.
                let all = Filter::default();
                let first = Range { limit: 1, ..Range::default() };
                let by_creation = Scope { feed: feed.id, by: OrderBy::Created, filter: &all };
                let created = tx.scan(by_creation, first)?.first().map(|i| i.created.t);
                Ok((tx.count(scope(&feed, &view))?, subscribers, created))
            })
            .await?;
        Ok(NodeInfo { title, description, count, subscribers, access, created })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Position {
        Position::parse(s).unwrap()
    }

    fn req(start: Option<Anchor>, before: Option<Option<Position>>) -> PageRequest {
        PageRequest { max: 10, start, before, window: Window::default() }
    }

    #[test]
    fn newest_first_swaps_movims_before_and_after() {
        let p = || at("id:older");
        // Older than the page's `<last>`: after it on the newest-first view.
        assert_eq!(newest_first(req(None, Some(Some(p())))), Ok(req(Some(Anchor::After(p())), None)));
        // Newer than the page's `<first>`: before it.
        assert_eq!(newest_first(req(Some(Anchor::After(p())), None)), Ok(req(None, Some(Some(p())))));
        // The first page, an index, and the oldest page keep their place.
        assert_eq!(newest_first(req(None, None)), Ok(req(None, None)));
        assert_eq!(newest_first(req(Some(Anchor::Index(3)), None)), Ok(req(Some(Anchor::Index(3)), None)));
        assert_eq!(newest_first(req(None, Some(None))), Ok(req(None, Some(None))));
        assert!(matches!(newest_first(req(Some(Anchor::After(p())), Some(Some(p())))), Err(FeedError::BadRequest(_))));
    }
}
